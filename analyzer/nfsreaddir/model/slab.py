"""Slab growth from the kmem trace events: which kernel object caches grew, and by how much.

Reads ``kmem:kmem_cache_alloc`` / ``kmem:kmem_cache_free`` (and ``kmem:kmalloc`` /
``kmem:kfree``, and the ``*_node`` variants, where the trace has them) and gives, per cache:
allocations, frees, net growth (objects and bytes), the objects still live at the end
(allocated in the trace and not freed: matched by ``ptr``), the peak number of such objects,
and the growth rate over the trace; the dentry cache singled out.

Which cache an event belongs to:

* the ``name`` field, where the kernel records it (6.x kernels with the slab cache name in
  ``kmem_cache_alloc`` / ``kmem_cache_free``, e.g. 6.18);
* otherwise (5.10, 6.1: no name) allocations are grouped by object size (``bytes_alloc``)
  as ``size-N``, and each free is attributed to the cache of the allocation of the same
  ``ptr`` before it;
* ``kmalloc`` has no cache name on any kernel: grouped by ``bytes_alloc`` as ``kmalloc-N``
  (the kernel's generic caches are named that way; its -cg/-rcl/-dma variants and
  page-sized allocations are counted with them).

A free with no allocation of its ``ptr`` earlier in the trace freed an object allocated
before the trace began: it counts against the cache named in the free event where there is
one, else it is reported only as a total (``frees_of_earlier_unknown``).

No per-event Python: one compiled pass (:mod:`nfsreaddir._slab`) visits the events in time
order straight from the pieces the reader decoded (one per event kind and CPU), with a table
of the objects live at that moment (which matches frees to allocations) and running counts
per cache; no copy of the columns is made.  A trace.dat is read a window of time at a time
(``trace.read_windows``), each window tallied as it comes, the live objects and the counts kept
between windows: memory is a window's columns and the live objects, not the trace's kmem
events (1,069 MiB at 50 M events when all were held). Other traces, and a trace.dat whose
windows stop (damage, times running back), are read whole (``trace.read_pieces``). Where the
compiled pass is not built, numpy does the same with whole-array work on the whole read: the
columns merged and sorted by time, a stable sort by ``ptr``, a radix sort by cache.

API (for ``nfs-readdir analyze``)::

    EVENTS                      event -> the fields used where the format has them
    summarize(trace) -> dict | None   (None: no kmem alloc/free records in the trace)

render.slab_text() writes it as text; ``nfs-readdir slab TRACE [--json] [--top N]`` prints it.
"""

from __future__ import annotations

import os

import numpy as np

from .. import events
from ..trace.base import NotWindowed
from ..trace.ringbuf import built
from ..tuning import heap_reuse
from ..units import NS
from .requires import requires_events
from .slab_sorted import tally as tally_sorted

try:
    # The compiled passes (setup.py builds them with the reader's); a C extension without a
    # stub, so mypy cannot see its attributes.
    from .. import _slab  # type: ignore[attr-defined]
except ImportError:  # (_compiled says it is not built, where it is asked for)
    _slab = None

__all__ = ["EVENTS", "summarize", "read_request", "DENTRY_OBJECT_SIZE"]


def _compiled():
    """The compiled tally's module, or None where NFSRT_READER=numpy asks for the pure Python
    readers (numpy's sorts, slab_sorted); one not built is an error saying so, as the
    trace readers' (a failed build never silently changes which tally runs)."""
    return None if os.environ.get("NFSRT_READER", "") == "numpy" else built(_slab, "_slab")


# The events and fields are the kernel knowledge's (events.py): alloc and free events, and per
# event the fields it needs (``name`` only where the kernel records it; ``ptr`` and, for
# allocations, ``bytes_alloc`` are required).
ALLOC_EVENTS, FREE_EVENTS, EVENTS = events.SLAB_ALLOC, events.SLAB_FREE, events.SLAB_EVENTS

# sizeof(struct dentry) rounded to the cache's alignment on x86_64 (5.10 to 6.18): the
# dentry cache's object size, which identifies it where events carry no cache name.
DENTRY_OBJECT_SIZE = 192
DENTRY_CACHE = "dentry"


def _fields(trace, event):
    """The fields of EVENTS[event] that the trace's format has, or None (unusable)."""
    fmt = trace.event_format(event)
    if fmt is None:
        return None
    have = set(fmt.user_fields())
    want = [f for f in EVENTS[event] if f in have]
    need = {"ptr"} | ({"bytes_alloc"} if event in ALLOC_EVENTS else set())
    return want if need <= set(want) else None


def _factorize(col):
    """(codes, list of str labels) of a string column: the trace.dat reader's codes and
    values, else (the text reader's pandas column) a categorical's or pandas' factorization."""
    if hasattr(col, "codes"):  # (pandas columns have no codes of their own)
        return col.codes, [str(v) for v in col.values]
    import pandas as pd  # the text reader's columns: pandas is loaded already

    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()
        return codes, [str(c) for c in col.cat.categories]
    codes, uniq = pd.factorize(col.to_numpy(dtype=object), use_na_sentinel=True)
    return codes, [str(u) for u in uniq]


def _array(col):
    """A numeric column as a numpy array (the text reader's are pandas Series)."""
    return col.to_numpy() if hasattr(col, "to_numpy") else col


class _Caches:
    """Global cache numbering: label -> code.  An event's cache is ``table[key]``: the key is
    the event's object size or the code of its name, the table maps keys to cache codes."""

    def __init__(self):
        self.index = {}
        self.labels = []

    def code(self, label):
        c = self.index.get(label)
        if c is None:
            c = self.index[label] = len(self.labels)
            self.labels.append(label)
        return c

    def by_name(self, col):
        """(key, table) of a name column: its codes (-1: none) and their caches."""
        codes, labels = _factorize(col)
        return codes, np.array([self.code(lb) for lb in labels], dtype=np.int32)

    def by_size(self, prefix, sizes):
        """(key, table) of caches named prefix + size for each element of ``sizes``."""
        if len(sizes) and 0 <= sizes.min() and sizes.max() < (1 << 24):
            # object sizes are small: the sizes are the key, into a direct table
            seen = np.zeros(int(sizes.max()) + 1, bool)
            seen[sizes] = True
            table = np.full(len(seen), -1, np.int32)
            for size in np.flatnonzero(seen).tolist():
                table[size] = self.code(f"{prefix}{size}")
            return sizes, table
        uniq, codes = np.unique(sizes, return_inverse=True)
        return codes.reshape(-1), np.array(
            [self.code(f"{prefix}{int(u)}") for u in uniq], dtype=np.int32
        )


def _key(key):
    """A piece's key as the compiled pass reads it: contiguous, signed (-1: no cache)."""
    if key is None:
        return None
    key = np.ascontiguousarray(key)
    return key.astype(np.int64) if key.dtype.kind == "u" else key


def _result(tally, k):
    """The counts per cache (rows of ``k``) and the totals of a compiled Tally, as
    :func:`slab_sorted.tally` gives them."""
    out = np.zeros(len(_slab.ROWS) * k, np.int64)
    scalars = tally.result(out)
    return dict(zip(_slab.ROWS, out.reshape(len(_slab.ROWS), k))), scalars


def _tally_compiled(pieces, k):
    """:func:`slab_sorted.tally` in one compiled pass in time order (nfsreaddir._slab) over
    the pieces' columns as they are."""
    tally = _slab.Tally()
    tally.feed(pieces, k)
    return _result(tally, k)


def read_request(trace):
    """What summarize() reads: {event: fields} for the events of EVENTS the trace has
    formats for (``name`` where the format has it)."""
    request = {}
    for ev in EVENTS:
        f = _fields(trace, ev)
        if f is not None:
            request[ev] = f
    return request


@requires_events(read_request)
def summarize(trace):
    """Slab growth in ``trace`` (from :func:`nfsreaddir.trace.open_trace`), as a JSON-able
    dict, or None when the trace has no kmem allocation/free records.

    Raises TraceError when the trace cannot be read (as ``trace.read`` does)."""
    request = read_request(trace)
    if not request:
        return None
    slab = _compiled()
    if slab is not None and hasattr(trace, "read_windows"):
        try:
            return _summarize_windows(trace, request)
        except NotWindowed:
            pass  # (damage among the reasons: the whole read below gives its error)
    # of the base columns only the time (the trace.dat reader can skip the others), in the
    # pieces decoded (one per CPU): the events are visited in time order here, all pieces
    # merged, so joining or sorting them first would only copy them
    read = trace.read_pieces(request, base=("ts",))
    if slab is not None:
        return _summarize(trace, request, read)
    with heap_reuse():  # (numpy's many temporaries of the same size)
        return _summarize(trace, request, read)


def _summarize_windows(trace, request):
    """summarize() on the trace read a window of time at a time (``trace.read_windows``),
    each tallied as it comes by one compiled Tally, which keeps the live objects and the
    counts between windows: memory is a window's columns and the live objects. Raises
    NotWindowed where the windows cannot give what the whole read gives."""
    tally, caches, counts = _tally_windows(trace, request)
    if not counts:
        return None
    k = len(caches.labels)
    return _summary(trace, request, counts, caches, *_result(tally, k))


def _tally_windows(trace, request):
    """(the compiled Tally, the caches, {event: count} of the events seen) of the trace fed a
    window at a time. Raises NotWindowed where the windows cannot give what the whole read
    gives, and where the caches are more than the Tally's slots can name."""
    caches = _Caches()
    tally = _slab.Tally()
    counts = dict.fromkeys(request, 0)
    for window in trace.read_windows(request, base=("ts",)):
        for ev, pieces in window.items():
            counts[ev] += sum(len(p["ts"]) for _, p in pieces)
        pieces = _pieces(window, caches)
        if len(caches.labels) > _slab.MAX_CACHES:
            raise NotWindowed(f"more than {_slab.MAX_CACHES} caches")
        tally.feed(pieces, len(caches.labels))
        del pieces, window
    return tally, caches, {ev: n for ev, n in counts.items() if n}


def live_objects(trace):
    """(live at the end, most live at once, bytes of the table that held them) of the
    compiled tally of ``trace`` read in windows, as summarize() makes it (the bench prints
    them beside the peak memory); None where the trace has no kmem events."""
    request = read_request(trace)
    return _tally_windows(trace, request)[0].objects() if request else None


def _summarize(trace, request, read):
    """summarize() on the pieces read ({event: [{column: array}]})."""
    counts = {ev: n for ev, p in read.items() if (n := sum(len(c["ts"]) for c in p))}
    if not counts:
        return None
    caches = _Caches()
    # (ranked by their place among the kind's pieces: CPU order, then file order)
    ranked = {ev: list(enumerate(p)) for ev, p in read.items()}
    read.clear()
    pieces = _pieces(ranked, caches)
    k = len(caches.labels)
    # (more caches than the compiled table's slots can name: numpy's sorts, which have no limit)
    compiled = _compiled() is not None and k <= _slab.MAX_CACHES
    tally, scalars = (_tally_compiled if compiled else tally_sorted)(pieces, k)
    del pieces
    return _summary(trace, request, counts, caches, tally, scalars)


def _summary(trace, request, counts, caches, tally, scalars):
    """The summary from the tally's counts per cache and totals."""
    failed, n_unknown, n_unpaired, name_mismatch, t0, t1 = scalars
    k = len(caches.labels)
    named = any(counts.get(ev) and "name" in request[ev] for ev in ALLOC_EVENTS)
    secs = (t1 - t0) / NS
    rows = sorted(
        (_cache_row(tally, i, caches.labels[i], t0, secs) for i in range(k)),
        key=lambda r: (-r["net_bytes"], -r["net"], r["cache"]),
    )
    tot = _total(rows, n_unknown, secs)
    info = getattr(trace, "info", {}) or {}
    lost = info.get("lost_events") or []
    lost_total = info.get("lost_total")
    return {
        "events": counts,
        "by": "name" if named else "bytes_alloc",
        "start_ts": t0,
        "end_ts": t1,
        "seconds": round(secs, 6),
        "caches": rows,
        "total": tot,
        "dentry": _dentry(rows, named),
        "failed_allocs": failed,
        "frees_of_earlier_unknown": n_unknown,
        "reallocated_without_free": n_unpaired,
        "free_name_mismatches": name_mismatch,
        "lost_events": len(lost),
        "lost_total": lost_total,
        "partial": bool(info.get("partial")),
        "notes": _notes(counts, n_unknown, n_unpaired, name_mismatch, lost, lost_total),
    }


def _pieces(read, caches):
    """The allocations first, then the frees: (alloc, ts, ptr, bytes, key, table, rank) per
    piece of ``read`` ({event: [(rank, {column: array})]}, a rank per piece: its place among
    the event's, CPU order then file order), contiguous arrays the tally walks, the event's
    cache being table[key]; the piece's rank made one among all kinds' (the object size of a
    cache is the one its last allocation in that order gives). Empties ``read``: the pieces
    hold the only reference to the columns before any is copied."""
    pieces = []
    for j, ev in enumerate(ALLOC_EVENTS):
        for r, df in read.get(ev, ()):
            size = _array(df["bytes_alloc"])
            # (sizes are far below 2**63: the unsigned column read as signed, no copy)
            size = size.view(np.int64) if size.dtype == np.uint64 else size.astype(np.int64)
            if ev in events.SLAB_KMALLOC:
                key, table = caches.by_size("kmalloc-", size)
            elif "name" in df:
                key, table = caches.by_name(df["name"])
            else:
                key, table = caches.by_size("size-", size)
            rank = (j << 32) | r
            pieces.append((True, _array(df["ts"]), _array(df["ptr"]), size, key, table, rank))
    for ev in FREE_EVENTS:
        for _, df in read.get(ev, ()):
            key, table = caches.by_name(df["name"]) if "name" in df else (None, None)
            pieces.append((False, _array(df["ts"]), _array(df["ptr"]), None, key, table, 0))
    read.clear()
    return [
        (
            a,
            np.ascontiguousarray(ts, np.int64),
            np.ascontiguousarray(ptr, np.uint64),
            None if size is None else np.ascontiguousarray(size),
            _key(key),
            table,
            rank,
        )
        for a, ts, ptr, size, key, table, rank in pieces
    ]


def _cache_row(tally, i, label, t0, secs):
    """One cache's figures from the tally's i-th entries."""
    net = int(tally["allocs"][i] - tally["frees"][i] - tally["untraced_frees"][i])
    size = int(tally["object_size"][i])
    live = int(tally["live"][i])
    peak_live = int(tally["peak_live"][i])
    return {
        "cache": label,
        "object_size": size,
        "allocs": int(tally["allocs"][i]),
        "frees": int(tally["frees"][i]),
        "untraced_frees": int(tally["untraced_frees"][i]),
        "net": net,
        "frees_of_earlier": int(tally["frees"][i] - tally["frees_matched"][i]),
        "alloc_bytes": int(tally["alloc_bytes"][i]),
        "net_bytes": net * size,
        "live": live,
        "live_bytes": live * size,
        "peak_live": peak_live,
        # (a peak above 0 is reached at an allocation, whose time is kept)
        "peak_live_s": (
            round((int(tally["peak_live_ts"][i]) - t0) / NS, 6) if peak_live > 0 else None
        ),
        "peak_net": int(tally["peak_net"][i]),
        "growth_per_s": round(net / secs, 3) if secs > 0 else None,
        "growth_bytes_per_s": round(net * size / secs, 1) if secs > 0 else None,
    }


def _total(rows, n_unknown, secs):
    """The caches summed, with the frees that named no cache (n_unknown) in the total only."""
    tot = {
        key: sum(r[key] for r in rows)
        for key in (
            "allocs",
            "frees",
            "untraced_frees",
            "net",
            "frees_of_earlier",
            "alloc_bytes",
            "net_bytes",
            "live",
            "live_bytes",
        )
    }
    tot["frees"] += n_unknown
    tot["net"] -= n_unknown
    tot["growth_per_s"] = round(tot["net"] / secs, 3) if secs > 0 else None
    tot["growth_bytes_per_s"] = round(tot["net_bytes"] / secs, 1) if secs > 0 else None
    return tot


def _dentry(rows, named):
    """The dentry cache's row, by its name where the events name caches, else by its object
    size (saying so); None where the trace shows no such cache."""
    if named:
        d = next((r for r in rows if r["cache"] == DENTRY_CACHE), None)
        return None if d is None else dict(d, identified_by="name")
    d = next((r for r in rows if r["cache"] == f"size-{DENTRY_OBJECT_SIZE}"), None)
    if d is None:
        return None
    return dict(
        d,
        identified_by=f"object size {DENTRY_OBJECT_SIZE} B (other "
        f"{DENTRY_OBJECT_SIZE}-byte caches are counted with it)",
    )


def _notes(counts, n_unknown, n_unpaired, name_mismatch, lost, lost_total):
    """What limits the figures: events not recorded, frees that cannot be placed, losses."""
    notes = []
    if not any(counts.get(ev) for ev in events.SLAB_NAMED_ALLOC):
        notes.append(
            "no kmem_cache_alloc events: only kmalloc is traced, so the dentry "
            "cache (and other named caches) cannot be seen; record with "
            + events.record_advice(None, {"slab"})
        )
    if not any(counts.get(ev) for ev in FREE_EVENTS):
        notes.append(
            "no free events: every allocation counts as growth; record "
            "kmem:kmem_cache_free and kmem:kfree too"
        )
    if n_unknown:
        notes.append(
            f"{n_unknown} frees of objects allocated before the trace name no "
            "cache (the free events have no name field): counted in the total only"
        )
    if n_unpaired:
        notes.append(
            f"{n_unpaired} objects were allocated again with no free traced in "
            "between (freed by a path with no free event: kmem_cache_free_bulk, "
            "kfree of a cache object, lost events): counted as freed then "
            "('untraced_frees')"
        )
    if name_mismatch:
        notes.append(f"{name_mismatch} frees name another cache than their allocation")
    if lost or lost_total:
        # an uncounted marker is an unknown number, never 0
        how_many = "an unknown number of" if lost_total is None else str(lost_total)
        where = f" in {len(lost)} place{'s' if len(lost) > 1 else ''}" if lost else ""
        notes.append(
            f"{how_many} events lost{where}: counts are lower bounds, and objects may look live"
        )
    return notes
