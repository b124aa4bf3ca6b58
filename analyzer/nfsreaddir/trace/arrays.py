"""Array helpers of the trace.dat reader: integers gathered from record bytes, strings keyed
by a hash of their masked bytes (each distinct value decoded once), and the memory the decoded
pieces live in (outside the malloc heap: see :class:`Pieces`)."""

from __future__ import annotations

import mmap

import numpy as np

# pandas (0.5 s to import) only where a pandas column is made (read(), not read_columns()) and
# in the numpy reader's string keys.

_STRMAT_LIMIT = 1 << 25  # max bytes of a padded string matrix


def udt(e, size):
    return np.dtype(f"{e}u{size}")


def gather_uint(block, pos, size, e):
    """Unsigned integers of ``size`` bytes at byte offsets ``pos`` of ``block``."""
    if size == 1:
        return block[pos]
    if len(pos) == 0:
        return np.zeros(0, udt(e, size))
    if size in (2, 4, 8) and not (pos & (size - 1)).any():
        return block.view(udt(e, size))[pos >> (size.bit_length() - 1)]
    if int(pos.max()) + size <= len(block):
        return bytes_view(block, size)[pos].view(udt(e, size))
    m = block[pos[:, None] + np.arange(size)]
    return np.ascontiguousarray(m).view(udt(e, size)).reshape(-1)


def bytes_view(block, width):
    """Items of ``width`` bytes starting at every byte of ``block`` (overlapping; no copy).

    Indexing it with record offsets copies ``width`` bytes per record in one pass."""
    return np.ndarray(
        (max(len(block) - width + 1, 0),), dtype=f"V{width}", buffer=block, strides=(1,)
    )


def to_int_column(raw, f):
    size = f.size
    if f.signed:
        v = raw.view(np.dtype(f"i{size}")) if raw.dtype.itemsize == size else raw
        return v.astype(np.int64)
    return raw.astype(np.uint64 if size == 8 else np.int64)


_BYTE_MASKS = np.frombuffer(
    b"".join(bytes([0xFF] * k + [0] * (8 - k)) for k in range(9)), dtype=np.uint64
)
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
    h = None
    h2: np.ndarray  # (set and read only where nw > 1)
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
    assert h is not None  # (set at k = 0: words has a column, its strings are not all empty)
    import pandas as pd

    codes, _ = pd.factorize(h)
    first = _first_rows(codes)
    if nw > 1 and not (h2 == h2[first][codes]).all():  # hash collision: exact way
        v = np.ascontiguousarray(words).view(f"V{8 * nw}").reshape(-1)
        _, first, codes = np.unique(v, return_index=True, return_inverse=True)
        codes = codes.reshape(-1)
    return codes, first


class Strs:
    """A string column as (codes, distinct values); cheap to merge and to sort."""

    __slots__ = ("codes", "values")

    def __init__(self, codes, values):
        self.codes, self.values = codes, values

    def __len__(self):
        return len(self.codes)

    def map_values(self, fn):
        return Strs(self.codes, [fn(v) for v in self.values])


def narrowest(k):
    """The smallest signed integer type for the codes of ``k`` distinct values (and -1)."""
    return np.dtype(np.int8 if k < (1 << 7) else np.int16 if k < (1 << 15) else np.int32)


def _str_series(strs):
    """A categorical pandas Series from a :class:`Strs` without per-row objects.

    The categories are the distinct values, sorted (so the same data gives the same
    column whatever the block or CPU order); the codes are the smallest integer type
    that holds them (int8 for up to 127 values).  Values are ``str``; ``==``,
    ``isin``, ``.str`` and ``astype(str)`` work as on a string column."""
    import pandas as pd

    values = strs.values
    if not len(values):
        # (pandas takes a list of categories; pandas-stubs ask an Index of a str, int or float type)
        return pd.Series(pd.Categorical.from_codes(np.full(len(strs), -1, np.int8), []))  # type: ignore[call-overload]
    uniq = sorted(set(values))
    pos = {v: i for i, v in enumerate(uniq)}
    k = len(uniq)
    cdt = narrowest(k)
    remap = np.array([pos[v] for v in values], dtype=cdt)
    codes = np.asarray(strs.codes)
    out = empty(len(codes), cdt)
    if len(codes) and len(values) == 1:
        out[...] = 0
    else:
        np.take(remap, codes, out=out)
    cat = pd.Categorical.from_codes(out, pd.Index(uniq), validate=False)
    return pd.Series(cat, copy=False)


def extract_strings(block, starts, lens, kind):
    """Strings (as :class:`Strs`, int32 codes) or bytes (object array) at ``starts``,
    ``lens`` bytes each.  Strings stop at the first NUL."""
    n = len(starts)
    lens = np.maximum(lens, 0)
    maxlen = int(lens.max()) if n else 0
    if kind == "str":
        if n == 0 or maxlen == 0:
            return Strs(np.zeros(n, np.int32), [""])
        width = (maxlen + 7) & ~7
        if n * width <= _STRMAT_LIMIT and len(block) >= width:
            # one copy of `width` bytes per row, masked to its length and hashed
            far = starts > len(block) - width
            mat = bytes_view(block, width)[np.where(far, 0, starts) if far.any() else starts]
            raw = mat.view(np.uint8).reshape(n, width)
            for i in np.flatnonzero(far).tolist():
                seg = block[starts[i] : starts[i] + width]
                raw[i, :] = 0
                raw[i, : len(seg)] = seg
            codes, first = _row_codes(mat.view(np.uint64).reshape(n, width // 8), lens)
            values = [
                raw[r, :ln].tobytes().split(b"\0", 1)[0].decode("utf-8", "replace")
                for r, ln in zip(first.tolist(), lens[first].tolist())
            ]
            return Strs(codes.astype(np.int32), values)
    mv = memoryview(block)
    if kind == "str":
        index: dict[str, int] = {}
        codes = np.empty(n, dtype=np.int32)
        for i, (st, ln) in enumerate(zip(starts.tolist(), lens.tolist())):
            v = mv[st : st + ln].tobytes().split(b"\0", 1)[0].decode("utf-8", "replace")
            codes[i] = index.setdefault(v, len(index))
        return Strs(codes, list(index))
    out = np.empty(n, dtype=object)
    for i, (st, ln) in enumerate(zip(starts.tolist(), lens.tolist())):
        out[i] = mv[st : st + ln].tobytes()
    return out


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def empty(n, dtype):
    """np.empty for result columns: large ones are mapped with their pages already in
    place (MAP_POPULATE: one system call instead of a page fault per 4 KiB page), outside
    the malloc heap (which then holds only temporaries, given back when a phase ends)."""
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if _POPULATE and nbytes >= (1 << 20) and dtype.kind != "O":
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
        m = mmap.mmap(-1, max(n * dtype.itemsize, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        return np.frombuffer(m, dtype, count=n)
    except (OSError, ValueError, AttributeError):
        return np.empty(n, dtype)


def series(arr):
    if isinstance(arr, Strs):
        return _str_series(arr)
    import pandas as pd

    return pd.Series(arr, copy=False)


_CHUNK_BYTES = 8 << 20  # the decoded pieces are packed into chunks of this size


class Pieces(list):
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
                big = _mapped(n, arr.dtype)  # large: a piece of its own
                big[...] = arr
                return big
            c = self._chunk = _mapped(_CHUNK_BYTES // arr.dtype.itemsize, arr.dtype)
            self._fill = 0
        v = c[self._fill : self._fill + n]
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
        v = c[self._fill : self._fill + n]
        self._fill += n
        super().append(v)
        return v

    def append(self, x):
        if isinstance(x, np.ndarray) and x.dtype != object and x.ndim == 1:
            x = self._pack(x)
        elif isinstance(x, Strs) and x.codes.dtype != object:
            x = Strs(self._pack(x.codes), x.values)
        super().append(x)

    def release(self):
        """No more appends: drop the reference to the current chunk."""
        self._chunk = None
