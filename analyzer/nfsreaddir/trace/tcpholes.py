"""Where a capture lost bytes of its NFS connections, and when: the stretches of each TCP
stream that a packet dropped while capturing, or a snaplen, took away.

tcpdump's drop count says how many packets were lost, never which; but a TCP stream numbers
its bytes, so a segment whose sequence number lies past the bytes seen so far in its
direction shows that the bytes between were sent and not captured, between the last segment
seen in that direction and this one; a frame cut by the snaplen lost the rest of its own
payload. Each such stretch is placed on its connection's client and in time, so that only
the READDIRs next to it are in doubt (model/wire.py), not every READDIR of the capture. A
segment that arrives late, out of order, counts as a hole too: that only widens a range.
Bytes lost after a stream's last captured segment leave no gap, and hide nothing that was
seen before them. NFS over UDP numbers nothing: `udp` counts its frames, whose loss cannot be
placed. A file (or its gzip stream) cut short is walked up to the cut.

Headers only are read, never the payloads, in Python: it runs only on captures tshark decoded
that lost something (a drop count, a snaplen); the compiled decoder finds the same holes as it
reads (trace/wiredecode, Capture.holes)."""

from __future__ import annotations

import gzip
import ipaddress
import struct
import zlib

from ..recordtype import field, record
from .magic import capture_format
from .tshark_fields import endpoint

_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
_SHB, _IDB, _EPB = 0x0A0D0D0A, 1, 6
_U32 = 1 << 32


@record
class Holes:
    """What the walk found: holes as (client, from ns, to ns, snaplen: whether the snaplen
    cut it, not a drop, bytes lost, to_server: whether they were on their way to the server,
    where calls go, not replies), and the frames of NFS over UDP."""

    holes: list = field(default_factory=list)
    udp: int = 0


def _packets(f, kind):
    """(linktype, ts ns, caplen, wire len, data) of each packet of an open capture file."""
    head = f.read(24)
    if kind == "pcap" and head[:4] in _PCAP_MAGIC:
        e, mult = _PCAP_MAGIC[head[:4]]
        linktype = struct.unpack(e + "I", head[20:24])[0] & 0x0FFFFFFF
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, caplen, length = struct.unpack(e + "IIII", rec)
            data = f.read(caplen)
            if len(data) < caplen:
                return
            yield linktype, sec * 10**9 + frac * mult, caplen, length, data
        return
    # pcapng: interfaces (link type, time resolution) and enhanced packet blocks.
    ifaces: list[tuple[int, int]]
    buf, e, ifaces = head, "<", []
    while True:
        if len(buf) < 12:
            buf += f.read(12 - len(buf))
            if len(buf) < 12:
                return
        btype = struct.unpack("<I", buf[:4])[0]
        if btype == _SHB:
            e = "<" if buf[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
            ifaces = []
        length = struct.unpack(e + "I", buf[4:8])[0]
        if length < 12:
            return  # damaged: the decoder proper says so
        body = buf[8:] + f.read(length - len(buf))
        buf = b""
        if len(body) < length - 8:
            return
        if btype == _IDB:
            ifaces.append(_interface(body, e))
        elif btype == _EPB and len(body) >= 20:
            iface, hi, lo, caplen, length2 = struct.unpack(e + "IIIII", body[:20])
            if iface < len(ifaces):
                linktype, per_second = ifaces[iface]
                ticks = hi << 32 | lo
                ns = ticks * 10**9 // per_second
                yield linktype, ns, caplen, length2, body[20 : 20 + caplen]


def _interface(body, e):
    """(link type, ticks per second) of an interface description block's body."""
    linktype = struct.unpack(e + "H", body[:2])[0]
    per_second, off = 10**6, 8
    while off + 4 <= len(body) - 4:
        code, olen = struct.unpack(e + "HH", body[off : off + 4])
        if code == 0:
            break
        if code == 9 and olen >= 1:  # if_tsresol
            r = body[off + 4]
            per_second = 2 ** (r & 0x7F) if r & 0x80 else 10 ** (r & 0x7F)
        off += 4 + (olen + 3) // 4 * 4
    return linktype, per_second


def _ip(linktype, p):
    """The IP packet inside a frame, or None."""
    if linktype == 1:
        off, et = 12, p[12:14]
        while et in (b"\x81\x00", b"\x88\xa8") and len(p) >= off + 6:
            off += 4
            et = p[off : off + 2]
        off += 2
    elif linktype == 113:
        off, et = 16, p[14:16]
    elif linktype == 276:
        off, et = 20, p[0:2]
    elif linktype in (0, 108):
        off, et = 4, b"\x08\x00"
    elif linktype in (12, 14, 101, 228, 229):
        off, et = 0, b"\x08\x00"
    else:
        return None
    if et not in (b"\x08\x00", b"\x86\xdd") or off >= len(p):
        return None
    return p[off:]


def _tcp(ip):
    """(src, dst, header bytes up to the TCP payload, the payload's length on the wire,
    captured payload bytes) of a TCP segment, ("udp", its ports' bytes) of a UDP datagram, or
    None."""
    src: ipaddress.IPv4Address | ipaddress.IPv6Address
    dst: ipaddress.IPv4Address | ipaddress.IPv6Address
    if len(ip) >= 20 and ip[0] >> 4 == 4:
        hl, total = (ip[0] & 15) * 4, struct.unpack(">H", ip[2:4])[0]
        if ip[9] == 17:
            return "udp", ip[hl : hl + 4]
        if ip[9] != 6 or (ip[6] & 0x3F) or ip[7] or hl < 20:
            return None
        src, dst = ipaddress.IPv4Address(ip[12:16]), ipaddress.IPv4Address(ip[16:20])
        l4, n4 = hl, total - hl
    elif len(ip) >= 40 and ip[0] >> 4 == 6:
        if ip[6] == 17:
            return "udp", ip[40:44]
        if ip[6] != 6:
            return None
        src, dst = ipaddress.IPv6Address(ip[8:24]), ipaddress.IPv6Address(ip[24:40])
        l4, n4 = 40, struct.unpack(">H", ip[4:6])[0]
    else:
        return None
    if len(ip) < l4 + 14:
        return None
    off = (ip[l4 + 12] >> 4) * 4
    if off < 20 or off > n4:
        return None
    return str(src), str(dst), ip[l4 : l4 + off], n4 - off, len(ip) - l4 - off


def walk(path, ports):
    """Holes of the capture at path in the TCP streams to or from the server ports. A gap
    that a segment arriving later fills (reordered in the capture, not lost) is no hole."""
    kind = capture_format(path)
    if kind is None:
        return Holes()
    opener = gzip.open if kind.startswith("gzip") else open
    out = Holes()
    # Per direction (src, sport, dst, dport): the next byte's position (sequence numbers
    # unwrapped), its last sequence number, the time of its last segment with bytes, and its
    # gaps not filled yet: [first byte, end, since, until, client, to the server].
    state: dict[tuple, list] = {}
    gaps: dict[tuple, list] = {}
    with opener(path, "rb") as f:
        for linktype, ts, caplen, length, data in _cut(_packets(f, kind.removeprefix("gzip-"))):
            ip = _ip(linktype, data)
            seg = _tcp(ip) if ip is not None else None
            if seg is None:
                continue
            if seg[0] == "udp":
                if len(seg[1]) == 4 and ports & set(struct.unpack(">HH", seg[1])):
                    out.udp += 1
                continue
            src, dst, tcp, payload, captured = seg
            sport, dport = struct.unpack(">HH", tcp[:4])
            if dport in ports:
                client = endpoint(src, sport)
            elif sport in ports:
                client = endpoint(dst, dport)
            else:
                continue
            seq, flags = struct.unpack(">I", tcp[4:8])[0], tcp[13]
            if not payload and not flags & 0x03:
                # A bare ACK, or a keepalive (one byte below the next): no bytes of its own.
                continue
            key = (src, sport, dst, dport)
            step = payload + (1 if flags & 0x03 else 0)  # SYN and FIN count one
            st = state.get(key)
            if flags & 0x02 or st is None:
                _flush(out, gaps.pop(key, ()))  # a new connection on these ports
                state[key] = [step, (seq + step) % _U32, ts]
            else:
                nxt, want, since = st
                delta = (seq - want + _U32 // 2) % _U32 - _U32 // 2
                at = nxt + delta
                if delta > 0:
                    gaps.setdefault(key, []).append([nxt, at, since, ts, client, dport in ports])
                elif key in gaps:
                    _fill(gaps[key], at, at + step)
                if at + step > nxt:
                    st[0], st[1] = at + step, (seq + step) % _U32
                st[2] = ts
            if captured < payload and caplen < length:
                out.holes.append((client, ts, ts, True, payload - captured, dport in ports))
    for g in gaps.values():
        _flush(out, g)
    return out


def _cut(packets):
    """The packets up to where a gzip stream ends before its end, or its bytes are damaged:
    those are the capture's (its decoder reports the cut)."""
    try:
        yield from packets
    except (EOFError, zlib.error, gzip.BadGzipFile):
        return


def _fill(gaps, a, b):
    """Bytes [a, b) came late: what they cover of the gaps is no longer missing."""
    for g in list(gaps):
        if a < g[1] and b > g[0]:
            gaps.remove(g)
            if g[0] < a:
                gaps.append([g[0], a, *g[2:]])
            if b < g[1]:
                gaps.append([b, g[1], *g[2:]])


def _flush(out, gaps):
    for a, b, since, until, client, to_server in gaps:
        out.holes.append((client, since, until, False, b - a, to_server))
