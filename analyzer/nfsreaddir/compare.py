"""`nfs-readdir compare`: two analyses side by side, listing by listing (matched by phase)."""

import pandas as pd

METRICS = ["seconds", "entries", "readdirs", "restarts", "refetched_readdirs",
           "invalidations", "invalidations_followed_by_restart", "timed_out"]


def _by_key(analyses):
    out = {}
    for a in analyses:
        for i, lst in enumerate(a.listings):
            s = lst.summary()
            out.setdefault(s["phase"] or f"listing {i + 1}", s)
    return out


def table(before, after):
    """Rows phase/metric, columns A, B and B/A."""
    a, b = _by_key(before), _by_key(after)
    rows = {}
    for key in list(a) + [k for k in b if k not in a]:
        for m in METRICS + ["dentries_added"]:
            va, vb = (x.get(key, {}) for x in (a, b))
            if m == "dentries_added":
                va = va.get("dentries", {}).get("nr_dentry", {}).get("added")
                vb = vb.get("dentries", {}).get("nr_dentry", {}).get("added")
            else:
                va, vb = va.get(m), vb.get(m)
            ratio = (round(vb / va, 2) if isinstance(va, (int, float)) and not isinstance(
                va, bool) and va and isinstance(vb, (int, float)) else None)
            rows[(key, m)] = {"A": va, "B": vb, "B/A": ratio}
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.names = ["listing", "metric"]
    return df
