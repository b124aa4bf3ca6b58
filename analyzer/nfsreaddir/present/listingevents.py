"""A listing's restarts and invalidations as analyze's text gives them, under its table: in the
order they happened, a run of alike ones in one line with their count, and listings of one
reader whose events read alike in one block (issue 58: a poller's passes, each with the same
invalidation, made 28 blocks alike)."""

import os

from ..rules.words import counted
from ..units import NS


def _listing_events(a, lst, details):
    """(the heading of a listing's events, its restarts and invalidations in the order they
    happened as (first s, last s, count, text), a run of alike ones folded into one, the first
    `details` of them, and the lines after them)."""
    who = lst.summary().get("who") or f"{lst.comm}[{lst.pid}]"
    where = " ".join(x for x in (os.path.basename(a.info["path"]), lst.phase, who) if x)
    heading = f"{where} dir {lst.fileid if lst.fileid is not None else '?'}"
    # An invalidation before the restart it caused, even at the same timestamp.
    events_ = sorted(
        [(r.ts, "restart", r) for r in lst.restarts]
        + [(v.ts, "invalidation", v) for v in lst.invalidations],
        key=lambda x: (x[0], x[1] == "restart"),
    )
    runs: list[list] = []  # [first s, last s, count, kind, what]
    for ts, kind, x in events_:
        t = (ts - lst.start) / NS
        if kind == "restart":
            at = f"at cookie {x.cookie}, below the reader's position" if x.cookie else "at cookie 0"
            what = (
                f"{at} (READDIR #{x.rpc_index + 1}): {counted(x.refetched, 'READDIR')} and "
                f"{x.cost_ns / NS:.3f}s to get back"
            )
        else:
            chain = " -> ".join(x.chain + [x.reason]) if x.chain else x.reason
            after = (
                " (then cookie 0: a restart or a new open)"
                if x.followed_by_ambiguous
                else {True: "", False: " (no restart)", None: ""}[x.followed_by_restart]
            )
            what = f"{chain}{after}"
        if runs and (runs[-1][3], runs[-1][4]) == (kind, what):
            runs[-1][1] = t
            runs[-1][2] += 1
        else:
            runs.append([t, t, 1, kind, what])
    shown = [tuple(r) for r in runs[:details]]
    tail = []
    left = sum(r[2] for r in runs[details:])
    if left:
        tail.append(f"  ... {left} more (--details N, or --json)")
    if lst.ambiguous_rows:
        tail.append(
            f"  {len(lst.ambiguous_rows)} cookie-0 READDIRs after the start: "
            "restarts, rewinds or new opens (the trace cannot tell)"
        )
    return heading, shown, tail


def _event_text(count, kind, what):
    sep = " " if kind == "restart" else ": "  # ("restart at cookie 0", "invalidation: why")
    return f"{kind}{sep}{what}" if count == 1 else f"{count} {kind}s{sep}{what}"


def write(a, listings, details, out):
    """The restarts and invalidations of the listings (numbers in analysis a), the first
    `details` of each; listings of one reader and directory whose events read alike, times
    aside (a poller's hundred passes, each with one invalidation), in one block with their
    count."""
    blocks: dict[tuple, list] = {}  # (heading, events without times, tail) -> [events, count]
    for n in listings:
        heading, shown, tail = _listing_events(a, a.listings[n], details)
        key = (heading, tuple(r[2:] for r in shown), tuple(tail))
        blocks.setdefault(key, [shown, 0])[1] += 1
    for (heading, alike, tail), (shown, count) in blocks.items():
        if count == 1:
            out.write(f"\n{heading}:\n")
            for t0, t1, k, kind, what in shown:
                at = f"{t0:9.3f}s" if k == 1 else f"{t0:.3f}-{t1:.3f}s"
                out.write(f"  {at}  {_event_text(k, kind, what)}\n")
        else:
            out.write(f"\n{heading}: {count} listings, each:\n")
            for k, kind, what in alike:
                out.write(f"  {_event_text(k, kind, what)}\n")
        for line in tail:
            out.write(line + "\n")
