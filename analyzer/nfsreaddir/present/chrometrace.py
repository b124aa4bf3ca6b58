"""`export --format chrome-trace`: one trace's listings as Trace Event JSON, the format that
Perfetto's UI (ui.perfetto.dev, "Open trace file") and chrome://tracing open.

A process per process that listed, or per client of a capture; in it a track (thread) per
listing: a slice of the whole listing and inside it its READDIRs, each a slice from its call to
the listing's next READDIR (the trace has the call, not the reply: the slice is the time the
reader spent on that page); and a track of the listing's getdents calls, each a slice from
entry to return. Invalidations and restarts are instants on the listing's track. A client's
listings, or a process's, may overlap in time (two passes of a capture, find in a tree): on
tracks of their own, every slice nests in the one it overlaps, as the viewers draw them.
Times are microseconds from the first listing's start (the trace's own clock value of that
origin is in otherData).
"""

import json

from .timeline import getdents, process_of, readdirs

US = 1000  # ns per microsecond


def _tracks(n):
    """The thread ids of listing n's tracks: its READDIRs', its getdents'."""
    return 2 * n + 1, 2 * n + 2


def _us(ts, origin):
    return round((ts - origin) / US, 3)


def events(analysis):
    """The Trace Event list of one analysis: metadata first, then every timed event in order."""
    lsts = analysis.listings
    origin = min((lst.start for lst in lsts), default=0)
    tracks: dict[str, int] = {}
    timed: list[dict] = []
    meta: list[dict] = []
    for n, lst in enumerate(lsts):
        who = process_of(lst)
        pid = tracks.setdefault(who, lst.pid if lst.pid is not None else 1_000_000 + len(tracks))
        _listing(analysis, n, lst, pid, origin, meta, timed)
    meta = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": who}}
        for who, pid in tracks.items()
    ] + meta
    # Slices that start together: the longer (the listing) first, so that it encloses.
    timed.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    return meta + timed, origin


def _listing(analysis, n, lst, pid, origin, meta, timed):
    """Listing n's tracks: their names into meta, their slices and instants into timed."""
    rd = readdirs(lst)
    # A READDIR's slice ends at the next one, within its listing's.
    starts = [min(max(r.ts, lst.start), lst.end) for r in rd]
    ends = starts[1:] + [lst.end]
    readdir_tid, getdents_tid = _tracks(n)
    base = {"pid": pid, "tid": readdir_tid}
    dir_ = lst.fileid if lst.fileid is not None else "?"
    for tid, what in ((readdir_tid, "READDIRs"), (getdents_tid, "getdents")):
        meta.append(
            {
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "name": "thread_name",
                "args": {"name": f"listing {n} of dir {dir_}: {what}"},
            }
        )
    timed.append(
        dict(
            base,
            ph="X",
            cat="listing",
            name=f"listing of dir {dir_}" + (f" ({lst.phase})" if lst.phase else ""),
            ts=_us(lst.start, origin),
            dur=_us(lst.end, origin) - _us(lst.start, origin),
            args={"listing": n, "readdirs": len(rd), "ending": lst.ending},
        )
    )
    for r, start, end in zip(rd, starts, ends):
        cause = " restart" if r.restart else " back to 0 (cause unknown)" if r.ambiguous else ""
        timed.append(
            dict(
                base,
                ph="X",
                cat="readdir",
                name=f"READDIR #{r.n}{cause}",
                ts=_us(start, origin),
                dur=_us(end, origin) - _us(start, origin),
                args={
                    "listing": n,
                    "readdir": r.n,
                    "cookie": None if r.cookie is None else str(r.cookie),
                    "dir": dir_,
                },
            )
        )
    for start, end in getdents(analysis, lst):
        timed.append(
            {
                "pid": pid,
                "tid": getdents_tid,
                "ph": "X" if end is not None else "i",
                "cat": "getdents",
                "name": "getdents64" + ("" if end is not None else " (no return seen)"),
                "ts": _us(start, origin),
                **(
                    {"dur": _us(end, origin) - _us(start, origin)}
                    if end is not None
                    else {"s": "t"}
                ),
                "args": {"listing": n},
            }
        )
    for i in lst.invalidations:
        timed.append(
            dict(
                base,
                ph="i",
                s="t",
                cat="invalidation",
                name="invalidation",
                ts=_us(i.ts, origin),
                args={
                    "listing": n,
                    "chain": " -> ".join(i.chain),
                    "restarted": i.followed_by_restart,
                },
            )
        )
    for r in lst.restarts:
        timed.append(
            dict(
                base,
                ph="i",
                s="t",
                cat="restart",
                name="restart at cookie 0" if r.cookie == 0 else "restart below the reader",
                ts=_us(r.ts, origin),
                args={
                    "listing": n,
                    "readdir": r.rpc_index + 1,
                    "refetched_readdirs": r.refetched,
                    "cost_ms": round(r.cost_ns / 1e6, 3),
                },
            )
        )


def document(analysis):
    """The Trace Event JSON of one analysis, as the bytes of its file."""
    evs, origin = events(analysis)
    doc = {
        "traceEvents": evs,
        "displayTimeUnit": "ms",
        "otherData": {
            "trace": str(analysis.info.get("path", "")),
            "kernel": analysis.kernel,
            "origin_ns": origin,
        },
    }
    return json.dumps(doc, default=str).encode()
