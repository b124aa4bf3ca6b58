"""Read NFS READDIR traffic from a packet capture (pcap, pcapng, either gzip'd) into tables.

Wireshark's dissector does the decoding: `tshark -T fields` prints the fields below for every
ONC RPC message of the NFS program, one frame per line, and this module reads that stream line
by line (never the whole capture as text), matches replies to calls by XID, and returns:

    readdirs   one row per READDIR/READDIRPLUS call, first transmission only: ts, client
               (address:port of the caller), fh (CRC-32 of the directory's filehandle, as
               Wireshark shows it), xid, vers, plus, cookie asked, verifier, dircount,
               maxcount, and from its reply (NaN when the reply is not in the capture):
               reply_ts, status, entries, last_cookie, eof, and the entries' cookies
    attrs      the directory's version as replies carry it: ts, client, fh, version (NFSv4
               change attribute from GETATTR compounds; NFSv3 mtime/ctime of the post-op
               attributes of GETATTR and READDIR replies), fileid where the reply gives it
    facts      what limits the answers: frames cut short by the snaplen, retransmitted calls,
               calls without a reply, frames that carried several RPC messages whose fields
               could not be told apart, tshark's complaints (a file cut short)

Field names are those of Debian 12's tshark 4.0 (`tshark -G fields`).
"""

from __future__ import annotations

import gzip
from array import array
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field

from .trace import TraceError

NFS_PROGRAM = 100003
NFS3_GETATTR, NFS3_READDIR, NFS3_READDIRPLUS = 1, 16, 17
NFS4_COMPOUND = 1
OP4_GETATTR, OP4_READDIR = 9, 26

# File magic: pcap (both byte orders, microsecond and nanosecond), pcapng, gzip.
PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1",
               b"\xa1\xb2\x3c\x4d"}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"

# (column, tshark field). One line per frame; a field that occurs several times in a frame
# comes comma-separated, in the order of the protocol tree.
FIELDS = [
    ("frame", "frame.number"),
    ("ts", "frame.time_epoch"),
    ("cap_len", "frame.cap_len"),
    ("len", "frame.len"),
    ("src", "ip.src"), ("dst", "ip.dst"),
    ("src6", "ipv6.src"), ("dst6", "ipv6.dst"),
    ("sport", "tcp.srcport"), ("dport", "tcp.dstport"),
    ("usport", "udp.srcport"), ("udport", "udp.dstport"),
    ("xid", "rpc.xid"),
    ("msgtyp", "rpc.msgtyp"),            # 0 call, 1 reply
    ("prog", "rpc.program"),
    ("vers", "rpc.programversion"),
    ("proc", "rpc.procedure"),
    ("replystat", "rpc.replystat"),
    ("accept", "rpc.state_accept"),
    ("mainop", "nfs.main_opcode"),       # NFSv4: the compound's most telling operation
    ("minor", "nfs.minorversion"),
    ("fh", "nfs.fh.hash"),
    # NFSv4 READDIR
    ("cookie4", "nfs.cookie4"), ("verf4", "nfs.cookie_verf4"), ("dircount4", "nfs.dircount"),
    ("maxcount4", "nfs.maxcount"), ("eof4", "nfs.dirlist4.eof"), ("status4", "nfs.nfsstat4"),
    ("change4", "nfs.changeid4"), ("fileid4", "nfs.fattr4.fileid"),
    # NFSv3 READDIR/READDIRPLUS
    ("cookie3", "nfs.cookie3"), ("verf3", "nfs.verifier"), ("count3", "nfs.count3"),
    ("dircount3", "nfs.count3_dircount"), ("maxcount3", "nfs.count3_maxcount"),
    ("ecookie3", "nfs.readdir.entry3.cookie"), ("epcookie3", "nfs.readdirplus.entry.cookie"),
    ("eof3", "nfs.readdir.eof"), ("status3", "nfs.status"),
    ("mtime_s", "nfs.mtime.sec"), ("mtime_ns", "nfs.mtime.nsec"),
    ("ctime_s", "nfs.ctime.sec"), ("ctime_ns", "nfs.ctime.nsec"),
    ("fileid3", "nfs.fattr3.fileid"),
    ("malformed", "_ws.malformed"),
]
COL = {name: i for i, (name, _) in enumerate(FIELDS)}
# Only frames with an RPC message, or that the dissector could not decode whole.
DISPLAY_FILTER = "rpc || _ws.malformed || frame.cap_len < frame.len"


class CaptureError(TraceError):
    """The capture cannot be read; the message says why and what to do. (A TraceError: every
    command treats an unreadable input alike.)"""


def sniff(path):
    """'pcap', 'pcapng', 'gzip-pcap', 'gzip-pcapng' or None, from the first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            if head[:2] == GZIP_MAGIC:
                f.seek(0)
                try:
                    inner = gzip.GzipFile(fileobj=f).read(4)
                except (OSError, EOFError):
                    return None
                kind = _kind(inner)
                return f"gzip-{kind}" if kind else None
            return _kind(head)
    except OSError:
        return None


def _kind(head):
    if head in PCAP_MAGICS:
        return "pcap"
    if head == PCAPNG_MAGIC:
        return "pcapng"
    return None


def is_capture(path):
    return path != "-" and os.path.isfile(path) and sniff(path) is not None


@dataclass
class Capture:
    """What read() found: the tables and the facts that limit them."""
    path: str
    kind: str
    readdirs: "pandas.DataFrame"
    attrs: "pandas.DataFrame"
    frames: int = 0                 # frames with an RPC message (or damaged)
    messages: int = 0
    truncated_frames: int = 0       # cut by the snaplen
    snaplen: int | None = None
    malformed_frames: int = 0
    retransmitted_calls: int = 0    # READDIR calls seen again with the same client and XID
    unsplit_frames: int = 0         # several RPC messages whose READDIR fields mix
    versions: set = field(default_factory=set)  # "3", "4.0", "4.1", ...
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


ISB, SHB, ISB_IFDROP = 5, 0x0A0D0D0A, 5


def pcapng_drops(path):
    """Packets the capturing interface dropped, from a pcapng file's interface statistics
    blocks (isb_ifdrop; the last block of each interface counts), or None where the file
    says nothing (a plain pcap never does). Walks block headers only."""
    opener = gzip.open if sniff(path).startswith("gzip") else open
    drops, endian = {}, "<"
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
                    break       # damaged: the reader proper reports it
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
    return sum(drops.values()) if drops else None


def tshark_command(path, tshark="tshark"):
    cmd = [tshark, "-r", path, "-n", "-Y", DISPLAY_FILTER, "-T", "fields",
           "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for _, f in FIELDS:
        cmd += ["-e", f]
    return cmd


def read(path, tshark=None):
    """Decode a capture file into a Capture (see the module's text)."""
    kind = sniff(path)
    if kind is None:
        raise CaptureError(f"{path!r} is not a pcap or pcapng capture (nor a gzip'd one)")
    tshark = tshark or shutil.which("tshark")
    if not tshark:
        raise CaptureError("tshark is not installed: captures are decoded with Wireshark's "
                           "dissector (apt-get install tshark, or reproducers/setup-host)")
    reader = _Reader(path, kind)
    # stderr into a file: a pipe nobody reads while stdout streams could fill and stall tshark.
    errfile = tempfile.TemporaryFile("w+", errors="replace")
    proc = subprocess.Popen(tshark_command(path, tshark), stdout=subprocess.PIPE,
                            stderr=errfile, stdin=subprocess.DEVNULL, text=True,
                            errors="replace", bufsize=1 << 20)
    try:
        for line in proc.stdout:
            reader.frame(line.rstrip("\n").split("\t"))
    except BaseException:
        # Ctrl-C or a bug: tshark would block on a full pipe nobody reads; never leave it.
        proc.kill()
        proc.wait()
        raise
    proc.wait()
    errfile.seek(0)
    err = errfile.read()
    errfile.close()
    err = "\n".join(x for x in err.splitlines() if "Running as user" not in x
                    and "could be dangerous" not in x).strip()
    if proc.returncode != 0 and not reader.messages:
        raise CaptureError(f"tshark could not read {path!r}: {err or f'exit {proc.returncode}'}")
    if err:
        # A file cut short still yields the frames before the cut.
        reader.cap.warnings.append(f"tshark: {err.splitlines()[0]}")
    return reader.finish()


class _Reader:
    """From tshark's lines to the tables: one pass, calls kept until their reply."""

    def __init__(self, path, kind):
        self.cap = Capture(path, kind, None, None)
        self.calls = {}         # (client, xid) -> row dict (READDIR) or ("attr", fh, ...)
        self.rows = []          # READDIR rows in call order
        self.attrs = []
        self.messages = 0

    # -- one frame -------------------------------------------------------------------------
    def frame(self, v):
        if len(v) < len(FIELDS):
            v = v + [""] * (len(FIELDS) - len(v))
        cap = self.cap
        cap.frames += 1
        cap_len, length = _int(v[COL["cap_len"]]), _int(v[COL["len"]])
        if cap_len is not None and length is not None and cap_len < length:
            cap.truncated_frames += 1
            cap.snaplen = max(cap.snaplen or 0, cap_len)
        if v[COL["malformed"]]:
            cap.malformed_frames += 1
        xids = _split(v[COL["xid"]])
        if not xids:
            return
        types = _split(v[COL["msgtyp"]])
        progs = _split(v[COL["prog"]])
        ts = _ns(v[COL["ts"]])
        src = v[COL["src"]] or v[COL["src6"]]
        dst = v[COL["dst"]] or v[COL["dst6"]]
        sport = v[COL["sport"]] or v[COL["usport"]]
        dport = v[COL["dport"]] or v[COL["udport"]]
        self.messages += len(xids)
        cap.messages += len(xids)
        if len(xids) > 1:
            self._several(v, ts, src, sport, dst, dport, xids, types)
            return
        if progs and _int(progs[0]) != NFS_PROGRAM:
            return
        if types[:1] == ["0"]:
            self._call(v, ts, _endpoint(src, sport), _int(xids[0], 0))
        elif types[:1] == ["1"]:
            self._reply(v, ts, _endpoint(dst, dport), _int(xids[0], 0))

    def _several(self, v, ts, src, sport, dst, dport, xids, types):
        """A frame that carries several RPC messages: its fields are the messages' fields run
        together. Replies to calls we do not follow are harmless; a READDIR or GETATTR among
        them can be read only when it is the one message of its kind with fields to give."""
        mine = []
        for xid, t in zip(xids, types):
            key = (_endpoint(dst, dport) if t == "1" else _endpoint(src, sport), _int(xid, 0))
            if t == "1" and key in self.calls:
                mine.append((t, key))
            elif t == "0":
                mine.append((t, key))
        calls = [k for t, k in mine if t == "0"]
        replies = [k for t, k in mine if t == "1"]
        procs = _split(v[COL["proc"]])
        ops = _split(v[COL["mainop"]])
        interesting_calls = len(calls) and any(
            _int(p) in (NFS3_READDIR, NFS3_READDIRPLUS) for p in procs) or any(
            _int(o) in (OP4_READDIR, OP4_GETATTR) for o in ops)
        if len(replies) == 1 and not calls:
            self._reply(v, ts, *replies[0])
        elif len(calls) == 1 and not replies:
            self._call(v, ts, *calls[0])
        elif replies or interesting_calls:
            self.cap.unsplit_frames += 1

    # -- calls -----------------------------------------------------------------------------
    def _call(self, v, ts, client, xid):
        vers = _int(v[COL["vers"]].split(",")[0])
        proc = _int(v[COL["proc"]].split(",")[0])
        fhs = _split(v[COL["fh"]])
        key = (client, xid)
        if key in self.calls:
            if self.calls[key].get("kind") == "readdir":
                self.cap.retransmitted_calls += 1
            return      # a retransmission: the first transmission is the call
        if vers == 3:
            self.cap.versions.add("3")
            if proc in (NFS3_READDIR, NFS3_READDIRPLUS) and fhs:
                plus = proc == NFS3_READDIRPLUS
                row = dict(kind="readdir", ts=ts, client=client, fh=fhs[0], xid=xid, vers="3",
                           plus=plus, cookie=_int(v[COL["cookie3"]].split(",")[0]),
                           verifier=v[COL["verf3"]].split(",")[0] or None,
                           dircount=_int(v[COL["dircount3"]].split(",")[0]) if plus else None,
                           maxcount=_int((v[COL["maxcount3"]] if plus else
                                          v[COL["count3"]]).split(",")[0]))
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
                row = dict(kind="readdir", ts=ts, client=client, fh=fhs[0], xid=xid, vers="4",
                           plus=False, cookie=_int(v[COL["cookie4"]].split(",")[0]),
                           verifier=v[COL["verf4"]].split(",")[0] or None,
                           dircount=_int(v[COL["dircount4"]].split(",")[0]),
                           maxcount=_int(v[COL["maxcount4"]].split(",")[0]))
                self._open_call(key, row)
            elif op == OP4_GETATTR and len(fhs) == 1:
                # Only a plain PUTFH+GETATTR: in a compound that moves the current filehandle
                # (LOOKUP, OPEN) the attributes may be another object's.
                self.calls[key] = dict(kind="getattr", fh=fhs[0], vers="4")

    def _open_call(self, key, row):
        row.update(reply_ts=None, status=None, entries=None, last_cookie=None, eof=None,
                   cookies=None)
        self.calls[key] = row
        self.rows.append(row)

    # -- replies ---------------------------------------------------------------------------
    def _reply(self, v, ts, client, xid):
        call = self.calls.get((client, xid))
        if call is None:
            return      # a reply to a call not followed (or from before the capture)
        if call.get("done"):
            return      # a duplicate reply
        call["done"] = True
        accepted = v[COL["replystat"]][:1] == "0" and v[COL["accept"]][:1] == "0"
        if call["vers"] == "3":
            status = _int(v[COL["status3"]].split(",")[0]) if accepted else -1
            ver, fileid = self._v3_attrs(v)
        else:
            status = _int(v[COL["status4"]].split(",")[0]) if accepted else -1
            ver = _int(v[COL["change4"]].split(",")[0]) if call["kind"] == "getattr" else None
            fileid = (_int(v[COL["fileid4"]].split(",")[0]) if call["kind"] == "getattr"
                      else None)
        if ver is not None and status == 0:
            self.attrs.append(dict(ts=ts, client=client, fh=call["fh"], version=ver,
                                   fileid=fileid, source="GETATTR" if call["kind"] == "getattr"
                                   else "READDIR"))
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
        import pandas as pd     # only a capture's tables need it (0.5 s to import)
        cap = self.cap
        cols = ["ts", "client", "fh", "xid", "vers", "plus", "cookie", "verifier", "dircount",
                "maxcount", "reply_ts", "status", "entries", "last_cookie", "eof", "cookies",
                "fileid"]
        # Column by column from the rows, so that no 64-bit cookie goes through a float.
        typed = {"cookie": "UInt64", "last_cookie": "UInt64", "ts": "Int64", "reply_ts": "Int64",
                 "dircount": "Int64", "maxcount": "Int64", "status": "Int64", "entries": "Int64",
                 "fileid": "Int64", "xid": "Int64"}
        df = pd.DataFrame({c: pd.array([r.get(c) for r in self.rows], dtype=typed[c])
                           if c in typed else pd.Series([r.get(c) for r in self.rows],
                                                        dtype="object")
                           for c in cols})
        df = df.sort_values("ts", kind="stable").reset_index(drop=True)
        attrs = pd.DataFrame(self.attrs, columns=["ts", "client", "fh", "version", "fileid",
                                                  "source"])
        attrs["ts"] = pd.array(attrs["ts"].tolist(), dtype="Int64")
        cap.readdirs, cap.attrs = df, attrs.sort_values("ts", kind="stable").reset_index(
            drop=True)
        return cap
