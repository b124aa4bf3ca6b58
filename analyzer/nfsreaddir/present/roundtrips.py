"""A listing's round trips (model/roundtrips) and the findings on them (rules/slowness), as
`analyze` prints them and as its JSON gives them per listing."""

from __future__ import annotations

import os

from ..rules import slowness
from ..rules.words import counted

SERVER_TIME_ADVICE = "record sunrpc:rpc_stats_latency too, or capture the traffic"


def record(analysis, n):
    """What `analyze --json` adds to listing n: its round trips and findings (nothing where
    the input gave no round trip)."""
    rt = analysis.round_trips.get(n)
    if rt is None:
        return {}
    return {
        "round_trips": rt.to_dict(),
        "slowness": [f.to_dict() for f in slowness.findings(rt)],
    }


def _cell(v, fmt):
    return "-" if v is None else format(v, fmt)


def _listing(a, n, rt, out):
    lst = a.listings[n]
    where = " ".join(x for x in (os.path.basename(a.info["path"]), lst.phase, rt.who) if x) + (
        f" dir {lst.fileid if lst.fileid is not None else '?'}"
    )
    names = (
        f"{rt.names:,} names ({rt.names_from})"
        if rt.names is not None
        else "names not known (no count per name)"
    )
    server = (
        f"server time from {rt.server_time_from}"
        if rt.server_time_from
        else f"no server time ({SERVER_TIME_ADVICE})"
    )
    out.write(
        f"\n{where}: {counted(rt.calls, 'call')} in {rt.seconds:.3f} s, {rt.window}; from "
        f"{rt.calls_from}; {names}; {server}\n"
    )
    out.write(f"  {'calls':>9} {'per name':>9} {'server (s)':>11} {'share':>6}  operation\n")
    for o in rt.ops:
        share = "-" if o.share is None else f"{o.share:.0%}"
        out.write(
            f"  {o.calls:>9,} {_cell(o.per_name, '.2f'):>9} {_cell(o.server_seconds, '.3f'):>11} "
            f"{share:>6}  {o.key}\n"
        )
    if rt.outside:
        out.write(
            "  outside this window, by the same "
            + ("process" if rt.who.endswith("]") else "client")
            + ": "
            + ", ".join(f"{k} {v:,}" for k, v in rt.outside.items())
            + "\n"
        )
    if rt.shared:
        out.write(
            "  in this window but not this listing's (another pass of the same client, "
            "another program's work), so its per-name calls may be partly theirs: "
            + ", ".join(f"{k} {v:,}" for k, v in rt.shared.items())
            + "\n"
        )
    for f in slowness.findings(rt):
        out.write(f"  finding: {f.evidence}\n    change: {f.change}\n")


def text(analyses, details=10, out=None):
    """The round-trip section of analyze's text: per input, its listings with a finding first,
    then those with the most calls, `details` at most."""
    chunks: list[str] = []

    class _Out:
        def write(self, s):
            chunks.append(s)

    sink = _Out() if out is None else out
    wrote = False
    for a in analyses:
        rts = getattr(a, "round_trips", None) or {}
        ranked = sorted(
            rts.items(), key=lambda kv: (not slowness.findings(kv[1]), -kv[1].calls, kv[0])
        )
        if ranked and not wrote:
            sink.write(
                "\nwhere each listing's time went: the RPCs its reader sent, by program and "
                "operation (share: server time over the listing's time)\n"
            )
            wrote = True
        for n, rt in ranked[:details]:
            _listing(a, n, rt, sink)
        if len(ranked) > details:
            more = counted(len(ranked) - details, "more listing", "more listings")
            sink.write(f"  ... {more} (--details N, or --json)\n")
    return "".join(chunks) if out is None else ""


def check_lines(analyses):
    """The line check adds per listing whose time went to round trips per name, the most
    calls first (none where no listing has such a finding)."""
    out = []
    for a in analyses:
        for n, rt in sorted((getattr(a, "round_trips", None) or {}).items()):
            s = slowness.line(a.listings[n], rt, slowness.findings(rt))
            if s:
                out.append((-rt.calls, f"{os.path.basename(a.info.get('path') or '?')}: {s}"))
    return [s for _, s in sorted(out, key=lambda x: x[0])]
