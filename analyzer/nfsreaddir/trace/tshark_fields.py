"""The fields the capture reader asks tshark for (`-T fields`, one line a frame) and how
their values read: the layout of a row, the NFS numbers that pick the READDIR and GETATTR
calls out of it, the parsers of tshark's printed values, and the rows of a frame that carries
several RPC messages, from the second tshark's -T ek.

Field names are those of Debian 12's tshark 4.0 (`tshark -G fields`).
"""

from .tshark_ek import ek_text

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


def split_values(v):
    return v.split(",") if v else []


def int_or_none(v, base=10):
    try:
        return int(v, base)
    except (TypeError, ValueError):
        return None


def flag(v):
    """A boolean as tshark 4.0 prints it (1/0, or True/False in some versions)."""
    if v in ("1", "True", "true"):
        return True
    if v in ("0", "False", "false"):
        return False
    return None


def epoch_ns(epoch):
    """frame.time_epoch ("1795425767.268122880") in integer nanoseconds, exactly."""
    sec, _, frac = epoch.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def endpoint(addr, port):
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def message_rows(v, layers):
    """One field row per RPC message of a frame: the frame's own fields from -T fields, each
    message's from its rpc object and, where it has an NFS body, its nfs object. None when the
    messages and the NFS bodies do not pair up (then nothing is guessed)."""
    rpcs, bodies = layers.get("rpc", []), layers.get("nfs", [])
    rows: list[list[str]]
    rows, nfs = [], []  # nfs: the indexes in rows of the messages with an NFS body
    for m in rpcs:
        row = list(v)
        for name, f in FIELDS:
            if f.startswith("rpc."):
                row[COL[name]] = ek_text(m.get("rpc_" + f.replace(".", "_"), []))
        reply = row[COL["msgtyp"]][:1] == "1"
        accepted = not reply or (row[COL["replystat"]][:1] == "0" and row[COL["accept"]][:1] == "0")
        if int_or_none(row[COL["prog"]].split(",")[0]) == NFS_PROGRAM and accepted:
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
