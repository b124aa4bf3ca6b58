"""The dcache-memcg reproducer's verdict: the list_lru memory that making mounts and memcgs
allocates before any lookup, per cell of mounts x memcgs, and the list_lru model's figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from ..model import listlru
from ..model.dcache import (
    DcacheError,
    Facts,
    Figures,
    Judged,
    Results,
    jsonable,
    number,
    ratio,
)

if TYPE_CHECKING:
    from ..model.markers import Markers


def _memcg_cells(res: Results, markers: Markers) -> dict[str, dict[str, Any]]:
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


MEMCG_KEYS = [
    "lru_allocs",
    "lru_bytes",
    "kmalloc_bytes",
    "kmalloc32_active",
    "kmalloc64_active",
    "kmalloc_cg32_active",
    "kmalloc_cg64_active",
    "radix_tree_node_active",
    "slab_active",
    "nfs_inode_active",
    "slab_kb",
    "sunreclaim_kb",
    "percpu_kb",
]
# label pairs: (figure suffix, later sample, earlier sample); mount and mkdir split setup
# (runs before the `mounted` sample have only setup).
MEMCG_STEPS = [
    ("setup", "setup", "base"),
    ("mount", "mounted", "base"),
    ("mkdir", "setup", "mounted"),
    ("touch", "touched", "setup"),
    ("total", "touched", "base"),
    ("left", "dropped", "base"),
]


def judge_memcg(res: Results, facts: Facts, markers: Markers, events: pd.DataFrame) -> Judged:
    f: Figures = {}
    fail: list[str] = []
    ok: list[str] = []
    cells = _memcg_cells(res, markers)
    grid: dict[str, Figures] = {}  # a cell's figures by cell name
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
        out["slab_bytes_total"] = out["slab_kb_total"] * 1024 if "slab_kb_total" in out else None
        # The list_lru allocations of each step, exactly: kmalloc events from list_lru code,
        # counted in the kernel (the samples' lru_allocs/lru_bytes, taken above) or recorded.
        lru = events[events["event"].str.startswith("kmem:kmalloc")] if len(events) else events
        for suffix, later, earlier in MEMCG_STEPS:
            if (
                later not in smp
                or earlier not in smp
                or not len(lru)
                or f"lru_bytes_{suffix}" in out
            ):
                continue
            win = lru[(lru["ts"] >= smp[earlier]["ts"]) & (lru["ts"] <= smp[later]["ts"])]
            out[f"lru_allocs_{suffix}"] = int(len(win))
            out[f"lru_bytes_{suffix}"] = int(win["bytes"].fillna(0).sum())
        # memory.stat "slab" summed over the cell's memcgs; 5.10 batches memcg statistics per
        # CPU, so small charges read as 0 there.
        out["charged_slab_bytes"] = facts.get(name, {}).get("charged_slab_bytes")
        grid[name] = out
        res["phases"].setdefault(name, {})["memcg"] = jsonable(out)
        for k in (
            "lru_allocs_setup",
            "lru_bytes_setup",
            "lru_allocs_touch",
            "lru_bytes_touch",
            "lru_bytes_total",
            "kmalloc_bytes_total",
            "kmalloc32_active_total",
            "slab_kb_total",
            "slab_kb_left",
            "percpu_kb_total",
        ):
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
            a22, a21, a12, a11 = v
            if a22 is None or a21 is None or a12 is None or a11 is None:
                continue
            f[f"pair_{key.removesuffix('_total')}"] = round((a22 - a21 - a12 + a11) / pairs)
        big = cell.get((k2, m2), {})
        f["largest_cell"] = f"k{k2}-m{m2}"
        f["largest_kmalloc_bytes_total"] = big.get("kmalloc_bytes_total")
        f["largest_slab_bytes_total"] = big.get("slab_bytes_total")
        f["largest_lru_bytes_total"] = big.get("lru_bytes_total")
        f["largest_lru_bytes_per_pair"] = ratio(
            big.get("lru_bytes_total"), big.get("pairs") or k2 * m2, 1
        )
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
            fail.append(
                f"{name}: making {c['mounts']} mounts and {c['memcgs']} memcgs allocated "
                f"{setup} bytes in the list_lru code before any lookup "
                f"({c.get('lru_allocs_setup')} allocations; > {limit})"
            )
    if grid and not fail:
        ok.append(
            f"making the mounts and memcgs allocated at most "
            f"{max(c.get('lru_bytes_setup') or 0 for c in grid.values())} list_lru bytes "
            f"per cell (<= {limit}); the lookups {f.get('largest_lru_bytes_total')} in "
            f"{f.get('largest_cell')}, {f.get('largest_lru_bytes_per_pair')} per "
            "(superblock, memcg) pair"
        )
    return f, fail, ok


def _memcg_model(res: Results, grid: dict[str, dict[str, Any]]) -> Figures:
    """Figures of the list_lru model (listlru.py): on an eager kernel (5.10) the code's law
    against every cell's mount step, with the capacity it implies against the one seen; on
    any kernel, with cells to spare over the fit's four coefficients, the fit and its error;
    and the prediction for the 2021 report's host. Only for runs that sample the mount step
    apart from the mkdir step."""
    # Only cells whose mount and lookup steps were both counted: a cell cut short before its
    # lookups says nothing of what they cost, and taken as 0 it would make a lazy kernel look
    # eager.
    order = [
        (n, c)
        for n, c in grid.items()
        if all(
            c.get(k) is not None for k in ("lru_bytes_mount", "lru_bytes_touch", "lru_allocs_touch")
        )
    ]
    if not order:
        return {}
    caps = listlru.cell_capacities(order, int(res.get("memcgs_before") or 0))
    f: Figures = {}
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
        law, untraced = _eager_law(res, order, caps)
        f.update(law)
    fit = _model_fit(res, order, caps, untraced, eager)
    if fit is not None:
        f.update(
            {
                "model_cells": len(fit["cells"]),
                **{f"model_bytes_per_{k}": v for k, v in fit["coef"].items()},
                "model_max_rel_error": fit["max_rel_error"],
                "model_rms_rel_error": fit["rms_rel_error"],
            }
        )
    f.update(_report_prediction(fit, eager))
    return f


def _eager_law(
    res: Results, order: list[tuple[str, dict[str, Any]]], caps: dict[str, int]
) -> tuple[Figures, dict[str, int]]:
    """(figures, untraced bytes per cell) of the code's law on an eager kernel: each cell's
    mount step against what lru_bytes_510 says it allocates, written into the cell's phase."""
    untraced = {}
    errors = []
    for n, c in order:
        law = 2 * c["mounts"] * listlru.lru_bytes_510(caps[n], traced=True)
        untraced[n] = 2 * c["mounts"] * listlru.lru_bytes_510(caps[n]) - law
        seen = listlru.capacity_of_allocs(round(c["lru_allocs_mount"] / (2 * c["mounts"])))
        res["phases"][n]["memcg"].update(
            capacity=caps[n],
            capacity_seen=seen,
            law_bytes_mount=law,
            untraced_bytes_mount=untraced[n],
        )
        errors.append(abs(c["lru_bytes_mount"] / law - 1))
    f: Figures = {
        "law_cells": len(order),
        "law_max_rel_error": round(max(errors), 4),
        "capacity_cells_matching_code": sum(
            res["phases"][n]["memcg"]["capacity_seen"] == caps[n] for n, _ in order
        ),
        "capacity_largest": max(caps.values()),
        "untraced_bytes": sum(untraced.values()),
    }
    return f, untraced


def _model_fit(
    res: Results,
    order: list[tuple[str, dict[str, Any]]],
    caps: dict[str, int],
    untraced: dict[str, int],
    eager: bool,
) -> dict[str, Any] | None:
    """The model fitted to the cells' bytes, each cell's prediction written into its phase;
    None without two cells more than the model has coefficients."""
    rows = [
        {
            "cell": n,
            "K": c["mounts"],
            "M": c["memcgs"],
            "P": c["pairs"],
            "C": caps[n],
            "bytes": c["lru_bytes_mount"] + c["lru_bytes_touch"] + untraced[n],
        }
        for n, c in order
    ]
    features = listlru.FEATURES if eager else listlru.LAZY_FEATURES
    fit = listlru.fit(rows, features) if len(rows) >= len(features) + 2 else None
    if fit is not None:
        for row in fit["cells"]:
            res["phases"][row["cell"]]["memcg"].update(
                capacity=row["C"], model_bytes=row["predicted"], model_rel_error=row["rel_error"]
            )
    return fit


def _report_prediction(fit: dict[str, Any] | None, eager: bool) -> Figures:
    """What the law and the fit say of the 2021 report's host."""
    f: Figures = {}
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
            listlru.predict(fit["coef"], k, m, k * m, nodes) / mib
        )
        f["report_model_mb_one_pair_per_memcg"] = round(
            listlru.predict(fit["coef"], k, m, m, nodes) / mib
        )
        base = listlru.predict(fit["coef"], k, m, 0, nodes)
        if fit["coef"]["P"] > 0:
            f["report_pairs_implied"] = round((rep["mb_after"][0] * mib - base) / fit["coef"]["P"])
    return f
