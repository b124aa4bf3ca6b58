"""Column-oriented reader for trace-cmd ``trace.dat`` files (versions 6 and 7).

Only the events and fields asked for are decoded, by name, using the event
formats stored in the file.  The ring-buffer pages of every CPU are walked with
numpy: all pages of a block are walked at once, one record per page per step,
collecting only (offset, timestamp, length) of the records whose event id is
wanted.  Each requested field is then decoded for all records of an event with
one gather on a ``uint8`` view of the block.  Uncompressed data is mmapped;
compressed chunks (v7 zlib/zstd) are decompressed a few MiB at a time, so
memory follows the selected columns rather than the file size.

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
import zlib

import numpy as np
import pandas as pd

from .trace import BASE_COLUMNS, TraceError, field_column

# ring buffer constants
_COMMIT_MASK = (1 << 27) - 1
_MISSED_EVENTS = 1 << 31
_MISSED_STORED = 1 << 30
_TS_SHIFT = 27
_TS_MSB = np.uint64(0xF8 << 56)
_TYPE_PADDING, _TYPE_TIME_EXTEND, _TYPE_TIME_STAMP = 29, 30, 31

_BLOCK_BYTES = 16 << 20          # pages walked per step (bounded memory)
_STRMAT_LIMIT = 1 << 25          # max bytes of a padded string matrix
_RELEASE_ABOVE = 1 << 30         # madvise(DONTNEED) decoded pages of files larger than this

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


# --------------------------------------------------------------------------
# event formats

_FIELD_RE = re.compile(
    r"^\s*field:(?P<decl>[^;]*);\s*offset:(?P<off>\d+);\s*size:(?P<size>\d+);"
    r"(?:\s*signed:(?P<signed>-?\d+);)?")
_DECL_RE = re.compile(r"^(?P<type>.*?)(?P<name>[A-Za-z_]\w*)\s*(?P<arr>\[[^\]]*\])?\s*$")
_CHAR_RE = re.compile(r"\b(?:const|volatile|signed)\b")


class Field:
    """One field of an event format.

    ``kind`` is ``"int"`` (1/2/4/8-byte integers), ``"str"`` (char arrays,
    ``__data_loc char[]``) or ``"bytes"`` (other arrays and structs).
    ``loc`` is ``None`` (fixed), ``"data"`` (``__data_loc``), ``"rel"``
    (``__rel_loc``) or ``"tail"`` (zero-size array up to the end of the record).
    """

    __slots__ = ("name", "type", "offset", "size", "signed", "kind", "loc")

    def __init__(self, name, ftype, offset, size, signed, kind, loc):
        self.name, self.type, self.offset, self.size = name, ftype, offset, size
        self.signed, self.kind, self.loc = signed, kind, loc

    @property
    def dtype(self):
        if self.kind == "int":
            return np.dtype(np.uint64 if (self.size == 8 and not self.signed) else np.int64)
        return np.dtype(object)

    def __repr__(self):
        return (f"Field({self.name!r}, {self.type!r}, off={self.offset}, size={self.size}, "
                f"{self.kind}{'/' + self.loc if self.loc else ''})")


def _parse_field(decl, off, size, signed):
    decl = decl.strip()
    m = _DECL_RE.match(decl)
    if not m:
        return None
    ftype, name, arr = m.group("type").strip(), m.group("name"), m.group("arr")
    loc = None
    base = ftype
    if ftype.startswith("__data_loc"):
        loc, base = "data", ftype[len("__data_loc"):]
    elif ftype.startswith("__rel_loc"):
        loc, base = "rel", ftype[len("__rel_loc"):]
    base = base.replace("[]", "").strip()
    is_char = _CHAR_RE.sub("", base).strip() == "char"
    if arr is not None and loc is None and size == 0:
        loc = "tail"
    if signed is None:
        signed = not (base.startswith("unsigned") or re.match(r"^u\d+$", base) or "*" in base)
    else:
        signed = int(signed) != 0
    if loc is not None or arr is not None:
        kind = "str" if is_char else "bytes"
    elif size in (1, 2, 4, 8):
        kind = "int"
    else:
        kind = "bytes"
    return Field(name, ftype, off, size, signed, kind, loc)


class EventFormat:
    """An event format as stored in the file (``events/<system>/<name>/format``)."""

    def __init__(self, system, name, eid, fields, print_fmt):
        self.system, self.name, self.id = system, name, eid
        self.fields = fields            # dict name -> Field (common_* included)
        self.print_fmt = print_fmt

    @property
    def full_name(self):
        return f"{self.system}:{self.name}"

    def user_fields(self):
        return [f for f in self.fields if not f.startswith("common_")]

    def __repr__(self):
        return f"EventFormat({self.full_name!r}, id={self.id}, fields={list(self.fields)})"


def parse_format(text, system):
    """Parse one format file; returns an :class:`EventFormat` or ``None``."""
    name = eid = None
    fields = {}
    print_fmt = ""
    for line in text.splitlines():
        if line.startswith("name:"):
            name = line[5:].strip()
        elif line.startswith("ID:"):
            try:
                eid = int(line[3:].strip())
            except ValueError:
                return None
        elif line.startswith("print fmt:"):
            print_fmt = line[10:].strip()
        else:
            m = _FIELD_RE.match(line)
            if m:
                f = _parse_field(m.group("decl"), int(m.group("off")), int(m.group("size")),
                                 m.group("signed"))
                if f is not None:
                    fields[f.name] = f
    if name is None or eid is None:
        return None
    return EventFormat(system, name, eid, fields, print_fmt)


def _parse_header_page(text, long_size):
    """Offsets of the page header fields (timestamp, commit, data)."""
    hp = {"ts_off": 0, "commit_off": 8, "commit_size": long_size,
          "data_off": 8 + long_size}
    for line in text.splitlines():
        m = _FIELD_RE.match(line)
        if not m:
            continue
        f = _parse_field(m.group("decl"), int(m.group("off")), int(m.group("size")),
                         m.group("signed"))
        if f is None:
            continue
        if f.name == "timestamp":
            hp["ts_off"] = f.offset
        elif f.name == "commit":
            hp["commit_off"], hp["commit_size"] = f.offset, f.size
        elif f.name == "data":
            hp["data_off"] = f.offset
    if hp["commit_size"] not in (4, 8) or hp["ts_off"] != 0 or hp["data_off"] not in (12, 16):
        raise TraceError("the header_page format stored in the file is not one this reader "
                         f"knows ({hp}); the file may be corrupt")
    return hp


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
    if size == 8 and not (pos & 3).any():
        w = block.view(_udt(e, 4))
        a = w[pos >> 2].astype(np.uint64)
        b = w[(pos >> 2) + 1].astype(np.uint64)
        return (a | (b << np.uint64(32))) if e == "<" else ((a << np.uint64(32)) | b)
    m = block[pos[:, None] + np.arange(size)]
    return np.ascontiguousarray(m).view(_udt(e, size)).reshape(-1)


def _to_int_column(raw, f):
    size = f.size
    if f.signed:
        v = raw.view(np.dtype(f"i{size}")) if raw.dtype.itemsize == size else raw
        return v.astype(np.int64)
    return raw.astype(np.uint64 if size == 8 else np.int64)


_BYTE_MASKS = np.frombuffer(b"".join(bytes([0xFF] * k + [0] * (8 - k)) for k in range(9)),
                            dtype=np.uint64)


def _row_codes(mat, lens):
    """Codes and first-row indices of the distinct strings in the rows of ``mat``
    (uint8, width % 8 == 0); row i holds ``lens[i]`` valid bytes."""
    n, w = mat.shape
    words = mat.view(np.uint64)
    h = np.full(n, w, np.uint64)
    mult = np.uint64(0x9E3779B97F4A7C15)
    masked = np.empty_like(words)
    for k in range(words.shape[1]):
        col = words[:, k] & _BYTE_MASKS[np.clip(lens - 8 * k, 0, 8)]
        masked[:, k] = col
        h ^= col
        h *= mult
        h ^= h >> np.uint64(29)
    codes, uniq = pd.factorize(h)
    codes = codes.astype(np.int64)
    # factorize numbers values in order of first appearance
    cm = np.maximum.accumulate(codes)
    first = np.flatnonzero(np.diff(cm, prepend=-1) > 0)
    if not (masked == masked[first[codes]]).all():   # hash collision: the slow way
        _, first, codes = np.unique(masked.view(f"V{w}").reshape(-1),
                                    return_index=True, return_inverse=True)
        codes = codes.reshape(-1).astype(np.int64)
    return codes, first


class _Strs:
    """A string column as (codes, distinct values); cheap to merge and to sort."""

    __slots__ = ("codes", "values")

    def __init__(self, codes, values):
        self.codes, self.values = codes, values

    def __len__(self):
        return len(self.codes)

    @staticmethod
    def concat(parts):
        index = {}
        out = []
        for p in parts:
            remap = np.array([index.setdefault(v, len(index)) for v in p.values], dtype=np.int64)
            out.append(remap[p.codes] if len(p.codes) else np.zeros(0, np.int64))
        codes = np.concatenate(out) if out else np.zeros(0, np.int64)
        return _Strs(codes, list(index))

    def take(self, order):
        return _Strs(self.codes[order], self.values)

    def map_values(self, fn):
        return _Strs(self.codes, [fn(v) for v in self.values])


@functools.lru_cache(maxsize=1)
def _str_dtype():
    return pd.Series([], dtype="str").dtype


def _str_series(strs):
    """pandas Series of dtype "str" from a :class:`_Strs` without per-row objects."""
    dt = _str_dtype()
    if getattr(dt, "storage", None) == "pyarrow":
        try:
            import pyarrow as pa
            arr = pa.array(strs.values, pa.large_string()).take(
                pa.array(strs.codes, pa.int64()))
            return arr.to_pandas(types_mapper=lambda t: dt if pa.types.is_large_string(t)
                                 or pa.types.is_string(t) else None)
        except ImportError:
            pass
    vals = np.empty(len(strs.values), dtype=object)
    vals[:] = strs.values
    return pd.Series(vals[strs.codes], dtype="str")


def _extract_strings(block, starts, lens, kind):
    """Strings (as :class:`_Strs`) or bytes (object array) at ``starts``, ``lens`` bytes each.

    Strings stop at the first NUL.
    """
    n = len(starts)
    lens = np.maximum(lens, 0)
    maxlen = int(lens.max()) if n else 0
    if kind == "str":
        if n == 0 or maxlen == 0:
            return _Strs(np.zeros(n, np.int64), [""])
        width = (maxlen + 7) & ~7
        if n * width <= _STRMAT_LIMIT and len(block) >= width:
            # rows of a sliding-window view: one contiguous copy of `width` bytes per row
            win = np.lib.stride_tricks.sliding_window_view(block, width)
            far = starts > len(block) - width
            mat = win[np.where(far, 0, starts)]
            if far.any():
                for i in np.flatnonzero(far).tolist():
                    seg = block[starts[i]:starts[i] + width]
                    mat[i, :] = 0
                    mat[i, :len(seg)] = seg
            codes, first = _row_codes(mat, lens)
            values = [mat[r, :ln].tobytes().split(b"\0", 1)[0].decode("utf-8", "replace")
                      for r, ln in zip(first.tolist(), lens[first].tolist())]
            return _Strs(codes, values)
    mv = memoryview(block)
    if kind == "str":
        index = {}
        codes = np.empty(n, dtype=np.int64)
        for i, (st, ln) in enumerate(zip(starts.tolist(), lens.tolist())):
            v = mv[st:st + ln].tobytes().split(b"\0", 1)[0].decode("utf-8", "replace")
            codes[i] = index.setdefault(v, len(index))
        return _Strs(codes, list(index))
    out = np.empty(n, dtype=object)
    for i, (st, ln) in enumerate(zip(starts.tolist(), lens.tolist())):
        out[i] = mv[st:st + ln].tobytes()
    return out


def _series(arr):
    if isinstance(arr, _Strs):
        return _str_series(arr)
    return pd.Series(arr, copy=False)


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
        self._hp = _parse_header_page(hp, self.long_size)
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
            self.info.setdefault("cpustats", []).append(s())
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
        e = self._e
        for cpu, off, size in self._buf.cpus:
            try:
                for block in self._cpu_blocks(cpu, off, size, self._buf.compressed,
                                              self._buf.page_size):
                    res, dmg = self._walk(block, self._buf.page_size, lut, cpu, lost)
                    if res is not None and len(res[0]):
                        ids = _gather_uint(block, res[0] + idf.offset, idf.size, e)
                        counts += np.bincount(ids.astype(np.int64), minlength=len(counts))[
                            :len(counts)]
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

    def read(self, events, on_damage="raise"):
        """Decode the requested events.

        ``events`` maps ``"system:name"`` to a list of field names (``None``
        means all non-common fields).  Returns ``{name: DataFrame}``.

        If the data is damaged, ``on_damage="raise"`` (default) raises
        :class:`TraceError` whose ``partial`` holds the frames read before the
        damage; ``on_damage="partial"`` returns those frames instead.  Either way
        ``info["partial"]`` is set and ``info["damage"]`` says where.
        """
        if isinstance(events, (list, tuple, set)):
            events = {e: None for e in events}
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
        try:
            self._scan(want, acc, lost, damage)
        except MemoryError:
            raise TraceError(f"{self.path}: out of memory while decoding; ask for fewer "
                             "events or fields") from None
        except (IndexError, ValueError, OverflowError) as e:
            # a damage pattern the checks above did not catch: still a TraceError
            damage.append(f"undecodable ring-buffer data ({type(e).__name__}: {e})")
        frames = self._build(want, acc)
        for key, fields in empty.items():
            frames[key] = pd.DataFrame({c: pd.Series(dtype=np.int64 if c != "comm" else "str")
                                        for c in BASE_COLUMNS}
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
                if self._size > _RELEASE_ABOVE:
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
        c = self._cur(off, off + 4 + size, what=f"cpu {cpu} compressed data")
        if off + 4 + size > self._size:
            trunc_msg = (f"cpu {cpu}: compressed data runs past the end of the file "
                         f"(truncated)")
        else:
            trunc_msg = None
        try:
            nchunks = c.uint(4)
        except _Damage:
            raise _Damage(trunc_msg or f"cpu {cpu}: compressed data header is missing") from None
        # decompressed chunks are copied into one reused buffer, walked when full
        blk = np.empty(_BLOCK_BYTES, dtype=np.uint8)
        fill = 0
        for i in range(nchunks):
            try:
                csize = c.uint(4)
                usize = c.uint(4)
                if usize % P or usize > (1 << 30):
                    raise _Damage(f"cpu {cpu}: chunk {i} has implausible size {usize}")
                data = c.take(csize)
                out = _decompress(self.compression, data, usize, f"cpu {cpu} chunk {i}")
            except _Damage as d:
                if fill:
                    yield blk[:fill]
                raise _Damage(trunc_msg or str(d)) from None
            if fill + usize > len(blk):
                if fill:
                    yield blk[:fill]
                    fill = 0
                if usize > len(blk):
                    blk = np.empty(usize, dtype=np.uint8)
            blk[fill:fill + usize] = np.frombuffer(out, dtype=np.uint8)
            fill += usize
        if fill:
            yield blk[:fill]

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

    def _walk(self, block, P, lut, cpu, lost):
        """Walk all pages of ``block`` at once (one lane per page).

        Returns ((pos, ts, dlen), damage): data offset in ``block``, raw
        timestamp and data length of the records whose id is set in ``lut``,
        in file order; ``damage`` is a message or None (records on and after
        the damaged page are dropped).
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
        lut_max = len(lut) - 1
        if id_size == 2 and id_off % 2 == 0:
            b16 = block.view(_udt(e, 2))

            def get_ids(sp):
                return b16[(sp + id_off) >> 1]
        else:
            def get_ids(sp):
                return _gather_uint(block, sp + id_off, id_size, e)
        lane = np.flatnonzero(size[:bad_page] > 0)
        cur = base[lane] + data_off
        end = cur + size[lane]
        ts = page_ts[lane]
        out_pos, out_ts, out_len = [], [], []
        bad_lanes = []
        le = e == "<"
        m27 = np.uint32((1 << 27) - 1)
        sh27 = np.uint64(_TS_SHIFT)
        while len(cur):
            wi = cur >> 2
            w = b32[wi]
            if le:
                tl = w & np.uint32(31)
                delta = (w >> np.uint32(5)).astype(np.uint64)
            else:
                tl = w >> np.uint32(27)
                delta = (w & m27).astype(np.uint64)
            tl = tl.astype(np.int64)
            if ((tl - 1) < 28).all() and (tl >= 1).all():
                # fast path: only small data records in this step
                dpos = cur + 4
                dlen = tl << 2
                nxt = dpos + dlen
                ts = ts + delta
                small = None
                broken = nxt > end
            else:
                a0 = b32.take(wi + 1, mode="clip").astype(np.int64)
                small = tl <= 28
                is0 = tl == 0
                dlen = np.where(is0, (a0 - 4 + 3) & ~3, tl << 2)
                dpos = cur + np.where(is0, 8, 4)
                pad = tl == _TYPE_PADDING
                nxt = np.where(small, dpos + dlen, np.where(pad, cur + 4 + a0, cur + 8))
                nxt = np.where(pad, np.minimum(nxt, end), nxt)
                ext = tl == _TYPE_TIME_EXTEND
                stamp = tl == _TYPE_TIME_STAMP
                big = (a0.astype(np.uint64) << sh27) + delta
                ts = np.where(stamp, big | (ts & _TS_MSB), np.where(ext, ts + big, ts + delta))
                broken = (nxt > end) | (small & (dlen < id_off + id_size)) | (nxt <= cur)
            if broken.any():
                bad_lanes.append(lane[broken])
                nxt = np.where(broken, end, nxt)
                small = ~broken if small is None else (small & ~broken)
            if small is None:
                sp = dpos
                ids = get_ids(sp)
                wanted = lut[np.minimum(ids, lut_max)]
                if wanted.any():
                    out_pos.append(sp[wanted])
                    out_ts.append(ts[wanted])
                    out_len.append(dlen[wanted])
            elif small.any():
                sp = dpos[small]
                ids = get_ids(sp)
                wanted = lut[np.minimum(ids, lut_max)]
                if wanted.any():
                    out_pos.append(sp[wanted])
                    out_ts.append(ts[small][wanted])
                    out_len.append(dlen[small][wanted])
            keep = nxt < end
            if keep.all():
                cur = nxt
            else:
                cur, end, ts, lane = nxt[keep], end[keep], ts[keep], lane[keep]
        if bad_lanes:
            first_bad = int(np.concatenate(bad_lanes).min())
            if first_bad < bad_page:
                bad_page = first_bad
                reason = (f"the record chain in page {bad_page} of a block is broken "
                          "(record runs past the page's data)")
        if out_pos:
            pos = np.concatenate(out_pos)
            tsa = np.concatenate(out_ts)
            dl = np.concatenate(out_len)
            order = np.argsort(pos, kind="stable")
            pos, tsa, dl = pos[order], tsa[order], dl[order]
            if bad_page < npages:
                k = np.searchsorted(pos, bad_page * P)
                pos, tsa, dl = pos[:k], tsa[:k], dl[:k]
        else:
            pos = np.zeros(0, np.int64)
            tsa = np.zeros(0, np.uint64)
            dl = np.zeros(0, np.int64)
        damage = f"cpu {cpu}: {reason}" if bad_page < npages else None
        return (pos, tsa, dl), damage

    def _scan(self, want, acc, lost, damage):
        buf = self._buf
        P = buf.page_size
        idf = self._id_field
        lut = np.zeros((1 << (8 * idf.size)) if idf.size <= 2 else (1 << 20), dtype=bool)
        for eid in want:
            if 0 <= eid < len(lut) - 1:
                lut[eid] = True
        e = self._e
        for cpu, off, size in buf.cpus:
            try:
                for block in self._cpu_blocks(cpu, off, size, buf.compressed, P):
                    res, dmg = self._walk(block, P, lut, cpu, lost)
                    if res is not None and len(res[0]):
                        pos, ts, dlen = res
                        if len(want) == 1:
                            eid = next(iter(want))
                            self._decode(block, pos, ts, dlen, cpu, want[eid], acc[eid])
                        else:
                            ids = _gather_uint(block, pos + idf.offset, idf.size, e).astype(np.int64)
                            for eid, w in want.items():
                                sel = ids == eid
                                if sel.any():
                                    self._decode(block, pos[sel], ts[sel], dlen[sel], cpu,
                                                 w, acc[eid])
                    if dmg:
                        damage.append(dmg)
                        break
            except _Damage as d:
                damage.append(str(d))

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

    def _decode(self, block, pos, ts, dlen, cpu, w, out):
        e = self._e
        _, fmt, fields, _ = w
        n = len(pos)
        res = {"ts": ts, "cpu": np.full(n, cpu, dtype=np.int64)}
        pf = fmt.fields.get("common_pid")
        if pf is None or pf.kind != "int":
            pf = None
        # fixed-size integers (and __data_loc words): copy the fixed head of every
        # record once (one row per record) and read the fields through a
        # structured view of the rows
        fixed = [f for f in fields if f.loc is None and f.kind == "int"]
        locs = [f for f in fields if f.loc in ("data", "rel")]
        heads = fixed + locs + ([pf] if pf is not None else [])
        pre = {}
        if heads:
            width = (max(f.offset + (f.size if f.loc is None else 4) for f in heads) + 7) & ~7
            if n and int(pos.max()) + width <= len(block):
                rows = np.lib.stride_tricks.sliding_window_view(block, width)[pos]
                names, formats, offsets = [], [], []
                for i, f in enumerate(heads):
                    size = f.size if f.loc is None else 4
                    signed = f.signed and f.loc is None
                    names.append(f"f{i}")
                    formats.append(("|" if size == 1 else e) + ("i" if signed else "u") + str(size))
                    offsets.append(f.offset)
                rec = rows.view(np.dtype({"names": names, "formats": formats,
                                          "offsets": offsets, "itemsize": width})).reshape(n)
                for i, f in enumerate(heads):
                    if f.loc is None:
                        col = rec[f"f{i}"].astype(f.dtype)
                        short = dlen < f.offset + f.size
                        if short.any():
                            col[short] = 0
                        pre[id(f)] = col
                    else:
                        pre[id(f)] = rec[f"f{i}"].astype(np.int64)
        if pf is not None and int(dlen.min()) >= pf.offset + pf.size:
            pid = pre.get(id(pf))
            if pid is None:
                pid = _to_int_column(_gather_uint(block, pos + pf.offset, pf.size, e), pf)
            res["pid"] = pid.astype(np.int64)
        else:
            res["pid"] = np.full(n, -1, dtype=np.int64)
        for f in fields:
            col = pre.get(id(f)) if f.loc is None else None
            if col is None:
                col = self._decode_field(block, pos, dlen, f, pre.get(id(f)))
            res["f:" + f.name] = col
        for k, v in res.items():          # all columns or none
            out[k].append(v)

    def _decode_field(self, block, pos, dlen, f, word=None):
        e = self._e
        if f.loc in ("data", "rel"):
            okrow = dlen >= f.offset + 4
            if word is not None:
                v = np.where(okrow, word, 0)
            else:
                v = _gather_uint(block, pos + np.where(okrow, f.offset, 0), 4, e).astype(np.int64)
            start = v & 0xFFFF
            if f.loc == "rel":
                start = start + f.offset + f.size
            ln = v >> 16
            ln = np.where(okrow, np.clip(np.minimum(ln, dlen - start), 0, None), 0)
            start = np.where(okrow, start, 0)
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
        out = ts.astype(np.int64)
        if t["offset"]:
            out = out + np.int64(t["offset"])
        return out

    def _comm(self, pid):
        codes, uniq = pd.factorize(pid)
        names = ["<idle>" if p == 0 else self.cmdlines.get(int(p), "<...>") for p in uniq]
        return _Strs(codes.astype(np.int64), names)

    @staticmethod
    def _cat(parts):
        if parts and isinstance(parts[0], _Strs):
            return _Strs.concat(parts)
        return np.concatenate(parts)

    def _build(self, want, acc):
        frames = {}
        for eid, (key, fmt, fields, keys) in want.items():
            a = acc[eid]
            cols = {}
            if a["ts"]:
                ts = self._convert_ts(np.concatenate(a["ts"]))
                order = np.argsort(ts, kind="stable")
                if (order == np.arange(len(order))).all():
                    order = None

                def take(x):
                    if order is None:
                        return x
                    return x.take(order) if isinstance(x, _Strs) else x[order]
                cols["ts"] = take(ts)
                cols["cpu"] = take(np.concatenate(a["cpu"]))
                cols["pid"] = take(np.concatenate(a["pid"]))
                cols["comm"] = self._comm(cols["pid"])
                for f in fields:
                    cols["f:" + f.name] = take(self._cat(a["f:" + f.name]))
                pb = cols.get("f:buf")
                if fmt.system == "ftrace" and fmt.name == "print" and isinstance(pb, _Strs):
                    # trace_marker text ends in "\n"; drop it as trace-cmd report does
                    cols["f:buf"] = pb.map_values(lambda v: v[:-1] if v.endswith("\n") else v)
            else:
                cols = {"ts": np.zeros(0, np.int64), "cpu": np.zeros(0, np.int64),
                        "pid": np.zeros(0, np.int64), "comm": _Strs(np.zeros(0, np.int64), [])}
                for f in fields:
                    cols["f:" + f.name] = (_Strs(np.zeros(0, np.int64), []) if f.kind == "str"
                                           else np.empty(0, dtype=f.dtype))
            for k, flist in keys:
                data = {c: _series(cols[c]) for c in BASE_COLUMNS}
                for c in flist:
                    data[field_column(c)] = _series(cols["f:" + c])
                frames[k] = pd.DataFrame(data, copy=False)
        return frames
