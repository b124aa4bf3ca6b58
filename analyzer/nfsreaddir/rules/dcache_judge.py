"""The dcache reproducers' verdicts: each reproducer's figures and the rules that pass or fail
them, and the results.json of a run (its summary and its verdict together)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import __version__
from ..model.dcache import (
    REPRODUCERS,
    DcacheError,
    Facts,
    Figures,
    Judged,
    Results,
    jsonable,
    ratio,
    read_trace,
    row_after,
    row_before,
    run_facts,
    summary,
    trace_of,
)
from ..units import NS
from . import verdict
from .dcache_memcg import judge_memcg

if TYPE_CHECKING:
    import pandas as pd

    from ..model.markers import Markers


def build_results(directory: str) -> Results:
    """results.json of a dcache-* results directory: run facts, per-phase facts and summary,
    the reproducer's figures, "verdict" ("PASS"/"FAIL") and "reasons"."""
    return build(directory)[0]


def build(directory: str) -> tuple[Results, Markers]:
    """(build_results(directory), the markers of its trace), the trace read once."""
    facts = run_facts(directory)
    run = facts.pop("run", {})
    name = run.get("name")
    if name not in REPRODUCERS:
        raise DcacheError(f"{directory}: run.name is {name!r}, not one of {REPRODUCERS}")
    trace = trace_of(directory)
    markers, events = read_trace(trace)
    s = summary(markers, events=events)
    res = {
        "analyzer": __version__,
        **run,
        "trace": os.path.basename(trace),
        "phases": {},
        "phase_order": list(s["phases"]),
        "samples": s["samples"],
    }
    for p, ps in s["phases"].items():
        res["phases"][p] = {
            **{
                k: v
                for k, v in facts.get(p.split("#")[0], {}).items()
                if not (isinstance(v, str) and "," in v)
            },
            **ps,
        }
    if "overall" in s:
        res["overall"] = s["overall"]
    if "lookup" in s:
        res["lookup"] = s["lookup"]
    if "paired" in s:
        # Not res["paired"]: the run's facts put the --paired option there (0 when off).
        res["cycles"] = s["paired"]
    figures, reasons_fail, reasons_ok = JUDGES[name](res, facts, markers, events)
    res["figures"] = jsonable(figures)
    res["verdict"], res["reasons"] = verdict.from_reasons(reasons_fail, reasons_ok)
    return jsonable(res), markers


def _delta(res: Results, phase: str, key: str) -> float | None:
    return res["phases"].get(phase, {}).get("delta", {}).get(key)


def _ev(res: Results, phase: str, key: str) -> int:
    return res["phases"].get(phase, {}).get("events", {}).get(key, 0)


def _judge_negative(res: Results, facts: Facts, markers: Markers, events: pd.DataFrame) -> Judged:
    paired = res.get("cycles", {})
    f: Figures = {**_miss_figures(res), **_lookup_figures(res), **_paired_figures(paired)}
    limit = float(res.get("max_slowdown", 1.5))
    fail, ok = _judge_paired(paired, limit)
    lookup_fail, lookup_ok = _judge_lookups(res, limit)
    fail += lookup_fail
    ok += lookup_ok
    if not res.get("lookup") and not paired:
        fail.append("no lookup timings in the trace")
    max_neg = int(res.get("max_negative") or 0)
    left = sum(f.get(f"{t}_negative_added") or 0 for t in ("nfs", "local"))
    if paired:
        # Each cycle's misses on both targets, all gone by its clean block (any target's
        # blocks see the same total).
        left = max(t.get("negative_removed_median") or 0 for t in paired.values())
    f["negative_added"] = left
    if max_neg and left > max_neg:
        fail.append(f"the misses left {left} negative dentries (> {max_neg})")
    return f, fail, ok


def _miss_figures(res: Results) -> Figures:
    """The misses of each target and the negative dentries and bytes they added."""
    f: Figures = {}
    for ph, count_key in (("nfs-misses", "nfs_misses"), ("local-misses", "local_misses")):
        if ph not in res["phases"]:
            continue  # --paired: the misses of each cycle are in its figures below
        tag = ph.split("-")[0]
        n = res.get(count_key) or 0
        dn = _delta(res, ph, "nr_negative")
        f[f"{tag}_misses"] = n
        f[f"{tag}_negative_added"] = dn
        f[f"{tag}_negative_per_miss"] = ratio(dn, n)
        f[f"{tag}_dentry_bytes_added"] = _delta(res, ph, "slab_bytes")
        f[f"{tag}_misses_per_s"] = ratio(n, res["phases"].get(ph, {}).get("seconds"), 1)
    if "local-relookup" in res["phases"]:
        # The same missing names again: each answered by its negative dentry.
        rl = res["phases"]["local-relookup"]
        f["local_relookups"] = rl.get("count")
        f["local_relookups_per_s"] = ratio(rl.get("count"), rl.get("seconds"), 1)
        f["local_relookup_negative_added"] = _delta(res, "local-relookup", "nr_negative")
    if "local-misses" in res["phases"]:
        f["nfs_lookups_traced"] = _ev(res, "nfs-misses", "nfs_lookup_exit")
        after = res["phases"]["local-misses"].get("after", {})
        f["nr_negative_after_misses"] = after.get("nr_negative")
        f["nr_dentry_after_misses"] = after.get("nr_dentry")
        f["nr_negative_after_drop"] = (
            res["phases"].get("dropped", {}).get("after", {}).get("nr_negative")
        )
    return f


def _lookup_figures(res: Results) -> Figures:
    """Per target, the lookup timings before and after the misses and once dropped."""
    f: Figures = {}
    for target, t in res.get("lookup", {}).items():
        for loop in ("before", "after", "dropped"):
            f[f"{target}_{loop}_median_ns"] = t["loops"].get(loop, {}).get("median_ns")
        # The same as a rate: stat()s of the existing name a second, clean dcache.
        f[f"{target}_before_stats_per_s"] = (
            round(1e9 / f[f"{target}_before_median_ns"])
            if f[f"{target}_before_median_ns"]
            else None
        )
        for k in (
            "slowdown",
            "walk_slowdown",
            "ref_slowdown",
            "control_slowdown",
            "control_walk_slowdown",
        ):
            f[f"{target}_{k}"] = t.get(k)
        if t.get("exec"):
            for loop in ("before", "after", "dropped"):
                e = t["exec"].get(loop) or {}
                f[f"{target}_exec_{loop}_sys_us"] = (
                    round(e["sys_s"] * 1e6 / e["runs"]) if e.get("runs") else None
                )
            for k in ("exec_sys_slowdown", "control_exec_sys_slowdown", "exec_wall_slowdown"):
                f[f"{target}_{k}"] = t.get(k)
    return f


def _paired_figures(paired: dict[str, dict[str, Any]]) -> Figures:
    """Per target, the figures of the --paired cycles (polluted and clean exec blocks)."""
    f: Figures = {}
    for target, t in paired.items():
        f[f"{target}_paired_cycles"] = len(t["cycles"])
        for k in (
            "sys_ratio_median",
            "sys_ratio_q1",
            "sys_ratio_q3",
            "sys_ratio_min",
            "sys_ratio_max",
            "ref_ratio_median",
            "ref_ratio_min",
            "ref_ratio_max",
            "sys_per_ref_ratio_median",
            "sys_per_ref_ratio_min",
            "sys_per_ref_ratio_max",
            "exec_med_ratio_median",
            "exec_med_ratio_q1",
            "exec_med_ratio_q3",
            "exec_med_ratio_min",
            "exec_med_ratio_max",
            "polluted_sys_us_median",
            "clean_sys_us_median",
            "polluted_exec_med_us_median",
            "negative_removed_median",
            "misses_per_s_median",
            "steady_cycles",
            "steady_sys_ratio_median",
            "steady_exec_med_ratio_median",
        ):
            f[f"{target}_paired_{k}"] = t.get(k)
    return f


def _judge_paired(paired: dict[str, dict[str, Any]], limit: float) -> tuple[list[str], list[str]]:
    """(fail, ok): per target, whether exec's system time grew with the negative dentries."""
    fail: list[str] = []
    ok: list[str] = []
    for target, t in paired.items():
        med = t.get("sys_ratio_median")
        spread = (
            f"quartiles {t.get('sys_ratio_q1')}-{t.get('sys_ratio_q3')}, "
            f"{len(t['cycles'])} cycles; the host drifted {t.get('ref_ratio_min')}-"
            f"{t.get('ref_ratio_max')}x inside the pairs; median wall time of an exec "
            f"{t.get('exec_med_ratio_median')}x"
        )
        if med is None:
            fail.append(f"{target}: no system time in the paired exec blocks")
            continue
        (fail if med > limit else ok).append(
            f"{target}: exec of cat took {med}x the system time with the misses' negative "
            f"dentries than without (median of the cycles, {'>' if med > limit else '<='} "
            f"{limit}x; {spread})"
        )
    return fail, ok


def _judge_lookups(res: Results, limit: float) -> tuple[list[str], list[str]]:
    """(fail, ok): per target, whether the path walk slowed with the negative dentries."""
    fail: list[str] = []
    ok: list[str] = []
    for target, t in res.get("lookup", {}).items():
        w, raw, ctl = t.get("walk_slowdown"), t.get("slowdown"), t.get("control_walk_slowdown")
        if w is None:
            fail.append(f"{target}: no lookup timing before and after the misses")
        elif w > limit and (ctl is None or ctl <= limit):
            # Slower with the negative dentries, not once drop_caches has freed them.
            fail.append(
                f"{target} path walk {w}x slower after the misses (> {limit}x; stat "
                f"medians {raw}x; {ctl}x after drop_caches)"
            )
        else:
            why = (
                f"; but also {ctl}x after drop_caches: the host, not the dcache"
                if w > limit
                else ""
            )
            ok.append(
                f"{target} path walk {w}x after the misses (<= {limit}x; stat medians "
                f"{raw}x, after drop_caches {ctl}x{why})"
            )
    return fail, ok


def _judge_unlink_storm(
    res: Results, facts: Facts, markers: Markers, events: pd.DataFrame
) -> Judged:
    f: Figures = {}
    fail: list[str] = []
    ok: list[str] = []
    asked = int(res.get("files") or 0)
    f["files"] = asked
    # Per-file figures are per file the storm removed (a run whose creates failed removed
    # fewer than it asked for; that run also fails below).
    removed = facts.get("storm", {}).get("removed")
    files = int(removed) if removed is not None else asked
    created = facts.get("create", {}).get("created")
    f["workers"] = res.get("workers")
    storm = res["phases"].get("storm", {})
    f["storm_seconds"] = storm.get("seconds")
    f["unlinks_per_s"] = ratio(files, storm.get("seconds"), 1)
    f["storm_dentry_delta"] = _delta(res, "storm", "nr_dentry")
    f["storm_negative_delta"] = _delta(res, "storm", "nr_negative")
    f["storm_negative_per_s"] = storm.get("rate_per_s", {}).get("nr_negative")
    f["storm_peak_dentry"] = storm.get("peak", {}).get("nr_dentry")
    f["storm_negative_per_file"] = ratio(f["storm_negative_delta"], files)
    # The rate over time, a steady state when "early" and "late" are alike. Read between 10 %
    # and 90 % of the negative dentries the storm added, not over quarters of its time: those
    # also hold the workers' start (25 s of a 197 s storm on 5.10) and the wait for the last.
    for k, v in _steady_rates(markers, "storm").items():
        f[f"storm_negative_per_s_{k}"] = v
    f["storm_late_over_early"] = ratio(
        f["storm_negative_per_s_late"], f["storm_negative_per_s_early"]
    )
    f["create_seconds"] = res["phases"].get("create", {}).get("seconds")
    f["creates_per_s"] = ratio(created if created is not None else asked, f["create_seconds"], 1)
    f["nfs_unlinks_traced"] = _ev(res, "storm", "nfs_unlink_exit")
    f["nfs_lookups_traced"] = _ev(res, "storm", "nfs_lookup_exit")
    if "restat" in res["phases"]:
        f["restat_negative_delta"] = _delta(res, "restat", "nr_negative")
        f["restat_lookups_traced"] = _ev(res, "restat", "nfs_lookup_exit")
    # What the storm (and restat) left: from the sample before the storm to the end of
    # settle; then who held it: the client's share goes away with its unmount.
    first = storm.get("before", {})
    settle = res["phases"].get("settle", {}).get("after", {})
    left = (
        settle.get("nr_negative") - first.get("nr_negative")
        if settle.get("nr_negative") is not None and first.get("nr_negative") is not None
        else None
    )
    f["negative_left"] = left
    f["negative_left_per_file"] = ratio(left, files)
    # Who held them: unmounting the client frees its own; what the restat lookups added
    # was the client's too, so the rest of the client's came from the unlinks.
    um = _delta(res, "umount", "nr_negative")
    client = -um if um is not None else None
    f["client_negative"] = client
    restat = f.get("restat_negative_delta") or 0
    f["client_negative_from_unlink"] = max(client - restat, 0) if client is not None else None
    nfs = res.get("via", "nfs") == "nfs"
    # Only a loopback NFS run has a server side: knfsd's own lookups on the export.
    f["server_negative"] = (
        left - client if nfs and left is not None and client is not None else None
    )
    f["drop_negative_delta"] = _delta(res, "drop", "nr_negative")
    share = float(res.get("max_negative_share", 0.5))
    mine = f["client_negative_from_unlink"]
    where = "on the NFS client" if nfs else f"on the local {res.get('fs')}"
    held = f"{left} left in all" + (f", server side {f['server_negative']}" if nfs else "")
    if mine is None:
        fail.append("no samples around the storm, settle and unmount phases")
    elif mine > share * files:
        fail.append(
            f"the unlinks left {mine} negative dentries {where} for {files} "
            f"removed files (> {share} per file; {held})"
        )
    else:
        ok.append(
            f"the unlinks left {mine} negative dentries {where} for {files} "
            f"removed files (<= {share} per file; {held}, re-lookups {restat})"
        )
    if removed is not None and removed != asked:
        fail.append(
            f"only {removed} of {asked} files were removed"
            + (f" ({created} created)" if created is not None else "")
        )
    return f, fail, ok


def _steady_rates(markers: Markers, phase: str) -> dict[str, float | None]:
    """nr_negative per second while a phase added its 10-30 % ("early") and 70-90 % ("late")
    of the negative dentries it added in all, and the least-squares slope over its 10-90 %
    ("fit"), from the samples inside the phase; None where fewer than two samples fall in."""
    out = dict.fromkeys(("early", "late", "fit"))
    p = next((x for x in markers.phases if x.name == phase and x.end is not None), None)
    s = markers.samples
    if p is None or not len(s) or "nr_negative" not in s:
        return out
    base = row_before(s, p.start)["nr_negative"]
    total = row_after(s, p.end)["nr_negative"] - base
    inside = s[(s["ts"] >= p.start) & (s["ts"] <= p.end)]
    if total <= 0 or len(inside) < 2:
        return out
    t = (inside["ts"] - p.start) / NS
    done = (inside["nr_negative"] - base) / total

    def span(lo: float, hi: float) -> float | None:
        a, b = inside[done >= lo], inside[done >= hi]
        if not len(a) or not len(b):
            return None
        dt = (b["ts"].iloc[0] - a["ts"].iloc[0]) / NS
        if dt <= 0:
            return None
        return round((b["nr_negative"].iloc[0] - a["nr_negative"].iloc[0]) / dt, 1)

    out["early"], out["late"] = span(0.1, 0.3), span(0.7, 0.9)
    mid = (done >= 0.1) & (done <= 0.9)
    if mid.sum() >= 2 and t[mid].nunique() >= 2:
        out["fit"] = round(float(np.polyfit(t[mid], inside["nr_negative"][mid], 1)[0]), 1)
    return out


def _judge_readdirplus(
    res: Results, facts: Facts, markers: Markers, events: pd.DataFrame
) -> Judged:
    """Figures per N; the verdict on the largest N only: small directories are primed on
    every kernel (5.10 primes the names of the first READDIR reply, about 1,000)."""
    f: Figures = {}
    fail: list[str] = []
    ok: list[str] = []
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
        f[f"n{n}_server_dentries"] = (
            added - client if added is not None and client is not None else None
        )
        f[f"n{n}_client_per_name"] = ratio(client, n)
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
        fail.append(
            f"listing {n} names left {client} client dentries, {per} per name "
            f"(> {limit}; {f[f'n{n}_primed_traced']} primed names traced)"
        )
    else:
        ok.append(f"listing {n} names left {client} client dentries, {per} per name (<= {limit})")
    return f, fail, ok


JUDGES = {
    "dcache-negative": _judge_negative,
    "dcache-unlink-storm": _judge_unlink_storm,
    "dcache-readdirplus": _judge_readdirplus,
    "dcache-memcg": judge_memcg,
}
