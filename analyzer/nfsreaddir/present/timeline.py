"""What happened along one listing, event by event, as the HTML report and the chrome-trace
export draw it: its READDIRs (number, cookie, whether a restart or of unknown cause), the
getdents calls of its process, its invalidations and restarts. Read from the analysis the
pipeline made (the listing and the canonical tables it was built from), never from a trace.
"""

import pandas as pd

from ..model.columns import frame
from ..recordtype import record

# The getdents64 syscall's entry and return, as the canonical calls table names them.
GETDENTS_ENTER, GETDENTS_RETURN = "sys_getdents", "sys_getdents_ret"
# The file system's readdir within it, with the open file it reads.
NFS_READDIR_CALL = "getdents"


@record
class Readdir:
    ts: int
    n: int  # 1 for the listing's first READDIR
    cookie: int | None  # None: the trace has no cookies
    restart: bool  # a restart (at cookie 0 or below the reader's position)
    ambiguous: bool  # back at cookie 0 for a cause the trace does not show


def process_of(lst):
    """Who listed: comm[pid], or for a listing seen on the wire its client."""
    return f"{lst.comm}[{lst.pid}]" if lst.pid is not None else f"client {lst.comm}"


def readdirs(lst):
    """The Readdir of each READDIR of a listing, in order."""
    restart = {r.rpc_index for r in lst.restarts}
    ambiguous = set(lst.ambiguous_rows)
    rpcs = frame(lst.rpcs)
    cookies = rpcs["cookie"] if lst.cookies_known and "cookie" in rpcs else None
    out = []
    for i, ts in enumerate(rpcs["ts"].tolist() if len(rpcs) else []):
        c = cookies.iloc[i] if cookies is not None else None
        out.append(
            Readdir(
                int(ts),
                i + 1,
                None if c is None or pd.isna(c) else int(c),
                i in restart,
                i in ambiguous,
            )
        )
    return out


def getdents(analysis, lst):
    """(entry ts, return ts or None) of each getdents64 of the listing during it; empty when
    the trace has no syscall events (a capture, a trace of READDIRs only). Where the file
    system's readdir is traced (NFS_READDIR_CALL, with the open file), a process's listings
    that overlap (find, in a tree) are told apart by that file, as the model's opens are."""
    calls = frame(analysis.tables.get("calls"))
    if calls is None or not len(calls) or lst.pid is None:
        return []
    mine = calls[(calls["pid"] == lst.pid) & (calls["ts"] >= lst.start) & (calls["ts"] <= lst.end)]
    mine = mine.sort_values("ts", kind="stable")
    enters = mine[mine["call"] == GETDENTS_ENTER]["ts"].tolist()
    returns = mine[mine["call"] == GETDENTS_RETURN]["ts"].tolist()
    inside = mine[mine["call"] == NFS_READDIR_CALL]
    if len(inside):
        inside = inside[inside["file"] == inside["file"].iloc[0]]
        starts = [max((e for e in enters if e <= t), default=t) for t in inside["ts"].tolist()]
    else:
        starts = enters
    return [(int(s), next((int(r) for r in returns if r >= s), None)) for s in starts]
