"""Calls matched to their replies by XID: from tshark's field rows (tshark_fields.FIELDS,
one RPC message a row) to a Capture's tables, in one pass that keeps each call until its reply.
capture.read runs tshark and gives the rows; this module knows nothing of tshark's processes.
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import TYPE_CHECKING

from ..recordtype import field, record
from .rpcops import CallLog
from .tshark_fields import (
    COL,
    FIELDS,
    NFS3_GETATTR,
    NFS3_READDIR,
    NFS3_READDIRPLUS,
    NFS4_COMPOUND,
    NFS_PORT,
    NFS_PROGRAM,
    OP4_GETATTR,
    OP4_READDIR,
    endpoint,
    epoch_ns,
    flag,
    int_or_none,
    message_rows,
    split_values,
)

if TYPE_CHECKING:  # (pandas is imported where the tables are made)
    import pandas


# The READDIR table's columns, in order.
TABLE = (
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
    "fileid",
)


def first(v, name):
    """The first of the values tshark gives for a field, as text ("" for none)."""
    return v[COL[name]].split(",")[0]


@record
class Capture:
    """What read() found: the tables and the facts that limit them."""

    path: str
    kind: str
    # The READDIR and attribute tables, where read() was asked for them (None where not: the
    # passes keep what the analysis reads, and the tables would grow with the capture).
    readdirs: pandas.DataFrame | None
    attrs: pandas.DataFrame | None
    readdir_calls: int = 0  # READDIR and READDIRPLUS calls (the first transmission of each)
    missing_replies: int = 0  # of them without a reply in the capture
    attr_replies: int = 0  # replies that gave an object's version (GETATTR, READDIR's post-op)
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
    decoder: str = "tshark"  # or "compiled" (wiredecode)
    retransmitted_segments: int = 0  # TCP data seen again (compiled decoder only)
    reordered_segments: int = 0  # TCP segments that came late into a hole and filled it
    fallback: str | None = None  # what the compiled decoder met that it does not decode
    # The bytes of TCP streams the capture lost, as the compiled decoder read through them (a
    # tcpholes.Holes); None where tshark decoded.
    holes: object = None
    # The replies whose call the capture lost, as the compiled decoder read them: (client,
    # XID, the NFSv4 operation the reply answers, or -1 where it does not say); () where
    # tshark decoded (it reads no reply without its call).
    orphan_replies: tuple | list = ()
    # What followed the READDIRs' passes as they were read (read()'s `passes`), or None.
    passes: object = None
    calls: CallLog | None = None  # every NFS and NFSACL call (rpcops), for the round trips
    warnings: list = field(default_factory=list)
    # The warning among them that says the file (or its gzip stream) ends before its end: the
    # capture lost what came after it and nothing before (model/wire places it there).
    cut: str | None = None


def _cookie_array(texts):
    """The cookies as 8 bytes each, not a Python int's 32 (a big capture has millions of
    entries); a value that is no cookie is left out. All at once where all are numbers (a
    reply's hundreds of entries, 6x faster than one by one)."""
    try:
        return array("Q", map(int, texts))
    except (ValueError, OverflowError):
        return array("Q", (c for c in map(int_or_none, texts) if c is not None and c >= 0))


class Call:
    """A call (READDIR or GETATTR) waiting for its reply, and the reply's values once it comes
    (the passes read them). Slots, not a dict: a server's capture has thousands waiting at
    once. Once a READDIR's reply is read the Call is dropped: its values are in the passes'
    listing (and the table's columns, row `i`, where read() keeps the tables)."""

    __slots__ = (
        "kind",
        "i",
        "ts",
        "frame",
        "client",
        "fh",
        "vers",
        "plus",
        "cookie",
        "maxcount",
        "reply_ts",
        "status",
        "eof",
        "fileid",
        "cookies",
    )

    def __init__(self, kind, fh, vers, i=None, ts=None, client=None, plus=None, cookie=None):
        self.kind, self.fh, self.vers, self.i = kind, fh, vers, i
        self.ts, self.client, self.plus, self.cookie = ts, client, plus, cookie
        self.frame = self.maxcount = None
        self.reply_ts = self.status = self.eof = self.fileid = self.cookies = None


class _Ints:
    """A column of integers or None, grown a row at a time: the values in a typed array (8
    bytes each, where a Python int is 28-32 and a list's pointer 8 more), one byte a row
    saying which are missing. "q" for signed 64-bit values, "Q" for cookies (no float on
    the way: an IntegerArray is made of the array itself)."""

    __slots__ = ("values", "missing")

    def __init__(self, code):
        self.values, self.missing = array(code), bytearray()

    def append(self, v):
        if v is None:
            self.values.append(0)
            self.missing.append(1)
        else:
            self.values.append(v)
            self.missing.append(0)

    def __setitem__(self, i, v):
        if v is not None:
            self.values[i] = v
            self.missing[i] = 0

    def pandas(self):
        """The column as pandas' Int64 or UInt64, of the array itself: the column is done."""
        import numpy as np
        import pandas as pd

        dtype = np.uint64 if self.values.typecode == "Q" else np.int64
        values = np.frombuffer(self.values, dtype=dtype)
        return pd.arrays.IntegerArray(values, np.frombuffer(self.missing, dtype=bool))


# The READDIR table's columns of integers: "Q" cookies, the rest "q" (Int64). The others
# (client, fh, vers, plus, verifier, eof) are Python objects each shared by many rows.
INTS = {
    "ts": "q",
    "frame": "q",
    "xid": "q",
    "cookie": "Q",
    "dircount": "q",
    "maxcount": "q",
    "reply_ts": "q",
    "status": "q",
    "entries": "q",
    "last_cookie": "Q",
    "fileid": "q",
}
# The attribute replies' table: ts and frame typed; the rest lists, their dtypes pandas'
# choice as before (version: Python ints, a v3 one 128 bits; fileid: ints, None, or past int64).
ATTRS = ("ts", "frame", "client", "fh", "version", "fileid", "source")
ATTR_INTS = ("ts", "frame")


def _columns(names, ints):
    return {c: _Ints(INTS[c]) if c in ints else [] for c in names}


# How long after its reply a READDIR call seen again is taken for a retransmission: an NFS
# client retransmits a call after timeo (60 s over TCP by default, growing by as much each try;
# 1.1 s doubling to 60 s over UDP), and a hard mount tries again and again while no reply
# comes, but a call whose reply came is retransmitted only where the reply was lost after the
# capture saw it, within a few timeouts.
RETRANSMIT_NS = 10 * 60 * 10**9


class CaptureReader:
    """From tshark's lines to the tables: one pass, calls kept until their reply."""

    def __init__(self, path, kind, several, passes=None, tables=True, calls=True):
        self.cap = Capture(path, kind, None, None)
        self.several = several  # the frames with several RPC messages, message by message
        # Told of each READDIR call, in order, and of its reply: a reply's entry cookies go
        # there and nowhere else (millions of them in a big capture; the tables keep none).
        self.passes = self.cap.passes = passes() if passes else None
        # Every call, from the rows (calls=False: the compiled decoder keeps them itself).
        self.ops = self.cap.calls = CallLog() if calls else None
        self.calls = {}  # (client, xid) -> Call, until its reply
        # READDIRs replied to in the last RETRANSMIT_NS, as client number << 32 | xid, and
        # (reply time, key) in the order they came: a call seen again is a
        # retransmission, its reply a duplicate.
        self.replied: set = set()
        self.replied_at: deque = deque()
        self.client_no: dict[str, int] = {}
        self.rows = 0  # READDIRs, in call order: the columns' length
        # The tables' columns, where they are kept.
        self.cols = _columns(TABLE, INTS) if tables else None
        self.attrs = _columns(ATTRS, ATTR_INTS) if tables else None
        # Each client's and directory's name as one string, however many rows name it.
        self.names: dict[str, str] = {}
        self.messages = 0

    # -- one frame -------------------------------------------------------------------------
    def frame(self, v):
        if len(v) < len(FIELDS):
            v = v + [""] * (len(FIELDS) - len(v))
        cap = self.cap
        cap.port_frames += 1
        cap_len, length = int_or_none(v[COL["cap_len"]]), int_or_none(v[COL["len"]])
        truncated = cap_len is not None and length is not None and cap_len < length
        xids = split_values(v[COL["xid"]])
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
            self.message(v)
            return
        layers = self.several.get(int_or_none(v[COL["frame"]]))
        rows = message_rows(v, layers) if layers else None
        if rows is None or len(rows) != len(xids):
            cap.unsplit_frames += 1
            return
        cap.split_frames += 1
        for row in rows:
            self.message(row)

    def message(self, v):
        """One RPC message: its frame's addresses and time, its own RPC and NFS fields."""
        ts = epoch_ns(v[COL["ts"]])
        src = v[COL["src"]] or v[COL["src6"]]
        dst = v[COL["dst"]] or v[COL["dst6"]]
        sport = v[COL["sport"]] or v[COL["usport"]]
        dport = v[COL["dport"]] or v[COL["udport"]]
        frame = int_or_none(v[COL["frame"]])
        xid = int_or_none(v[COL["xid"]], 0)
        kind = v[COL["msgtyp"]][:1]
        client = self._name(endpoint(src, sport) if kind == "0" else endpoint(dst, dport))
        if self.ops is not None:
            self.ops.message(v, kind, ts, frame, client, xid)  # every program's calls counted
        prog = int_or_none(first(v, "prog"))
        if prog is not None and prog != NFS_PROGRAM:
            return
        if kind == "0":
            self._call(v, ts, client, xid, frame)
        elif kind == "1":
            self._reply(v, ts, client, xid, frame)

    def _name(self, text):
        return self.names.setdefault(text, text)

    def _remember(self, key, ts):
        """A READDIR was replied to: a call with its key is a retransmission for
        RETRANSMIT_NS after (kept no longer: the set would grow with the capture)."""
        self.replied.add(key)
        if ts is not None:
            self.replied_at.append((ts, key))

    def _forget(self, ts):
        """The replies before RETRANSMIT_NS ago, forgotten."""
        at = self.replied_at
        while ts is not None and at and at[0][0] < ts - RETRANSMIT_NS:
            self.replied.discard(at.popleft()[1])

    def _replied(self, client, xid):
        no = self.client_no.setdefault(client, len(self.client_no))
        return no << 32 | xid if xid is not None else (no, None)  # (an XID tshark could not read)

    # -- calls -----------------------------------------------------------------------------
    def _call(self, v, ts, client, xid, frame):
        vers = int_or_none(first(v, "vers"))
        proc = int_or_none(first(v, "proc"))
        fhs = split_values(v[COL["fh"]])
        key = (client, xid)
        self._forget(ts)
        if key in self.calls or self._replied(client, xid) in self.replied:
            if key not in self.calls or self.calls[key].kind == "readdir":
                self.cap.retransmitted_calls += 1
            return  # a retransmission: the first transmission is the call
        if vers == 2:
            self.cap.versions.add("2")  # not analyzed: read() callers say so
        elif vers == 3:
            self.cap.versions.add("3")
            if proc in (NFS3_READDIR, NFS3_READDIRPLUS) and fhs:
                plus = proc == NFS3_READDIRPLUS
                self._open_call(
                    key,
                    (ts, frame, client, self._name(fhs[0]), xid),
                    "3",
                    plus,
                    first(v, "cookie3"),
                    first(v, "verf3"),
                    first(v, "dircount3") if plus else "",
                    first(v, "maxcount3" if plus else "count3"),
                )
            elif proc == NFS3_GETATTR and fhs:
                self.calls[key] = Call("getattr", self._name(fhs[0]), "3")
        elif vers == 4 and proc == NFS4_COMPOUND:
            op = int_or_none(first(v, "mainop"))
            minor = int_or_none(first(v, "minor"))
            if minor is not None:
                self.cap.versions.add(f"4.{minor}")
            # The directory is the filehandle the compound's PUTFH sets: the first one.
            if op == OP4_READDIR and fhs:
                self._open_call(
                    key,
                    (ts, frame, client, self._name(fhs[0]), xid),
                    "4",
                    False,
                    first(v, "cookie4"),
                    first(v, "verf4"),
                    first(v, "dircount4"),
                    first(v, "maxcount4"),
                )
            elif op == OP4_GETATTR and len(fhs) == 1:
                # Only a plain PUTFH+GETATTR: in a compound that moves the current filehandle
                # (LOOKUP, OPEN) the attributes may be another object's.
                self.calls[key] = Call("getattr", self._name(fhs[0]), "4")

    def _open_call(self, key, where, vers, plus, cookie, verifier, dircount, maxcount):
        """A READDIR call (its values as tshark gives them), waiting for its reply."""
        ts, frame, client, fh, xid = where
        cookie = int_or_none(cookie)
        row = Call("readdir", fh, vers, self.rows, ts, client, plus, cookie)
        row.frame, row.maxcount = frame, int_or_none(maxcount)
        self.calls[key] = row
        self.rows += 1
        c = self.cols
        if c is not None:
            c["ts"].append(ts)
            c["frame"].append(frame)
            c["client"].append(client)
            c["fh"].append(fh)
            c["xid"].append(xid)
            c["vers"].append(vers)
            c["plus"].append(plus)
            c["cookie"].append(cookie)
            c["verifier"].append(self._name(verifier) if verifier else None)
            c["dircount"].append(int_or_none(dircount))
            c["maxcount"].append(row.maxcount)
            for name in ("reply_ts", "status", "entries", "last_cookie", "eof", "fileid"):
                c[name].append(None)  # until the reply
        if self.passes is not None:
            self.passes.call(row, row.i)

    # -- replies ---------------------------------------------------------------------------
    def _reply(self, v, ts, client, xid, frame):
        call = self.calls.get((client, xid))
        if call is None:
            return  # a reply to a call not followed (or from before the capture)
        accepted = v[COL["replystat"]][:1] == "0" and v[COL["accept"]][:1] == "0"
        if call.vers == "3":
            status = int_or_none(first(v, "status3")) if accepted else -1
            ver, fileid = self._v3_attrs(v)
        else:
            status = int_or_none(first(v, "status4")) if accepted else -1
            ver = int_or_none(first(v, "change4")) if call.kind == "getattr" else None
            fileid = int_or_none(first(v, "fileid4")) if call.kind == "getattr" else None
        if ver is not None and status == 0:
            self.cap.attr_replies += 1
            a = self.attrs
            if a is not None:
                # Into the attribute table's columns, not a row object: a big capture has
                # 100,000s of them.
                a["ts"].append(ts)
                a["frame"].append(frame)
                a["client"].append(client)
                a["fh"].append(call.fh)
                a["version"].append(ver)
                a["fileid"].append(fileid)
                a["source"].append("GETATTR" if call.kind == "getattr" else "READDIR")
            if self.passes is not None:
                self.passes.attr(client, call.fh, frame, ver, fileid, call.kind == "getattr", ts=ts)
        del self.calls[(client, xid)]  # a reply again is a duplicate
        if call.kind != "readdir":
            return
        self._remember(self._replied(client, xid), ts)
        c, i = self.cols, call.i
        call.reply_ts, call.status = ts, status
        if c is not None:
            c["reply_ts"][i] = ts
            c["status"][i] = status
        if status == 0:
            if call.vers == "3":
                cookies = v[COL["epcookie3" if call.plus else "ecookie3"]]
                eof = flag(first(v, "eof3"))
                call.fileid = fileid
            else:
                cookies = v[COL["cookie4"]]
                eof = flag(first(v, "eof4"))
            # The compiled decoder gives them as native 64-bit integers (bytes), tshark as text.
            if isinstance(cookies, bytes):
                cookies = array("Q", cookies)
            else:
                cookies = _cookie_array(split_values(cookies))
            call.eof = eof
            if c is not None:
                c["entries"][i] = len(cookies)
                if cookies:
                    c["last_cookie"][i] = cookies[-1]
                c["eof"][i] = eof
                c["fileid"][i] = call.fileid
            if self.passes is not None:
                call.cookies = cookies
        if self.passes is not None:
            self.passes.reply(call)

    @staticmethod
    def _v3_attrs(v):
        """The post-op attributes of a v3 reply's object: its mtime and ctime (nanoseconds,
        as one version number) and fileid. In a READDIRPLUS reply the directory's own come
        first, before the entries'."""
        ms, mn = split_values(v[COL["mtime_s"]])[:1], split_values(v[COL["mtime_ns"]])[:1]
        cs, cn = split_values(v[COL["ctime_s"]])[:1], split_values(v[COL["ctime_ns"]])[:1]
        if not (ms and mn and cs and cn):
            return None, None
        mtime = int(ms[0]) * 10**9 + int(mn[0])
        ctime = int(cs[0]) * 10**9 + int(cn[0])
        # One number that moves when either does: the pair, packed.
        return (ctime << 64) | mtime, int_or_none(first(v, "fileid3"))

    # -- the end ---------------------------------------------------------------------------
    def finish(self):
        cap = self.cap
        cap.readdir_calls = self.rows
        cap.missing_replies = sum(c.kind == "readdir" for c in self.calls.values())
        if self.passes is not None:
            self.passes.end()
        if self.cols is None:
            return cap
        import pandas as pd  # only a capture's tables need it (0.5 s to import)

        # Each column of integers an IntegerArray of its own typed array: no 64-bit cookie
        # goes through a float.
        cols, self.cols = self.cols, None
        df = pd.DataFrame(
            {
                c: cols[c].pandas() if c in INTS else pd.Series(cols[c], dtype="object")
                for c in TABLE
            }
        )
        # In the capture's order, as both decoders give the messages (frame numbers tell apart
        # what coarse timestamps tie): the passes know the calls by their row here.
        if not df["frame"].is_monotonic_increasing:
            raise RuntimeError(f"{cap.path}: the decoder gave RPC messages out of frame order")
        a, self.attrs = self.attrs, None
        assert a is not None  # (kept with self.cols)
        attrs = pd.DataFrame({c: a[c] for c in ATTRS if c not in ATTR_INTS}, columns=list(ATTRS))
        for c in ATTR_INTS:
            attrs[c] = a[c].pandas()
        cap.readdirs, cap.attrs = (
            df,
            attrs.sort_values("frame", kind="stable").reset_index(drop=True),
        )
        return cap
