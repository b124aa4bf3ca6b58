"""Open a kernel trace and read selected events into pandas DataFrames.

Two inputs are understood:

* ``trace.dat`` files written by trace-cmd (file versions 6 and 7, uncompressed,
  zlib or zstd), decoded by :mod:`nfsreaddir.trace.tracedat`;
* the text of ``trace-cmd report`` (default print formats) or
  ``trace-cmd report -R`` (raw ``field=value``), parsed by
  :mod:`nfsreaddir.trace.text`.

Both give the same interface::

    t = open_trace(path)
    t.event_names()                 # {"nfs:nfs_readdir_cache_fill", ...}
    t.info                          # format, cpus, clock, lost_events, lost_total,
                                    # cpu_stats, partial, ...
    frames = t.read({"nfs:nfs_invalidate_mapping_enter": ["dev", "fileid"],
                     "ftrace:print": ["buf"]})

``t.read_columns(...)`` takes the same arguments and gives ``{name: {column: array}}``
without pandas (trace.dat: numpy arrays, a string column as codes and values);
``t.read_pieces(...)`` the same rows in pieces, ``{name: [{column: array}, ...]}``, neither
joined nor sorted by time (trace.dat: a piece per CPU), for a consumer that merges by time
itself.

Every frame has the columns ``ts`` (int64 ns), ``cpu``, ``pid`` (common_pid),
``comm`` and the requested fields, and its rows are sorted by ``ts`` (ties by
cpu, then by order within the cpu).  A requested field whose name is one of
those base columns (``sched_wakeup`` has ``pid`` and ``comm`` fields) comes out
as ``field_<name>`` (see :func:`field_column`).

Lost events, in ``info`` of a trace.dat (an unknown number is ``None``, never 0):

* ``lost_events``: the ring buffer's lost-events markers met by the last ``read()`` or
  ``event_counts()``, ``{"cpu", "ts", "count"}``; ``count`` is ``None`` where the page did
  not store how many (``trace-cmd report``: "[EVENTS DROPPED]" without a number);
* ``cpu_stats``: ``{cpu: {name: value}}``, the ring-buffer stats trace-cmd stored at the
  end of the recording for the instance read (``overrun``, ``commit_overrun``,
  ``dropped_events``, ``entries``, ``read_events``, ..., by name); ``{}`` when none;
* ``lost_total``: the events lost, when the trace says: the sum of ``overrun``,
  ``dropped_events`` and ``commit_overrun`` over the CPUs when the stats have them (known
  at open), else the sum of the markers' counts after a read; ``None`` otherwise.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from typing import IO

__all__ = [
    "open_trace",
    "TraceError",
    "BASE_COLUMNS",
    "field_column",
    "OnePass",
    "is_capture",
    "is_report_text",
]

from . import magic
from .base import BASE_COLUMNS, NotWindowed, TraceError, columns_of, field_column, one_piece
from .magic import TRACE_DAT_MAGIC, is_capture

# Spooled inputs stay open (and so readable through /proc/self/fd) for the life of the process.
_SPOOLED: list[IO[bytes]] = []


# How long a FIFO may wait for a program to open it for writing before it is refused: a FIFO
# that no program writes would block for ever.
FIFO_WAIT = 10
# The first bytes of a stream, read before any is copied: a stream that is none of the kinds
# read (cat /dev/zero |) is refused after them, not copied until the disk is full.
HEAD = 4096


def spool(path, progress=None):
    """Copy a stream (standard input as "-", a pipe, a FIFO, <(...)) once into an unlinked
    temporary file, returned open: the readers read a trace more than once (the text reader
    scans it per pass, trace.dat is mapped, tshark opens a capture by name), and a stream can
    be read only once. Nothing is left behind whatever ends the process. A device (a terminal,
    /dev/zero) is refused, a FIFO that no program opens for writing within FIFO_WAIT seconds
    too, and a stream whose first HEAD bytes are none of the kinds read (magic.THE_KINDS).
    progress(text or None) is told what is being read."""
    name = "standard input" if path == "-" else repr(path)
    try:
        st = os.fstat(0) if path == "-" else os.stat(path)
    except OSError as e:
        raise TraceError(f"cannot open {name}: {e.strerror or e}") from None
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        what = "a terminal" if path == "-" and sys.stdin.isatty() else "a device"
        raise TraceError(f"{name} is {what}, not a file or a stream: name a file, or pipe one in")
    if path == "-":
        src = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
        head = _head(src.read, b"")
    else:
        with _nonblocking(path, name) as (fd, first):
            head = _head(lambda n: os.read(fd, n), first)
            return _copy(head, lambda n: os.read(fd, n), name, progress)
    return _copy(head, src.read, name, progress)


@contextlib.contextmanager
def _nonblocking(path, name):
    """(descriptor, first bytes read) of a stream named by path, opened without waiting for a
    writer: a FIFO that no program writes within FIFO_WAIT seconds is refused. Left blocking
    once a writer is there, so that reading it ends at the writer's end."""
    import fcntl  # (here: only a stream is opened so)
    import select

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise TraceError(f"cannot open {name}: {e.strerror or e}") from None
    try:
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        poll.poll(FIFO_WAIT * 1000)  # until a writer writes or closes, or the time is up
        try:
            # without a writer a read gives nothing at once; with one that has not written
            # yet, EAGAIN
            first = os.read(fd, HEAD)
        except BlockingIOError:
            first = None
        if first == b"":
            raise TraceError(
                f"no program wrote to {name} within {FIFO_WAIT} s: start the program that "
                "writes it first, or give a file"
            )
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        yield fd, first or b""
    finally:
        os.close(fd)


def _head(read, first):
    """The first HEAD bytes of a stream (fewer only where it ends before), first already read."""
    head = first
    while len(head) < HEAD:
        chunk = read(HEAD - len(head))
        if not chunk:
            break
        head += chunk
    return head


def _copy(head, read, name, progress):
    """The temporary copy of a stream whose first bytes are head and the rest read(n)'s."""
    if not magic.looks_like_input(head):
        raise TraceError(magic.not_an_input(name, head))
    import tempfile  # (here: a file is read where it is; only a stream is copied)

    tmp = tempfile.TemporaryFile(prefix="nfs-readdir-")
    if progress is not None:
        progress(f"reading {name}")
    try:
        chunk = head
        while chunk:
            tmp.write(chunk)
            chunk = read(1 << 20)
        tmp.flush()
    except OSError as e:
        tmp.close()
        raise TraceError(
            f"cannot copy {name} into {tempfile.gettempdir()}: {e.strerror or e} (free space "
            "there, or set TMPDIR to a place with room, or give a file instead of a stream)"
        ) from None
    if progress is not None:
        progress(None)
    return tmp


def _is_stream(path):
    if path == "-":
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def open_trace(path, instance=None):
    """Open ``path`` and return a trace object (binary or text reader). ``path`` may be "-"
    (standard input), a pipe or a FIFO: a stream is read once, into a temporary copy.

    ``instance`` selects a trace-cmd buffer instance (``trace-cmd record -B``);
    the default ``None`` reads the top instance.
    """
    shown = path = os.fspath(path)
    if _is_stream(path):
        copy = spool(path)
        _SPOOLED.append(copy)
        path = f"/proc/self/fd/{copy.fileno()}"
    t = _open(path, instance, shown)
    t.info["path"] = shown
    return t


def is_report_text(path):
    """Whether the file at path begins like `trace-cmd report` text."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    from .text import looks_like_report  # (pandas: only where a text is looked at)

    return bool(head) and looks_like_report(head)


def _open(path, instance, shown):
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise TraceError(f"cannot open trace {shown!r}: {e.strerror or e}") from None
    if head.startswith(TRACE_DAT_MAGIC[:3]):
        if not head.startswith(TRACE_DAT_MAGIC):
            raise TraceError(
                f"{shown!r} starts like a trace.dat file but the magic is "
                "damaged; re-copy the file or re-record the trace"
            )
        from .tracedat import TraceDat

        return TraceDat(path, instance=instance)
    from .text import ReportText, looks_like_report

    if looks_like_report(head):
        return ReportText(path, instance=instance)
    raise TraceError(magic.not_an_input(repr(shown), head))


class OnePass:
    """A trace whose read() is answered from one pass over the file made up front for the
    union of what several analyses will ask (the readdir analysis, the slab analysis):
    decoding is the cost, and each pass scans every event. A request outside the union is
    read from the file as usual. Everything else is the trace's own."""

    def __init__(self, trace, wanted):
        self._trace = trace
        self._wanted = {ev: set(cols) for ev, cols in wanted.items()}
        self._frames = (
            trace.read({ev: sorted(cols) for ev, cols in wanted.items()}) if wanted else {}
        )

    def __getattr__(self, name):
        return getattr(self._trace, name)

    def read(self, events, on_damage="raise", base=BASE_COLUMNS):
        # (the pass made up front read the whole file, damage raising as it does by default)
        if not all(
            ev in self._wanted and set(cols or ()) <= self._wanted[ev] and cols is not None
            for ev, cols in events.items()
        ):
            return self._trace.read(events, on_damage=on_damage, base=base)
        base = [c for c in BASE_COLUMNS if c in base or c == "ts"]
        return {
            ev: self._frames[ev][base + [field_column(c) for c in cols]]
            for ev, cols in events.items()
        }

    def read_columns(self, events, on_damage="raise", base=BASE_COLUMNS):
        """{name: {column: Series}} of :meth:`read` (rows in time order)."""
        return columns_of(self.read(events, base=base))

    def read_pieces(self, events, on_damage="raise", base=BASE_COLUMNS):
        """:meth:`read_columns`, each event's rows as one piece (in time order)."""
        return one_piece(self.read_columns(events, base=base))

    def read_windows(self, events, base=BASE_COLUMNS):
        """None made: the pass made up front holds the events (read_pieces gives them)."""
        raise NotWindowed("the trace was read in one pass up front")
