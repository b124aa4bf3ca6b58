"""trace.dat reader vs `trace-cmd report -R`, conversions, and damaged files.

Traces under test: every *.dat under tests/fixtures (recursively; recorded by
the project's reproducer in 5.10 / 6.1 guests).  When there are none, a short
real trace of this host is recorded into a tmp dir through tracefs (skipped
when tracefs is not writable or trace-cmd is missing).  No trace file is
committed by these tests.
"""

from __future__ import annotations

import functools
import os
import random
import re
import shutil
import signal
import subprocess
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import conftest
from conftest import (
    host_tracefs,
    installed,
    needs_setup,
    no_tracefs,
    one_of_each_kind,
    run_cli,
    swept_fixture,
)
from nfsreaddir.trace import BASE_COLUMNS, TraceError, field_column, open_trace

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
TRACE_CMD = shutil.which("trace-cmd")
TRACEFS = Path("/sys/kernel/tracing")
# One instance per test process: two runs of the suite at once (two checkouts on one host)
# share tracefs, and one would find the other's instance, or see it removed mid-extract.
HOST_INSTANCE = f"nfsreaddir_test_{os.getpid()}"

# Without trace-cmd these fail (conftest.installed), they do not skip.
needs_trace_cmd = pytest.mark.usefixtures("trace_cmd")


# ------------------------------------------------------------------ helpers


def fixture_files():
    if not FIXTURES.is_dir():
        return []
    return sorted(p for p in FIXTURES.rglob("*.dat") if p.is_file())


def parsed_report(dat, raw=True, typed=True, instance=None):
    """What the text reader reads in `trace-cmd report [-R] -t` of ``dat``, parsed once in a run:
    (info, {event as the text names it: frame}) (conftest.report_frames)."""
    return conftest.report_frames(
        TRACE_CMD, dat, raw=raw, nanoseconds=True, typed=typed, instance=instance
    )


def trace_cmd_compressions():
    r = subprocess.run(
        [TRACE_CMD, "list", "-c"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60
    )
    return set(re.findall(r"^\s*(\w+),", r.stdout.decode("utf-8", "replace"), re.M))


def convert(src, dst, version, compression=None):
    """`trace-cmd convert`; returns None on success, else the tool's output."""
    cmd = [TRACE_CMD, "convert", "-i", str(src), "-o", str(dst), "--file-version", str(version)]
    if compression:
        cmd += ["--compression", compression]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if r.returncode != 0 or not Path(dst).exists():
        return r.stdout.decode("utf-8", "replace")[-500:]
    return None


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    """``converted(src, version, compression=None)``: the path of `trace-cmd convert` of
    ``src``, made once in a session however many tests read it (the largest fixture's v6 copy
    serves three), never to edit."""
    where = tmp_path_factory.mktemp("converted")
    made = {}

    def get(src, version, compression=None):
        key = (str(src), version, compression)
        if key not in made:
            out = where / f"{len(made)}-{Path(src).stem}.v{version}-{compression or 'default'}.dat"
            err = convert(src, out, version, compression)
            assert err is None, f"trace-cmd convert {src} to v{version} {compression}: {err}"
            made[key] = out
        return made[key]

    return get


class Syms:
    """Kernel symbol lookup from the kallsyms saved in the trace (as trace-cmd dumps them)."""

    def __init__(self, dat):
        text = subprocess.run(
            [TRACE_CMD, "dump", "--kallsyms", str(dat)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ).stdout
        addrs, names = [], []
        for line in text.decode("utf-8", "replace").splitlines():
            parts = line.split()
            if len(parts) >= 3:
                try:
                    addrs.append(int(parts[0], 16))
                    names.append(parts[2])
                except ValueError:
                    pass
        order = np.argsort(np.array(addrs, dtype=np.uint64), kind="stable")
        self.addrs = np.array(addrs, dtype=np.uint64)[order]
        self.names = [names[i] for i in order]

    def names_for(self, value):
        i = int(np.searchsorted(self.addrs, np.uint64(value), side="right")) - 1
        out = []
        if i < 0:
            return out
        a = int(self.addrs[i])
        while i >= 0 and int(self.addrs[i]) == a:
            out.append((self.names[i], value - a))
            i -= 1
        return out


@functools.cache
def syms_of(dat):
    """The kallsyms of a trace, dumped by trace-cmd once in a session (a fixture is compared
    whole, and by its instances)."""
    return Syms(dat)


_SYM_RE = re.compile(r"^([A-Za-z_.$][\w.$]*)(?:\+0x([0-9a-f]+))?(?:/0x[0-9a-f]+)?(?: \[\w+\])?$")


def int_matches(b, s, size, syms):
    """Is the -R text ``s`` one of the ways trace-cmd prints integer ``b``?

    -R prints each field with the conversion of its print format (decimal,
    hex with or without 0x, %ps/%pS symbols) or by its type.
    """
    s = s.strip()
    mod = 1 << (8 * size)
    if s == "(nil)":  # %p of a null pointer (kmem:kfree of NULL)
        return b % mod == 0
    cands = set()
    for base in (10, 16):
        try:
            cands.add(int(s, base) % mod)
        except ValueError:
            pass
    if b % mod in cands:
        return True
    m = _SYM_RE.match(s)
    if m and syms is not None:
        off = int(m.group(2), 16) if m.group(2) else None
        for name, o in syms.names_for(b % (1 << 64)):
            if name == m.group(1) and (off is None or off == o):
                return True
    return False


def arr_bytes(s):
    inner = s[len("ARRAY[") :].rstrip("]").strip()
    return bytes(int(x, 16) for x in inner.split(",") if x.strip())


def text_matches(b, s, kind):
    if s is None:
        return False
    if kind == "str":
        if b.strip() == s.strip():
            return True
        return s.startswith("ARRAY[") and arr_bytes(s).split(b"\0", 1)[0] == b.encode()
    if s.startswith("ARRAY["):
        return arr_bytes(s) == b
    return b.split(b"\0", 1)[0].decode("utf-8", "replace").strip() == s.strip()


def _request_all(trace, names):
    """The binary request for every event name the report shows (``names``)."""
    byname = {}
    for full in trace.event_names():
        byname.setdefault(full.split(":", 1)[1], []).append(full)
    req = {}
    for n in sorted(names):
        fulls = byname.get(n, [])
        assert len(fulls) == 1, f"event {n} of the report has {len(fulls)} formats"
        req[fulls[0]] = None
    return req


def compare_with_report(dat, instance=None):
    """Decode every event of ``dat`` and compare with `trace-cmd report -R -t`."""
    text_info, text_frames = parsed_report(dat, typed=False, instance=instance)
    t = open_trace(dat, instance=instance)
    req_bin = _request_all(t, text_frames)
    bin_frames = t.read(req_bin)
    if text_info["format"] != "report text -R":
        assert not req_bin, text_info
    syms = syms_of(dat)
    problems = []
    total = 0
    for full, bdf in bin_frames.items():
        name = full.split(":", 1)[1]
        tdf = text_frames[name]
        fmt = t.event_format(full)
        total += len(bdf)
        assert len(bdf) == len(tdf), f"{dat} {full}: decoded {len(bdf)}, report has {len(tdf)}"
        if not len(bdf):
            continue
        assert list(bdf.columns[:4]) == list(BASE_COLUMNS)
        for c in ("ts", "cpu", "pid"):
            np.testing.assert_array_equal(
                bdf[c].to_numpy(), tdf[c].to_numpy(), err_msg=f"{dat} {full} {c}"
            )
        bc = bdf["comm"].to_numpy(dtype=object)
        tc = tdf["comm"].to_numpy(dtype=object)
        bad = np.flatnonzero((bc != "<...>") & (bc != tc))
        if len(bad):
            problems.append(f"{full} comm row {bad[0]}: {bc[bad[0]]!r} vs {tc[bad[0]]!r}")
        for fname in fmt.user_fields():
            f = fmt.fields[fname]
            col = field_column(fname)
            bvals = bdf[col].tolist()
            tvals = tdf[col].tolist() if col in tdf else [None] * len(bdf)
            # A field's values repeat (record-5.10-ringloss: 2,421,268 integers, 57,709 pairs
            # of value and text): each pair is looked at once.
            seen = {}
            for i, (b, s) in enumerate(zip(bvals, tvals)):
                if f.kind == "int":
                    ok = seen.get((b, s))
                    if ok is None:
                        ok = seen[b, s] = s is not None and int_matches(int(b), s, f.size, syms)
                else:
                    ok = text_matches(b, s, f.kind)
                if not ok:
                    problems.append(f"{full}.{fname} row {i}: decoded {b!r}, report {s!r}")
                    break
    assert not problems, f"{dat}:\n" + "\n".join(problems[:8])

    # lost events: same cpus and counts as the report's "EVENTS DROPPED" lines
    def lost(info):
        return sorted(
            (d["cpu"], d["count"] if d["count"] is not None else -1) for d in info["lost_events"]
        )

    assert lost(t.info) == lost(text_info), (t.info["lost_events"], text_info["lost_events"])
    for d in t.info["lost_events"]:
        assert isinstance(d["ts"], int) and d["cpu"] >= 0
    return t, bin_frames, total


def frames_equal(a, b, what):
    """Equal frames: the same columns, types and values, exactly. (Exactly, as the readers give
    the same numbers and strings: without check_exact pandas compares a categorical column an
    element at a time, "almost equal", which was 90% of this file's stretch tests, 61 of 66 s
    on record-5.10-ringloss's 711,892 events.)"""
    assert set(a) == set(b), what
    for k in a:
        pd.testing.assert_frame_equal(
            a[k].reset_index(drop=True),
            b[k].reset_index(drop=True),
            check_dtype=True,
            check_exact=True,
            obj=f"{what} {k}",
        )


_PRESENT = {}


def present_events(path):
    """Events with records in ``path`` (plus one absent name), for whole-file reads."""
    key = str(path)
    if key not in _PRESENT:
        _PRESENT[key] = sorted(open_trace(path).event_counts()) + ["nfs:not_in_this_trace"]
    return _PRESENT[key]


def read_all(path, instance=None, events=None):
    t = open_trace(path, instance=instance)
    return t, t.read({n: None for n in (events or present_events(path))})


# ------------------------------------------------------------ host trace


def _write(path, value):
    Path(path).write_text(value)


@pytest.fixture(scope="session")
def host_trace(tmp_path_factory):
    """A short real trace of this host (kmem, sched, trace_marker, one instance)."""
    installed("trace-cmd")
    if not (TRACEFS / "tracing_on").exists():
        subprocess.run(
            ["mount", "-t", "tracefs", "nodev", str(TRACEFS)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    if not os.access(TRACEFS / "tracing_on", os.W_OK):
        no_tracefs()
    out = tmp_path_factory.mktemp("host") / "host.dat"
    inst = TRACEFS / "instances" / HOST_INSTANCE
    events = ["kmem/kmem_cache_free", "sched/sched_switch", "sched/sched_wakeup"]
    # (the top-level state is saved, changed and put back: no other user may change it between)
    with host_tracefs():
        on0 = (TRACEFS / "tracing_on").read_text().strip()
        enabled = []
        made_inst = False
        try:
            _write(TRACEFS / "tracing_on", "0")
            for e in events:
                p = TRACEFS / "events" / e / "enable"
                if p.read_text().strip() == "0":
                    _write(p, "1")
                    enabled.append(p)
            if not inst.exists():
                inst.mkdir()
                made_inst = True
                # a tiny buffer that overflows: lost events to check
                _write(inst / "buffer_size_kb", "8")
                for e in ("sched/sched_switch", "kmem/kmem_cache_free"):
                    _write(inst / "events" / e / "enable", "1")
            _write(TRACEFS / "tracing_on", "1")
            for i in range(3):
                _write(TRACEFS / "trace_marker", f"nfsreaddir test marker {i}\n")
                subprocess.run(["ls", "-la", "/usr/bin"], stdout=subprocess.DEVNULL)
            _write(TRACEFS / "trace_marker", "no newline")
            if made_inst:
                _write(inst / "trace_marker", "marker in the instance\n")
            time.sleep(0.05)
            _write(TRACEFS / "tracing_on", "0")
            if made_inst:
                _write(inst / "tracing_on", "0")
            cmd = [TRACE_CMD, "extract", "-o", str(out)]
            if made_inst:
                cmd += ["-t", "-B", HOST_INSTANCE]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        finally:
            for p in enabled:
                _write(p, "0")
            if made_inst and inst.exists():
                try:
                    for e in ("sched/sched_switch", "kmem/kmem_cache_free"):
                        _write(inst / "events" / e / "enable", "0")
                    inst.rmdir()
                except OSError:
                    pass
            _write(TRACEFS / "tracing_on", on0)
    if r.returncode != 0 or not out.exists():
        pytest.skip(f"trace-cmd extract failed: {r.stdout.decode(errors='replace')[-300:]}")
    return out


@pytest.fixture(scope="session")
def dat_files(request):
    """The fixtures, or (when there are none yet) the host trace."""
    fx = fixture_files()
    if fx:
        return fx
    return [request.getfixturevalue("host_trace")]


def kinds_of(path):
    """What a reader can meet in a trace file: its format (version, compression), the layout of
    each event with records (name, and each field's name, offset, size and kind), its page
    size, its instances, and lost events with a count and without one."""
    t = open_trace(path)
    out = {("format", t.info["format"]), ("page", t.file.buf.page_size, t.file.long_size)}
    for ev in t.event_counts():
        f = t.event_format(ev)
        out.add(("event", ev, tuple((n, x.offset, x.size, x.kind) for n, x in f.fields.items())))
    out |= {("instance",) for i in t.info["instances"] if i}
    out |= {("lost", d["count"] is None) for d in t.info["lost_events"]}
    return out


# The comparisons and damage sweeps that read every fixture whole, several times over (each
# `trace-cmd report -R`, each conversion, each walk, each damaged copy), run in make test on one
# fixture of each kind (9 of 67 files, 2026-11-28) and on all of them in make test-full:
# `trace-cmd convert` of every fixture four ways took 209 s of a fresh make test beside the
# guests; the fuzz, cut and stretch sweeps of every fixture 203 s at load 2, two workers
# (test_reporttext's report comparisons take a sample of their own: print formats too). The
# field types of every fixture and the damaged pages of every other one took 30, 16 and 9 s
# more at load 8 (2026-12-07): a field's type, and a page's walk, are decided by the layouts
# and formats the sample holds every one of.
swept_dats = swept_fixture("swept_dats", kinds_of)


# -------------------------------------------------------------------- tests


def test_the_sample_holds_every_kind(dat_files):
    """The sample that make test's comparisons read is smaller than the whole, and misses no
    kind of the whole (the greedy cover's own promise, checked)."""
    chosen = one_of_each_kind(dat_files, kinds_of)
    assert set().union(*map(kinds_of, chosen)) == set().union(*map(kinds_of, dat_files))
    assert len(chosen) < len(dat_files) or len(dat_files) == 1


def test_fixtures_present():
    if not fixture_files():
        pytest.skip(
            f"no *.dat fixtures under {FIXTURES} yet (the reproducer records them); "
            "the other tests ran on a host trace recorded for the test"
        )


@pytest.mark.slow
@needs_trace_cmd
def test_decode_matches_report_raw(swept_dats):
    for dat in swept_dats:
        t, frames, total = compare_with_report(dat)
        assert total > 0, f"{dat}: no events decoded"
        assert t.info["format"].startswith("trace.dat v")
        for df in frames.values():
            assert df["ts"].dtype == np.int64
            assert df["ts"].is_monotonic_increasing


@needs_trace_cmd
def test_host_trace_instance_and_lost_events(host_trace):
    """Host trace (also when fixtures exist): top instance, a buffer instance
    whose tiny buffer overflowed (lost events), absolute time stamps."""
    t = open_trace(host_trace)
    assert HOST_INSTANCE in t.info["instances"], t.info["instances"]
    compare_with_report(host_trace)
    ti, _, total = compare_with_report(host_trace, instance=HOST_INSTANCE)
    assert total > 0
    assert ti.info["lost_events"], "the 8 KB instance buffer should have dropped events"
    # the instance's own stored stats, not the top buffer's: its tiny buffer overwrote
    assert ti.info["cpu_stats"] and sum(st["overrun"] for st in ti.info["cpu_stats"].values())
    assert ti.info["lost_total"] == sum(
        st["overrun"] + st["dropped_events"] + st["commit_overrun"]
        for st in ti.info["cpu_stats"].values()
    )
    with pytest.raises(TraceError, match="no_such_instance"):
        open_trace(host_trace, instance="no_such_instance")


def extract_instances_only(out, names):
    """A real trace of this host whose events are in the instances ``names`` alone
    (`trace-cmd extract -B NAME ...`, no top-level buffer), kmem_cache_alloc in each."""
    installed("trace-cmd")
    if not os.access(TRACEFS / "tracing_on", os.W_OK):
        no_tracefs()
    # (trace-cmd extract of instances reads the top-level buffer too: it emptied a make-trace
    # recording beside it; conftest.host_tracefs)
    with host_tracefs():
        insts = [TRACEFS / "instances" / f"{n}_{os.getpid()}" for n in names]
        try:
            for inst in insts:
                inst.mkdir()
                _write(inst / "buffer_size_kb", "64")
                _write(inst / "events" / "kmem" / "kmem_cache_alloc" / "enable", "1")
            subprocess.run(["ls", "-la", "/usr/bin"], stdout=subprocess.DEVNULL)
            for inst in insts:
                _write(inst / "tracing_on", "0")
            cmd = [TRACE_CMD, "extract", "-o", str(out)]
            for inst in insts:
                cmd += ["-B", inst.name]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
            assert r.returncode == 0, r.stdout
        finally:
            for inst in insts:
                if inst.exists():
                    _write(inst / "events" / "kmem" / "kmem_cache_alloc" / "enable", "0")
                    inst.rmdir()
    return [inst.name for inst in insts]


def test_a_trace_of_instances_alone(tmp_path):
    """No events in the top-level buffer: the one instance that has them is read, and named;
    with two, the message names both and says how to read each (not "no kmem events")."""
    one = tmp_path / "one.dat"
    (name,) = extract_instances_only(one, ["nfsreaddir_only"])
    p = run_cli("slab", one, check=0)
    assert f"reading those of instance {name!r}" in p.stderr, p.stderr
    assert "kmem_cache_alloc" in p.stdout
    two = tmp_path / "two.dat"
    names = extract_instances_only(two, ["nfsreaddir_a", "nfsreaddir_b"])
    p = run_cli("slab", two, check=128)
    assert all(repr(n) in p.stderr for n in names) and "extract -B NAME" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def report_stats(dat):
    """{cpu: {name: int}} of the stored ring-buffer stats as `trace-cmd report --stat`
    prints them (the oracle of info["cpu_stats"])."""
    r = subprocess.run(
        [TRACE_CMD, "report", "--stat", str(dat)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=300,
        text=True,
    )
    out, cpu = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"CPU: (\d+)$", line)
        if m:
            cpu = out.setdefault(int(m.group(1)), {})
            continue
        m = re.match(r"([a-z ]+): (\d+)$", line)
        if m and cpu is not None:
            cpu[m.group(1).replace(" ", "_")] = int(m.group(2))
    return out


@needs_trace_cmd
def test_lost_events_unknown_count_and_cpu_stats():
    """A real overwrite-mode trace whose CPU 0 overwrote its oldest events: the ring buffer
    marks the loss without a count (report: "CPU:0 [EVENTS DROPPED]"), the stored CPU stats
    have the overrun. The count stays unknown (None, never 0), and the total comes from the
    stats."""
    dat = FIXTURES / "kmem-lost" / "kmem.dat"
    t = open_trace(dat)
    stats = report_stats(dat)
    assert stats[0]["overrun"] > 0 and stats[1]["overrun"] == 0, stats
    for cpu, st in stats.items():
        for k, v in st.items():
            assert t.info["cpu_stats"][cpu][k] == v, (cpu, k)
    total = sum(
        st["overrun"] + st["dropped_events"] + st["commit_overrun"] for st in stats.values()
    )
    assert t.info["lost_total"] == total  # known from the stats before any read
    t.read({"sched:sched_switch": ["prev_pid"]})
    assert [(d["cpu"], d["count"]) for d in t.info["lost_events"]] == [(0, None)]
    assert t.info["lost_total"] == total
    text = subprocess.run(
        [TRACE_CMD, "report", str(dat)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=True,
        text=True,
    ).stdout
    assert re.findall(r"CPU:(\d+) \[(\d*) ?EVENTS DROPPED\]", text) == [("0", "")]


@needs_trace_cmd
def test_dropped_events_counted_from_cpu_stats():
    """A trace recorded in non-overwrite mode until the buffers were full: no marker in the
    pages, but the stored stats count the dropped events."""
    dat = FIXTURES / "kmem-host" / "kmem.dat"
    t = open_trace(dat)
    t.event_counts()
    dropped = {cpu: st["dropped_events"] for cpu, st in report_stats(dat).items()}
    assert t.info["lost_events"] == [] and all(dropped.values())
    assert {c: st["dropped_events"] for c, st in t.info["cpu_stats"].items()} == dropped
    assert t.info["lost_total"] == sum(dropped.values())


def test_parse_cpu_stats_by_name_and_instance():
    from nfsreaddir.trace.format import parse_cpu_stats

    texts = [
        "CPU: 0\nentries: 3\noverrun: 5\nnow ts: 12.5\nnew counter: 7",
        "CPU: 1\noverrun: 0\ndropped events: 2",
        "\nBuffer: inst\n\n",
        "CPU: 0\noverrun: 9\nodd: x y",
    ]
    assert parse_cpu_stats(texts) == {
        "": {
            0: {"entries": 3, "overrun": 5, "now_ts": 12.5, "new_counter": 7},
            1: {"overrun": 0, "dropped_events": 2},
        },
        "inst": {0: {"overrun": 9, "odd": "x y"}},
    }


def test_instances_of_fixtures(dat_files):
    for dat in dat_files:
        t = open_trace(dat)
        for inst in t.info["instances"]:
            if inst:
                compare_with_report(dat, instance=inst)


@pytest.mark.slow
@needs_trace_cmd
def test_conversions_identical(swept_dats, converted, tmp_path):
    """v6, v7 uncompressed, v7 zstd/zlib (trace-cmd convert) decode to equal frames."""
    have = trace_cmd_compressions()
    skipped = []
    for dat in swept_dats:
        events = present_events(dat)
        base_t, base = read_all(dat, events=events)
        variants = [("v6", 6, None), ("v7-none", 7, "none")]
        for comp in ("zstd", "zlib"):
            if comp in have:
                variants.append((f"v7-{comp}", 7, comp))
            else:
                skipped.append(comp)
        for label, ver, comp in variants:
            t, fr = read_all(converted(dat, ver, comp), events=events)
            assert t.info["version"] == ver
            frames_equal(base, fr, f"{dat} vs {label}")
            assert t.info["lost_events"] == base_t.info["lost_events"]
        # zlib by re-compressing the real data ourselves when trace-cmd lacks it
        if "zlib" not in have:
            src = converted(dat, 7, "zstd" if "zstd" in have else "none")
            zl = tmp_path / f"{Path(dat).stem}.v7-zlib-py.dat"
            recompress_v7(src, zl, "zlib")
            t, fr = read_all(zl, events=events)
            assert t.info["format"] == "trace.dat v7 zlib"
            frames_equal(base, fr, f"{dat} vs python-made zlib v7")
    if skipped:
        print(f"trace-cmd here lacks {sorted(set(skipped))}; zlib checked on a re-compressed copy")


def test_unknown_field_and_absent_event(dat_files):
    t = open_trace(dat_files[0])
    name = sorted(t.event_names())[0]
    with pytest.raises(TraceError) as ei:
        t.read({name: ["no_such_field_xyz"]})
    msg = str(ei.value)
    assert "no_such_field_xyz" in msg and "common_pid" in msg
    fr = t.read({"nfs:no_such_event_xyz": ["dev", "fileid"]})
    df = fr["nfs:no_such_event_xyz"]
    assert len(df) == 0 and list(df.columns) == ["ts", "cpu", "pid", "comm", "dev", "fileid"]


def test_field_types(swept_dats):
    """Each field's type follows its format (a field's layout decides it: one fixture of each
    layout in make test, every fixture in make test-full)."""
    columns = 0
    for dat in swept_dats:
        t = open_trace(dat)
        for name in sorted(t.event_names()):
            fmt = t.event_format(name)
            for f in fmt.fields.values():
                if f.kind == "int":
                    assert f.dtype in (np.dtype(np.int64), np.dtype(np.uint64))
        fr = t.read({n: None for n in present_events(dat)})
        for name, df in fr.items():
            if not len(df):
                continue
            fmt = t.event_format(name)
            for fname in fmt.user_fields():
                f = fmt.fields[fname]
                col = df[field_column(fname)]
                if f.kind == "int":
                    assert col.dtype == f.dtype, (name, fname, col.dtype)
                elif len(col):
                    want = str if f.kind == "str" else bytes
                    assert all(isinstance(v, want) for v in col.head(50)), (name, fname)
                columns += 1
            assert df["cpu"].between(0, 1 << 16).all()
    print(f"{len(swept_dats)} traces: {columns} columns of the type of their field")


def test_print_buf(dat_files):
    for dat in dat_files:
        t = open_trace(dat)
        if "ftrace:print" not in t.event_names():
            continue
        df = t.read({"ftrace:print": ["buf"]})["ftrace:print"]
        assert not df["buf"].str.endswith("\n").any()


# ---------------------------------------------------------- damaged files


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def _attempt(path, events, seconds=300):
    """Open + read ``events``; returns 'ok' or the TraceError.  Any other
    exception or a hang fails the test. (A hang, not a slow read: a read of a fixture takes
    well under a second of CPU, and a machine at a load of 20 gives a process a tenth of a
    core.)"""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        t = open_trace(path)
        t.read({n: None for n in events})
        return "ok"
    except TraceError as e:
        assert str(e), "TraceError without a message"
        return e
    except _Timeout:
        pytest.fail(f"reading {path} took more than {seconds}s (hang?)")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _data_ranges(path):
    t = open_trace(path)
    return [(off, off + size) for _, off, size in t.file.buf.cpus if size]


def test_truncated(swept_dats, tmp_path):
    for dat in swept_dats:
        events = present_events(dat)
        data = Path(dat).read_bytes()
        ranges = _data_ranges(dat)
        cuts = {0, 3, 10, 12, 17, 40, 200, 1000, len(data) // 3, len(data) - 1}
        for lo, hi in ranges:
            cuts |= {lo, lo + 1, lo + 4096 + 7, (lo + hi) // 2, hi - 5}
        cuts = sorted(c for c in cuts if 0 <= c < len(data))
        for cut in cuts:
            p = tmp_path / "cut.dat"
            p.write_bytes(data[:cut])
            r = _attempt(p, events)
            assert r != "ok", f"{dat} cut at {cut}/{len(data)} read without error"
        print(f"{dat}: {len(cuts)} cuts, each refused")
        # cut in the middle of the last cpu's data: earlier events come back as partial
        lo, hi = max(ranges)
        p = tmp_path / "cut.dat"
        p.write_bytes(data[: (lo + hi) // 2])
        r = _attempt(p, events)
        assert isinstance(r, TraceError)
        if r.partial is not None:
            assert isinstance(r.partial, dict)


@pytest.mark.slow
def test_corrupt_bytes_fuzz(swept_dats, tmp_path):
    """Seeded random damage in headers, metadata and ring-buffer data."""
    rnd = random.Random(20240607)
    per_file = max(30, 240 // len(swept_dats))
    for dat in swept_dats:
        events = present_events(dat)
        data = Path(dat).read_bytes()
        regions = [(0, min(len(data), 4096))] + _data_ranges(dat)
        counts = {"ok": 0, "err": 0}
        for _ in range(per_file):
            b = bytearray(data)
            lo, hi = rnd.choice(regions)
            hi = min(hi, len(b))
            mode = rnd.choice(["bit", "word", "zero", "ff"])
            for _ in range(rnd.randint(1, 8)):
                j = rnd.randrange(lo, hi)
                if mode == "bit":
                    b[j] ^= 1 << rnd.randrange(8)
                elif mode == "word":
                    b[j : j + 4] = rnd.randbytes(4)
                elif mode == "zero":
                    b[j : j + 64] = bytes(len(b[j : j + 64]))
                else:
                    b[j : j + 16] = b"\xff" * len(b[j : j + 16])
            p = tmp_path / "fuzz.dat"
            p.write_bytes(bytes(b))
            r = _attempt(p, events)
            counts["ok" if r == "ok" else "err"] += 1
        print(f"{dat}: {per_file} damaged copies, {counts['err']} refused, {counts['ok']} read")
        assert counts["err"] > 0, counts


def test_not_a_trace(tmp_path):
    cases = {
        "empty": b"",
        "text": b"hello world\nthis is not a trace\n",
        "badmagic": b"\x17\x08\x44trazing6\x00" + bytes(100),
        "badversion": b"\x17\x08\x44tracing9\x00" + bytes(100),
        "binary": bytes(range(256)) * 8,
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(TraceError):
            t = open_trace(p)
            t.read({"ftrace:print": ["buf"]})
    with pytest.raises(TraceError):
        open_trace(tmp_path / "does-not-exist.dat")


# -------------------------------------------------- zlib re-compression


def recompress_v7(src, dst, algo="zlib"):
    """Write ``src`` (a trace-cmd v7 file) again with every compressed section
    and data chunk re-compressed with ``algo`` (only zlib).  Used when the
    local trace-cmd cannot make zlib files; the trace data stays the real one.
    """
    from nfsreaddir.trace import datfile as td
    from nfsreaddir.trace.raw import decompress

    assert algo == "zlib"
    t = open_trace(src)
    e = "little" if t.layout.endian == "<" else "big"
    mm = Path(src).read_bytes()

    def u(x, n):
        return x.to_bytes(n, e)

    def rd(off, n):
        return int.from_bytes(mm[off : off + n], e)

    def section(off):
        sid, flags, sdesc, size = rd(off, 2), rd(off + 2, 2), rd(off + 4, 4), rd(off + 8, 8)
        payload = mm[off + 16 : off + 16 + size]
        if flags & 1:
            cs, us = rd(off + 16, 4), rd(off + 20, 4)
            payload = decompress(t.file.compression, mm[off + 24 : off + 24 + cs], us, "section")
        return sid, flags, sdesc, payload

    out = bytearray(mm[:18])  # magic, "7\0", endian, long size, page size
    out += b"zlib\0" + zlib.ZLIB_VERSION.encode() + b"\0"
    opt_ptr_at = len(out)
    out += bytes(8)

    def put_section(sid, flags, sdesc, payload):
        off = len(out)
        if flags & 1:
            comp = zlib.compress(payload)
            body = u(len(comp), 4) + u(len(payload), 4) + comp
        else:
            body = payload
        out.extend(u(sid, 2) + u(flags, 2) + u(sdesc, 4) + u(len(body), 8) + body)
        return off

    # walk the options chain of the source
    opts = []
    off = rd(18 + len(t.file.compression) + 1 + len(t.file.compression_version) + 1, 8)
    while off:
        _, _, _, payload = section(off)
        pos, off = 0, 0
        while pos < len(payload):
            oid, size = (
                int.from_bytes(payload[pos : pos + 2], e),
                int.from_bytes(payload[pos + 2 : pos + 6], e),
            )
            data = payload[pos + 6 : pos + 6 + size]
            pos += 6 + size
            if oid == 0:
                off = int.from_bytes(data[:8], e)
                break
            opts.append((oid, data))
    new_opts = []
    for oid, data in opts:
        if oid in (15, 16, 17, 18, 19, 20, 21) and len(data) == 8:
            sid, flags, sdesc, payload = section(int.from_bytes(data, e))
            new_opts.append((oid, u(put_section(sid, flags, sdesc, payload), 8)))
        elif oid == td.OPT_BUFFER:
            soff = int.from_bytes(data[:8], e)
            p = 8
            name_end = data.index(b"\0", p)
            clock_end = data.index(b"\0", name_end + 1)
            p = clock_end + 1
            page_size = int.from_bytes(data[p : p + 4], e)
            ncpu = int.from_bytes(data[p + 4 : p + 8], e)
            cpus = []
            q = p + 8
            for _ in range(ncpu):
                cpus.append(
                    (
                        int.from_bytes(data[q : q + 4], e),
                        int.from_bytes(data[q + 4 : q + 12], e),
                        int.from_bytes(data[q + 12 : q + 20], e),
                    )
                )
                q += 20
            sid, flags, sdesc = rd(soff, 2), rd(soff + 2, 2), rd(soff + 4, 4)
            sec_off = len(out)
            out.extend(u(sid, 2) + u(flags, 2) + u(sdesc, 4) + bytes(8))
            new_cpus = []
            for cpu, coff, csize in cpus:
                out.extend(bytes((-len(out)) % page_size))
                start = len(out)
                if not csize:
                    new_cpus.append((cpu, 0, 0))
                    continue
                if flags & 1:
                    n = rd(coff, 4)
                    out.extend(u(n, 4))
                    pos = coff + 4
                    for _ in range(n):
                        cs, us = rd(pos, 4), rd(pos + 4, 4)
                        raw = decompress(
                            t.file.compression, mm[pos + 8 : pos + 8 + cs], us, "chunk"
                        )
                        comp = zlib.compress(raw)
                        out.extend(u(len(comp), 4) + u(us, 4) + comp)
                        pos += 8 + cs
                    new_cpus.append((cpu, start, len(out) - start - 4))
                else:
                    out.extend(mm[coff : coff + csize])
                    new_cpus.append((cpu, start, csize))
            out[sec_off + 8 : sec_off + 16] = u(len(out) - sec_off - 16, 8)
            nd = u(sec_off, 8) + data[8 : p + 4] + u(len(new_cpus), 4)
            for cpu, coff, csize in new_cpus:
                nd += u(cpu, 4) + u(coff, 8) + u(csize, 8)
            new_opts.append((oid, nd))
        else:
            new_opts.append((oid, data))
    body = b"".join(u(oid, 2) + u(len(d), 4) + d for oid, d in new_opts)
    body += u(0, 2) + u(8, 4) + u(0, 8)
    opt_off = put_section(0, 1, 0, body)
    out[opt_ptr_at : opt_ptr_at + 8] = u(opt_off, 8)
    Path(dst).write_bytes(bytes(out))


# ------------------------------------------- the compiled walk against the numpy walk

EXTRACT_CPU = __import__("nfsreaddir.trace.scan", fromlist=["Scan"]).Scan.extract_cpu

needs_compiled = needs_setup(
    __import__("nfsreaddir.trace.ringbuf", fromlist=["_ringbuf"])._ringbuf is not None,
    "the compiled walk (nfsreaddir._ringbuf) is not built",
)


@pytest.fixture
def numpy_walk(monkeypatch):
    """A function that runs a reader call with the numpy walk (the oracle)."""
    from nfsreaddir.trace import ringbuf

    def run(fn):
        with monkeypatch.context() as m:
            m.setattr(ringbuf, "compiled", lambda: None)
            return fn()

    return run


@pytest.mark.slow
@needs_compiled
def test_compiled_reader_equals_numpy_reader(swept_dats, numpy_walk):
    """Every event and field of every fixture (of each kind, in make test), the lost-events
    markers and the counts are the same from both walks."""
    for dat in swept_dats:
        events = present_events(dat)
        t, fr = read_all(dat, events=events)
        t2, fr2 = numpy_walk(lambda dat=dat, events=events: read_all(dat, events=events))
        frames_equal(fr, fr2, f"{dat} compiled vs numpy")
        assert t.info["lost_events"] == t2.info["lost_events"]
        assert t.info["lost_total"] == t2.info["lost_total"]
        assert t.event_counts() == numpy_walk(open_trace(dat).event_counts)


def extractable(t, events):
    """{event: its fields the one-pass compiled extract decodes} (integers, __data_loc and
    __rel_loc strings) of the events of ``t`` among ``events``."""
    out = {}
    for ev in events:
        fmt = t.event_format(ev)
        if fmt is not None:
            out[ev] = [
                f
                for f in fmt.user_fields()
                if (fmt.fields[f].loc is None and fmt.fields[f].kind == "int")
                or (fmt.fields[f].loc in ("data", "rel") and fmt.fields[f].kind == "str")
            ]
    return out


@pytest.mark.slow
@needs_compiled
def test_extract_equals_numpy_reader(swept_dats, numpy_walk, monkeypatch):
    """The one-pass compiled extract (integers and __data_loc strings, straight into the
    columns) against the numpy walk: every event of every fixture (of each kind, in make
    test), field by field, with the base columns, the lost-events markers, and the pieces of
    read_pieces()."""
    from nfsreaddir.trace import scan

    used = []
    monkeypatch.setattr(
        scan.Scan, "extract_cpu", lambda self, *a: used.append(1) or EXTRACT_CPU(self, *a)
    )
    for dat in swept_dats:
        t = open_trace(dat)
        req = extractable(t, present_events(dat))
        used.clear()
        fr = t.read(req)
        assert used, f"{dat}: the extract was not used"
        t2 = open_trace(dat)
        fr2 = numpy_walk(lambda t2=t2, req=req: t2.read(req))
        frames_equal(fr, fr2, f"{dat} extract vs numpy")
        assert t.info["lost_events"] == t2.info["lost_events"], dat
        # the pieces: one per CPU (or stretch of it) from the extract, per block from the
        # numpy walk; joined, the same rows in CPU then file order, and by a stable sort by
        # time read()'s rows
        got = open_trace(dat).read_pieces(req, base=("ts",))
        want = numpy_walk(lambda dat=dat, req=req: open_trace(dat).read_pieces(req, base=("ts",)))
        for ev in req:
            joined = {}
            for c in got[ev][0] if got[ev] else ():
                v, w = (joined_column([p[c] for p in pieces]) for pieces in (got[ev], want[ev]))
                assert np.array_equal(v, w), (dat, ev, c)
                joined[c] = v
            if joined:
                order = np.argsort(joined["ts"], kind="stable")
                for c, v in joined.items():
                    col = fr[ev][c]
                    assert np.array_equal(v[order], np.asarray(col)), (dat, ev, c)
            else:
                assert not len(fr[ev]) and not want[ev], (dat, ev)


def joined_column(parts):
    """One array of the values of column pieces (strings: decoded from their codes)."""
    return np.concatenate(
        [
            np.asarray(p.values, object)[p.codes] if hasattr(p, "codes") else np.asarray(p)
            for p in parts
        ]
    )


@needs_compiled
def test_extract_widens_string_codes_as_the_dictionary_grows():
    """A string column's codes start a byte wide and are widened in place (to int16 past
    127 values, int32 past 32,767) with the rows already written kept: pages made here of
    one event whose __data_loc string takes 40,000 values, each once then all again (so
    codes written before both widenings are read back)."""
    import struct

    from nfsreaddir import _ringbuf

    P, data_off, evid = 4096, 16, 7
    names = [f"s{i:05d}" for i in range(40_000)] * 2
    pages, page, ts = [], bytearray(), 1000

    def close():
        pages.append(struct.pack("<QQ", ts, len(page)) + page.ljust(P - data_off, b"\0"))

    for name in names:
        s = name.encode() + b"\0"
        # common_type, flags, preempt_count, pid; then the __data_loc word: offset | len << 16
        data = struct.pack("<HBBiI", evid, 0, 0, 1, 12 | len(s) << 16) + s
        data = data.ljust(-(-len(data) // 4) * 4, b"\0")
        rec = struct.pack("<I", len(data) // 4 | 1 << 5) + data  # type_len, time delta 1
        if len(page) + len(rec) > P - data_off:
            close()
            page = bytearray()
        page += rec
    close()
    slots = np.full(1 << 16, -1, np.int16)
    slots[evid] = 0
    ext = _ringbuf.Extract(slots, [[(1, 8, 4, False, False, 1)]])
    marks, bad, why, detail = ext.walk(
        np.frombuffer(b"".join(pages), np.uint8), P, 8, 8, data_off, False, 8, 0, 2
    )
    assert why is None and not marks
    n = ext.rows(0)
    mem = ext.take(0, 0)
    assert n == len(names) and memoryview(mem).nbytes == 4 * n
    values = ext.values(0, 0)
    codes = np.frombuffer(mem, np.int32, count=n)
    assert len(values) == 40_000 and [values[c] for c in codes] == names


def damaged_blocks(dat_files, seed, copies):
    """(dat, trace, cpu, block) for `copies` copies of every ring-buffer block of each trace,
    each with 1-20 bytes set at random (seeded per trace: the same damage on every run,
    whatever other fixtures there are)."""
    for dat in dat_files:
        rnd = random.Random(f"{seed}:{os.path.relpath(dat, FIXTURES)}")
        t = open_trace(dat)
        b = t.file.buf
        for cpu, off, size in b.cpus:
            for block0 in t.streams.blocks(cpu, off, size):
                for _ in range(copies):
                    block = block0.copy()
                    for _ in range(rnd.randint(1, 20)):
                        block[rnd.randrange(len(block))] = rnd.randrange(256)
                    yield dat, t, cpu, block


@pytest.mark.slow
@needs_compiled
def test_extract_equals_numpy_walk_on_damaged_pages(swept_dats, numpy_walk):
    """Seeded random bytes in the ring-buffer pages: the extract keeps the records the
    numpy walk lists (time stamps and ids), and finds the same lost-events markers and the
    same damage."""
    from nfsreaddir import _ringbuf
    from nfsreaddir.trace.page import damage_text

    blocks = 0
    for dat, t, cpu, block in damaged_blocks(swept_dats, 20261124, 10):
        blocks += 1
        b, hp, idf = t.file.buf, t.file.header_page, t.file.formats.id_field()
        lost = []
        parts = numpy_walk(
            lambda t=t, block=block, cpu=cpu, lost=lost: list(t.walker.walk(block, None, cpu, lost))
        )
        ids = np.concatenate([np.asarray(p[0][3], np.int64) for p in parts])
        ts = np.concatenate([np.asarray(p[0][1], np.uint64) for p in parts])
        keep = ids != (1 << 8 * idf.size) - 1
        # every event into one slot, its id as the one column
        slots = np.zeros((1 << (8 * idf.size)) if idf.size <= 2 else (1 << 20), np.int16)
        slots[-1] = -1
        ext = _ringbuf.Extract(slots, [[(0, idf.offset, idf.size, False, False, 8)]])
        marks, bad, why, detail = ext.walk(
            block,
            b.page_size,
            hp["commit_off"],
            hp["commit_size"],
            hp["data_off"],
            t.layout.endian == ">",
            t.file.long_size,
            idf.offset,
            idf.size,
        )
        n = ext.rows(0)
        got_ts = np.frombuffer(ext.take(0, -1), np.uint64, count=n)
        got_ids = np.frombuffer(ext.take(0, 0), np.uint64, count=n)
        assert np.array_equal(got_ts, ts[keep]), dat
        assert np.array_equal(got_ids.astype(np.int64), ids[keep]), dat
        assert [{"cpu": cpu, "ts": m[1], "count": m[2]} for m in marks] == lost
        assert damage_text(cpu, why, bad, detail, b.page_size - hp["data_off"]) == parts[-1][1], dat
    print(f"{len(swept_dats)} traces: {blocks} damaged blocks, the same from both")


@pytest.mark.slow
@needs_compiled
def test_compiled_walk_equals_numpy_walk_on_damaged_pages(swept_dats, numpy_walk):
    """Seeded random bytes in the ring-buffer pages: both walks list the same records, the
    same lost-events markers and the same damage (message included)."""
    blocks = 0
    for dat, t, cpu, block in damaged_blocks(swept_dats, 20261123, 20):
        blocks += 1
        got, want = [], []
        for out, run in ((got, lambda f: f()), (want, numpy_walk)):
            lost = []
            # the compiled walk reuses its arrays from part to part: each is copied as it
            # comes (a block of more records than the arrays hold comes in several parts)
            parts = run(
                lambda t=t, block=block, cpu=cpu, lost=lost: [
                    (tuple(np.array(a) for a in cols), damage)
                    for cols, damage in t.walker.walk(block, None, cpu, lost)
                ]
            )
            ids = np.concatenate([np.asarray(p[0][3], np.int64) for p in parts])
            # the largest id marks "no event" in the numpy walk: a record whose
            # id was damaged into it counts as none in either
            keep = ids != (1 << 8 * t.file.formats.id_field().size) - 1
            cols = [
                np.concatenate(
                    [np.asarray(p[0][i], np.int64 if i != 1 else np.uint64) for p in parts]
                )[keep]
                for i in range(3)
            ]
            out += [cols, ids[keep], lost, parts[-1][1]]
        for g, w in zip(got[0], want[0]):
            assert np.array_equal(g, w), dat
        assert np.array_equal(got[1], want[1]) and got[2:] == want[2:], dat
    print(f"{len(swept_dats)} traces: {blocks} damaged blocks, the same from both walks")


def test_compiled_walk_takes_the_page_format_of_page_py():
    """The ring-buffer page is defined once, in trace/page.py: the compiled walk's #defines
    are the same values."""
    from nfsreaddir.trace import page

    src = (Path(page.__file__).parent.parent / "csrc/ringbuf/ringbuf.h").read_text()
    defines = dict(re.findall(r"^#define ([A-Z_]+) (\(.*\)|\d+)$", src, re.M))
    names = [
        "COMMIT_MASK",
        "MISSED_EVENTS",
        "MISSED_STORED",
        "TS_SHIFT",
        "TS_MSB",
        "TYPE_DATA_MAX",
        "TYPE_PADDING",
        "TYPE_TIME_EXTEND",
        "TYPE_TIME_STAMP",
    ]
    for name in names:
        value = eval(re.sub(r"(\d)u?l*l?\b", r"\1", defines[name]))
        assert value == getattr(page, name), name


def test_without_the_compiled_walk_an_error_unless_numpy_is_asked_for(dat_files):
    """Where the extension is not built, reading a trace is an error that says so and how to
    read without it (before: the numpy walk, a notice on stderr, whatever went wrong at the
    build); NFSRT_READER=numpy reads the same events through the numpy walk, silently."""
    import json as _json
    import sys as _sys

    code = (
        "import sys; sys.modules['nfsreaddir._ringbuf'] = None\n"
        "from nfsreaddir.trace import open_trace, TraceError\n"
        "import json\n"
        "for p in sys.argv[1:]:\n"
        "    t = open_trace(p)\n"
        "    try:\n"
        "        cols = t.read(list(t.event_counts()))\n"
        "    except TraceError as e:\n"
        "        sys.exit(str(e))\n"
        "    print(json.dumps({k: len(v) for k, v in cols.items()}))\n"
    )
    paths = [str(p) for p in dat_files[:2]]
    r = subprocess.run(
        [_sys.executable, "-c", code, *paths], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 1 and not r.stdout, r.stderr
    assert "nfsreaddir._ringbuf is not built" in r.stderr and "NFSRT_READER=numpy" in r.stderr
    r = subprocess.run(
        [_sys.executable, "-c", code, *paths],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, NFSRT_READER="numpy"),
    )
    assert r.returncode == 0 and not r.stderr, r.stderr
    for p, line in zip(paths, r.stdout.splitlines()):
        t = open_trace(p)
        assert _json.loads(line) == {k: len(v) for k, v in t.read(list(t.event_counts())).items()}


# ------------------------------------------------- zstd chunks: libzstd vs python-zstandard

needs_inflate = needs_setup(
    __import__("nfsreaddir.trace.streams", fromlist=["_zchunks"])._zchunks is not None,
    "the compiled inflate (nfsreaddir._zchunks, libzstd) is not built",
)


def zstd_chunks(path):
    """(cpu, [(offset of the chunk header, csize, usize)]) of every CPU stream of a v7 zstd
    trace."""
    import struct

    t = open_trace(path)
    data = Path(path).read_bytes()
    out = []
    for cpu, off, size in t.file.buf.cpus:
        if not size:
            continue
        n = struct.unpack_from(t.layout.endian + "I", data, off)[0]
        pos, chunks = off + 4, []
        for _ in range(n):
            csize, usize = struct.unpack_from(t.layout.endian + "II", data, pos)
            chunks.append((pos, csize, usize))
            pos += 8 + csize
        out.append((cpu, chunks))
    return t, out


def chunky(dat_files, n=3):
    """The ``n`` traces with the most zstd chunks in one stream (several blocks' worth)."""
    most = {dat: max((len(c) for _, c in zstd_chunks(dat)[1]), default=0) for dat in dat_files}
    return sorted(dat_files, key=lambda d: -most[d])[:n]


def read_both_ways(path, events, monkeypatch):
    """(message, event counts, frames) of a partial read by the compiled inflate and by
    python-zstandard."""
    from nfsreaddir.trace import streams

    got = []
    for inflate in (True, False):
        monkeypatch.setattr(streams, "_inflate_wanted", lambda inflate=inflate: inflate)
        try:
            open_trace(path).read({n: None for n in events})
            got.append((None, None))
        except TraceError as e:
            assert e.partial is not None, str(e)
            got.append((str(e), e.partial))
    return got


@needs_inflate
def test_inflate_equals_python_zstd_on_damaged_chunks(dat_files, tmp_path, monkeypatch):
    """Chunks damaged in each way the inflate tells apart (implausible size, data past the
    stream's end, a frame of another size, corrupt data, a frame that gives less than the
    file says): both paths keep the same events and name the same damage
    (libzstd and python-zstandard word the corruption itself differently)."""
    import struct

    seen = set()
    for dat in chunky(dat_files):
        events = present_events(dat)
        t, streams = zstd_chunks(dat)
        data = Path(dat).read_bytes()
        P = t.file.buf.page_size
        for _, chunks in streams:
            if len(chunks) < 3:
                continue
            pos, csize, usize = chunks[len(chunks) // 2]
            hdr = lambda c, u, t=t: struct.pack(t.layout.endian + "II", c, u)  # noqa: E731
            cases = {
                "implausible size": hdr(csize, usize + 1),
                "needs": hdr(csize + len(data), usize),
                "corrupt": None,
                # a valid frame of one page in the chunk's place, its size in its header
                # or not
                "zstd frame holds": True,
                "gave": False,
            }
            for label, new in cases.items():
                b = bytearray(data)
                if new is None:  # the data after the frame header zeroed
                    b[pos + 8 + 12 : pos + 8 + csize] = bytes(csize - 12)
                elif isinstance(new, bool):
                    import zstandard

                    frame = zstandard.ZstdCompressor(write_content_size=new).compress(bytes(P))
                    b[pos : pos + 8 + csize] = (
                        hdr(len(frame), usize) + frame + bytes(csize - len(frame))
                    )
                else:
                    b[pos : pos + 8] = new
                p = tmp_path / "chunk.dat"
                p.write_bytes(bytes(b))
                (msg_c, part_c), (msg_p, part_p) = read_both_ways(p, events, monkeypatch)
                assert msg_c and msg_p, (dat, label)
                assert label in msg_c, (dat, label, msg_c)
                if label == "corrupt":  # (the libraries' own words, then the same)
                    msg_c, msg_p = (re.sub(r"corrupt \(.*\)\)", "", m) for m in (msg_c, msg_p))
                assert msg_c == msg_p, label
                frames_equal(part_c, part_p, f"{dat} {label}")
                seen.add(label)
    assert seen == set(cases), seen


@needs_inflate
def test_inflate_in_blocks_smaller_and_larger_than_a_chunk(dat_files, monkeypatch):
    """Blocks of one page (every chunk larger: the block grows) and of a few chunks: the
    same frames as the usual blocks."""
    from nfsreaddir.trace import streams

    for dat in chunky(dat_files):
        events = present_events(dat)
        _, want = read_all(dat, events=events)
        for size in (4096, 3 * max(u for _, ch in zstd_chunks(dat)[1] for _, _, u in ch)):
            monkeypatch.setattr(streams, "BLOCK_BYTES", size)
            _, got = read_all(dat, events=events)
            frames_equal(got, want, f"{dat} blocks of {size}")


# ------------------------------------ one CPU's stream read in stretches by parallel threads


def read_request(path, req, monkeypatch, stretch):
    """(message or None, frames or partial frames, lost events, pieces) of ``path`` read
    by one thread a whole stream at a time (``stretch`` None), or by two threads with every
    stream cut into stretches of ``stretch`` bytes."""
    from nfsreaddir import tuning

    with monkeypatch.context() as m:
        m.setattr(tuning, "reader_threads", lambda: 1 if stretch is None else 2)
        m.setattr(tuning, "reader_stretch_bytes", lambda: stretch or 1 << 40)
        m.setattr(tuning, "STRETCH_IDLE", -1.0)  # cut even streams of one size
        t = open_trace(path)
        try:
            frames, msg = t.read(req), None
        except TraceError as e:
            assert e.partial is not None, str(e)
            frames, msg = e.partial, str(e)
        pieces = None
        if msg is None:
            pieces = open_trace(path).read_pieces(req, base=("ts",))
    return msg, frames, t.info["lost_events"], pieces


def with_uncompressed(dat_files, converted):
    """The fixtures and a v6 (uncompressed: stretches of pages) copy of the largest."""
    return list(dat_files) + [converted(max(dat_files, key=os.path.getsize), 6)]


def test_streams_are_cut_where_whole_ones_would_leave_threads_idle():
    """The share of the read that whole streams, taken in order by the first free thread,
    leave idle: what decides whether to cut them into stretches."""
    from nfsreaddir import tuning
    from nfsreaddir.trace.scan import _idle_share

    assert _idle_share([119, 119], 2) == 0 == _idle_share([10] * 8, 2)
    assert _idle_share([100], 2) == 0.5 and _idle_share([5, 1, 1, 1], 2) == pytest.approx(0.2)
    # the sixths of a recording whose workload moved between the CPUs (KiB stored)
    assert _idle_share([3535, 1462], 2) > tuning.STRETCH_IDLE > _idle_share([19, 20], 2)
    assert _idle_share([], 2) == 0


@needs_compiled
def test_stretches_of_a_stream_read_as_the_whole_stream(swept_dats, converted, monkeypatch):
    """Each CPU's stream cut at every zstd chunk or page and read by two threads (so that
    a trace whose events sit on one CPU is not read by one thread): the same rows, fields,
    lost-events markers, and pieces in the same order as each stream read whole."""
    from nfsreaddir.trace import streams

    cut = []
    stretches = streams.Streams.stretches
    monkeypatch.setattr(
        streams.Streams, "stretches", lambda self, *a: cut.append(stretches(self, *a)) or cut[-1]
    )
    streams_cut = 0
    for dat in with_uncompressed(swept_dats, converted):
        req = extractable(open_trace(dat), present_events(dat))
        cut.clear()
        whole = read_request(dat, req, monkeypatch, None)
        assert not cut
        got = read_request(dat, req, monkeypatch, 1)
        streams_cut += sum(len(c) > 1 for c in cut)
        assert got[0] is whole[0] is None
        frames_equal(got[1], whole[1], f"{dat} stretches vs whole")
        assert got[2] == whole[2], dat
        for ev in req:
            for c in got[3][ev][0] if got[3][ev] else ():
                assert np.array_equal(
                    *(joined_column([p[c] for p in r[3][ev]]) for r in (got, whole))
                ), (dat, ev, c)
    assert streams_cut >= 2, "the fixtures' streams were not cut into stretches"


@needs_compiled
def test_stretches_stop_where_the_stream_is_damaged(swept_dats, converted, tmp_path, monkeypatch):
    """A damaged zstd chunk in the middle of a stream (corrupt data, an implausible size), a
    page with a garbage header and a file cut short: read in stretches, the events before
    the damage and nothing after it, with the message of the stream read whole (pages
    counted from the start of the CPU's data)."""
    import struct

    seen = set()
    for dat in with_uncompressed(swept_dats, converted):
        data = Path(dat).read_bytes()
        t = open_trace(dat)
        req = extractable(t, present_events(dat))
        lo, hi = max(_data_ranges(dat))
        cases = {"cut short": data[: (lo + hi) // 2]}
        if not t.file.buf.compressed:
            # a page in the middle of the largest stream with a commit size past the page
            _, off, size = max(t.file.buf.cpus, key=lambda c: c[2])
            P, hp = t.file.buf.page_size, t.file.header_page
            at = off + (size // P // 2) * P + hp["commit_off"]
            b = bytearray(data)
            b[at : at + hp["commit_size"]] = (P * 3).to_bytes(hp["commit_size"], "little")
            cases["garbage header"] = bytes(b)
        if t.file.compression == "zstd":
            cpu, chunks = max(zstd_chunks(dat)[1], key=lambda c: len(c[1]))
            pos, csize, usize = chunks[len(chunks) // 2]
            b = bytearray(data)
            b[pos + 8 + 12 : pos + 8 + csize] = bytes(csize - 12)
            cases["corrupt"] = bytes(b)
            b = bytearray(data)
            b[pos + 4 : pos + 8] = struct.pack(t.layout.endian + "I", usize + 1)
            cases["implausible size"] = bytes(b)
        for label, damaged in cases.items():
            p = tmp_path / "damaged.dat"
            p.write_bytes(damaged)
            try:
                open_trace(p)
            except TraceError:  # (v7: the options section after the data is cut off)
                continue
            whole = read_request(p, req, monkeypatch, None)
            got = read_request(p, req, monkeypatch, 1)
            assert whole[0] and got[0] == whole[0], (dat, label, got[0], whole[0])
            frames_equal(got[1], whole[1], f"{dat} {label}")
            assert got[2] == whole[2], (dat, label)
            seen.add(label)
    assert seen == {"cut short", "corrupt", "implausible size", "garbage header"}, seen


def test_without_the_compiled_inflate_an_error_unless_numpy_is_asked_for(dat_files):
    """Where the compiled inflate is not built, reading a zstd trace is an error that says so
    (before: python-zstandard, a notice on stderr); NFSRT_READER=numpy reads the same events
    through python-zstandard, silently."""
    import sys as _sys

    code = (
        "import sys; sys.modules['nfsreaddir._zchunks'] = None\n"
        "from nfsreaddir.trace import open_trace, TraceError\n"
        "for p in sys.argv[1:]:\n"
        "    t = open_trace(p)\n"
        "    try:\n"
        "        cols = t.read(list(t.event_counts()))\n"
        "    except TraceError as e:\n"
        "        sys.exit(str(e))\n"
        "    print(sorted((k, len(v)) for k, v in cols.items()))\n"
    )
    paths = [str(p) for p in dat_files[:2]]
    r = subprocess.run(
        [_sys.executable, "-c", code, *paths], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 1 and not r.stdout, r.stderr
    assert "nfsreaddir._zchunks is not built" in r.stderr, r.stderr
    r = subprocess.run(
        [_sys.executable, "-c", code, *paths],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, NFSRT_READER="numpy"),
    )
    assert r.returncode == 0 and not r.stderr, r.stderr
    for p, line in zip(paths, r.stdout.splitlines()):
        t = open_trace(p)
        assert line == str(sorted((k, len(v)) for k, v in t.read(list(t.event_counts())).items()))


# ------------------------------------------------- the wanted events a window of time at a time


@needs_compiled
def test_windows_hold_what_one_read_holds(swept_dats, converted, monkeypatch):
    """read_windows() with a page of each CPU a step (many windows; CPUs read by two
    threads): every window's rows come after the windows' before it, and the windows' rows,
    sorted stably by time, are read_columns()'s, every column (base columns too); the lost
    events are the same. A damaged trace stops the windows (NotWindowed), never a wrong row."""
    from nfsreaddir import tuning
    from nfsreaddir.trace import windows
    from nfsreaddir.trace.base import NotWindowed

    monkeypatch.setattr(windows, "WINDOW_BLOCK_BYTES", 4096)
    monkeypatch.setattr(tuning, "reader_threads", lambda: 2)
    windowed = 0
    for dat in with_uncompressed(swept_dats, converted):
        req = extractable(open_trace(dat), present_events(dat))
        t = open_trace(dat)
        try:
            made = list(t.read_windows(req))
        except NotWindowed:
            with pytest.raises(TraceError):
                open_trace(dat).read_columns(req)
            continue
        windowed += 1
        whole = open_trace(dat)
        want = whole.read_columns(req)
        assert t.info["lost_events"] == whole.info["lost_events"], dat
        spans = [
            (min(ts), max(ts))
            for w in made
            if (
                ts := [
                    x
                    for ps in w.values()
                    for _, p in ps
                    for x in (p["ts"].min(), p["ts"].max())
                    if len(p["ts"])
                ]
            )
        ]
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), dat
        for ev, cols in want.items():
            pieces = [p for w in made for _, p in w[ev]]
            ts = joined_column([p["ts"] for p in pieces] or [np.zeros(0, np.int64)])
            order = np.argsort(ts, kind="stable")
            for c, col in cols.items():
                got = joined_column([p[c] for p in pieces]) if pieces else np.zeros(0)
                assert np.array_equal(got[order], joined_column([col])), (dat, ev, c)
    assert windowed >= 2
