"""Read NFS READDIR traffic from a packet capture (pcap, pcapng, either gzip'd) into tables.

Wireshark's dissector does the decoding: `tshark -T fields` prints tshark_fields.FIELDS for every
frame to or from the NFS server's ports (2049 and any given), one frame per line, and this
module reads that stream line by line (never the whole capture as text), matches replies to
calls by XID, and returns:

    readdirs   one row per READDIR/READDIRPLUS call, first transmission only, in the
               capture's order: ts, frame (its number in the capture: it orders what a
               coarse clock ties), client (address:port of the caller), fh (CRC-32 of the
               directory's filehandle, as Wireshark shows it), xid, vers, plus, cookie asked,
               verifier, dircount, maxcount, and from its reply (NaN when the reply is not in
               the capture): reply_ts, status, entries, last_cookie, eof (the entries'
               cookies go to `passes` as they come, not into the table)
    attrs      the directory's version as replies carry it: ts, frame, client, fh, version
               (NFSv4 change attribute from GETATTR compounds; NFSv3 mtime/ctime of the
               post-op attributes of GETATTR and READDIR replies), fileid where the reply
               gives it
    facts      what limits the answers: frames cut short by the snaplen, retransmitted calls,
               calls without a reply, frames that carried several RPC messages whose fields
               could not be told apart, tshark's complaints (a file cut short); the counts of
               READDIR calls and attribute replies

The two tables grow with the capture, a row a READDIR or attribute reply: read(tables=False)
keeps neither, for a reader (wire.analyze) whose `passes` keep what it needs as they come.

`-T fields` runs a field's values together across a frame's messages, so a frame that carries
several RPC messages (one TCP segment, several replies) is read again message by message from
a second tshark's `-T ek` (one JSON line a frame, one object a message), started only when the
first such frame comes and given only such frames.

The fields and their parsers are in tshark_fields, the matching of calls and replies into
tables in rpcmatch; this module runs the two tsharks and gives their rows to it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import wiredecode
from .base import TraceError
from .magic import capture_format
from .rpcmatch import CaptureReader
from .tshark_ek import ek_pairs, ek_text
from .tshark_fields import FIELDS, NFS_PORT, int_or_none

# The frames the second tshark gives message by message: those -T fields runs together.
SEVERAL = "count(rpc.xid) > 1"


class CaptureError(TraceError):
    """The capture cannot be read; the message says why and what to do. (A TraceError: every
    command treats an unreadable input alike.)"""


def _ports(ports):
    """2049 and the extra server ports, each once, in order; refuses what is not a port."""
    out = [NFS_PORT]
    for p in ports or ():
        n = int_or_none(str(p))
        if n is None or not 0 < n < 65536:
            raise CaptureError(f"{p!r} is not a TCP/UDP port (1-65535)")
        if n not in out:
            out.append(n)
    return tuple(out)


def _decode_as(ports):
    """tshark picks a dissector by the lower port first: a client on a privileged port that
    another protocol owns would hide the NFS stream. Each server port is decoded as ONC RPC."""
    out = []
    for p in ports:
        out += ["-d", f"tcp.port=={p},rpc", "-d", f"udp.port=={p},rpc"]
    return out


def tshark_command(path, tshark="tshark", ports=(NFS_PORT,)):
    """Every frame to or from a server port, and RPC on any other port, as -T fields."""
    on = ", ".join(map(str, ports))
    cmd = [
        tshark,
        "-r",
        path,
        "-n",
        *_decode_as(ports),
        "-Y",
        f"rpc || tcp.port in {{{on}}} || udp.port in {{{on}}}",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]
    for _, f in FIELDS:
        cmd += ["-e", f]
    return cmd


def messages_command(path, tshark="tshark", ports=(NFS_PORT,)):
    """The frames with several RPC messages, one JSON line each with one object a message."""
    return [
        tshark,
        "-r",
        path,
        "-n",
        *_decode_as(ports),
        "-Y",
        SEVERAL,
        "-T",
        "ek",
        "-J",
        "frame rpc nfs",
    ]


# How many frames rpc_server_ports looks at: an NFS client sends calls from its first
# frames on, and a capture with none in that many has no NFS a listing could be read from.
PORT_SCAN_FRAMES = 200_000
NFS_PROGRAM = 100003


def _is_nfs_call(payload):
    """Whether a TCP segment (bytes) begins with an ONC RPC call of NFS (RFC 5531 over a
    record-marked stream): a record mark with its last-fragment bit, an XID, message type 0
    (call), RPC version 2, program 100003, version 2 to 4. Wireshark's heuristic dissector
    looks for the same header; it gives up on a stream whose client port another protocol
    owns, and this does not."""
    if len(payload) < 24:
        return False
    mark, _, kind, rpcvers, prog, vers = (
        int.from_bytes(payload[k : k + 4], "big") for k in range(0, 24, 4)
    )
    return (
        bool(mark & 0x8000_0000)
        and (kind, rpcvers, prog) == (0, 2, NFS_PROGRAM)
        and (2 <= vers <= 4)
    )


def rpc_server_ports(path, tshark=None):
    """The TCP ports NFS calls in the capture go to, found by the calls' own header
    (_is_nfs_call), whatever the ports: for a capture of a server that does not listen on
    2049. Empty where there is none (or no tshark)."""
    tshark = tshark or shutil.which("tshark")
    if not tshark:
        return []
    p = subprocess.run(
        [tshark, "-r", path, "-n", "-c", str(PORT_SCAN_FRAMES), "-Y", "tcp.len >= 24"]
        + ["-T", "fields", "-e", "tcp.dstport", "-e", "tcp.payload"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    found = set()
    for line in p.stdout.splitlines():
        port, _, payload = line.partition("\t")
        try:
            if _is_nfs_call(bytes.fromhex(payload.replace(":", "")[:48])):
                found.add(int(port))
        except ValueError:  # a field tshark could not give
            continue
    return sorted(found)


def _quiet(err):
    return "\n".join(
        x for x in err.splitlines() if "Running as user" not in x and "could be dangerous" not in x
    ).strip()


def read(path, tshark=None, ports=(), decoder=None, passes=None, tables=True):
    """Decode a capture file into a Capture (see the module's text). ports: server ports
    besides 2049 whose traffic is NFS. decoder: "compiled" (wiredecode; tshark where it does
    not know a case, said on stderr; not built: an error), "tshark", or None for
    $NFSRT_DECODER, else compiled. passes: what makes the follower of the READDIRs' passes
    (model/wire_passes.Passes), one for each decoding: it is given each reply's entry cookies,
    which the tables do not keep; the Capture's `passes` is it. tables: whether to keep the
    READDIR and attribute tables (Capture.readdirs, .attrs), one row a READDIR or attribute
    reply; without them the memory kept is the passes' alone."""
    kind = capture_format(path)
    if kind is None:
        raise CaptureError(f"{path!r} is not a pcap or pcapng capture (nor a gzip'd one)")
    ports = _ports(ports)
    decoder = decoder or os.environ.get("NFSRT_DECODER") or "compiled"
    if decoder not in ("compiled", "tshark"):
        raise CaptureError(f"decoder {decoder!r}: say compiled or tshark")
    if decoder == "compiled" and not wiredecode.available():
        raise CaptureError(
            "the compiled capture decoder nfsreaddir._wiredecode is not built: install "
            "nfs-readdir again (pip install -e ., with the C compiler and headers "
            "reproducers/setup-host installs), or set NFSRT_DECODER=tshark"
        )
    unknown = None
    if decoder == "compiled":
        cap, unknown = wiredecode.read(path, kind, ports, passes, tables)
        if cap is not None:
            return cap
        sys.stderr.write(
            f"nfs-readdir: {path}: the compiled decoder met {unknown}, a case it does not "
            "decode; decoding this capture with tshark\n"
        )
    tshark = tshark or shutil.which("tshark")
    if not tshark:
        raise CaptureError(
            "tshark is not installed: captures are decoded with Wireshark's "
            "dissector (apt-get install tshark, or reproducers/setup-host)"
        )
    several = _Messages(messages_command(path, tshark, ports))
    reader = CaptureReader(path, kind, several, passes, tables)
    reader.cap.ports = ports
    reader.cap.fallback = unknown
    # stderr into a file: a pipe nobody reads while stdout streams could fill and stall tshark.
    errfile = tempfile.TemporaryFile("w+", errors="replace")
    proc = subprocess.Popen(
        tshark_command(path, tshark, ports),
        stdout=subprocess.PIPE,
        stderr=errfile,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        bufsize=1 << 20,
    )
    assert proc.stdout is not None  # (stdout=PIPE)
    try:
        for line in proc.stdout:
            reader.frame(line.rstrip("\n").split("\t"))
    except BaseException:
        # Ctrl-C or a bug: tshark would block on a full pipe nobody reads; never leave it.
        proc.kill()
        proc.wait()
        raise
    finally:
        reader.several.close()
    proc.wait()
    errfile.seek(0)
    err = _quiet(errfile.read())
    errfile.close()
    if proc.returncode != 0 and not reader.messages:
        raise CaptureError(f"tshark could not read {path!r}: {err or f'exit {proc.returncode}'}")
    if err:
        # A file cut short still yields the frames before the cut.
        said = f"tshark: {err.splitlines()[0]}"
        reader.cap.warnings.append(said)
        if "cut short" in said:
            reader.cap.cut = said
    return reader.finish()


class _Messages:
    """The second tshark: the frames with several RPC messages, each as its protocol layers
    (one rpc and one nfs object a message). Started at the first such frame the first tshark
    gives, read as far as asked, in frame order like the first."""

    def __init__(self, cmd):
        self.cmd = cmd
        self.proc = None
        self.ahead = None  # a frame read but not yet asked for: (number, layers)

    def get(self, number):
        """The layers of frame `number`, or None when this tshark did not give it."""
        if self.proc is None:
            self.err = tempfile.TemporaryFile("w+", errors="replace")
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=subprocess.PIPE,
                stderr=self.err,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                bufsize=1 << 20,
            )
        assert self.proc.stdout is not None  # (stdout=PIPE)
        while self.ahead is None or self.ahead[0] < number:
            line = self.proc.stdout.readline()
            if not line:
                return None
            doc = json.loads(line, object_pairs_hook=ek_pairs)
            layers = doc.get("layers")
            if not layers:
                continue  # the index line before each frame
            layers = layers[0]
            frame = layers.get("frame", [{}])[0]
            self.ahead = (int_or_none(ek_text(frame.get("frame_frame_number", []))) or 0, layers)
        if self.ahead[0] != number:
            return None
        layers, self.ahead = self.ahead[1], None
        return layers

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            self.err.close()
