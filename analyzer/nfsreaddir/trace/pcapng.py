"""What a pcapng file says of itself beyond its packets: the drops of its capturing interfaces,
from the interface statistics blocks (a plain pcap keeps none)."""

import gzip
import struct
import zlib

from .magic import PCAPNG_MAGIC, capture_format

ISB, SHB, ISB_IFDROP = 5, 0x0A0D0D0A, 5


def pcapng_drops(path):
    """Packets the capturing interface dropped, from a pcapng file's interface statistics
    blocks (isb_ifdrop; the last block of each interface counts), or None where the file
    says nothing (a plain pcap never does). Walks block headers only."""
    opener = gzip.open if capture_format(path).startswith("gzip") else open
    drops, endian = {}, "<"
    try:
        with opener(path, "rb") as f:
            while True:
                head = f.read(8)
                if len(head) < 8:
                    break
                btype = struct.unpack(endian + "I", head[:4])[0]
                if btype == SHB or head[:4] == PCAPNG_MAGIC:
                    bom = f.read(4)
                    endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
                    length = struct.unpack(endian + "I", head[4:])[0]
                    body = f.read(length - 12)
                else:
                    length = struct.unpack(endian + "I", head[4:])[0]
                    if length < 12:
                        break  # damaged: the reader proper reports it
                    body = f.read(length - 8) if btype == ISB else None
                    if body is None:
                        f.seek(length - 8, 1)
                        continue
                    iface = struct.unpack_from(endian + "I", body, 0)[0]
                    off = 12
                    while off + 4 <= len(body) - 4:
                        code, olen = struct.unpack_from(endian + "HH", body, off)
                        if code == 0:
                            break
                        if code == ISB_IFDROP and olen == 8:
                            drops[iface] = struct.unpack_from(endian + "Q", body, off + 4)[0]
                        off += 4 + (olen + 3) // 4 * 4
    except (EOFError, zlib.error, gzip.BadGzipFile):
        pass  # a gzip stream cut short: its blocks up to the cut are read (the decoder says so)
    return sum(drops.values()) if drops else None
