"""The trace's READDIRs and the reader's calls in one stream, in the order they happened: a
process's events of one timestamp put back in the only order its calls allow, and each system
call return marked when the getdents64 it ends went into NFS. opens.py's listings are made from
this stream.
"""

import numpy as np

from ..units import int_or_none


def merged(rpc, calls):
    """READDIRs and reader calls in time order (a call before a READDIR at the same instant:
    the READDIR happens inside the call), with each syscall return marked when the
    getdents64 it ends went into NFS."""
    a = {
        "ts": rpc["ts"].tolist(),
        "pid": rpc["pid"].tolist(),
        "comm": rpc["comm"].tolist(),
        "cookie": rpc["cookie"].tolist(),
        "dir": rpc["fileid"].tolist(),
    }
    readdirs = [
        {"ts": t, "pid": p, "comm": c, "kind": "rpc", "order": 1, "row": k, "cookie": ck, "dir": d}
        for k, (t, p, c, ck, d) in enumerate(zip(*a.values()))
    ]
    names = calls.columns
    reader_calls = [
        dict(zip(names, v), kind="call", row=-1, order=0)
        for v in zip(*(calls[c].tolist() for c in names))
    ]
    # The tables hold each event's rows apart, so at one timestamp (a coarse emulated clock
    # gives several events one) the trace's own order is gone; _causal() puts a process's
    # events of one instant back in the only order its calls allow. (The calls first, then
    # the READDIRs, each in time order: a stable sort by time.)
    rows = reader_calls + readdirs
    order = np.argsort(np.array([r["ts"] for r in rows], dtype=np.int64), kind="stable")
    out = _causal([rows[i] for i in order.tolist()], "sys_getdents" in calls["call"].tolist())
    returns = Returns()
    for r in out:
        in_fs = returns.seen(r["pid"], r["call"] if r["kind"] == "call" else None)
        if in_fs is not None:
            r["in_fs"] = in_fs
    return out


class Returns:
    """Which getdents64 returns end a call that went into NFS (the file system's readdir or a
    READDIR within it): only those say how a listing's read ended (0: the end of the
    directory), a return from another file system says nothing of it. Fed each event of the
    reader's calls and each READDIR in order: merged() over a whole trace, watch as events
    come."""

    def __init__(self):
        self.entered = {}  # pid -> went into NFS, while in a getdents64 system call

    def seen(self, pid, call=None):
        """A call of process pid (None: a READDIR). For a getdents64 return, whether that
        getdents64 went into NFS; else None."""
        if call == "sys_getdents":
            self.entered[pid] = False
        elif call is None or call == "getdents":
            if pid in self.entered:
                self.entered[pid] = True
        elif call == "sys_getdents_ret":
            return self.entered.pop(pid, False)
        return None


def _causal(rows, has_sys):
    """Each process's events of one timestamp in causal order: opens, closes and seeks outside
    a call; a getdents64's entry, the file system's readdir within it, the READDIRs it makes,
    its return, the system call's return. has_sys: the trace records the system calls (else a
    file system return ends the call)."""
    # Where a process is: outside any call (0), in a getdents64 system call (1), in the file
    # system's readdir within it (2), or back from the file system and returning (3).
    level: dict[int, int] = {}
    cur: dict[int, dict] = {}
    out, i = [], 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j]["ts"] == rows[i]["ts"]:
            j += 1
        group, i = rows[i:j], j
        pids = list(dict.fromkeys(r["pid"] for r in group))
        for pid in pids:
            pending = [r for r in group if r["pid"] == pid]
            lv = level.get(pid, 0)
            while pending:
                r = pending.pop(_pick(pending, lv, cur.get(pid)))
                out.append(r)
                lv = _after(_kind(r), lv, has_sys)
                if _kind(r) == "getdents":
                    cur[pid] = int_or_none(r.get("fileid"))
            level[pid] = lv
    return out


# Outside a call an open comes before the reads of the file, and a close after them.
_OUTSIDE = (
    "llseek",
    "sys_lseek",
    "opendir",
    "sys_getdents",
    "getdents",
    "rpc",
    "sys_getdents_ret",
    "getdents_done",
    "closedir",
)
_PREFER = {  # what can happen next at each level, most likely first
    0: _OUTSIDE,
    1: ("getdents", "rpc", "sys_getdents_ret", "getdents_done"),
    2: ("rpc", "getdents_done", "sys_getdents_ret"),
    3: ("sys_getdents_ret",) + _OUTSIDE,
}


def _pick(pending, lv, directory):
    """Which of a process's pending events of one instant happened next. directory: the one
    the process's current readdir reads, where the trace says."""
    if lv in (0, 3):
        # A file closed and its slot opened again: the close first.
        opening = {r.get("file") for r in pending if _kind(r) == "opendir"}
        for n, r in enumerate(pending):
            if _kind(r) == "closedir" and r.get("file") in opening:
                return n
    for want in _PREFER[lv]:
        for n, r in enumerate(pending):
            # A READDIR of another directory belongs to a later readdir.
            if _kind(r) == want and not (
                want == "rpc"
                and lv == 2
                and directory is not None
                and int_or_none(r.get("dir")) not in (None, directory)
            ):
                return n
    return 0


def _kind(r):
    return "rpc" if r["kind"] == "rpc" else r["call"]


_LEVEL_AFTER = {"sys_getdents": 1, "getdents": 2, "sys_getdents_ret": 0}


def _after(kind, lv, has_sys):
    if kind == "getdents_done":
        return 3 if has_sys else 0
    return _LEVEL_AFTER.get(kind, lv)
