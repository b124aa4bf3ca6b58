"""Where a listing's time went: the RPCs its reader sent while it listed, by program and
operation (issue 46). A slow `ls -l` that no restart explains spends its time on round trips
per name (a GETATTR or LOOKUP and an NFSACL GETACL for each), not on READDIR.

One computation for both inputs, account(), over one table of calls (ts, program, op, and
where known reply_ts, the call's server time, and entries, a READDIR reply's):

- a trace: sunrpc:rpc_request events (tables' "requests"), the listing's process, from its
  first READDIR to its end (the close); server time where sunrpc:rpc_stats_latency was
  recorded (its rtt), else none;
- a capture: every NFS and NFSACL call (trace/rpcops), the listing's client (address:port),
  from its first READDIR to the client's next listing or the capture's end: the wire has no
  close, and the calls a lister makes for each name come after its last READDIR. An NFSv4
  client's lease renewals are not a lister's calls (its trace has them from a kworker), and
  are left outside. Server time is call to reply.

Names (for the counts per name) are the entries the listing's READDIR replies carried where the
input has them (a capture: each entry once; NFSv3 counts . and ..), else the lister's own count
(a reproducer's phase), else the files its process stat'd (a trace's nfs:nfs_getattr_enter);
where none of them, no count per name is given.

The calls the same process or client made outside the window are counted too (`outside`): the
lister's calls for the directory itself (its stat and ACL before the opendir) are there, and
window and outside together are every call of that process or client in the input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..events import REQUEST_SOURCE, UNCACHED_READDIR
from ..recordtype import as_dict, field, record
from ..units import NS
from .windows import (
    LEASE_RENEWALS,
    PER_NAME_OPS,
    READDIR_OPS,
    first_calls,
    first_readdir,
    window,
)


@record
class OpCount:
    """One program's operation during a listing."""

    program: str  # "NFS3", "NFSACL3", "NFS4" (an NFSv4 COMPOUND: by its main operation)
    op: str
    calls: int
    replied: int  # calls whose server time is known
    server_seconds: float | None  # call to reply, summed (None: not known)
    per_name: float | None  # calls per name (None: names not known)
    share: float | None  # server time over the listing's time

    @property
    def key(self):
        return f"{self.program}.{self.op}"

    @property
    def readdir(self):
        return self.op in READDIR_OPS


FINDINGS_ONLY = (
    "dtsizes",
    "counted_replies",
    "refetched_entries",
    "kernel",
    "uncached_readdirs",
    "restarted",
)


@record
class RoundTrips:
    """A listing's RPCs, accounted."""

    who: str  # "ls[375]" or "client 127.0.0.1:956"
    start: int  # the window: the listing's first READDIR call
    end: int  # its end: its close (trace), its reader's last call (capture: windows.wire_end)
    seconds: float
    calls_from: str  # the evidence: which events or which decoding
    window: str  # how the window was cut, in words
    names: int | None
    names_from: str | None
    server_time_from: str | None  # None: the input gives no server time
    ops: list[OpCount] = field(default_factory=list)  # most calls first
    outside: dict = field(default_factory=dict)  # "NFS3.GETATTR" -> calls outside the window
    # Calls of the same client in the window that are not the listing's (a capture): READDIRs
    # of another pass, another program's operations; its per-name calls may be partly theirs.
    shared: dict = field(default_factory=dict)
    readdirs: int = 0
    readdir_entries: int | None = None  # entries the READDIR replies carried (each time)
    max_dtsize: int | None = None  # the largest READDIR size asked (bytes)
    # The READDIRs' sizes asked (bytes) where each READDIR says, in the order sent, and the
    # number of READDIRs whose reply the input counts (the wire: readdir_entries is theirs).
    dtsizes: list = field(default_factory=list)
    counted_replies: int | None = None
    # Entries the READDIR replies carried that an earlier reply of the pass had carried too
    # (the wire): a client that asked again from inside a reply it had (5.10 keeps one page).
    refetched_entries: int | None = None
    kernel: str | None = None  # the client's release, where the input says
    # READDIRs of the uncached mode (the kernel's nfs:nfs_readdir_uncached events: the
    # reader's cookie was not in the directory's page cache), None where the input cannot
    # tell (a capture, a trace without those events)
    uncached_readdirs: int | None = None
    # Whether the listing restarted, may have, lost events, or met a change of its directory
    # (an invalidation, a new version): its READDIRs are then partly the change's refetch,
    # the restart verdict's to explain, not their sizes'.
    restarted: bool = False

    @property
    def calls(self):
        return sum(o.calls for o in self.ops)

    def counts(self):
        """{"NFS3.GETATTR": calls} in the window."""
        return {o.key: o.calls for o in self.ops}

    def server_seconds(self):
        known = [o.server_seconds for o in self.ops if o.server_seconds is not None]
        return round(sum(known), 3) if known else None

    def to_dict(self):
        d = as_dict(self)
        d["ops"] = [as_dict(o) for o in self.ops]
        # What the findings read beyond the accounting (rules/slowness) is said in their
        # evidence, not repeated here.
        for k in FINDINGS_ONLY:
            d.pop(k)
        d["calls"] = self.calls
        d["server_seconds"] = self.server_seconds()
        return d


def program_name(name, version):
    """A trace's progname and version as the capture's label: ("nfsacl", 3) -> "NFSACL3"."""
    known = version is not None and version == version  # (NaN: a damaged line of text)
    return f"{str(name).upper()}{int(version) if known else '?'}"


def _ops(program, op, server_ns, names, seconds, ts):
    """OpCounts of the window's calls (arrays; ts: when each was sent), most calls first. A
    share is the part of the window in which at least one call of that operation waited for
    the server: calls sent side by side (two passes, readahead) overlap, and their summed
    server time can outrun the window, but the time they took of it cannot."""
    out = []
    keys = np.array([f"{p}\0{o}" for p, o in zip(program, op)], dtype=object)
    for key in sorted(set(keys.tolist())):
        m = keys == key
        p, o = key.split("\0")
        st = server_ns[m]
        replied = ~np.isnan(st)
        known = st[replied]
        server = float(known.sum()) / NS if len(known) else None
        busy = _busy_ns(np.asarray(ts, dtype=np.int64)[m][replied], known) / NS
        n = int(m.sum())
        out.append(
            OpCount(
                p,
                o,
                n,
                int(len(known)),
                round(server, 3) if server is not None else None,
                round(n / names, 3) if names else None,
                round(min(busy / seconds, 1.0), 3) if server is not None and seconds > 0 else None,
            )
        )
    out.sort(key=lambda c: (-c.calls, c.program, c.op))
    return out


def _busy_ns(start, length):
    """The length of the union of the spans [start, start + length) (ns)."""
    if not len(start):
        return 0
    order = np.argsort(start, kind="stable")
    a = start[order].astype(np.int64)
    b = a + length[order].astype(np.int64)
    # Each span's end, or the furthest end before it where that reaches further.
    reach = np.maximum.accumulate(b)
    gap = np.maximum(a[1:] - reach[:-1], 0)
    return int(reach[-1] - a[0] - gap.sum())


def _outside(program, op):
    out: dict[str, int] = {}
    for p, o in zip(program, op):
        out[f"{p}.{o}"] = out.get(f"{p}.{o}", 0) + 1
    return dict(sorted(out.items()))


def _dtsizes(lst):
    """The sizes the listing's READDIRs asked (bytes), in the order sent, where known."""
    if not len(lst.rpcs) or "dtsize" not in lst.rpcs:
        return []
    v = np.asarray(lst.rpcs["dtsize"], dtype=float)
    return [int(x) for x in v[~np.isnan(v)]]


def _restarted(lst):
    return bool(
        getattr(lst, "restarts", None)
        or getattr(lst, "possible_restarts", None)
        or getattr(lst, "ambiguous_rows", None)
        or getattr(lst, "damage", None)
        or getattr(lst, "invalidations", None)
        or getattr(lst, "version_changes", None)
        or getattr(lst, "survived", None)
    )


def _uncached(lst, sources, start, side=None):
    """The listing's READDIRs the kernel sent in its uncached mode (events.UNCACHED_READDIR),
    or None where the trace read its READDIRs from no event that tells the two modes apart.
    side: the trace's uncached-mode events where its READDIRs came from other events (the
    series on 5.10 over NFSv4: nfs4:nfs4_readdir, with nfs:nfs_readdir_uncached beside it):
    those of the listing's process and directory in its window, one per READDIR, as its
    READDIR calls are counted (start: the window's)."""
    if not any(s in UNCACHED_READDIR for s in sources or ()):
        if side is None:
            return None
        ts = np.asarray(side["ts"], dtype=np.int64)
        mine = (np.asarray(side["pid"]) == lst.pid) & (ts >= start) & (ts <= int(lst.end))
        if lst.fileid is not None:
            fileid = np.asarray(side["fileid"], dtype=float)
            mine &= np.isnan(fileid) | (fileid == lst.fileid)
        return int(mine.sum())
    if not len(lst.rpcs) or "source" not in lst.rpcs:
        return 0
    return sum(s in UNCACHED_READDIR for s in np.asarray(lst.rpcs["source"]).tolist())


def _stat_names(lst, revalidations, start, end):
    """The files the listing's process stat'd in the window (distinct fileids of its
    nfs:nfs_getattr_enter, the directory aside), or None: the names of a trace without the
    lister's count, where each name was stat'd (ls -l); 0 names is no evidence."""
    if revalidations is None or not len(revalidations):
        return None
    r = revalidations
    ts = np.asarray(r["ts"])
    m = (np.asarray(r["pid"]) == lst.pid) & (np.asarray(r["step"], dtype=object) == "getattr")
    m &= (ts >= start) & (ts <= end)
    fileids = np.asarray(r["fileid"])[m].tolist()
    ids = {int(f) for f in fileids if f is not None and f == f} - {lst.fileid}
    return len(ids) or None


def _owners(listings, requests, firsts=None):
    """Per request (a row of the requests table), the number of the listing it is one of, -1
    for none: of its process, the listing whose window (its first READDIR to its end) holds
    it, the one begun last of those: a process with several directories open at once (find)
    sends its calls for the one it opened last, and each call is counted once. firsts: per
    listing, its first READDIR's call (first_calls; None: its first READDIR event's time)."""
    pid, ts = np.asarray(requests["pid"]), np.asarray(requests["ts"])
    owner = np.full(len(requests), -1, dtype=np.int64)
    since = np.full(len(requests), -1, dtype=np.int64)
    rows: dict[Any, np.ndarray] = {}
    for n, lst in enumerate(listings):
        if lst.pid is None:
            continue
        if lst.pid not in rows:
            rows[lst.pid] = np.flatnonzero(pid == lst.pid)
        r = rows[lst.pid]
        first = firsts[n] if firsts is not None else first_readdir(lst)
        start, end = window(first, lst.start, lst.end)
        hit = r[(ts[r] >= start) & (ts[r] <= end) & (since[r] < start)]
        owner[hit], since[hit] = n, start
    return owner


def from_trace(
    lst,
    requests,
    latencies=None,
    revalidations=None,
    owned=None,
    kernel=None,
    sources=None,
    uncached=None,
    first=None,
):
    """The RoundTrips of a trace's listing from the tables' requests (and latencies, and the
    revalidations for its names), or None where the trace has no sunrpc:rpc_request or the
    listing no process. owned: per request, whether it is this listing's (_owners), where the
    process has several listings at once; kernel, the trace's release; sources, the events
    its READDIRs were read from; uncached, the uncached-mode events read beside them; first,
    its first READDIR's call (first_calls; None: its first READDIR event's time)."""
    if requests is None or lst.pid is None:
        return None
    start, end = window(first_readdir(lst) if first is None else first, lst.start, lst.end)
    of_pid = np.asarray(requests["pid"]) == lst.pid
    mine = requests[of_pid]
    ts = np.asarray(mine["ts"])
    held = (ts >= start) & (ts <= end)
    inside = held & (owned[of_pid] if owned is not None else True)
    program = [program_name(p, v) for p, v in zip(mine["program"], mine["version"])]
    program_arr = np.array(program, dtype=object)
    op = np.asarray(mine["op"], dtype=object)
    server = latency_ns(mine, latencies)
    seconds = (end - start) / NS
    names = lst.entries
    names_from: str | None = "the lister's own count, from the reproducer's phase"
    if names is None:
        names = _stat_names(lst, revalidations, start, end)
        names_from = "the files its process stat'd (nfs:nfs_getattr_enter)" if names else None
    sizes = _dtsizes(lst)
    return RoundTrips(
        who=f"{lst.comm}[{lst.pid}]",
        start=start,
        end=end,
        seconds=round(seconds, 3),
        calls_from=REQUEST_SOURCE.event,
        window="the process's calls from its first READDIR to the listing's end",
        names=names,
        names_from=names_from,
        server_time_from="sunrpc:rpc_stats_latency (rtt)" if latencies is not None else None,
        ops=_ops(program_arr[inside], op[inside], server[inside], names, seconds, ts[inside]),
        outside=_outside(program_arr[~held], op[~held]),
        readdirs=int(sum(o in READDIR_OPS for o in op[inside])),
        max_dtsize=max(sizes, default=None),
        dtsizes=sizes,
        kernel=kernel,
        uncached_readdirs=_uncached(lst, sources, start, uncached),
        restarted=_restarted(lst),
    )


def latency_ns(requests, latencies):
    """Per request, its server time in ns from the latency event of the same task that follows
    it, or comes at its time (NaN where none). (Without pandas: check's path reaches here.)"""
    out = np.full(len(requests), np.nan)
    if latencies is None or not len(latencies) or not len(requests):
        return out
    codes: dict[tuple, int] = {}  # (client_id, task_id) -> a number

    def code(frame):
        keys = zip(frame["client_id"].tolist(), frame["task_id"].tolist())
        return np.array([codes.setdefault(k, len(codes)) for k in keys], dtype=np.int64)

    rq, lq = code(requests), code(latencies)
    rts = np.asarray(requests["ts"], dtype=np.int64)
    lts = np.asarray(latencies["ts"], dtype=np.int64)
    # One sortable number per row, (task, time): the time as its rank among all the times,
    # so that both fit an int64 (an epoch in ns would not).
    times, rank = np.unique(np.concatenate([rts, lts]), return_inverse=True)
    width = len(times) + 1
    rkey, lkey = rq * width + rank[: len(rts)], lq * width + rank[len(rts) :]
    order = np.argsort(lkey, kind="stable")
    at = np.searchsorted(lkey[order], rkey, side="left")
    found = at < len(order)
    hit = order[np.minimum(at, len(order) - 1)]
    found &= lq[hit] == rq
    rtt = np.asarray(latencies["rtt"], dtype=float)[hit]
    ok = found & ~np.isnan(rtt)
    out[ok] = rtt[ok] * 1000  # µs -> ns
    return out


def _by_client(calls):
    """{client: {column: its calls' values}} of the capture's calls (a CallLog.table()), in
    the capture's order: numpy columns made once and split by client (a groupby's frames cost
    2.7 ms a listing in pandas, 6.3 s of a 1 M-packet capture's 17 s)."""
    import pandas as pd  # (check's path, which makes no frame, never comes here)

    cols = {
        "ts": calls["ts"].to_numpy(),
        "program": calls["program"].to_numpy(dtype=object),
        "op": calls["op"].to_numpy(dtype=object),
        "frame": calls["frame"].to_numpy(dtype=np.int64, na_value=-1),
        "reply_ts": calls["reply_ts"].to_numpy(dtype=np.int64, na_value=-1),
        "entries": calls["entries"].to_numpy(dtype=float, na_value=np.nan),
    }
    cols["nfs4"] = np.char.startswith(cols["program"].astype(str), "NFS4")
    codes, names = pd.factorize(calls["client"].to_numpy(dtype=object))
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    return {
        c: {k: v[order[bounds[i] : bounds[i + 1]]] for k, v in cols.items()}
        for i, c in enumerate(names)
    }


def from_capture(lst, calls, kernel=None):
    """The RoundTrips of a capture's listing from its client's calls (_by_client: columns of
    rpcops.CallLog.table()'s rows of that client): those in the listing's window, from its first
    READDIR call to its end (windows.wire_end: its last READDIR's reply, or its reader's last
    per-name call). In that window the READDIRs of another pass of the same client, and
    operations no directory reader sends (another program's REMOVE, WRITE...), are not the
    listing's: they are said beside it (`shared`), as its per-name calls may then be partly
    theirs."""
    client = getattr(lst, "client", None)
    if calls is None or not client:
        return None
    start, end = window(first_readdir(lst), lst.start, lst.end)
    ts, program, op = calls["ts"], calls["program"], calls["op"]
    renewal = calls["nfs4"] & np.isin(op, LEASE_RENEWALS)
    within = (ts >= start) & (ts <= end)
    frames = calls["frame"]
    own: Any = np.isin(frames, np.asarray(lst.rpcs["frame"])) if len(lst.rpcs) else []
    readdir = np.isin(op, READDIR_OPS)
    others = within & ((readdir & ~own) | ~(readdir | np.isin(op, PER_NAME_OPS) | renewal))
    inside = within & ~renewal & ~others
    # Integer ns (an epoch in ns through a float is rounded by up to 256 ns); a duration is
    # small enough for a float.
    reply = calls["reply_ts"]
    server = np.where(reply >= 0, reply - ts, np.nan).astype(float)
    entries = calls["entries"][own] if len(own) else []
    counted = [e for e in entries if not np.isnan(e)]
    readdir_entries = int(sum(counted)) if counted else None
    refetched = getattr(lst, "refetched_entries", 0) or 0
    if readdir_entries is not None:
        # Each name once: a reply's entries past the cookie the next READDIR asked from come
        # again in that one (5.10 asks from inside the last reply's page).
        names = readdir_entries - refetched
        names_from = "the entries its READDIR replies carried, each once"
    elif lst.entries is not None:
        names, names_from = lst.entries, "the lister's own count, from the reproducer's phase"
    else:
        names, names_from = None, None
    seconds = (end - start) / NS
    sizes = _dtsizes(lst)
    return RoundTrips(
        who=f"client {client}",
        start=start,
        end=end,
        seconds=round(seconds, 3),
        calls_from="the capture's NFS and NFSACL calls and replies",
        window="the client's calls from the listing's first READDIR to its end"
        + (", its lease renewals aside" if (renewal & within).any() else ""),
        names=names,
        names_from=names_from,
        server_time_from="the capture's call to reply times",
        ops=_ops(program[inside], op[inside], server[inside], names, seconds, ts[inside]),
        outside=_outside(program[~inside & ~others], op[~inside & ~others]),
        shared=_outside(program[others], op[others]),
        readdirs=int(np.count_nonzero(inside & readdir)),
        readdir_entries=readdir_entries,
        max_dtsize=max(sizes, default=None),
        dtsizes=sizes,
        counted_replies=len(counted) if counted else None,
        refetched_entries=refetched if readdir_entries is not None else None,
        kernel=kernel,
        restarted=_restarted(lst),
    )


def account(analysis, calls=None):
    """{listing number: RoundTrips} of an analysis: a trace's from its requests table, a
    capture's from calls (rpcops.CallLog.table()). Listings without evidence are left out."""
    out = {}
    if calls is None:
        t = analysis.tables
        requests, latencies = t.get("requests"), t.get("latencies")
        listings = list(analysis.listings)
        starts = first_calls(listings, requests)
        owner = _owners(listings, requests, starts) if requests is not None else None
        kernel = getattr(analysis, "kernel", None)
        sources = (getattr(analysis, "evidence", None) or {}).get("rpc")
        for n, lst in enumerate(listings):
            owned = owner == n if owner is not None else None
            rt = from_trace(
                lst,
                requests,
                latencies,
                t.get("revalidations"),
                owned,
                kernel,
                sources,
                t.get("uncached"),
                starts[n],
            )
            if rt is not None:
                out[n] = rt
        return out
    listings = list(analysis.listings)
    kernel = getattr(analysis, "kernel", None)
    by_client = _by_client(calls)
    for n, lst in enumerate(listings):
        rt = from_capture(lst, by_client.get(getattr(lst, "client", "")), kernel=kernel)
        if rt is not None:
            out[n] = rt
    return out
