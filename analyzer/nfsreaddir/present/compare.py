"""`nfs-readdir compare`: two analyses side by side, listing by listing (matched by phase).

A value the trace cannot know (restarts without cookies) is "cannot tell", never 0, and so is a
ratio with an unknown or zero side.
"""

import os

import pandas as pd

METRICS = [
    "seconds",
    "entries",
    "readdirs",
    "restarts",
    "refetched_readdirs",
    "invalidations",
    "invalidations_followed_by_restart",
    "ending",
]
UNKNOWN = "cannot tell"


def _by_key(analyses):
    out = {}
    for a in analyses:
        for i, lst in enumerate(a.listings):
            s = lst.summary()
            out.setdefault(s["phase"] or f"listing {i + 1}", s)
    return out


def _label(analyses, path):
    kernels = sorted({a.kernel for a in analyses if a.kernel})
    return ", ".join(kernels) if kernels else os.path.basename(os.path.normpath(path))


def _value(s, m):
    if m == "dentries_added":
        return s.get("dentries", {}).get("nr_dentry", {}).get("added")
    return s.get(m)


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def table(before, after, paths=("A", "B")):
    """Rows listing/metric, one column per side headed by its kernel, and after/before."""
    a, b = _by_key(before), _by_key(after)
    la, lb = _label(before, paths[0]), _label(after, paths[1])
    if la == lb:
        la, lb = f"{la} (A)", f"{lb} (B)"
    rows = {}
    for key in list(a) + [k for k in b if k not in a]:
        for m in METRICS + ["dentries_added"]:
            sa, sb = a.get(key), b.get(key)
            va = _value(sa, m) if sa is not None else None
            vb = _value(sb, m) if sb is not None else None
            if _number(va) and _number(vb):
                ratio = round(vb / va, 2) if va else "-"  # x/0 has no ratio
            else:
                ratio = UNKNOWN if (va is None or vb is None) and m != "ending" else "-"
            rows[(key, m)] = {
                la: UNKNOWN if sa is not None and va is None else va,
                lb: UNKNOWN if sb is not None and vb is None else vb,
                "ratio (2nd/1st)": ratio,
            }
    df = pd.DataFrame.from_dict(rows, orient="index")
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
