"""The report's readdir charts as inline SVG (html.py says why SVG): one overview of every
listing of an input on one time axis, a lane per process or client, and a chart per listing of
its READDIRs. Every text sits in a margin or a band of its own, never on the plot; every chart
has a time axis with ticks and units and zooms (axes.py)."""

import html

from ..units import NS
from . import axes
from .timeline import getdents, readdirs

W = 1000  # every chart's width, px
LEFT, RIGHT = 150, 12  # margins: lane names or the cookie axis on the left
BAND = 20  # the band above a plot for its texts
LANE = 16  # an overview lane's height
MAX_LANES = 40  # more lanes than this: the quietest are left out, and the page says how many
COLOURS = {  # a listing's bar in the overview, by its finding
    "bad": "#f2a0a0",
    "undecided": "#e90",
    "good": "#4a4",
    "survived": "#4a4",
    "unfinished": "#bbb",
    "untested": "#bbb",
}


def _e(x):
    return html.escape(str(x))


def _title(text):
    return f"<title>{_e(text)}</title>"


def _open(cls, h, span, label):
    pw = W - LEFT - RIGHT
    return (
        f'<svg class="{cls} zoom" {axes.zoom_attrs(LEFT, pw, span)} width="{W}" height="{h}" '
        f'viewBox="0 0 {W} {h}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{_e(label)}">'
    )


def _clip(cid, top, h):
    """A clip of the plot area, so that zoomed-in data never spills into the margins."""
    return (
        f'<clipPath id="{cid}"><rect x="{LEFT}" y="{top}" width="{W - LEFT - RIGHT}" '
        f'height="{h}"/></clipPath><g class="data" clip-path="url(#{cid})">'
    )


def _change_marks(at, top, offset, x):
    """A triangle at the top of the plot at each change of the directory (ts, what)."""
    return "".join(
        f'<path class="change" data-t="{ts - offset}" transform="translate({x(ts):.1f} 0)" '
        f'd="M0 {top + 6} l-4 -6 h8 z" fill="#06c">' + _title(what) + "</path>"
        for ts, what in at
    )


def changes(lst, rd):
    """(ts, words) of each change of the listing's directory the trace places: where its
    READDIRs' change attribute moved, or (a capture) where a GETATTR reply showed it; the
    change that came before a restart where neither is known."""
    out = []
    if "version" in lst.rpcs:
        v = lst.rpcs["version"].tolist()
        for k in range(1, len(v)):
            if v[k] == v[k] and v[k - 1] == v[k - 1] and v[k] != v[k - 1]:  # neither NaN
                out.append((rd[k].ts, f"the directory changed before READDIR #{k + 1}"))
    elif getattr(lst, "change_ts", ()):
        for t in lst.change_ts:
            out.append((int(t), "a GETATTR reply showed the directory's new version"))
    else:
        for r in lst.restarts:
            if r.after_invalidation:
                out.append((r.ts, f"the directory changed before READDIR #{r.rpc_index + 1}"))
    return out


def unplaced(lst, placed):
    """Words for the changes the verdict counts that the chart cannot place, or ""."""
    n = (lst.version_changes or 0) - placed
    if n <= 0:
        return ""
    return f"{n} change{'s' if n > 1 else ''} of the directory counted, times not kept by the model"


def _positions(rd):
    """y of each READDIR: the rank of its cookie in the order the listing first asked for it
    (cookie 0 is 0), so that a restart falls back to where it went; the READDIR number where
    the trace has no cookies."""
    if any(r.cookie is None for r in rd):
        return [r.n for r in rd], "READDIR number (no cookies traced)"
    rank = {0: 0}
    for r in rd:
        rank.setdefault(r.cookie, len(rank))
    return [rank[r.cookie] for r in rd], "cookie position (order first asked)"


def listing(analysis, lst, who, cid):
    """The chart of one listing: its READDIRs by cookie position over time, the re-fetch of
    each restart shaded, invalidations and changes of its directory, its getdents calls."""
    h, pw = 210, W - LEFT - RIGHT
    top, bottom = BAND + 8, 210 - 52  # the plot's y range
    rd = readdirs(lst)
    span = max(lst.end - lst.start, 1)
    ys, ylabel = _positions(rd)
    hi = max(ys, default=1) or 1
    x = lambda ts: LEFT + (ts - lst.start) / span * pw  # noqa: E731
    y = lambda v: bottom - v / hi * (bottom - top)  # noqa: E731
    band = [ylabel]
    if not lst.invalidations_known:
        band.append("invalidations not recorded")
    if not lst.complete:
        band.append(
            f"ended: {lst.ending}" + (" (began before the trace)" if lst.began_before_trace else "")
        )
    ch = changes(lst, rd)
    if unplaced(lst, len(ch)):
        band.append(unplaced(lst, len(ch)))
    out = [
        _open("timeline", h, span, f"READDIRs of {who} over time"),
        f'<text class="band" x="{LEFT}" y="14" font-size="11" fill="#555">'
        f"{_e('; '.join(band))}</text>",
        "".join(
            f'<text x="{LEFT - 6}" y="{ty + 4}" font-size="10" text-anchor="end" '
            f'fill="#444">{v}</text>'
            for ty, v in ((top, hi), (bottom, 0))
        ),
        f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" stroke="#999"/>',
        axes.xticks(0, span, LEFT, pw, bottom + 14, bottom + 14 - top),
        f'<text x="{LEFT + pw / 2}" y="{h - 6}" font-size="10" text-anchor="middle" '
        f'fill="#555">time since the listing began</text>',
        _clip(cid, BAND, h - BAND - 36),
    ]
    for r in lst.restarts:  # the re-fetch a restart cost, behind the points
        t1 = min(r.ts + r.cost_ns, lst.end)
        out.append(
            f'<rect class="refetch" data-t="{r.ts - lst.start}" data-t1="{t1 - lst.start}" '
            f'x="{x(r.ts):.1f}" y="{top}" width="{max(x(t1) - x(r.ts), 1.5):.1f}" '
            f'height="{bottom - top}" fill="#f33" opacity="0.15">'
            + _title(
                f"restart at {(r.ts - lst.start) / NS:.3f} s (READDIR #{r.rpc_index + 1}, cookie "
                f"{r.cookie}): {r.refetched} READDIRs and {r.cost_ns / NS:.3f} s to get back"
            )
            + "</rect>"
        )
    for i in lst.invalidations:
        then = {True: " (restart followed)", False: " (no restart followed)"}.get(
            i.followed_by_restart, ""
        )
        out.append(
            f'<line class="invalidation" data-t="{i.ts - lst.start}" x1="{x(i.ts):.1f}" '
            f'y1="{top}" x2="{x(i.ts):.1f}" y2="{bottom}" stroke="#06c" stroke-width="2" '
            f'stroke-dasharray="4 2">'
            + _title(
                f"invalidation at {(i.ts - lst.start) / NS:.3f} s: {' -> '.join(i.chain)}{then}"
            )
            + "</line>"
        )
    for r, v in zip(rd, ys):
        colour, what = (
            ("#d00", " (restart)")
            if r.restart
            else ("#e80", " (cause unknown)")
            if r.ambiguous
            else ("#333", "")
        )
        out.append(
            f'<circle class="readdir" data-t="{r.ts - lst.start}" cx="{x(r.ts):.1f}" '
            f'cy="{y(v):.1f}" r="{4 if what else 2.5}" fill="{"none" if r.ambiguous else colour}" '
            f'stroke="{colour}">'
            + _title(
                f"READDIR #{r.n} at {(r.ts - lst.start) / NS:.3f} s, cookie "
                f"{'not traced' if r.cookie is None else r.cookie}, {who}{what}"
            )
            + "</circle>"
        )
    for s, e in getdents(analysis, lst):
        end = e if e is not None else s
        out.append(
            f'<rect class="getdents" data-t="{s - lst.start}" data-t1="{end - lst.start}" '
            f'x="{x(s):.1f}" y="{bottom + 2}" width="{max(x(end) - x(s), 1.5):.1f}" height="6" '
            f'fill="#8a8">'
            + _title(
                f"getdents64 at {(s - lst.start) / NS:.3f} s"
                + (f", {(e - s) / 1e6:.3f} ms" if e is not None else " (no return seen)")
            )
            + "</rect>"
        )
    out.append(_change_marks(ch, top, lst.start, x))
    out.append("</g>" + axes.select_rect(top, bottom - top) + "</svg>")
    return "".join(out)


def overview(seen, cid):
    """One chart of every listing (seen: html's Seen records, in time order) on one time
    axis: a lane per process or client, a bar per listing coloured by its finding, restarts
    as red ticks, invalidations as blue dashes and changes of the directory as blue marks.
    Returns (svg, lanes left out)."""
    if not seen:
        return "", 0
    t0 = min(s.start for s in seen)
    span = max(max(s.end for s in seen) - t0, 1)
    lanes: dict = {}
    for s in seen:
        lanes.setdefault(s.who, []).append(s)
    worst = sorted(lanes, key=lambda w: max(s.badness for s in lanes[w]), reverse=True)
    kept = sorted(worst[:MAX_LANES], key=lambda w: min(s.start for s in lanes[w]))
    top = 10
    h, pw = top + LANE * len(kept) + 26, W - LEFT - RIGHT
    bottom = top + LANE * len(kept)
    x = lambda ts: LEFT + (ts - t0) / span * pw  # noqa: E731
    out = [
        _open("overview", h, span, "every listing over time"),
        axes.xticks(0, span, LEFT, pw, bottom + 6, bottom + 6 - top),
    ]
    for k, who in enumerate(kept):
        out.append(
            f'<text x="{LEFT - 6}" y="{top + LANE * k + 12}" font-size="10" text-anchor="end" '
            f'fill="#333">{_e(who[:24])}</text>'
        )
    out.append(_clip(cid, top - 8, bottom - top + 8))
    for k, who in enumerate(kept):
        yl = top + LANE * k
        for s in lanes[who]:
            a, b = s.start - t0, s.end - t0
            out.append(
                f'<rect class="bar" data-listing="{s.n}" data-t="{a}" data-t1="{b}" '
                f'x="{x(s.start):.1f}" y="{yl + 3}" width="{max(x(s.end) - x(s.start), 1.5):.1f}" '
                f'height="{LANE - 6}" fill="{COLOURS.get(s.word, "#bbb")}">'
                + _title(f"{s.label}: {s.word}: {s.why}")
                + "</rect>"
            )
            for ts in s.invalidations:
                out.append(
                    f'<line class="invalidation" data-t="{ts - t0}" x1="{x(ts):.1f}" y1="{yl}" '
                    f'x2="{x(ts):.1f}" y2="{yl + LANE}" stroke="#06c" stroke-width="2" '
                    'stroke-dasharray="3 2">' + _title(f"invalidation, {s.label}") + "</line>"
                )
            for ts in s.restart_ts:
                out.append(
                    f'<line class="restart" data-t="{ts - t0}" x1="{x(ts):.1f}" y1="{yl}" '
                    f'x2="{x(ts):.1f}" y2="{yl + LANE}" stroke="#b00" stroke-width="2">'
                    + _title(f"restart, {s.label}")
                    + "</line>"
                )
            out.append(_change_marks([(t, f"{w}, {s.label}") for t, w in s.changes], yl, t0, x))
    out.append("</g>" + axes.select_rect(top, bottom - top) + "</svg>")
    return "".join(out), len(worst) - len(kept)
