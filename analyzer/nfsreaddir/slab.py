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

Everything is whole-array work on the columns ``trace.read`` returns (no per-event Python):
one merge of the events by time, then two passes in time order, compiled
(:mod:`nfsreaddir._slab`): each event's previous event of the same ``ptr`` (which matches
frees to allocations), and the running counts per cache.  Where that is not built, numpy
does them with a stable sort by ``ptr`` and a radix sort by cache.

API (for ``nfs-readdir analyze``)::

    EVENTS                      event -> the fields used where the format has them
    summarize(trace) -> dict | None   (None: no kmem alloc/free records in the trace)

render.slab_text() writes it as text; ``nfs-readdir slab TRACE [--json] [--top N]`` prints it.
"""

from __future__ import annotations

import numpy as np

from . import events
from .trace.arrays import _Strs
from .tuning import heap_reuse
from .units import NS

try:
    from . import _slab        # the compiled passes (setup.py builds them with the reader's)
except ImportError:            # (the reader says once that it is not built)
    _slab = None

__all__ = ["EVENTS", "summarize", "read_request", "DENTRY_OBJECT_SIZE"]

# The events and fields are the kernel knowledge's (events.py): alloc and free events, and per
# event the fields it needs (``name`` only where the kernel records it; ``ptr`` and, for
# allocations, ``bytes_alloc`` are required).
ALLOC_EVENTS, FREE_EVENTS, EVENTS = events.SLAB_ALLOC, events.SLAB_FREE, events.SLAB_EVENTS
_REQUIRED = {"ptr", "bytes_alloc"}

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
    """Global cache numbering: label -> code."""

    def __init__(self):
        self.index = {}
        self.labels = []

    def code(self, label):
        c = self.index.get(label)
        if c is None:
            c = self.index[label] = len(self.labels)
            self.labels.append(label)
        return c

    def remap(self, codes, labels):
        """Local codes (-1: none) over ``labels`` -> global codes (-1 stays)."""
        table = np.array([self.code(lb) for lb in labels] + [-1], dtype=np.int32)
        return table[codes]             # -1 picks the last entry: -1

    def by_size(self, prefix, sizes):
        """Codes of caches named prefix + size for each element of ``sizes``."""
        if len(sizes) and 0 <= sizes.min() and sizes.max() < (1 << 24):
            # object sizes are small: a direct table instead of sorting them
            seen = np.zeros(int(sizes.max()) + 1, bool)
            seen[sizes] = True
            uniq = np.flatnonzero(seen)
            table = np.zeros(len(seen), np.int32)
            table[uniq] = np.arange(len(uniq), dtype=np.int32)
            codes = table[sizes]
        else:
            uniq, codes = np.unique(sizes, return_inverse=True)
        return self.remap(codes.reshape(-1), [f"{prefix}{int(u)}" for u in uniq])


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


def _previous(ptr, order):
    """For each element of ``ptr[order]`` (uint64; ``order`` int32), the index (int64) of the
    last element before it with the same pointer, or -1: compiled (one pass with a table of
    the pointers seen, reading ptr through order: no copy of it) where it is built, else the
    neighbours in a stable sort by pointer."""
    prev = np.empty(len(order), np.int64)
    if _slab is not None and order.dtype == np.int32:
        _slab.previous(np.ascontiguousarray(ptr, np.uint64), prev, order)
        return prev
    ptr = ptr[order]
    sp = _sort_by_ptr(ptr)
    same = ptr[sp[1:]] == ptr[sp[:-1]]
    prev[...] = -1
    prev[sp[1:][same]] = sp[:-1][same]
    return prev


def _group_max_of_running_sum(group, delta, ngroups):
    """Per group (int32, -1: none): the largest running sum of ``delta`` (int8; in the
    given order, from 0 at the group's start; at least 0) and where it was first reached
    (index into the input, or -1).  Compiled: one pass; else :func:`_running_max_sorted`."""
    if _slab is None:
        return _running_max_sorted(group, delta, ngroups)
    peak = np.zeros(ngroups, np.int64)
    at = np.full(ngroups, -1, np.int64)
    _slab.running_max(np.ascontiguousarray(group, np.int32),
                      np.ascontiguousarray(delta, np.int8), peak, at)
    return peak, at


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


def read_request(trace):
    """What summarize() reads: {event: fields} for the events of EVENTS the trace has
    formats for (``name`` where the format has it)."""
    request = {}
    for ev in EVENTS:
        f = _fields(trace, ev)
        if f is not None:
            request[ev] = f
    return request


def summarize(trace):
    """Slab growth in ``trace`` (from :func:`nfsreaddir.trace.open_trace`), as a JSON-able
    dict, or None when the trace has no kmem allocation/free records.

    Raises TraceError when the trace cannot be read (as ``trace.read`` does)."""
    request = read_request(trace)
    if not request:
        return None
    # of the base columns only the time (the trace.dat reader can skip the others), and not
    # sorted: the events are put in time order here, all kinds together, by a stable sort
    frames = trace.read_columns(request, base=("ts",), ordered=False)
    with heap_reuse():
        return _summarize(trace, request, frames)


def _summarize(trace, request, frames):
    """summarize() on the frames read."""
    counts = {ev: int(len(df["ts"])) for ev, df in frames.items() if len(df["ts"])}
    if not counts:
        return None
    caches = _Caches()
    named = any(counts.get(ev) and "name" in request[ev] for ev in ALLOC_EVENTS)

    # allocations: ts, ptr, bytes, cache code
    a_ts, a_ptr, a_bytes, a_cache = [], [], [], []
    for ev in ALLOC_EVENTS:
        df = frames.get(ev)
        if df is None or not len(df["ts"]):
            continue
        size = _array(df["bytes_alloc"])
        # (sizes are far below 2**63: the unsigned column read as signed, without a copy)
        size = size.view(np.int64) if size.dtype == np.uint64 else size.astype(np.int64)
        if ev.startswith("kmem:kmalloc"):
            code = caches.by_size("kmalloc-", size)
        elif "name" in df:
            code = caches.remap(*_factorize(df["name"]))
        else:
            code = caches.by_size("size-", size)
        a_ts.append(_array(df["ts"]))
        a_ptr.append(_array(df["ptr"]).astype(np.uint64, copy=False))
        a_bytes.append(size)
        a_cache.append(code)
    f_ts, f_ptr, f_cache = [], [], []
    for ev in FREE_EVENTS:
        df = frames.get(ev)
        if df is None or not len(df["ts"]):
            continue
        f_ts.append(_array(df["ts"]))
        f_ptr.append(_array(df["ptr"]).astype(np.uint64, copy=False))
        f_cache.append(caches.remap(*_factorize(df["name"])) if "name" in df
                       else np.full(len(df["ts"]), -1, np.int32))
    frames.clear()       # the only copy of the columns from here on is what was taken above
    cat = (lambda parts, dt: (parts[0] if len(parts) == 1 else np.concatenate(parts))
           .astype(dt, copy=False) if parts else np.zeros(0, dt))
    na = sum(len(x) for x in a_ts)
    # one column at a time, each dropped once joined: memory holds about one copy
    ts = np.concatenate(a_ts + f_ts).astype(np.int64, copy=False)
    del a_ts, f_ts
    ptr = np.concatenate(a_ptr + f_ptr).astype(np.uint64, copy=False)
    del a_ptr, f_ptr
    cache = np.concatenate(a_cache + f_cache).astype(np.int32, copy=False)
    del a_cache, f_cache
    a_bytes = cat(a_bytes, np.int64)
    k = len(caches.labels)
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
    # match each free to the allocation of its pointer just before it
    prev = _previous(ptr, order)
    del ptr
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
    n_unpaired = len(implicit_at)
    del before

    isfree = ~isalloc
    unknown_free = isfree & (cache_t < 0)
    cnt = lambda mask: np.bincount(cache_t[mask & (cache_t >= 0)], minlength=k)[:k]  # noqa
    allocs = cnt(isalloc)
    frees = cnt(isfree)
    frees_matched = cnt(isfree & is_matched_t)
    live_n = cnt(is_live_t)
    implicit = np.bincount(implicit_cache[implicit_cache >= 0], minlength=k)[:k]
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
    peak_live, peak_live_at = _group_max_of_running_sum(group, d_live, k)
    peak_net, _ = _group_max_of_running_sum(group, d_net, k)
    if len(implicit_at):
        # a peak is reached at an allocation: back from the merged order to the time index
        got = peak_live_at >= 0
        peak_live_at[got] -= np.searchsorted(shifted, peak_live_at[got], side="left")
    peak_live_ts = np.zeros(k, np.int64)
    got = peak_live_at >= 0
    peak_live_ts[got] = ts_t[peak_live_at[got]]
    del d_live, d_net, ts_t, group
    secs = (t1 - t0) / NS

    def row(i):
        net = int(allocs[i] - frees[i] - implicit[i])
        size = int(obj[i])
        at = int(peak_live_at[i])
        return {
            "cache": caches.labels[i], "object_size": size,
            "allocs": int(allocs[i]), "frees": int(frees[i]),
            "untraced_frees": int(implicit[i]), "net": net,
            "frees_of_earlier": int(frees[i] - frees_matched[i]),
            "alloc_bytes": int(alloc_bytes[i]), "net_bytes": net * size,
            "live": int(live_n[i]), "live_bytes": int(live_n[i]) * size,
            "peak_live": int(peak_live[i]),
            "peak_live_s": round((int(peak_live_ts[i]) - t0) / NS, 6) if at >= 0 else None,
            "peak_net": int(peak_net[i]),
            "growth_per_s": round(net / secs, 3) if secs > 0 else None,
            "growth_bytes_per_s": round(net * size / secs, 1) if secs > 0 else None,
        }
    rows = sorted((row(i) for i in range(k)),
                  key=lambda r: (-r["net_bytes"], -r["net"], r["cache"]))
    tot = {key: sum(r[key] for r in rows) for key in
           ("allocs", "frees", "untraced_frees", "net", "frees_of_earlier", "alloc_bytes",
            "net_bytes", "live", "live_bytes")}
    n_unknown = int(np.count_nonzero(unknown_free))
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
