"""The slab analysis's tally in numpy: the fallback of the compiled passes (nfsreaddir._slab) and
their oracle in the tests. Sorting does what the compiled pass does in one walk in time order:
frees matched to their allocations by pointer, live objects and their peaks per cache."""

import numpy as np

# ZERO_SIZE_PTR is 16: pointers at or below it are no objects (kfree(NULL), failed allocs)
NO_OBJECT = 16


def cache_codes(piece):
    """The cache code (int32, -1: none) of each event of a piece."""
    ts, key, table = piece[1], piece[4], piece[5]
    if key is None:
        return np.full(len(ts), -1, np.int32)
    return np.append(table, np.int32(-1))[key]  # a key of -1 picks the last entry: -1


def sort_by_ptr(ptr):
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


def sort_times(ts):
    """Sort ``ts`` (int64, an array of its own) stably in place; returns the permutation
    (int32 where that holds it).

    Like :func:`sort_by_ptr`: the time since the first event and the rank in one int64 key,
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
    step = 1 << 20  # in slices: no temporary of the whole size
    for i in range(0, n, step):
        c = ts[i : i + step]
        c -= lo
        c <<= rbits
        c |= np.arange(i, i + len(c), dtype=np.int64)
    # (keys are unique, so any sort is stable; "stable" is timsort, which merges the sorted
    # runs the CPUs and events give: 3 times faster here than quicksort, for a buffer of
    # half the keys at most)
    ts.sort(kind="stable")
    order = np.empty(n, idt)
    for i in range(0, n, step):
        c = ts[i : i + step]
        order[i : i + len(c)] = c & ((1 << rbits) - 1)
        c >>= rbits
        c += lo
    return order


def running_max_sorted(group, delta, ngroups):
    """Per group: the largest running sum of ``delta`` (in the given order, from 0 at the
    group's start; at least 0) and where it was first reached (index into the input, or
    -1).  One radix sort by group, one cumulative sum; memory about 15 bytes an entry."""
    peak = np.zeros(ngroups, np.int64)
    at = np.full(ngroups, -1, np.int64)
    n = len(group)
    if not n:
        return peak, at
    g = group.astype(np.int16 if ngroups < (1 << 15) else np.int32)
    order = np.argsort(g, kind="stable")  # radix sort for int16
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


def tally(pieces, k):
    """Per cache (arrays of ``k``): allocs, frees, frees_matched, live, untraced_frees,
    peak_live (and peak_live_ts, its first time), peak_net, alloc_bytes, object_size; and
    (failed allocations, frees of no known cache, allocations proving an untraced free,
    frees naming another cache than their allocation, first time, last time).

    With numpy: the events merged and put in time order by a stable sort (allocations first
    at equal times), each event's previous one of the same ``ptr`` found by a stable sort by
    pointer, the running counts by a radix sort by cache.  The fallback where the compiled
    pass is not built, and its oracle."""
    na = sum(len(p[1]) for p in pieces if p[0])
    # One column at a time, each dropped once joined or replaced, so that memory holds about
    # one copy of each. The steps take the columns they replace out of `cols` (pop): their
    # local name is then the only reference, and `del` frees the column; a variable of tally's
    # would keep the old copy alive beside the new one until tally returns.
    cols = {
        "ts": np.concatenate([p[1] for p in pieces]),  # (a copy: sorted in place below)
        "ptr": np.concatenate([p[2] for p in pieces]),
        "cache": np.concatenate([cache_codes(p) for p in pieces]),
    }
    obj, alloc_bytes = _allocated_bytes(cols["cache"][:na], pieces, k)
    n = len(cols["ts"])
    t0, t1 = (int(cols["ts"].min()), int(cols["ts"].max())) if n else (0, 0)
    failed = _put_in_time_order(cols, na)
    isalloc = _match_frees(cols, na)
    is_matched_t, is_live_t, implicit_at, implicit_cache, name_mismatch = _classify(cols, isalloc)
    cache_t = cols["cache"]
    isfree = ~isalloc
    n_unknown = int(np.count_nonzero(isfree & (cache_t < 0)))
    cnt = lambda mask: np.bincount(cache_t[mask & (cache_t >= 0)], minlength=k)[:k]  # noqa
    tally = {
        "allocs": cnt(isalloc),
        "frees": cnt(isfree),
        "frees_matched": cnt(isfree & is_matched_t),
        "live": cnt(is_live_t),
        "untraced_frees": np.bincount(implicit_cache[implicit_cache >= 0], minlength=k)[:k],
        "alloc_bytes": alloc_bytes.astype(np.int64),
        "object_size": obj,
    }
    tally["peak_live"], tally["peak_net"], tally["peak_live_ts"] = _peaks(
        cols, isalloc, isfree, is_matched_t, implicit_at, implicit_cache, k
    )
    return tally, (failed, n_unknown, len(implicit_at), name_mismatch, t0, t1)


def _allocated_bytes(a_codes, pieces, k):
    """Per cache: its object size (constant within a cache: bytes_alloc is s->size) and the
    bytes allocated; a_codes is the cache code of each allocation."""
    a_bytes = np.concatenate([p[3] for p in pieces if p[0]] or [np.zeros(0, np.int64)])
    obj = np.zeros(k, np.int64)
    okc = a_codes >= 0
    if not okc.all():  # (no copies where every allocation has a cache)
        a_codes, a_bytes = a_codes[okc], a_bytes[okc]
    obj[a_codes] = a_bytes
    # in slices: bincount makes float64 weights and intp codes of what it is given
    alloc_bytes = np.zeros(k)
    for i in range(0, len(a_codes), 1 << 20):
        alloc_bytes += np.bincount(
            a_codes[i : i + (1 << 20)], weights=a_bytes[i : i + (1 << 20)], minlength=k
        )[:k]
    return obj, alloc_bytes


def _put_in_time_order(cols, na):
    """Sorts cols' times in place, without the events that have no object (failed
    allocations, kfree(NULL)); adds "order", which maps each back to its event. Returns the
    number of failed allocations."""
    ts, ptr = cols.pop("ts"), cols["ptr"]
    real = ptr > np.uint64(NO_OBJECT)
    failed = int(np.count_nonzero(~real[:na]))
    # in time order (allocation before free at equal times: the allocations come first and
    # the sort is stable); ``order`` maps back to the event. Each column is needed only in
    # time order from here on: the times are sorted in place
    order = sort_times(ts)
    if failed or not real.all():  # then without the events that have no object
        sel = real[order]
        order = order[sel]
        ts = ts[sel]
        del sel
    cols["ts"], cols["order"] = ts, order
    return failed


def _match_frees(cols, na):
    """Puts in cols "prev": for each event (in time order), the index of the last event before
    it with the same pointer (-1: none), from the neighbours in a stable sort by pointer, so
    that each free meets the allocation of its pointer just before it; and "cache" in time
    order. Returns which events are allocations."""
    order = cols.pop("order")
    ptr = cols.pop("ptr")[order]
    sp = sort_by_ptr(ptr)
    same = ptr[sp[1:]] == ptr[sp[:-1]]
    del ptr
    prev = np.full(len(order), -1, np.int64)
    prev[sp[1:][same]] = sp[:-1][same]
    del sp, same
    isalloc = order < na
    cols["prev"] = prev
    cols["cache"] = cols["cache"][order]
    return isalloc


def _classify(cols, isalloc):
    """From "prev": the frees of objects allocated in the trace, the allocations never freed,
    and the untraced frees an allocation proves (where and of what cache), and the number of
    frees naming another cache than their allocation. A matched free counts from here on for
    its allocation's cache (in cols["cache"])."""
    prev, cache_t = cols.pop("prev"), cols["cache"]
    # (no index arrays made from prev: a prev of -1 picks the last event, which is no
    # event's previous, so it is masked or cleared)
    after_alloc = isalloc[prev]  # the event before (same ptr) is an alloc
    after_alloc &= prev >= 0
    has_next = np.zeros(len(prev), bool)  # another event of the ptr follows
    has_next[prev] = True
    if len(has_next):
        has_next[-1] = False
    is_matched_t = ~isalloc & after_alloc  # frees of objects allocated in the trace
    is_live_t = isalloc & ~has_next  # allocations never freed
    del has_next
    # allocated again with no free between, which proves a free, untraced, before the second
    # allocation (kmem_cache_free_bulk, RCU frees and kfree of cache objects have no
    # kmem_cache_free event; lost events): at the second allocation, for the first one's cache
    implicit_at = np.flatnonzero(isalloc & after_alloc)
    del after_alloc
    before = cache_t[prev]  # the cache of each event's previous one (junk where none)
    del prev
    implicit_cache = before[implicit_at]
    name_mismatch = int(np.count_nonzero(is_matched_t & (cache_t >= 0) & (cache_t != before)))
    np.copyto(cache_t, before, where=is_matched_t)  # a matched free counts for the alloc's cache
    return is_matched_t, is_live_t, implicit_at, implicit_cache, name_mismatch


def _peaks(cols, isalloc, isfree, is_matched_t, implicit_at, implicit_cache, k):
    """Per cache: peak_live, peak_net and peak_live_ts, the first time of peak_live."""
    cache_t, ts_t = cols["cache"], cols["ts"]
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
    peak_live, peak_live_at = running_max_sorted(group, d_live, k)
    peak_net, _ = running_max_sorted(group, d_net, k)
    if len(implicit_at):
        # a peak is reached at an allocation: back from the merged order to the time index
        got = peak_live_at >= 0
        peak_live_at[got] -= np.searchsorted(shifted, peak_live_at[got], side="left")
    peak_live_ts = np.zeros(k, np.int64)
    got = peak_live_at >= 0
    peak_live_ts[got] = ts_t[peak_live_at[got]]
    return peak_live, peak_net, peak_live_ts
