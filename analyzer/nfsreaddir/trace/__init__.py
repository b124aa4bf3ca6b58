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
import time

__all__ = [
    "open_trace",
    "TraceError",
    "BASE_COLUMNS",
    "field_column",
    "OnePass",
    "is_capture",
    "is_report_text",
]

from .base import BASE_COLUMNS, NotWindowed, TraceError, columns_of, field_column, one_piece
from .magic import TRACE_DAT_MAGIC, is_capture

# Spooled inputs stay open (and so readable through /proc/self/fd) for the life of the process.
_SPOOLED = []


def _progress(done, total=None, what="read"):
    """One line of progress, rewritten in place, on a terminal only (never into a pipe)."""
    if not sys.stderr.isatty():
        return
    mb = done / (1 << 20)
    of = f" of {total / (1 << 20):,.0f}" if total else ""
    sys.stderr.write(f"\rnfs-readdir: {what} {mb:,.0f}{of} MiB")
    sys.stderr.flush()


def _spool(path):
    """Copy a stream (stdin as "-", a pipe, a FIFO, <(...)) once into an unlinked temporary
    file: the readers need to read a trace more than once (the text reader scans it per pass,
    trace.dat is mapped), and a stream can be read only once. The copy is reached through
    /proc/self/fd, so nothing is left behind whatever ends the process."""
    try:
        src = sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as e:
        raise TraceError(f"cannot open trace {path!r}: {e.strerror or e}") from None
    import tempfile  # (here: a file is read where it is; only a stream is copied)

    tmp = tempfile.TemporaryFile(prefix="nfs-readdir-")
    done, last = 0, time.monotonic()
    with contextlib.nullcontext() if path == "-" else src:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            tmp.write(chunk)
            done += len(chunk)
            if time.monotonic() - last > 1:
                _progress(done, what=f"reading {'standard input' if path == '-' else path}:")
                last = time.monotonic()
    if done and sys.stderr.isatty():
        sys.stderr.write("\n")
    tmp.flush()
    _SPOOLED.append(tmp)
    return f"/proc/self/fd/{tmp.fileno()}"


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
        path = _spool(path)
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
    if not head:
        raise TraceError(
            f"{shown!r} is empty: expected a trace.dat file or the output of `trace-cmd report`"
        )
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
    raise TraceError(
        f"{shown!r} is neither a trace.dat file (no trace-cmd magic) nor "
        "`trace-cmd report` text (no line like 'comm-pid [cpu] ts: event: ...'); "
        "record with `trace-cmd record`, or give the output of `trace-cmd report [-R]`"
    )


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
