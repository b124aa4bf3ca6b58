"""The bytes of a trace.dat file as its parts are read: a bounds-checked cursor, the
decompression of v7 chunks (zlib, zstd), and the damage either finds (truncation, corruption),
reported as a message for the user."""

from __future__ import annotations

import zlib


class Damage(Exception):
    """The file is damaged at some point: the message says where, for the user."""


class Cursor:
    """Bounds-checked reader over a bytes-like object in file endianness."""

    def __init__(self, buf, pos, end, endian, what):
        self.buf, self.pos, self.end, self.e, self.what = buf, pos, end, endian, what

    def _need(self, n):
        if n < 0 or self.pos + n > self.end:
            raise Damage(
                f"{self.what}: needs {n} bytes at offset {self.pos} but only "
                f"{max(0, self.end - self.pos)} are left (truncated or corrupt)"
            )

    def take(self, n):
        self._need(n)
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(b)

    def uint(self, n):
        return int.from_bytes(self.take(n), "little" if self.e == "<" else "big")

    def cstr(self, limit=1 << 16):
        stop = min(self.end, self.pos + limit)
        i = self.buf.find(b"\0", self.pos, stop)
        if i < 0:
            raise Damage(f"{self.what}: unterminated string at offset {self.pos}")
        s = bytes(self.buf[self.pos : i]).decode("utf-8", "replace")
        self.pos = i + 1
        return s


_ZSTD = None


def zstd_module():
    global _ZSTD
    if _ZSTD is None:
        import zstandard

        _ZSTD = (zstandard, zstandard.ZstdDecompressor())
    return _ZSTD


def decompress(algo, data, usize, what):
    try:
        if algo == "zstd":
            zstandard, dctx = zstd_module()
            declared = zstandard.frame_content_size(data)
            if declared >= 0 and declared != usize:
                raise Damage(
                    f"{what}: zstd frame holds {declared} bytes, the file says {usize} (corrupt)"
                )
            out = dctx.decompress(data, max_output_size=usize)
        elif algo == "zlib":
            d = zlib.decompressobj()
            out = d.decompress(data, usize + 1)
        else:
            raise Damage(
                f"{what}: compression {algo!r} is not supported "
                "(convert with `trace-cmd convert --compression none`)"
            )
    except Damage:
        raise
    except Exception as e:  # zstd.ZstdError, zlib.error, ...
        raise Damage(f"{what}: the {algo} data is corrupt ({e})") from None
    if len(out) != usize:
        raise Damage(
            f"{what}: {algo} data gave {len(out)} bytes, the file says {usize} "
            "(corrupt or truncated)"
        )
    return out
