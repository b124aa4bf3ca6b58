"""`nfs-readdir plot`: how far each listing got over time, and the dcache beneath it.

The y axis is how far into the directory each READDIR asked to start: its cookie over the largest
cookie of the listing, or for a listing that did not reach the end (dashed) over the largest
cookie of a listing of the same directory that did. ext4 cookies are hash positions spread evenly over their range, and xfs
and tmpfs cookies are offsets, so this is the share of the directory already read; a restart
drops to 0. Invalidations are vertical lines, restarts red crosses.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .analysis import NS  # noqa: E402


def _ends(lsts):
    """The largest cookie of each directory among listings that reached its end: the scale of a
    listing of that directory that did not (its own largest cookie is only as far as it got)."""
    out = {}
    for _, lst in lsts:
        if lst.complete and len(lst.rpcs):
            key = (lst.dev, lst.fileid)
            out[key] = max(out.get(key, 0), float(lst.rpcs["cookie"].max()))
    return out


def listings(analyses, output):
    lsts = [(a, lst) for a in analyses for lst in a.listings]
    ends = _ends(lsts)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    for a, lst in lsts:
        label = f"{lst.phase or lst.comm + '[' + str(lst.pid) + ']'}"
        if len(analyses) > 1:
            label = f"{a.run.get('kernel', a.info.get('path'))} {label}"
        t = (lst.rpcs["ts"] - lst.start) / NS
        style = "-"
        if a.cookies_known:
            cookies = lst.rpcs["cookie"].astype(float)
            scale = float(cookies.max()) if len(cookies) else 0.0
            if not lst.complete:
                style = "--"
                ref = ends.get((lst.dev, lst.fileid))
                if ref:
                    scale = max(scale, ref)
                    label += f" ({lst.ending})"
                else:
                    label += f" ({lst.ending}; 1.0 = its own furthest cookie)"
            y = (cookies / (scale or 1.0)).tolist()
            ylabel = "how far into the directory (cookie / largest cookie)"
        else:
            y = range(1, len(t) + 1)
            ylabel = "READDIRs so far (cookies not traced)"
        line, = top.plot(t, y, style, drawstyle="steps-post",
                         label=f"{label}: {len(t)} READDIRs")
        for inv in lst.invalidations:
            top.axvline((inv.ts - lst.start) / NS, color=line.get_color(), alpha=0.25, lw=0.8)
        if lst.restarts:
            top.plot([(r.ts - lst.start) / NS for r in lst.restarts], [0] * len(lst.restarts),
                     "x", color="red", ms=7)
        s = a.samples
        if s is not None and len(s):
            win = s[(s["ts"] >= lst.start) & (s["ts"] <= lst.end)]
            if len(win):
                bottom.plot((win["ts"] - lst.start) / NS, win["nr_dentry"].astype(float),
                            color=line.get_color(), label=f"{label} nr_dentry")
    top.set_ylabel(ylabel if lsts else "")
    top.set_title("READDIR progress per listing (| invalidation, x restart at cookie 0)")
    top.legend(loc="upper left", fontsize="small")
    bottom.set_ylabel("dentries")
    bottom.set_xlabel("seconds since the listing started")
    if bottom.lines:
        bottom.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(output)
    plt.close(fig)
