"""A dcache run's samples drawn for the report page: the dentries (nr_dentry, nr_negative) and
the dentry slab's bytes along the run, a chart each, the reproducer's phases shaded and named
behind the curves, as inline SVG like the readdir timelines (present/html.py says why SVG).

Each drawn sample carries its counter, time (ns) and value, and each phase band its start and
end (ns) and its change as the run's results give it, so that a reader hovering, or a test
reading the page, gets the exact figures the curves are drawn from.
"""

import html

from ..units import NS

W, H, PAD, RIGHT = 720, 180, 70, 10  # a chart's size and margins, in px
TOP, BOTTOM = 24, 24
# (title, the samples' columns drawn in it with their colour), one chart each.
CHARTS = (
    ("dentries", (("nr_dentry", "#609"), ("nr_negative", "#d60"))),
    ("dentry slab (bytes)", (("slab_bytes", "#06c"),)),
)


def _e(x):
    return html.escape(str(x))


def _values(samples, col):
    """[(ts, value)] of one column's samples that have a value."""
    import pandas as pd

    v = pd.to_numeric(samples[col], errors="coerce")
    return [(int(t), float(x)) for t, x in zip(samples["ts"], v) if x == x]  # not NaN


def _change(phase, cols):
    """A phase's change of the drawn counters, as the run's results give it, in words."""
    d, b, a = phase.get("delta") or {}, phase.get("before") or {}, phase.get("after") or {}
    return ", ".join(
        f"{c} {d[c]:+,} ({b.get(c):,} -> {a.get(c):,})" for c in cols if d.get(c) is not None
    )


def _chart(title, series, t0, t1, phases):
    """One chart: the series ([(column, colour, [(ts, value)])]) over t0-t1 with the phases
    ([(name, start, end, results of the phase)]) behind them."""
    lo = min(v for _, _, pts in series for _, v in pts)
    hi = max(v for _, _, pts in series for _, v in pts)
    span, rng = max(t1 - t0, 1), (hi - lo) or 1.0
    x = lambda ts: PAD + (ts - t0) / span * (W - PAD - RIGHT)  # noqa: E731
    y = lambda v: H - BOTTOM - (v - lo) / rng * (H - TOP - BOTTOM)  # noqa: E731
    cols = [c for c, _, _ in series]
    out = [
        f'<svg class="samples-chart" data-chart="{_e(title)}" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg" role="img">',
        f'<text x="4" y="14" font-size="11" fill="#333">{_e(title)}: '
        + ", ".join(f'<tspan fill="{colour}">{_e(c)}</tspan>' for c, colour, _ in series)
        + f"; x: 0-{span / NS:.1f} s</text>",
    ]
    for i, (name, start, end, res) in enumerate(phases):
        xa, xb = x(start), x(end)
        out.append(
            f'<g class="phase" data-phase="{_e(name)}" data-start="{start}" data-end="{end}">'
            f'<rect x="{xa:.1f}" y="{TOP}" width="{max(xb - xa, 1):.1f}" '
            f'height="{H - TOP - BOTTOM}" fill="{"#ddd" if i % 2 else "#eee"}" opacity="0.7">'
            f"<title>{_e(name)}: {(start - t0) / NS:.1f}-{(end - t0) / NS:.1f} s"
            + (f"; {_e(_change(res, cols))}" if _change(res, cols) else "")
            + f'</title></rect><text x="{xa + 2:.1f}" y="{H - BOTTOM + 12}" font-size="9" '
            f'fill="#555">{_e(name)}</text></g>'
        )
    for v in (lo, hi):  # the value axis: its two ends
        out.append(
            f'<text x="{PAD - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10" '
            f'fill="#555">{int(v):,}</text>'
        )
    for col, colour, pts in series:
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}"/>')
        out += [
            f'<circle class="sample" data-counter="{col}" data-ns="{t}" data-v="{int(v)}" '
            f'cx="{x(t):.1f}" cy="{y(v):.1f}" r="2" fill="{colour}">'
            f"<title>{(t - t0) / NS:.2f} s: {col} {int(v):,}</title></circle>"
            for t, v in pts
        ]
    out.append("</svg>")
    return "".join(out)


def charts(markers, results):
    """The charts of a dcache run (markers: its trace's, results: pipeline.dcache_results),
    or "" where it has no samples."""
    s = markers.samples
    if s is None or not len(s):
        return ""
    s = s.sort_values("ts", kind="stable")
    last = int(s["ts"].iloc[-1])
    # A phase run twice is named NAME#2 in the results: their names, in the markers' order.
    phases = [
        (name, p.start, p.end if p.end is not None else last, results["phases"].get(name, {}))
        for p, name in zip(markers.phases, results.get("phase_order") or [])
    ]
    t0 = min([int(s["ts"].iloc[0])] + [a for _, a, _, _ in phases])
    t1 = max([last] + [b for _, _, b, _ in phases])
    out = []
    for title, cols in CHARTS:
        series = [(c, colour, _values(s, c)) for c, colour in cols if c in s]
        series = [x for x in series if x[2]]
        if series:
            out.append(_chart(title, series, t0, t1, phases))
    return '<div class="dcache-charts">' + "".join(out) + "</div>" if out else ""
