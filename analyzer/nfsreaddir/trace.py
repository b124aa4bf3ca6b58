"""Open a kernel trace and read selected events into pandas DataFrames.

Two inputs are understood:

* ``trace.dat`` files written by trace-cmd (file versions 6 and 7, uncompressed,
  zlib or zstd), decoded by :mod:`nfsreaddir.tracedat`;
* the text of ``trace-cmd report`` (default print formats) or
  ``trace-cmd report -R`` (raw ``field=value``), parsed by
  :mod:`nfsreaddir.reporttext`.

Both give the same interface::

    t = open_trace(path)
    t.event_names()                 # {"nfs:nfs_readdir_cache_fill", ...}
    t.info                          # format, cpus, clock, lost_events, lost_total,
                                    # cpu_stats, partial, ...
    frames = t.read({"nfs:nfs_invalidate_mapping_enter": ["dev", "fileid"],
                     "ftrace:print": ["buf"]})

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

import os

__all__ = ["open_trace", "TraceError", "BASE_COLUMNS", "field_column", "OnePass"]

BASE_COLUMNS = ("ts", "cpu", "pid", "comm")


def field_column(name):
    """Column name of event field ``name`` in the frames returned by ``read()``."""
    return f"field_{name}" if name in BASE_COLUMNS else name


class TraceError(Exception):
    """A trace cannot be read (or only partly).

    The message says what is wrong and what to do about it.  When some events
    could be read before the damage, ``partial`` holds the frames decoded so
    far (same shape as the return value of ``read()``), otherwise ``None``.
    """

    def __init__(self, message, partial=None):
        super().__init__(message)
        self.partial = partial


TRACE_DAT_MAGIC = b"\x17\x08\x44tracing"


def open_trace(path, instance=None):
    """Open ``path`` and return a trace object (binary or text reader).

    ``instance`` selects a trace-cmd buffer instance (``trace-cmd record -B``);
    the default ``None`` reads the top instance.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise TraceError(f"cannot open trace {path!r}: {e.strerror or e}") from None
    if not head:
        raise TraceError(f"{path!r} is empty: expected a trace.dat file or "
                         "the output of `trace-cmd report`")
    if head.startswith(TRACE_DAT_MAGIC[:3]):
        if not head.startswith(TRACE_DAT_MAGIC):
            raise TraceError(f"{path!r} starts like a trace.dat file but the magic is "
                             "damaged; re-copy the file or re-record the trace")
        from .tracedat import TraceDat
        return TraceDat(path, instance=instance)
    from .reporttext import ReportText, looks_like_report
    if looks_like_report(head):
        return ReportText(path, instance=instance)
    raise TraceError(
        f"{path!r} is neither a trace.dat file (no trace-cmd magic) nor "
        "`trace-cmd report` text (no line like 'comm-pid [cpu] ts: event: ...'); "
        "record with `trace-cmd record`, or give the output of `trace-cmd report [-R]`")


class OnePass:
    """A trace whose read() is answered from one pass over the file made up front for the
    union of what several analyses will ask (the readdir analysis, the slab analysis):
    decoding is the cost, and each pass scans every event. A request outside the union is
    read from the file as usual. Everything else is the trace's own."""

    def __init__(self, trace, wanted):
        self._trace = trace
        self._wanted = {ev: set(cols) for ev, cols in wanted.items()}
        self._frames = trace.read({ev: sorted(cols) for ev, cols in wanted.items()}) \
            if wanted else {}

    def __getattr__(self, name):
        return getattr(self._trace, name)

    def read(self, events, base=BASE_COLUMNS):
        if not all(ev in self._wanted and set(cols or ()) <= self._wanted[ev] and cols
                   is not None for ev, cols in events.items()):
            return self._trace.read(events, base=base)
        base = [c for c in BASE_COLUMNS if c in base or c == "ts"]
        return {ev: self._frames[ev][base + [field_column(c) for c in cols]]
                for ev, cols in events.items()}
