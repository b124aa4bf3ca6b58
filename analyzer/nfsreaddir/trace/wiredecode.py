"""The compiled capture decoder (nfsreaddir._wiredecode, built from _wiredecode.c by setup.py):
pcap or pcapng, gzip'd or not, through TCP reassembly (or UDP) and ONC RPC record marking to
the NFS READDIR and GETATTR calls and replies, given to rpcmatch as the rows tshark's -T fields
gives, so that one matcher makes the tables from either decoder and tshark stays the oracle.
Every NFS and NFSACL call it keeps in its own call log, which becomes the Capture's `calls`
(rpcops.CallLog.decoded) at the end: no row, no Python call a message, for the calls that only
a listing's round trips count.

It reads a capture in one pass without dissecting what the wire analysis does not read, at
the speed of the disk rather than of Wireshark's full dissection. It reads through what the
capture lost: the bytes of a TCP stream never captured (a packet dropped, a frame cut by the
snaplen) are the Capture's `holes`, placed as tcpholes.walk places them, and the stream is
read on from the next record mark; a file or gzip stream cut short is read up to the cut,
which is one of the Capture's warnings. What it does not know (IP fragments, RPCSEC_GSS, a
compound it cannot rank) it says instead of guessing; capture.read then decodes that capture
with tshark.
"""

from __future__ import annotations

from .rpcmatch import Capture, CaptureReader
from .rpcops import CallLog
from .tcpholes import Holes
from .tshark_fields import FIELDS

try:
    from .. import _wiredecode  # type: ignore[attr-defined]
except ImportError:  # not built: capture.read says so (NFSRT_DECODER=tshark needs it not)
    _wiredecode = None

COLUMNS = [name for name, _ in FIELDS]


def available():
    return _wiredecode is not None


def versions(mask):
    """The NFS versions of the calls, from the decoder's mask: bit 2 v2, bit 3 v3, bit 8+m
    v4.m."""
    out = {str(v) for v in (2, 3) if mask >> v & 1}
    return out | {f"4.{m}" for m in range(16) if mask >> (8 + m) & 1}


def read(path, kind, ports, passes=None, tables=True) -> tuple[Capture | None, str | None]:
    """(the Capture, None), or (None, what the decoder does not know) when tshark must decode
    this capture. ports: the server ports, 2049 first; passes and tables: as capture.read's."""
    reader = CaptureReader(path, kind, None, passes, tables, calls=False)
    stats = _wiredecode.decode(path, list(ports), COLUMNS, reader.message)
    if stats["unknown"]:
        return None, stats["unknown"]
    cap = reader.cap
    cap.calls = CallLog.decoded(stats["calls"])
    cap.ports = tuple(ports)
    cap.decoder = "compiled"
    cap.port_frames = stats["port_frames"]
    cap.frames = stats["rpc_frames"]
    cap.messages = stats["messages"]
    cap.split_frames = stats["split_frames"]  # frames of several messages: each was read
    cap.retransmitted_segments = stats["retransmitted_segments"]
    cap.reordered_segments = stats["reordered_segments"]
    cap.versions |= versions(stats["versions"])
    cap.truncated_frames = stats["truncated_frames"]
    cap.snaplen = stats["snaplen"] or None
    cap.holes = Holes(holes=stats["holes"], udp=stats["udp_frames"])
    cap.orphan_replies = stats["orphans"]
    if stats["cut"]:
        cap.cut = stats["cut"]
        cap.warnings.append(cap.cut)
    return reader.finish(), None
