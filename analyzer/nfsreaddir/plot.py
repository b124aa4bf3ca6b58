"""`nfs-readdir plot`: how far each listing got over time, and the dcache beneath it.

The y axis is how far into the directory each READDIR asked to start: its cookie over the largest
cookie of the listing, or for a listing that did not reach the end (dashed) over the largest
cookie of a listing of the same directory that did. ext4 cookies are hash positions spread evenly over their range, and xfs
and tmpfs cookies are offsets, so this is the share of the directory already read; a restart
drops to 0. Invalidations are vertical lines, restarts red crosses.
"""

import os
import stat

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


FORMATS = ("png", "svg", "pdf")


def output_format(path):
    """The image format for an output path, from its extension; a device such as /dev/null
    takes PNG. Anything else is refused before any work is done."""
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext in FORMATS:
        return ext
    if not ext and os.path.exists(path) and stat.S_ISCHR(os.stat(path).st_mode):
        return "png"
    raise ValueError(f"cannot write {path!r}: give a file name ending in "
                     + ", ".join("." + f for f in FORMATS))


def save(fig, output):
    """Write the figure to exactly the path given, in place: a device stays a device."""
    with open(output, "wb") as f:
        fig.savefig(f, format=output_format(output))


def _kernel(a):
    k = a.kernel or ""
    return k.removesuffix("-amd64").removesuffix("-arm64")


def _label(a, lst, several_kernels):
    who = lst.phase or f"{lst.comm}[{lst.pid}]"
    return f"{_kernel(a)} {who}" if several_kernels else who


def listings(analyses, output):
    """READDIR progress per listing: traces with cookies and traces without on axes of their
    own (a cookie fraction and a READDIR count share no scale), dentries beneath."""
    lsts = [(a, lst) for a in analyses for lst in a.listings if len(lst.rpcs)]
    ends = _ends(lsts)
    several = len({_kernel(a) for a in analyses}) > 1
    with_cookies = [(a, lst) for a, lst in lsts if a.cookies_known]
    without = [(a, lst) for a, lst in lsts if not a.cookies_known]
    has_samples = any(a.samples is not None and len(a.samples) for a in analyses)
    panels = [p for p in (("cookies", with_cookies), ("counts", without)) if p[1]]
    heights = [3] * len(panels) + ([1] if has_samples else [])
    fig, axes = plt.subplots(len(heights), 1, figsize=(12, 2.4 * sum(heights) + 1),
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})
    axes = list(axes[:, 0])
    colors = {}
    for ax, (kind, items) in zip(axes, panels):
        for a, lst in items:
            label = _label(a, lst, several)
            t = (lst.rpcs["ts"] - lst.start) / NS
            style = "-"
            if kind == "cookies":
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
            else:
                y = range(1, len(t) + 1)
            line, = ax.plot(t, y, style, drawstyle="steps-post",
                            label=f"{label}: {len(t)} READDIRs")
            colors[id(lst)] = line.get_color()
            for inv in lst.invalidations:
                ax.axvline((inv.ts - lst.start) / NS, color=line.get_color(), alpha=0.25, lw=0.8)
            if lst.restarts:
                ax.plot([(r.ts - lst.start) / NS for r in lst.restarts],
                        [0] * len(lst.restarts), "x", color="red", ms=7)
        ax.set_ylabel("cookie / largest cookie" if kind == "cookies"
                      else "READDIRs so far\n(no cookies traced)")
        _legend(ax)
    axes[0].set_title("READDIR progress per listing (| invalidation, x restart at cookie 0)")
    if has_samples:
        bottom = axes[-1]
        for a, lst in lsts:
            s = a.samples
            if s is None or not len(s):
                continue
            win = s[(s["ts"] >= lst.start) & (s["ts"] <= lst.end)]
            if len(win):
                bottom.plot((win["ts"] - lst.start) / NS, win["nr_dentry"].astype(float),
                            color=colors.get(id(lst)), label=_label(a, lst, several))
        bottom.set_ylabel("dentries")
        _legend(bottom)
    axes[-1].set_xlabel("seconds since the listing started")
    fig.tight_layout()
    save(fig, output)
    plt.close(fig)


def _legend(ax, most=12):
    """The legend beside the axes, never over the curves; at most `most` entries."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    more = len(handles) - most
    if more > 0:
        handles, labels = handles[:most], labels[:most] + [f"... {more} more listings"]
        handles.append(plt.Line2D([], [], linestyle="none"))
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small",
              frameon=False)
