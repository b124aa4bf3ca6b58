"""Read NFS READDIR traffic from a packet capture (pcap, pcapng, either gzip'd) into tables.

Wireshark's dissector does the decoding: `tshark -T fields` prints the fields below for every
frame to or from the NFS server's ports (2049 and any given), one frame per line, and this
module reads that stream line by line (never the whole capture as text), matches replies to
calls by XID, and returns:

    readdirs   one row per READDIR/READDIRPLUS call, first transmission only, in the
               capture's order: ts, frame (its number in the capture: it orders what a
               coarse clock ties), client (address:port of the caller), fh (CRC-32 of the
               directory's filehandle, as Wireshark shows it), xid, vers, plus, cookie asked,
               verifier, dircount, maxcount, and from its reply (NaN when the reply is not in
               the capture): reply_ts, status, entries, last_cookie, eof, and the entries'
               cookies
    attrs      the directory's version as replies carry it: ts, frame, client, fh, version
               (NFSv4 change attribute from GETATTR compounds; NFSv3 mtime/ctime of the
               post-op attributes of GETATTR and READDIR replies), fileid where the reply
               gives it
    facts      what limits the answers: frames cut short by the snaplen, retransmitted calls,
               calls without a reply, frames that carried several RPC messages whose fields
               could not be told apart, tshark's complaints (a file cut short)

`-T fields` runs a field's values together across a frame's messages, so a frame that carries
several RPC messages (one TCP segment, several replies) is read again message by message from
a second tshark's `-T ek` (one JSON line a frame, one object a message), started only when the
first such frame comes and given only such frames.

Field names are those of Debian 12's tshark 4.0 (`tshark -G fields`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .base import TraceError
from .magic import capture_format
from .tshark_ek import ek_pairs, ek_text

if TYPE_CHECKING:  # (pandas is imported where the tables are made)
    import pandas

NFS_PROGRAM = 100003
NFS3_GETATTR, NFS3_READDIR, NFS3_READDIRPLUS = 1, 16, 17
NFS4_COMPOUND = 1
OP4_GETATTR, OP4_READDIR = 9, 26

# (column, tshark field). One line per frame; a field that occurs several times in a frame
# comes comma-separated, in the order of the protocol tree.
FIELDS = [
    ("frame", "frame.number"),
    ("ts", "frame.time_epoch"),
    ("cap_len", "frame.cap_len"),
    ("len", "frame.len"),
    ("src", "ip.src"),
    ("dst", "ip.dst"),
    ("src6", "ipv6.src"),
    ("dst6", "ipv6.dst"),
    ("sport", "tcp.srcport"),
    ("dport", "tcp.dstport"),
    ("usport", "udp.srcport"),
    ("udport", "udp.dstport"),
    ("xid", "rpc.xid"),
    ("msgtyp", "rpc.msgtyp"),  # 0 call, 1 reply
    ("prog", "rpc.program"),
    ("vers", "rpc.programversion"),
    ("proc", "rpc.procedure"),
    ("replystat", "rpc.replystat"),
    ("accept", "rpc.state_accept"),
    ("mainop", "nfs.main_opcode"),  # NFSv4: the compound's most telling operation
    ("minor", "nfs.minorversion"),
    ("fh", "nfs.fh.hash"),
    # NFSv4 READDIR
    ("cookie4", "nfs.cookie4"),
    ("verf4", "nfs.cookie_verf4"),
    ("dircount4", "nfs.dircount"),
    ("maxcount4", "nfs.maxcount"),
    ("eof4", "nfs.dirlist4.eof"),
    ("status4", "nfs.nfsstat4"),
    ("change4", "nfs.changeid4"),
    ("fileid4", "nfs.fattr4.fileid"),
    # NFSv3 READDIR/READDIRPLUS
    ("cookie3", "nfs.cookie3"),
    ("verf3", "nfs.verifier"),
    ("count3", "nfs.count3"),
    ("dircount3", "nfs.count3_dircount"),
    ("maxcount3", "nfs.count3_maxcount"),
    ("ecookie3", "nfs.readdir.entry3.cookie"),
    ("epcookie3", "nfs.readdirplus.entry.cookie"),
    ("eof3", "nfs.readdir.eof"),
    ("status3", "nfs.status"),
    ("mtime_s", "nfs.mtime.sec"),
    ("mtime_ns", "nfs.mtime.nsec"),
    ("ctime_s", "nfs.ctime.sec"),
    ("ctime_ns", "nfs.ctime.nsec"),
    ("fileid3", "nfs.fattr3.fileid"),
    ("malformed", "_ws.malformed"),
]
COL = {name: i for i, (name, _) in enumerate(FIELDS)}
NFS_PORT = 2049
# The frames the second tshark gives message by message: those -T fields runs together.
SEVERAL = "count(rpc.xid) > 1"


class CaptureError(TraceError):
    """The capture cannot be read; the message says why and what to do. (A TraceError: every
    command treats an unreadable input alike.)"""


@dataclass
class Capture:
    """What read() found: the tables and the facts that limit them."""

    path: str
    kind: str
    readdirs: pandas.DataFrame
    attrs: pandas.DataFrame
    frames: int = 0  # frames with an RPC message (or damaged)
    port_frames: int = 0  # frames to or from the server's ports, RPC or not
    messages: int = 0
    truncated_frames: int = 0  # cut by the snaplen
    snaplen: int | None = None
    retransmitted_calls: int = 0  # READDIR calls seen again with the same client and XID
    unsplit_frames: int = 0  # several RPC messages that could not be told apart
    split_frames: int = 0  # several RPC messages, read one by one
    versions: set = field(default_factory=set)  # "2", "3", "4.0", "4.1", ...
    ports: tuple = (NFS_PORT,)  # the server ports decoded as ONC RPC
    warnings: list = field(default_factory=list)

    @property
    def missing_replies(self):
        return int(self.readdirs["reply_ts"].isna().sum()) if len(self.readdirs) else 0


def _split(v):
    return v.split(",") if v else []


def _int(v, base=10):
    try:
        return int(v, base)
    except (TypeError, ValueError):
        return None


def _flag(v):
    """A boolean as tshark 4.0 prints it (1/0, or True/False in some versions)."""
    if v in ("1", "True", "true"):
        return True
    if v in ("0", "False", "false"):
        return False
    return None


def _ns(epoch):
    """frame.time_epoch ("1795425767.268122880") in integer nanoseconds, exactly."""
    sec, _, frac = epoch.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def _endpoint(addr, port):
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _ports(ports):
    """2049 and the extra server ports, each once, in order; refuses what is not a port."""
    out = [NFS_PORT]
    for p in ports or ():
        n = _int(str(p))
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


def _quiet(err):
    return "\n".join(
        x for x in err.splitlines() if "Running as user" not in x and "could be dangerous" not in x
    ).strip()


def read(path, tshark=None, ports=()):
    """Decode a capture file into a Capture (see the module's text). ports: server ports
    besides 2049 whose traffic is NFS."""
    kind = capture_format(path)
    if kind is None:
        raise CaptureError(f"{path!r} is not a pcap or pcapng capture (nor a gzip'd one)")
    tshark = tshark or shutil.which("tshark")
    if not tshark:
        raise CaptureError(
            "tshark is not installed: captures are decoded with Wireshark's "
            "dissector (apt-get install tshark, or reproducers/setup-host)"
        )
    ports = _ports(ports)
    reader = _Reader(path, kind, _Messages(messages_command(path, tshark, ports)))
    reader.cap.ports = ports
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
        reader.cap.warnings.append(f"tshark: {err.splitlines()[0]}")
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
            self.ahead = (_int(ek_text(frame.get("frame_frame_number", []))) or 0, layers)
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


def _rows_of(v, layers):
    """One field row per RPC message of a frame: the frame's own fields from -T fields, each
    message's from its rpc object and, where it has an NFS body, its nfs object. None when the
    messages and the NFS bodies do not pair up (then nothing is guessed)."""
    rpcs, bodies = layers.get("rpc", []), layers.get("nfs", [])
    rows, nfs = [], []  # nfs: the indexes in rows of the messages with an NFS body
    for m in rpcs:
        row = list(v)
        for name, f in FIELDS:
            if f.startswith("rpc."):
                row[COL[name]] = ek_text(m.get("rpc_" + f.replace(".", "_"), []))
        reply = row[COL["msgtyp"]][:1] == "1"
        accepted = not reply or (row[COL["replystat"]][:1] == "0" and row[COL["accept"]][:1] == "0")
        if _int(row[COL["prog"]].split(",")[0]) == NFS_PROGRAM and accepted:
            nfs.append(len(rows))
        rows.append(row)
    # Each accepted NFS message has one NFS body, in the same order; where the counts differ
    # (a body tshark did not dissect) no body can be given to its message for sure.
    if not rows or len(nfs) != len(bodies):
        return None
    given = dict(zip(nfs, bodies))
    for i, row in enumerate(rows):
        body = given.get(i, {})
        if ek_text(body.get("rpc_rpc_programversion", [])) not in ("", row[COL["vers"]]):
            return None
        for name, f in FIELDS:
            if f.startswith("nfs."):
                row[COL[name]] = ek_text(body.get("nfs_" + f.replace(".", "_"), []))
    return rows


class _Reader:
    """From tshark's lines to the tables: one pass, calls kept until their reply."""

    def __init__(self, path, kind, several):
        self.cap = Capture(path, kind, None, None)
        self.several = several  # the frames with several RPC messages, message by message
        self.calls = {}  # (client, xid) -> row dict (READDIR) or ("attr", fh, ...)
        self.rows = []  # READDIR rows in call order
        self.attrs = []
        self.messages = 0

    # -- one frame -------------------------------------------------------------------------
    def frame(self, v):
        if len(v) < len(FIELDS):
            v = v + [""] * (len(FIELDS) - len(v))
        cap = self.cap
        cap.port_frames += 1
        cap_len, length = _int(v[COL["cap_len"]]), _int(v[COL["len"]])
        truncated = cap_len is not None and length is not None and cap_len < length
        xids = _split(v[COL["xid"]])
        if truncated:
            cap.truncated_frames += 1
            cap.snaplen = max(cap.snaplen or 0, cap_len)
        if xids or truncated or v[COL["malformed"]]:
            cap.frames += 1
        if not xids:
            return
        self.messages += len(xids)
        cap.messages += len(xids)
        if len(xids) == 1:
            self._message(v)
            return
        layers = self.several.get(_int(v[COL["frame"]]))
        rows = _rows_of(v, layers) if layers else None
        if rows is None or len(rows) != len(xids):
            cap.unsplit_frames += 1
            return
        cap.split_frames += 1
        for row in rows:
            self._message(row)

    def _message(self, v):
        """One RPC message: its frame's addresses and time, its own RPC and NFS fields."""
        prog = _int(v[COL["prog"]].split(",")[0])
        if prog is not None and prog != NFS_PROGRAM:
            return
        ts = _ns(v[COL["ts"]])
        src = v[COL["src"]] or v[COL["src6"]]
        dst = v[COL["dst"]] or v[COL["dst6"]]
        sport = v[COL["sport"]] or v[COL["usport"]]
        dport = v[COL["dport"]] or v[COL["udport"]]
        frame = _int(v[COL["frame"]])
        xid = _int(v[COL["xid"]], 0)
        kind = v[COL["msgtyp"]][:1]
        if kind == "0":
            self._call(v, ts, _endpoint(src, sport), xid, frame)
        elif kind == "1":
            self._reply(v, ts, _endpoint(dst, dport), xid, frame)

    # -- calls -----------------------------------------------------------------------------
    def _call(self, v, ts, client, xid, frame):
        vers = _int(v[COL["vers"]].split(",")[0])
        proc = _int(v[COL["proc"]].split(",")[0])
        fhs = _split(v[COL["fh"]])
        key = (client, xid)
        if key in self.calls:
            if self.calls[key].get("kind") == "readdir":
                self.cap.retransmitted_calls += 1
            return  # a retransmission: the first transmission is the call
        if vers == 2:
            self.cap.versions.add("2")  # not analyzed: read() callers say so
        elif vers == 3:
            self.cap.versions.add("3")
            if proc in (NFS3_READDIR, NFS3_READDIRPLUS) and fhs:
                plus = proc == NFS3_READDIRPLUS
                row = dict(
                    kind="readdir",
                    ts=ts,
                    frame=frame,
                    client=client,
                    fh=fhs[0],
                    xid=xid,
                    vers="3",
                    plus=plus,
                    cookie=_int(v[COL["cookie3"]].split(",")[0]),
                    verifier=v[COL["verf3"]].split(",")[0] or None,
                    dircount=_int(v[COL["dircount3"]].split(",")[0]) if plus else None,
                    maxcount=_int(
                        (v[COL["maxcount3"]] if plus else v[COL["count3"]]).split(",")[0]
                    ),
                )
                self._open_call(key, row)
            elif proc == NFS3_GETATTR and fhs:
                self.calls[key] = dict(kind="getattr", fh=fhs[0], vers="3")
        elif vers == 4 and proc == NFS4_COMPOUND:
            op = _int(v[COL["mainop"]].split(",")[0])
            minor = _int(v[COL["minor"]].split(",")[0])
            if minor is not None:
                self.cap.versions.add(f"4.{minor}")
            # The directory is the filehandle the compound's PUTFH sets: the first one.
            if op == OP4_READDIR and fhs:
                row = dict(
                    kind="readdir",
                    ts=ts,
                    frame=frame,
                    client=client,
                    fh=fhs[0],
                    xid=xid,
                    vers="4",
                    plus=False,
                    cookie=_int(v[COL["cookie4"]].split(",")[0]),
                    verifier=v[COL["verf4"]].split(",")[0] or None,
                    dircount=_int(v[COL["dircount4"]].split(",")[0]),
                    maxcount=_int(v[COL["maxcount4"]].split(",")[0]),
                )
                self._open_call(key, row)
            elif op == OP4_GETATTR and len(fhs) == 1:
                # Only a plain PUTFH+GETATTR: in a compound that moves the current filehandle
                # (LOOKUP, OPEN) the attributes may be another object's.
                self.calls[key] = dict(kind="getattr", fh=fhs[0], vers="4")

    def _open_call(self, key, row):
        row.update(
            reply_ts=None, status=None, entries=None, last_cookie=None, eof=None, cookies=None
        )
        self.calls[key] = row
        self.rows.append(row)

    # -- replies ---------------------------------------------------------------------------
    def _reply(self, v, ts, client, xid, frame):
        call = self.calls.get((client, xid))
        if call is None:
            return  # a reply to a call not followed (or from before the capture)
        if call.get("done"):
            return  # a duplicate reply
        call["done"] = True
        accepted = v[COL["replystat"]][:1] == "0" and v[COL["accept"]][:1] == "0"
        if call["vers"] == "3":
            status = _int(v[COL["status3"]].split(",")[0]) if accepted else -1
            ver, fileid = self._v3_attrs(v)
        else:
            status = _int(v[COL["status4"]].split(",")[0]) if accepted else -1
            ver = _int(v[COL["change4"]].split(",")[0]) if call["kind"] == "getattr" else None
            fileid = _int(v[COL["fileid4"]].split(",")[0]) if call["kind"] == "getattr" else None
        if ver is not None and status == 0:
            self.attrs.append(
                dict(
                    ts=ts,
                    frame=frame,
                    client=client,
                    fh=call["fh"],
                    version=ver,
                    fileid=fileid,
                    source="GETATTR" if call["kind"] == "getattr" else "READDIR",
                )
            )
        if call["kind"] != "readdir":
            del self.calls[(client, xid)]
            return
        call["reply_ts"], call["status"] = ts, status
        if status == 0:
            if call["vers"] == "3":
                cookies = _split(v[COL["epcookie3" if call["plus"] else "ecookie3"]])
                eof = _flag(v[COL["eof3"]].split(",")[0])
                if fileid is not None:
                    call["fileid"] = fileid
            else:
                cookies = _split(v[COL["cookie4"]])
                eof = _flag(v[COL["eof4"]].split(",")[0])
            # 8 bytes a cookie, not a Python int's 32: a big capture has millions of entries.
            cookies = array("Q", (c for c in map(_int, cookies) if c is not None))
            call["entries"] = len(cookies)
            call["last_cookie"] = cookies[-1] if cookies else None
            call["eof"] = eof
            call["cookies"] = cookies

    @staticmethod
    def _v3_attrs(v):
        """The post-op attributes of a v3 reply's object: its mtime and ctime (nanoseconds,
        as one version number) and fileid. In a READDIRPLUS reply the directory's own come
        first, before the entries'."""
        ms, mn = _split(v[COL["mtime_s"]])[:1], _split(v[COL["mtime_ns"]])[:1]
        cs, cn = _split(v[COL["ctime_s"]])[:1], _split(v[COL["ctime_ns"]])[:1]
        if not (ms and mn and cs and cn):
            return None, None
        mtime = int(ms[0]) * 10**9 + int(mn[0])
        ctime = int(cs[0]) * 10**9 + int(cn[0])
        # One number that moves when either does: the pair, packed.
        return (ctime << 64) | mtime, _int(v[COL["fileid3"]].split(",")[0])

    # -- the end ---------------------------------------------------------------------------
    def finish(self):
        import pandas as pd  # only a capture's tables need it (0.5 s to import)

        cap = self.cap
        cols = [
            "ts",
            "frame",
            "client",
            "fh",
            "xid",
            "vers",
            "plus",
            "cookie",
            "verifier",
            "dircount",
            "maxcount",
            "reply_ts",
            "status",
            "entries",
            "last_cookie",
            "eof",
            "cookies",
            "fileid",
        ]
        # Column by column from the rows, so that no 64-bit cookie goes through a float.
        typed = {
            "cookie": "UInt64",
            "last_cookie": "UInt64",
            "ts": "Int64",
            "reply_ts": "Int64",
            "frame": "Int64",
            "dircount": "Int64",
            "maxcount": "Int64",
            "status": "Int64",
            "entries": "Int64",
            "fileid": "Int64",
            "xid": "Int64",
        }
        df = pd.DataFrame(
            {
                c: pd.array([r.get(c) for r in self.rows], dtype=typed[c])
                if c in typed
                else pd.Series([r.get(c) for r in self.rows], dtype="object")
                for c in cols
            }
        )
        # In the capture's order: frame numbers tell apart what coarse timestamps tie.
        df = df.sort_values("frame", kind="stable").reset_index(drop=True)
        attrs = pd.DataFrame(
            self.attrs, columns=["ts", "frame", "client", "fh", "version", "fileid", "source"]
        )
        attrs["ts"] = pd.array(attrs["ts"].tolist(), dtype="Int64")
        attrs["frame"] = pd.array(attrs["frame"].tolist(), dtype="Int64")
        cap.readdirs, cap.attrs = (
            df,
            attrs.sort_values("frame", kind="stable").reset_index(drop=True),
        )
        return cap
