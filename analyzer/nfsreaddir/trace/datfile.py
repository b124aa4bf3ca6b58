"""Column-oriented reader for trace-cmd ``trace.dat`` files (versions 6 and 7).

Only the events and fields asked for are decoded, by name, using the event
formats stored in the file.  The ring-buffer pages of every CPU are walked with
numpy, 16 MiB of pages at a time: the record chains of all pages are followed
at once (one lane per page, one record per step, a few array operations per
step), then every record is handled in file order with whole-block array
operations (type, length, event id, and the time stamps as a per-page running
sum).  Each event's records are decoded from one copy of their fixed head
(integers, pid, ``__data_loc`` words) read through a structured dtype; strings
are keyed by a hash of their masked bytes, so each distinct value is decoded
once.  Uncompressed data is mmapped; compressed chunks (v7 zlib/zstd) are
decompressed a block at a time.  Pieces are kept per block and moved into the
final, time-sorted columns one by one, so memory follows the selected columns
(about their size) rather than the file.  CPUs are independent streams and are
read by parallel threads when there are several cores.

The walk over the records (their chain in each page, type, time and event id) is done by
the compiled :mod:`nfsreaddir._ringbuf` where it is built (``pip install -e .``, as
``reproducers/setup-host`` runs it); the numpy walk is the fallback, with a one-line notice
on stderr, and the tests' oracle for it (``NFSRT_READER=numpy`` selects it).

Layout notes (trace-cmd 3.x files; they differ from the published v7 text):
the v7 section header's size field is 8 bytes, the BUFFER option carries a
4-byte page size after the clock string, the per-CPU size of compressed data
does not count the leading 4-byte chunk count, and a v6 options list ends with
a bare 2-byte 0.  v6 instance data starts with "flyrecord\0" and the per-CPU
offset/size pairs.
"""

from __future__ import annotations

import functools
import mmap
import os
import re
import struct
import sys
import threading
import zlib

import numpy as np
import pandas as pd

from .. import tuning
from .base import BASE_COLUMNS, TraceError, field_column
from .format import Field, parse_cpu_stats, parse_format, parse_header_page

try:
    from .. import _ringbuf       # the compiled ring-buffer walk (setup.py builds it)
except ImportError:
    _ringbuf = None

# ring buffer constants
_COMMIT_MASK = (1 << 27) - 1
_MISSED_EVENTS = 1 << 31
_MISSED_STORED = 1 << 30
_TS_SHIFT = 27
_TS_MSB = np.uint64(0xF8 << 56)
_TYPE_PADDING, _TYPE_TIME_EXTEND, _TYPE_TIME_STAMP = 29, 30, 31

_BLOCK_BYTES = 16 << 20          # pages walked per step (bounded memory)
_STRMAT_LIMIT = 1 << 25          # max bytes of a padded string matrix
_PARALLEL_BUILD_ROWS = 1 << 20   # events built by parallel threads only below this
_RELEASE_ABOVE = 32 << 20        # madvise(DONTNEED) decoded pages of files larger than this

# option ids
OPT_DONE, OPT_DATE, OPT_CPUSTAT, OPT_BUFFER, OPT_TRACECLOCK, OPT_UNAME = 0, 1, 2, 3, 4, 5
OPT_OFFSET, OPT_CPUCOUNT, OPT_VERSION, OPT_TRACEID = 7, 8, 9, 11
OPT_TSC2NSEC = 14
OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS = 16, 17, 18
OPT_KALLSYMS, OPT_PRINTK, OPT_CMDLINES, OPT_BUFFER_TEXT = 19, 20, 21, 22
_SECTION_OPTIONS = {OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS,
                    OPT_KALLSYMS, OPT_PRINTK, OPT_CMDLINES}


_NAME_RE = re.compile(r"^name:\s*(\S+)", re.M)
_ID_RE = re.compile(r"^ID:\s*(\d+)", re.M)


class _Damage(Exception):
    """Internal: the file is damaged at some point; message for the user."""


# counters of ``per_cpu/cpuN/stats`` that count events the ring buffer lost: overwritten
# (overwrite mode), dropped (buffer full, no overwrite), lost to nested writes
_LOST_STATS = ("overrun", "dropped_events", "commit_overrun")


# --------------------------------------------------------------------------
# byte cursors

class _Cursor:
    """Bounds-checked reader over a bytes-like object in file endianness."""

    def __init__(self, buf, pos, end, endian, what):
        self.buf, self.pos, self.end, self.e, self.what = buf, pos, end, endian, what

    def _need(self, n):
        if n < 0 or self.pos + n > self.end:
            raise _Damage(f"{self.what}: needs {n} bytes at offset {self.pos} but only "
                          f"{max(0, self.end - self.pos)} are left (truncated or corrupt)")

    def take(self, n):
        self._need(n)
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)

    def uint(self, n):
        return int.from_bytes(self.take(n), "little" if self.e == "<" else "big")

    def cstr(self, limit=1 << 16):
        stop = min(self.end, self.pos + limit)
        i = self.buf.find(b"\0", self.pos, stop)
        if i < 0:
            raise _Damage(f"{self.what}: unterminated string at offset {self.pos}")
        s = bytes(self.buf[self.pos:i]).decode("utf-8", "replace")
        self.pos = i + 1
        return s


_ZSTD = None


def _zstd():
    global _ZSTD
    if _ZSTD is None:
        import zstandard
        _ZSTD = (zstandard, zstandard.ZstdDecompressor())
    return _ZSTD


def _decompress(algo, data, usize, what):
    try:
        if algo == "zstd":
            zstandard, dctx = _zstd()
            declared = zstandard.frame_content_size(data)
            if declared >= 0 and declared != usize:
                raise _Damage(f"{what}: zstd frame holds {declared} bytes, the file says "
                              f"{usize} (corrupt)")
            out = dctx.decompress(data, max_output_size=usize)
        elif algo == "zlib":
            d = zlib.decompressobj()
            out = d.decompress(data, usize + 1)
        else:
            raise _Damage(f"{what}: compression {algo!r} is not supported "
                          "(convert with `trace-cmd convert --compression none`)")
    except _Damage:
        raise
    except Exception as e:  # zstd.ZstdError, zlib.error, ...
        raise _Damage(f"{what}: the {algo} data is corrupt ({e})") from None
    if len(out) != usize:
        raise _Damage(f"{what}: {algo} data gave {len(out)} bytes, the file says {usize} "
                      "(corrupt or truncated)")
    return out


# --------------------------------------------------------------------------
# numpy helpers

def _udt(e, size):
    return np.dtype(f"{e}u{size}")


def _gather_uint(block, pos, size, e):
    """Unsigned integers of ``size`` bytes at byte offsets ``pos`` of ``block``."""
    if size == 1:
        return block[pos]
    if len(pos) == 0:
        return np.zeros(0, _udt(e, size))
    if size in (2, 4, 8) and not (pos & (size - 1)).any():
        return block.view(_udt(e, size))[pos >> (size.bit_length() - 1)]
    if int(pos.max()) + size <= len(block):
        return _bytes_view(block, size)[pos].view(_udt(e, size))
    m = block[pos[:, None] + np.arange(size)]
    return np.ascontiguousarray(m).view(_udt(e, size)).reshape(-1)


def _bytes_view(block, width):
    """Items of ``width`` bytes starting at every byte of ``block`` (overlapping; no copy).

    Indexing it with record offsets copies ``width`` bytes per record in one pass."""
    return np.ndarray((max(len(block) - width + 1, 0),), dtype=f"V{width}", buffer=block,
                      strides=(1,))


def _to_int_column(raw, f):
    size = f.size
    if f.signed:
        v = raw.view(np.dtype(f"i{size}")) if raw.dtype.itemsize == size else raw
        return v.astype(np.int64)
    return raw.astype(np.uint64 if size == 8 else np.int64)


_BYTE_MASKS = np.frombuffer(b"".join(bytes([0xFF] * k + [0] * (8 - k)) for k in range(9)),
                            dtype=np.uint64)
_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)
_HASH_MULT2 = np.uint64(0xC2B2AE3D27D4EB4F)


def _first_rows(codes):
    """Row of the first occurrence of each code (codes numbered by first appearance)."""
    cm = np.maximum.accumulate(codes)
    return np.searchsorted(cm, np.arange(int(cm[-1]) + 1 if len(cm) else 0))


def _row_codes(words, lens):
    """Codes (numbered by first appearance) and first rows of the distinct strings in
    ``words`` (n x k uint64, a copy: masked in place); row i holds ``lens[i]`` valid bytes.

    Rows are keyed by a polynomial hash of their words; a second hash checks that no two
    different strings share a key (if they do, the exact and slower way is taken)."""
    n, nw = words.shape
    lens = np.minimum(lens, 8 * nw)
    h = h2 = None
    for k in range(nw):
        col = words[:, k]
        # bytes of word k that belong to the string, by length (a small table)
        col &= _BYTE_MASKS[np.clip(np.arange(8 * nw + 1) - 8 * k, 0, 8)][lens]
        if nw == 1:
            h = col
        elif h is None:
            h = col.copy()
            h2 = col.copy()
        else:
            h *= _HASH_MULT
            h += col
            h2 *= _HASH_MULT2
            h2 += col
    codes, _ = pd.factorize(h)
    first = _first_rows(codes)
    if nw > 1 and not (h2 == h2[first][codes]).all():   # hash collision: exact way
        v = np.ascontiguousarray(words).view(f"V{8 * nw}").reshape(-1)
        _, first, codes = np.unique(v, return_index=True, return_inverse=True)
        codes = codes.reshape(-1)
    return codes, first


class _Strs:
    """A string column as (codes, distinct values); cheap to merge and to sort."""

    __slots__ = ("codes", "values")

    def __init__(self, codes, values):
        self.codes, self.values = codes, values

    def __len__(self):
        return len(self.codes)

    def map_values(self, fn):
        return _Strs(self.codes, [fn(v) for v in self.values])


def _str_series(strs):
    """A categorical pandas Series from a :class:`_Strs` without per-row objects.

    The categories are the distinct values, sorted (so the same data gives the same
    column whatever the block or CPU order); the codes are the smallest integer type
    that holds them (int8 for up to 127 values).  Values are ``str``; ``==``,
    ``isin``, ``.str`` and ``astype(str)`` work as on a string column."""
    values = strs.values
    if not len(values):
        return pd.Series(pd.Categorical.from_codes(np.full(len(strs), -1, np.int8), []))
    uniq = sorted(set(values))
    pos = {v: i for i, v in enumerate(uniq)}
    k = len(uniq)
    cdt = np.int8 if k < (1 << 7) else np.int16 if k < (1 << 15) else np.int32
    remap = np.array([pos[v] for v in values], dtype=cdt)
    codes = np.asarray(strs.codes)
    out = _empty(len(codes), cdt)
    if len(codes) and len(values) == 1:
        out[...] = 0
    else:
        np.take(remap, codes, out=out)
    cat = pd.Categorical.from_codes(out, pd.Index(uniq), validate=False)
    return pd.Series(cat, copy=False)


def _extract_strings(block, starts, lens, kind):
    """Strings (as :class:`_Strs`, int32 codes) or bytes (object array) at ``starts``,
    ``lens`` bytes each.  Strings stop at the first NUL."""
    n = len(starts)
    lens = np.maximum(lens, 0)
    maxlen = int(lens.max()) if n else 0
    if kind == "str":
        if n == 0 or maxlen == 0:
            return _Strs(np.zeros(n, np.int32), [""])
        width = (maxlen + 7) & ~7
        if n * width <= _STRMAT_LIMIT and len(block) >= width:
            # one copy of `width` bytes per row, masked to its length and hashed
            far = starts > len(block) - width
            mat = _bytes_view(block, width)[np.where(far, 0, starts) if far.any() else starts]
            raw = mat.view(np.uint8).reshape(n, width)
            for i in np.flatnonzero(far).tolist():
                seg = block[starts[i]:starts[i] + width]
                raw[i, :] = 0
                raw[i, :len(seg)] = seg
            codes, first = _row_codes(mat.view(np.uint64).reshape(n, width // 8), lens)
            values = [raw[r, :ln].tobytes().split(b"\0", 1)[0].decode("utf-8", "replace")
                      for r, ln in zip(first.tolist(), lens[first].tolist())]
            return _Strs(codes.astype(np.int32), values)
    mv = memoryview(block)
    if kind == "str":
        index = {}
        codes = np.empty(n, dtype=np.int32)
        for i, (st, ln) in enumerate(zip(starts.tolist(), lens.tolist())):
            v = mv[st:st + ln].tobytes().split(b"\0", 1)[0].decode("utf-8", "replace")
            codes[i] = index.setdefault(v, len(index))
        return _Strs(codes, list(index))
    out = np.empty(n, dtype=object)
    for i, (st, ln) in enumerate(zip(starts.tolist(), lens.tolist())):
        out[i] = mv[st:st + ln].tobytes()
    return out


_WALK_ROWS = 1 << 18        # records listed per call of the compiled walk
_walk_local = threading.local()


def _walk_arrays():
    """This thread's output arrays of the compiled walk (pos, ts, dlen, ids)."""
    out = getattr(_walk_local, "out", None)
    if out is None:
        out = _walk_local.out = (np.empty(_WALK_ROWS, np.int32), np.empty(_WALK_ROWS, np.uint64),
                                 np.empty(_WALK_ROWS, np.int32), np.empty(_WALK_ROWS, np.uint32))
    return out


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


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def _empty(n, dtype):
    """np.empty for result columns: large ones are mapped with their pages already in
    place (MAP_POPULATE: one system call instead of a page fault per 4 KiB page), outside
    the malloc heap (which then holds only temporaries, given back when a phase ends)."""
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if _POPULATE and nbytes >= (1 << 20) and dtype != object:
        try:
            m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
            return np.frombuffer(m, dtype, count=n)
        except (OSError, ValueError):
            pass
    return np.empty(n, dtype)


def _mapped(n, dtype):
    """An array of its own anonymous mapping (outside the malloc heap)."""
    dtype = np.dtype(dtype)
    try:
        m = mmap.mmap(-1, max(n * dtype.itemsize, 1),
                      flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        return np.frombuffer(m, dtype, count=n)
    except (OSError, ValueError, AttributeError):
        return np.empty(n, dtype)


def _series(arr):
    if isinstance(arr, _Strs):
        return _str_series(arr)
    return pd.Series(arr, copy=False)


_CHUNK_BYTES = 8 << 20          # the decoded pieces are packed into chunks of this size


class _Pieces(list):
    """The decoded pieces of one column of one CPU, in order, packed into large chunks.

    ``append(arr)`` copies ``arr`` into the current chunk and keeps a view of it (string
    pieces keep their values; their codes are packed).  The pieces, which live until the
    columns are built, so stay out of the malloc heap: it holds only the per-block
    temporaries, which it hands out again and again without new page faults, and gives
    back at once when the scan ends.  A chunk is unmapped when the last view of it goes."""

    __slots__ = ("_chunk", "_fill")

    def __init__(self):
        super().__init__()
        self._chunk = None
        self._fill = 0

    def _pack(self, arr):
        n = len(arr)
        c = self._chunk
        if c is None or c.dtype != arr.dtype or self._fill + n > len(c):
            if n * arr.dtype.itemsize >= _CHUNK_BYTES // 4:
                big = _mapped(n, arr.dtype)             # large: a piece of its own
                big[...] = arr
                return big
            c = self._chunk = _mapped(_CHUNK_BYTES // arr.dtype.itemsize, arr.dtype)
            self._fill = 0
        v = c[self._fill:self._fill + n]
        v[...] = arr
        self._fill += n
        return v

    def reserve(self, n, dtype):
        """A piece of ``n`` elements to be written in place (already appended)."""
        dtype = np.dtype(dtype)
        c = self._chunk
        if c is None or c.dtype != dtype or self._fill + n > len(c):
            if n * dtype.itemsize >= _CHUNK_BYTES // 4:
                v = _mapped(n, dtype)
                super().append(v)
                return v
            c = self._chunk = _mapped(_CHUNK_BYTES // dtype.itemsize, dtype)
            self._fill = 0
        v = c[self._fill:self._fill + n]
        self._fill += n
        super().append(v)
        return v

    def append(self, x):
        if isinstance(x, np.ndarray) and x.dtype != object and x.ndim == 1:
            x = self._pack(x)
        elif isinstance(x, _Strs) and x.codes.dtype != object:
            x = _Strs(self._pack(x.codes), x.values)
        super().append(x)

    def release(self):
        """No more appends: drop the reference to the current chunk."""
        self._chunk = None


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
    broken = None
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
                if broken is None:
                    broken = np.zeros(len(start), bool)
                broken[idx[bad]] = True
        if min_dlen > 4:
            short = (st > 0) & (st - 4 < min_dlen)
            if act is not None:
                short &= act
            if short.any():
                if broken is None:
                    broken = np.zeros(len(start), bool)
                broken |= short
                nxt = np.where(short, end, nxt)
        rows.append(cur if act is None else np.where(act, cur, -1))
        over = nxt > end
        if act is not None:
            over &= act
        if over.any():
            if broken is None:
                broken = np.zeros(len(start), bool)
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
    return m[m >= 0], broken

# --------------------------------------------------------------------------
# the reader

class _Buffer:
    def __init__(self, name, clock, page_size, cpus, compressed):
        self.name, self.clock, self.page_size = name, clock, page_size
        self.cpus = cpus                  # list of (cpu, offset, size)
        self.compressed = compressed


class TraceDat:
    """A trace.dat file.  Use :func:`nfsreaddir.trace.open_trace` to create."""

    def __init__(self, path, instance=None):
        self.path = path
        try:
            self._f = open(path, "rb")
            self._size = os.fstat(self._f.fileno()).st_size
            self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if self._size else b""
        except (OSError, ValueError) as e:
            raise TraceError(f"cannot open {path!r}: {e}") from None
        self._fmt_src = {}       # id -> (system, name, format text); parsed on demand
        self._fmt_cache = {}     # id -> EventFormat
        self.by_name = {}        # "system:name" -> id
        self.cmdlines = {}
        self._kallsyms_loc = None
        self._kallsyms = None
        self.buffers = {}
        self.options = {}
        self._time = {"tsc2nsec": None, "offset": 0}
        self.info = {"format": "trace.dat", "path": path, "cpus": None, "clock": None,
                     "trace_cmd_version": None, "uname": None, "lost_events": [],
                     "partial": False, "damage": [], "instance": instance or "",
                     "instances": [], "scanned": False}
        self._cpustat_texts = []
        try:
            self._parse_meta()
        except _Damage as d:
            self.close()
            raise TraceError(f"{path}: cannot read the trace metadata: {d}. The file is "
                             "truncated or corrupt; re-copy it or record again") from None
        except TraceError:
            self.close()
            raise
        except (ValueError, IndexError, OverflowError, UnicodeDecodeError, MemoryError) as e:
            self.close()
            raise TraceError(f"{path}: corrupt trace metadata ({type(e).__name__}: {e}); "
                             "re-copy the file or record again") from None
        name = instance or ""
        if name not in self.buffers:
            self.close()
            have = ", ".join(repr(b) for b in self.buffers) or "none"
            raise TraceError(f"{path}: no trace data for instance {name!r} "
                             f"(instances with data: {have})")
        self._buf = self.buffers[name]
        # data of other instances past the end of the file: the file is truncated
        self._other_damage = []
        if self.version >= 7:
            msg = self._check_section_chain()
            if msg:
                self._other_damage.append(msg)
        for bname, b in self.buffers.items():
            if bname == name:
                continue
            for cpu, off, size in b.cpus:
                if size and off + size + (4 if b.compressed else 0) > self._size:
                    self._other_damage.append(
                        f"instance {bname!r} cpu {cpu}: data runs past the end of the file "
                        f"(truncated)")
                    break
        self.info["cpu_stats"] = parse_cpu_stats(self._cpustat_texts).get(name, {})
        self.info["lost_total"] = self._lost_total()
        self.info["clock"] = self._buf.clock or self.info.get("clock")
        self.info["instances"] = list(self.buffers)
        if self.info["cpus"] is None:
            self.info["cpus"] = len(self._buf.cpus)

    # ---------------------------------------------------------------- meta
    def close(self):
        try:
            if isinstance(self._mm, mmap.mmap):
                self._mm.close()
        except (BufferError, AttributeError):
            pass
        try:
            self._f.close()
        except AttributeError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def _cur(self, pos, end=None, what="file"):
        end = self._size if end is None else min(end, self._size)
        return _Cursor(self._mm, pos, end, self._e, what)

    def _parse_meta(self):
        mm = self._mm
        c = _Cursor(mm, 0, self._size, "<", "file header")
        if c.take(10) != b"\x17\x08\x44tracing":
            raise _Damage("bad magic: not a trace.dat file")
        ver = c.cstr(16)
        if ver not in ("6", "7"):
            raise TraceError(f"{self.path}: trace.dat file version {ver!r} is not supported "
                             "(versions 6 and 7 are); convert it with `trace-cmd convert "
                             "--file-version 7`")
        self.version = int(ver)
        endian = c.uint(1)
        if endian not in (0, 1):
            raise _Damage(f"bad endianness flag {endian}")
        self._e = "<" if endian == 0 else ">"
        c.e = self._e
        self.long_size = c.uint(1)
        if self.long_size not in (4, 8):
            raise _Damage(f"bad long size {self.long_size}")
        self.page_size = c.uint(4)
        if self.page_size < 64 or self.page_size > (1 << 24) or self.page_size % 8:
            raise _Damage(f"implausible page size {self.page_size}")
        self.info.update(version=self.version, endian="little" if endian == 0 else "big",
                         long_size=self.long_size, page_size=self.page_size)
        if self.version == 6:
            self.compression = "none"
            self._parse_v6(c)
            self.info["format"] = "trace.dat v6"
        else:
            self.compression = c.cstr(64)
            self.compression_version = c.cstr(64)
            if self.compression not in ("none", "zstd", "zlib"):
                raise TraceError(f"{self.path}: compression {self.compression!r} is not "
                                 "supported (none, zlib and zstd are); convert with "
                                 "`trace-cmd convert --compression none`")
            first = c.uint(8)
            self._sections_start = c.pos
            self._parse_v7(first)
            self.info["format"] = "trace.dat v7" + (
                "" if self.compression == "none" else f" {self.compression}")
        self.info["compression"] = self.compression
        if not self._fmt_src:
            raise _Damage("no event formats found")

    # v6 --------------------------------------------------------------
    def _parse_header_info(self, c):
        if c.take(12) != b"header_page\0":
            raise _Damage("'header_page' not found where expected")
        n = c.uint(8)
        hp = c.take(n).decode("utf-8", "replace")
        if c.take(13) != b"header_event\0":
            raise _Damage("'header_event' not found where expected")
        n = c.uint(8)
        he = c.take(n).decode("utf-8", "replace")
        self._hp = parse_header_page(hp, self.long_size)
        self._parse_header_event(he)

    def _parse_header_event(self, text):
        types = {"padding": 29, "time_extend": 30, "time_stamp": 31}
        for k in list(types):
            m = re.search(rf"{k}\s*:\s*type\s*==\s*(\d+)", text)
            if m:
                types[k] = int(m.group(1))
        if types != {"padding": 29, "time_extend": 30, "time_stamp": 31}:
            raise TraceError(f"{self.path}: unsupported ring-buffer event header {types}")

    def _parse_ftrace_formats(self, c):
        n = c.uint(4)
        if n > 100000:
            raise _Damage(f"implausible ftrace format count {n}")
        for _ in range(n):
            size = c.uint(8)
            self._add_format(c.take(size), "ftrace")

    def _parse_event_formats(self, c):
        nsys = c.uint(4)
        if nsys > 100000:
            raise _Damage(f"implausible event system count {nsys}")
        for _ in range(nsys):
            system = c.cstr(4096)
            n = c.uint(4)
            if n > 1000000:
                raise _Damage(f"implausible event count {n} for system {system!r}")
            for _ in range(n):
                size = c.uint(8)
                self._add_format(c.take(size), system)

    def _add_format(self, data, system):
        text = data.decode("utf-8", "replace")
        m = _NAME_RE.search(text)
        i = _ID_RE.search(text)
        if not m or not i:
            return
        eid = int(i.group(1))
        self._fmt_src[eid] = (system, m.group(1), text)
        self.by_name[f"{system}:{m.group(1)}"] = eid

    def _format(self, eid):
        fmt = self._fmt_cache.get(eid)
        if fmt is None:
            system, _, text = self._fmt_src[eid]
            fmt = parse_format(text, system)
            if fmt is None:
                raise TraceError(f"{self.path}: the stored format of event id {eid} cannot "
                                 "be parsed")
            self._fmt_cache[eid] = fmt
        return fmt

    def _parse_cmdlines(self, data):
        for line in data.decode("utf-8", "replace").splitlines():
            pid, _, comm = line.strip().partition(" ")
            if pid.isdigit():
                self.cmdlines[int(pid)] = comm

    def _parse_v6(self, c):
        self._parse_header_info(c)
        self._parse_ftrace_formats(c)
        self._parse_event_formats(c)
        n = c.uint(4)
        self._kallsyms_loc = ("raw", c.pos, n)
        c.take(n)
        n = c.uint(4)
        c.take(n)                                       # printk formats
        n = c.uint(8)
        self._parse_cmdlines(c.take(n))
        cpus = c.uint(4)
        if cpus > 65536:
            raise _Damage(f"implausible cpu count {cpus}")
        self.info["cpus"] = cpus
        self._v6_cpus = cpus
        kind = c.take(10)
        v6_buffers = []
        if kind == b"options  \0":
            while True:
                oid = c.uint(2)
                if oid == 0:
                    break
                size = c.uint(4)
                data = c.take(size)
                if oid == OPT_BUFFER:
                    oc = _Cursor(data, 0, len(data), self._e, "BUFFER option")
                    off = oc.uint(8)
                    v6_buffers.append((oc.cstr(), off))
                else:
                    self._option(oid, data)
            kind = c.take(10)
        if kind == b"latency  \0":
            raise TraceError(f"{self.path}: this trace.dat holds latency-tracer text, not "
                             "event records; it cannot be decoded into events")
        if kind != b"flyrecord\0":
            raise _Damage(f"expected 'flyrecord' at offset {c.pos - 10}, found {kind!r}")
        clock = self.info.get("clock")
        self.buffers[""] = _Buffer("", clock, self.page_size, self._v6_cpu_list(c, cpus), False)
        for name, off in v6_buffers:
            try:
                bc = self._cur(off, what=f"instance {name!r} data header")
                if bc.take(10) != b"flyrecord\0":
                    raise _Damage(f"instance {name!r}: 'flyrecord' not found at offset {off}")
                self.buffers[name] = _Buffer(name, clock, self.page_size,
                                             self._v6_cpu_list(bc, cpus), False)
            except _Damage as d:
                self.info["damage"].append(str(d))

    @staticmethod
    def _v6_cpu_list(c, cpus):
        out = []
        for cpu in range(cpus):
            off = c.uint(8)
            size = c.uint(8)
            out.append((cpu, off, size))
        return out

    # v7 --------------------------------------------------------------
    def _section(self, off, expect_id, what):
        """Read the section at ``off``; returns (flags, bytes of the payload)."""
        c = self._cur(off, what=what)
        sid = c.uint(2)
        flags = c.uint(2)
        c.uint(4)                   # description string id
        size = c.uint(8)
        if expect_id is not None and sid != expect_id:
            raise _Damage(f"{what}: section id {sid} at offset {off}, expected {expect_id}")
        if size > self._size - c.pos:
            raise _Damage(f"{what}: section size {size} at offset {off} runs past the end "
                          f"of the file ({self._size} bytes)")
        if flags & 1:
            csize = c.uint(4)
            usize = c.uint(4)
            if csize > size:
                raise _Damage(f"{what}: compressed size {csize} larger than section {size}")
            data = _decompress(self.compression, c.take(csize), usize, what)
        else:
            data = c.take(size)
        return sid, flags, data, c.pos

    def _parse_v7(self, first):
        seen = set()
        off = first
        section_opts = []
        buffers = []
        while off:
            if off in seen or len(seen) > 1000:
                raise _Damage("options sections form a loop")
            seen.add(off)
            _, _, data, _ = self._section(off, 0, "options section")
            oc = _Cursor(data, 0, len(data), self._e, "options section")
            off = 0
            while oc.pos < oc.end:
                oid = oc.uint(2)
                size = oc.uint(4)
                odata = oc.take(size)
                if oid == OPT_DONE:
                    off = int.from_bytes(odata[:8], "little" if self._e == "<" else "big") \
                        if len(odata) >= 8 else 0
                    break
                if oid in _SECTION_OPTIONS:
                    section_opts.append((oid, int.from_bytes(
                        odata[:8], "little" if self._e == "<" else "big")))
                elif oid == OPT_BUFFER:
                    buffers.append(odata)
                elif oid == OPT_BUFFER_TEXT:
                    self.info["damage"].append("latency (text) buffers are not decoded")
                else:
                    self._option(oid, odata)
        got = {oid for oid, _ in section_opts}
        for need in (OPT_HEADER_INFO, OPT_EVENT_FORMATS):
            if need not in got:
                raise _Damage(f"the options do not point to a section {need} "
                              "(header info / event formats)")
        # header info first: other sections need the long size and endianness
        section_opts.sort(key=lambda x: x[0] != OPT_HEADER_INFO)
        for oid, soff in section_opts:
            if oid == OPT_KALLSYMS:
                self._kallsyms_loc = ("section", soff, None)
                continue
            what = {16: "header info", 17: "ftrace formats", 18: "event formats",
                    20: "printk formats", 21: "saved cmdlines"}[oid]
            _, _, data, _ = self._section(soff, oid, what)
            sc = _Cursor(data, 0, len(data), self._e, what)
            if oid == OPT_HEADER_INFO:
                self._parse_header_info(sc)
            elif oid == OPT_FTRACE_EVENTS:
                self._parse_ftrace_formats(sc)
            elif oid == OPT_EVENT_FORMATS:
                self._parse_event_formats(sc)
            elif oid == OPT_CMDLINES:
                n = sc.uint(8)
                self._parse_cmdlines(sc.take(n))
        for odata in buffers:
            bc = _Cursor(odata, 0, len(odata), self._e, "BUFFER option")
            soff = bc.uint(8)
            name = bc.cstr()
            clock = bc.cstr()
            page_size = bc.uint(4)
            ncpu = bc.uint(4)
            if ncpu > 65536:
                raise _Damage(f"implausible cpu count {ncpu} in BUFFER option")
            cpus = []
            for _ in range(ncpu):
                cpu = bc.uint(4)
                coff = bc.uint(8)
                csize = bc.uint(8)
                cpus.append((cpu, coff, csize))
            try:
                c = self._cur(soff, what=f"buffer {name!r} section")
                c.uint(2)
                flags = c.uint(2)
            except _Damage as d:
                self.info["damage"].append(str(d))
                flags = 0
            if page_size != self.page_size and (page_size < 64 or page_size > (1 << 24)
                                                 or page_size % 8):
                raise _Damage(f"implausible page size {page_size} for buffer {name!r}")
            self.buffers[name] = _Buffer(name, clock, page_size, cpus, bool(flags & 1))

    def _check_section_chain(self):
        """v7 sections follow each other up to the end of the file; a chain that
        runs past the end (or stops short of it) means a truncated file."""
        off = self._sections_start
        n = 0
        while off < self._size and n < 100000:
            if off + 16 > self._size:
                return f"the section header at offset {off} is cut short (file truncated)"
            hdr = bytes(self._mm[off:off + 16])
            e = "little" if self._e == "<" else "big"
            sid = int.from_bytes(hdr[0:2], e)
            size = int.from_bytes(hdr[8:16], e)
            if off + 16 + size > self._size:
                return (f"section {sid} at offset {off} needs {size} bytes but the file ends "
                        f"at {self._size} (file truncated)")
            off += 16 + size
            n += 1
        return None

    def _option(self, oid, data):
        def s():
            return data.split(b"\0", 1)[0].decode("utf-8", "replace").strip()
        e = "little" if self._e == "<" else "big"
        if oid == OPT_UNAME:
            self.info["uname"] = s()
        elif oid == OPT_VERSION:
            self.info["trace_cmd_version"] = s()
        elif oid == OPT_TRACECLOCK:
            m = re.search(r"\[(\S+)\]", s())
            if m:
                self.info["clock"] = m.group(1)
        elif oid == OPT_CPUCOUNT and len(data) >= 4:
            self.info["cpus"] = int.from_bytes(data[:4], e)
        elif oid == OPT_CPUSTAT:
            self._cpustat_texts.append(s())
        elif oid == OPT_TSC2NSEC and len(data) >= 16:
            self._time["tsc2nsec"] = (int.from_bytes(data[0:4], e), int.from_bytes(data[4:8], e),
                                      int.from_bytes(data[8:16], e))
        elif oid in (OPT_OFFSET, OPT_DATE):
            try:
                self._time["offset"] += int(s(), 0)
            except ValueError:
                pass
        elif oid == OPT_TRACEID and len(data) >= 8:
            self.info["trace_id"] = int.from_bytes(data[:8], e)
        self.options.setdefault(oid, []).append(data)

    # ---------------------------------------------------------------- API
    def event_names(self):
        """Set of ``"system:name"`` the file holds formats for."""
        return set(self.by_name)

    def event_format(self, name):
        return self._lookup(name)

    def _lookup(self, name):
        name2 = name.replace("/", ":")
        eid = self.by_name.get(name2)
        if eid is None and ":" not in name2:
            hits = [i for i, src in self._fmt_src.items() if src[1] == name2]
            if len(hits) == 1:
                eid = hits[0]
        return None if eid is None else self._format(eid)

    def kallsyms(self):
        """(sorted uint64 addresses, list of names) from the saved /proc/kallsyms."""
        if self._kallsyms is None:
            addrs, names = [], []
            try:
                if self._kallsyms_loc is None:
                    text = b""
                elif self._kallsyms_loc[0] == "raw":
                    _, pos, n = self._kallsyms_loc
                    text = bytes(self._mm[pos:pos + n])
                else:
                    _, _, data, _ = self._section(self._kallsyms_loc[1], OPT_KALLSYMS, "kallsyms")
                    sc = _Cursor(data, 0, len(data), self._e, "kallsyms")
                    text = sc.take(sc.uint(4))
            except _Damage as d:
                raise TraceError(f"{self.path}: {d}") from None
            for line in text.decode("utf-8", "replace").splitlines():
                parts = line.split()
                if len(parts) >= 3:
                    try:
                        addrs.append(int(parts[0], 16))
                        names.append(parts[2])
                    except ValueError:
                        pass
            order = np.argsort(np.array(addrs, dtype=np.uint64), kind="stable")
            self._kallsyms = (np.array(addrs, dtype=np.uint64)[order],
                              [names[i] for i in order])
        return self._kallsyms

    def event_counts(self):
        """{"system:name": number of records} for the events present in the data
        (one pass over the pages, no fields decoded).  Damage is reported in
        ``info["damage"]`` and counts stop there."""
        idf = self._id_field
        lut = np.ones((1 << (8 * idf.size)) if idf.size <= 2 else (1 << 20), dtype=bool)
        lut[-1] = False
        counts = np.zeros(len(lut), dtype=np.int64)
        damage = []
        lost = []
        for cpu, off, size in self._buf.cpus:
            try:
                for block in self._cpu_blocks(cpu, off, size, self._buf.compressed,
                                              self._buf.page_size):
                    for res, dmg in self._walks(block, self._buf.page_size, None, cpu, lost):
                        if res is not None and len(res[0]):
                            ids = res[3].astype(np.int64)
                            counts += np.bincount(np.minimum(ids, len(counts) - 1),
                                                  minlength=len(counts))[:len(counts)]
                    if dmg:
                        damage.append(dmg)
                        break
            except _Damage as d:
                damage.append(str(d))
            except (IndexError, ValueError, OverflowError) as e:
                damage.append(f"cpu {cpu}: undecodable ring-buffer data "
                              f"({type(e).__name__}: {e})")
        if damage:
            self.info["damage"] = list(self.info["damage"]) + damage
            self.info["partial"] = True
        self._set_lost(lost)
        counts[-1] = 0          # records that are not events (padding, time stamps)
        out = {}
        for eid in np.flatnonzero(counts).tolist():
            src = self._fmt_src.get(eid)
            name = f"{src[0]}:{src[1]}" if src else f"unknown:id{eid}"
            out[name] = int(counts[eid])
        return out

    def _set_lost(self, lost):
        for ev in lost:
            ev["ts"] = int(self._convert_ts(np.array([ev["ts"]], dtype=np.uint64))[0])
        lost.sort(key=lambda ev: (ev["ts"], ev["cpu"]))
        self.info["lost_events"] = lost
        self.info["scanned"] = True
        self.info["lost_total"] = self._lost_total()

    def _lost_total(self):
        """Events lost by the ring buffer, when the trace says: the lost counters of the
        stored CPU stats (every CPU with data must have them), else, once the data was
        scanned, the counts of the lost-events markers (None if one has no count)."""
        stats = self.info["cpu_stats"]
        cpus = [cpu for cpu, _, size in self._buf.cpus if size]
        if cpus and all(any(k in stats.get(cpu, {}) for k in _LOST_STATS) for cpu in cpus):
            return sum(int(v) for st in stats.values() for k, v in st.items()
                       if k in _LOST_STATS and isinstance(v, int))
        if not self.info["scanned"]:
            return None
        counts = [ev["count"] for ev in self.info["lost_events"]]
        return sum(counts) if None not in counts else None

    def read(self, events, on_damage="raise", base=BASE_COLUMNS):
        """Decode the requested events.

        ``events`` maps ``"system:name"`` to a list of field names (``None``
        means all non-common fields).  Returns ``{name: DataFrame}``.

        ``base``: which of the columns ts, cpu, pid, comm every frame has (default all;
        ``ts`` always): an analysis that needs only the time skips decoding the others.

        If the data is damaged, ``on_damage="raise"`` (default) raises
        :class:`TraceError` whose ``partial`` holds the frames read before the
        damage; ``on_damage="partial"`` returns those frames instead.  Either way
        ``info["partial"]`` is set and ``info["damage"]`` says where.
        """
        if isinstance(events, (list, tuple, set)):
            events = {e: None for e in events}
        bad = set(base) - set(BASE_COLUMNS)
        if bad:
            raise ValueError(f"base columns are {BASE_COLUMNS}, not {sorted(bad)}")
        self._base = tuple(c for c in BASE_COLUMNS if c in base or c == "ts")
        self._want_pid = "pid" in self._base or "comm" in self._base
        want = {}          # id -> (key, fmt, [Field])
        empty = {}
        for key, fields in events.items():
            if isinstance(fields, str):
                fields = [fields]
            fmt = self._lookup(key)
            if fmt is None:
                empty[key] = list(fields or [])
                continue
            if fields is None:
                fields = fmt.user_fields()
            flist = []
            for fn in fields:
                if fn not in fmt.fields:
                    raise TraceError(
                        f"event {fmt.full_name} has no field {fn!r}; its fields are: "
                        f"{', '.join(fmt.fields)}")
                flist.append(fmt.fields[fn])
            if fmt.id in want:
                # same event under two keys: union of fields, split at the end
                prev = want[fmt.id]
                names = [f.name for f in prev[2]]
                prev[2].extend(f for f in flist if f.name not in names)
                prev[3].append((key, list(fields)))
            else:
                want[fmt.id] = [key, fmt, flist, [(key, list(fields))]]
        acc = {eid: {"ts": [], "cpu": [], "pid": [], **{"f:" + f.name: [] for f in w[2]}}
               for eid, w in want.items()}
        lost = []
        damage = []
        with tuning.reading(self._size > _RELEASE_ABOVE) as memory:
            try:
                self._scan(want, acc, lost, damage)
            except MemoryError:
                raise TraceError(f"{self.path}: out of memory while decoding; ask for fewer "
                                 "events or fields") from None
            except (IndexError, ValueError, OverflowError) as e:
                # a damage pattern the checks above did not catch: still a TraceError
                damage.append(f"undecodable ring-buffer data ({type(e).__name__}: {e})")
            with memory.building():
                frames = self._build(want, acc)
        for key, fields in empty.items():
            frames[key] = pd.DataFrame({c: pd.Series(dtype=np.int64 if c != "comm" else "str")
                                        for c in self._base}
                                       | {field_column(f): pd.Series(dtype=object)
                                          for f in fields})
        if not damage:
            damage.extend(self._other_damage)
        self._set_lost(lost)
        if damage:
            self.info["partial"] = True
            self.info["damage"] = list(self.info["damage"]) + damage
            if on_damage != "partial":
                raise TraceError(
                    f"{self.path}: the trace data is damaged; decoded only the events before "
                    f"the damage ({'; '.join(damage[:4])}{' ...' if len(damage) > 4 else ''}). "
                    "Use the events in .partial with care, or re-copy/re-record the trace",
                    partial=frames)
        return frames

    # ------------------------------------------------------------ data walk
    def _cpu_blocks(self, cpu, off, size, compressed, P):
        """Yield uint8 arrays of whole pages; raise _Damage at the first damage."""
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
            pos = off
            stop = off + npages * P
            while pos < stop:
                n = min(step, stop - pos)
                yield np.frombuffer(self._mm, dtype=np.uint8, count=n, offset=pos)
                if release:
                    self._release(pos, n)
                pos += n
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
        hdr = struct.Struct(self._e + "II")
        nchunks = struct.unpack_from(self._e + "I", mm, off)[0]
        pos = off + 4
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
                    raise _Damage(f"cpu {cpu} chunk {i}: header cut short (truncated or "
                                  "corrupt)")
                csize, usize = hdr.unpack_from(mm, pos)
                if usize % P or usize > (1 << 30):
                    raise _Damage(f"cpu {cpu}: chunk {i} has implausible size {usize}")
                if pos + 8 + csize > stop:
                    raise _Damage(f"cpu {cpu} chunk {i}: needs {csize} bytes at offset "
                                  f"{pos + 8} (truncated or corrupt)")
                data = mm[pos + 8:pos + 8 + csize]
                pos += 8 + csize
                if algo == "zstd":
                    # the fast path of _decompress (same checks)
                    try:
                        declared = content_size(data)
                        if declared >= 0 and declared != usize:
                            raise _Damage(f"cpu {cpu} chunk {i}: zstd frame holds {declared} "
                                          f"bytes, the file says {usize} (corrupt)")
                        out = dctx.decompress(data, max_output_size=usize)
                    except _Damage:
                        raise
                    except Exception as e:
                        raise _Damage(f"cpu {cpu} chunk {i}: the zstd data is corrupt "
                                      f"({e})") from None
                    if len(out) != usize:
                        raise _Damage(f"cpu {cpu} chunk {i}: zstd data gave {len(out)} bytes, "
                                      f"the file says {usize} (corrupt or truncated)")
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

    def _walks(self, block, P, lut, cpu, lost):
        """The records of ``block`` as :meth:`_walk` gives them, in one or more parts
        ((pos, ts, dlen, ids), damage or None); the damage, if any, comes with the last.

        The compiled walk (:mod:`nfsreaddir._ringbuf`) lists the records of whole pages
        into arrays of a fixed size, reused from part to part (so its memory does not
        grow with the block); each part is used before the next is made."""
        if not _compiled_wanted():
            yield self._walk(block, P, lut, cpu, lost)
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
            damage = None
            if why == "size":
                damage = (f"cpu {cpu}: page {bad} of a block has a garbage header (commit "
                          f"size {detail} > {P - hp['data_off']})")
            elif why == "chain":
                damage = (f"cpu {cpu}: the record chain in page {bad} of a block is broken "
                          "(record runs past the page's data)")
            yield tuple(a[:n] for a in out), damage
            if page >= npages:
                return

    def _walk(self, block, P, lut, cpu, lost):
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
        commit = _gather_uint(block, base + hp["commit_off"], hp["commit_size"], e).astype(np.uint64)
        size = (commit & np.uint64(_COMMIT_MASK)).astype(np.int64)
        data_off = hp["data_off"]
        limit = P - data_off
        bad_page = npages
        reason = None
        badsz = np.flatnonzero(size > limit)
        if len(badsz):
            bad_page = int(badsz[0])
            reason = (f"page {bad_page} of a block has a garbage header (commit size "
                      f"{int(size[bad_page])} > {limit})")
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
                reason = (f"the record chain in page {bad_page} of a block is broken "
                          "(record runs past the page's data)")
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

    def _scan(self, want, acc, lost, damage):
        """Decode the wanted events of every CPU's data into ``acc`` (pieces per block,
        in CPU order).  The CPUs are independent streams: with several of them and
        several cores they are read by parallel threads (zstd and most numpy work run
        outside the GIL); the result is the same as one after the other."""
        buf = self._buf
        plans = {eid: self._plan(w) for eid, w in want.items()}
        idf = self._id_field                # resolved before threads start
        lut = np.zeros((1 << (8 * idf.size)) if idf.size <= 2 else (1 << 20), dtype=bool)
        for eid in want:
            if 0 <= eid < len(lut) - 1:
                lut[eid] = True
        units = [(cpu, off, size) for cpu, off, size in buf.cpus if size]
        nthreads = min(len(units), tuning.reader_threads())
        if nthreads > 1:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(nthreads, thread_name_prefix="tracedat") as pool:
                results = list(pool.map(lambda u: self._scan_cpu(*u, want, plans, lut),
                                        units))
        else:
            results = [self._scan_cpu(*u, want, plans, lut) for u in units]
        for part, lst, dmg, exc in results:
            for eid, cols in part.items():
                for k, v in cols.items():
                    acc[eid][k].extend(v)
            lost.extend(lst)
            damage.extend(dmg)
            if exc is not None:
                raise exc
        del results
        tuning.trim()             # the scan's temporaries: the heap goes back to the system

    def _scan_cpu(self, cpu, off, size, want, plans, lut):
        """One CPU's data: (pieces per event, lost events, damage, exception or None)."""
        P = self._buf.page_size
        part = {eid: {k: (_Pieces() if k != "cpu" else [])
                      for k in ("ts", "cpu", "pid", *("f:" + f.name for f in w[2]))}
                for eid, w in want.items()}
        lost, damage = [], []
        try:
            for block in self._cpu_blocks(cpu, off, size, self._buf.compressed, P):
                for res, dmg in self._walks(block, P, lut, cpu, lost):
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
        except _Damage as d:
            damage.append(str(d))
            self._whole_records(part)
        except (IndexError, ValueError, OverflowError, MemoryError) as e:
            return self._whole_records(part), lost, damage, e
        return part, lost, damage, None

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

    @property
    def _id_field(self):
        f = getattr(self, "_idf", None)
        if f is None:
            for eid in list(self._fmt_src)[:50]:
                fmt = self._format(eid)
                if "common_type" in fmt.fields:
                    f = fmt.fields["common_type"]
                    break
            else:
                f = Field("common_type", "unsigned short", 0, 2, False, "int", None)
            if f.size not in (1, 2, 4):
                f = Field("common_type", "unsigned short", 0, 2, False, "int", None)
            self._idf = f
        return f

    def _plan(self, w):
        """How to decode one event: the fixed head of its records (integers, pid and the
        __data_loc words) as a structured dtype read from one copy of the head."""
        e = self._e
        _, fmt, fields, _ = w
        pf = fmt.fields.get("common_pid")
        if pf is None or pf.kind != "int" or not self._want_pid:
            pf = None
        fixed = [f for f in fields if f.loc is None and f.kind == "int"]
        locs = [f for f in fields if f.loc in ("data", "rel")]
        heads = list(dict.fromkeys(fixed + locs + ([pf] if pf is not None else [])))
        dt = None
        width = 0
        if heads:
            width = (max(f.offset + (f.size if f.loc is None else 4) for f in heads) + 7) & ~7
            names, formats, offsets = [], [], []
            for i, f in enumerate(heads):
                size = f.size if f.loc is None else 4
                signed = f.signed and f.loc is None
                names.append(f"f{i}")
                formats.append(("|" if size == 1 else e) + ("i" if signed else "u") + str(size))
                offsets.append(f.offset)
            dt = np.dtype({"names": names, "formats": formats, "offsets": offsets,
                           "itemsize": width})
        return {"fields": fields, "pf": pf, "heads": heads, "dtype": dt, "width": width,
                "hidx": {id(f): f"f{i}" for i, f in enumerate(heads)},
                "asked": {id(f) for f in fields}}

    def _decode(self, block, pos, ts, dlen, cpu, plan, out):
        if (_compiled_wanted() and isinstance(out["ts"], _Pieces)
                and pos.dtype == np.int32 and dlen.dtype == np.int32):
            return self._decode_compiled(block, pos, ts, dlen, cpu, plan, out)
        e = self._e
        n = len(pos)
        pf = plan["pf"]
        pre = {}
        dmin = int(dlen.min()) if n else 0
        if plan["heads"] and int(pos.max()) + plan["width"] <= len(block):
            rec = _bytes_view(block, plan["width"])[pos].view(plan["dtype"])
            packed = isinstance(out["ts"], _Pieces)
            for f in plan["heads"]:
                col = rec[plan["hidx"][id(f)]]
                if f is pf:
                    if packed:          # straight into the pieces kept (no copy after)
                        pid = out["pid"].reserve(n, np.int32)
                        np.copyto(pid, col, casting="unsafe")
                        pre["pid"] = pid
                        pre["pid_kept"] = True
                    else:
                        pre["pid"] = col.astype(np.int32)
                    if id(f) not in plan["asked"]:
                        continue
                if f.loc is None:
                    if packed:
                        dst = out["f:" + f.name].reserve(n, f.dtype)
                        np.copyto(dst, col, casting="unsafe")
                        col = dst
                        pre[("kept", id(f))] = True
                    else:
                        col = col.astype(f.dtype)
                    if dmin < f.offset + f.size:
                        col[dlen < f.offset + f.size] = 0
                    pre[id(f)] = col
                else:
                    pre[id(f)] = col.astype(np.uint32)
        if not self._want_pid:
            pid = None
        elif pf is not None and dmin >= pf.offset + pf.size:
            pid = pre.get("pid")
            if pid is None:
                pid = _to_int_column(_gather_uint(block, pos + pf.offset, pf.size, e),
                                     pf).astype(np.int32)
        elif pre.get("pid_kept"):
            pid = pre["pid"]
            pid[...] = -1
        else:
            pid = np.full(n, -1, dtype=np.int32)
        cols = {}
        for f in plan["fields"]:
            if pre.get(("kept", id(f))):
                continue
            col = pre.get(id(f)) if f.loc is None else None
            if col is None:
                col = self._decode_field(block, pos, dlen, f, pre.get(id(f)))
            cols["f:" + f.name] = col
        out["ts"].append(ts)
        out["cpu"].append((cpu, n))
        if pid is not None and not (pre.get("pid_kept") and pid is pre.get("pid")):
            out["pid"].append(pid)
        for k, v in cols.items():
            out[k].append(v)

    def _decode_compiled(self, block, pos, ts, dlen, cpu, plan, out):
        """:meth:`_decode` by the compiled loops: integers straight into the pieces kept,
        __data_loc strings keyed in one pass (others as :meth:`_decode_field` does)."""
        n = len(pos)
        big = self._e == ">"
        pf = plan["pf"]
        if self._want_pid:
            pid = out["pid"].reserve(n, np.int32)
            # as in _decode: records too short for the pid (damage) make all of them -1
            if pf is not None and int(dlen.min()) >= pf.offset + pf.size:
                _ringbuf.ints(block, pos, dlen, pf.offset, pf.size, pf.signed, big, pid)
            else:
                pid[...] = -1
        for f in plan["fields"]:
            pieces = out["f:" + f.name]
            if f.loc is None and f.kind == "int":
                _ringbuf.ints(block, pos, dlen, f.offset, f.size, f.signed, big,
                              pieces.reserve(n, f.dtype))
            elif f.loc in ("data", "rel") and f.kind == "str":
                codes = pieces.reserve(n, np.int32)
                values = _ringbuf.strings(block, pos, dlen, f.offset, f.loc == "rel", big,
                                          codes)
                pieces[-1] = _Strs(codes, values)
            else:
                pieces.append(self._decode_field(block, pos, dlen, f))
        # the time piece last: it marks the record set as finished (see _whole_records)
        out["ts"].append(ts)
        out["cpu"].append((cpu, n))

    def _decode_field(self, block, pos, dlen, f, word=None):
        e = self._e
        if f.loc in ("data", "rel"):
            okrow = dlen >= f.offset + 4
            allok = bool(okrow.all())
            if word is None:
                word = _gather_uint(block, pos + (f.offset if allok else
                                                  np.where(okrow, f.offset, 0)), 4, e)
            v = word.astype(np.uint32, copy=False).view(np.int32)     # native order
            start = v & 0xFFFF
            if f.loc == "rel":
                start += f.offset + f.size
            ln = (v >> 16) & 0xFFFF
            np.minimum(ln, dlen - start, out=ln)
            np.maximum(ln, 0, out=ln)
            if not allok:
                ln[~okrow] = 0
                start[~okrow] = 0
            return _extract_strings(block, pos + start, ln, f.kind)
        if f.loc == "tail":
            ln = np.clip(dlen - f.offset, 0, None)
            return _extract_strings(block, pos + np.minimum(f.offset, dlen), ln, f.kind)
        short = dlen < f.offset + f.size
        if f.kind == "int":
            if short.any():
                raw = _gather_uint(block, pos + np.where(short, 0, f.offset), f.size, e)
                raw = np.where(short, 0, raw).astype(raw.dtype)
            else:
                raw = _gather_uint(block, pos + f.offset, f.size, e)
            return _to_int_column(raw, f)
        ln = np.where(short, np.clip(dlen - f.offset, 0, None), f.size)
        return _extract_strings(block, pos + f.offset, ln, f.kind)

    # --------------------------------------------------------- assembling
    def _convert_ts(self, ts):
        t = self._time
        if t["tsc2nsec"] is not None:
            mult, shift, offset = t["tsc2nsec"]
            if mult:
                x = ts - np.uint64(offset)
                lo = (x & np.uint64(0xFFFFFFFF)) * np.uint64(mult)
                hi = (x >> np.uint64(32)) * np.uint64(mult)
                if shift >= 32:
                    ts = (hi + (lo >> np.uint64(32))) >> np.uint64(shift - 32)
                else:
                    ts = (hi << np.uint64(32 - shift)) + (lo >> np.uint64(shift))
        out = ts.view(np.int64) if ts.dtype == np.uint64 else ts.astype(np.int64)
        if t["offset"]:
            out = out + np.int64(t["offset"])
        return out

    def _comm(self, pid, out=None):
        """The comm column of ``pid`` as :class:`_Strs` (codes in ``out`` if given)."""
        lo, hi = (int(pid.min()), int(pid.max())) if len(pid) else (0, -1)
        if lo >= -1 and hi < (1 << 23):
            # pids are small: a direct table instead of hashing
            seen = np.zeros(hi + 2, bool)
            seen[pid + 1] = True
            uniq = np.flatnonzero(seen) - 1
            table = np.zeros(hi + 2, np.int32)
            table[uniq + 1] = np.arange(len(uniq), dtype=np.int32)
            codes = np.take(table, pid + 1, out=out)
        else:
            c, uniq = pd.factorize(pid)
            codes = c.astype(np.int32)
        names = ["<idle>" if p == 0 else self.cmdlines.get(int(p), "<...>")
                 for p in uniq.tolist()]
        return _Strs(codes, names)

    @staticmethod
    def _place(parts, n, order, dtype, scratch, out=None):
        """One array of ``n`` rows from ``parts`` (consumed: the list is emptied as it
        goes), in the row order ``order`` (None: as they come).  ``scratch(dtype)`` gives
        a buffer reused between columns, so the only new memory is the result."""
        dtype = np.dtype(dtype)
        if order is not None and dtype == object:
            tmp = np.concatenate(parts)
            parts.clear()
            return tmp[order]
        if out is None:
            out = _empty(n, dtype)
        tmp = scratch(dtype) if order is not None else out
        at = 0
        while parts:
            p = parts.pop(0)
            tmp[at:at + len(p)] = p
            at += len(p)
            del p
        tuning.trim()
        if order is not None:
            np.take(tmp, order, out=out)
        return out

    @staticmethod
    def _merge_strs(parts):
        """Codes of string parts renumbered into one dictionary (parts consumed)."""
        index = {}
        pieces = []
        while parts:
            p = parts.pop(0)
            remap = np.array([index.setdefault(v, len(index)) for v in p.values],
                             dtype=np.int32)
            ident = len(remap) == 0 or bool((remap == np.arange(len(remap))).all())
            pieces.append(p.codes if ident else remap[p.codes])
            del p
        return pieces, list(index)

    def _build(self, want, acc):
        """Frames from the decoded pieces, sorted by time (ties: cpu, then file order).

        Pieces are moved into the final columns one by one and dropped, and one scratch
        buffer serves all columns of an event, so memory stays near the size of the
        result.  Events are independent: several are built by parallel threads."""
        jobs = [(w, acc.pop(eid)) for eid, w in want.items()]
        rows = [sum(len(x) for x in j[1]["ts"]) for j in jobs]
        big = [r for r in rows if r > (1 << 16)]
        # Each build holds a scratch buffer and the sort order beside its result: in
        # parallel only while that is small, so the peak stays near the result's size.
        nthreads = (min(len(big), tuning.reader_threads()) if sum(rows) <= _PARALLEL_BUILD_ROWS
                    else 1)
        if nthreads > 1:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(nthreads, thread_name_prefix="tracedat") as pool:
                done = list(pool.map(lambda j: self._build_event(*j), jobs))
        else:
            done = [self._build_event(*j) for j in jobs]
        frames = {}
        for d in done:
            frames.update(d)
        return frames

    def _build_event(self, w, a):
        key, fmt, fields, keys = w
        series = {}
        if a["ts"]:
            n = sum(len(x) for x in a["ts"])
            raw = self._place(a.pop("ts"), n, None, np.uint64, None)
            ts = self._convert_ts(raw)
            order = np.argsort(ts, kind="stable")
            if (order[1:] > order[:-1]).all():
                order = None
            else:
                ts = np.take(ts, order, out=_empty(n, ts.dtype))
            # the raw time stamps' memory (8 bytes a row) is the scratch buffer of the
            # other columns from here on, unless the time column still uses it
            box = [raw.view(np.uint8) if order is not None or not np.shares_memory(ts, raw)
                   else None]
            del raw

            def scratch(dtype):
                if box[0] is None:
                    box[0] = _empty(8 * n, np.uint8)
                return box[0][:n * np.dtype(dtype).itemsize].view(dtype)
            series["ts"] = _series(ts)
            cpus = a.pop("cpu")
            if "cpu" in self._base:
                cpu = _empty(n, np.int64)
                tmp = cpu if order is None else scratch(np.int64)
                at = 0
                for c, k in cpus:
                    tmp[at:at + k] = c
                    at += k
                if order is not None:
                    np.take(tmp, order, out=cpu)
                series["cpu"] = _series(cpu)
            if self._want_pid:
                pid = self._place(a.pop("pid"), n, order, np.int64, scratch)
                if "pid" in self._base:
                    series["pid"] = _series(pid)
                if "comm" in self._base:
                    series["comm"] = _series(self._comm(pid, out=scratch(np.int32)))
                del pid
            for f in fields:
                parts = a.pop("f:" + f.name)
                if isinstance(parts[0], _Strs):
                    pieces, values = self._merge_strs(parts)
                    # the codes only live until the column is made: scratch memory
                    codes = self._place(pieces, n, order, np.int32, scratch,
                                        out=scratch(np.int64).view(np.int32)[n:2 * n])
                    s = _Strs(codes, values)
                    if fmt.system == "ftrace" and fmt.name == "print" and f.name == "buf":
                        # trace_marker text ends in "\n"; drop it as trace-cmd report does
                        s = s.map_values(lambda v: v[:-1] if v.endswith("\n") else v)
                    series["f:" + f.name] = _series(s)
                else:
                    series["f:" + f.name] = _series(
                        self._place(parts, n, order, parts[0].dtype, scratch))
            del order, box
        else:
            cols = {"ts": np.zeros(0, np.int64), "cpu": np.zeros(0, np.int64),
                    "pid": np.zeros(0, np.int64), "comm": _Strs(np.zeros(0, np.int32), [])}
            for f in fields:
                cols["f:" + f.name] = (_Strs(np.zeros(0, np.int32), []) if f.kind == "str"
                                       else np.empty(0, dtype=f.dtype))
            series = {k: _series(v) for k, v in cols.items()}
        frames = {}
        for k, flist in keys:
            data = {c: series[c] for c in self._base}
            for c in flist:
                data[field_column(c)] = series["f:" + c]
            frames[k] = pd.DataFrame(data, copy=False)
        return frames
