"""Derive test captures from recorded ones by small, stated rewrites of a pcap file.

Each function takes and returns a list of Packet (one pcap record each) and changes only what
its name says. IP and TCP checksums are left as they were: tshark does not validate them unless
told to (tcp.check_checksum and ip.check_checksum are off by default), so a rewritten packet
decodes as the recorded one did. Only what the reproducers record is handled: pcap (not pcapng),
Ethernet link type (tcpdump on lo), IPv4, TCP.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass

ETH_LEN = 14
LINKTYPE_ETHERNET = 1
NFS_PORT = 2049


@dataclass
class Packet:
    sec: int
    frac: int  # microseconds (or nanoseconds in a nanosecond pcap)
    data: bytes
    orig_len: int

    # -- the TCP segment inside -------------------------------------------------------------
    def _ip(self):
        return ETH_LEN

    def _tcp(self):
        ip = self._ip()
        if len(self.data) < ip + 20 or self.data[ip] >> 4 != 4 or self.data[ip + 9] != 6:
            return None
        return ip + (self.data[ip] & 0x0F) * 4

    def ports(self):
        t = self._tcp()
        return struct.unpack_from("!HH", self.data, t) if t is not None else None

    def payload_offset(self):
        t = self._tcp()
        return None if t is None else t + (self.data[t + 12] >> 4) * 4

    def payload(self):
        off = self.payload_offset()
        return b"" if off is None else self.data[off:]


def read(path):
    """(global header, packets) of a pcap file, gzip'd or not."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    head = raw[:24]
    if head[:4] != b"\xd4\xc3\xb2\xa1" and head[:4] != b"\x4d\x3c\xb2\xa1":
        raise ValueError(f"{path}: not a little-endian pcap file")
    if struct.unpack_from("<I", head, 20)[0] != LINKTYPE_ETHERNET:
        raise ValueError(f"{path}: not an Ethernet capture")
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, frac, incl, orig = struct.unpack_from("<IIII", raw, off)
        out.append(Packet(sec, frac, raw[off + 16 : off + 16 + incl], orig))
        off += 16 + incl
    return head, out


def write(path, head, packets):
    with open(path, "wb") as f:
        f.write(head)
        for p in packets:
            f.write(struct.pack("<IIII", p.sec, p.frac, len(p.data), p.orig_len))
            f.write(p.data)


def speed_up(packets, factor, unit=1_000_000):
    """Every gap between packets `factor` times shorter, from the first packet on: a guest
    under emulation (TCG) runs many times slower than the machines public captures come
    from, and what a coarse clock ties depends on how close the packets are."""
    if not packets:
        return packets
    t0 = packets[0].sec * unit + packets[0].frac
    for p in packets:
        t = t0 + (p.sec * unit + p.frac - t0) // factor
        p.sec, p.frac = divmod(t, unit)
    return packets


def quantize(packets, tick):
    """Timestamps rounded down to multiples of `tick` (in the file's fraction unit), as a
    capture with a coarse clock has them; the frames stay in their order."""
    for p in packets:
        p.frac -= p.frac % tick
    return packets


def set_port(packets, old, new):
    """Every TCP port `old`, as source or destination, made `new`: the same traffic as from a
    client bound to `new` (or to a server listening there)."""
    out = []
    for p in packets:
        ports = p.ports()
        d = bytearray(p.data)
        for i, port in enumerate(ports or ()):
            if port == old:
                struct.pack_into("!H", d, p._tcp() + 2 * i, new)
        out.append(Packet(p.sec, p.frac, bytes(d), p.orig_len))
    return out


def shift(packets, seconds):
    """The same packets, `seconds` later."""
    return [Packet(p.sec + seconds, p.frac, p.data, p.orig_len) for p in packets]


def coalesce(packets, max_ip=65535):
    """The server's replies joined two by two into one TCP segment, as segmentation offload on
    the loopback gives them to tcpdump when several readers keep the server busy (several RPC
    messages in one frame). Segments without payload (bare ACKs, keep-alives) are dropped
    first: they carry no RPC, and one left between two joined segments would make tshark take
    the joined one for a retransmission. The joined segment takes the first one's headers and
    sequence number and stands at the later one's place and time, so that every reply still
    comes after its call. A join that would pass max_ip bytes of IP packet is not made."""
    pending = {}  # (src port, dst port) -> index in out of a reply waiting for its pair
    out = []
    for p in packets:
        ports = p.ports()
        body = p.payload()
        if ports and not body:
            continue
        if not ports or ports[0] != NFS_PORT:
            out.append(p)
            continue
        first = pending.pop(ports, None)
        a = out[first] if first is not None else None
        if a is None or len(a.data) - ETH_LEN + len(body) > max_ip:
            pending[ports] = len(out)
            out.append(p)
            continue
        d = bytearray(a.data + body)
        struct.pack_into("!H", d, ETH_LEN + 2, len(d) - ETH_LEN)
        out[first] = None
        out.append(Packet(p.sec, p.frac, bytes(d), a.orig_len + len(body)))
    return [p for p in out if p is not None]


def set_rpc_version(packets, old, new, program=100003):
    """The program version of every ONC RPC call of `program` that starts a TCP segment (its
    record mark, xid, type 0, RPC version 2, program, version) rewritten from old to new."""
    out = []
    for p in packets:
        off = p.payload_offset()
        body = p.payload()
        d = p.data
        if len(body) >= 24:
            _, _, mtype, rpcvers, prog, vers = struct.unpack_from("!IIIIII", body, 0)
            if mtype == 0 and rpcvers == 2 and prog == program and vers == old:
                b = bytearray(d)
                struct.pack_into("!I", b, off + 20, new)
                d = bytes(b)
        out.append(Packet(p.sec, p.frac, d, p.orig_len))
    return out


def _with_payload(p, seq, body):
    """The packet with its TCP payload and sequence number replaced (the IPv4 total length
    with them)."""
    off, ip = p.payload_offset(), ETH_LEN
    d = bytearray(p.data[:off] + body)
    struct.pack_into("!H", d, ip + 2, len(d) - ip)
    struct.pack_into("!I", d, p._tcp() + 4, seq)
    return Packet(p.sec, p.frac, bytes(d), len(d))


def _seq(p):
    return struct.unpack_from("!I", p.data, p._tcp() + 4)[0]


def nfs_segments(packets):
    """The indexes of the packets that carry TCP payload to or from the NFS port."""
    return [i for i, p in enumerate(packets) if p.payload() and NFS_PORT in (p.ports() or ())]


def drop(packets, indexes):
    """The packets without those at `indexes`: segments the capture lost, as tcpdump's drops
    lose them."""
    gone = set(indexes)
    return [p for i, p in enumerate(packets) if i not in gone]


def drop_every(packets, n, first=0):
    """Every n-th NFS segment (nfs_segments) from the `first`-th on, dropped."""
    return drop(packets, nfs_segments(packets)[first::n])


def snap(packets, i, keep):
    """Packet i cut after `keep` bytes of its TCP payload, its length on the wire kept: a
    frame cut by the snaplen."""
    p = packets[i]
    out = list(packets)
    out[i] = Packet(p.sec, p.frac, p.data[: p.payload_offset() + keep], p.orig_len)
    return out


def overlap(packets, i, n):
    """Packet i sent again with the first n bytes of the next segment of its direction: a
    retransmission that overlaps data not seen yet, in place of the segment it overlaps the
    start of (whose rest follows as a segment of its own)."""
    p, out = packets[i], list(packets)
    later = range(i + 1, len(packets))
    j = next(k for k in later if packets[k].ports() == p.ports() and packets[k].payload())
    q = packets[j]
    out[j] = _with_payload(q, _seq(q) + n, q.payload()[n:])
    out.insert(j, _with_payload(p, _seq(p), p.payload() + q.payload()[:n]))
    return out
