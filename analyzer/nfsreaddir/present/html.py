"""`nfs-readdir report`: one self-contained HTML page of an investigation.

Drawn as inline SVG by this module, with no JavaScript library: a listing has at most a few
hundred READDIRs (the largest fixture's page is well under a megabyte), which SVG draws at once
and a browser zooms (Ctrl +) without loss; an inlined charting library (uPlot, 50 kB) would add a
vendored dependency, its licence and a canvas that page tests cannot read back. Hover shows an
event through SVG's own <title> tooltips; folding uses <details>. The one script is the wheel
zoom of a timeline's time axis. The page makes no network request: no font, image or script
is fetched (its Content-Security-Policy forbids it).

It shows what the pipeline made (analyses, verdicts, dcache results, compare's pairing) and
reads no trace: per input, the verdict line and its evidence first, then the listings table as
`analyze` prints it, then a timeline per listing with the dentry samples beside it (a dcache
run: its verdict, its samples charted by samplechart.py, its report); for two readdir inputs,
the listings paired by process and directory with their ratios.
"""

import html
import os
import stat

from ..units import NS
from . import compare
from .render import listing_table
from .timeline import getdents, process_of, readdirs

# A process with more quiet listings than this (a poller, a tree walk) has them folded.
FOLD_AFTER = 3
W, H, PAD = 720, 170, 36  # a timeline's size and left margin, in px
SAMPLES_W = 240

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1100px}
h1{font-size:1.4em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:2em}
.verdict{font-size:1.1em;padding:.5em .8em;border-radius:4px}
.v0{background:#e3f5e3}.v1{background:#fbe3e3}.v125{background:#fff4d6}
.counts span.num{font-weight:bold}
table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
.listing{display:flex;gap:12px;align-items:flex-start;margin:.6em 0}
svg{background:#fafafa;border:1px solid #ddd}
.unknown{color:#a60}.legend{font-size:12px;color:#555}
"""

# The wheel zooms a timeline's time axis around the pointer; a double click resets it.
ZOOM = """
document.querySelectorAll('svg.timeline').forEach(function(s){
  var v=s.viewBox.baseVal,x0=v.x,w0=v.width;
  s.addEventListener('wheel',function(e){e.preventDefault();
    var r=s.getBoundingClientRect(),f=e.deltaY>0?1.25:0.8;
    var px=v.x+(e.clientX-r.left)/r.width*v.width,w=Math.min(w0,v.width*f);
    v.x=Math.max(x0,Math.min(x0+w0-w,px-(px-v.x)*w/v.width));v.width=w;});
  s.addEventListener('dblclick',function(){v.x=x0;v.width=w0;});
});
"""


def _e(x):
    return html.escape(str(x))


def _num(key, value):
    """A number the page shows, marked so that a reader (or a test) finds it by its key."""
    return f'<span class="num" data-k="{key}">{_e(value)}</span>'


def _title(text):
    return f"<title>{_e(text)}</title>"


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


def _timeline(analysis, lst):
    """The SVG timeline of one listing."""
    rd = readdirs(lst)
    span = max(lst.end - lst.start, 1)
    ys, ylabel = _positions(rd)
    top = max(ys, default=1) or 1
    x = lambda ts: PAD + (ts - lst.start) / span * (W - PAD - 8)  # noqa: E731
    y = lambda v: H - 28 - v / top * (H - 48)  # noqa: E731
    who = process_of(lst)
    out = [
        f'<svg class="timeline" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img">',
        f'<text x="4" y="12" font-size="10" fill="#555">{_e(ylabel)}; '
        f"x: 0-{span / NS:.2f} s</text>",
        f'<line x1="{PAD}" y1="{H - 28}" x2="{W - 8}" y2="{H - 28}" stroke="#999"/>',
    ]
    for r in lst.restarts:  # the re-fetch a restart cost, behind the points
        x0, x1 = x(r.ts), x(min(r.ts + r.cost_ns, lst.end))
        out.append(
            f'<rect class="refetch" x="{x0:.1f}" y="16" width="{max(x1 - x0, 1):.1f}" '
            f'height="{H - 44}" fill="#f33" opacity="0.15">'
            + _title(
                f"restart at {(r.ts - lst.start) / NS:.3f} s (READDIR #{r.rpc_index + 1}, cookie "
                f"{r.cookie}): {r.refetched} READDIRs and {r.cost_ns / NS:.3f} s to get back"
            )
            + "</rect>"
        )
    for i in lst.invalidations:
        xi = x(i.ts)
        out.append(
            f'<line class="invalidation" x1="{xi:.1f}" y1="16" x2="{xi:.1f}" y2="{H - 28}" '
            f'stroke="#06c" stroke-width="2" stroke-dasharray="4 2">'
            + _title(
                f"invalidation at {(i.ts - lst.start) / NS:.3f} s: {' -> '.join(i.chain)}"
                + (
                    ""
                    if i.followed_by_restart is None
                    else " (restart followed)"
                    if i.followed_by_restart
                    else " (no restart followed)"
                )
            )
            + "</line>"
        )
    versions = lst.rpcs["version"].tolist() if "version" in lst.rpcs else []
    for k in range(1, len(versions)):  # the directory's change attribute moved
        if versions[k] == versions[k] and versions[k - 1] == versions[k - 1]:  # not NaN
            if versions[k] != versions[k - 1]:
                xv = x(rd[k].ts)
                out.append(
                    f'<path class="change" d="M{xv:.1f} 16 l-4 -6 h8 z" fill="#06c">'
                    + _title(f"the directory changed before READDIR #{k + 1}")
                    + "</path>"
                )
    for r, v in zip(rd, ys):
        color, shape = (
            ("#d00", "restart")
            if r.restart
            else ("#e80", "unknown cause")
            if (r.ambiguous)
            else ("#333", "")
        )
        fill = "none" if r.ambiguous else color
        out.append(
            f'<circle class="readdir" cx="{x(r.ts):.1f}" cy="{y(v):.1f}" r="{4 if shape else 2.5}" '
            f'fill="{fill}" stroke="{color}">'
            + _title(
                f"READDIR #{r.n} at {(r.ts - lst.start) / NS:.3f} s, cookie "
                f"{'not traced' if r.cookie is None else r.cookie}, {who}"
                + (f" ({shape})" if shape else "")
            )
            + "</circle>"
        )
    for s, e in getdents(analysis, lst):
        xs, xe = x(s), x(e if e is not None else s)
        out.append(
            f'<rect class="getdents" x="{xs:.1f}" y="{H - 22}" width="{max(xe - xs, 1.5):.1f}" '
            f'height="8" fill="#8a8">'
            + _title(
                f"getdents64 at {(s - lst.start) / NS:.3f} s"
                + (f", {(e - s) / 1e6:.3f} ms" if e is not None else " (no return seen)")
            )
            + "</rect>"
        )
    if not lst.invalidations_known:  # nothing that reports one was recorded: none drawn
        out.append(
            f'<text class="unknown" x="{PAD + 4}" y="{H - 32}" font-size="11" fill="#a60">'
            "invalidations not recorded: none can be shown</text>"
        )
    if not lst.complete:
        out.append(
            f'<text x="{W - 10}" y="30" text-anchor="end" font-size="11" fill="#a60">'
            f"ended: {_e(lst.ending)}"
            + (" (began before the trace)" if lst.began_before_trace else "")
            + "</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _samples(analysis, lst):
    """The dentry samples during a listing as a small SVG, or "" without samples."""
    s = analysis.samples
    if s is None or not len(s) or "nr_dentry" not in s:
        return ""
    win = s[(s["ts"] >= lst.start) & (s["ts"] <= lst.end)]
    if len(win) < 2:
        return ""
    t, v = win["ts"].tolist(), [float(x) for x in win["nr_dentry"].tolist()]
    lo, hi = min(v), max(v)
    span, rng = max(lst.end - lst.start, 1), (hi - lo) or 1.0
    xy = [
        (8 + (a - lst.start) / span * (SAMPLES_W - 16), H - 20 - (b - lo) / rng * (H - 50))
        for a, b in zip(t, v)
    ]
    pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in xy)
    dots = "".join(
        f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2" fill="#609">'
        + _title(f"{(a - lst.start) / NS:.2f} s: {int(b):,} dentries")
        + "</circle>"
        for (px, py), a, b in zip(xy, t, v)
    )
    return (
        f'<svg class="samples" width="{SAMPLES_W}" height="{H}" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="4" y="12" font-size="10" fill="#555">dentries {int(lo):,}-{int(hi):,}</text>'
        f'<polyline points="{pts}" fill="none" stroke="#609"/>{dots}</svg>'
    )


def _quiet(lst):
    """Nothing to tell: it reached the end with no restart, no change and nothing unknown."""
    return (
        lst.complete
        and not lst.restarts
        and not lst.invalidations
        and not lst.ambiguous_rows
        and lst.cookies_known
        and lst.invalidations_known
    )


def _listing(analysis, n, lst):
    s = lst.summary()
    r = s["restarts"]
    trace = os.path.basename(analysis.info.get("path", ""))
    head = (
        f"{_e(trace)} listing {n}: {_e(lst.label())}: {s['readdirs']} READDIRs, "
        + (
            f"{r} restarts"
            if r is not None
            else '<span class="unknown">restarts: cannot tell</span>'
        )
        + f", {s['seconds']:.2f} s, ended {_e(s['ending'])}"
    )
    return (
        f'<div class="listing-block" data-listing="{n}"><div>{head}</div><div class="listing">'
        f"{_timeline(analysis, lst)}{_samples(analysis, lst)}</div></div>"
    )


def _timelines(analysis):
    """A timeline per listing; a process's quiet listings past FOLD_AFTER folded into one
    <details> that opens on a click."""
    # By their numbers: a capture's listings are read back from disk, a new object each time.
    quiet: dict = {}
    for n, lst in enumerate(analysis.listings):
        if _quiet(lst):
            quiet.setdefault(process_of(lst), []).append(n)
    folded = {n for g in quiet.values() if len(g) > FOLD_AFTER for n in g}
    out = [_listing(analysis, n, x) for n, x in enumerate(analysis.listings) if n not in folded]
    for who, group in quiet.items():
        if len(group) > FOLD_AFTER:
            out.append(
                f'<details class="folded"><summary>{len(group)} quiet listings of {_e(who)} '
                f"(each to the end, no restart, no change of its directory)</summary>"
                + "".join(_listing(analysis, n, analysis.listings[n]) for n in group)
                + "</details>"
            )
    return "".join(out)


def _counts(analyses):
    lsts = [lst.summary() for a in analyses for lst in a.listings]
    restarts = [s["restarts"] for s in lsts]
    invals = [s["invalidations"] for s in lsts]
    known = lambda xs: sum(xs) if all(x is not None for x in xs) else "cannot tell"  # noqa: E731
    return (
        '<p class="counts">'
        + ", ".join(
            [
                f"{_num('listings', len(lsts))} listings",
                f"{_num('readdirs', sum(s['readdirs'] for s in lsts))} READDIRs",
                f"{_num('restarts', known(restarts))} restarts",
                f"{_num('invalidations', known(invals))} invalidations",
            ]
        )
        + "</p>"
    )


def _verdict(v):
    reason = v.reason.removeprefix(f"{v.word}: ")  # the word is shown once, in bold
    return (
        f'<p class="verdict v{v.code}">verdict: <b>{_num("verdict", v.word)}</b> '
        f'(exit status {v.code}): <span data-k="reason">{_e(reason)}</span></p>'
    )


def readdir_section(path, analyses, verdict, slab_texts=()):
    """The section of one readdir input: verdict and evidence, counts, table, the slab
    figures of its traces with kmem events (as `analyze` words them), timelines."""
    out = [f'<section class="input" data-path="{_e(path)}"><h2>{_e(path)}</h2>', _verdict(verdict)]
    for a in analyses:
        ev = "; ".join(f"{k} from {', '.join(v)}" for k, v in a.evidence.items() if v)
        out.append(
            f"<p>{_e(os.path.basename(a.info.get('path', '')))}: {_e(a.info.get('format', ''))}, "
            f"{_e(a.kernel or 'kernel not known')}. Evidence: {_e(ev)}</p>"
        )
    out.append(_counts(analyses))
    table = listing_table(analyses).frame()
    if len(table):
        out.append(table.to_html(index=False, classes="listings", border=0))
    out += [f'<pre class="slab">{_e(t)}</pre>' for t in slab_texts]
    out.append(
        '<p class="legend">Timelines: dots are READDIRs (red: restart, hollow orange: back to '
        "cookie 0 for a cause the trace does not show), shaded red the re-fetch a restart cost, "
        "dashed blue lines invalidations, blue marks changes of the directory, green bars "
        "getdents calls; hover for the event, wheel to zoom time, double click to reset.</p>"
    )
    out += [_timelines(a) for a in analyses]
    out.append("</section>")
    return "".join(out)


def slab_section(path, slab_texts):
    """The section of a trace of kmem events alone: its slab figures, no verdict."""
    return (
        f'<section class="input slab" data-path="{_e(path)}"><h2>{_e(path)}</h2>'
        + "".join(f'<pre class="slab">{_e(t)}</pre>' for t in slab_texts)
        + "</section>"
    )


def dcache_section(path, results, text, charts=""):
    """The section of one dcache run: its verdict, the charts of its samples
    (samplechart.charts) and the dcache report's text."""
    code = {"PASS": 0, "FAIL": 1}.get(str(results.get("verdict")), 125)
    return (
        f'<section class="input dcache" data-path="{_e(path)}"><h2>{_e(path)}</h2>'
        f'<p class="verdict v{code}">verdict: <b>{_num("verdict", results.get("verdict"))}</b> '
        + _e("; ".join(map(str, results.get("reasons") or [])))
        + f"</p>{charts}<pre>{_e(text)}</pre></section>"
    )


def verdicts_section(verdicts):
    """For several inputs, each one's verdict line at the top: (path, word, code, reason)."""
    return (
        '<section class="verdicts"><h2>Verdicts</h2>'
        + "".join(
            f'<p class="verdict v{code}">{_e(path)}: <b>{_e(word)}</b> '
            f"{_e(reason.removeprefix(f'{word}: '))}</p>"
            for path, word, code, reason in verdicts
        )
        + "</section>"
    )


def pairs_section(before, after, paths):
    """Two readdir inputs' listings paired by process and directory, with the ratios."""
    rows = compare.rows(before, after)
    head = "".join(
        f"<th>{_e(h)}</th>"
        for h in [
            "listing",
            "metric",
            compare.label(before, paths[0]),
            compare.label(after, paths[1]),
            "after/before",
        ]
    )
    body = []
    for r in rows:
        for m in ("seconds", "readdirs", "restarts", "refetched_readdirs", "invalidations"):
            va = r["before"][m] if r["before"] else None
            vb = r["after"][m] if r["after"] else None
            ratio = r["ratio"].get(m)
            cell = lambda v: "-" if v is None else v  # noqa: E731
            body.append(
                f'<tr data-listing="{_e(r["listing"])}" data-metric="{m}">'
                + "".join(
                    f"<td>{_e(c)}</td>" for c in (r["listing"], m, cell(va), cell(vb), cell(ratio))
                )
                + "</tr>"
            )
    return (
        '<section class="pairs"><h2>Before / after, listings paired by process and directory</h2>'
        f"<p>before: {_e(paths[0])}; after: {_e(paths[1])}. - : no such listing on that side, "
        "or a value or ratio the trace cannot tell.</p>"
        f'<table class="pairs"><tr>{head}</tr>{"".join(body)}</table></section>'
    )


def page(sections, title="nfs-readdir report"):
    """The whole page around the sections (HTML strings)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{_e(title)}</h1>{''.join(sections)}<script>{ZOOM}</script></body></html>\n"
    )


def write(path, text):
    """Write the page to path whole or not at all (through a file beside it, renamed); True
    when it replaced a file that was there. A path that is not a regular file (-o /dev/null,
    a FIFO) is written in place: renaming over it would make /dev/null a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return False
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.partial")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return mode is not None
