"""The ring-buffer data of one CPU of a trace.dat as blocks of whole pages, 16 MiB of pages at a
time (bounded memory): mmapped pages as they are, compressed chunks (v7 zlib/zstd) decompressed
into a reused block: zstd straight into the block by :mod:`nfsreaddir._zchunks` (libzstd) with
the compiled walk, through python-zstandard chunk by chunk with the pure Python readers
(NFSRT_READER=numpy). A stream
can be cut into stretches read apart (by parallel threads). Damage (truncation, a corrupt
chunk) stops a stream: :class:`.raw.Damage` with the message."""

from __future__ import annotations

import mmap
import struct
import threading

import numpy as np

from . import ringbuf
from .raw import Damage, decompress, zstd_module

try:
    # zstd chunks by libzstd (built where zstd.h was found); a C extension without a stub, so
    # mypy cannot see its attributes.
    from .. import _zchunks  # type: ignore[attr-defined]
except ImportError:
    _zchunks = None

BLOCK_BYTES = 16 << 20  # pages walked per step (bounded memory)
RELEASE_ABOVE = 32 << 20  # madvise(DONTNEED) decoded pages of files larger than this

_local = threading.local()


def _inflate_block(size):
    """This thread's block of ``size`` bytes for inflated chunks: one per thread, reused by
    every stretch of stream it reads (a fresh 16 MiB would be faulted in again for each);
    the reader's threads end with the scan, and :func:`drop_inflate_block` frees the calling
    thread's."""
    blk = getattr(_local, "blk", None)
    if blk is None or len(blk) != size:
        blk = _local.blk = np.empty(size, dtype=np.uint8)
    return blk


def drop_inflate_block():
    _local.__dict__.pop("blk", None)


def _inflate_wanted():
    """Whether zstd chunks go through the compiled inflate: with the compiled walk (not
    built: an error); with the pure Python readers, python-zstandard."""
    if ringbuf.compiled() is None:
        return False
    ringbuf.built(_zchunks, "_zchunks")
    return True


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
    return (
        f"cpu {cpu} chunk {i}: zstd data gave {a} bytes, the file says {b} (corrupt or truncated)"
    )


class Streams:
    """The CPU streams of one buffer (:class:`.datfile.Buffer`) of a mapped trace.dat."""

    def __init__(self, mm, size, endian, compression, buf):
        self._mm, self._size, self._e = mm, size, endian
        self.compression = compression
        self.buf = buf

    def blocks(self, cpu, off, size, stretch=None, block_bytes=None):
        """Yield uint8 arrays of whole pages; raise Damage at the first damage. ``stretch``
        (from :meth:`stretches`): the part of the stream to read; None, all of it.
        ``block_bytes``: the pages of a block, at most (default BLOCK_BYTES) where the
        pages are mapped or zstd chunks inflated by the compiled inflate."""
        block_bytes = block_bytes or BLOCK_BYTES
        P = self.buf.page_size
        compressed = self.buf.compressed
        if not size:
            return
        if off >= self._size:
            raise Damage(
                f"cpu {cpu}: data offset {off} is past the end of the file "
                f"({self._size} bytes; truncated)"
            )
        release = self._size > RELEASE_ABOVE
        if not compressed:
            end = off + size
            trunc = end > self._size
            avail = min(end, self._size) - off
            npages = avail // P
            step = max(1, block_bytes // P) * P
            pos, stop, last = (off, off + npages * P, True) if stretch is None else stretch[:3]
            while pos < stop:
                n = min(step, stop - pos)
                yield np.frombuffer(self._mm, dtype=np.uint8, count=n, offset=pos)
                if release:
                    self.release(pos, n)
                pos += n
            if not last:
                return
            if trunc:
                raise Damage(
                    f"cpu {cpu}: data runs past the end of the file (needs "
                    f"{size} bytes at offset {off}, file has {self._size}; truncated)"
                )
            if avail % P:
                raise Damage(f"cpu {cpu}: data size {size} is not a multiple of the page size {P}")
            return
        # the size in the BUFFER option does not count the 4-byte chunk count
        mm = self._mm
        stop = min(off + 4 + size, self._size)
        if off + 4 + size > self._size:
            trunc_msg = f"cpu {cpu}: compressed data runs past the end of the file (truncated)"
        else:
            trunc_msg = None
        if off + 4 > stop:
            raise Damage(trunc_msg or f"cpu {cpu}: compressed data header is missing")
        if stretch is None:
            nchunks = struct.unpack_from(self._e + "I", mm, off)[0]
            stretch = (off + 4, nchunks, True, 0, 0)
        pos, nchunks, last, first, _ = stretch
        if self.compression == "zstd" and _inflate_wanted():
            yield from self._inflated(
                cpu,
                pos,
                stop,
                nchunks,
                P,
                trunc_msg if last else None,
                release,
                first,
                block_bytes,
            )
        else:
            yield from self._decompressed(cpu, pos, stop, nchunks, P, trunc_msg, release)

    def stretches(self, cpu, off, size, step):
        """One CPU's stream cut into stretches of about ``step`` stored bytes that can be read
        apart, in order: (offset, end offset or chunks, last, first chunk's index, first
        page's index) of pages or of zstd chunks (their boundaries and the bytes before them
        from the headers, :func:`_zchunks.chain`); the whole stream, one stretch, where it
        cannot be cut (other compression, damage at its start). Damage in a stretch is the
        damage of the whole stream there: the caller drops what the stretches after it hold."""
        P = self.buf.page_size
        if not self.buf.compressed:
            stop = off + min(size, max(0, self._size - off)) // P * P
            step = max(P, step // P * P)
            cuts = list(range(off, stop, step))[1:]
            return (
                [(a, b, b == stop, 0, (a - off) // P) for a, b in zip([off] + cuts, cuts + [stop])]
                if stop > off
                else [None]
            )
        stop = min(off + 4 + size, self._size)
        if not (self.compression == "zstd" and _inflate_wanted()) or off + 4 > stop:
            return [None]
        nchunks = struct.unpack_from(self._e + "I", self._mm, off)[0]
        cuts = _zchunks.chain(self._mm, off + 4, stop, nchunks, self._e == ">", step)
        starts = [(off + 4, 0, 0)] + cuts
        ends = [i for _, i, _ in cuts] + [nchunks]
        return [
            (pos, end - first, end == nchunks, first, inflated // P)
            for (pos, first, inflated), end in zip(starts, ends)
        ]

    def _inflated(self, cpu, pos, stop, nchunks, P, trunc_msg, release, first, block_bytes):
        """The blocks of a zstd stream from its chunk ``first``, each filled by one call of the
        compiled inflate."""
        blk = _inflate_block(block_bytes)
        i = first
        nchunks += first
        while i < nchunks:
            start = pos
            pos, k, fill, why, a, b, text = _zchunks.inflate(
                self._mm, pos, stop, nchunks - i, blk, P, self._e == ">"
            )
            i += k
            if fill:
                yield blk[:fill]
            if release:
                self.release(start, pos - start)
            if why:
                raise Damage(trunc_msg or _chunk_damage(cpu, i, why, a, b, text))
            if not k:
                blk = np.empty(a, dtype=np.uint8)  # one chunk larger than the block

    def _decompressed(self, cpu, pos, stop, nchunks, P, trunc_msg, release):
        """The blocks of a compressed stream, decompressed chunk by chunk in Python (the
        fallback of :meth:`_inflated`, and zlib)."""
        mm = self._mm
        hdr = struct.Struct(self._e + "II")
        done = pos
        algo = self.compression
        if algo == "zstd":
            zstandard, _ = zstd_module()
            dctx = zstandard.ZstdDecompressor()  # one per stream: not thread safe
            content_size = zstandard.frame_content_size
        # decompressed chunks are copied into one reused buffer, walked when full
        blk = np.empty(BLOCK_BYTES, dtype=np.uint8)
        fill = 0
        for i in range(nchunks):
            try:
                if pos + 8 > stop:
                    raise Damage(_chunk_damage(cpu, i, _HEADER_CUT))
                csize, usize = hdr.unpack_from(mm, pos)
                if usize % P or usize > (1 << 30):
                    raise Damage(_chunk_damage(cpu, i, _BAD_SIZE, usize))
                if pos + 8 + csize > stop:
                    raise Damage(_chunk_damage(cpu, i, _DATA_CUT, csize, pos + 8))
                data = mm[pos + 8 : pos + 8 + csize]
                pos += 8 + csize
                if algo == "zstd":
                    # the fast path of _decompress (same checks)
                    try:
                        declared = content_size(data)
                        if declared >= 0 and declared != usize:
                            raise Damage(_chunk_damage(cpu, i, _SIZE_MISMATCH, declared, usize))
                        out = dctx.decompress(data, max_output_size=usize)
                    except Damage:
                        raise
                    except Exception as e:
                        raise Damage(_chunk_damage(cpu, i, _CORRUPT, text=str(e))) from None
                    if len(out) != usize:
                        raise Damage(_chunk_damage(cpu, i, _SHORT, len(out), usize))
                else:
                    out = decompress(algo, data, usize, f"cpu {cpu} chunk {i}")
            except Damage as d:
                if fill:
                    yield blk[:fill]
                raise Damage(trunc_msg or str(d)) from None
            if fill + usize > len(blk):
                if fill:
                    yield blk[:fill]
                    fill = 0
                    if release:
                        self.release(done, pos - done)
                        done = pos
                if usize > len(blk):
                    blk = np.empty(usize, dtype=np.uint8)
            blk[fill : fill + usize] = np.frombuffer(out, dtype=np.uint8)
            fill += usize
        if fill:
            yield blk[:fill]
        if release:
            self.release(done, pos - done)

    def release(self, pos, n):
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
