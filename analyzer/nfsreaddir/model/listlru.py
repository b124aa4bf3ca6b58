"""What the memcg-aware list_lru lists of superblocks cost: the law from the kernel's code, a
fit of dcache-memcg's cells to it, and its prediction for a host the size of the 2021 report.

Every superblock has two memcg-aware list_lrus (its dentry and inode LRUs). How their per-memcg
lists are allocated, read from mm/list_lru.c and mm/memcontrol.c:

5.10 (eager). A list_lru has, per NUMA node, an array of list pointers and one list
(`struct list_lru_one`, 24 bytes, a kmalloc-32 object) for every memcg kmem id the array can
hold, allocated when the list_lru is made, used or not. That capacity C is shared by all of
them and only grows: when a new memcg takes the id C, `memcg_alloc_cache_id()` sets
C = 2 x (id + 1) (at least 4) and `memcg_update_all_list_lrus()` gives every memcg-aware
list_lru in the system the lists for the new ids. Ids of removed memcgs are reused, so C is set
by the most memcgs ever alive at once, not by the memcgs of today. Hence:
  - a mount costs 2 x nodes x (C x (32 + 8) + the heads), used or not;
  - making memcgs costs nothing while their ids fit in C, and when they do not, every
    superblock in the system pays for the new ids at once.

5.18+ (lazy; 6.1 here). A list_lru keeps an xarray indexed by memcg id; the lists of one
(list_lru, memcg) pair (`struct list_lru_memcg`: an rcu head and one `list_lru_one` per node,
16 + 24 x nodes bytes) are allocated when that memcg first charges an object of that list_lru
(kmem_cache_alloc_lru), for the memcg and each ancestor that has none yet. A mount costs its
two list heads; an unused pair costs nothing; a used one about 2 x 64 bytes (kmalloc-64 for one
or two nodes), plus a transient table.

What the runs count: kmalloc calls whose call site is in the list_lru functions. On Debian's
5.10 the pointer arrays up to 8 KiB (C up to 1,022) show there, to the byte of the law above;
a larger array is a kmalloc_large, whose event names kvmalloc_node as its call site, so it is
not counted. Measured at C = 1,534 (256 superblocks): 1,535 allocations and 49,152 bytes per
list_lru, the node array and the C lists to the byte, without the 16 KiB array. The law
therefore has two readings: what a run can count (traced=True), checked against every cell,
and what the kernel allocates, used for the fit and the report's host, where the arrays not
counted are taken from the code.

The fit: bytes of a cell (mount and lookup steps; the growth of C is a separate, one-time cost)
  bytes = a K + b K C + c P + d M      (eager kernels)
  bytes = a K + c P + d M              (lazy kernels: C is in none of their code paths)
K superblocks, C the 5.10 capacity when they were mounted, P used (superblock, memcg) pairs,
M memcgs; coefficients by least squares weighted by 1/bytes (each cell's relative error
counts alike).
"""

from __future__ import annotations

import math
from typing import TypedDict

import numpy as np

MIN_CAPACITY = 4  # MEMCG_CACHES_MIN_SIZE
KMALLOC_MAX_CACHE_SIZE = 8192  # SLUB, 4 KiB pages: larger kmallocs are kmalloc_large


# The 2021 list_lru report: 10,000 memcgs x 10,000 mounts on a 2-node host.
class Report(TypedDict):
    """The 2021 report's host and its figures (MiB before and after the patches)."""

    memcgs: int
    superblocks: int
    nodes: int
    mb_before: int
    mb_after: tuple[int, int]


REPORT: Report = {
    "memcgs": 10_000,
    "superblocks": 10_000,
    "nodes": 2,
    "mb_before": 24_464,
    "mb_after": (6_895, 4_367),
}
FEATURES = ("K", "KC", "P", "M")
# A lazy kernel's cells do not depend on C; given the K x C column, the fit would spend it on
# whatever else differs between the k1 cells (small C) and the others (2.1 bytes per K x C on
# 6.1's nine-cell grid, 500 MiB at the report's size).
LAZY_FEATURES = ("K", "P", "M")


def capacity(ids, start=MIN_CAPACITY):
    """The 5.10 memcg kmem id capacity once ids 0 .. ids-1 have been handed out (from a
    capacity of `start`): each id that does not fit sets it to 2 x (id + 1)."""
    c = start
    if ids > c:
        # The id that overflows c is c itself; repeat until the last id (ids - 1) fits.
        while ids - 1 >= c:
            c = max(MIN_CAPACITY, 2 * (c + 1))
    return c


def kmalloc_size(n):
    """Bytes SLUB's kmalloc hands out for n: the kmalloc-* classes up to 8 KiB (with 96 and
    192), whole pages in a power of two above."""
    for size in (8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192):
        if n <= size:
            return size
    return 4096 << max(0, math.ceil(math.log2(n / 4096)))


def array_traced(capacity_):
    """Whether 5.10's pointer array (16 + 8 C bytes) is a slab kmalloc, counted at its list_lru
    call site, rather than a kmalloc_large counted at kvmalloc_node's."""
    return 16 + 8 * capacity_ <= KMALLOC_MAX_CACHE_SIZE


def lru_bytes_510(capacity_, nodes=1, traced=False):
    """5.10: the bytes one memcg-aware list_lru allocates when made, at a capacity: the node
    array (kcalloc of nodes x 64: struct list_lru_node is cache-line aligned), and per node
    the pointer array (16 + 8 C, kvmalloc) and C lists of 32 bytes. traced: only what the
    runs count (no array above KMALLOC_MAX_CACHE_SIZE)."""
    array = kmalloc_size(16 + 8 * capacity_)
    if traced and not array_traced(capacity_):
        array = 0
    return kmalloc_size(64 * nodes) + nodes * (array + 32 * capacity_)


def capacity_of_allocs(per_lru):
    """The capacity C that one 5.10 list_lru's counted allocations (one node) imply: the node
    array, C lists, and the pointer array where it is counted."""
    return per_lru - 2 if array_traced(per_lru - 2) else per_lru - 1


def growth_bytes_510(old, new, nodes=1):
    """5.10: what one list_lru allocates when the capacity grows from old to new (a new
    pointer array and the lists of the new ids, per node)."""
    return nodes * (kmalloc_size(16 + 8 * new) + 32 * (new - old))


def cell_capacities(cells, memcgs_before):
    """{cell name: C at the time the cell's mounts were made} for cells in run order: the
    memcgs before the run, the run's own parent memcg, and the largest M so far."""
    out, most = {}, 0
    for name, c in cells:
        out[name] = capacity(memcgs_before + 1 + most)
        most = max(most, int(c["memcgs"]))
    return out


def fit(rows, features=FEATURES):
    """rows: dicts with K, C, P, M and bytes; features: FEATURES or LAZY_FEATURES. Returns
    {"coef": {feature: value}, "cells": [row + predicted + rel_error], "max_rel_error",
    "rms_rel_error"}; None with fewer rows than features. Features that are constant zero (or
    equal to another column) get 0."""
    rows = [r for r in rows if r.get("bytes") not in (None, 0)]
    if len(rows) < len(features):
        return None
    x = np.array(
        [[r["K"] * r["C"] if f == "KC" else r[f] for f in features] for r in rows], dtype=float
    )
    y = np.array([r["bytes"] for r in rows], dtype=float)
    w = 1.0 / y
    coef, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
    pred = x @ coef
    out = []
    for r, p in zip(rows, pred):
        out.append(
            {**r, "predicted": round(float(p)), "rel_error": round(float(p / r["bytes"] - 1), 4)}
        )
    rel = np.array([o["rel_error"] for o in out])
    return {
        "coef": {f: round(float(v), 3) for f, v in zip(features, coef)},
        "cells": out,
        "max_rel_error": round(float(np.abs(rel).max()), 4),
        "rms_rel_error": round(float(np.sqrt((rel**2).mean())), 4),
    }


def predict(coef, superblocks, memcgs, pairs, nodes=1):
    """Bytes for a host: the fitted per-superblock terms scale with the nodes (every list_lru
    has them per node on both kernels); on 5.10 the capacity C is that of `memcgs` ids. The
    per-pair term (6.1) is one kmalloc-64 per list_lru for one or two nodes, so it does not.
    A fit without the K x C feature (lazy) counts it as 0."""
    c = capacity(memcgs)
    return (
        nodes * (coef["K"] * superblocks + coef.get("KC", 0) * superblocks * c)
        + coef["P"] * pairs
        + coef["M"] * memcgs
    )


def code_bytes_510(superblocks, memcgs, nodes):
    """5.10's list_lru bytes straight from the code (no fit): 2 list_lrus per superblock at
    the capacity of `memcgs` ids."""
    return 2 * superblocks * lru_bytes_510(capacity(memcgs), nodes)
