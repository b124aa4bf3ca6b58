"""The dcache growth reproducers: what their traces say, phase by phase.

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

    read_trace(path)          the markers and the counted events of a run's trace
    summary(markers, ...)     per-phase deltas, growth rates, negative share, lookup slowdown,
                              the paired cycles of exec timings (paired_summary)

Markers are parsed in markers.py, verdicts given in dcache_judge.py, plots drawn in plot.py,
text written in render.py, runs compared in compare.py.
"""

from __future__ import annotations

import glob
import math
import os
import statistics
from typing import Any

import pandas as pd

from ..events import MARKER_SOURCE, REQUEST_SOURCE
from ..facts import read_facts
from ..units import NS
from .markers import Markers, Phase, value
from .markers import parse as parse_markers

TRACE_NAME = "dcache.dat"
# Counters whose per-phase change the summary always reports (when sampled).
DELTA_KEYS = [
    "nr_dentry",
    "nr_unused",
    "nr_negative",
    "slab_active",
    "slab_bytes",
    "kmalloc32_active",
    "kmalloc64_active",
    "kmalloc_cg32_active",
    "kmalloc_cg64_active",
    "radix_tree_node_active",
    "nfs_inode_active",
    "kmalloc_bytes",
    "slab_kb",
    "sunreclaim_kb",
    "percpu_kb",
]
RATE_KEYS = ["nr_dentry", "nr_negative", "slab_bytes"]
REPRODUCERS = ("dcache-negative", "dcache-unlink-storm", "dcache-readdirplus", "dcache-memcg")


class DcacheError(Exception):
    """A results directory that cannot be analysed (no facts, no readable trace)."""


def read_trace(path):
    """(Markers, events) of one trace: events is a DataFrame ts/event/key/bytes of the
    non-marker events (key: "rpc_request:PROC" for sunrpc:rpc_request, else the event name;
    bytes: bytes_alloc of kmem events)."""
    from ..trace import TraceError, open_trace

    try:
        t = open_trace(path)
        names = sorted(t.event_names())
        wanted = {MARKER_SOURCE.event: ["buf"]}
        for ev in names:
            if ev.startswith("ftrace:") or ev.startswith("header_page"):
                continue
            fmt = t.event_format(ev)
            if fmt is None:
                continue
            fields = fmt.user_fields()
            wanted[ev] = [
                f
                for f in ("procname", "bytes_alloc")
                if f in fields and (ev == REQUEST_SOURCE.event or ev.startswith("kmem:"))
            ]
        try:
            frames = t.read(wanted)
        except TraceError as e:
            if e.partial is None:
                raise
            frames = e.partial  # an interrupted run: use what was recorded
    except TraceError as e:
        raise DcacheError(f"{path}: {e}") from None
    markers = parse_markers(frames.get(MARKER_SOURCE.event))
    parts = []
    for ev, df in frames.items():
        if ev == MARKER_SOURCE.event or not len(df):
            continue
        key = (
            ev.split(":", 1)[1] + ":" + df["procname"].astype(str)
            if "procname" in df
            else ev.split(":", 1)[1]
        )
        part = pd.DataFrame({"ts": df["ts"].to_numpy(), "event": ev, "key": key})
        if "bytes_alloc" in df:
            part["bytes"] = df["bytes_alloc"].to_numpy()
        parts.append(part)
    events = (
        pd.concat(parts, ignore_index=True).sort_values("ts", kind="stable")
        if parts
        else pd.DataFrame(columns=["ts", "event", "key"])
    )
    if "bytes" not in events:
        events["bytes"] = pd.Series(dtype="float64")
    return markers, events


# ------------------------------------------------------------------------------ summary
def number(v):
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


def row_before(samples, ts):
    """The last sample at or before ts (the first one when none is)."""
    s = samples[samples["ts"] <= ts]
    return (s.iloc[-1] if len(s) else samples.iloc[0]) if len(samples) else None


def row_after(samples, ts):
    """The first sample at or after ts (the last one when none is)."""
    s = samples[samples["ts"] >= ts]
    return (s.iloc[0] if len(s) else samples.iloc[-1]) if len(samples) else None


def ratio(a, b, digits=3):
    if a is None or b is None or not b:
        return None
    return round(a / b, digits)


def _median(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else None


def phase_summary(samples, phase, events=None):
    """Deltas of the sampled counters across one phase, rates per second, negative share."""
    out = {
        "phase": phase.name,
        "seconds": phase.seconds,
        **{k: number(v) for k, v in phase.attrs.items() if not isinstance(v, list)},
    }
    if samples is None or not len(samples):
        return out
    end = phase.end if phase.end is not None else int(samples["ts"].iloc[-1])
    first, last = row_before(samples, phase.start), row_after(samples, end)
    inside = samples[(samples["ts"] >= phase.start) & (samples["ts"] <= end)]
    keys = [k for k in DELTA_KEYS if k in samples.columns]
    out["before"] = {k: number(first[k]) for k in keys}
    out["after"] = {k: number(last[k]) for k in keys}
    delta = {}
    for k in keys:
        a, b = number(first[k]), number(last[k])
        delta[k] = None if a is None or b is None else b - a
    out["delta"] = delta
    secs = phase.seconds or (end - phase.start) / NS
    out["rate_per_s"] = {
        k: (round(delta[k] / secs, 1) if secs and delta.get(k) is not None else None)
        for k in RATE_KEYS
        if k in delta
    }
    peak = pd.concat([first.to_frame().T, inside, last.to_frame().T])
    out["peak"] = {
        k: number(pd.to_numeric(peak[k], errors="coerce").max())
        for k in ("nr_dentry", "nr_negative")
        if k in peak
    }
    dd, dn = delta.get("nr_dentry"), delta.get("nr_negative")
    # Of the dentries the phase added, the share that is negative; and of all dentries at
    # its end, the negative fraction. A phase that turns dentries it did not add negative
    # (an unlink keeps the removed name's dentry as a negative one) adds more negative
    # dentries than dentries: no share of what it added describes that, so there is none.
    out["negative_share"] = (
        ratio(dn, dd) if dd and dd > 0 and dn is not None and 0 <= dn <= dd else None
    )
    out["negative_fraction_after"] = ratio(
        out["after"].get("nr_negative"), out["after"].get("nr_dentry")
    )
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
            loops[row["loop"]] = {
                "n": number(row.get("n")),
                "reps": len(ns),
                "median_ns": _median(ns),
                "ref_median_ns": _median(ref),
                "median_walk": _median(walk),
                "min_ns": min(ns) if ns else None,
            }
        t = {"loops": loops}
        before = loops.get("before", {})
        for loop, prefix in (("after", ""), ("dropped", "control_")):
            x = loops.get(loop)
            if not x or not before:
                continue
            t[prefix + "slowdown"] = ratio(x["median_ns"], before.get("median_ns"))
            t[prefix + "walk_slowdown"] = ratio(x["median_walk"], before.get("median_walk"))
            t[prefix + "ref_slowdown"] = ratio(x["ref_median_ns"], before.get("ref_median_ns"))
            t[prefix + "min_slowdown"] = ratio(x["min_ns"], before.get("min_ns"))
        out[str(target)] = t
    return out


# A cycle whose three blocks' fstat() references lie within this factor of each other ran on a
# steady host: under emulation on a loaded host the references of neighbouring blocks differ by
# up to 3x, on a quiet one by a few per cent.
STEADY_REF_SPREAD = 1.10


def _per_exec(key, *blocks):
    """The mean over blocks of block[key] per exec (None if any block lacks it)."""
    v = [b.get(key) / b["runs"] for b in blocks if b.get(key) is not None]
    return sum(v) / len(v) if len(v) == len(blocks) else None


def _against_neighbours(key, polluted, before, after):
    """polluted[key] against the mean of its clean neighbours' (None if any lacks it)."""
    v = [b.get(key) for b in (polluted, before, after)]
    return None if None in v else ratio(v[0], (v[1] + v[2]) / 2)


def paired_summary(paired):
    """Per target, the cycles of a --paired run: each polluted block of execs against the mean
    of its two clean neighbours (the block before its misses and the one after they were
    removed), so that a steady drift of the host's speed cancels.

    Per cycle: polluted_sys_us and clean_sys_us (system time per exec; clean: the mean of
    the neighbours), sys_ratio (their ratio, the thread's figure), ref_ratio (the same ratio
    of the fstat() reference timed inside the blocks: the host's drift the pairing did not
    cancel), sys_per_ref_ratio (sys_ratio / ref_ratio: the exec against the host's speed
    measured beside it), negative_removed (nr_negative at the polluted block minus at the
    next clean one), misses_per_s (the cycle's misses on the target), exec_med_ratio (the
    same comparison of each block's median wall time of one exec, exec_med_us: a burst of
    the host's load inside a block moves its sum of system time, not its median). Over the
    cycles: the median, quartiles, min and max of sys_ratio and exec_med_ratio, the median,
    min and max of ref_ratio and sys_per_ref_ratio, the medians of the per-exec times,
    negative_removed and misses_per_s. And over the steady cycles only (ref_spread, the
    largest of the three blocks' references over the smallest, <= STEADY_REF_SPREAD): their
    count and the medians of sys_ratio and exec_med_ratio.
    """
    blocks = [b for b in paired if b.get("step") == "block" and b.get("runs")]
    misses = {
        (str(b.get("target")), b.get("cycle")): b for b in paired if b.get("step") == "misses"
    }
    out = {}
    for target in dict.fromkeys(str(b.get("target")) for b in blocks):
        by = {(b.get("state"), b.get("cycle")): b for b in blocks if str(b.get("target")) == target}
        cycles = []
        for c in sorted(k for s, k in by if s == "polluted"):
            c0, c1 = by.get(("clean", c - 1)), by.get(("clean", c))
            if c0 is not None and c1 is not None:
                miss = misses.get((target, c), {})
                cycles.append(_paired_cycle(c, by[("polluted", c)], c0, c1, miss))
        if cycles:
            out[target] = _over_cycles(cycles, by)
    return out


def _paired_cycle(c, pol, c0, c1, miss):
    """Cycle c's figures: its polluted block against the clean ones before (c0) and after
    (c1) it, and its misses."""
    sys_p, sys_c = _per_exec("sys_s", pol), _per_exec("sys_s", c0, c1)
    sys_ratio = ratio(sys_p, sys_c)
    ref_ratio = _against_neighbours("ref_ns", pol, c0, c1)
    refs = [b.get("ref_ns") for b in (pol, c0, c1)]
    return {
        "cycle": c,
        "polluted_sys_us": _round_us(sys_p),
        "clean_sys_us": _round_us(sys_c),
        "sys_ratio": sys_ratio,
        "wall_ratio": ratio(_per_exec("wall_s", pol), _per_exec("wall_s", c0, c1)),
        "ref_ratio": ref_ratio,
        "sys_per_ref_ratio": ratio(sys_ratio, ref_ratio),
        "ref_spread": (ratio(max(refs), min(refs)) if None not in refs and min(refs) else None),
        "polluted_exec_med_us": pol.get("exec_med_us"),
        "exec_med_ratio": _against_neighbours("exec_med_us", pol, c0, c1),
        "negative_removed": (
            pol["nr_negative"] - c1["nr_negative"]
            if "nr_negative" in pol and "nr_negative" in c1
            else None
        ),
        "misses_per_s": ratio(miss.get("count"), miss.get("seconds"), 1),
    }


def _over_cycles(cycles, by):
    """A target's figures over its cycles (paired_summary says which); `by` holds its
    blocks, each with the run's n."""
    t = {"cycles": cycles, "n": number(by[next(iter(by))].get("n"))}
    for k in ("sys_ratio", "exec_med_ratio"):
        v = sorted(x[k] for x in cycles if x[k] is not None)
        if v:
            q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else v * 3
            t.update(
                {
                    f"{k}_median": round(statistics.median(v), 3),
                    f"{k}_q1": round(q[0], 3),
                    f"{k}_q3": round(q[2], 3),
                    f"{k}_min": v[0],
                    f"{k}_max": v[-1],
                }
            )
    for k in ("ref_ratio", "sys_per_ref_ratio"):
        v = [x[k] for x in cycles if x[k] is not None]
        if v:
            t.update(
                {
                    f"{k}_median": round(statistics.median(v), 3),
                    f"{k}_min": min(v),
                    f"{k}_max": max(v),
                }
            )
    for k in (
        "polluted_sys_us",
        "clean_sys_us",
        "polluted_exec_med_us",
        "negative_removed",
        "misses_per_s",
    ):
        v = _median([x[k] for x in cycles])
        t[k + "_median"] = round(v, 1) if isinstance(v, float) else v
    steady = [
        x for x in cycles if x["ref_spread"] is not None and x["ref_spread"] <= STEADY_REF_SPREAD
    ]
    t["steady_cycles"] = len(steady)
    for k in ("sys_ratio", "exec_med_ratio"):
        t[f"steady_{k}_median"] = _median([x[k] for x in steady])
    return t


def _round_us(seconds):
    return None if seconds is None else round(seconds * 1e6)


def summary(markers_or_samples, phases=None, timings=None, events=None):
    """Per-phase deltas of nr_dentry/nr_negative/slab (and the other sampled counters), growth
    rates per second, the negative share, and the lookup-loop slowdown when timed.

    markers_or_samples: Markers (phases and timings taken from it) or a samples DataFrame
    (then give phases, markers.Phase objects, and optionally the timings DataFrame). events:
    the per-event table of read_trace, counted per phase.
    Returns a JSON-able dict: {"phases": {name: {...}}, "overall": {...}, "lookup": {...}}.
    """
    if isinstance(markers_or_samples, Markers):
        m = markers_or_samples
        samples, phases = m.samples, phases if phases is not None else m.phases
        timings = timings if timings is not None else m.timings
    else:
        samples = markers_or_samples
    phases = list(phases or [])
    if (
        samples is not None
        and len(samples)
        and "slab_bytes" not in samples
        and {"slab_active", "slab_objsize"} <= set(samples.columns)
    ):
        samples = samples.assign(slab_bytes=samples["slab_active"] * samples["slab_objsize"])
    by_phase = {}
    for p in phases:
        name = p.name
        i = 2
        while name in by_phase:  # a phase run twice: keep both
            name, i = f"{p.name}#{i}", i + 1
        by_phase[name] = phase_summary(samples, p, events)
    out = {"phases": by_phase, "samples": 0 if samples is None else int(len(samples))}
    if samples is not None and len(samples) and phases:
        whole = Phase(
            "overall", phases[0].start, phases[-1].end if phases[-1].end is not None else None
        )
        out["overall"] = phase_summary(samples, whole, events)
    lk = lookup_summary(timings)
    execs = m.execs if isinstance(markers_or_samples, Markers) else []
    for e in execs:
        t = lk.setdefault(str(e.get("target")), {})
        t.setdefault("exec", {})[str(e.get("loop"))] = {
            k: e.get(k) for k in ("n", "runs", "failed", "wall_s", "user_s", "sys_s")
        }
    for t in lk.values():
        x = t.get("exec", {})
        before = (x.get("before") or {}).get("sys_s")
        # The thread's figure: system time of the same loop after the misses over before.
        t["exec_sys_slowdown"] = ratio((x.get("after") or {}).get("sys_s"), before)
        t["control_exec_sys_slowdown"] = ratio((x.get("dropped") or {}).get("sys_s"), before)
        t["exec_wall_slowdown"] = ratio(
            (x.get("after") or {}).get("wall_s"), (x.get("before") or {}).get("wall_s")
        )
    if lk:
        out["lookup"] = lk
    cycles = paired_summary(m.paired) if isinstance(markers_or_samples, Markers) else {}
    if cycles:
        out["paired"] = cycles
    return jsonable(out)


# A judge's figures by name: JSON values of every kind (int, float, str, bool, None) that the
# rules read back by name and compute with; mypy cannot tell which kind a name holds.
Figures = dict[str, Any]
# What a judge is given: the results.json being built and the run's facts by group (run_facts);
# and what it gives: its figures, the reasons it fails and those it passes.
Results = dict[str, Any]
Facts = dict[str, dict[str, Any]]
Judged = tuple[Figures, list[str], list[str]]


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return number(x) if not isinstance(x, (str, bool)) else x


# ------------------------------------------------------------------------------ the run's files
def run_facts(directory):
    path = os.path.join(directory, "facts")
    try:
        facts = read_facts(path)
    except OSError as e:
        raise DcacheError(f"{path}: {e.strerror or e}") from None
    # Numbers become numbers; comma-separated values (run.sizes, PHASE.TARGET.ns) stay text.
    return {g: {k: (v if "," in v else value(v)) for k, v in kv.items()} for g, kv in facts.items()}


def trace_of(directory):
    """The trace of a dcache run's results directory."""
    path = os.path.join(directory, TRACE_NAME)
    if os.path.exists(path):
        return path
    found = sorted(glob.glob(os.path.join(directory, "*.dat")))
    if not found:
        raise DcacheError(
            f"{directory}: no {TRACE_NAME} (the run did not get as far as recording; see its log)"
        )
    return found[0]
