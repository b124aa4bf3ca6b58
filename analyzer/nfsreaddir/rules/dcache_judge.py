"""The dcache reproducers' verdicts: each reproducer's figures and the rules that pass or fail
them, and the results.json of a run (its summary and its verdict together)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from .. import __version__
from . import verdict
from ..model.dcache import (REPRODUCERS, DcacheError, jsonable, number, ratio, read_trace,
                             row_after, row_before, run_facts, summary, trace_of)
from ..units import NS


def build_results(directory):
    """results.json of a dcache-* results directory: run facts, per-phase facts and summary,
    the reproducer's figures, "verdict" ("PASS"/"FAIL") and "reasons"."""
    return build(directory)[0]


def build(directory):
    """(build_results(directory), the markers of its trace), the trace read once."""
    facts = run_facts(directory)
    run = facts.pop("run", {})
    name = run.get("name")
    if name not in REPRODUCERS:
        raise DcacheError(f"{directory}: run.name is {name!r}, not one of {REPRODUCERS}")
    trace = trace_of(directory)
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
    if "paired" in s:
        # Not res["paired"]: the run's facts put the --paired option there (0 when off).
        res["cycles"] = s["paired"]
    figures, reasons_fail, reasons_ok = JUDGES[name](res, facts, markers, events)
    res["figures"] = jsonable(figures)
    res["verdict"], res["reasons"] = verdict.from_reasons(reasons_fail, reasons_ok)
    return jsonable(res), markers


def _delta(res, phase, key):
    return res["phases"].get(phase, {}).get("delta", {}).get(key)


def _ev(res, phase, key):
    return res["phases"].get(phase, {}).get("events", {}).get(key, 0)


def _judge_negative(res, facts, markers, events):
    f, fail, ok = {}, [], []
    for ph, count_key in (("nfs-misses", "nfs_misses"), ("local-misses", "local_misses")):
        if ph not in res["phases"]:
            continue        # --paired: the misses of each cycle are in its figures below
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
        f["nr_negative_after_drop"] = res["phases"].get("dropped", {}).get("after", {}).get(
            "nr_negative")
    for target, t in res.get("lookup", {}).items():
        for loop in ("before", "after", "dropped"):
            f[f"{target}_{loop}_median_ns"] = t["loops"].get(loop, {}).get("median_ns")
        # The same as a rate: stat()s of the existing name a second, clean dcache.
        f[f"{target}_before_stats_per_s"] = (round(1e9 / f[f"{target}_before_median_ns"])
                                             if f[f"{target}_before_median_ns"] else None)
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
    paired = res.get("cycles", {})
    for target, t in paired.items():
        f[f"{target}_paired_cycles"] = len(t["cycles"])
        for k in ("sys_ratio_median", "sys_ratio_q1", "sys_ratio_q3", "sys_ratio_min",
                  "sys_ratio_max", "ref_ratio_median", "ref_ratio_min", "ref_ratio_max",
                  "sys_per_ref_ratio_median", "sys_per_ref_ratio_min", "sys_per_ref_ratio_max",
                  "exec_med_ratio_median", "exec_med_ratio_q1", "exec_med_ratio_q3",
                  "exec_med_ratio_min", "exec_med_ratio_max", "polluted_sys_us_median",
                  "clean_sys_us_median", "polluted_exec_med_us_median",
                  "negative_removed_median", "misses_per_s_median", "steady_cycles",
                  "steady_sys_ratio_median", "steady_exec_med_ratio_median"):
            f[f"{target}_paired_{k}"] = t.get(k)
    limit = float(res.get("max_slowdown", 1.5))
    for target, t in paired.items():
        med = t.get("sys_ratio_median")
        spread = (f"quartiles {t.get('sys_ratio_q1')}-{t.get('sys_ratio_q3')}, "
                  f"{len(t['cycles'])} cycles; the host drifted {t.get('ref_ratio_min')}-"
                  f"{t.get('ref_ratio_max')}x inside the pairs; median wall time of an exec "
                  f"{t.get('exec_med_ratio_median')}x")
        if med is None:
            fail.append(f"{target}: no system time in the paired exec blocks")
            continue
        (fail if med > limit else ok).append(
            f"{target}: exec of cat took {med}x the system time with the misses' negative "
            f"dentries than without (median of the cycles, {'>' if med > limit else '<='} "
            f"{limit}x; {spread})")
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


def _judge_unlink_storm(res, facts, markers, events):
    f, fail, ok = {}, [], []
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
    f["storm_late_over_early"] = ratio(f["storm_negative_per_s_late"],
                                        f["storm_negative_per_s_early"])
    f["create_seconds"] = res["phases"].get("create", {}).get("seconds")
    f["creates_per_s"] = ratio(created if created is not None else asked,
                                f["create_seconds"], 1)
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
    f["server_negative"] = (left - client if nfs and left is not None and client is not None
                            else None)
    f["drop_negative_delta"] = _delta(res, "drop", "nr_negative")
    share = float(res.get("max_negative_share", 0.5))
    mine = f["client_negative_from_unlink"]
    where = "on the NFS client" if nfs else f"on the local {res.get('fs')}"
    held = f"{left} left in all" + (f", server side {f['server_negative']}" if nfs else "")
    if mine is None:
        fail.append("no samples around the storm, settle and unmount phases")
    elif mine > share * files:
        fail.append(f"the unlinks left {mine} negative dentries {where} for {files} "
                    f"removed files (> {share} per file; {held})")
    else:
        ok.append(f"the unlinks left {mine} negative dentries {where} for {files} "
                  f"removed files (<= {share} per file; {held}, re-lookups {restat})")
    if removed is not None and removed != asked:
        fail.append(f"only {removed} of {asked} files were removed"
                    + (f" ({created} created)" if created is not None else ""))
    return f, fail, ok


def _steady_rates(markers, phase):
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

    def span(lo, hi):
        a, b = inside[done >= lo], inside[done >= hi]
        if not len(a) or not len(b):
            return None
        dt = (b["ts"].iloc[0] - a["ts"].iloc[0]) / NS
        return round((b["nr_negative"].iloc[0] - a["nr_negative"].iloc[0]) / dt, 1) if dt > 0 else None

    out["early"], out["late"] = span(0.1, 0.3), span(0.7, 0.9)
    mid = (done >= 0.1) & (done <= 0.9)
    if mid.sum() >= 2 and t[mid].nunique() >= 2:
        out["fit"] = round(float(np.polyfit(t[mid], inside["nr_negative"][mid], 1)[0]), 1)
    return out


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
        k, m = number(p.attrs.get("mounts")), number(p.attrs.get("memcgs"))
        # Used (superblock, memcg) pairs: every pair unless the run said fewer.
        pairs = number(p.attrs.get("pairs")) or (k * m if k is not None and m is not None else None)
        cells[p.name] = {"mounts": k, "memcgs": m, "pairs": pairs, "samples": by}
    return cells


MEMCG_KEYS = ["lru_allocs", "lru_bytes", "kmalloc_bytes", "kmalloc32_active", "kmalloc64_active",
              "kmalloc_cg32_active", "kmalloc_cg64_active", "radix_tree_node_active",
              "slab_active", "nfs_inode_active", "slab_kb", "sunreclaim_kb", "percpu_kb"]
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
                out[f"{k}_{suffix}"] = number(b - a)
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
        res["phases"].setdefault(name, {})["memcg"] = jsonable(out)
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
        f["largest_lru_bytes_per_pair"] = ratio(big.get("lru_bytes_total"),
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
    from ..model import listlru
    # Only cells whose mount and lookup steps were both counted: a cell cut short before its
    # lookups says nothing of what they cost, and taken as 0 it would make a lazy kernel look
    # eager.
    order = [(n, c) for n, c in grid.items() if all(
        c.get(k) is not None for k in ("lru_bytes_mount", "lru_bytes_touch", "lru_allocs_touch"))]
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
    # What the kernel allocated but the run could not count (5.10's pointer arrays above
    # 8 KiB), from the code: added to the measured bytes for the fit.
    untraced = {n: 0 for n, _ in order}
    if eager:
        errors = []
        for n, c in order:
            law = 2 * c["mounts"] * listlru.lru_bytes_510(caps[n], traced=True)
            untraced[n] = 2 * c["mounts"] * listlru.lru_bytes_510(caps[n]) - law
            seen = listlru.capacity_of_allocs(round(c["lru_allocs_mount"] / (2 * c["mounts"])))
            res["phases"][n]["memcg"].update(capacity=caps[n], capacity_seen=seen,
                                             law_bytes_mount=law,
                                             untraced_bytes_mount=untraced[n])
            errors.append(abs(c["lru_bytes_mount"] / law - 1))
        f["law_cells"] = len(order)
        f["law_max_rel_error"] = round(max(errors), 4)
        f["capacity_cells_matching_code"] = sum(
            res["phases"][n]["memcg"]["capacity_seen"] == caps[n] for n, _ in order)
        f["capacity_largest"] = max(caps.values())
        f["untraced_bytes"] = sum(untraced.values())
    rows = [{"cell": n, "K": c["mounts"], "M": c["memcgs"], "P": c["pairs"], "C": caps[n],
             "bytes": c["lru_bytes_mount"] + c["lru_bytes_touch"] + untraced[n]}
            for n, c in order]
    features = listlru.FEATURES if eager else listlru.LAZY_FEATURES
    fit = listlru.fit(rows, features) if len(rows) >= len(features) + 2 else None
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
        f["report_law_ratio"] = ratio(f["report_law_mb"], rep["mb_before"])
    if fit is not None and eager:
        f["report_model_mb"] = round(listlru.predict(fit["coef"], k, m, 0, nodes) / mib)
        f["report_model_ratio"] = ratio(f["report_model_mb"], rep["mb_before"])
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
