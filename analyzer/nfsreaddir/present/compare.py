"""`nfs-readdir compare`: two analyses side by side, listing by listing, paired by process name
and directory (pairing.py, which the HTML report's before/after shares); a listing on one side
only is named so.

A value the trace cannot know (restarts without cookies) is "cannot tell" in the text and null
in JSON, never 0, and so is a ratio with an unknown or zero side.
"""

import os

import pandas as pd

from .pairing import pair

METRICS = [
    "seconds",
    "entries",
    "readdirs",
    "restarts",
    "refetched_readdirs",
    "invalidations",
    "invalidations_followed_by_restart",
    "ending",
    "dentries_added",
]
UNKNOWN = "cannot tell"


def label(analyses, path):
    """What a side is called: its kernels, else the input's name."""
    kernels = sorted({a.kernel for a in analyses if a.kernel})
    return ", ".join(kernels) if kernels else os.path.basename(os.path.normpath(path))


def _value(s, m):
    if m == "dentries_added":
        return s.get("dentries", {}).get("nr_dentry", {}).get("added")
    return s.get(m)


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Significant digits of a ratio: 16/8314 is 0.00192, not 0.0; 5/5 is 1.
DIGITS = 3


def ratio(va, vb):
    """after/before of two numbers to DIGITS significant digits; None where either is
    unknown, or before is 0."""
    return float(f"{vb / va:.{DIGITS}g}") if _number(va) and _number(vb) and va else None


def ratio_text(r):
    """A ratio as the table shows it: its significant digits, no trailing .0; - for none."""
    return "-" if r is None else f"{r:.{DIGITS}g}"


def rows(before, after):
    """One dict per pair of listings of two lists of analyses: process, dir, phase, nth, and
    before/after/ratio as {metric: value} (None: that side has no such listing, or the value
    or ratio cannot be told)."""
    out = []
    summaries = [[lst.summary() for a in side for lst in a.listings] for side in (before, after)]
    for p in pair(*summaries):
        va = {m: _value(p.before, m) for m in METRICS} if p.before is not None else None
        vb = {m: _value(p.after, m) for m in METRICS} if p.after is not None else None
        out.append(
            {
                "process": p.process,
                "dir": p.dir,
                "dir_after": p.dir_after,
                "phase": p.phase,
                "nth": p.nth,
                "listing": p.name,
                "before": va,
                "after": vb,
                "ratio": {
                    m: ratio(va[m], vb[m]) if va and vb else None for m in METRICS if m != "ending"
                },
            }
        )
    return out


def to_json(before, after, paths=("A", "B")):
    """What `compare --json` prints: each side's label and path, and rows()."""
    return {
        "before": {"path": paths[0], "label": label(before, paths[0])},
        "after": {"path": paths[1], "label": label(after, paths[1])},
        "listings": rows(before, after),
    }


def table(before, after, paths=("A", "B")):
    """Rows listing/metric (the listing named by process, directory and phase), one column per
    side headed by its kernel, and after/before."""
    la, lb = label(before, paths[0]), label(after, paths[1])
    if la == lb:
        la, lb = f"{la} (A)", f"{lb} (B)"
    out = {}
    for r in rows(before, after):
        for m in METRICS:
            va = r["before"][m] if r["before"] else None
            vb = r["after"][m] if r["after"] else None
            if m == "ending" or (_number(va) and _number(vb)):
                shown = ratio_text(r["ratio"].get(m))  # x/0 has no ratio: -
            else:
                shown = UNKNOWN
            out[(r["listing"], m)] = {
                la: UNKNOWN if r["before"] and va is None else va,
                lb: UNKNOWN if r["after"] and vb is None else vb,
                "ratio (2nd/1st)": shown,
            }
    df = pd.DataFrame.from_dict(out, orient="index")
    df.index.names = ["listing", "metric"]
    return df.astype(object).where(df.notna(), "-")


def dcache_rows(ra, rb):
    """Rows {"figure", A-label, B-label, "B/A"} of the "figures" of two dcache runs (their
    results dicts), e.g. one reproducer on 5.10 and 6.1."""
    la, lb = str(ra.get("kernel", "A")), str(rb.get("kernel", "B"))
    if la == lb:
        la, lb = f"A {la}", f"B {lb}"
    fa, fb = ra.get("figures", {}), rb.get("figures", {})
    rows = []
    for k in list(fa) + [k for k in fb if k not in fa]:
        va, vb = fa.get(k), fb.get(k)
        num = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (va, vb))
        rows.append({"figure": k, la: va, lb: vb, "B/A": round(vb / va, 3) if num and va else None})
    rows.append({"figure": "verdict", la: ra.get("verdict"), lb: rb.get("verdict"), "B/A": None})
    return rows


def dcache_table(ra, rb):
    """dcache_rows() as a DataFrame indexed by figure."""
    return pd.DataFrame(dcache_rows(ra, rb)).set_index("figure")
