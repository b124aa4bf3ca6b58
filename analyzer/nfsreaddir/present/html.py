"""`nfs-readdir report`: one self-contained HTML page of an investigation that answers before it
shows.

Per input, first the answer in one sentence, the few listings that matter (worst first) and one
overview of every listing on one time axis; then what to record next time; then, folded, the
evidence, the listings table as `analyze` prints it and a chart per listing (a process's or
client's quiet listings, by their findings, folded once more). For two readdir inputs, their
listings paired (pairing.py). A dcache run: its verdict, its samples charted by samplechart.py,
its report.

Drawn as inline SVG by charts.py, with no JavaScript library: a listing has at most a few
hundred READDIRs, which SVG draws at once and a browser zooms (Ctrl +) without loss; an inlined
charting library (uPlot, 50 kB) would add a vendored dependency, its licence and a canvas that
page tests cannot read back. Hover shows an event through SVG's own <title> tooltips; folding
uses <details>; the one script is the charts' time zoom (axes.py). The page makes no network
request: no font, image or script is fetched (its Content-Security-Policy forbids it).
"""

import html
import os
import stat
import sys

from . import answer, axes, charts, compare, roundtrips
from .render import listing_table

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1100px}
h1{font-size:1.3em;margin:0 0 .5em}
h2{font-size:1.15em;border-bottom:1px solid #ccc;margin:1em 0 .4em}
.answer{font-size:1.15em;padding:.5em .8em;border-radius:4px;margin:.3em 0}
.v0{background:#e3f5e3}.v1{background:#fbe3e3}.v125{background:#fff4d6}
.counts{color:#444;margin:.2em 0}.counts span.num{font-weight:bold}
table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
td.l,th.l{text-align:left}
svg{background:#fafafa;border:1px solid #ddd;display:block;margin:.3em 0}
svg.zoom{user-select:none;cursor:crosshair}
.unknown{color:#a60}.legend,.advice{font-size:12px;color:#555}
details{margin:.5em 0}figure{margin:.8em 0}figcaption{font-size:12px;color:#444}
summary{cursor:pointer;color:#036}
"""


# How to read an overview, under the first of a section's.
LEGEND = (
    ", a lane per reader. Bar: a listing by its finding (red: bad, orange: undecided, green: "
    "good or survived, grey: untested or unfinished); dark red tick: restart; blue dashes: "
    "invalidation; blue triangle: change of the directory. Drag across to zoom in, double "
    "click to zoom out."
)


def _e(x):
    return html.escape(str(x))


def _num(key, value):
    """A number the page shows, marked so that a reader (or a test) finds it by its key."""
    return f'<span class="num" data-k="{key}">{_e(value)}</span>'


def _counts(seen):
    known = lambda xs: sum(xs) if None not in xs else "cannot tell"  # noqa: E731
    restarts = [
        None if s.restarts is None or s.restarts[0] != s.restarts[1] else s.restarts[0]
        for s in seen
    ]
    return (
        '<p class="counts">'
        + ", ".join(
            [
                f"{_num('listings', len(seen))} listings",
                f"{_num('readdirs', sum(s.readdirs for s in seen))} READDIRs",
                f"{_num('restarts', known(restarts))} restarts",
                f"{_num('invalidations', known([s.invalidation_count for s in seen]))} "
                "invalidations",
            ]
        )
        + "</p>"
    )


def _anchor(k, n):
    return f"listing-{k}-{n}"


def _worst(rows):
    """The table of the listings that matter: rows of (analysis number, Seen)."""
    if not rows:
        return '<p class="worst">No listing met a change of its directory or restarted.</p>'
    head = "".join(
        f"<th{' class=l' if h in ('listing', 'finding') else ''}>{h}</th>"
        for h in (
            "listing",
            "finding",
            "restarts",
            "time lost (s)",
            "READDIRs re-fetched",
            "READDIRs",
            "time (s)",
        )
    )
    body = "".join(
        f'<tr data-listing="{k}-{s.n}"><td class="l"><a href="#{_anchor(k, s.n)}">{_e(s.label)}'
        f'</a></td><td class="l" title="{_e(s.why)}">{_e(s.word)}</td>'
        f"<td>{_e(s.restarts_text)}</td>"
        f"<td>{s.lost_text}</td><td>{s.refetched_text}</td><td>{s.readdirs}</td>"
        f"<td>{(s.end - s.start) / 1e9:.2f}</td></tr>"
        for k, s in rows
    )
    return f'<table class="worst"><tr>{head}</tr>{body}</table>'


def _chart_block(analysis, k, s):
    lst = analysis.listings[s.n]
    return (
        f'<div class="listing-block" id="{_anchor(k, s.n)}" data-listing="{s.n}">'
        f"<div>{_e(s.label)}: {s.word}: {_e(s.why)}</div>"
        f"{charts.listing(analysis, lst, s.who, f'c{k}-{s.n}')}</div>"
    )


def _charts(analysis, k, seen):
    """A chart per listing; a reader's quiet listings (by their findings) folded together."""
    quiet: dict = {}
    out = []
    for s in seen:
        if s.quiet:
            quiet.setdefault(s.who, []).append(s)
        else:
            out.append(_chart_block(analysis, k, s))
    for who, group in quiet.items():
        out.append(
            f'<details class="folded"><summary>{len(group)} quiet listing'
            f"{'s' if len(group) > 1 else ''} of {_e(who)} (no restart; their directory did "
            "not change once they were past the first page, or they stopped before the end)"
            "</summary>" + "".join(_chart_block(analysis, k, s) for s in group) + "</details>"
        )
    return "".join(out)


def readdir_section(path, analyses, verdict, slab_texts=()):
    """The section of one readdir input: the answer, the worst listings and an overview per
    trace, then the recording advice, then folded the evidence, table, slab figures (as
    `analyze` words them) and the chart of every listing."""
    seen = [answer.seen(a, verdict) for a in analyses]
    every = [s for ss in seen for s in ss]
    ranked = answer.worst([(k, s) for k, ss in enumerate(seen) for s in ss])
    out = [
        f'<section class="input" data-path="{_e(path)}"><h2>{_e(path)}</h2>',
        f'<p class="answer v{verdict.code}"><b>{_num("verdict", answer.word(verdict.code))}:</b> '
        f'<span class="sentence">{_e(answer.sentence(verdict, every))}</span></p>',
        _counts(every),
    ]
    # Where no restart explains a slow listing: where its time went, in one line each.
    slow = roundtrips.check_lines(analyses)
    if slow:
        out.append('<p class="slow">' + "<br>".join(_e(t) for t in slow) + "</p>")
    out.append(_worst(ranked))
    for k, (a, ss) in enumerate(zip(analyses, seen)):
        svg, left_out = charts.overview(ss, f"o{k}")
        name = os.path.basename(a.info.get("path", ""))
        out.append(
            f'<figure class="overview"><figcaption><b>{_e(name)}: every listing over time</b>'
            + (LEGEND if k == 0 else "")
            + "</figcaption>"
            + svg
        )
        unplaced = sum(max((x.version_changes or 0) - len(x.changes), 0) for x in ss)
        if unplaced:  # counted by the model, which keeps no time for them (a capture's)
            out.append(
                f"<p class=legend>{unplaced} change{'s' if unplaced > 1 else ''} of the "
                "directory the answer counts are not drawn: the trace's model keeps how many, "
                "not when.</p>"
            )
        if left_out:
            out.append(
                f"<p class=legend>{left_out} more readers, with nothing to tell, not drawn "
                "(they are in the table below).</p>"
            )
        out.append("</figure>")
    advice = [t for a in analyses for t in answer.advice(a, verdict)]
    if advice:
        out.append(
            '<p class="advice">' + "<br>".join(_e(t) for t in dict.fromkeys(advice)) + "</p>"
        )
    out.append(
        "<details class=more><summary>The evidence, every listing and a chart of each</summary>"
    )
    for a in analyses:
        ev = "; ".join(f"{k} from {', '.join(v)}" for k, v in a.evidence.items() if v)
        out.append(
            f"<p>{_e(os.path.basename(a.info.get('path', '')))}: {_e(a.info.get('format', ''))}, "
            f"{_e(a.kernel or 'kernel not known')}. Evidence: {_e(ev)}</p>"
        )
    table = listing_table(analyses).frame()
    if len(table):
        out.append(table.to_html(index=False, classes="listings", border=0))
    trips = roundtrips.text(analyses).strip()
    if trips:  # every listing's RPCs by operation, and the findings on them
        out.append(f'<pre class="round-trips">{_e(trips)}</pre>')
    out += [f'<pre class="slab">{_e(t)}</pre>' for t in slab_texts]
    out.append(
        '<p class="legend">Charts: dots are READDIRs at their cookie\'s position (red: restart, '
        "hollow orange: back to cookie 0 for a cause the trace does not show), shaded red the "
        "re-fetch a restart cost, dashed blue lines invalidations, blue triangles changes of "
        "the directory, green bars getdents calls; hover for the event.</p>"
    )
    out += [_charts(a, k, ss) for k, (a, ss) in enumerate(zip(analyses, seen))]
    out.append("</details></section>")
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
        f'<p class="answer v{code}">dcache run: <b>{_num("verdict", results.get("verdict"))}</b> '
        + _e("; ".join(map(str, results.get("reasons") or [])))
        + f"</p>{charts}<pre>{_e(text)}</pre></section>"
    )


def verdicts_section(verdicts):
    """For several inputs, each one's answer at the top: (path, word, code, reason)."""
    return (
        '<section class="verdicts"><h2>Answers</h2>'
        + "".join(
            f'<p class="answer v{code}">{_e(path)}: <b>{_e(answer.word(code))}:</b> '
            f"{_e(answer.cleaned(reason) if reason else word)}</p>"
            for path, word, code, reason in verdicts
        )
        + (
            f"<p>{len(verdicts)} inputs: each is shown on its own; a before/after pairs the "
            "listings of two (give `report` or `compare` two inputs).</p>"
            if len(verdicts) > 2
            else ""
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
            ratio = compare.ratio_text(r["ratio"].get(m))
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
        f"<h1>{_e(title)}</h1>{''.join(sections)}<script>{axes.ZOOM}</script></body></html>\n"
    )


def write(path, text):
    """Write the page to path whole or not at all (through a file beside it, renamed); True
    when it replaced a file that was there. - is standard output. A path that is not a
    regular file (-o /dev/null, a FIFO) is written in place: renaming over it would make
    /dev/null a regular file. An error names the path asked for, never the file beside it."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return False
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
    except OSError as e:
        raise OSError(e.errno, e.strerror, path) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return mode is not None
