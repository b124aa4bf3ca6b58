"""The ring-buffer pages of a trace.dat, walked 16 MiB of pages at a time: the record chains of
all pages followed at once (one lane per page, one record per step), then every record handled
in file order with whole-block array operations (type, length, event id, time stamps as a
per-page running sum), with the lost-events markers and damage found on the way. CPUs are
independent streams, read by parallel threads on the usable cores; v7 zstd chunks are
decompressed straight into the block by :mod:`nfsreaddir._zchunks` (libzstd) where it is
built, else through python-zstandard chunk by chunk. The compiled
:mod:`nfsreaddir._ringbuf` does the walk where it is built (``pip install -e .``, as
``reproducers/setup-host`` runs it): where every requested field is an integer or a
``__data_loc`` string, in one pass per block that writes the fields straight into the columns
(``Extract``), else listing the records for the decoders. The numpy walk is the fallback, with
a one-line notice on stderr, and the tests' oracle for both (``NFSRT_READER=numpy`` selects it).
"""

from __future__ import annotations

import functools
import heapq
import mmap
import os
import struct
import sys
import threading

import numpy as np

from .. import tuning
from .arrays import _gather_uint, _Pieces, _Strs, _udt
from .raw import _Damage, _decompress, _zstd

try:
    from .. import _ringbuf       # the compiled ring-buffer walk (setup.py builds it)
except ImportError:
    _ringbuf = None
try:
    from .. import _zchunks       # zstd chunks by libzstd (built where zstd.h was found)
except ImportError:
    _zchunks = None

# ring buffer constants
_COMMIT_MASK = (1 << 27) - 1
_MISSED_EVENTS = 1 << 31
_MISSED_STORED = 1 << 30
_TS_SHIFT = 27
_TS_MSB = np.uint64(0xF8 << 56)
_TYPE_PADDING, _TYPE_TIME_EXTEND, _TYPE_TIME_STAMP = 29, 30, 31

_BLOCK_BYTES = 16 << 20          # pages walked per step (bounded memory)
_RELEASE_ABOVE = 32 << 20        # madvise(DONTNEED) decoded pages of files larger than this


_WALK_ROWS = 1 << 18        # records listed per call of the compiled walk
_walk_local = threading.local()


def _walk_arrays():
    """This thread's output arrays of the compiled walk (pos, ts, dlen, ids)."""
    out = getattr(_walk_local, "out", None)
    if out is None:
        out = _walk_local.out = (np.empty(_WALK_ROWS, np.int32), np.empty(_WALK_ROWS, np.uint64),
                                 np.empty(_WALK_ROWS, np.int32), np.empty(_WALK_ROWS, np.uint32))
    return out


def _inflate_block():
    """This thread's block for inflated chunks: one per thread, reused by every stretch of
    stream it reads (a fresh 16 MiB would be faulted in again for each); the reader's
    threads end with the scan, and :func:`_drop_inflate_block` frees the calling thread's."""
    blk = getattr(_walk_local, "blk", None)
    if blk is None or len(blk) != _BLOCK_BYTES:
        blk = _walk_local.blk = np.empty(_BLOCK_BYTES, dtype=np.uint8)
    return blk


def _drop_inflate_block():
    _walk_local.__dict__.pop("blk", None)


@functools.lru_cache(maxsize=1)
def _compiled_wanted():
    """Whether to use the compiled walk: yes when it is built, unless
    NFSRT_READER=numpy asks for the numpy walk; without it, one notice on stderr."""
    if os.environ.get("NFSRT_READER", "") == "numpy":
        return False
    if _ringbuf is None:
        sys.stderr.write("nfs-readdir: the compiled trace reader is not built (no C compiler "
                         "at install?); using the slower numpy reader (reproducers/setup-host "
                         "builds it)\n")
        return False
    return True



def _inflate_wanted():
    """Whether zstd chunks go through the compiled inflate: with the compiled walk, where
    it is built; without it, one notice on stderr."""
    if not _compiled_wanted():
        return False
    if _zchunks is None:
        _no_inflate_notice()
        return False
    return True


@functools.cache
def _no_inflate_notice():
    sys.stderr.write("nfs-readdir: libzstd's header was not found at install; zstd chunks are "
                     "decompressed through python-zstandard (slower; reproducers/setup-host "
                     "installs libzstd-dev)\n")


# why a compressed chunk stopped the stream (the numbers of _zchunks.inflate)
_HEADER_CUT, _BAD_SIZE, _DATA_CUT, _SIZE_MISMATCH, _CORRUPT, _SHORT = range(1, 7)


def _chunk_damage(cpu, i, why, a=0, b=0, text=None):
    """The message of a damaged chunk ``i`` of a CPU's compressed stream."""
    if why == _HEADER_CUT:
        return f"cpu {cpu} chunk {i}: header cut short (truncated or corrupt)"
    if why == _BAD_SIZE:
        return f"cpu {cpu}: chunk {i} has implausible size {a}"
    if why == _DATA_CUT:
        return f"cpu {cpu} chunk {i}: needs {a} bytes at offset {b} (truncated or corrupt)"
    if why == _SIZE_MISMATCH:
        return f"cpu {cpu} chunk {i}: zstd frame holds {a} bytes, the file says {b} (corrupt)"
    if why == _CORRUPT:
        return f"cpu {cpu} chunk {i}: the zstd data is corrupt ({text})"
    return (f"cpu {cpu} chunk {i}: zstd data gave {a} bytes, the file says {b} (corrupt or "
            "truncated)")


# step from a record header to the next for data records of 1..28 words (type_len);
# -1: another type (0: length in the next word, padding, time extend, time stamp)
_STEP = np.full(32, -1, np.int32)
_STEP[1:29] = 4 + 4 * np.arange(1, 29)


def _chain(b32, start, end, le, min_dlen):
    """Follow the record chain of every page at once (one lane per page).

    ``start``/``end``: byte offsets (int32) of each page's first record and of the end
    of its data.  Returns (record header offsets in file order, broken lanes or None):
    a lane whose chain runs past its data, or has a record too short to hold an event
    id, stops there and is reported broken.
    """
    rows = []
    broken = np.zeros(len(start), bool)
    cur = start
    act = None                       # None: all lanes still walking
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
            idx = np.flatnonzero(slow)
            c = cur[idx].astype(np.int64)
            t = tl[idx]
            e_ = end[idx].astype(np.int64)
            a0 = b32.take((c >> 2) + 1, mode="clip").astype(np.int64)
            is0 = t == 0
            dl0 = (a0 - 4 + 3) & ~3
            nx = np.where(is0, c + 8 + dl0,
                          np.where(t == _TYPE_PADDING, np.minimum(c + 4 + a0, e_), c + 8))
            bad = (nx <= c) | (is0 & (dl0 < min_dlen))
            nx = np.where(bad, e_, np.minimum(nx, e_ + 4))
            nxt[idx] = nx
            if bad.any():
                broken[idx[bad]] = True
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


def _damage_text(cpu, why, bad, detail, limit):
    """The message of the damage the compiled walks report (as the numpy walk words it);
    ``bad``: the page, counted from the start of the CPU's data."""
    if why == "size":
        return (f"cpu {cpu}: page {bad} of its data has a garbage header (commit size "
                f"{detail} > {limit})")
    if why == "chain":
        return (f"cpu {cpu}: the record chain in page {bad} of its data is broken (record "
                "runs past the page's data)")
    return None


def _extractable(plan):
    """Whether :class:`_ringbuf.Extract` decodes every field of this plan: integers, and
    __data_loc / __rel_loc strings (others: fixed char arrays, arrays, the numpy way)."""
    return all((f.loc is None and f.kind == "int") or (f.loc in ("data", "rel") and
                                                       f.kind == "str")
               for f in plan["fields"])


def _columns(plan, want_pid):
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
            out.append((1 if f.loc == "data" else 2, f.offset, 4, False, False, 1))
    return out


class RingWalk:
    # ------------------------------------------------------------ data walk
    def _cpu_blocks(self, cpu, off, size, compressed, P, stretch=None):
        """Yield uint8 arrays of whole pages; raise _Damage at the first damage. ``stretch``
        (from :meth:`_stretches`): the part of the stream to read; None, all of it."""
        if not size:
            return
        if off >= self._size:
            raise _Damage(f"cpu {cpu}: data offset {off} is past the end of the file "
                          f"({self._size} bytes; truncated)")
        release = self._size > _RELEASE_ABOVE
        if not compressed:
            end = off + size
            trunc = end > self._size
            avail = min(end, self._size) - off
            npages = avail // P
            step = max(1, _BLOCK_BYTES // P) * P
            pos, stop, last = (off, off + npages * P, True) if stretch is None else stretch[:3]
            while pos < stop:
                n = min(step, stop - pos)
                yield np.frombuffer(self._mm, dtype=np.uint8, count=n, offset=pos)
                if release:
                    self._release(pos, n)
                pos += n
            if not last:
                return
            if trunc:
                raise _Damage(f"cpu {cpu}: data runs past the end of the file (needs "
                              f"{size} bytes at offset {off}, file has {self._size}; truncated)")
            if avail % P:
                raise _Damage(f"cpu {cpu}: data size {size} is not a multiple of the page "
                              f"size {P}")
            return
        # the size in the BUFFER option does not count the 4-byte chunk count
        mm = self._mm
        stop = min(off + 4 + size, self._size)
        if off + 4 + size > self._size:
            trunc_msg = (f"cpu {cpu}: compressed data runs past the end of the file "
                         f"(truncated)")
        else:
            trunc_msg = None
        if off + 4 > stop:
            raise _Damage(trunc_msg or f"cpu {cpu}: compressed data header is missing")
        if stretch is None:
            nchunks = struct.unpack_from(self._e + "I", mm, off)[0]
            stretch = (off + 4, nchunks, True, 0, 0)
        pos, nchunks, last, first, _ = stretch
        if self.compression == "zstd" and _inflate_wanted():
            yield from self._inflated(cpu, pos, stop, nchunks, P, trunc_msg if last else None,
                                      release, first)
        else:
            yield from self._decompressed(cpu, pos, stop, nchunks, P, trunc_msg, release)

    def _stretches(self, cpu, off, size, step):
        """One CPU's stream cut into stretches of about ``step`` stored bytes that can be read
        apart, in order: (offset, end offset or chunks, last, first chunk's index, first
        page's index) of pages or of zstd chunks (their boundaries and the bytes before them
        from the headers, :func:`_zchunks.chain`); the whole stream, one stretch, where it
        cannot be cut (other compression, damage at its start). Damage in a stretch is the
        damage of the whole stream there: the caller drops what the stretches after it hold."""
        P = self._buf.page_size
        if not self._buf.compressed:
            stop = off + min(size, max(0, self._size - off)) // P * P
            step = max(P, step // P * P)
            cuts = list(range(off, stop, step))[1:]
            return [(a, b, b == stop, 0, (a - off) // P)
                    for a, b in zip([off] + cuts, cuts + [stop])] if stop > off else [None]
        stop = min(off + 4 + size, self._size)
        if not (self.compression == "zstd" and _inflate_wanted()) or off + 4 > stop:
            return [None]
        nchunks = struct.unpack_from(self._e + "I", self._mm, off)[0]
        cuts = _zchunks.chain(self._mm, off + 4, stop, nchunks, self._e == ">", step)
        starts = [(off + 4, 0, 0)] + cuts
        ends = [i for _, i, _ in cuts] + [nchunks]
        return [(pos, end - first, end == nchunks, first, inflated // P)
                for (pos, first, inflated), end in zip(starts, ends)]

    def _inflated(self, cpu, pos, stop, nchunks, P, trunc_msg, release, first=0):
        """The blocks of a zstd stream from its chunk ``first``, each filled by one call of the
        compiled inflate."""
        blk = _inflate_block()
        i = first
        nchunks += first
        while i < nchunks:
            start = pos
            pos, k, fill, why, a, b, text = _zchunks.inflate(
                self._mm, pos, stop, nchunks - i, blk, P, self._e == ">")
            i += k
            if fill:
                yield blk[:fill]
            if release:
                self._release(start, pos - start)
            if why:
                raise _Damage(trunc_msg or _chunk_damage(cpu, i, why, a, b, text))
            if not k:
                blk = np.empty(a, dtype=np.uint8)       # one chunk larger than the block

    def _decompressed(self, cpu, pos, stop, nchunks, P, trunc_msg, release):
        """The blocks of a compressed stream, decompressed chunk by chunk in Python (the
        fallback of :meth:`_inflated`, and zlib)."""
        mm = self._mm
        hdr = struct.Struct(self._e + "II")
        done = pos
        algo = self.compression
        if algo == "zstd":
            zstandard, _ = _zstd()
            dctx = zstandard.ZstdDecompressor()     # one per stream: not thread safe
            content_size = zstandard.frame_content_size
        # decompressed chunks are copied into one reused buffer, walked when full
        blk = np.empty(_BLOCK_BYTES, dtype=np.uint8)
        fill = 0
        for i in range(nchunks):
            try:
                if pos + 8 > stop:
                    raise _Damage(_chunk_damage(cpu, i, _HEADER_CUT))
                csize, usize = hdr.unpack_from(mm, pos)
                if usize % P or usize > (1 << 30):
                    raise _Damage(_chunk_damage(cpu, i, _BAD_SIZE, usize))
                if pos + 8 + csize > stop:
                    raise _Damage(_chunk_damage(cpu, i, _DATA_CUT, csize, pos + 8))
                data = mm[pos + 8:pos + 8 + csize]
                pos += 8 + csize
                if algo == "zstd":
                    # the fast path of _decompress (same checks)
                    try:
                        declared = content_size(data)
                        if declared >= 0 and declared != usize:
                            raise _Damage(_chunk_damage(cpu, i, _SIZE_MISMATCH, declared,
                                                        usize))
                        out = dctx.decompress(data, max_output_size=usize)
                    except _Damage:
                        raise
                    except Exception as e:
                        raise _Damage(_chunk_damage(cpu, i, _CORRUPT, text=str(e))) from None
                    if len(out) != usize:
                        raise _Damage(_chunk_damage(cpu, i, _SHORT, len(out), usize))
                else:
                    out = _decompress(algo, data, usize, f"cpu {cpu} chunk {i}")
            except _Damage as d:
                if fill:
                    yield blk[:fill]
                raise _Damage(trunc_msg or str(d)) from None
            if fill + usize > len(blk):
                if fill:
                    yield blk[:fill]
                    fill = 0
                    if release:
                        self._release(done, pos - done)
                        done = pos
                if usize > len(blk):
                    blk = np.empty(usize, dtype=np.uint8)
            blk[fill:fill + usize] = np.frombuffer(out, dtype=np.uint8)
            fill += usize
        if fill:
            yield blk[:fill]
        if release:
            self._release(done, pos - done)

    def _release(self, pos, n):
        """Drop mmapped pages already decoded, so RSS does not grow with the file."""
        madv = getattr(mmap, "MADV_DONTNEED", None)
        if madv is None or not isinstance(self._mm, mmap.mmap):
            return
        gran = mmap.PAGESIZE
        start = (pos + gran - 1) // gran * gran
        stop = (pos + n) // gran * gran
        if stop > start:
            try:
                self._mm.madvise(madv, start, stop - start)
            except (OSError, ValueError):
                pass

    def _walks(self, block, P, lut, cpu, lost, first_page=0):
        """The records of ``block`` as :meth:`_walk` gives them, in one or more parts
        ((pos, ts, dlen, ids), damage or None); the damage, if any, comes with the last.

        The compiled walk (:mod:`nfsreaddir._ringbuf`) lists the records of whole pages
        into arrays of a fixed size, reused from part to part (so its memory does not
        grow with the block); each part is used before the next is made."""
        if not _compiled_wanted():
            yield self._walk(block, P, lut, cpu, lost, first_page)
            return
        if len(block) >= (1 << 31):
            raise _Damage(f"cpu {cpu}: a data block of {len(block)} bytes is too large")
        hp = self._hp
        idf = self._id_field
        out = _walk_arrays()
        page = 0
        npages = len(block) // P
        while True:
            n, marks, page, bad, why, detail = _ringbuf.walk(
                block, page, P, hp["commit_off"], hp["commit_size"], hp["data_off"],
                self._e == ">", self.long_size, idf.offset, idf.size, lut, *out)
            for _, page_ts, count in marks:
                lost.append({"cpu": cpu, "ts": page_ts, "count": count})
            yield tuple(a[:n] for a in out), _damage_text(cpu, why, first_page + bad, detail,
                                                          P - hp["data_off"])
            if page >= npages:
                return

    def _walk(self, block, P, lut, cpu, lost, first_page=0):
        """Walk all pages of ``block``: the record chains of all pages at once (one
        lane per page, see :func:`_chain`), then every record in file order.

        Returns ((pos, ts, dlen, ids), damage): data offset in ``block``, raw
        timestamp, data length and event id of the data records, in file order
        (``lut``: the ids wanted, or None for all; other records may still be
        returned when most are wanted); ``damage`` is a message or None (records on
        and after the damaged page are dropped).
        """
        e = self._e
        hp = self._hp
        npages = len(block) // P
        if npages == 0:
            return None, None
        base = np.arange(npages, dtype=np.int64) * P
        b32 = block.view(_udt(e, 4))
        page_ts = block.view(_udt(e, 8))[base >> 3].astype(np.uint64)
        commit = _gather_uint(block, base + hp["commit_off"], hp["commit_size"],
                              e).astype(np.uint64)
        size = (commit & np.uint64(_COMMIT_MASK)).astype(np.int64)
        data_off = hp["data_off"]
        limit = P - data_off
        bad_page = npages
        reason = None
        badsz = np.flatnonzero(size > limit)
        if len(badsz):
            bad_page = int(badsz[0])
            reason = (f"page {first_page + bad_page} of its data has a garbage header "
                      f"(commit size {int(size[bad_page])} > {limit})")
        missed = (commit & np.uint64(_MISSED_EVENTS)) != 0
        if missed.any():
            stored = (commit & np.uint64(_MISSED_STORED)) != 0
            for p in np.flatnonzero(missed).tolist():
                if p >= bad_page:
                    break
                cnt = None
                if stored[p] and size[p] + self.long_size <= limit:
                    at = int(base[p] + data_off + size[p])
                    cnt = int(_gather_uint(block, np.array([at]), self.long_size, e)[0])
                lost.append({"cpu": cpu, "ts": int(page_ts[p]), "count": cnt})
        idf = self._id_field
        id_off, id_size = idf.offset, idf.size
        lanes = np.flatnonzero(size[:bad_page] > 0)
        empty = (np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64),
                 np.zeros(0, np.int64))
        if not len(lanes):
            return empty, (f"cpu {cpu}: {reason}" if bad_page < npages else None)
        if len(block) >= (1 << 31):
            raise _Damage(f"cpu {cpu}: a data block of {len(block)} bytes is too large")
        start = (base[lanes] + data_off).astype(np.int32)
        end = start + size[lanes].astype(np.int32)
        le = e == "<"
        rec, broken = _chain(b32, start, end, le, id_off + id_size)
        if broken is not None and broken.any():
            first_bad = int(lanes[np.argmax(broken)])
            if first_bad < bad_page:
                bad_page = first_bad
                reason = (f"the record chain in page {first_page + bad_page} of its data is "
                          "broken (record runs past the page's data)")
        if bad_page < npages:
            rec = rec[:np.searchsorted(rec, bad_page * P)]
        damage = f"cpu {cpu}: {reason}" if bad_page < npages else None
        if not len(rec):
            return empty, damage
        # every record, in file order: type, length, time
        w = b32[rec >> 2]
        if le:
            tl = w & np.uint32(31)
            delta = w >> np.uint32(5)
        else:
            tl = w >> np.uint32(27)
            delta = w & np.uint32(_COMMIT_MASK)
        st = _STEP[tl]
        pg = rec >> (P.bit_length() - 1) if P & (P - 1) == 0 else rec // P
        dpos = rec + 4
        dlen = st - 4
        stamp = None
        data = None
        if int(st.min()) < 0:       # not only data records of 1..28 words
            other = np.flatnonzero(st < 0)
            t = tl[other]
            a0 = b32.take((rec[other] >> 2) + 1, mode="clip").astype(np.uint64)
            is0 = t == 0
            i0 = other[is0]
            dpos[i0] += 4
            dlen = dlen.astype(np.int64)
            dlen[i0] = (a0[is0].astype(np.int64) - 4 + 3) & ~3
            ext = t == _TYPE_TIME_EXTEND
            delta = delta.astype(np.uint64)
            big = (a0 << np.uint64(_TS_SHIFT)) + delta[other]
            delta[other[ext]] = big[ext]
            isst = t == _TYPE_TIME_STAMP
            if isst.any():
                stamp = other[isst]
                stamp_val = big[isst] | (page_ts[pg[stamp]] & _TS_MSB)
                delta[stamp] = 0
            data = other[~is0]
        if id_size == 2 and id_off % 2 == 0:
            ids = block.view(_udt(e, 2))[(dpos + id_off) >> 1]
        else:
            ids = _gather_uint(block, dpos + id_off, id_size, e)
        if data is not None:
            ids[data] = np.iinfo(ids.dtype).max      # not an event: never wanted
        sel = None
        if lut is not None:
            wanted = lut[np.minimum(ids, len(lut) - 1)]
            k = int(np.count_nonzero(wanted))
            if k == 0:                 # nothing wanted here: no need for the times
                return empty, damage
            if k < len(wanted) // 2:   # few wanted: select them (else the caller does)
                sel = np.flatnonzero(wanted)
        # time: page time stamp plus the deltas of the records before, per page
        # (a time stamp record restarts the sum)
        n = len(rec)
        seg = np.empty(n, bool)
        seg[0] = True
        np.not_equal(pg[1:], pg[:-1], out=seg[1:])
        if stamp is not None:
            seg[stamp] = True
        sidx = np.flatnonzero(seg)
        cs = np.cumsum(delta, dtype=np.uint64)
        start_v = page_ts[pg[sidx]]
        if stamp is not None:
            start_v[np.searchsorted(sidx, stamp)] = stamp_val
        ts = cs + np.repeat(start_v - (cs[sidx] - delta[sidx].astype(np.uint64)),
                            np.diff(sidx, append=n))
        if sel is not None:
            return (dpos[sel], ts[sel], dlen[sel], ids[sel]), damage
        return (dpos, ts, dlen, ids), damage

    def _scan(self, want, acc, lost, damage, stopped):
        """Decode the wanted events of every CPU's data into ``acc`` (pieces per block,
        in CPU order); ``stopped`` gets the CPUs whose stream is damaged.  The CPUs are independent streams, and so are stretches of one
        stream (pages, or zstd chunks): with several cores they are read by parallel
        threads (zstd and the compiled walk run outside the GIL), a CPU's stream cut into
        stretches so that a trace whose events are mostly on one CPU is not read by one
        thread; the result is the same as one after the other."""
        buf = self._buf
        plans = {eid: self._plan(w) for eid, w in want.items()}
        idf = self._id_field                # resolved before threads start
        lut = np.zeros((1 << (8 * idf.size)) if idf.size <= 2 else (1 << 20), dtype=bool)
        for eid in want:
            if 0 <= eid < len(lut) - 1:
                lut[eid] = True
        cpus = [(cpu, off, size) for cpu, off, size in buf.cpus if size]
        nthreads = tuning.reader_threads()
        units = [(cpu, off, size, None) for cpu, off, size in cpus]
        # the one-pass compiled extract, or the walk then the decoders (whole streams only)
        extract = _compiled_wanted() and all(_extractable(p) for p in plans.values())
        if (extract and nthreads > 1
                and _idle_share([size for *_, size in cpus], nthreads) > tuning.STRETCH_IDLE):
            # stretches small enough to share the work out evenly, large enough that each
            # one's set-up does not count
            step = max(tuning.reader_stretch_bytes(),
                       sum(size for *_, size in cpus) // (nthreads * 8))
            units = [(cpu, off, size, stretch) for cpu, off, size in cpus
                     for stretch in self._stretches(cpu, off, size, step)]
        nthreads = min(len(units), nthreads)
        if extract:
            def read(u):
                return self._extract_cpu(*u[:3], want, plans, u[3])
        else:
            def read(u):
                return self._scan_cpu(*u[:3], want, plans, lut)
        if nthreads > 1:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(nthreads, thread_name_prefix="tracedat") as pool:
                results = list(pool.map(read, units))
        else:
            results = [read(u) for u in units]
        for (cpu, *_), (part, lst, dmg, exc) in zip(units, results):
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
        _drop_inflate_block()
        tuning.trim()             # the scan's temporaries: the heap goes back to the system

    def _scan_cpu(self, cpu, off, size, want, plans, lut):
        """One CPU's data through the walk and the decoders: (pieces per event, lost events,
        damage, exception or None)."""
        P = self._buf.page_size
        part = {eid: {k: (_Pieces() if k != "cpu" else [])
                      for k in ("ts", "cpu", "pid", *("f:" + f.name for f in w[2]))}
                for eid, w in want.items()}
        lost, damage = [], []
        first_page = 0
        try:
            for block in self._cpu_blocks(cpu, off, size, self._buf.compressed, P):
                for res, dmg in self._walks(block, P, lut, cpu, lost, first_page):
                    if res is not None and len(res[0]):
                        pos, ts, dlen, ids = res
                        for eid in want:
                            sel = np.flatnonzero(ids == eid)
                            if len(sel) == len(ids):
                                self._decode(block, pos, ts, dlen, cpu, plans[eid],
                                             part[eid])
                            elif len(sel):
                                self._decode(block, pos[sel], ts[sel], dlen[sel], cpu,
                                             plans[eid], part[eid])
                if dmg:
                    damage.append(dmg)
                    break
                first_page += len(block) // P
        except _Damage as d:
            damage.append(str(d))
            self._whole_records(part)
        except (IndexError, ValueError, OverflowError, MemoryError) as e:
            return self._whole_records(part), lost, damage, e
        return part, lost, damage, None

    def _extract_cpu(self, cpu, off, size, want, plans, stretch=None):
        """:meth:`_scan_cpu` in one compiled pass per block (:class:`_ringbuf.Extract`), of
        the CPU's data or the ``stretch`` of it from :meth:`_stretches`: each wanted record's
        time stamp and fields go straight into columns that grow as they fill, one piece per
        column and stretch, handed over without a copy."""
        P = self._buf.page_size
        hp = self._hp
        idf = self._id_field
        eids = list(want)
        slots = np.full((1 << (8 * idf.size)) if idf.size <= 2 else (1 << 20), -1, np.int16)
        layout = []
        for k, eid in enumerate(eids):
            if 0 <= eid < len(slots) - 1:
                slots[eid] = k
            layout.append(_columns(plans[eid], self._want_pid))
        ext = _ringbuf.Extract(slots, layout)
        lost, damage = [], []
        args = (P, hp["commit_off"], hp["commit_size"], hp["data_off"], self._e == ">",
                self.long_size, idf.offset, idf.size)
        exc = None
        first_page = stretch[4] if stretch else 0
        try:
            for block in self._cpu_blocks(cpu, off, size, self._buf.compressed, P, stretch):
                if len(block) >= (1 << 31):
                    raise _Damage(f"cpu {cpu}: a data block of {len(block)} bytes is too large")
                marks, bad, why, detail = ext.walk(block, *args)
                for _, page_ts, count in marks:
                    lost.append({"cpu": cpu, "ts": page_ts, "count": count})
                if why:
                    damage.append(_damage_text(cpu, why, first_page + bad, detail,
                                               P - hp["data_off"]))
                    break
                first_page += len(block) // P
        except _Damage as d:
            damage.append(str(d))
        except MemoryError as e:
            exc = e
        part = {}
        for k, eid in enumerate(eids):
            n = ext.rows(k)
            fields = want[eid][2]
            cols = {"ts": [], "cpu": [], "pid": [], **{"f:" + f.name: [] for f in fields}}
            part[eid] = cols
            if not n:
                continue
            cols["ts"].append(np.frombuffer(ext.take(k, -1), np.uint64, count=n))
            cols["cpu"].append((cpu, n))
            j = 0
            if self._want_pid:
                if plans[eid]["pf"] is not None:
                    cols["pid"].append(np.frombuffer(ext.take(k, 0), np.int32, count=n))
                    j = 1
                else:
                    cols["pid"].append(np.full(n, -1, np.int32))
            for f in fields:
                mem = ext.take(k, j)
                if f.kind == "str":
                    width = memoryview(mem).nbytes // n         # 1, 2 or 4
                    cols["f:" + f.name].append(
                        _Strs(np.frombuffer(mem, f"i{width}", count=n), ext.values(k, j)))
                else:
                    cols["f:" + f.name].append(np.frombuffer(mem, f.dtype, count=n))
                j += 1
        return part, lost, damage, exc

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

