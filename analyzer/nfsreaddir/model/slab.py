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
order straight from the pieces ``trace.read_pieces`` returns (one per event kind and CPU),
with a table of the objects live at that moment (which matches frees to allocations) and
running counts per cache; no copy of the columns is made.  Where it is not built, numpy does the same with whole-array
work: the columns merged and sorted by time, a stable sort by ``ptr``, a radix sort by cache.

API (for ``nfs-readdir analyze``)::

    EVENTS                      event -> the fields used where the format has them
    summarize(trace) -> dict | None   (None: no kmem alloc/free records in the trace)

render.slab_text() writes it as text; ``nfs-readdir slab TRACE [--json] [--top N]`` prints it.
"""

from __future__ import annotations

import numpy as np

from .. import events
from .requires import requires_events
from ..trace.arrays import _Strs
from ..tuning import heap_reuse
from ..units import NS

try:
    from .. import _slab        # the compiled passes (setup.py builds them with the reader's)
except ImportError:            # (the reader says once that it is not built)
    _slab = None

__all__ = ["EVENTS", "summarize", "read_request", "DENTRY_OBJECT_SIZE"]

# The events and fields are the kernel knowledge's (events.py): alloc and free events, and per
# event the fields it needs (``name`` only where the kernel records it; ``ptr`` and, for
# allocations, ``bytes_alloc`` are required).
ALLOC_EVENTS, FREE_EVENTS, EVENTS = events.SLAB_ALLOC, events.SLAB_FREE, events.SLAB_EVENTS

# sizeof(struct dentry) rounded to the cache's alignment on x86_64 (5.10 to 6.18): the
# dentry cache's object size, which identifies it where events carry no cache name.
DENTRY_OBJECT_SIZE = 192
DENTRY_CACHE = "dentry"

# ZERO_SIZE_PTR is 16: pointers at or below it are no objects (kfree(NULL), failed allocs)
_NO_OBJECT = 16


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
    if isinstance(col, _Strs):
        return col.codes, [str(v) for v in col.values]
    import pandas as pd         # the text reader's columns: pandas is loaded already
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
        return codes.reshape(-1), np.array([self.code(f"{prefix}{int(u)}") for u in uniq],
                                           dtype=np.int32)


def _codes(piece):
    """The cache code (int32, -1: none) of each event of a piece."""
    _, ts, _, _, key, table = piece
    if key is None:
        return np.full(len(ts), -1, np.int32)
    return np.append(table, np.int32(-1))[key]      # a key of -1 picks the last entry: -1


def _sort_by_ptr(ptr):
    """Permutation that sorts ``ptr`` (uint64) stably: equal pointers stay in time order.

    Kernel object pointers span at most the direct map (tens of GiB, 8-byte aligned), so
    (pointer - lowest) and the rank fit in one int64 key: one unstable (SIMD) sort of keys
    instead of a stable argsort of pointers.  Falls back to that argsort otherwise."""
    n = len(ptr)
    if n == 0:
        return np.zeros(0, np.int64)
    lo = ptr.min()
    shift = 3 if not (ptr & np.uint64(7)).any() else 0
    span = int(ptr.max() - lo) >> shift
    rbits = max(1, (n - 1).bit_length())
    if span.bit_length() + rbits > 62:
        return np.argsort(ptr, kind="stable")
    key = ((ptr - lo) >> np.uint64(shift)).astype(np.int64)
    key <<= rbits
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    key &= (1 << rbits) - 1
    return key


def _sort_times(ts):
    """Sort ``ts`` (int64, an array of its own) stably in place; returns the permutation
    (int32 where that holds it).

    Like :func:`_sort_by_ptr`: the time since the first event and the rank in one int64 key,
    made in ``ts`` itself and sorted in place, so the only memory added is the permutation
    (a stable argsort needs an int64 index and its merge buffer beside the times). Falls
    back to that argsort where the key would not fit (long traces of many events)."""
    n = len(ts)
    idt = np.int32 if n < (1 << 31) else np.int64
    if n == 0:
        return np.zeros(0, idt)
    lo = int(ts.min())
    rbits = max(1, (n - 1).bit_length())
    if (int(ts.max()) - lo).bit_length() + rbits > 62:
        order = np.argsort(ts, kind="stable")
        ts.sort(kind="stable")
        return order.astype(idt, copy=False)
    step = 1 << 20                      # in slices: no temporary of the whole size
    for i in range(0, n, step):
        c = ts[i:i + step]
        c -= lo
        c <<= rbits
        c |= np.arange(i, i + len(c), dtype=np.int64)
    # (keys are unique, so any sort is stable; "stable" is timsort, which merges the sorted
    # runs the CPUs and events give: 3 times faster here than quicksort, for a buffer of
    # half the keys at most)
    ts.sort(kind="stable")
    order = np.empty(n, idt)
    for i in range(0, n, step):
        c = ts[i:i + step]
        order[i:i + len(c)] = c & ((1 << rbits) - 1)
        c >>= rbits
        c += lo
    return order


def _running_max_sorted(group, delta, ngroups):
    """Per group: the largest running sum of ``delta`` (in the given order, from 0 at the
    group's start; at least 0) and where it was first reached (index into the input, or
    -1).  One radix sort by group, one cumulative sum; memory about 15 bytes an entry."""
    peak = np.zeros(ngroups, np.int64)
    at = np.full(ngroups, -1, np.int64)
    n = len(group)
    if not n:
        return peak, at
    g = group.astype(np.int16 if ngroups < (1 << 15) else np.int32)
    order = np.argsort(g, kind="stable")            # radix sort for int16
    cs = np.cumsum(delta[order], dtype=np.int32 if n < (1 << 31) else np.int64)
    gs = g[order]
    del g
    starts = np.flatnonzero(gs[1:] != gs[:-1]) + 1
    ids = gs[np.r_[0, starts]].astype(np.int64).tolist()
    del gs
    bounds = [0] + starts.tolist() + [n]
    for i, gid in enumerate(ids):
        lo, hi = bounds[i], bounds[i + 1]
        if gid < 0:
            continue
        seg = cs[lo:hi]
        j = int(np.argmax(seg))
        top = int(seg[j]) - (int(cs[lo - 1]) if lo else 0)
        if top > 0:
            peak[gid] = top
            at[gid] = int(order[lo + j])
    return peak, at


def _key(key):
    """A piece's key as the compiled pass reads it: contiguous, signed (-1: no cache)."""
    if key is None:
        return None
    key = np.ascontiguousarray(key)
    return key.astype(np.int64) if key.dtype.kind == "u" else key


def _tally_compiled(pieces, k):
    """The counts per cache and the totals of :func:`_tally_sorted`, in one compiled pass
    in time order (nfsreaddir._slab) over the pieces' columns as they are."""
    out = np.zeros(len(_slab.ROWS) * k, np.int64)
    scalars = _slab.tally(pieces, k, out)
    return dict(zip(_slab.ROWS, out.reshape(len(_slab.ROWS), k))), scalars


def _tally_sorted(pieces, k):
    """Per cache (arrays of ``k``): allocs, frees, frees_matched, live, untraced_frees,
    peak_live (and peak_live_ts, its first time), peak_net, alloc_bytes, object_size; and
    (failed allocations, frees of no known cache, allocations proving an untraced free,
    frees naming another cache than their allocation, first time, last time).

    With numpy: the events merged and put in time order by a stable sort (allocations first
    at equal times), each event's previous one of the same ``ptr`` found by a stable sort by
    pointer, the running counts by a radix sort by cache.  The fallback where the compiled
    pass is not built, and its oracle."""
    na = sum(len(p[1]) for p in pieces if p[0])
    # one column at a time, each dropped once joined: memory holds about one copy
    ts = np.concatenate([p[1] for p in pieces])       # (a copy: sorted in place below)
    ptr = np.concatenate([p[2] for p in pieces])
    cache = np.concatenate([_codes(p) for p in pieces])
    a_bytes = np.concatenate([p[3] for p in pieces if p[0]] or [np.zeros(0, np.int64)])
    # object size per cache (constant within a cache: bytes_alloc is s->size)
    obj = np.zeros(k, np.int64)
    a_codes = cache[:na]
    okc = a_codes >= 0
    if not okc.all():               # (no copies where every allocation has a cache)
        a_codes, a_bytes = a_codes[okc], a_bytes[okc]
    obj[a_codes] = a_bytes
    # in slices: bincount makes float64 weights and intp codes of what it is given
    alloc_bytes = np.zeros(k)
    for i in range(0, len(a_codes), 1 << 20):
        alloc_bytes += np.bincount(a_codes[i:i + (1 << 20)], weights=a_bytes[i:i + (1 << 20)],
                                   minlength=k)[:k]
    del a_codes, okc, a_bytes
    n = len(ts)
    t0, t1 = (int(ts.min()), int(ts.max())) if n else (0, 0)
    # events without an object: failed allocations, kfree(NULL)
    real = ptr > np.uint64(_NO_OBJECT)
    failed = int(np.count_nonzero(~real[:na]))
    # in time order (allocation before free at equal times: the allocations come first and
    # the sort is stable); ``order`` maps back to the event. Each column is needed only in
    # time order from here on: the times are sorted in place
    order = _sort_times(ts)
    if failed or not real.all():        # then without the events that have no object
        sel = real[order]
        order = order[sel]
        ts = ts[sel]
        del sel
    del real
    ts_t = ts
    del ts
    # match each free to the allocation of its pointer just before it: for each event, the
    # index of the last event before it with the same pointer (-1: none), from the
    # neighbours in a stable sort by pointer
    ptr = ptr[order]
    sp = _sort_by_ptr(ptr)
    same = ptr[sp[1:]] == ptr[sp[:-1]]
    del ptr
    prev = np.full(len(order), -1, np.int64)
    prev[sp[1:][same]] = sp[:-1][same]
    del sp, same
    isalloc = order < na
    cache_t = cache[order]
    del order, cache
    # (no index arrays made from prev: a prev of -1 picks the last event, which is no
    # event's previous, so it is masked or cleared)
    after_alloc = isalloc[prev]                   # the event before (same ptr) is an alloc
    after_alloc &= prev >= 0
    has_next = np.zeros(len(prev), bool)          # another event of the ptr follows
    has_next[prev] = True
    if len(has_next):
        has_next[-1] = False
    is_matched_t = ~isalloc & after_alloc         # frees of objects allocated in the trace
    is_live_t = isalloc & ~has_next               # allocations never freed
    del has_next
    # allocated again with no free between, which proves a free, untraced, before the second
    # allocation (kmem_cache_free_bulk, RCU frees and kfree of cache objects have no
    # kmem_cache_free event; lost events): at the second allocation, for the first one's cache
    implicit_at = np.flatnonzero(isalloc & after_alloc)
    del after_alloc
    before = cache_t[prev]        # the cache of each event's previous one (junk where none)
    del prev
    implicit_cache = before[implicit_at]
    name_mismatch = int(np.count_nonzero(is_matched_t & (cache_t >= 0) & (cache_t != before)))
    np.copyto(cache_t, before, where=is_matched_t)  # a matched free counts for the alloc's cache
    del before

    isfree = ~isalloc
    n_unknown = int(np.count_nonzero(isfree & (cache_t < 0)))
    cnt = lambda mask: np.bincount(cache_t[mask & (cache_t >= 0)], minlength=k)[:k]  # noqa
    tally = {"allocs": cnt(isalloc), "frees": cnt(isfree),
             "frees_matched": cnt(isfree & is_matched_t), "live": cnt(is_live_t),
             "untraced_frees": np.bincount(implicit_cache[implicit_cache >= 0],
                                           minlength=k)[:k],
             "alloc_bytes": alloc_bytes.astype(np.int64), "object_size": obj}
    # running counts per cache, in time order: objects allocated in the trace and not
    # freed yet (by ptr; an implicit free just before the allocation that proves it), and
    # allocations minus frees
    d_live = isalloc.astype(np.int8)
    d_live -= isfree & is_matched_t
    d_net = isalloc.astype(np.int8)
    d_net -= isfree & (cache_t >= 0)
    group = cache_t
    if len(implicit_at):
        # the implicit frees go in just before the allocation that proves them (implicit_at
        # is in time order)
        group = np.insert(cache_t, implicit_at, implicit_cache)
        d_live = np.insert(d_live, implicit_at, -1)
        d_net = np.insert(d_net, implicit_at, -1)
        shifted = implicit_at + np.arange(len(implicit_at))  # their places in the merged order
    tally["peak_live"], peak_live_at = _running_max_sorted(group, d_live, k)
    tally["peak_net"], _ = _running_max_sorted(group, d_net, k)
    if len(implicit_at):
        # a peak is reached at an allocation: back from the merged order to the time index
        got = peak_live_at >= 0
        peak_live_at[got] -= np.searchsorted(shifted, peak_live_at[got], side="left")
    tally["peak_live_ts"] = np.zeros(k, np.int64)
    got = peak_live_at >= 0
    tally["peak_live_ts"][got] = ts_t[peak_live_at[got]]
    return tally, (failed, n_unknown, len(implicit_at), name_mismatch, t0, t1)


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
    # of the base columns only the time (the trace.dat reader can skip the others), in the
    # pieces decoded (one per CPU): the events are visited in time order here, all pieces
    # merged, so joining or sorting them first would only copy them
    pieces = trace.read_pieces(request, base=("ts",))
    if _slab is not None:
        return _summarize(trace, request, pieces)
    with heap_reuse():          # (numpy's many temporaries of the same size)
        return _summarize(trace, request, pieces)


def _summarize(trace, request, read):
    """summarize() on the pieces read ({event: [{column: array}]})."""
    counts = {ev: n for ev, p in read.items() if (n := sum(len(c["ts"]) for c in p))}
    if not counts:
        return None
    caches = _Caches()
    named = any(counts.get(ev) and "name" in request[ev] for ev in ALLOC_EVENTS)

    # the allocations first: (alloc, ts, ptr, bytes, key, table) per piece, the event's
    # cache being table[key]
    pieces = []
    for ev in ALLOC_EVENTS:
        for df in read.get(ev, ()):
            size = _array(df["bytes_alloc"])
            # (sizes are far below 2**63: the unsigned column read as signed, no copy)
            size = size.view(np.int64) if size.dtype == np.uint64 else size.astype(np.int64)
            if ev.startswith("kmem:kmalloc"):
                key, table = caches.by_size("kmalloc-", size)
            elif "name" in df:
                key, table = caches.by_name(df["name"])
            else:
                key, table = caches.by_size("size-", size)
            pieces.append((True, _array(df["ts"]), _array(df["ptr"]), size, key, table))
    for ev in FREE_EVENTS:
        for df in read.get(ev, ()):
            key, table = caches.by_name(df["name"]) if "name" in df else (None, None)
            pieces.append((False, _array(df["ts"]), _array(df["ptr"]), None, key, table))
    read.clear()         # the only reference to the columns from here on is the pieces'
    pieces = [(a, np.ascontiguousarray(ts, np.int64), np.ascontiguousarray(ptr, np.uint64),
               None if size is None else np.ascontiguousarray(size), _key(key), table)
              for a, ts, ptr, size, key, table in pieces]
    k = len(caches.labels)
    tally, (failed, n_unknown, n_unpaired, name_mismatch, t0, t1) = (
        _tally_compiled if _slab is not None else _tally_sorted)(pieces, k)
    del pieces
    secs = (t1 - t0) / NS

    def row(i):
        net = int(tally["allocs"][i] - tally["frees"][i] - tally["untraced_frees"][i])
        size = int(tally["object_size"][i])
        live = int(tally["live"][i])
        peak_live = int(tally["peak_live"][i])
        return {
            "cache": caches.labels[i], "object_size": size,
            "allocs": int(tally["allocs"][i]), "frees": int(tally["frees"][i]),
            "untraced_frees": int(tally["untraced_frees"][i]), "net": net,
            "frees_of_earlier": int(tally["frees"][i] - tally["frees_matched"][i]),
            "alloc_bytes": int(tally["alloc_bytes"][i]), "net_bytes": net * size,
            "live": live, "live_bytes": live * size,
            "peak_live": peak_live,
            # (a peak above 0 is reached at an allocation, whose time is kept)
            "peak_live_s": (round((int(tally["peak_live_ts"][i]) - t0) / NS, 6)
                            if peak_live > 0 else None),
            "peak_net": int(tally["peak_net"][i]),
            "growth_per_s": round(net / secs, 3) if secs > 0 else None,
            "growth_bytes_per_s": round(net * size / secs, 1) if secs > 0 else None,
        }
    rows = sorted((row(i) for i in range(k)),
                  key=lambda r: (-r["net_bytes"], -r["net"], r["cache"]))
    tot = {key: sum(r[key] for r in rows) for key in
           ("allocs", "frees", "untraced_frees", "net", "frees_of_earlier", "alloc_bytes",
            "net_bytes", "live", "live_bytes")}
    tot["frees"] += n_unknown
    tot["net"] -= n_unknown
    tot["growth_per_s"] = round(tot["net"] / secs, 3) if secs > 0 else None
    tot["growth_bytes_per_s"] = round(tot["net_bytes"] / secs, 1) if secs > 0 else None

    dentry = None
    if named:
        d = next((r for r in rows if r["cache"] == DENTRY_CACHE), None)
        if d is not None:
            dentry = dict(d, identified_by="name")
    else:
        d = next((r for r in rows if r["cache"] == f"size-{DENTRY_OBJECT_SIZE}"), None)
        if d is not None:
            dentry = dict(d, identified_by=f"object size {DENTRY_OBJECT_SIZE} B (other "
                          f"{DENTRY_OBJECT_SIZE}-byte caches are counted with it)")
    notes = []
    if not any(counts.get(ev) for ev in ("kmem:kmem_cache_alloc", "kmem:kmem_cache_alloc_node")):
        notes.append("no kmem_cache_alloc events: only kmalloc is traced, so the dentry "
                     "cache (and other named caches) cannot be seen; record with "
                     + events.record_advice(None, {"slab"}))
    if not any(counts.get(ev) for ev in FREE_EVENTS):
        notes.append("no free events: every allocation counts as growth; record "
                     "kmem:kmem_cache_free and kmem:kfree too")
    if n_unknown:
        notes.append(f"{n_unknown} frees of objects allocated before the trace name no "
                     "cache (the free events have no name field): counted in the total only")
    if n_unpaired:
        notes.append(f"{n_unpaired} objects were allocated again with no free traced in "
                     "between (freed by a path with no free event: kmem_cache_free_bulk, "
                     "kfree of a cache object, lost events): counted as freed then "
                     "('untraced_frees')")
    if name_mismatch:
        notes.append(f"{name_mismatch} frees name another cache than their allocation")
    info = getattr(trace, "info", {}) or {}
    lost = info.get("lost_events") or []
    lost_total = info.get("lost_total")
    if lost or lost_total:
        # an uncounted marker is an unknown number, never 0
        how_many = "an unknown number of" if lost_total is None else str(lost_total)
        where = f" in {len(lost)} place{'s' if len(lost) > 1 else ''}" if lost else ""
        notes.append(f"{how_many} events lost{where}: counts are lower bounds, and objects "
                     "may look live")
    return {
        "events": counts,
        "by": "name" if named else "bytes_alloc",
        "start_ts": t0, "end_ts": t1, "seconds": round(secs, 6),
        "caches": rows,
        "total": tot,
        "dentry": dentry,
        "failed_allocs": failed,
        "frees_of_earlier_unknown": n_unknown,
        "reallocated_without_free": n_unpaired,
        "free_name_mismatches": name_mismatch,
        "lost_events": len(lost),
        "lost_total": lost_total,
        "partial": bool(info.get("partial")),
        "notes": notes,
    }
