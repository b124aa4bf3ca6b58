"""Slab growth (nfsreaddir.model.slab) on real traces, checked against `trace-cmd report` text.

Traces: tests/fixtures/kmem-host/kmem.dat (a host trace of kmem_cache_alloc/free with the
cache name, Linux 6.18; see its COMMAND) and the dcache-memcg fixtures (kmalloc events from
5.10 and 6.1 guests).  The expected figures are computed here, independently, one event at a
time with dicts, from the lines `trace-cmd report` prints; the 5.10/6.1 way (no cache name in
the events) is also checked on the host trace with the name field hidden.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from conftest import installed, needs_setup
from nfsreaddir.model import slab, slab_sorted
from nfsreaddir.present import render
from nfsreaddir.trace import TraceError, open_trace
from nfsreaddir.trace.arrays import Strs
from nfsreaddir.trace.text import ReportText

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HOST = FIXTURES / "kmem-host" / "kmem.dat"
KMALLOC = [
    FIXTURES / "dcache-memcg-5.10" / "dcache.dat",
    FIXTURES / "dcache-memcg-6.1" / "dcache.dat",
]
NFS = FIXTURES / "6.1-v4.1" / "modified.dat"
TRACE_CMD = shutil.which("trace-cmd")
# Without trace-cmd these fail (conftest.installed), they do not skip.
needs_trace_cmd = pytest.mark.usefixtures("trace_cmd")

_LINE = re.compile(
    r"\[(\d+)\]\s+(\d+)\.(\d+):\s+(kmem_cache_alloc|kmem_cache_alloc_node|"
    r"kmem_cache_free|kmalloc|kmalloc_node|kfree):\s+(.*)$"
)


def report_events(dat):
    """(ts ns, kind, ptr, cache name or None, bytes_alloc or None) per kmem line of
    `trace-cmd report -t` (default print formats), in the report's order."""
    out = subprocess.run(
        [TRACE_CMD, "report", "-t", str(dat)],
        check=True,
        timeout=600,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ).stdout
    evs = []
    for line in out.splitlines():
        m = _LINE.search(line)
        if not m:
            continue
        ts = int(m.group(2)) * 10**9 + int(m.group(3).ljust(9, "0"))
        rest = m.group(5)
        kv = dict(re.findall(r"(\w+)=(\S+)", rest))
        evs.append(
            (
                ts,
                m.group(4),
                int(kv["ptr"], 16),
                kv.get("name"),
                int(kv["bytes_alloc"]) if "bytes_alloc" in kv else None,
            )
        )
    return evs


def expected(evs, use_names=True):
    """Per-cache figures, one event at a time (the definitions in nfsreaddir.model.slab)."""
    evs = sorted(evs, key=lambda e: (e[0], not e[1].startswith(("kmem_cache_alloc", "kmalloc"))))
    live = {}  # ptr -> cache of the live object
    c = defaultdict(Counter)
    running, peak = Counter(), Counter()
    unknown = 0
    for _, kind, ptr, name, size in evs:
        if ptr <= 16:
            continue
        if kind.startswith(("kmem_cache_alloc", "kmalloc")):
            if kind.startswith("kmalloc"):
                cache = f"kmalloc-{size}"
            else:
                cache = name if (use_names and name) else f"size-{size}"
            if ptr in live:  # allocated again: freed, untraced
                old = live.pop(ptr)
                c[old]["untraced_frees"] += 1
                running[old] -= 1
            live[ptr] = cache
            c[cache]["allocs"] += 1
            c[cache]["object_size"] = size
            running[cache] += 1
            peak[cache] = max(peak[cache], running[cache])
        else:
            if ptr in live:
                cache = live.pop(ptr)
                running[cache] -= 1
                c[cache]["frees"] += 1
            elif use_names and name:
                c[name]["frees"] += 1
                c[name]["frees_of_earlier"] += 1
            else:
                unknown += 1
    for cache in live.values():
        c[cache]["live"] += 1
    for cache, x in c.items():
        x["net"] = x["allocs"] - x["frees"] - x["untraced_frees"]
        x["peak_live"] = peak[cache]
    return c, unknown


KEYS = ("allocs", "frees", "untraced_frees", "net", "live", "peak_live", "frees_of_earlier")


def check_against(summary, exp, unknown):
    rows = {r["cache"]: r for r in summary["caches"]}
    assert set(rows) == set(exp), (sorted(rows), sorted(exp))
    for cache, x in exp.items():
        r = rows[cache]
        for k in KEYS:
            assert r[k] == x[k], (cache, k, r[k], x[k])
        # the identities the figures obey
        assert r["allocs"] - r["frees"] - r["untraced_frees"] == r["net"], r
        assert 0 <= r["live"] <= r["peak_live"] <= r["allocs"], r
        assert r["net_bytes"] == r["net"] * r["object_size"], r
        assert r["live_bytes"] == r["live"] * r["object_size"], r
    assert summary["frees_of_earlier_unknown"] == unknown
    t = summary["total"]
    assert t["allocs"] == sum(x["allocs"] for x in exp.values())
    assert t["frees"] == sum(x["frees"] for x in exp.values()) + unknown
    assert t["live"] == sum(x["live"] for x in exp.values())
    # nets sorted by bytes, largest growth first
    nb = [r["net_bytes"] for r in summary["caches"]]
    assert nb == sorted(nb, reverse=True)


@pytest.fixture(scope="module")
def host_events():
    installed("trace-cmd")
    return report_events(HOST)


@needs_trace_cmd
def test_host_trace_matches_report(host_events):
    s = slab.summarize(open_trace(HOST))
    assert s["by"] == "name"
    counts = Counter(k for _, k, *_ in host_events)
    assert s["events"] == {f"kmem:{k}": v for k, v in counts.items()}
    assert counts["kmem_cache_alloc"] > 1000 and counts["kmem_cache_free"] > 500
    exp, unknown = expected(host_events)
    check_against(s, exp, unknown)
    assert unknown == 0  # the free events name their cache
    # objects live at the end, counted by ptr: the allocations whose ptr is never seen again
    last = {}
    for _, kind, ptr, *_ in sorted(host_events, key=lambda e: e[0]):
        last[ptr] = kind
    assert s["total"]["live"] == sum(1 for k in last.values() if k == "kmem_cache_alloc")
    d = s["dentry"]
    assert d and d["cache"] == "dentry" and d["identified_by"] == "name"
    assert d["allocs"] == exp["dentry"]["allocs"] > 0
    assert d["object_size"] == slab.DENTRY_OBJECT_SIZE
    assert s["seconds"] > 0 and s["start_ts"] == min(e[0] for e in host_events)
    json.dumps(s)  # JSON-able as it is
    text = render.slab_text(s, top=5)
    assert "dentry cache (name)" in text and "more caches" in text
    assert text.splitlines()[2].split()[0] == s["caches"][0]["cache"]


class _NoName:
    """The host trace as a 5.10/6.1 kernel would record it: no cache name in the events."""

    def __init__(self, t):
        self.t, self.info = t, t.info

    def event_format(self, name):
        fmt = self.t.event_format(name)
        if fmt is None or "name" not in fmt.fields:
            return fmt
        import copy

        f2 = copy.copy(fmt)
        f2.fields = {k: v for k, v in fmt.fields.items() if k != "name"}
        return f2

    def read_pieces(self, request, base=("ts", "cpu", "pid", "comm")):
        assert all("name" not in f for f in request.values())
        return self.t.read_pieces(request, base=base)

    def read_windows(self, request, base=("ts", "cpu", "pid", "comm")):
        assert all("name" not in f for f in request.values())
        return self.t.read_windows(request, base=base)


@needs_trace_cmd
def test_without_cache_names(host_events):
    """5.10/6.1 way: allocations by object size, frees attributed through their ptr."""
    s = slab.summarize(_NoName(open_trace(HOST)))
    assert s["by"] == "bytes_alloc"
    exp, unknown = expected(host_events, use_names=False)
    check_against(s, exp, unknown)
    assert unknown > 0 and any("no cache" in n for n in s["notes"])
    assert all(r["cache"].startswith("size-") for r in s["caches"])
    d = s["dentry"]
    assert d["cache"] == f"size-{slab.DENTRY_OBJECT_SIZE}" and "object size" in d["identified_by"]


@needs_trace_cmd
@pytest.mark.parametrize("dat", KMALLOC, ids=lambda p: p.parent.name)
def test_kmalloc_fixtures(dat):
    evs = report_events(dat)
    assert evs, dat
    s = slab.summarize(open_trace(dat))
    exp, unknown = expected(evs)
    check_against(s, exp, unknown)
    assert all(r["cache"].startswith("kmalloc-") for r in s["caches"])
    assert s["dentry"] is None and "dentry cache: not in this trace" in render.slab_text(s)
    assert any("kmem_cache_alloc" in n for n in s["notes"])


@needs_trace_cmd
def test_report_text_path_same(tmp_path):
    """The same figures from `trace-cmd report -R` text as from the trace.dat."""
    txt = tmp_path / "r.txt"
    with open(txt, "wb") as f:
        subprocess.run(
            [TRACE_CMD, "report", "-R", "-t", str(HOST)],
            check=True,
            stdout=f,
            stderr=subprocess.DEVNULL,
            timeout=600,
        )
    a = slab.summarize(open_trace(HOST))
    b = slab.summarize(ReportText(str(txt)))
    assert a["caches"] == b["caches"] and a["total"] == b["total"]


def test_no_kmem_events():
    assert slab.summarize(open_trace(NFS)) is None
    assert "no kmem" in render.slab_text(None)


def test_module_command():
    cmd = [sys.executable, "-m", "nfsreaddir", "slab"]
    p = subprocess.run(cmd + [str(HOST), "--top", "3"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("slab growth over") and "dentry" in p.stdout
    p = subprocess.run(cmd + [str(HOST), "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and json.loads(p.stdout)["by"] == "name"
    p = subprocess.run(cmd + [str(NFS)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 128 and "kmem:kmem_cache_alloc" in p.stderr


def test_lost_events_noted_with_the_stored_count():
    """Lost events are counted from the trace's stored CPU stats, never as 0: 8,999
    overwritten on CPU 0 of the overwrite-mode fixture, whose marker carries no count."""
    s = slab.summarize(open_trace(FIXTURES / "kmem-lost" / "kmem.dat"))
    assert s["lost_events"] == 1 and s["lost_total"] == 8999
    assert "8999 events lost in 1 place:" in " ".join(s["notes"])

    class Uncounted:  # a marker without a count and no stored stats
        info = {"lost_events": [{"cpu": 0, "ts": 1, "count": None}], "lost_total": None}

    note = " ".join(slab._summarize(Uncounted(), *_reread(HOST))["notes"])
    assert "an unknown number of events lost in 1 place" in note and " 0 events" not in note


def _reread(path):
    t = open_trace(path)
    request = slab.read_request(t)
    return request, t.read_pieces(request, base=("ts",))


KMEM_FIXTURES = [
    HOST,
    FIXTURES / "kmem-lost" / "kmem.dat",
    *KMALLOC,
    FIXTURES / "dcache-memcg-grid-5.10" / "dcache.dat",
    FIXTURES / "dcache-memcg-touch-5.10" / "dcache.dat",
    # (the most objects of the fixtures: 27,086 at once, kmalloc's by size)
    FIXTURES / "record-5.10-ringloss" / "t.dat",
    NFS,
]


@needs_setup(slab._slab is not None, "the compiled slab pass is not built")
@pytest.mark.parametrize("dat", KMEM_FIXTURES, ids=lambda p: p.parent.name)
def test_compiled_pass_gives_what_the_sorts_give(dat, monkeypatch):
    """The compiled pass in time order (nfsreaddir._slab) against the numpy version (a
    stable sort by time, one by pointer, a radix sort by cache), on every kmem fixture, also
    as the 5.10 way (no cache names)."""
    for wrap in (lambda t: t, _NoName):
        fast = slab.summarize(wrap(open_trace(dat)))
        with monkeypatch.context() as m:
            m.setenv("NFSRT_READER", "numpy")
            oracle = slab.summarize(wrap(open_trace(dat)))
        assert fast == oracle


@needs_setup(slab._slab is not None, "the compiled slab pass is not built")
def test_compiled_pass_on_many_pointers_and_tied_times(monkeypatch):
    """More objects than the fixtures have (the compiled table grows several times and
    entries are erased from the middle of probe chains), pointers sharing their low bits,
    many caches, times tied across event kinds, kinds in several runs (one wholly unsorted)
    and in pieces with dictionaries of their own, failed allocations, frees of no cache, names
    that disagree: the same summary both ways, with every one of those cases met."""
    rng = np.random.default_rng(17)
    names = [f"cache-{i}" for i in range(300)]
    size_of = rng.integers(8, 4096, len(names))

    def kind(n, alloc, named, runs):
        ts = rng.integers(0, n // 4, n)  # about 4 events per instant
        ts[: n // runs * runs].reshape(runs, -1).sort()  # per CPU: runs in time order
        if runs == 1:
            rng.shuffle(ts)  # (one kind with no order at all)
        ptr = rng.integers(1, 200_000, n, dtype=np.uint64) << np.uint64(16)
        ptr[rng.random(n) < 0.001] = rng.integers(0, 17, 1)[0]  # failed, kfree(NULL)
        code = rng.integers(-1 if not alloc else 0, len(names), n).astype(np.int32)
        cols = {"ts": ts, "ptr": ptr}
        if alloc:
            cols["bytes_alloc"] = size_of[code].astype(np.uint64)
        if named:
            cols["name"] = Strs(code, names)
        return cols

    frames = {
        "kmem:kmem_cache_alloc": kind(700_000, True, True, 2),
        "kmem:kmalloc": kind(300_000, True, False, 5),
        "kmem:kmem_cache_free": kind(600_000, False, True, 3),
        "kmem:kfree": kind(30_000, False, False, 1),
    }
    request = {ev: list(cols) for ev, cols in frames.items()}

    class Trace:
        info = {}

    def fresh():
        """Each kind in two pieces (as from two CPUs), the second with its own dictionary
        of names (reversed)."""
        out = {}
        for ev, cols in frames.items():
            half = len(cols["ts"]) // 2
            first = {
                c: v[:half] if not isinstance(v, Strs) else Strs(v.codes[:half], names)
                for c, v in cols.items()
            }
            second = {c: v[half:] for c, v in cols.items() if not isinstance(v, Strs)}
            if "name" in cols:
                code = cols["name"].codes[half:]
                second["name"] = Strs(np.where(code < 0, code, len(names) - 1 - code), names[::-1])
            out[ev] = [first, second]
        return out

    fast = slab._summarize(Trace(), request, fresh())
    monkeypatch.setenv("NFSRT_READER", "numpy")
    assert fast == slab._summarize(Trace(), request, fresh())
    assert fast["failed_allocs"] and fast["frees_of_earlier_unknown"]
    assert fast["reallocated_without_free"] and fast["free_name_mismatches"]
    assert fast["total"]["live"] > 50_000 and len(fast["caches"]) > 300
    assert all(r["peak_live"] >= r["live"] for r in fast["caches"])


class _Whole:
    """A trace.dat read whole (read_pieces), as where windows cannot be made."""

    def __init__(self, t):
        self.t, self.info = t, t.info

    def event_format(self, name):
        return self.t.event_format(name)

    def read_pieces(self, request, base=("ts", "cpu", "pid", "comm")):
        return self.t.read_pieces(request, base=base)


@needs_setup(slab._slab is not None, "the compiled slab pass is not built")
@pytest.mark.parametrize("dat", KMEM_FIXTURES, ids=lambda p: p.parent.name)
def test_windows_give_what_the_whole_read_gives(dat, monkeypatch):
    """The trace tallied a window at a time (a page a CPU each step: many windows, rows of
    equal times at their edges, a CPU ahead of another) gives what the whole read gives,
    compiled and numpy, also as the 5.10 way (no cache names)."""
    from nfsreaddir.trace import windows

    monkeypatch.setattr(windows, "WINDOW_BLOCK_BYTES", 4096)
    t = open_trace(dat)
    request = slab.read_request(t)
    # Read ahead, a window takes every block its lanes have read by then, so how many windows
    # there are depends on the threads' timing (one, on a busy machine): the count is asked
    # of windows made without reading ahead, a block a CPU each.
    for ahead in (0, windows.AHEAD_BLOCKS):
        if not request:
            break
        monkeypatch.setattr(windows, "AHEAD_BLOCKS", ahead)
        made = list(open_trace(dat).read_windows(request, base=("ts",)))
        rows = sum(len(p["ts"]) for w in made for ps in w.values() for _, p in ps)
        assert rows == sum(len(c["ts"]) for ps in t.read_pieces(request).values() for c in ps)
        assert ahead or len(made) > (10 if rows > 10_000 else 1)
    for wrap in (lambda t: t, _NoName):
        windowed = slab.summarize(wrap(open_trace(dat)))
        whole = slab.summarize(_Whole(wrap(open_trace(dat))))
        with monkeypatch.context() as m:
            m.setenv("NFSRT_READER", "numpy")
            oracle = slab.summarize(wrap(open_trace(dat)))
        assert windowed == whole == oracle


@needs_setup(slab._slab is not None, "the compiled slab pass is not built")
def test_windows_that_stop_give_way_to_the_whole_read():
    """Windows that stop part way (damage, times running back past a window already
    tallied) leave nothing behind: the whole read's answer, as if none had been made."""
    from nfsreaddir.trace.base import NotWindowed

    class Stops(_Whole):
        def read_windows(self, request, base):
            yield from list(self.t.read_windows(request, base=base))[:1]
            raise NotWindowed("cpu 0: time stamps run back past a window")

    assert slab.summarize(Stops(open_trace(HOST))) == slab.summarize(_Whole(open_trace(HOST)))


def _live_one_by_one(dat):
    """(live at the end, most live at once) of the trace's kmem events, one at a time with a
    set of pointers: in time order, at equal times the allocation kinds first, and otherwise in
    the reader's order of the pieces (the order the compiled pass merges them in)."""
    t = open_trace(dat)
    read = t.read_pieces(slab.read_request(t), base=("ts",))
    events = []
    for ev in (*slab.ALLOC_EVENTS, *slab.FREE_EVENTS):
        for piece in read.get(ev, ()):
            alloc = itertools.repeat(ev in slab.ALLOC_EVENTS)
            events += zip(piece["ts"].tolist(), alloc, piece["ptr"].tolist())
    live, most = set(), 0
    for _, alloc, ptr in sorted(events, key=lambda e: e[0]):  # (stable)
        if ptr <= 16:  # no object: a failed allocation, kfree(NULL)
            continue
        if alloc:
            live.add(ptr)
            most = max(most, len(live))
        else:
            live.discard(ptr)
    return len(live), most


@needs_setup(slab._slab is not None, "the compiled slab pass is not built")
@pytest.mark.parametrize("dat", KMEM_FIXTURES[:-1], ids=lambda p: p.parent.name)
def test_live_objects_are_the_ones_counted_one_by_one(dat):
    """The compiled table of live objects (8-byte slots in parts that grow one at a time) holds
    what a set of pointers holds, event by event, on every kmem fixture: the objects live at
    the end, and the most at once; by cache name and (the 5.10 way) by object size alike, and
    the summary's live objects are the table's (every allocation of these names a cache)."""
    want = _live_one_by_one(dat)
    for wrap in (lambda t: t, _NoName):
        live, most, table_bytes = slab.live_objects(wrap(open_trace(dat)))
        assert (live, most) == want
        assert slab.summarize(wrap(open_trace(dat)))["total"]["live"] == live
        assert table_bytes > 8 * most
    assert 0 < want[0] <= want[1]


def test_the_needed_bench_prints_the_live_objects():
    """needed-run's live objects beside analyze's peak memory are the tally's, from a process
    of its own."""
    bench = Path(__file__).resolve().parent.parent / "analyzer" / "bench" / "needed-run"
    p = subprocess.run(
        [sys.executable, str(bench), "--_live", str(HOST)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert (got["live"], got["most"]) == _live_one_by_one(HOST)
    assert got["table_bytes"] == slab.live_objects(open_trace(HOST))[2]


@needs_setup(slab._slab is not None, "the compiled slab pass is not built")
def test_more_caches_than_a_slot_can_name(monkeypatch):
    """A slot of the compiled table names MAX_CACHES caches at most: past that, numpy's sorts
    make the summary (the same one), and the compiled Tally refuses such a count itself."""
    want = slab.summarize(open_trace(HOST))
    used = []

    def spy(*args):
        used.append(len(args[0]))
        return slab_sorted.tally(*args)

    monkeypatch.setattr(slab, "tally_sorted", spy)
    assert slab.summarize(open_trace(HOST)) == want and not used
    monkeypatch.setattr(slab._slab, "MAX_CACHES", len(want["caches"]) - 1)
    assert slab.summarize(open_trace(HOST)) == want and used
    with pytest.raises(ValueError, match="more than the 4094 a table slot can name"):
        slab._slab.Tally().feed([], 4095)


def test_a_tally_not_built_is_an_error_unless_numpy_is_asked_for(monkeypatch):
    """A failed build of nfsreaddir._slab never silently changes which tally runs: summarize()
    says it is not built and what to do, and NFSRT_READER=numpy asks for numpy's sorts."""
    dat = KMEM_FIXTURES[0]
    monkeypatch.setattr(slab, "_slab", None)
    monkeypatch.delenv("NFSRT_READER", raising=False)
    with pytest.raises(TraceError, match="nfsreaddir._slab is not built.*NFSRT_READER=numpy"):
        slab.summarize(open_trace(dat))
    monkeypatch.setenv("NFSRT_READER", "numpy")
    assert slab.summarize(open_trace(dat))["total"]["live"] > 0
