"""One read of a trace.dat's wanted events handed out in windows of time, for a consumer that
visits them in time order and keeps its own state between windows (the slab analysis): memory
is a window's columns, not the trace's.

Each CPU's stream is walked a block of pages at a time by the compiled extract
(``_ringbuf.Extract``, started anew after each block, keeping its memory and its string
dictionaries), the block's rows copied out as pending pieces. A CPU whose last record walked has
the time h has given every event before h (a CPU's ring buffer is written in time order), so
every event before T, the least such h of the CPUs not yet at their end, has been read: a
window holds the pending rows before T, cut from each piece where its times reach T (rows of
equal times are never split between windows). The CPUs' blocks are read by parallel threads,
the next ones while the consumer works on a window.

Where the windows cannot give what one read gives (no compiled extract, a field it does not
decode, damaged data, a CPU's times that run back past a window already handed out), they stop
with :class:`NotWindowed`: the caller reads the whole trace instead (:meth:`TraceDat.read_pieces`),
whose answer and damage messages are the ones to give."""

from __future__ import annotations

import math
import threading
from collections import deque

import numpy as np

from .. import tuning
from . import ringbuf
from .arrays import Strs
from .base import NotWindowed
from .columns import ColumnBuilder
from .decode import Decoder
from .raw import Damage
from .scan import Scan, extractable
from .streams import RELEASE_ABOVE

# The pages walked per step of a CPU (a block; inflated zstd chunks into a block of this size
# per thread): about 100,000 kmem events, a window's share of each CPU. Smaller blocks make
# more windows, each with its set-up in Python; larger ones, a larger peak (the windows of the
# 9.9 M-event bench trace's kmem events, read alone: 117 MiB peak with 16 MiB blocks, 62 with
# 4 MiB, in about the same time).
WINDOW_BLOCK_BYTES = 4 << 20
# A CPU ahead of the others in time reads on while it holds fewer blocks' pieces than this (so
# that the threads keep busy), and waits beyond: what a window holds stays bounded.
AHEAD_BLOCKS = 2


class _Job:
    """A job given to a :class:`_Lane`: once done, its result or the exception it raised."""

    __slots__ = ("_call", "_running", "_value", "_error")

    def __init__(self, call):
        self._call = call
        self._running = threading.Lock()  # held until the job is done (or dropped)
        self._running.acquire()
        self._value = self._error = None

    def run(self):
        try:
            self._value = self._call()
        except BaseException as e:  # the consumer's to raise, from result()
            self._error = e
        finally:
            self._call = None
            self._running.release()

    def done(self):
        return not self._running.locked()

    def result(self):
        with self._running:
            pass
        if self._error is not None:
            raise self._error
        return self._value


class _Lane:
    """One reading thread, which runs the jobs given it one after the other (a CPU's blocks in
    order, in the thread whose inflate block they fill). A plain thread, not a
    concurrent.futures pool: that import (with logging's) was 6 ms of every analyze before
    its first block was read."""

    def __init__(self):
        self._jobs: deque = deque()
        self._ready = threading.Semaphore(0)  # one release a job, one more to stop
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="tracedat", daemon=True)
        self._thread.start()

    def submit(self, fn, *args):
        job = _Job(lambda: fn(*args))
        self._jobs.append(job)
        self._ready.release()
        return job

    def _run(self):
        while True:
            self._ready.acquire()
            if self._stop:
                return
            self._jobs.popleft().run()

    def shutdown(self):
        """Drop the jobs not begun and wait for the one running (the consumer is gone)."""
        self._stop = True
        self._ready.release()
        self._thread.join()


class _Cpu:
    """One CPU's stream, walked a block at a time by its own extract. Always advanced by the
    same thread (its lane): a compressed stream inflates into that thread's reused block."""

    def __init__(self, tdat, scan, cpu, part, off, size, plans, lane):
        self.cpu, self.part, self.lane = cpu, part, lane
        self._scan, self._plans = scan, plans
        self._convert = tdat.file.convert_ts
        lay = tdat.layout
        self._args = (lay.page_size, *lay.compiled_args())
        self._eids = list(scan.want)
        self.ext = scan.new_extract(plans)
        self._blocks = tdat.streams.blocks(cpu, off, size, block_bytes=WINDOW_BLOCK_BYTES)
        self.lost = []
        # per requested name its pieces ({column: array}) read and not yet handed out, in order
        self.pending: dict[str, list[dict]] = {
            key: [] for w in scan.want.values() for key, _ in w[3]
        }
        self.hi = -math.inf  # every event of the CPU before this time has been read
        self.done = False

    def advance(self, columns, want):
        """Walk the next block and build its pieces (in this CPU's lane, so that the work of a
        CPU is done beside the consumer's): ({name: [piece]}, the time every later event of
        the CPU is at or after), or None at the stream's end. Raises NotWindowed where the
        stream is damaged or its times run back within a piece."""
        try:
            block = next(self._blocks, None)
        except Damage as d:
            raise NotWindowed(str(d)) from None
        if block is None:
            return None
        if len(block) >= (1 << 31):
            raise NotWindowed(f"cpu {self.cpu}: a data block of {len(block)} bytes")
        marks, _, why, _ = self.ext.walk(block, *self._args)
        if why:
            raise NotWindowed(f"cpu {self.cpu}: damaged ring-buffer data")
        for _, page_ts, count in marks:
            self.lost.append({"cpu": self.cpu, "ts": page_ts, "count": count})
        part = self._scan.extracted(self.ext, self._eids, self._plans, self.cpu, copy=True)
        self.ext.restart()
        built = columns.pieces(want, part)
        for pieces in built.values():
            for p in pieces:
                ts = p["ts"]
                if len(ts) > 1 and not (ts[1:] >= ts[:-1]).all():
                    raise NotWindowed(f"cpu {self.cpu}: time stamps run backwards")
        last = self.ext.last_ts()
        return built, int(self._convert(np.array([last], np.uint64))[0])

    def add(self, got, floor):
        """Take what advance() read (None: the end) into the pending pieces. ``floor``: the
        bound of the last window handed out, which no row may be below (the block may have
        been read before that window was cut)."""
        if got is None:
            self.done = True
            return
        built, hi = got
        for pieces in built.values():
            for p in pieces:
                if len(p["ts"]) and p["ts"][0] < floor:
                    raise NotWindowed(f"cpu {self.cpu}: time stamps run back past a window")
        for key, pieces in built.items():
            self.pending[key].extend(pieces)
        self.hi = max(self.hi, hi)

    def held(self):
        """How many blocks' pieces are pending, at most."""
        return max(map(len, self.pending.values()), default=0)

    def cut(self, bound):
        """{name: [piece]} of the pending rows before ``bound`` (all: math.inf), taken out."""
        out = {}
        for key, pieces in self.pending.items():
            head, tail = [], []
            for p in pieces:
                ts = p["ts"]
                n = len(ts) if bound == math.inf else int(np.searchsorted(ts, bound, "left"))
                if n == len(ts):
                    head.append(p)
                    continue
                if n:
                    head.append({c: _rows(v, 0, n) for c, v in p.items()})
                tail.append({c: _rows(v, n, len(ts)) for c, v in p.items()})
            out[key] = head
            self.pending[key] = tail
        return out


def _rows(col, a, b):
    """Rows a to b of a column (a view)."""
    return Strs(col.codes[a:b], col.values) if isinstance(col, Strs) else col[a:b]


class Windows:
    """The windows of one read of a :class:`TraceDat` (``tdat``): ``want`` and ``empty``,
    the requested events with a format and without (``TraceDat._wanted``), ``base`` the base
    columns (``ts`` at least), ``done(lost, screens)`` told at the end what a whole read
    learns of the trace (the lost-events markers, the extracts' screens). Iterate for
    ``{name: [(part, piece)]}`` per window, ``part`` the index of the piece's CPU among the
    CPU streams, the pieces of a name in CPU order then file order (a window's rows in that
    order, sorted stably by time, are the window's share of read()'s order)."""

    def __init__(self, tdat, want, empty, base, done):
        if ringbuf.compiled() is None or tdat.file.other_damage:
            raise NotWindowed("no compiled extract, or damage outside the streams")
        self._t, self._done = tdat, done
        self._want, self._empty = want, empty
        want_pid = "pid" in base or "comm" in base
        decoder = Decoder(tdat.layout.endian, want_pid)
        self._scan = Scan(tdat.streams, tdat.walker, decoder, self._want)
        self._plans = {eid: self._scan.decoder.plan(w) for eid, w in self._want.items()}
        if not all(extractable(p) for p in self._plans.values()):
            raise NotWindowed("a field the compiled extract does not decode")
        self._columns = ColumnBuilder(tdat.file.convert_ts, tdat.file.cmdlines, base, want_pid)

    def __iter__(self):
        t = self._t
        cpus = [c for c in t.file.buf.cpus if c[2]]
        nlanes = max(1, min(len(cpus), tuning.reader_threads()))
        streams = [
            _Cpu(t, self._scan, cpu, i, off, size, self._plans, i % nlanes)
            for i, (cpu, off, size) in enumerate(cpus)
        ]
        lanes = [_Lane() for _ in range(nlanes)]
        # per stream its blocks asked of its lane and not taken yet, in order
        reads: list[deque] = [deque() for _ in streams]
        floor = -math.inf
        try:
            with tuning.reading(t.file.size > RELEASE_ABOVE):
                self._read(streams, reads, lanes)
                while True:
                    # the next window needs a block more of each stream that bounds it; the
                    # blocks the others have read already are taken too
                    low = min((s.hi for s in streams if not s.done), default=math.inf)
                    for s, q in zip(streams, reads):
                        if not s.done and s.hi <= low:
                            s.add(q.popleft().result(), floor)
                        while q and q[0].done() and not s.done:
                            s.add(q.popleft().result(), floor)
                    live = [s.hi for s in streams if not s.done]
                    bound = min(live) if live else math.inf
                    window = {s.part: s.cut(bound) for s in streams}
                    floor = bound
                    # the lanes read on while the consumer works on this window
                    self._read(streams, reads, lanes)
                    yield self._shape(window)
                    del window
                    if not live:
                        break
        finally:
            for lane in lanes:
                lane.shutdown()
        self._done(
            [ev for s in streams for ev in s.lost], [(s.cpu, s.ext.screen()) for s in streams]
        )

    def _read(self, streams, reads, lanes):
        """Ask each stream's lane for its next blocks: a stream not at its end reads on while it
        holds (pending or asked for) at most AHEAD_BLOCKS blocks, and a stream that bounds the
        next window always has one asked for. A lane reads its blocks one after the other,
        without waiting for the consumer between them."""
        low = min((s.hi for s in streams if not s.done), default=math.inf)
        for s, q in zip(streams, reads):
            while not s.done and (len(q) + s.held() <= AHEAD_BLOCKS or (not q and s.hi <= low)):
                q.append(lanes[s.lane].submit(s.advance, self._columns, self._want))

    def _shape(self, window):
        """{name: [(part, piece)]} of a window's {part: {name: [piece]}}, in CPU order then
        file order; the names the file has no format for, with no piece."""
        out: dict[str, list] = {key: [] for w in self._want.values() for key, _ in w[3]}
        for part, by in sorted(window.items()):
            for key, pieces in by.items():
                out[key].extend((part, p) for p in pieces)
        return out | {key: [] for key in self._empty}
