"""`nfs-readdir plot`: how far each listing got over time, and the dcache beneath it.

The y axis is how far into the directory each READDIR asked to start: its cookie over the largest
cookie of the listing, or for a listing that did not reach the end (dashed) over the largest
cookie of a listing of the same directory that did. ext4 cookies are hash positions spread
evenly over their range, and xfs and tmpfs cookies are offsets, so this is the share of the
directory already read; a restart drops to 0, or to the cookie below the reader's position it
asked. Invalidations are dotted vertical lines, restarts red crosses where they asked, and
READDIRs that went back for a cause the trace cannot tell (a restart or a new open) hollow orange
circles: the legend gives a listing's restarts as a range then. The title names the traces and
their kernels; no two listings share a colour.
"""

import os
import stat

import matplotlib
import numpy as np
import pandas as pd

# Figures made as objects, not through pyplot: no backend chosen for the whole process at
# import, and no figure kept by pyplot; savefig renders with the format's own canvas.
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..model.columns import frame
from ..model.markers import Markers
from ..units import NS


def _ends(lsts):
    """The largest cookie of each directory among listings that reached its end: the scale of a
    listing of that directory that did not (its own largest cookie is only as far as it got)."""
    out: dict[tuple[int, int], float] = {}
    for _, lst in lsts:
        if lst.complete and len(lst.rpcs):
            key = (lst.dev, lst.fileid)
            out[key] = max(out.get(key, 0), float(frame(lst.rpcs)["cookie"].max()))
    return out


FORMATS = ("png", "svg", "pdf")


def output_format(path):
    """The image format for an output path, from its extension; a device such as /dev/null
    takes PNG. Anything else is refused before any work is done."""
    if path == "-":
        return "png"
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext in FORMATS:
        return ext
    if not ext and os.path.exists(path) and stat.S_ISCHR(os.stat(path).st_mode):
        return "png"
    raise ValueError(
        f"cannot write {path!r}: give a file name ending in " + ", ".join("." + f for f in FORMATS)
    )


def save(fig, output, out=None):
    """Write the figure to exactly the path given, in place (a device stays a device), or for
    "-" as PNG to out (a binary stream: standard output)."""
    if output == "-":
        fig.savefig(out, format="png")
        return
    with open(output, "wb") as f:
        fig.savefig(f, format=output_format(output))


def _kernel(a):
    k = a.kernel or ""
    return k.removesuffix("-amd64").removesuffix("-arm64")


def _label(a, lst, several_kernels):
    # A capture's listing has a client, not a process.
    who = lst.phase or (f"{lst.comm}[{lst.pid}]" if lst.pid is not None else lst.comm)
    return f"{_kernel(a)} {who}" if several_kernels else who


def _colors(n):
    """n colours, no two alike: the default cycle's ten, else evenly spaced over a colour map."""
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    return [matplotlib.colormaps["turbo"](x) for x in np.linspace(0.05, 0.95, n)]


def _readdirs(n):
    return f"{n} READDIR" + ("" if n == 1 else "s")


def _title(analyses):
    """What the figure is of: its traces (the first few) and their kernels."""
    # The file and the folder it is in: a run's traces are all named idle.dat, modified.dat.
    names = [
        os.path.join(*os.path.normpath(a.info.get("path", "?")).split(os.sep)[-2:])
        for a in analyses
    ]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    kernels = sorted({a.kernel or "unknown kernel" for a in analyses})
    return f"{shown} on {', '.join(kernels)}"


def listings(analyses, output, out=None):
    """listings_figure saved to output (see save)."""
    save(listings_figure(analyses), output, out)


def listings_figure(analyses):
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
    fig = Figure(figsize=(12, 2.4 * sum(heights) + 1))
    grid = fig.subplots(
        len(heights), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights}
    )
    axes = list(grid[:, 0])
    colors = {}
    palette = iter(_colors(len(lsts)))
    for ax, (kind, items) in zip(axes, panels):
        for a, lst in items:
            label = _label(a, lst, several)
            rpcs = frame(lst.rpcs)
            t = (rpcs["ts"] - lst.start) / NS
            style = "-"
            if kind == "cookies":
                cookies = rpcs["cookie"].astype(float)
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
            lo_hi = lst.restart_range
            maybe = f", {lo_hi[0]}-{lo_hi[1]} restarts" if lo_hi and lo_hi[1] > lo_hi[0] else ""
            (line,) = ax.plot(
                t,
                y,
                style,
                drawstyle="steps-post",
                color=next(palette),
                label=f"{label}: {_readdirs(len(t))}{maybe}",
            )
            colors[id(lst)] = line.get_color()
            for inv in lst.invalidations:
                ax.axvline(
                    (inv.ts - lst.start) / NS, color=line.get_color(), alpha=0.7, lw=1.2, ls=":"
                )
            if lst.restarts:
                # Where each happened: cookie 0, or the cookie below the reader's position.
                ax.plot(
                    [(r.ts - lst.start) / NS for r in lst.restarts],
                    [y[r.rpc_index] for r in lst.restarts],
                    "x",
                    color="red",
                    ms=7,
                )
            if lst.ambiguous_rows:
                ax.plot(
                    [t.iloc[i] for i in lst.ambiguous_rows],
                    [y[i] for i in lst.ambiguous_rows],
                    "o",
                    mfc="none",
                    color="orange",
                    ms=7,
                )
        ax.set_ylabel(
            "cookie / largest cookie"
            if kind == "cookies"
            else "READDIRs so far\n(no cookies traced)"
        )
        _legend(ax)
    axes[0].set_title(
        f"{_title(analyses)}\nREADDIR progress per listing (dotted line: invalidation, x restart, "
        "o restart or new open)"
    )
    if has_samples:
        bottom = axes[-1]
        for a, lst in lsts:
            s = frame(a.samples)
            if s is None or not len(s):
                continue
            win = s[(s["ts"] >= lst.start) & (s["ts"] <= lst.end)]
            if len(win):
                bottom.plot(
                    (win["ts"] - lst.start) / NS,
                    win["nr_dentry"].astype(float),
                    color=colors.get(id(lst)),
                    label=_label(a, lst, several),
                )
        bottom.set_ylabel("dentries")
        _legend(bottom)
    axes[-1].set_xlabel("seconds since the listing started")
    fig.tight_layout()
    return fig


def _legend(ax, most=12):
    """The legend beside the axes, never over the curves; at most `most` entries."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    more = len(handles) - most
    if more > 0:
        handles, labels = handles[:most], labels[:most] + [f"... {more} more listings"]
        handles.append(Line2D([], [], linestyle="none"))
    ax.legend(
        handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False
    )


# ------------------------------------------------------------------------------ dcache runs
# The top share of a dcache panel left to the phase names: the longest ("local-misses") is
# 0.3 of a 3.6-inch panel's height.
PHASE_BAND = 0.35


def dcache_samples(
    ax, samples, phases=None, columns=("nr_dentry", "nr_negative"), t0=None, label=None, shade=True
):
    """Draw columns (nr_dentry and nr_negative) of the samples over time on ax, in seconds
    since t0 (default: the first sample), with the phases shaded and named. Returns ax."""
    if isinstance(samples, Markers):
        phases = samples.phases if phases is None else phases
        samples = samples.samples
    if samples is None or not len(samples):
        ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center")
        return ax
    samples = samples.sort_values("ts")
    t0 = int(samples["ts"].iloc[0]) if t0 is None else t0
    x = (samples["ts"] - t0) / NS
    styles = {"nr_dentry": "-", "nr_negative": "--"}
    for col in columns:
        if col not in samples:
            continue
        y = pd.to_numeric(samples[col], errors="coerce")
        ax.plot(
            x,
            y,
            styles.get(col, "-"),
            drawstyle="steps-post",
            label=f"{label} {col}" if label else col,
        )
    if shade and phases:
        # The phase names run down from the top, in a band above the curves kept free for them.
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, lo + (hi - lo) / (1 - PHASE_BAND))
        names = ax.get_xaxis_transform()  # x in seconds, y in fractions of the axes' height
        for i, p in enumerate(phases):
            end = p.end if p.end is not None else int(samples["ts"].iloc[-1])
            a, b = (p.start - t0) / NS, (end - t0) / NS
            ax.axvspan(a, b, color=f"C{i % 10}", alpha=0.08)
            ax.text(
                a,
                0.99,
                p.name,
                rotation=90,
                va="top",
                ha="left",
                fontsize="x-small",
                transform=names,
            )
    ax.set_xlabel("seconds")
    ax.set_ylabel("dentries")
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    # Outside the axes, on the right: the phase names run along the top inside.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return ax


def dcache_figures(ax, runs):
    """The figure each reproducer is about, one series per run (kernel): readdirplus, the
    client dentries a listing leaves against N; memcg, the list_lru bytes of each cell."""
    name = runs[0].get("name")
    if name == "dcache-readdirplus":
        for r in runs:
            ns = sorted(int(x) for x in str(r["sizes"]).split(","))
            ax.plot(
                ns,
                [r["figures"].get(f"n{n}_client_dentries") for n in ns],
                "o-",
                label=r.get("kernel"),
            )
        top = max(int(x) for r in runs for x in str(r["sizes"]).split(","))
        ax.plot([0, top], [0, top], ":", color="grey", label="one per name")
        ax.set_xlabel("names in the directory (N)")
        ax.set_ylabel("client dentries after ls -f")
        ax.set_title("dentries a listing adds on the client")
    elif len({c["memcg"]["mounts"] for c in runs[0]["phases"].values() if "memcg" in c}) > 2:
        _plot_memcg_grid(ax, runs)
        return
    else:
        cells = [
            c for c in runs[0].get("phase_order", []) if "memcg" in runs[0]["phases"].get(c, {})
        ]
        width = 0.8 / len(runs)
        for i, r in enumerate(runs):
            for step in ("setup", "touch"):
                ys = [
                    r["phases"].get(c, {}).get("memcg", {}).get(f"lru_bytes_{step}") or 0
                    for c in cells
                ]
                xs = [k + i * width for k in range(len(cells))]
                ax.bar(
                    xs,
                    ys,
                    width * 0.9,
                    bottom=None
                    if step == "setup"
                    else [
                        r["phases"].get(c, {}).get("memcg", {}).get("lru_bytes_setup") or 0
                        for c in cells
                    ],
                    color=f"C{i}",
                    alpha=1.0 if step == "setup" else 0.45,
                    label=f"{r.get('kernel')} {'mount+mkdir' if step == 'setup' else 'lookups'}",
                )
        ax.set_xticks([k + width * (len(runs) - 1) / 2 for k in range(len(cells))], cells)
        ax.set_xlabel("cell: K superblocks x M memory cgroups")
        ax.set_ylabel("list_lru bytes allocated")
        ax.set_title("list_lru memory per cell")
    ax.legend(loc="upper left", fontsize="small")


def _plot_memcg_grid(ax, runs):
    """A grid of cells: list_lru bytes of the mounts and lookups against K, one line per M
    (colour) and kernel (marker), measured (solid) and the model fitted to them (dotted).
    Both count 5.10's pointer arrays above 8 KiB, which the runs cannot (taken from the code,
    as in the fit)."""
    markers = "os^v"
    for i, r in enumerate(runs):
        cells = [v["memcg"] for v in r["phases"].values() if "memcg" in v]
        for j, m in enumerate(sorted({c["memcgs"] for c in cells})):
            row = sorted((c for c in cells if c["memcgs"] == m), key=lambda c: c["mounts"])
            ks = [c["mounts"] for c in row]
            ys = [
                (c.get("lru_bytes_mount") or 0)
                + (c.get("lru_bytes_touch") or 0)
                + (c.get("untraced_bytes_mount") or 0)
                for c in row
            ]
            ax.plot(ks, ys, markers[i % 4] + "-", color=f"C{j}", label=f"{r.get('kernel')} M={m}")
            if all("model_bytes" in c for c in row):  # the fit (a grid of cells)
                ax.plot(ks, [c["model_bytes"] for c in row], ":", color=f"C{j}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("K superblocks (NFS mounts)")
    ax.set_ylabel("list_lru bytes: mounts + lookups")
    if any(
        v["memcg"].get("untraced_bytes_mount")
        for r in runs
        for v in r["phases"].values()
        if "memcg" in v
    ):
        ax.set_ylabel("list_lru bytes: mounts + lookups\n(+ 5.10 arrays > 8 KiB, from the code)")
    ax.set_title("list_lru memory per cell (dotted: the model fitted to each kernel)")
    ax.legend(loc="upper left", fontsize="x-small", ncol=2)


def dcache_runs(runs, output, out=None):
    """One panel per run (e.g. the same reproducer on two kernels), runs given as (results,
    markers of its trace): dentries and negative dentries over time; for readdirplus and memcg
    runs of one reproducer, a first panel with their figures side by side."""
    results = [r for r, _ in runs]
    summary = len({r.get("name") for r in results}) == 1 and results[0].get("name") in (
        "dcache-readdirplus",
        "dcache-memcg",
    )
    n = len(runs) + summary
    fig = Figure(figsize=(10, 3.6 * n))
    axes = fig.subplots(n, 1, squeeze=False)
    if summary:
        dcache_figures(axes[0, 0], results)
    for ax, (_, m) in zip(axes[int(summary) :, 0], runs):
        dcache_samples(ax, m.samples, m.phases)
        # the run's own parameters: runs of one reproducer on one kernel differ only there
        params = " ".join(f"{k}={v}" for k, v in m.run.items() if k not in ("reproducer", "kernel"))
        ax.set_title(
            f"{m.run.get('reproducer', '?')} on {m.run.get('kernel', '?')}"
            + (f"\n{params}" if params else ""),
            fontsize=10,
        )
    fig.tight_layout()
    save(fig, output, out)
    return output
