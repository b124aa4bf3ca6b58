"""Parser of `trace-cmd report` / `trace-cmd report -R` text.

Real output: `trace-cmd report` of the fixtures (or of a host trace recorded by
the host_trace fixture of test_tracedat.py when there are no fixtures yet).
A few inline lines written in the kernel's NFS/SUNRPC print formats check the
normalisation rules one by one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import conftest
from conftest import swept_fixture
from nfsreaddir.trace import TraceError, field_column, open_trace
from nfsreaddir.trace.arrays import Strs
from nfsreaddir.trace.base import Trace, bare_name
from nfsreaddir.trace.text import ReportText, looks_like_report
from test_tracedat import (  # noqa: F401 (the fixtures)
    FIXTURES,
    TRACE_CMD,
    dat_files,
    host_trace,
    kinds_of,
    needs_trace_cmd,
    parsed_report,
)

NFS_SYSTEMS = ("nfs", "nfs4", "sunrpc")


def _names_by_system(dat):
    t = open_trace(dat)
    present = t.event_counts()
    return t, present


def printed_kinds_of(path):
    """test_tracedat's kinds of a trace, and the print format of each event with records: the
    default report writes each event's line by its print format, -R by its layout."""
    t = open_trace(path)
    return kinds_of(path) | {("print", ev, t.event_format(ev).print_fmt) for ev in t.event_counts()}


# The comparisons below parse each report of every fixture whole (328 s for the three at load 2,
# most of the time of test_reporttext, when each parsed its own: now each report is parsed once
# in a run, conftest.report_frames): make test reads one fixture of each kind (every event
# layout and print format, format, page size, instance and kind of loss: 12 of 67 files,
# 2026-11-28), make test-full every fixture.
swept_reports = swept_fixture("swept_reports", printed_kinds_of, " (print formats too)")


@pytest.mark.slow
@needs_trace_cmd
def test_default_and_raw_agree(swept_reports):
    """Both report styles give the same records; NFS/SUNRPC compound forms of
    the default style normalise to the -R field values."""
    for dat in swept_reports:
        t, present = _names_by_system(dat)
        raw_info, fr_raw = parsed_report(dat, raw=True)
        def_info, fr_def = parsed_report(dat, raw=False)
        assert raw_info["format"] == "report text -R"
        assert def_info["format"] == "report text"
        assert raw_info["cpus"] == def_info["cpus"]
        checked = 0
        for full, count in present.items():
            system, name = full.split(":", 1)
            assert name in fr_raw and name in fr_def, (dat, full, "not in the report")
            a, b = fr_raw[name], fr_def[name]
            assert len(a) == len(b) == count, (dat, full, len(a), len(b), count)
            for c in ("ts", "cpu", "pid", "comm"):
                assert (a[c].to_numpy() == b[c].to_numpy()).all(), (dat, full, c)
            if system not in NFS_SYSTEMS + ("nfsprobe",) and full != "ftrace:print":
                continue
            fmt = t.event_format(full)
            for fname in fmt.user_fields():
                if fname not in a:
                    continue
                x = a[fname]
                assert fname in b or not pd.api.types.is_integer_dtype(x), (
                    f"{dat} {full}: default report parse lacks integer field {fname}"
                )
                if fname not in b:
                    continue
                y = b[fname]
                if pd.api.types.is_integer_dtype(x) and pd.api.types.is_integer_dtype(y):
                    assert (x.to_numpy() == y.to_numpy()).all(), (dat, full, fname)
                    checked += 1
                elif not pd.api.types.is_integer_dtype(x) and not pd.api.types.is_integer_dtype(y):
                    if fname != "verifier":
                        assert x.tolist() == y.tolist(), (dat, full, fname)
            # the compound forms the brief names
            for need in ("dev", "fileid", "task_id", "client_id"):
                if need in a and need in b:
                    assert (a[need].to_numpy() == b[need].to_numpy()).all(), (dat, full, need)
            if full == "ftrace:print":
                assert (a["buf"].to_numpy() == b["buf"].to_numpy()).all(), dat
        print(f"{dat}: {checked} NFS/SUNRPC integer columns agree between report and -R")


@pytest.mark.slow
@needs_trace_cmd
def test_text_matches_binary(swept_reports):
    """Typed -R parse equals the binary decode for integer and string fields."""
    for dat in swept_reports:
        t, present = _names_by_system(dat)
        _, fr_t = parsed_report(dat, raw=True)
        _, fr_s = parsed_report(dat, raw=True, typed=False)
        fr_b = t.read({n: None for n in present})
        for full in present:
            name = bare_name(full)
            assert name in fr_t, (dat, full, "not in the report")
            a, b = fr_t[name], fr_b[full]
            assert len(a) == len(b)
            for c in ("ts", "cpu", "pid"):
                assert (a[c].to_numpy() == b[c].to_numpy()).all(), (dat, full, c)
            fmt = t.event_format(full)
            for f in fmt.fields.values():
                col = field_column(f.name)
                if f.name.startswith("common_") or col not in a:
                    continue
                x = a[col]
                if f.kind == "int" and pd.api.types.is_integer_dtype(x):
                    mod = 1 << (8 * f.size)
                    want = [int(v) % mod for v in b[col]]
                    got = [int(v) % mod for v in x]
                    if got != want:
                        # -R prints %x fields without 0x: all-digit values are ambiguous
                        raw = [str(v) for v in fr_s[name][col]]
                        assert [int(v, 16) % mod for v in raw] == want, (
                            f"{dat} {full}.{f.name}: {got[:3]} vs {want[:3]}"
                        )
                elif f.kind == "str":
                    # the text has no types: a string field of digits only (a file named
                    # "17") parses as integers when typed; compare the text as printed
                    x = fr_s[name][col]
                    assert [s.strip() for s in x] == [s.strip() for s in b[col]], (full, f.name)


@pytest.mark.slow
@needs_trace_cmd
def test_six_decimal_timestamps(swept_reports):
    for dat in swept_reports:
        _, nine = parsed_report(dat, raw=False)
        six = ReportText(conftest.report_made(TRACE_CMD, dat)).read({n: [] for n in nine})
        for n in nine:
            ts6, ts9 = six[n]["ts"].to_numpy(), nine[n]["ts"].to_numpy()
            assert (ts6 % 1000 == 0).all()
            assert (np.abs(ts6 - ts9) <= 500).all(), n


# ------------------------------------------------ inline normalisation cases

LINES_DEFAULT = """\
version = 7
cpus=2
CPU 1 is empty
          ls-1234  [000]   100.000001: nfs_readdir_cache_fill: fileid=00:2e:1234 fhandle=0x1a2b3c4d version=5 cookie:verifier=0x10:0x00000000 cache_index=3 dtsize=1048576
          ls-1234  [000]   100.000002: nfs_invalidate_mapping_enter: fileid=00:2e:1234 fhandle=0x1a2b3c4d version=5
    paced-lister-510   [001]   100.000011: nfs_readdir_cache_fill: fileid=00:3c:12 fhandle=0x733f6154 version=1927654783227688960 cookie=00000000000000ff:0x1f cache_index=2 dtsize=65536
    paced-lister-449   [000]   100.000012: nfs4_proc_readdir:    (ffffffffc07f2bf0) cookie=0 count=32768 plus=1
          ls-1234  [000]   100.000003: rpc_request:          task:00000012@00000003 nfsv4 READDIR (async)
          ls-1234  [000]   100.000004: rpc_request:          task:18@3 nfsv3 READDIRPLUS (sync)
 kworker/u4:4-145   [001]   100.000004: rpc_stats_latency:    task:135@4 xid=0x2225ae4e nfsaclv3 GETACL backlog=1555 rtt=7846 execute=9618
            nfsd-244   [001]   100.000004: kfree:                 call_site=nfsd4_open+0x541 ptr=0xffff96c9829cba00
            nfsd-244   [001]   100.000004: kfree:                 call_site=nfsd4_encode_fattr+0x477 ptr=(nil)
CPU:0 [12 EVENTS DROPPED]
    kworker/0:1-77    [000]   100.000005: nfs4_readdir:         error=-5 (EIO) fileid=00:2e:1234 fhandle=0x1a2b3c4d
 bash (x)-99      [000]   100.000006: print:                tracing_mark_write: phase start a=b c
          ls-1234  [000]   100.000007: nfs_lookup_enter:     flags=0x4 (LOOKUP_FOLLOW) name=00:2e:77/foo bar
          ls-1234  [000]   100.000008: readdir_probe:        (nfs_readdir+0x0) cookie=4096 name="abc d"
tdtest:       ls-1234  [000]   100.000009: print:                tracing_mark_write: in instance
"""  # noqa: E501 (report lines as trace-cmd prints them)


@pytest.fixture
def default_text(tmp_path):
    p = tmp_path / "report.txt"
    p.write_text(LINES_DEFAULT)
    return p


def test_normalisation(default_text):
    t = open_trace(default_text)
    assert t.info["format"] == "report text"
    assert t.info["cpus"] == 2 and t.info["file_version"] == 7
    names = t.event_names()
    assert {
        "nfs:nfs_readdir_cache_fill",
        "sunrpc:rpc_request",
        "ftrace:print",
        "nfs4:nfs4_readdir",
    } <= names
    fr = t.read(
        {
            "nfs:nfs_readdir_cache_fill": [
                "dev",
                "fileid",
                "cookie",
                "verifier",
                "index",
                "dtsize",
                "fhandle",
            ],
            "nfs:nfs_invalidate_mapping_enter": ["dev", "fileid"],
            "sunrpc:rpc_request": ["task_id", "client_id"],
            "nfs4:nfs4_readdir": ["error", "dev", "fileid"],
            "ftrace:print": ["buf"],
            "nfsprobe:readdir_probe": ["cookie", "name"],
            "nfs:nfs_lookup_enter": ["flags", "name", "dev", "dir"],
            "nfs:not_there": ["dev"],
        }
    )
    r = fr["nfs:nfs_readdir_cache_fill"].iloc[0]
    assert r["ts"] == 100_000_001_000 and r["cpu"] == 0 and r["pid"] == 1234 and r["comm"] == "ls"
    assert r["dev"] == (0 << 20 | 0x2E) and r["fileid"] == 1234 and r["fhandle"] == 0x1A2B3C4D
    assert r["cookie"] == 0x10 and r["verifier"] == "0x00000000" and r["index"] == 3
    assert fr["nfs:nfs_invalidate_mapping_enter"]["dev"].tolist() == [0x2E]
    rq = fr["sunrpc:rpc_request"]
    assert rq["task_id"].tolist() == [0x12, 18] and rq["client_id"].tolist() == [3, 3]
    rq = t.read({"rpc_request": ["version", "procname", "async", "progname"]})["rpc_request"]
    assert rq["version"].tolist() == [4, 3] and rq["async"].tolist() == [1, 0]
    assert rq["procname"].tolist() == ["READDIR", "READDIRPLUS"]
    assert rq["progname"].tolist() == ["nfs", "nfs"]
    # rpc_stats_latency prints the program and its version as one word after the xid
    lat = t.read({"rpc_stats_latency": None})["rpc_stats_latency"].iloc[0]
    assert (lat["xid"], lat["progname"], lat["version"], lat["procname"]) == (
        0x2225AE4E,
        "nfsacl",
        3,
        "GETACL",
    )
    assert (lat["task_id"], lat["client_id"], lat["rtt"]) == (135, 4, 7846)
    # %p of NULL prints (nil): a 0, not damage
    assert t.read({"kfree": ["ptr"]})["kfree"]["ptr"].tolist() == [0xFFFF96C9829CBA00, 0]
    cf = t.read({"nfs_readdir_cache_fill": ["cookie", "verifier", "index", "dev"]})[
        "nfs_readdir_cache_fill"
    ]
    assert cf["cookie"].tolist() == [0x10, 0x1F] and cf["index"].tolist() == [3, 2]
    assert cf["verifier"].tolist() == ["0x00000000", "00000000000000ff"]
    assert cf["dev"].tolist() == [0x2E, 0x3C]
    pr = t.read({"nfsprobe:nfs4_proc_readdir": None})["nfsprobe:nfs4_proc_readdir"]
    assert pr["__probe_ip"].tolist() == [0xFFFFFFFFC07F2BF0] and pr["count"].tolist() == [32768]
    r4 = fr["nfs4:nfs4_readdir"].iloc[0]
    # error=-5 (EIO): the event stores 5 (unsigned long) and prints it negated, as -R shows.
    assert r4["error"] == 5 and r4["fileid"] == 1234 and r4["comm"] == "kworker/0:1"
    pr = fr["ftrace:print"]
    assert pr["buf"].tolist() == ["phase start a=b c"] and pr["comm"].tolist() == ["bash (x)"]
    kp = fr["nfsprobe:readdir_probe"].iloc[0]
    assert kp["cookie"] == 4096 and kp["name"] == "abc d"
    lk = fr["nfs:nfs_lookup_enter"].iloc[0]
    # name=MAJ:MIN:DIR/NAME splits into the -R fields dev, dir and name
    assert lk["flags"] == 4 and lk["name"] == "foo bar"
    assert lk["dev"] == 0x2E and lk["dir"] == 77
    assert len(fr["nfs:not_there"]) == 0 and list(fr["nfs:not_there"].columns)[-1] == "dev"
    assert t.info["lost_events"] == [{"cpu": 0, "ts": 100_000_005_000, "count": 12}]
    fmt = t.event_format("nfs:nfs_readdir_cache_fill")
    assert {"dev", "fileid", "cookie", "index"} <= set(fmt.user_fields())
    assert fmt.fields["fileid"].kind == "int" and t.event_format("nfs:nope") is None
    assert t.event_counts()["sunrpc:rpc_request"] == 2
    inst = open_trace(default_text, instance="tdtest")
    assert inst.read({"print": ["buf"]})["print"]["buf"].tolist() == ["in instance"]


def test_raw_lines(tmp_path):
    p = tmp_path / "raw.txt"
    p.write_text(
        "cpus=4\n"
        "  sleep-6573  [003]   279.096432789: print:                 ip=tracing_mark_write buf=hello a=b\n"  # noqa: E501
        "  ls-7505  [001]   704.651925477: sched_wakeup:          comm=python pid=7483 prio=120 target_cpu=001\n"  # noqa: E501
        "  qemu-6377  [000]   279.131157466: libc_openat:           __probe_ip=7f26a65fb150 dfd=-100 path=. flags=0x230000 comm=qemu x\n"  # noqa: E501
        "  qemu-6377  [000]   279.131157467: libc_openat:           __probe_ip=7f26a65fb000 dfd=14 path=etc flags=0x0 comm=qemu\n"  # noqa: E501
    )
    t = open_trace(p)
    assert t.info["format"] == "report text -R"
    fr = t.read({"print": None, "sched_wakeup": None, "uprobes:libc_openat": None})
    assert fr["print"]["buf"].tolist() == ["hello a=b"]
    assert fr["print"]["ts"].tolist() == [279_096_432_789]
    w = fr["sched_wakeup"]
    assert list(w.columns) == [
        "ts",
        "cpu",
        "pid",
        "comm",
        "field_comm",
        "field_pid",
        "prio",
        "target_cpu",
    ]
    assert w["pid"].tolist() == [7505] and w["field_pid"].tolist() == [7483]
    o = fr["uprobes:libc_openat"]
    assert o["__probe_ip"].tolist() == [0x7F26A65FB150, 0x7F26A65FB000]
    assert o["dfd"].tolist() == [-100, 14] and o["flags"].tolist() == [0x230000, 0]
    assert o["field_comm"].tolist() == ["qemu x", "qemu"]
    with pytest.raises(TraceError) as ei:
        t.read({"print": ["nope"]})
    assert "nope" in str(ei.value) and "buf" in str(ei.value)


def test_both_readers_give_one_interface_and_one_column_type(tmp_path):
    """ReportText and TraceDat are both a Trace, and read_columns() gives the same types for
    the same kind of field: numbers as numpy arrays, strings as Strs (codes and values)."""
    p = tmp_path / "raw.txt"
    p.write_text(
        "cpus=2\n"
        "  ls-7505  [001]   704.651925477: kmem_cache_alloc: call_site=0x1 ptr=0xff00 "
        "bytes_req=192 bytes_alloc=192 gfp_flags=0x0 node=0 accounted=0 name=dentry\n"
        "  ls-7505  [001]   704.651925478: kmem_cache_alloc: call_site=0x1 ptr=0xff40 "
        "bytes_req=64 bytes_alloc=64 gfp_flags=0x0 node=0 accounted=0 name=kmalloc-64\n"
    )
    text = open_trace(p)
    dat = open_trace(FIXTURES / "kmem-host" / "kmem.dat")
    assert isinstance(text, Trace) and isinstance(dat, Trace)
    want = {"kmem:kmem_cache_alloc": ["ptr", "bytes_alloc", "name"]}
    for t in (text, dat):
        for cols in (
            t.read_columns(want)["kmem:kmem_cache_alloc"],
            t.read_pieces(want)["kmem:kmem_cache_alloc"][0],
        ):
            for c in ("ts", "cpu", "pid", "ptr", "bytes_alloc"):
                assert isinstance(cols[c], np.ndarray) and cols[c].dtype.kind in "iu", (t, c)
            for c in ("comm", "name"):
                assert isinstance(cols[c], Strs), (t, c)
    cols = text.read_columns(want)["kmem:kmem_cache_alloc"]
    assert [cols["name"].values[i] for i in cols["name"].codes] == ["dentry", "kmalloc-64"]
    assert cols["ptr"].tolist() == [0xFF00, 0xFF40]


def test_not_report_text(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("just some\nlog file\n")
    assert not looks_like_report(p.read_bytes())
    with pytest.raises(TraceError, match="none of the kinds"):
        open_trace(p)
    with pytest.raises(TraceError):
        ReportText(str(p))


def test_trixie_raw_lines_and_lines_cut_short(tmp_path):
    """trace-cmd 3.3's -R prints the flags after the CPU as "[000]-0x0" (before: "not
    `trace-cmd report` text"). A line cut short (at a column, as a terminal or an issue's code
    block cuts it) lacks the fields the event's other lines have: its last value may be cut too,
    which is damage where it is read, unless something followed it after a space (a number and
    the start of its name "0xa (INVALID_D", or of the next field's "5 page_in"), which keeps it
    whole."""
    p = tmp_path / "cut.txt"
    p.write_text(
        "cpus=2\n"
        " ls-7  [000]-0x0   10.000001: nfs_readdir_exit:      error=0 fileid=12 pos=3 "
        "cookie=700 page_index=1 eof=0 cache_validity=0xa (INVALID_DATA|INVALID_ATIME)\n"
        " ls-7  [000]-0x0   10.000002: nfs_readdir_exit:      error=0 fileid=12 pos=4 "
        "cookie=701 page_index=1 eof=0 cache_validity=0xa (INVALID_D\n"
        " ls-7  [000]-0x0   10.000003: nfs_readdir_exit:      error=0 fileid=12 pos=5 "
        "cookie=7021 page_in\n"
        " ls-7  [000]-0x0   10.000004: nfs_readdir_exit:      error=0 fileid=12 pos=6 "
        "cookie=70\n"
    )
    t = open_trace(p)
    assert t.info["format"] == "report text -R"
    fr = t.read({"nfs_readdir_exit": ["cookie", "cache_validity"]})["nfs_readdir_exit"]
    assert fr["ts"].tolist() == [10_000_001_000, 10_000_002_000, 10_000_003_000, 10_000_004_000]
    assert fr["cache_validity"].tolist()[:2] == [0xA, 0xA]
    assert fr["cookie"].tolist()[:3] == [700, 701, 7021]
    damaged = [(d["line"], d["field"], d["what"]) for d in t.info["damaged_events"]]
    assert (
        5,
        "cookie",
        "line 5: nfs_readdir_exit is cut short: its cookie='70' may be cut too",
    ) in damaged
    # the cut lines lack cache_validity (damage where read); no other value is damage
    assert {(ln, f) for ln, f, _ in damaged} == {
        (4, "cache_validity"),
        (5, "cache_validity"),
        (5, "cookie"),
    }
