"""check_records without the memory or the walk of its own that it cost: the damage findings of
a CPU's records looked at a window at a time (so that its memory is the window's, not the
trace's) are those of all of them at once, on the records of a real trace with damage put in
where windows begin and end; and where a read's screen of every record shows nothing odd, no
walk is made, and what it finds is what the walk finds, on real traces with a bit flipped."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import installed
from nfsreaddir.model import tables
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


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The fixture as trace-cmd writes it uncompressed: a flipped bit of its data is a flipped
    bit of a record, not a chunk that no longer inflates."""
    out = tmp_path_factory.mktemp("plain") / "plain.dat"
    subprocess.run(
        [installed("trace-cmd"), "convert", "--compression", "none", "-i", FIXTURE, "-o", out],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def test_a_read_screens_for_check_records_as_its_walk_finds(plain):
    """check_records after a read skips its own walk where the read's screen of every record
    shows nothing odd: on copies of a real trace with a bit of the ring-buffer data flipped,
    it finds what the walk alone finds, also where the flip is in a record nothing reads."""
    data = plain.read_bytes()
    t = open_trace(plain)
    spans = [(off, off + size) for _, off, size in t.file.buf.cpus if size]
    request = {ev: sorted(c) for ev, c in tables.wanted(t).items()}
    rng = random.Random(45)
    found = screened = 0
    for _ in range(300):
        lo, hi = rng.choice(spans)
        bit = rng.randrange(lo * 8, hi * 8)
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        fd = os.memfd_create("trace")
        try:
            os.write(fd, flipped)
            path = f"/proc/self/fd/{fd}"
            walked = open_trace(path).check_records()
            after_read = open_trace(path)
            after_read.read_columns(request, on_damage="partial")
            screened += after_read._screens is not None
            assert after_read.check_records() == walked, bit
        finally:
            os.close(fd)
        found += bool(walked)
    assert found and screened > found, (found, screened)
