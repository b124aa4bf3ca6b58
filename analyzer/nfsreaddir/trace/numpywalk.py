"""The ring-buffer page walk in numpy: the fallback where the compiled walk
(:mod:`nfsreaddir._ringbuf`) is not built, and the tests' oracle for it. All pages of a block are
walked at once: the record chains followed together (one lane per page, one record per step),
then every record handled in file order with whole-block array operations (type, length, event
id, time stamps as a per-page running sum)."""

from __future__ import annotations

import numpy as np

from . import page
from .arrays import gather_uint, udt

# step from a record header to the next for data records of 1..28 words (type_len);
# -1: another type (0: length in the next word, padding, time extend, time stamp)
_STEP = np.full(32, -1, np.int32)
_STEP[1 : page.TYPE_DATA_MAX + 1] = 4 + 4 * np.arange(1, page.TYPE_DATA_MAX + 1)
_TS_MSB = np.uint64(page.TS_MSB)


def _chain(b32, start, end, le, min_dlen):
    """Follow the record chain of every page at once (one lane per page).

    ``start``/``end``: byte offsets (int32) of each page's first record and of the end
    of its data.  Returns (record header offsets in file order, broken lanes or None):
    a lane whose chain runs past its data, leaves the 4-byte alignment every record keeps,
    or has a record too short to hold an event id, stops there and is reported broken.
    """
    rows = []
    broken = np.zeros(len(start), bool)
    cur = start
    act = None  # None: all lanes still walking
    m31, s27 = np.uint32(31), np.uint32(27)
    while True:
        w = b32[cur >> 2]
        tl = (w & m31) if le else (w >> s27)
        st = _STEP[tl]
        nxt = cur + st
        slow = st < 0
        if act is not None:
            slow &= act
        if slow.any():
            _slow_steps(b32, cur, tl, end, min_dlen, slow, nxt, broken)
        if min_dlen > 4:
            short = (st > 0) & (st - 4 < min_dlen)
            if act is not None:
                short &= act
            if short.any():
                broken |= short
                nxt = np.where(short, end, nxt)
        rows.append(cur if act is None else np.where(act, cur, -1))
        over = nxt > end
        if act is not None:
            over &= act
        if over.any():
            broken |= over
            nxt = np.where(over, end, nxt)
        fin = nxt >= end
        if fin.any():
            act = ~fin if act is None else (act & ~fin)
            if not act.any():
                break
            cur = np.where(act, nxt, 0)
        else:
            cur = nxt
    m = np.stack(rows).T.ravel()
    return m[m >= 0], (broken if broken.any() else None)


def _slow_steps(b32, cur, tl, end, min_dlen, slow, nxt, broken):
    """The next record of the lanes ``slow`` whose record is not a data record of 1..28
    words (its length in the next word, padding, a time record), into ``nxt``; a step that
    cannot be right (backwards, an event too short for its id, a padding length that leaves
    the alignment) breaks the lane."""
    idx = np.flatnonzero(slow)
    c = cur[idx].astype(np.int64)
    t = tl[idx]
    e_ = end[idx].astype(np.int64)
    a0 = b32.take((c >> 2) + 1, mode="clip").astype(np.int64)
    is0 = t == 0
    dl0 = (a0 - 4 + 3) & ~3
    nx = np.where(
        is0, c + 8 + dl0, np.where(t == page.TYPE_PADDING, np.minimum(c + 4 + a0, e_), c + 8)
    )
    bad = (nx <= c) | (is0 & (dl0 < min_dlen)) | ((nx < e_) & ((nx & 3) != 0))
    nxt[idx] = np.where(bad, e_, np.minimum(nx, e_ + 4))
    if bad.any():
        broken[idx[bad]] = True


class _Pages:
    """The headers of a block's pages: time stamps, commit words, data sizes, and the first
    page whose header is garbage (``bad``, the number of pages when none): a commit size past
    the page (``why`` "size") or a commit word of 0 ("empty": a zeroed page, as the ring
    buffer never hands out a page without data)."""

    def __init__(self, block, layout):
        P = layout.page_size
        e = layout.endian
        self.n = len(block) // P
        self.base = np.arange(self.n, dtype=np.int64) * P
        self.ts = block.view(udt(e, 8))[self.base >> 3].astype(np.uint64)
        self.commit = gather_uint(
            block, self.base + layout.commit_off, layout.commit_size, e
        ).astype(np.uint64)
        self.size = (self.commit & np.uint64(page.COMMIT_MASK)).astype(np.int64)
        bad = np.flatnonzero((self.size > layout.limit) | (self.commit == 0))
        self.bad = int(bad[0]) if len(bad) else self.n
        self.why = "size" if self.bad < self.n and self.size[self.bad] > layout.limit else "empty"

    def lost_markers(self, block, layout, cpu, lost):
        """The lost-events markers of the pages before the first garbage header, onto
        ``lost`` ({"cpu", "ts" (raw), "count" or None})."""
        missed = (self.commit & np.uint64(page.MISSED_EVENTS)) != 0
        if not missed.any():
            return
        stored = (self.commit & np.uint64(page.MISSED_STORED)) != 0
        for p in np.flatnonzero(missed).tolist():
            if p >= self.bad:
                break
            cnt = None
            if stored[p] and self.size[p] + layout.long_size <= layout.limit:
                at = int(self.base[p] + layout.data_off + self.size[p])
                cnt = int(gather_uint(block, np.array([at]), layout.long_size, layout.endian)[0])
            lost.append({"cpu": cpu, "ts": int(self.ts[p]), "count": cnt})


_EMPTY = (
    np.zeros(0, np.int64),
    np.zeros(0, np.uint64),
    np.zeros(0, np.int64),
    np.zeros(0, np.int64),
)


def walk(block, layout, lut, cpu, lost, first_page=0):
    """Walk all pages of ``block``: the record chains of all pages at once (one lane per
    page, see :func:`_chain`), then every record in file order.

    Returns ((pos, ts, dlen, ids), damage): data offset in ``block``, raw time stamp, data
    length and event id of the data records, in file order (``lut``: the ids wanted, or None
    for all; other records may still be returned when most are wanted); ``damage`` is a
    message or None (records on and after the damaged page are dropped). The lost-events
    markers go onto ``lost``.
    """
    P = layout.page_size
    pages = _Pages(block, layout)
    if pages.n == 0:
        return None, None
    bad_page, why, detail = (
        pages.bad,
        pages.why,
        (int(pages.size[pages.bad]) if pages.bad < pages.n else 0),
    )
    pages.lost_markers(block, layout, cpu, lost)
    lanes = np.flatnonzero(pages.size[:bad_page] > 0)
    if not len(lanes):
        return _EMPTY, _damage(cpu, why, first_page, bad_page, detail, pages.n, layout)
    start = (pages.base[lanes] + layout.data_off).astype(np.int32)
    end = start + pages.size[lanes].astype(np.int32)
    le = not layout.big
    rec, broken = _chain(
        block.view(udt(layout.endian, 4)), start, end, le, layout.id_off + layout.id_size
    )
    if broken is not None:
        first_bad = int(lanes[np.argmax(broken)])
        if first_bad < bad_page:
            bad_page, why = first_bad, "chain"
    if bad_page < pages.n:
        rec = rec[: np.searchsorted(rec, bad_page * P)]
    damage = _damage(cpu, why, first_page, bad_page, detail, pages.n, layout)
    if not len(rec):
        return _EMPTY, damage
    recs = _Records(block, rec, layout, pages.ts)
    sel = None
    if lut is not None:
        wanted = lut[np.minimum(recs.ids, len(lut) - 1)]
        k = int(np.count_nonzero(wanted))
        if k == 0:  # nothing wanted here: no need for the times
            return _EMPTY, damage
        if k < len(wanted) // 2:  # few wanted: select them (else the caller does)
            sel = np.flatnonzero(wanted)
    ts = recs.times()
    if sel is not None:
        return (recs.dpos[sel], ts[sel], recs.dlen[sel], recs.ids[sel]), damage
    return (recs.dpos, ts, recs.dlen, recs.ids), damage


def _damage(cpu, why, first_page, bad_page, detail, npages, layout):
    if bad_page >= npages:
        return None
    return page.damage_text(cpu, why, first_page + bad_page, detail, layout.limit)


class _Records:
    """Every record of a block's chains, in file order: its type, data offset and length,
    event id (the largest id for a record that is not an event), and its time delta."""

    def __init__(self, block, rec, layout, page_ts):
        e = layout.endian
        P = layout.page_size
        b32 = block.view(udt(e, 4))
        w = b32[rec >> 2]
        if not layout.big:
            tl = w & np.uint32(31)
            delta = w >> np.uint32(5)
        else:
            tl = w >> np.uint32(27)
            delta = w & np.uint32(page.COMMIT_MASK)
        st = _STEP[tl]
        self.pg = rec >> (P.bit_length() - 1) if P & (P - 1) == 0 else rec // P
        self.page_ts = page_ts
        self.dpos = rec + 4
        self.dlen = st - 4
        self.stamp = None
        data = None
        if int(st.min()) < 0:  # not only data records of 1..28 words
            other = np.flatnonzero(st < 0)
            t = tl[other]
            a0 = b32.take((rec[other] >> 2) + 1, mode="clip").astype(np.uint64)
            is0 = t == 0
            i0 = other[is0]
            self.dpos[i0] += 4
            self.dlen = self.dlen.astype(np.int64)
            self.dlen[i0] = (a0[is0].astype(np.int64) - 4 + 3) & ~3
            ext = t == page.TYPE_TIME_EXTEND
            delta = delta.astype(np.uint64)
            big = (a0 << np.uint64(page.TS_SHIFT)) + delta[other]
            delta[other[ext]] = big[ext]
            isst = t == page.TYPE_TIME_STAMP
            if isst.any():
                self.stamp = other[isst]
                self.stamp_val = big[isst] | (page_ts[self.pg[self.stamp]] & _TS_MSB)
                delta[self.stamp] = 0
            data = other[~is0]
        self.delta = delta
        id_off, id_size = layout.id_off, layout.id_size
        if id_size == 2 and id_off % 2 == 0:
            self.ids = block.view(udt(e, 2))[(self.dpos + id_off) >> 1]
        else:
            self.ids = gather_uint(block, self.dpos + id_off, id_size, e)
        if data is not None:
            self.ids[data] = np.iinfo(self.ids.dtype).max  # not an event: never wanted

    def times(self):
        """The raw time stamp of every record: its page's time stamp plus the deltas of the
        records before it in the page (a time stamp record restarts the sum)."""
        pg, delta, stamp = self.pg, self.delta, self.stamp
        n = len(pg)
        seg = np.empty(n, bool)
        seg[0] = True
        np.not_equal(pg[1:], pg[:-1], out=seg[1:])
        if stamp is not None:
            seg[stamp] = True
        sidx = np.flatnonzero(seg)
        cs = np.cumsum(delta, dtype=np.uint64)
        start_v = self.page_ts[pg[sidx]]
        if stamp is not None:
            start_v[np.searchsorted(sidx, stamp)] = self.stamp_val
        return cs + np.repeat(
            start_v - (cs[sidx] - delta[sidx].astype(np.uint64)), np.diff(sidx, append=n)
        )
