"""A trace.dat cut short: the v7 section chain checked up to the end of the file, and the
top-level buffer's CPU streams ((cpu, offset, size), compressed) found without the BUFFER
option that trace-cmd writes after the data (``f``: the :class:`.datfile.DatFile` being
opened)."""

from __future__ import annotations

from typing import Literal

from .base import TraceError


def recover_buffer(f, buffer_id):
    """The top-level buffer of a v7 file cut before its BUFFER option: its data section
    found along the section chain, the CPU streams split from what is in it. Each CPU's
    stream starts at a page-aligned offset; a compressed one is its chunk count and
    chunks, so it ends where they do; uncompressed pages carry no CPU number, and a
    stream is taken to end where the page time stamps go back (one CPU's pages are in
    time order). The last stream is taken to be cut (it may run on past the end), and
    the CPUs the option counted (OPT_CPUCOUNT) but the data no longer holds are read as
    lying past the end: the reader then reads up to the cut and says from when events
    may be missing."""
    e: Literal["little", "big"] = "little" if f.endian == "<" else "big"
    found: list[tuple[int, bool]] = []
    off = f.sections_start
    while off + 16 <= f.size and len(found) < 2:
        sid = int.from_bytes(f.mm[off : off + 2], e)
        flags = int.from_bytes(f.mm[off + 2 : off + 4], e)
        size = int.from_bytes(f.mm[off + 8 : off + 16], e)
        if sid == buffer_id:
            found.append((off + 16, bool(flags & 1)))
        off += 16 + size
    if len(found) != 1:
        raise TraceError(
            f"{f.path}: the file is cut short ({f.cut_options}), and "
            + (
                "no event data is left before the cut"
                if not found
                else "it holds the data of several instances whose names were in the lost part"
            )
            + "; re-copy the file or record again"
        )
    start, compressed = found[0]
    P = f.page_size
    streams = _compressed_streams(f, start, P, e) if compressed else _page_streams(f, start, P, e)
    ncpu = f.info.get("cpus")
    if ncpu is None or len(streams) > ncpu:
        ncpu = len(streams) + 1  # how many CPUs is unknown: some may be lost
    cpus = [(cpu, off, size) for cpu, (off, size) in enumerate(streams)]
    cpus += [(cpu, f.size, 1) for cpu in range(len(streams), ncpu)]
    f.info["damage"].append(
        f"the file is cut short ({f.cut_options}); its CPU data was found without "
        f"the BUFFER option: {len(streams)} of {ncpu} CPUs' streams"
    )
    return cpus, compressed


def _compressed_streams(f, pos, P, e):
    """(offset, size) of each compressed CPU stream from ``pos`` on, walked chunk by
    chunk; the size of a stream that runs past the end reaches past it."""
    out: list[tuple[int, int]] = []
    while True:
        pos = -(-pos // P) * P
        if pos + 4 > f.size:
            return out
        nchunks = int.from_bytes(f.mm[pos : pos + 4], e)
        end = pos + 4
        for _ in range(nchunks):
            if end + 8 > f.size:
                break
            end += 8 + int.from_bytes(f.mm[end : end + 4], e)
        else:
            if end <= f.size:
                out.append((pos, end - pos - 4))
                pos = end
                continue
        out.append((pos, f.size - pos))
        return out


def _page_streams(f, pos, P, e):
    """(offset, size) of each uncompressed CPU stream from ``pos`` on: a new stream
    where a page's time stamp is earlier than the page before it; the last one's size
    reaches past the end of the file."""
    pos = -(-pos // P) * P
    npages = max(0, f.size - pos) // P
    if not npages:
        return []
    ts = [int.from_bytes(f.mm[pos + k * P : pos + k * P + 8], e) for k in range(npages)]
    starts = [0] + [k for k in range(1, npages) if ts[k] < ts[k - 1]]
    out = [(pos + a * P, (b - a) * P) for a, b in zip(starts, starts[1:])]
    return out + [(pos + starts[-1] * P, (npages - starts[-1] + 1) * P)]


def section_chain_damage(f):
    """v7 sections follow each other up to the end of the file; a chain that
    runs past the end (or stops short of it) means a truncated file."""
    off = f.sections_start
    n = 0
    while off < f.size and n < 100000:
        if off + 16 > f.size:
            return f"the section header at offset {off} is cut short (file truncated)"
        hdr = bytes(f.mm[off : off + 16])
        e: Literal["little", "big"] = "little" if f.endian == "<" else "big"
        sid = int.from_bytes(hdr[0:2], e)
        size = int.from_bytes(hdr[8:16], e)
        if off + 16 + size > f.size:
            return (
                f"section {sid} at offset {off} needs {size} bytes but the file ends "
                f"at {f.size} (file truncated)"
            )
        off += 16 + size
        n += 1
    return None
