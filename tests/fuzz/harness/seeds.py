"""The seeds of the fuzz targets, from the recorded fixtures (tests/fixtures): into
OUT/<target>/, one file an input, in each harness's input format (its source's head comment).

    ringbuf     a few pages of each CPU's data of some trace.dat fixtures, inflated, after the
                8 bytes of their layout
    zchunks     the first zstd chunks of those CPU streams as stored, after 4 bytes of settings
    wiredecode  the start of some captures, as pcap and converted to pcapng (editcap), and a
                whole small one gzip'd
    slab        the first kmem allocations and frees of the kmem fixture as the tally's pieces
    text        the first lines of `trace-cmd report` of some trace.dat fixtures

Usage: .venv/bin/python tests/fuzz/harness/seeds.py OUT"""

from __future__ import annotations

import gzip
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

TOP = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(TOP / "analyzer"))

from nfsreaddir.trace.datfile import DatFile  # noqa: E402
from nfsreaddir.trace.streams import Streams  # noqa: E402

FIX = TOP / "tests" / "fixtures"
DATS = ["5.10-v4.1/idle.dat", "6.1-v3/modified.dat", "7.3-v4.1/idle.dat", "kmem-host/kmem.dat"]
CAPTURES = [
    "5.10-v4.1-cap/idle.pcap.gz",
    "6.1-v3-cap/modified.pcap.gz",
    "7.3-v4.2-xfs-cap/idle.pcap.gz",
]
PAGES = 4  # pages of a ringbuf seed
CAPTURE_BYTES = 48 << 10  # of a wiredecode seed
TEXT_LINES = 30  # of a text seed (the reader's time is pandas', per read)


def ringbuf_layout(lay):
    """The 8 bytes of a ringbuf input for a trace's layout (harness/ringbuf.c)."""
    assert lay.page_size == 4096, lay
    flags = (4 if lay.commit_size == 4 else 0) | (8 if lay.big else 0)
    flags |= (16 if lay.long_size == 4 else 0) | 32
    return bytes([flags, lay.commit_off, lay.data_off, lay.id_off, lay.id_size - 1, 8, 3, 1])


def trace_seeds(out):
    for name in DATS:
        f = DatFile(str(FIX / name))
        lay = f.layout()
        streams = Streams(f.mm, f.size, f.endian, f.compression, f.buf)
        tag = name.replace("/", "-")
        for cpu, off, size in f.buf.cpus[:2]:
            if not size:
                continue
            for block in streams.blocks(cpu, off, size):
                pages = len(block) // lay.page_size
                for first in sorted({0, pages // 2, max(0, pages - PAGES)}):
                    at = first * lay.page_size
                    (out / "ringbuf" / f"{tag}-cpu{cpu}-p{first}").write_bytes(
                        ringbuf_layout(lay) + bytes(block[at : at + PAGES * lay.page_size])
                    )
                break
            if f.compression == "zstd":
                # the stored chunks: a 4-byte count, then per chunk its sizes and frame
                pos, stop = off + 4, min(off + 4 + size, f.size)
                for _ in range(3):
                    pos += 8 + struct.unpack_from(f.endian + "I", f.mm, pos)[0]
                    if pos >= stop:
                        break
                settings = bytes([int(f.endian == ">"), 0, 0, 255])
                (out / "zchunks" / f"{tag}-cpu{cpu}").write_bytes(
                    settings + bytes(f.mm[off + 4 : min(pos, stop)])
                )
        f.close()
        for opts in ([], ["-R"]):
            text = subprocess.run(
                ["trace-cmd", "report", *opts, str(FIX / name)], capture_output=True, text=True
            ).stdout
            lines = text.splitlines(keepends=True)
            for at in (1, len(lines) // 2):  # (the first line: cpus=N)
                seed = "".join(lines[:1] + lines[at : at + TEXT_LINES])
                (out / "text" / f"{tag}{''.join(opts)}-{at}").write_text(seed)


def slab_seeds(out):
    """Pieces of kmem_cache_alloc and _free columns (harness/slab.c's input): the cache of an
    event is its object size's place among the sizes met (key), through a table of them."""
    import numpy as np

    from nfsreaddir.trace import open_trace

    t = open_trace(str(FIX / "kmem-host" / "kmem.dat"))
    read = t.read_pieces(
        {"kmem:kmem_cache_alloc": ["ptr", "bytes_alloc"], "kmem:kmem_cache_free": ["ptr"]},
        base=("ts",),
    )
    for at in (0, 1000):
        body = b""
        npieces = 0
        sizes = []
        for ev, alloc in (("kmem:kmem_cache_alloc", 1), ("kmem:kmem_cache_free", 0)):
            for piece in read[ev][:2]:
                cols = {k: np.asarray(v)[at : at + 31] for k, v in piece.items()}
                n = len(cols["ts"])
                if alloc:
                    sizes += [s for s in cols["bytes_alloc"].tolist() if s not in sizes]
                key = np.array(
                    [
                        sizes.index(s) if alloc else -1
                        for s in (cols["bytes_alloc"] if alloc else cols["ts"])
                    ],
                    np.int16,
                )
                table = np.arange(16, dtype=np.int32) % 16
                body += bytes([alloc | 2 | (1 << 2), n, len(table) - 1])
                body += cols["ts"].astype("<i8").tobytes() + cols["ptr"].astype("<u8").tobytes()
                if alloc:
                    body += cols["bytes_alloc"].astype("<i8").tobytes()
                body += key.astype("<i2").tobytes() + table.astype("<i4").tobytes()
                npieces += 1
        (out / "slab" / f"kmem-{at}").write_bytes(bytes([npieces - 1, 15]) + body)
    t.close()


def capture_seeds(out):
    editcap = shutil.which("editcap")
    for name in CAPTURES:
        raw = gzip.decompress((FIX / name).read_bytes())
        tag = name.replace("/", "-").removesuffix(".gz")
        (out / "wiredecode" / tag).write_bytes(raw[:CAPTURE_BYTES])
        if editcap:
            with tempfile.TemporaryDirectory() as d:
                src, dst = Path(d) / "in.pcap", Path(d) / "out.pcapng"
                src.write_bytes(raw[: CAPTURE_BYTES * 4])
                subprocess.run([editcap, "-F", "pcapng", src, dst], check=True)
                (out / "wiredecode" / (tag + "ng")).write_bytes(dst.read_bytes()[:CAPTURE_BYTES])
    small = min((FIX / n for n in CAPTURES), key=lambda p: p.stat().st_size)
    head = gzip.decompress(small.read_bytes())[: CAPTURE_BYTES // 2]
    (out / "wiredecode" / "gzip").write_bytes(gzip.compress(head))


def main(argv):
    out = Path(argv[1])
    for t in ("ringbuf", "zchunks", "wiredecode", "slab", "text"):
        (out / t).mkdir(parents=True, exist_ok=True)
    trace_seeds(out)
    slab_seeds(out)
    capture_seeds(out)


if __name__ == "__main__":
    main(sys.argv)
