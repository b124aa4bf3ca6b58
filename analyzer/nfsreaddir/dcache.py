"""The dcache growth reproducers: results, per-phase summaries, plots and kernel comparisons.

The reproducers (reproducers/dcache-negative, dcache-unlink-storm, dcache-readdirplus,
dcache-memcg) leave a results directory with `facts` (key=value lines, `run.*` and
`PHASE.*`), one trace `dcache.dat` and a log. The trace carries their markers:

    nfsrt: run kernel=6.1.0-50-amd64 reproducer=dcache-negative nfs=4.1 ...
    nfsrt: phase=nfs-misses event=start count=20000
    nfsrt: sample nr_dentry=20502 nr_unused=2885 nr_negative=616 slab_active=20538 ...
        kmalloc32_active=4096 kmalloc_bytes=9951744 slab_kb=38568 ... [label=touched]
    nfsrt: timing loop=before target=nfs n=5000 ns=41000.1,... ref_ns=... median_ns=...
    nfsrt: phase=nfs-misses event=end seconds=93.982 count=20000 found=0 missing=20000

and the kernel events each reproducer records (nfs:nfs_lookup_exit, nfs:nfs_readdir_lookup,
sunrpc:rpc_request, cgroup:cgroup_mkdir...), which are counted per phase.

    build_results(directory)  results.json for a dcache-* run, with "verdict" and "reasons"
    summary(markers, ...)     per-phase deltas, growth rates, negative share, lookup slowdown
    plot(ax, samples, ...)    nr_dentry and nr_negative over time on a matplotlib axis
    compare(a, b)             rows of two runs' figures side by side (two kernels)
"""

from __future__ import annotations

import glob
import json
import math
import os
import statistics
from dataclasses import dataclass, field

import pandas as pd

from . import __version__, verdict
from .facts import read_facts
from .markers import lines as marker_lines

NS = 1_000_000_000
TRACE_NAME = "dcache.dat"
# Counters whose per-phase change the summary always reports (when sampled).
DELTA_KEYS = ["nr_dentry", "nr_unused", "nr_negative", "slab_active", "slab_bytes",
              "kmalloc32_active", "kmalloc64_active", "kmalloc_cg32_active",
              "kmalloc_cg64_active", "radix_tree_node_active", "nfs_inode_active",
              "kmalloc_bytes", "slab_kb", "sunreclaim_kb", "percpu_kb"]
RATE_KEYS = ["nr_dentry", "nr_negative", "slab_bytes"]
REPRODUCERS = ("dcache-negative", "dcache-unlink-storm", "dcache-readdirplus", "dcache-memcg")


class DcacheError(OSError):
    """A results directory that cannot be analysed (no facts, no readable trace). An OSError
    so that `python -m nfsreaddir.results` reports it as "could not write results.json" and
    vm-run exits 125 (could not decide) rather than giving a verdict."""


# ------------------------------------------------------------------------------ markers
@dataclass
class DPhase:
    name: str
    start: int                      # ns
    end: int | None = None          # None: the trace stops inside the phase
    attrs: dict = field(default_factory=dict)   # key=value of the start and end markers

    @property
    def seconds(self):
        return None if self.end is None else (self.end - self.start) / NS


@dataclass
class DcacheMarkers:
    run: dict = field(default_factory=dict)
    phases: list = field(default_factory=list)
    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["ts", "label"]))
    timings: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["ts", "loop", "target", "n", "ns", "ref_ns"]))
    # `nfsrt: exec loop=... target=... n=... sys_s=...`: the 2020 thread's exec-of-cat loops
    execs: list = field(default_factory=list)


def _value(v):
    """int, float, or list of floats (comma-separated), else the string."""
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        pass
    if "," in v:
        try:
            return [float(x) for x in v.split(",") if x]
        except ValueError:
            pass
    return v


def _pairs(words):
    out = {}
    for w in words:
        k, sep, v = w.partition("=")
        if sep:
            out[k] = _value(v)
    return out


def parse_markers(markers_df):
    """DcacheMarkers from a table with columns ts and text (or buf): every key of the sample
    lines is kept (markers.parse keeps only the readdir reproducer's), plus timing lines and
    the key=value pairs of phase markers."""
    m = DcacheMarkers()
    if markers_df is None or len(markers_df) == 0:
        return m
    col = "text" if "text" in markers_df else "buf"
    samples, timings = [], []
    for ts, _, words in marker_lines(markers_df, col):
        if words[0] == "run":
            m.run.update({k: v for k, v in (w.partition("=")[::2] for w in words[1:]) if v})
        elif words[0] == "sample":
            kv = _pairs(words[1:])
            kv["ts"] = ts
            kv.setdefault("label", None)
            samples.append(kv)
        elif words[0] == "exec":
            m.execs.append({"ts": ts, **_pairs(words[1:])})
        elif words[0] == "timing":
            kv = _pairs(words[1:])
            for k in ("ns", "ref_ns"):
                v = kv.get(k)
                kv[k] = [float(v)] if isinstance(v, (int, float)) else (v or [])
            kv["ts"] = ts
            timings.append(kv)
        else:
            kv = _pairs(words)
            name, event = kv.pop("phase", None), kv.pop("event", None)
            if name is None:
                continue
            name = str(name)
            if event == "start":
                m.phases.append(DPhase(name, ts, attrs=kv))
            elif event == "end":
                for p in reversed(m.phases):
                    if p.name == name and p.end is None:
                        p.end = ts
                        p.attrs.update(kv)
                        break
    if samples:
        df = pd.DataFrame(samples).sort_values("ts", kind="stable").reset_index(drop=True)
        if {"slab_active", "slab_objsize"} <= set(df.columns):
            df["slab_bytes"] = df["slab_active"] * df["slab_objsize"]
        m.samples = df
    if timings:
        m.timings = pd.DataFrame(timings)
    return m


def read_trace(path):
    """(DcacheMarkers, events) of one trace: events is a DataFrame ts/event/key/bytes of the
    non-marker events (key: "rpc_request:PROC" for sunrpc:rpc_request, else the event name;
    bytes: bytes_alloc of kmem events)."""
    from .trace import TraceError, open_trace
    try:
        t = open_trace(path)
        names = sorted(t.event_names())
        wanted = {"ftrace:print": ["buf"]}
        for ev in names:
            if ev.startswith("ftrace:") or ev.startswith("header_page"):
                continue
            fmt = t.event_format(ev)
            if fmt is None:
                continue
            fields = fmt.user_fields()
            wanted[ev] = [f for f in ("procname", "bytes_alloc") if f in fields and (
                ev == "sunrpc:rpc_request" or ev.startswith("kmem:"))]
        try:
            frames = t.read(wanted)
        except TraceError as e:
            if e.partial is None:
                raise
            frames = e.partial          # an interrupted run: use what was recorded
    except TraceError as e:
        raise DcacheError(f"{path}: {e}") from None
    markers = parse_markers(frames.get("ftrace:print"))
    parts = []
    for ev, df in frames.items():
        if ev == "ftrace:print" or not len(df):
            continue
        key = (ev.split(":", 1)[1] + ":" + df["procname"].astype(str)
               if "procname" in df else ev.split(":", 1)[1])
        part = pd.DataFrame({"ts": df["ts"].to_numpy(), "event": ev, "key": key})
        if "bytes_alloc" in df:
            part["bytes"] = df["bytes_alloc"].to_numpy()
        parts.append(part)
    events = (pd.concat(parts, ignore_index=True).sort_values("ts", kind="stable")
              if parts else pd.DataFrame(columns=["ts", "event", "key"]))
    if "bytes" not in events:
        events["bytes"] = pd.Series(dtype="float64")
    return markers, events


# ------------------------------------------------------------------------------ summary
def _num(v):
    if v is None:
        return None
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v


def _row_before(samples, ts):
    """The last sample at or before ts (the first one when none is)."""
    s = samples[samples["ts"] <= ts]
    return (s.iloc[-1] if len(s) else samples.iloc[0]) if len(samples) else None


def _row_after(samples, ts):
    """The first sample at or after ts (the last one when none is)."""
    s = samples[samples["ts"] >= ts]
    return (s.iloc[0] if len(s) else samples.iloc[-1]) if len(samples) else None


def _ratio(a, b, digits=3):
    if a is None or b is None or not b:
        return None
    return round(a / b, digits)


def _median(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else None


def phase_summary(samples, phase, events=None):
    """Deltas of the sampled counters across one phase, rates per second, negative share."""
    out = {"phase": phase.name, "seconds": phase.seconds,
           **{k: _num(v) for k, v in phase.attrs.items() if not isinstance(v, list)}}
    if samples is None or not len(samples):
        return out
    end = phase.end if phase.end is not None else int(samples["ts"].iloc[-1])
    first, last = _row_before(samples, phase.start), _row_after(samples, end)
    inside = samples[(samples["ts"] >= phase.start) & (samples["ts"] <= end)]
    keys = [k for k in DELTA_KEYS if k in samples.columns]
    out["before"] = {k: _num(first[k]) for k in keys}
    out["after"] = {k: _num(last[k]) for k in keys}
    delta = {}
    for k in keys:
        a, b = _num(first[k]), _num(last[k])
        delta[k] = None if a is None or b is None else b - a
    out["delta"] = delta
    secs = phase.seconds or (end - phase.start) / NS
    out["rate_per_s"] = {k: (round(delta[k] / secs, 1) if secs and delta.get(k) is not None
                             else None) for k in RATE_KEYS if k in delta}
    peak = pd.concat([first.to_frame().T, inside, last.to_frame().T])
    out["peak"] = {k: _num(pd.to_numeric(peak[k], errors="coerce").max())
                   for k in ("nr_dentry", "nr_negative") if k in peak}
    dd, dn = delta.get("nr_dentry"), delta.get("nr_negative")
    # Of the dentries the phase added, the share that is negative; and of all dentries at
    # its end, the negative fraction.
    out["negative_share"] = _ratio(dn, dd) if dd and dd > 0 and dn is not None else None
    out["negative_fraction_after"] = _ratio(out["after"].get("nr_negative"),
                                            out["after"].get("nr_dentry"))
    if events is not None and len(events):
        ev = events[(events["ts"] >= phase.start) & (events["ts"] <= end)]
        out["events"] = {k: int(v) for k, v in ev["key"].value_counts().sort_index().items()}
    return out


def lookup_summary(timings):
    """Per target: medians of each timed loop, and the slowdowns against the `before` loop.

        slowdown       median(ns after) / median(ns before)
        walk_slowdown  median(ns / ref_ns after) / median(ns / ref_ns before): the path walk
                       against an fstat() of the same file timed in the same repetition (in
                       alternating blocks), which cancels a change of the host's speed
        ref_slowdown   the same ratio of the fstat() medians: how much the host changed
        min_slowdown   min(ns after) / min(ns before): the fastest repetitions
        control_*      the same for the loop after drop_caches (`dropped`)
    """
    if timings is None or not len(timings):
        return {}
    out = {}
    for target, tt in timings.groupby("target", sort=False):
        loops = {}
        for _, row in tt.iterrows():
            ns, ref = list(row["ns"]), list(row.get("ref_ns") or [])
            walk = [a / b for a, b in zip(ns, ref) if b] if len(ref) == len(ns) else []
            loops[row["loop"]] = {"n": _num(row.get("n")), "reps": len(ns),
                                  "median_ns": _median(ns), "ref_median_ns": _median(ref),
                                  "median_walk": _median(walk),
                                  "min_ns": min(ns) if ns else None}
        t = {"loops": loops}
        before = loops.get("before", {})
        for loop, prefix in (("after", ""), ("dropped", "control_")):
            x = loops.get(loop)
            if not x or not before:
                continue
            t[prefix + "slowdown"] = _ratio(x["median_ns"], before.get("median_ns"))
            t[prefix + "walk_slowdown"] = _ratio(x["median_walk"], before.get("median_walk"))
            t[prefix + "ref_slowdown"] = _ratio(x["ref_median_ns"], before.get("ref_median_ns"))
            t[prefix + "min_slowdown"] = _ratio(x["min_ns"], before.get("min_ns"))
        out[str(target)] = t
    return out


def summary(markers_or_samples, phases=None, timings=None, events=None):
    """Per-phase deltas of nr_dentry/nr_negative/slab (and the other sampled counters), growth
    rates per second, the negative share, and the lookup-loop slowdown when timed.

    markers_or_samples: DcacheMarkers (phases and timings taken from it) or a samples
    DataFrame (then give phases: DPhase objects, or markers.Phase objects, and optionally the
    timings DataFrame). events: the per-event table of read_trace, counted per phase.
    Returns a JSON-able dict: {"phases": {name: {...}}, "overall": {...}, "lookup": {...}}.
    """
    if isinstance(markers_or_samples, DcacheMarkers):
        m = markers_or_samples
        samples, phases = m.samples, phases if phases is not None else m.phases
        timings = timings if timings is not None else m.timings
    else:
        samples = markers_or_samples
    phases = [p if isinstance(p, DPhase) else DPhase(p.name, p.start, p.end) for p in
              (phases or [])]
    if samples is not None and len(samples) and "slab_bytes" not in samples and {
            "slab_active", "slab_objsize"} <= set(samples.columns):
        samples = samples.assign(slab_bytes=samples["slab_active"] * samples["slab_objsize"])
    out = {"phases": {}, "samples": 0 if samples is None else int(len(samples))}
    for p in phases:
        name = p.name
        i = 2
        while name in out["phases"]:          # a phase run twice: keep both
            name, i = f"{p.name}#{i}", i + 1
        out["phases"][name] = phase_summary(samples, p, events)
    if samples is not None and len(samples) and phases:
        whole = DPhase("overall", phases[0].start,
                       phases[-1].end if phases[-1].end is not None else None)
        out["overall"] = phase_summary(samples, whole, events)
    lk = lookup_summary(timings)
    execs = m.execs if isinstance(markers_or_samples, DcacheMarkers) else []
    for e in execs:
        t = lk.setdefault(str(e.get("target")), {})
        t.setdefault("exec", {})[str(e.get("loop"))] = {
            k: e.get(k) for k in ("n", "runs", "failed", "wall_s", "user_s", "sys_s")}
    for t in lk.values():
        x = t.get("exec", {})
        before = (x.get("before") or {}).get("sys_s")
        # The thread's figure: system time of the same loop after the misses over before.
        t["exec_sys_slowdown"] = _ratio((x.get("after") or {}).get("sys_s"), before)
        t["control_exec_sys_slowdown"] = _ratio((x.get("dropped") or {}).get("sys_s"), before)
        t["exec_wall_slowdown"] = _ratio((x.get("after") or {}).get("wall_s"),
                                         (x.get("before") or {}).get("wall_s"))
    if lk:
        out["lookup"] = lk
    return _jsonable(out)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return _num(x) if not isinstance(x, (str, bool)) else x


# ------------------------------------------------------------------------------ plot
def plot(ax, samples, phases=None, columns=("nr_dentry", "nr_negative"), t0=None,
         label=None, shade=True):
    """Draw columns (nr_dentry and nr_negative) of the samples over time on ax, in seconds
    since t0 (default: the first sample), with the phases shaded and named. Returns ax."""
    if isinstance(samples, DcacheMarkers):
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
        ax.plot(x, y, styles.get(col, "-"), drawstyle="steps-post",
                label=f"{label} {col}" if label else col)
    if shade and phases:
        top = ax.get_ylim()[1]
        for i, p in enumerate(phases):
            end = p.end if p.end is not None else int(samples["ts"].iloc[-1])
            a, b = (p.start - t0) / NS, (end - t0) / NS
            ax.axvspan(a, b, color=f"C{i % 10}", alpha=0.08)
            ax.text(a, top, p.name, rotation=90, va="top", ha="left", fontsize="x-small")
    ax.set_xlabel("seconds")
    ax.set_ylabel("dentries")
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    # Outside the axes, on the right: the phase names run along the top inside.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return ax


def _plot_figures(ax, runs):
    """The figure each reproducer is about, one series per run (kernel): readdirplus, the
    client dentries a listing leaves against N; memcg, the list_lru bytes of each cell."""
    name = runs[0].get("name")
    if name == "dcache-readdirplus":
        for r in runs:
            ns = sorted(int(x) for x in str(r["sizes"]).split(","))
            ax.plot(ns, [r["figures"].get(f"n{n}_client_dentries") for n in ns], "o-",
                    label=r.get("kernel"))
        top = max(int(x) for r in runs for x in str(r["sizes"]).split(","))
        ax.plot([0, top], [0, top], ":", color="grey", label="one per name")
        ax.set_xlabel("names in the directory (N)")
        ax.set_ylabel("client dentries after ls -f")
        ax.set_title("dentries a listing adds on the client")
    elif len({c["memcg"]["mounts"] for c in runs[0]["phases"].values() if "memcg" in c}) > 2:
        _plot_memcg_grid(ax, runs)
        return
    else:
        cells = [c for c in runs[0].get("phase_order", []) if "memcg" in runs[0]["phases"].get(
            c, {})]
        width = 0.8 / len(runs)
        for i, r in enumerate(runs):
            for j, step in enumerate(("setup", "touch")):
                ys = [r["phases"].get(c, {}).get("memcg", {}).get(f"lru_bytes_{step}") or 0
                      for c in cells]
                xs = [k + i * width for k in range(len(cells))]
                ax.bar(xs, ys, width * 0.9, bottom=None if step == "setup" else [
                    r["phases"].get(c, {}).get("memcg", {}).get("lru_bytes_setup") or 0
                    for c in cells], color=f"C{i}", alpha=1.0 if step == "setup" else 0.45,
                    label=f"{r.get('kernel')} {'mount+mkdir' if step == 'setup' else 'lookups'}")
        ax.set_xticks([k + width * (len(runs) - 1) / 2 for k in range(len(cells))], cells)
        ax.set_xlabel("cell: K superblocks x M memory cgroups")
        ax.set_ylabel("list_lru bytes allocated")
        ax.set_title("list_lru memory per cell")
    ax.legend(loc="upper left", fontsize="small")


def _plot_memcg_grid(ax, runs):
    """A grid of cells: list_lru bytes of the mounts and lookups against K, one line per M
    (colour) and kernel (marker), measured (solid) and the model fitted to them (dotted)."""
    markers = "os^v"
    for i, r in enumerate(runs):
        cells = [v["memcg"] for v in r["phases"].values() if "memcg" in v]
        for j, m in enumerate(sorted({c["memcgs"] for c in cells})):
            row = sorted((c for c in cells if c["memcgs"] == m), key=lambda c: c["mounts"])
            ks = [c["mounts"] for c in row]
            ys = [(c.get("lru_bytes_mount") or 0) + (c.get("lru_bytes_touch") or 0) for c in row]
            ax.plot(ks, ys, markers[i % 4] + "-", color=f"C{j}",
                    label=f"{r.get('kernel')} M={m}")
            if all("model_bytes" in c for c in row):       # the fit (a grid of cells)
                ax.plot(ks, [c["model_bytes"] for c in row], ":", color=f"C{j}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("K superblocks (NFS mounts)")
    ax.set_ylabel("list_lru bytes: mounts + lookups")
    ax.set_title("list_lru memory per cell (dotted: the model fitted to each kernel)")
    ax.legend(loc="upper left", fontsize="x-small", ncol=2)


def plot_runs(directories, output):
    """One panel per results directory (e.g. the same reproducer on two kernels): dentries
    and negative dentries over time; for readdirplus and memcg runs of one reproducer, a
    first panel with their figures side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [_load(d) for d in directories]
    summary = (len({r.get("name") for r in runs}) == 1 and
               runs[0].get("name") in ("dcache-readdirplus", "dcache-memcg"))
    n = len(directories) + summary
    fig, axes = plt.subplots(n, 1, figsize=(10, 3.6 * n), squeeze=False)
    if summary:
        _plot_figures(axes[0, 0], runs)
    for ax, d in zip(axes[int(summary):, 0], directories):
        m, _ = read_trace(_trace_of(d))
        plot(ax, m.samples, m.phases)
        ax.set_title(f"{m.run.get('reproducer', '?')} on {m.run.get('kernel', '?')}")
    fig.tight_layout()
    from .plot import save
    save(fig, output)
    plt.close(fig)
    return output


# ------------------------------------------------------------------------------ compare
def _load(x):
    if isinstance(x, dict):
        return x
    path = os.path.join(x, "results.json") if os.path.isdir(x) else x
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return build_results(x)


def compare(a, b):
    """Rows {"figure", A-label, B-label, "B/A"} of the "figures" of two dcache runs (results
    dicts, results.json files or results directories), e.g. one reproducer on 5.10 and 6.1."""
    ra, rb = _load(a), _load(b)
    la, lb = str(ra.get("kernel", "A")), str(rb.get("kernel", "B"))
    if la == lb:
        la, lb = f"A {la}", f"B {lb}"
    fa, fb = ra.get("figures", {}), rb.get("figures", {})
    rows = []
    for k in list(fa) + [k for k in fb if k not in fa]:
        va, vb = fa.get(k), fb.get(k)
        num = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (va, vb))
        rows.append({"figure": k, la: va, lb: vb,
                     "B/A": round(vb / va, 3) if num and va else None})
    rows.append({"figure": "verdict", la: ra.get("verdict"), lb: rb.get("verdict"),
                 "B/A": None})
    return rows


def compare_table(a, b):
    """compare() as a DataFrame indexed by figure."""
    return pd.DataFrame(compare(a, b)).set_index("figure")


# ------------------------------------------------------------------------------ results
def _facts(directory):
    path = os.path.join(directory, "facts")
    try:
        facts = read_facts(path)
    except OSError as e:
        raise DcacheError(f"{path}: {e.strerror or e}") from None
    # Numbers become numbers; comma-separated values (run.sizes, PHASE.TARGET.ns) stay text.
    return {g: {k: (v if "," in v else _value(v)) for k, v in kv.items()}
            for g, kv in facts.items()}


def _trace_of(directory):
    path = os.path.join(directory, TRACE_NAME)
    if os.path.exists(path):
        return path
    found = sorted(glob.glob(os.path.join(directory, "*.dat")))
    if not found:
        raise DcacheError(f"{directory}: no {TRACE_NAME} (the run did not get as far as "
                          "recording; see its log)")
    return found[0]


def build_results(directory):
    """results.json of a dcache-* results directory: run facts, per-phase facts and summary,
    the reproducer's figures, "verdict" ("PASS"/"FAIL") and "reasons"."""
    facts = _facts(directory)
    run = facts.pop("run", {})
    name = run.get("name")
    if name not in REPRODUCERS:
        raise DcacheError(f"{directory}: run.name is {name!r}, not one of {REPRODUCERS}")
    trace = _trace_of(directory)
    markers, events = read_trace(trace)
    s = summary(markers, events=events)
    res = {"analyzer": __version__, **run, "trace": os.path.basename(trace), "phases": {},
           "phase_order": list(s["phases"]), "samples": s["samples"]}
    for p, ps in s["phases"].items():
        res["phases"][p] = {**{k: v for k, v in facts.get(p.split("#")[0], {}).items()
                               if not (isinstance(v, str) and "," in v)}, **ps}
    if "overall" in s:
        res["overall"] = s["overall"]
    if "lookup" in s:
        res["lookup"] = s["lookup"]
    figures, reasons_fail, reasons_ok = JUDGES[name](res, facts, markers, events)
    res["figures"] = _jsonable(figures)
    res["verdict"], res["reasons"] = verdict.from_reasons(reasons_fail, reasons_ok)
    return _jsonable(res)


def _delta(res, phase, key):
    return res["phases"].get(phase, {}).get("delta", {}).get(key)


def _ev(res, phase, key):
    return res["phases"].get(phase, {}).get("events", {}).get(key, 0)


def _judge_negative(res, facts, markers, events):
    f, fail, ok = {}, [], []
    for ph, count_key in (("nfs-misses", "nfs_misses"), ("local-misses", "local_misses")):
        tag = ph.split("-")[0]
        n = res.get(count_key) or 0
        dn = _delta(res, ph, "nr_negative")
        f[f"{tag}_misses"] = n
        f[f"{tag}_negative_added"] = dn
        f[f"{tag}_negative_per_miss"] = _ratio(dn, n)
        f[f"{tag}_dentry_bytes_added"] = _delta(res, ph, "slab_bytes")
        f[f"{tag}_misses_per_s"] = _ratio(n, res["phases"].get(ph, {}).get("seconds"), 1)
    f["nfs_lookups_traced"] = _ev(res, "nfs-misses", "nfs_lookup_exit")
    after = res["phases"].get("local-misses", {}).get("after", {})
    f["nr_negative_after_misses"] = after.get("nr_negative")
    f["nr_dentry_after_misses"] = after.get("nr_dentry")
    f["nr_negative_after_drop"] = res["phases"].get("dropped", {}).get("after", {}).get(
        "nr_negative")
    for target, t in res.get("lookup", {}).items():
        for loop in ("before", "after", "dropped"):
            f[f"{target}_{loop}_median_ns"] = t["loops"].get(loop, {}).get("median_ns")
        for k in ("slowdown", "walk_slowdown", "ref_slowdown", "control_slowdown",
                  "control_walk_slowdown"):
            f[f"{target}_{k}"] = t.get(k)
        if t.get("exec"):
            for loop in ("before", "after", "dropped"):
                e = t["exec"].get(loop) or {}
                f[f"{target}_exec_{loop}_sys_us"] = (round(e["sys_s"] * 1e6 / e["runs"])
                                                      if e.get("runs") else None)
            for k in ("exec_sys_slowdown", "control_exec_sys_slowdown", "exec_wall_slowdown"):
                f[f"{target}_{k}"] = t.get(k)
    limit = float(res.get("max_slowdown", 1.5))
    for target, t in res.get("lookup", {}).items():
        w, raw, ctl = t.get("walk_slowdown"), t.get("slowdown"), t.get("control_walk_slowdown")
        if w is None:
            fail.append(f"{target}: no lookup timing before and after the misses")
        elif w > limit and (ctl is None or ctl <= limit):
            # Slower with the negative dentries, not once drop_caches has freed them.
            fail.append(f"{target} path walk {w}x slower after the misses (> {limit}x; stat "
                        f"medians {raw}x; {ctl}x after drop_caches)")
        else:
            why = (f"; but also {ctl}x after drop_caches: the host, not the dcache"
                   if w > limit else "")
            ok.append(f"{target} path walk {w}x after the misses (<= {limit}x; stat medians "
                      f"{raw}x, after drop_caches {ctl}x{why})")
    if not res.get("lookup"):
        fail.append("no lookup timings in the trace")
    max_neg = int(res.get("max_negative") or 0)
    left = sum(x or 0 for x in (f["nfs_negative_added"], f["local_negative_added"]))
    f["negative_added"] = left
    if max_neg and left > max_neg:
        fail.append(f"the misses left {left} negative dentries (> {max_neg})")
    return f, fail, ok


def _judge_unlink_storm(res, facts, markers, events):
    f, fail, ok = {}, [], []
    files = int(res.get("files") or 0)
    f["files"] = files
    f["workers"] = res.get("workers")
    storm = res["phases"].get("storm", {})
    f["storm_seconds"] = storm.get("seconds")
    f["unlinks_per_s"] = _ratio(files, storm.get("seconds"), 1)
    f["storm_dentry_delta"] = _delta(res, "storm", "nr_dentry")
    f["storm_negative_delta"] = _delta(res, "storm", "nr_negative")
    f["storm_negative_per_s"] = storm.get("rate_per_s", {}).get("nr_negative")
    f["storm_peak_dentry"] = storm.get("peak", {}).get("nr_dentry")
    f["storm_negative_per_file"] = _ratio(f["storm_negative_delta"], files)
    # The rate over time: negative dentries per second in the storm's first and last
    # quarters (a steady state has the two alike; a slowing one does not).
    for q, name in ((0, "first"), (3, "last")):
        f[f"storm_negative_per_s_{name}_quarter"] = _quarter_rate(markers, "storm", q)
    f["nfs_unlinks_traced"] = _ev(res, "storm", "nfs_unlink_exit")
    f["nfs_lookups_traced"] = _ev(res, "storm", "nfs_lookup_exit")
    if "restat" in res["phases"]:
        f["restat_negative_delta"] = _delta(res, "restat", "nr_negative")
        f["restat_lookups_traced"] = _ev(res, "restat", "nfs_lookup_exit")
    # What the storm (and restat) left: from the sample before the storm to the end of
    # settle; then who held it: the client's share goes away with its unmount.
    first = storm.get("before", {})
    settle = res["phases"].get("settle", {}).get("after", {})
    left = (settle.get("nr_negative") - first.get("nr_negative")
            if settle.get("nr_negative") is not None and first.get("nr_negative") is not None
            else None)
    f["negative_left"] = left
    f["negative_left_per_file"] = _ratio(left, files)
    # Who held them: unmounting the client frees its own; what the restat lookups added
    # was the client's too, so the rest of the client's came from the unlinks.
    um = _delta(res, "umount", "nr_negative")
    client = -um if um is not None else None
    f["client_negative"] = client
    restat = f.get("restat_negative_delta") or 0
    f["client_negative_from_unlink"] = max(client - restat, 0) if client is not None else None
    f["server_negative"] = left - client if left is not None and client is not None else None
    f["drop_negative_delta"] = _delta(res, "drop", "nr_negative")
    share = float(res.get("max_negative_share", 0.5))
    mine = f["client_negative_from_unlink"]
    where = ("on the NFS client" if res.get("via", "nfs") == "nfs"
             else f"on the local {res.get('fs')}")
    if mine is None:
        fail.append("no samples around the storm, settle and unmount phases")
    elif mine > share * files:
        fail.append(f"the unlinks left {mine} negative dentries {where} for {files} "
                    f"removed files (> {share} per file; {left} left in all, server side "
                    f"{f['server_negative']})")
    else:
        ok.append(f"the unlinks left {mine} negative dentries {where} for {files} "
                  f"removed files (<= {share} per file; {left} left in all, server side "
                  f"{f['server_negative']}, re-lookups {restat})")
    removed = facts.get("storm", {}).get("removed")
    if removed is not None and removed != files:
        fail.append(f"only {removed} of {files} files were removed")
    return f, fail, ok


def _quarter_rate(markers, phase, q):
    """nr_negative per second over quarter q (0-3) of a phase, from the samples nearest its
    edges; None without two distinct samples in it."""
    p = next((x for x in markers.phases if x.name == phase and x.end is not None), None)
    s = markers.samples
    if p is None or not len(s) or "nr_negative" not in s:
        return None
    span = p.end - p.start
    a, b = _row_after(s, p.start + span * q // 4), _row_before(s, p.start + span * (q + 1) // 4)
    dt = (b["ts"] - a["ts"]) / NS
    if dt <= 0:
        return None
    return round((b["nr_negative"] - a["nr_negative"]) / dt, 1)


def _judge_readdirplus(res, facts, markers, events):
    """Figures per N; the verdict on the largest N only: small directories are primed on
    every kernel (5.10 primes the names of the first READDIR reply, about 1,000)."""
    f, fail, ok = {}, [], []
    limit = float(res.get("max_per_name", 0.25))
    sizes = [int(x) for x in str(res.get("sizes", "")).replace(",", " ").split()]
    if not sizes:
        sizes = sorted(int(p.split("-")[1]) for p in res["phases"] if p.startswith("list-"))
    # What an unmount changes without a listing (running umount after drop_caches brings
    # back dentries of its own files): the baseline of the client's dentries freed.
    base = _delta(res, "umount-control", "nr_dentry") or 0
    f["umount_control_dentries"] = base
    for n in sizes:
        lp = res["phases"].get(f"list-{n}", {})
        added = _delta(res, f"list-{n}", "nr_dentry")
        freed = _delta(res, f"umount-{n}", "nr_dentry")
        client = base - freed if freed is not None else None
        f[f"n{n}_entries"] = lp.get("entries")
        f[f"n{n}_dentries_added"] = added
        f[f"n{n}_client_dentries"] = client
        f[f"n{n}_server_dentries"] = (added - client if added is not None and client is not None
                                      else None)
        f[f"n{n}_client_per_name"] = _ratio(client, n)
        f[f"n{n}_primed_traced"] = _ev(res, f"list-{n}", "nfs_readdir_lookup")
        f[f"n{n}_readdir_rpcs"] = _ev(res, f"list-{n}", "rpc_request:READDIR")
        f[f"n{n}_readdirplus_rpcs"] = _ev(res, f"list-{n}", "rpc_request:READDIRPLUS")
        f[f"n{n}_seconds"] = lp.get("seconds")
        if lp.get("entries") is not None and lp["entries"] != n:
            fail.append(f"N={n}: the listing returned {lp['entries']} names")
    if not sizes:
        return f, ["no listing in the trace"], ok
    n = max(sizes)
    per, client = f.get(f"n{n}_client_per_name"), f.get(f"n{n}_client_dentries")
    f["largest_n"] = n
    f["largest_client_per_name"] = per
    if f"list-{n}" not in res["phases"] or f"umount-{n}" not in res["phases"]:
        fail.append(f"N={n}: the listing or its unmount is missing from the trace")
    elif per is None:
        fail.append(f"N={n}: no dcache samples around the listing and the unmount")
    elif per > limit:
        fail.append(f"listing {n} names left {client} client dentries, {per} per name "
                    f"(> {limit}; {f[f'n{n}_primed_traced']} primed names traced)")
    else:
        ok.append(f"listing {n} names left {client} client dentries, {per} per name "
                  f"(<= {limit})")
    return f, fail, ok


def _memcg_cells(res, markers):
    """Per cell (phase kK-mM): the explicit labelled samples and their differences."""
    s = markers.samples
    cells = {}
    for p in markers.phases:
        if not p.name.startswith("k") or "-m" not in p.name:
            continue
        end = p.end if p.end is not None else int(s["ts"].iloc[-1])
        inside = s[(s["ts"] >= p.start) & (s["ts"] <= end) & s["label"].notna()]
        by = {lab: row for lab, row in zip(inside["label"], inside.to_dict("records"))}
        k, m = _num(p.attrs.get("mounts")), _num(p.attrs.get("memcgs"))
        # Used (superblock, memcg) pairs: every pair unless the run said fewer.
        pairs = _num(p.attrs.get("pairs")) or (k * m if k is not None and m is not None else None)
        cells[p.name] = {"mounts": k, "memcgs": m, "pairs": pairs, "samples": by}
    return cells


MEMCG_KEYS = ["lru_allocs", "lru_bytes", "kmalloc_bytes", "kmalloc32_active", "kmalloc64_active", "kmalloc_cg32_active",
              "kmalloc_cg64_active", "radix_tree_node_active", "slab_active", "nfs_inode_active",
              "slab_kb", "sunreclaim_kb", "percpu_kb"]
# label pairs: (figure suffix, later sample, earlier sample); mount and mkdir split setup
# (runs before the `mounted` sample have only setup).
MEMCG_STEPS = [("setup", "setup", "base"), ("mount", "mounted", "base"),
               ("mkdir", "setup", "mounted"), ("touch", "touched", "setup"),
               ("total", "touched", "base"), ("left", "dropped", "base")]


def _judge_memcg(res, facts, markers, events):
    f, fail, ok = {}, [], []
    cells = _memcg_cells(res, markers)
    grid = {}
    for name, c in cells.items():
        smp = c["samples"]
        out = {"mounts": c["mounts"], "memcgs": c["memcgs"], "pairs": c["pairs"]}
        for suffix, later, earlier in MEMCG_STEPS:
            if later not in smp or earlier not in smp:
                continue
            for k in MEMCG_KEYS:
                a, b = smp[earlier].get(k), smp[later].get(k)
                if a is None or b is None or pd.isna(a) or pd.isna(b):
                    continue
                out[f"{k}_{suffix}"] = _num(b - a)
        # Slab memory the cell's touching added, in bytes: Slab (meminfo) for the whole
        # allocation, kmalloc_bytes for the kmalloc-* part that holds the list_lru arrays.
        out["slab_bytes_total"] = (out["slab_kb_total"] * 1024 if "slab_kb_total" in out
                                   else None)
        # The list_lru allocations of each step, exactly: kmalloc events from list_lru code,
        # counted in the kernel (the samples' lru_allocs/lru_bytes, taken above) or recorded.
        lru = events[events["event"].str.startswith("kmem:kmalloc")] if len(events) else events
        for suffix, later, earlier in MEMCG_STEPS:
            if (later not in smp or earlier not in smp or not len(lru)
                    or f"lru_bytes_{suffix}" in out):
                continue
            win = lru[(lru["ts"] >= smp[earlier]["ts"]) & (lru["ts"] <= smp[later]["ts"])]
            out[f"lru_allocs_{suffix}"] = int(len(win))
            out[f"lru_bytes_{suffix}"] = int(win["bytes"].fillna(0).sum())
        # memory.stat "slab" summed over the cell's memcgs; 5.10 batches memcg statistics per
        # CPU, so small charges read as 0 there.
        out["charged_slab_bytes"] = facts.get(name, {}).get("charged_slab_bytes")
        grid[name] = out
        res["phases"].setdefault(name, {})["memcg"] = _jsonable(out)
        for k in ("lru_allocs_setup", "lru_bytes_setup", "lru_allocs_touch", "lru_bytes_touch",
                  "lru_bytes_total", "kmalloc_bytes_total", "kmalloc32_active_total",
                  "slab_kb_total", "slab_kb_left", "percpu_kb_total"):
            f[f"{name}_{k}"] = out.get(k)
    # The superblock x memcg interaction of a 2x2 grid: what a (superblock, memcg) pair
    # costs beyond what superblocks and memcgs cost on their own.
    ks = sorted({c["mounts"] for c in grid.values() if c["mounts"] is not None})
    ms = sorted({c["memcgs"] for c in grid.values() if c["memcgs"] is not None})
    if len(ks) >= 2 and len(ms) >= 2:
        k1, k2, m1, m2 = ks[0], ks[-1], ms[0], ms[-1]
        cell = {(c["mounts"], c["memcgs"]): c for c in grid.values()}
        pairs = (k2 - k1) * (m2 - m1)
        for key in ("lru_bytes_total", "kmalloc_bytes_total", "slab_bytes_total"):
            v = [cell.get(x, {}).get(key) for x in ((k2, m2), (k2, m1), (k1, m2), (k1, m1))]
            if None in v:
                continue
            f[f"pair_{key.removesuffix('_total')}"] = round((v[0] - v[1] - v[2] + v[3]) / pairs)
        big = cell.get((k2, m2), {})
        f["largest_cell"] = f"k{k2}-m{m2}"
        f["largest_kmalloc_bytes_total"] = big.get("kmalloc_bytes_total")
        f["largest_slab_bytes_total"] = big.get("slab_bytes_total")
        f["largest_lru_bytes_total"] = big.get("lru_bytes_total")
        f["largest_lru_bytes_per_pair"] = _ratio(big.get("lru_bytes_total"),
                                                 big.get("pairs") or k2 * m2, 1)
    f.update(_memcg_model(res, grid))
    if not str(res.get("lru_filter") or "").strip():
        raise DcacheError("the run could not trace the list_lru allocations (no run.lru_filter)")
    limit = int(res.get("max_setup_bytes", 4096))
    if not grid:
        fail.append("no memcg cell in the trace")
    for name, c in sorted(grid.items()):
        setup = c.get("lru_bytes_setup")
        if setup is None:
            fail.append(f"{name}: no samples around its setup step")
        elif setup > limit:
            fail.append(f"{name}: making {c['mounts']} mounts and {c['memcgs']} memcgs allocated "
                        f"{setup} bytes in the list_lru code before any lookup "
                        f"({c.get('lru_allocs_setup')} allocations; > {limit})")
    if grid and not fail:
        ok.append(f"making the mounts and memcgs allocated at most "
                  f"{max(c.get('lru_bytes_setup') or 0 for c in grid.values())} list_lru bytes "
                  f"per cell (<= {limit}); the lookups {f.get('largest_lru_bytes_total')} in "
                  f"{f.get('largest_cell')}, {f.get('largest_lru_bytes_per_pair')} per "
                  "(superblock, memcg) pair")
    return f, fail, ok


def _memcg_model(res, grid):
    """Figures of the list_lru model (listlru.py): on an eager kernel (5.10) the code's law
    against every cell's mount step, with the capacity it implies against the one seen; on
    any kernel, with cells to spare over the fit's four coefficients, the fit and its error;
    and the prediction for the 2021 report's host. Only for runs that sample the mount step
    apart from the mkdir step."""
    from . import listlru
    order = [(n, c) for n, c in grid.items() if c.get("lru_bytes_mount") is not None]
    if not order:
        return {}
    before = int(res.get("memcgs_before") or 0)
    caps = listlru.cell_capacities(order, before)
    f = {}
    # Growth of the id space: what making memcgs cost (5.10 only), and the cells where it
    # happened.
    grew = {n: c.get("lru_bytes_mkdir") for n, c in order if c.get("lru_bytes_mkdir")}
    f["growth_cells"] = ",".join(grew) or None
    f["growth_bytes"] = sum(grew.values()) if grew else 0
    # Eager (5.10): nothing at the lookups; each list_lru made at a mount allocates C lists
    # and two heads, C set by the most memcgs alive before.
    eager = all(not c.get("lru_allocs_touch") for _, c in order)
    f["eager"] = eager
    if eager:
        errors = []
        for n, c in order:
            law = 2 * c["mounts"] * listlru.lru_bytes_510(caps[n])
            seen = round(c["lru_allocs_mount"] / (2 * c["mounts"])) - 2
            res["phases"][n]["memcg"].update(capacity=caps[n], capacity_seen=seen,
                                             law_bytes_mount=law)
            errors.append(abs(c["lru_bytes_mount"] / law - 1))
        f["law_cells"] = len(order)
        f["law_max_rel_error"] = round(max(errors), 4)
        f["capacity_cells_matching_code"] = sum(
            res["phases"][n]["memcg"]["capacity_seen"] == caps[n] for n, _ in order)
        f["capacity_largest"] = max(caps.values())
    rows = [{"cell": n, "K": c["mounts"], "M": c["memcgs"], "P": c["pairs"], "C": caps[n],
             "bytes": (c.get("lru_bytes_mount") or 0) + (c.get("lru_bytes_touch") or 0)}
            for n, c in order]
    fit = listlru.fit(rows) if len(rows) >= len(listlru.FEATURES) + 2 else None
    if fit is not None:
        f.update({"model_cells": len(fit["cells"]),
                  **{f"model_bytes_per_{k}": v for k, v in fit["coef"].items()},
                  "model_max_rel_error": fit["max_rel_error"],
                  "model_rms_rel_error": fit["rms_rel_error"]})
        for row in fit["cells"]:
            res["phases"][row["cell"]]["memcg"].update(
                capacity=row["C"], model_bytes=row["predicted"], model_rel_error=row["rel_error"])
    # The report's host: 10,000 superblocks x 10,000 memcgs on 2 nodes.
    rep, mib = listlru.REPORT, 1 << 20
    k, m, nodes = rep["superblocks"], rep["memcgs"], rep["nodes"]
    f["report_mb"] = rep["mb_before"]
    f["report_mb_after"] = ",".join(str(x) for x in rep["mb_after"])
    if eager:
        f["report_capacity"] = listlru.capacity(m)
        f["report_law_mb"] = round(listlru.code_bytes_510(k, m, nodes) / mib)
        f["report_law_ratio"] = _ratio(f["report_law_mb"], rep["mb_before"])
    if fit is not None and eager:
        f["report_model_mb"] = round(listlru.predict(fit["coef"], k, m, 0, nodes) / mib)
        f["report_model_ratio"] = _ratio(f["report_model_mb"], rep["mb_before"])
    elif fit is not None:
        # Lazy: the report does not say how many pairs its host used: every pair, one
        # superblock per memcg, and the pairs its figure after the patches implies.
        f["report_model_mb_all_pairs"] = round(
            listlru.predict(fit["coef"], k, m, k * m, nodes) / mib)
        f["report_model_mb_one_pair_per_memcg"] = round(
            listlru.predict(fit["coef"], k, m, m, nodes) / mib)
        base = listlru.predict(fit["coef"], k, m, 0, nodes)
        if fit["coef"]["P"] > 0:
            f["report_pairs_implied"] = round((rep["mb_after"][0] * mib - base)
                                              / fit["coef"]["P"])
    return f


JUDGES = {"dcache-negative": _judge_negative, "dcache-unlink-storm": _judge_unlink_storm,
          "dcache-readdirplus": _judge_readdirplus, "dcache-memcg": _judge_memcg}


# ------------------------------------------------------------------------------ for the CLI
def is_dcache_run(path):
    """True for a results directory of a dcache-* reproducer (its facts say so), or for a
    trace file in one."""
    d = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        with open(os.path.join(d, "facts")) as f:
            return any(line.startswith("run.name=dcache-") for line in f)
    except OSError:
        return False


def report(x):
    """A results directory (or its results dict) as text: the verdict, the figures, and the
    per-phase changes of the dcache."""
    if isinstance(x, str) and os.path.isfile(x) and x.endswith(".dat"):
        x = os.path.dirname(os.path.abspath(x))
    r = _load(x)
    lines = [f"{r.get('name')} on {r.get('kernel')}: {r.get('verdict')}: "
             + "; ".join(r.get("reasons", []))]
    rows = []
    phases = r.get("phases", {})
    for name in r.get("phase_order") or list(phases):
        p = phases[name]
        d, rate = p.get("delta", {}), p.get("rate_per_s", {})
        rows.append({"phase": name, "seconds": p.get("seconds"),
                     "nr_dentry": d.get("nr_dentry"), "nr_negative": d.get("nr_negative"),
                     "dentry slab bytes": d.get("slab_bytes"),
                     "negative/s": rate.get("nr_negative"),
                     "negative share": p.get("negative_share"),
                     "events": ", ".join(f"{k} {v}" for k, v in p.get("events", {}).items())})
    if rows:
        lines += ["", "change over each phase:",
                  pd.DataFrame(rows).to_string(index=False, na_rep="-")]
    lk = r.get("lookup", {})
    if lk:
        rows = []
        for target, t in lk.items():
            loops = t.get("loops", {})
            rows.append({"target": target, **{
                f"{loop} median ns": (loops.get(loop) or {}).get("median_ns")
                for loop in ("before", "after", "dropped")},
                "slowdown": t.get("slowdown"), "walk slowdown": t.get("walk_slowdown")})
        lines += ["", "lookup loops (walk slowdown: against an fstat of the same file timed "
                  "alongside):", pd.DataFrame(rows).to_string(index=False, na_rep="-")]
    fig = r.get("figures", {})
    if fig:
        width = max(len(k) for k in fig)
        lines += ["", "figures:"] + [f"  {k:<{width}}  {v}" for k, v in fig.items()]
    return "\n".join(lines) + "\n"


def table(dirs):
    """The figures of several dcache runs side by side (e.g. one reproducer on each kernel)."""
    runs = [_load(d) for d in dirs]
    cols = {}
    for d, r in zip(dirs, runs):
        label = str(r.get("kernel", d))
        while label in cols:
            label += "'"
        cols[label] = {**r.get("figures", {}), "verdict": r.get("verdict")}
    return pd.DataFrame(cols).to_string(na_rep="-")
