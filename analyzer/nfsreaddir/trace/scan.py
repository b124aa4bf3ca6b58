"""One read of a trace.dat's ring-buffer data: every CPU's stream (:mod:`.streams`) through the
page walker (:mod:`.ringbuf`) and the decoders (:mod:`.decode`) into pieces of columns, or, where
every requested field is an integer or a ``__data_loc`` string and the compiled walk is built,
through the compiled one-pass extract (``_ringbuf.Extract``) that writes the fields straight into
the columns. CPUs are independent streams, read by parallel threads on the usable cores, and a
CPU's stream is cut into stretches where whole streams would leave threads idle."""

from __future__ import annotations

import heapq

import numpy as np

from .. import tuning
from . import ringbuf
from .arrays import Pieces, Strs
from .page import damage_text
from .raw import Damage
from .streams import drop_inflate_block


def _idle_share(sizes, nthreads):
    """The share of the read the ``nthreads`` threads would sit idle if they took the
    streams of ``sizes`` (stored bytes, a measure of the work) whole, in order, each to the
    first free thread: 0 for streams of one size on as many threads, 1/2 for one stream on
    two threads."""
    busy = [0] * nthreads
    for size in sizes:
        heapq.heapreplace(busy, busy[0] + size)
    makespan = max(busy)
    return 1 - sum(sizes) / (nthreads * makespan) if makespan else 0.0


def extractable(plan):
    """Whether :class:`_ringbuf.Extract` decodes every field of this plan: integers, and
    __data_loc / __rel_loc / tail (``char buf[]``, ftrace:print's) strings (others: fixed
    char arrays, arrays, the numpy way)."""
    return all(
        (f.loc is None and f.kind == "int")
        or (f.loc in ("data", "rel", "tail") and f.kind == "str")
        for f in plan["fields"]
    )


def _extract_columns(plan, want_pid):
    """The columns of one event for :class:`_ringbuf.Extract`: (kind, offset, size, signed,
    pid, output item size), the pid first where it is read."""
    out = []
    pf = plan["pf"]
    if want_pid and pf is not None:
        out.append((0, pf.offset, pf.size, pf.signed, True, 4))
    for f in plan["fields"]:
        if f.loc is None:
            out.append((0, f.offset, f.size, f.signed, False, 8))
        else:
            # (codes start a byte wide; the extract widens them as the dictionary grows)
            kind = {"data": 1, "rel": 2, "tail": 3}[f.loc]
            out.append((kind, f.offset, 4, False, False, 1))
    return out


class Scan:
    """The wanted events (``want``: id -> [key, format, fields, keys]) of one buffer's
    streams, read with ``walker`` and ``decoder`` (which knows whether the pid is read)."""

    def __init__(self, streams, walker, decoder, want):
        self.streams, self.walker, self.decoder, self.want = streams, walker, decoder, want
        self.layout = walker.layout
        # (cpu, Extract.screen()) of each part read, in CPU order then file order, where the
        # compiled extract read every part; else None
        self.screens = None

    def run(self, acc, lost, damage, stopped):
        """Decode the wanted events of every CPU's data into ``acc`` (pieces per block,
        in CPU order); ``stopped`` gets the CPUs whose stream is damaged.  The CPUs are
        independent streams, and so are stretches of one stream (pages, or zstd chunks):
        with several cores they are read by parallel
        threads (zstd and the compiled walk run outside the GIL), a CPU's stream cut into
        stretches so that a trace whose events are mostly on one CPU is not read by one
        thread; the result is the same as one after the other."""
        want = self.want
        plans = {eid: self.decoder.plan(w) for eid, w in want.items()}
        lut = np.zeros(self.layout.lut_size(), dtype=bool)
        for eid in want:
            if 0 <= eid < len(lut) - 1:
                lut[eid] = True
        cpus = [(cpu, off, size) for cpu, off, size in self.streams.buf.cpus if size]
        # the one-pass compiled extract, or the walk then the decoders (whole streams only)
        extract = ringbuf.compiled() and all(extractable(p) for p in plans.values())
        units = (
            self._units(cpus) if extract else [(cpu, off, size, None) for cpu, off, size in cpus]
        )
        nthreads = min(len(units), tuning.reader_threads())
        if extract:

            def read(u):
                cpu, off, size, stretch = u
                return self.extract_cpu(cpu, off, size, plans, stretch)
        else:

            def read(u):
                cpu, off, size, _ = u
                return self.scan_cpu(cpu, off, size, plans, lut)

        results = tuning.in_threads(read, units, nthreads)
        if extract:
            self.screens = [(cpu, res[4]) for (cpu, *_), res in zip(units, results)]
        for (cpu, *_), (part, lst, dmg, exc, *_) in zip(units, results):
            if cpu in stopped:
                continue
            for eid, cols in part.items():
                for k, v in cols.items():
                    acc[eid][k].extend(v)
            lost.extend(lst)
            damage.extend(dmg)
            if exc is not None:
                raise exc
            if dmg:
                stopped.add(cpu)
        del results
        drop_inflate_block()
        tuning.trim()  # the scan's temporaries: the heap goes back to the system

    def _units(self, cpus):
        """What the threads of the extract read: (cpu, offset, size, stretch) of whole
        streams (stretch None) or, where whole ones would leave threads idle, of stretches."""
        nthreads = tuning.reader_threads()
        if (
            nthreads > 1
            and _idle_share([size for *_, size in cpus], nthreads) > tuning.STRETCH_IDLE
        ):
            # stretches small enough to share the work out evenly, large enough that each
            # one's set-up does not count
            step = max(
                tuning.reader_stretch_bytes(), sum(size for *_, size in cpus) // (nthreads * 8)
            )
            return [
                (cpu, off, size, stretch)
                for cpu, off, size in cpus
                for stretch in self.streams.stretches(cpu, off, size, step)
            ]
        return [(cpu, off, size, None) for cpu, off, size in cpus]

    def scan_cpu(self, cpu, off, size, plans, lut):
        """One CPU's data through the walk and the decoders: (pieces per event, lost events,
        damage, exception or None)."""
        want = self.want
        part = {
            eid: {
                k: (Pieces() if k != "cpu" else [])
                for k in ("ts", "cpu", "pid", *("f:" + f.name for f in w[2]))
            }
            for eid, w in want.items()
        }
        lost: list[dict] = []
        damage: list[str] = []
        first_page = 0
        decode = self.decoder.decode
        try:
            for block in self.streams.blocks(cpu, off, size):
                dmg = None  # the block's damage: the walk's last word
                for res, dmg_so_far in self.walker.walk(block, lut, cpu, lost, first_page):
                    dmg = dmg_so_far
                    if res is not None and len(res[0]):
                        pos, ts, dlen, ids = res
                        for eid in want:
                            sel = np.flatnonzero(ids == eid)
                            if len(sel) == len(ids):
                                decode(block, pos, ts, dlen, cpu, plans[eid], part[eid])
                            elif len(sel):
                                decode(
                                    block, pos[sel], ts[sel], dlen[sel], cpu, plans[eid], part[eid]
                                )
                if dmg:
                    damage.append(dmg)
                    break
                first_page += len(block) // self.layout.page_size
        except Damage as d:
            damage.append(str(d))
            self._whole_records(part)
        except (IndexError, ValueError, OverflowError, MemoryError) as e:
            return self._whole_records(part), lost, damage, e
        return part, lost, damage, None

    def new_extract(self, plans):
        """A compiled extract (``_ringbuf.Extract``) of the wanted events, their columns in
        the order of ``want`` (slot k: its k-th event), decoded as ``plans`` say."""
        slots = np.full(self.layout.lut_size(), -1, np.int16)
        columns = []
        for k, eid in enumerate(self.want):
            if 0 <= eid < len(slots) - 1:
                slots[eid] = k
            columns.append(_extract_columns(plans[eid], self.decoder.want_pid))
        return ringbuf.compiled().Extract(slots, columns)

    def extract_cpu(self, cpu, off, size, plans, stretch=None):
        """:meth:`scan_cpu` in one compiled pass per block (``_ringbuf.Extract``), of
        the CPU's data or the ``stretch`` of it from :meth:`.streams.Streams.stretches`: each
        wanted record's time stamp and fields go straight into columns that grow as they
        fill, one piece per column and stretch, handed over without a copy; and, fifth, the
        screen of every record walked (``Extract.screen()``)."""
        lay = self.layout
        P = lay.page_size
        eids = list(self.want)
        ext = self.new_extract(plans)
        lost, damage = [], []
        args = (P, *lay.compiled_args())
        exc = None
        first_page = stretch[4] if stretch else 0
        try:
            for block in self.streams.blocks(cpu, off, size, stretch):
                if len(block) >= (1 << 31):
                    raise Damage(f"cpu {cpu}: a data block of {len(block)} bytes is too large")
                marks, bad, why, detail = ext.walk(block, *args)
                for _, page_ts, count in marks:
                    lost.append({"cpu": cpu, "ts": page_ts, "count": count})
                if why:
                    damage.append(damage_text(cpu, why, first_page + bad, detail, lay.limit))
                    break
                first_page += len(block) // P
        except Damage as d:
            damage.append(str(d))
        except MemoryError as e:
            exc = e
        return self.extracted(ext, eids, plans, cpu), lost, damage, exc, ext.screen()

    def extracted(self, ext, eids, plans, cpu, copy=False):
        """The pieces of each event the extract ``ext`` wrote, without a copy (the extract's
        memory handed over); ``copy``: copied out, the extract keeping its memory for the next
        block (a reader of a block at a time: its pages are not faulted in again each time)."""

        def col(k, j, dtype, n):
            if copy:
                return np.frombuffer(ext.view(k, j), dtype, count=n).copy()
            return np.frombuffer(ext.take(k, j), dtype, count=n)

        part = {}
        for k, eid in enumerate(eids):
            n = ext.rows(k)
            fields = self.want[eid][2]
            cols: dict[str, list] = {
                "ts": [],
                "cpu": [],
                "pid": [],
                **{"f:" + f.name: [] for f in fields},
            }
            part[eid] = cols
            if not n:
                continue
            cols["ts"].append(col(k, -1, np.uint64, n))
            cols["cpu"].append((cpu, n))
            j = 0
            if self.decoder.want_pid:
                if plans[eid]["pf"] is not None:
                    cols["pid"].append(col(k, 0, np.int32, n))
                    j = 1
                else:
                    cols["pid"].append(np.full(n, -1, np.int32))
            for f in fields:
                if f.kind == "str":
                    width = memoryview(ext.view(k, j)).nbytes // n  # 1, 2 or 4
                    cols["f:" + f.name].append(Strs(col(k, j, f"i{width}", n), ext.values(k, j)))
                else:
                    cols["f:" + f.name].append(col(k, j, f.dtype, n))
                j += 1
        return part

    @staticmethod
    def _whole_records(part):
        """After an error inside a decode: drop the pieces of the records that were not
        finished (every finished one has its time piece, appended last)."""
        for cols in part.values():
            k = len(cols["ts"])
            for name, lst in cols.items():
                if name not in ("ts", "cpu"):
                    del lst[k:]
            del cols["cpu"][k:]
        return part
