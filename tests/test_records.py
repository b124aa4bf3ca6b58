"""check_records in windows: the damage findings of a CPU's records looked at a window at a
time (so that its memory is the window's, not the trace's) are those of all of them at once,
on the records of a real trace with damage put in where windows begin and end."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from nfsreaddir.trace import open_trace
from nfsreaddir.trace.records import OddRecords

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "6.1-v4.1" / "modified.dat"


def cpu_parts(t):
    """{cpu: [(raw ts, ids, page numbers) of each part the walk gives]} of every record."""
    P = t.layout.page_size
    out = {}
    for cpu, first_page, (pos, ts, _dlen, ids) in t._records(None):
        keep = ids != t.layout.not_event
        out.setdefault(cpu, []).append(
            (ts[keep].copy(), ids[keep].astype(np.int64), first_page + pos[keep] // P)
        )
    return out


def damaged(parts, rng, sizes):
    """The parts with damage of every kind put into a few records: an unknown id, a record
    too short (-1 - id), time running backwards (its page's records moved back)."""
    ts, ids, page = (np.concatenate(a) for a in zip(*parts))
    n = len(ts)
    for i in rng.sample(range(1, n - 1), min(12, n - 2)):
        kind = rng.randrange(3)
        if kind == 0:
            ids[i] = 9999
        elif kind == 1 and ids[i] >= 0:
            ids[i] = -1 - ids[i]
        else:
            ts[i] -= np.uint64(1 + int(ts[i] - ts[0]) // 2)
    sizes.setdefault(9999, None)
    cut = sorted(rng.sample(range(1, n), min(5, n - 1)))
    return [(ts[a:b], ids[a:b], page[a:b]) for a, b in zip([0, *cut], [*cut, n]) if b > a]


def findings(cpu, parts, sizes, ns, rows):
    check = OddRecords(cpu, sizes, ns, rows=rows)
    for p in parts:
        check.add(*p)
    return check.finish()


@pytest.mark.parametrize("seed", range(6))
def test_findings_in_windows_are_those_of_the_whole(seed):
    t = open_trace(FIXTURE)
    rng = random.Random(seed)
    by_cpu = cpu_parts(t)
    ids = np.unique(np.concatenate([p[1] for parts in by_cpu.values() for p in parts]))
    sizes = {eid: t._fixed_size(eid) for eid in ids.tolist()}
    seen = 0
    for cpu, parts in by_cpu.items():
        parts = damaged(parts, rng, sizes)
        whole = findings(cpu, parts, sizes, t._ns, rows=1 << 40)
        assert whole, "the damage put in was found"
        for rows in (1, 7, 50, 333):
            assert findings(cpu, parts, sizes, t._ns, rows=rows) == whole, rows
        seen += len(whole)
    assert seen
