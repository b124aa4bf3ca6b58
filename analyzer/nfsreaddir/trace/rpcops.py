"""Every NFS and NFSACL call of a capture, by program and operation, with its reply's time: what
a listing's round trips are counted from (model/roundtrips). tshark gives rpcmatch one row per
RPC message (tshark_fields.FIELDS) and rpcmatch hands each to a CallLog, which keeps a call's
first transmission (a call seen again with the same client and XID before its reply is counted
as retransmitted) and, for a READDIR, the number of entries its reply carried. The compiled
decoder keeps the same log in C as it reads (csrc/wiredecode/calllog.c), with no row for the
calls rpcmatch does not read, and CallLog.decoded takes it whole.

Names are the protocols' own, as Wireshark gives them: NFSv3 and NFSACL procedures, and for an
NFSv4 COMPOUND its main operation (Wireshark's ranking, nfs.main_opcode), so that the counts
compare with tshark's (reproducers/wire-ops: call.NFS3.GETATTR, call.NFSACL3.GETACL,
call.NFS4.main.READDIR).
"""

from __future__ import annotations

from array import array

from .tshark_fields import COL, int_or_none, split_values

NFS_PROGRAM, NFSACL_PROGRAM = 100003, 100227
PROGRAMS = {NFS_PROGRAM: "NFS", NFSACL_PROGRAM: "NFSACL"}
NFS3_PROCS = (
    "NULL GETATTR SETATTR LOOKUP ACCESS READLINK READ WRITE CREATE MKDIR SYMLINK MKNOD REMOVE "
    "RMDIR RENAME LINK READDIR READDIRPLUS FSSTAT FSINFO PATHCONF COMMIT"
).split()
NFSACL_PROCS = {
    2: "NULL GETACL SETACL GETATTR ACCESS GETXATTRDIR".split(),
    3: "NULL GETACL SETACL".split(),
}
# NFSv4 operations by number (RFC 7530, 8881): the main operation of a COMPOUND.
NFS4_OPS = dict(
    enumerate(
        (
            "ACCESS CLOSE COMMIT CREATE DELEGPURGE DELEGRETURN GETATTR GETFH LINK LOCK LOCKT "
            "LOCKU LOOKUP LOOKUPP NVERIFY OPEN OPENATTR OPEN_CONFIRM OPEN_DOWNGRADE PUTFH "
            "PUTPUBFH PUTROOTFH READ READDIR READLINK REMOVE RENAME RENEW RESTOREFH SAVEFH "
            "SECINFO SETATTR SETCLIENTID SETCLIENTID_CONFIRM VERIFY WRITE RELEASE_LOCKOWNER "
            "BACKCHANNEL_CTL BIND_CONN_TO_SESSION EXCHANGE_ID CREATE_SESSION DESTROY_SESSION "
            "FREE_STATEID GET_DIR_DELEGATION GETDEVICEINFO GETDEVICELIST LAYOUTCOMMIT LAYOUTGET "
            "LAYOUTRETURN SECINFO_NO_NAME SEQUENCE SET_SSV TEST_STATEID WANT_DELEGATION "
            "DESTROY_CLIENTID RECLAIM_COMPLETE ALLOCATE COPY COPY_NOTIFY DEALLOCATE IO_ADVISE "
            "LAYOUTERROR LAYOUTSTATS OFFLOAD_CANCEL OFFLOAD_STATUS READ_PLUS SEEK WRITE_SAME "
            "CLONE GETXATTR SETXATTR LISTXATTRS REMOVEXATTR"
        ).split(),
        start=3,
    )
)
READDIR_OPS = {"READDIR", "READDIRPLUS"}


def op_name(prog, vers, proc, mainop):
    """(program label, operation) of a call: ("NFS3", "GETATTR"), ("NFSACL3", "GETACL"),
    ("NFS4", "READDIR") for a COMPOUND whose main operation is READDIR."""
    label = f"{PROGRAMS.get(prog, prog)}{vers if vers is not None else ''}"
    if prog == NFS_PROGRAM and vers == 4 and proc == 1:
        return label, NFS4_OPS.get(mainop, "COMPOUND" if mainop is None else f"op{mainop}")
    if prog == NFS_PROGRAM and vers == 3 and proc is not None and proc < len(NFS3_PROCS):
        return label, NFS3_PROCS[proc]
    names = NFSACL_PROCS.get(vers, ()) if prog == NFSACL_PROGRAM else ()
    if proc is not None and proc < len(names):
        return label, names[proc]
    return label, f"proc{proc}"


def _entries(v, op, plus):
    """The entries of a READDIR reply's row: raw cookies (compiled decoder) or tshark's text."""
    if op not in READDIR_OPS:
        return -1
    cookies = v[COL["cookie4" if plus is None else "epcookie3" if plus else "ecookie3"]]
    if isinstance(cookies, bytes):
        return len(cookies) // 8
    return len(split_values(cookies))


class CallLog:
    """The calls as columns in typed arrays (a big capture has millions of calls: 32 bytes
    each): ts, reply_ts (-1: no reply in the capture), client (its number in `clients`), op
    (its number in `names`, (program, operation) pairs), xid (-1: not read); a READDIR's frame
    and its reply's entries, kept for READDIRs alone, by row."""

    def __init__(self):
        self.ts, self.reply_ts, self.xid = array("q"), array("q"), array("q")
        self.client, self.op = array("i"), array("i")
        self.clients: dict[str, int] = {}
        self.ops: dict[tuple, int] = {}
        self.names: list[tuple] = []  # the ops' keys by number
        self.frames: dict[int, int] = {}  # READDIR row -> its call's frame
        self.entries: dict[int, int] = {}  # READDIR row -> its reply's entries
        self.pending: dict[tuple, int] = {}  # (client, xid) -> row, until the reply
        self.retransmitted = 0

    def __len__(self):
        return len(self.ts)

    @classmethod
    def decoded(cls, d):
        """The log the compiled decoder kept (its stats["calls"]): the columns as bytes of
        native integers, the clients' names and the operations' (program, version, procedure,
        main operation) by number, as message() would have made them from its rows."""
        import numpy as np

        log = cls()
        for name in ("ts", "reply_ts", "xid", "client"):
            getattr(log, name).frombytes(d[name])
        log.clients = {name: i for i, name in enumerate(d["clients"])}
        # Operations the decoder tells apart may have one name (a procedure past the names):
        # each name numbered once, in the order of its first call, as message() numbers them.
        number = [log.ops.setdefault(op_name(*key), len(log.ops)) for key in d["ops"]]
        log.names = list(log.ops)
        op = np.frombuffer(d["op"], dtype=np.int32)
        if number != list(range(len(number))):
            op = np.asarray(number, dtype=np.int32)[op]
        log.op.frombytes(op.tobytes())
        rows = np.frombuffer(d["readdir_row"], dtype=np.int64).tolist()
        frames = np.frombuffer(d["readdir_frame"], dtype=np.int64).tolist()
        entries = np.frombuffer(d["readdir_entries"], dtype=np.int64).tolist()
        log.frames = dict(zip(rows, frames))
        log.entries = {row: e for row, e in zip(rows, entries) if e >= 0}
        log.retransmitted = d["retransmitted"]
        return log

    def message(self, v, kind, ts, frame, client, xid):
        """One RPC message's row: a call of NFS or NFSACL is kept, a reply completes its call."""
        prog = int_or_none(v[COL["prog"]].split(",")[0])
        if kind == "0" and prog in PROGRAMS:
            key = (client, xid)
            if key in self.pending:
                self.retransmitted += 1
                return
            vers = int_or_none(v[COL["vers"]].split(",")[0])
            proc = int_or_none(v[COL["proc"]].split(",")[0])
            mainop = int_or_none(v[COL["mainop"]].split(",")[0])
            name = op_name(prog, vers, proc, mainop)
            if name not in self.ops:
                self.ops[name] = len(self.names)
                self.names.append(name)
            row = len(self.ts)
            self.pending[key] = row
            self.ts.append(ts)
            self.reply_ts.append(-1)
            self.xid.append(xid if xid is not None else -1)
            self.client.append(self.clients.setdefault(client, len(self.clients)))
            self.op.append(self.ops[name])
            if name[1] in READDIR_OPS and frame is not None:
                self.frames[row] = frame
        elif kind == "1":
            i = self.pending.pop((client, xid), None)
            if i is None:
                return
            self.reply_ts[i] = ts
            label, op = self.names[self.op[i]]
            ok = (v[COL["status3"]] or v[COL["status4"]]).split(",")[0] in ("0", "")
            if op in READDIR_OPS and ok:
                plus = None if label.startswith("NFS4") else op == "READDIRPLUS"
                self.entries[i] = _entries(v, op, plus)

    def xids(self, known_calls=()):
        """({client: the numbers of its calls seen, sorted, each once}, {a READDIR call's
        frame: its number}): a Linux client numbers its calls on a connection one by one (its
        transport's xid counter), so the numbers between two of its calls that the capture has
        no call of are calls it sent that the capture lost (model/wire.py). Linux writes the
        counter as it is in memory (xprt_alloc_xid), so a little-endian client's XIDs count
        in their last byte first: per client, the byte order in which its XIDs run one by one
        is the count. known_calls: (client, XID) of calls the capture lost but knows otherwise
        (their replies), counted among the client's in the same order."""
        import numpy as np

        n = len(self.ts)
        xid = np.frombuffer(self.xid, dtype=np.int64) if n else np.zeros(0, np.int64)
        client = np.frombuffer(self.client, dtype=np.int32) if n else np.zeros(0, np.int32)
        known = xid >= 0
        swapped = np.where(known, xid, 0).astype(">u4").view("<u4").astype(np.int64)
        count = xid.copy()
        extra: dict[str, list] = {}
        for name, x in known_calls:
            extra.setdefault(name, []).append(x)
        seen = {}
        # Each client's rows at once (a mask per client was calls x clients: 2,381 of them
        # at a million packets).
        order = np.argsort(client, kind="stable")
        bounds = np.searchsorted(client[order], np.arange(len(self.clients) + 1))
        for name, c in self.clients.items():
            mine = order[bounds[c] : bounds[c + 1]]
            mine = mine[known[mine]]
            raw, other = np.unique(xid[mine]), np.unique(swapped[mine])
            more = np.asarray(extra.get(name, ()), dtype=np.int64)
            if np.count_nonzero(np.diff(other) == 1) > np.count_nonzero(np.diff(raw) == 1):
                raw = other
                count[mine] = swapped[mine]
                more = more.astype(">u4").view("<u4").astype(np.int64)
            seen[name] = np.union1d(raw, more) if len(more) else raw
        return seen, {f: int(count[row]) for row, f in self.frames.items() if known[row]}

    def by_client(self):
        """{client: (ts, reply_ts (-1: none), op name, frame (-1 but for READDIRs))} of its
        calls, in the capture's order, as arrays (model/windows.wire_end reads them)."""
        import numpy as np

        n = len(self.ts)
        if not n:
            return {}
        ts = np.frombuffer(self.ts, dtype=np.int64)
        reply = np.frombuffer(self.reply_ts, dtype=np.int64)
        client = np.frombuffer(self.client, dtype=np.int32)
        names = np.array([op for _, op in self.names], dtype=object)
        op = names[np.frombuffer(self.op, dtype=np.int32)]
        frame = np.full(n, -1, dtype=np.int64)
        if self.frames:
            frame[np.fromiter(self.frames.keys(), np.int64)] = np.fromiter(
                self.frames.values(), np.int64
            )
        order = np.argsort(client, kind="stable")
        bounds = np.searchsorted(client[order], np.arange(len(self.clients) + 1))
        out = {}
        for name, c in self.clients.items():
            rows = order[bounds[c] : bounds[c + 1]]
            out[name] = (ts[rows], reply[rows], op[rows], frame[rows])
        return out

    def table(self):
        """The calls as a DataFrame: ts, frame (NA but for READDIRs), client, program, op,
        reply_ts (NA without a reply), entries (NA but for READDIR replies)."""
        import numpy as np
        import pandas as pd

        n = len(self.ts)

        def col(a, dtype):
            return np.frombuffer(a, dtype=dtype).astype(np.int64) if n else np.zeros(0, np.int64)

        def sparse(d):
            v = np.full(n, -1, dtype=np.int64)
            if d:
                v[np.fromiter(d.keys(), np.int64)] = np.fromiter(d.values(), np.int64)
            return pd.arrays.IntegerArray(v, v < 0)

        clients = np.array(list(self.clients), dtype=object)
        program, name = (np.array([k[i] for k in self.names], dtype=object) for i in (0, 1))
        op = col(self.op, np.int32)
        reply = col(self.reply_ts, np.int64)
        return pd.DataFrame(
            {
                "ts": col(self.ts, np.int64),
                "frame": sparse(self.frames),
                "client": clients[col(self.client, np.int32)] if n else np.zeros(0, object),
                "program": program[op],
                "op": name[op],
                "reply_ts": pd.arrays.IntegerArray(reply, reply < 0),
                "entries": sparse(self.entries),
            }
        )
