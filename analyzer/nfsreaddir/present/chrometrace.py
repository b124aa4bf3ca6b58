"""`export --format chrome-trace`: one trace's listings as Trace Event JSON, the format that
Perfetto's UI (ui.perfetto.dev, "Open trace file") and chrome://tracing open.

A track (process) per process that listed, or per client of a capture; in it one thread of
READDIRs, each a slice from its call to the listing's next READDIR (the trace has the call, not
the reply: the slice is the time the reader spent on that page), inside a slice of the whole
listing; and one thread of getdents calls, each a slice from entry to return. Invalidations and
restarts are instants on the READDIR thread. Times are microseconds from the first listing's
start (the trace's own clock value of that origin is in otherData).
"""

import json

from .timeline import getdents, process_of, readdirs

US = 1000  # ns per microsecond
READDIR_THREAD, GETDENTS_THREAD = 1, 2


def _us(ts, origin):
    return round((ts - origin) / US, 3)


def events(analysis):
    """The Trace Event list of one analysis: metadata first, then every timed event in order."""
    lsts = analysis.listings
    origin = min((lst.start for lst in lsts), default=0)
    tracks, timed = {}, []
    for n, lst in enumerate(lsts):
        who = process_of(lst)
        pid = tracks.setdefault(who, lst.pid if lst.pid is not None else 1_000_000 + len(tracks))
        rd = readdirs(lst)
        ends = [r.ts for r in rd[1:]] + [lst.end]
        base = {"pid": pid, "tid": READDIR_THREAD}
        dir_ = lst.fileid if lst.fileid is not None else "?"
        timed.append(
            dict(
                base,
                ph="X",
                cat="listing",
                name=f"listing of dir {dir_}" + (f" ({lst.phase})" if lst.phase else ""),
                ts=_us(lst.start, origin),
                dur=_us(lst.end, lst.start),
                args={"listing": n, "readdirs": len(rd), "ending": lst.ending},
            )
        )
        for r, end in zip(rd, ends):
            cause = " restart" if r.restart else " back to 0 (cause unknown)" if r.ambiguous else ""
            timed.append(
                dict(
                    base,
                    ph="X",
                    cat="readdir",
                    name=f"READDIR #{r.n}{cause}",
                    ts=_us(r.ts, origin),
                    dur=_us(end, r.ts),
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
                    "tid": GETDENTS_THREAD,
                    "ph": "X" if end is not None else "i",
                    "cat": "getdents",
                    "name": "getdents64" + ("" if end is not None else " (no return seen)"),
                    "ts": _us(start, origin),
                    **({"dur": _us(end, start)} if end is not None else {"s": "t"}),
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
    meta = []
    for who, pid in tracks.items():
        meta.append(
            {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": who}}
        )
        for tid, name in ((READDIR_THREAD, "READDIRs"), (GETDENTS_THREAD, "getdents")):
            meta.append(
                {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
            )
    # Slices that start together: the longer (the listing) first, so that it encloses.
    timed.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    return meta + timed, origin


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
