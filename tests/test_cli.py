"""nfs-readdir as users run it: every input form, every output, and bad input."""

import gzip
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from conftest import FIXTURES, NFS_READDIR, TOP, report_text, run_cli
from nfsreaddir.status import ERROR as EXIT_ERROR

BAD = os.path.join(FIXTURES, "5.10-v4.1")
GOOD = os.path.join(FIXTURES, "6.1-v4.1")


def listings_json(*traces):
    p = run_cli("analyze", "--json", *traces, check=0)
    return [lst for a in json.loads(p.stdout) for lst in a["listings"]]


def test_analyze_tells_the_story():
    p = run_cli("analyze", os.path.join(BAD, "modified.dat"), check=0)
    assert "nfsprobe:nfs4_proc_readdir" in p.stdout
    assert "restart at cookie 0" in p.stdout
    assert (
        "revalidate -> GETATTR -> revalidate_done(INVALID_DATA) -> invalidate_mapping" in p.stdout
    )
    assert p.stderr == ""


def test_check_gives_git_bisect_run_its_answer():
    bad = run_cli("check", BAD, check=1)
    assert bad.stdout.startswith("bad: ") and bad.stdout.count("\n") == 1
    good = run_cli("check", GOOD, check=0)
    assert good.stdout.startswith("good: ")
    # A looser threshold turns 5.10 good, and says what it let through.
    loose = run_cli("check", "--max-restarts", "1000", BAD, check=0)
    assert "restarts at cookie 0, at most 1000 allowed" in loose.stdout


# Debian 12's trace-cmd 3.1.6 writes no zlib: zlib files come from trixie's trace-cmd 3.3.
TRACE_CMD_TRIXIE = os.path.join(os.path.dirname(__file__), "tools", "trace-cmd-trixie")


@pytest.mark.parametrize(
    "tool,conversion",
    [
        ("trace-cmd", ["--file-version", "6"]),
        ("trace-cmd", ["--file-version", "7", "--compression", "none"]),
        ("trace-cmd", ["--file-version", "7", "--compression", "zstd"]),
        (TRACE_CMD_TRIXIE, ["--file-version", "7", "--compression", "zlib"]),
        (TRACE_CMD_TRIXIE, ["--file-version", "6"]),
    ],
)
def test_file_versions_and_compression_give_identical_results(
    tmp_path, trace_cmd, tool, conversion
):
    src = os.path.join(BAD, "modified.dat")
    out = tmp_path / "converted.dat"
    subprocess.run(
        [trace_cmd if tool == "trace-cmd" else tool, "convert"]
        + conversion
        + ["-i", src, "-o", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    expected = {"6": "v6,", "none": "v7,"}.get(conversion[-1], f"v7 {conversion[-1]},")
    p = run_cli("analyze", out, check=0)
    assert f"trace.dat {expected}" in p.stdout
    assert listings_json(out) == listings_json(src)


@pytest.mark.slow
@pytest.mark.parametrize("raw", [False, True], ids=["report", "report-R"])
def test_report_text_gives_the_same_listings(tmp_path, trace_cmd, raw):
    for d in (BAD, GOOD):
        for phase in ("idle", "modified"):
            dat = os.path.join(d, f"{phase}.dat")
            txt = report_text(trace_cmd, dat, tmp_path / f"{phase}.txt", raw=raw)
            from_text, from_dat = listings_json(txt), listings_json(dat)
            # A report shows only the events that fired. Where no invalidation did, the text
            # cannot show that invalidation events were recorded: unknown (null), where the
            # trace.dat, which lists what was recorded, says 0. Nothing else may differ.
            for t, b in zip(from_text, from_dat):
                if t["invalidations"] is None and b["invalidations"] == 0:
                    followed = [k for k in t if k.startswith("invalidations_followed")]
                    assert all(t[k] is None for k in followed)
                    t.update(invalidations=0, **{k: b[k] for k in followed})
                # Report text gives times in microseconds: the round trips' window too.
                for x in (t, b):
                    rt = x.get("round_trips") or {}
                    for k in ("start", "end"):
                        if rt.get(k) is not None:
                            rt[k] = round(rt[k] / 1000)
            assert from_text == from_dat, (d, phase)


def test_export_writes_the_canonical_tables(tmp_path):
    dat = os.path.join(BAD, "modified.dat")
    (lst,) = listings_json(dat)
    p = run_cli("export", dat, "-o", tmp_path / "csv", check=0)
    (rpc_path,) = [w for w in p.stdout.split() if "/rpc/" in w]
    rpc = pd.read_csv(rpc_path)
    assert len(rpc) == lst["readdirs"] == (rpc["listing"] == 0).sum()
    assert (rpc["cookie"] == 0).sum() == lst["cookie_zero_readdirs"]
    assert rpc["restart"].sum() == lst["restarts"]
    p = run_cli("export", dat, "-o", tmp_path / "pq", "--format", "parquet", check=0)
    (inv_path,) = [w for w in p.stdout.split() if "/invalidations/" in w]
    assert len(pd.read_parquet(inv_path)) == lst["invalidations"]
    (samples,) = [w for w in p.stdout.split() if "/samples/" in w]
    assert pd.read_parquet(samples)["nr_dentry"].min() > 0


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_plot_draws_each_listing(tmp_path, ext):
    out = tmp_path / f"p.{ext}"
    run_cli("plot", BAD, "-o", out, check=0)
    data = out.read_bytes()
    if ext == "png":
        assert data.startswith(b"\x89PNG") and len(data) > 20000
    else:
        assert b"<svg" in data and b"restart" in data


def test_compare_puts_two_kernels_side_by_side():
    p = run_cli("compare", "--json", BAD, GOOD, check=0)
    out = json.loads(p.stdout)
    # Headed by the kernels compared, not A and B.
    assert [out[s]["label"] for s in ("before", "after")] == ["5.10.0-46-amd64", "6.1.0-50-amd64"]
    row = next(r for r in out["listings"] if r["phase"] == "modified")
    assert row["before"]["restarts"] > 0 and row["after"]["restarts"] == 0
    assert row["ratio"]["restarts"] == 0


# Bad input: a clear message, a documented exit status, never a traceback.


def assert_clean_error(p, code, *words):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout
    for w in words:
        assert w in p.stderr + p.stdout, (w, p.stderr, p.stdout)


def test_missing_file():
    # As a process: the status the shell sees, and nothing but the message on its stderr.
    assert_clean_error(
        run_cli("analyze", "/nonexistent.dat", process=True),
        EXIT_ERROR,
        "/nonexistent.dat",
        "no such file",
    )


def test_empty_file(tmp_path):
    f = tmp_path / "empty.dat"
    f.write_bytes(b"")
    assert_clean_error(run_cli("analyze", f), EXIT_ERROR, "empty")


def test_text_that_is_not_trace_cmd_output(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("Dear NFS list,\nmy ls is slow.\n" * 20)
    assert_clean_error(run_cli("analyze", f), EXIT_ERROR, "trace-cmd report", "trace-cmd record")


THE_KINDS = (
    "give a trace.dat (`trace-cmd record`), `trace-cmd report` text, or a pcap or pcapng capture "
    "(`tcpdump -s 0 -w FILE port 2049`), each gzip'd or not"
)


@pytest.mark.parametrize(
    "name,data,what",
    [
        ("empty.pcap.gz", b"", "is empty"),
        ("notes.pcap.gz", gzip.compress(b"my ls\n", mtime=0), "is gzip'd, but what it holds"),
        ("notes.dat", b"Dear NFS list,\nmy ls is slow.\n", "is none of the kinds"),
    ],
    ids=["empty", "gzip-of-text", "text"],
)
def test_a_file_of_none_of_the_kinds_names_the_three(tmp_path, name, data, what):
    """A .pcap.gz that is empty or holds no capture was told it is neither a trace.dat nor
    report text: a capture was never named."""
    f = tmp_path / name
    f.write_bytes(data)
    p = run_cli("analyze", f)
    assert p.returncode == EXIT_ERROR and p.stderr.startswith(f"nfs-readdir: '{f}' {what}"), p
    assert p.stderr.endswith(f": {THE_KINDS}\n") and p.stderr.count("\n") == 1, p.stderr


def test_a_misspelled_command_gets_did_you_mean():
    p = run_cli("analyse", os.path.join(BAD, "modified.dat"))
    assert p.returncode == EXIT_ERROR and p.stderr.endswith(
        "nfs-readdir: error: no command 'analyse': did you mean analyze?\n"
    ), p.stderr


def test_an_option_the_command_lacks_names_the_commands_that_have_it():
    """`check --json` gave the top-level usage and "unrecognized arguments" alone."""
    p = run_cli("check", "--json", os.path.join(BAD, "modified.dat"))
    assert p.returncode == EXIT_ERROR and p.stdout == "", p
    assert p.stderr.startswith("usage: nfs-readdir check "), p.stderr
    assert p.stderr.endswith(
        "nfs-readdir check: error: check has no --json option; analyze, compare, watch, slab "
        "have it\n"
    ), p.stderr
    p = run_cli("analyze", "--jsn", os.path.join(BAD, "modified.dat"))
    assert p.stderr.endswith("analyze has no --jsn option: did you mean --json?\n"), p.stderr


@pytest.mark.parametrize("fraction", [0.02, 0.3, 0.7, 0.95])
def test_truncated_trace(tmp_path, fraction):
    src = os.path.join(BAD, "modified.dat")
    data = open(src, "rb").read()
    f = tmp_path / "cut.dat"
    f.write_bytes(data[: int(len(data) * fraction)])
    p = run_cli("analyze", f)
    assert "Traceback" not in p.stderr
    # Either a clear error, or the part before the cut with a warning that it is partial.
    if p.returncode == 0:
        assert "damaged" in p.stdout or "truncated" in p.stdout
    else:
        assert p.returncode == EXIT_ERROR and (
            "truncated" in p.stderr or "damaged" in p.stderr or "READDIR" in p.stderr
        ), p.stderr


def test_trace_without_nfs_events_names_what_to_record(tmp_path, trace_cmd):
    """A trace of something else (here: only the reproducer's markers) says which
    `trace-cmd record -e ...` would have captured a listing."""
    out = tmp_path / "markers-only.txt"
    with open(out, "w") as f:
        subprocess.run(
            [trace_cmd, "report", "-F", "ftrace/print", os.path.join(GOOD, "idle.dat")],
            stdout=f,
            check=True,
            timeout=300,
        )
    p = run_cli("analyze", out)
    assert_clean_error(p, EXIT_ERROR, "no READDIR", "trace-cmd record -e 'nfs:nfs_readdir_*'")
    assert_clean_error(run_cli("check", out), 125, "cannot decide:")


def test_kmem_trace_gets_the_slab_section_without_readdir():
    """A trace with kmem allocation events and no READDIR is analyzed for slab growth (exit
    0), and the text and JSON agree with each other; check still cannot judge it."""
    kmem = os.path.join(FIXTURES, "kmem-host", "kmem.dat")
    out = json.loads(run_cli("analyze", "--json", kmem, check=0).stdout)
    assert len(out) == 1 and out[0]["path"] == kmem
    s = out[0]["slab"]
    top = s["caches"][0]
    assert sum(c["allocs"] for c in s["caches"]) == s["total"]["allocs"] > 0
    text = run_cli("analyze", "--top", "3", kmem, check=0).stdout
    assert text.startswith(f"{kmem}: slab growth over")
    row = next(line.split() for line in text.splitlines() if line.split()[:1] == [top["cache"]])
    assert row[2:5] == [f"{top['allocs']:,}", f"{top['frees']:,}", f"{top['net']:+,}"]
    assert f"... {len(s['caches']) - 3} more caches" in text
    assert f"dentry cache (name): {s['dentry']['net']:+,} objects" in text
    assert_clean_error(run_cli("check", kmem), 125, "no READDIR")


def test_check_without_cookies_cannot_decide_alone(tmp_path, trace_cmd):
    """READDIR RPCs without cookies cannot show a restart: check says so (125), naming the
    events to record, unless an idle listing of the same run is there to compare with."""
    out = tmp_path / "rpc-only.txt"
    report_text(
        trace_cmd, os.path.join(BAD, "modified.dat"), out, raw=True, only=["sunrpc/rpc_request"]
    )
    p = run_cli("check", out)
    assert_clean_error(p, 125, "cannot decide", "trace-cmd record")


def test_directory_without_traces(tmp_path):
    assert_clean_error(run_cli("analyze", tmp_path), EXIT_ERROR, "no *.dat")


def test_usage_errors_stop_a_bisect():
    p = run_cli("analyze", process=True)
    assert p.returncode == EXIT_ERROR and "usage:" in p.stderr
    p = run_cli("frobnicate", "x")
    assert p.returncode == EXIT_ERROR and "usage:" in p.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--max-restarts", "-1"],
        ["check", "--max-restarts", "nan"],
        ["check", "--max-restarts", "1.5"],
        ["check", "--max-ratio", "-1"],
        ["check", "--max-ratio", "nan"],
        ["check", "--max-ratio", "inf"],
        ["check", "--max-ratio", "0"],
        ["check", "--max-ratio", "x"],
        ["analyze", "--details", "-1"],
        ["analyze", "--top", "-3"],
        ["record", "--duration", "nan"],
        ["watch", "--duration", "inf"],
    ],
)
def test_a_number_out_of_range_is_refused_not_judged(args):
    """`--max-restarts -1` used to judge every listing bad ("restarted 0 times"), `--max-ratio
    nan` every ratio good: each option's value is checked, in one line naming it."""
    p = run_cli(*args, GOOD) if args[0] in ("check", "analyze") else run_cli(*args)
    assert p.returncode == EXIT_ERROR and p.stdout == "", (p.returncode, p.stdout)
    assert f"argument {args[1]}: '{args[2]}' is not " in p.stderr.splitlines()[-1], p.stderr


# A command that analyzes nothing, in a fresh interpreter: its exit status and the heavy
# modules it imported.
PROBE = """import sys
from nfsreaddir import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(code, sorted(m for m in ("pandas", "matplotlib", "numpy") if m in sys.modules))
"""


@pytest.mark.parametrize(
    "args,code",
    [
        (["--help"], 0),
        (["results", "--verdict", "{run}"], 0),
        (["analyze"], EXIT_ERROR),  # a usage error
        (["results", "{run}/none"], EXIT_ERROR),  # an input error (no results directory)
    ],
)
def test_commands_that_analyze_nothing_do_not_import_pandas(tmp_path, args, code):
    # pandas costs about half a second of start-up (0.16 s for --help without it, 1.8 s
    # with it, measured on the 2-core host under load).
    (tmp_path / "results.json").write_text('{"verdict": "PASS", "reasons": ["fine"]}')
    p = subprocess.run(
        [sys.executable, "-c", PROBE] + [a.format(run=tmp_path) for a in args],
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert p.stdout.splitlines()[-1] == f"{code} []", (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("args", [["analyze"], ["analyze", "--json"], ["slab"]])
def test_slab_analysis_does_not_import_pandas(args):
    # The slab section of a kmem trace: numpy columns from the reader, text without pandas
    # (0.45 s of imports and 90 MB of the process on the 8.4 M-event bench trace).
    trace = os.path.join(FIXTURES, "kmem-host", "kmem.dat")
    p = subprocess.run(
        [sys.executable, "-c", PROBE] + args + [trace], text=True, capture_output=True, timeout=120
    )
    assert p.stdout.splitlines()[-1] == "0 ['numpy']", (p.stdout[-2000:], p.stderr)
    assert "dentry" in p.stdout


def test_metrics_on_every_address_serve_ipv4_and_ipv6():
    """--metrics :PORT listens where both an IPv4 and an IPv6 client reach it (the
    address given to prometheus_client, which watch serves its metrics with)."""
    import socket
    import urllib.request

    from prometheus_client import CollectorRegistry, start_http_server

    from nfsreaddir.cli import _listen

    addr, port = _listen(":9617")
    assert (addr, port) == ("::", 9617) or not socket.has_ipv6
    with socket.socket(socket.AF_INET6) as s:  # a free port for both families
        s.bind(("::", 0))
        port = s.getsockname()[1]
    server, thread = start_http_server(port, addr, registry=CollectorRegistry())
    try:
        for host in ("127.0.0.1", "[::1]"):
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
                assert r.status == 200, host
    finally:
        server.shutdown()
        thread.join()


def test_watch_help_says_how_to_run_it_as_a_service():
    text = run_cli("watch", "--help", check=0).stdout
    for words in ("root", "contrib/nfs-readdir-watch.service", "9617", "IPv4 and IPv6"):
        assert words in text, words
    with open(os.path.join(TOP, "contrib", "nfs-readdir-watch.service")) as f:
        unit = f.read()
    (start,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    # The unit runs the command that help's install step links to the checkout's .venv.
    binary = start.split("=", 1)[1].split()[0]
    assert f'ln -s "$PWD/.venv/bin/nfs-readdir" {binary}' in text, (binary, text)


def test_record_to_standard_output_is_refused(tmp_path):
    """`record -o -`: a trace.dat cannot go down a pipe (trace-cmd seeks in it); refused as a
    usage error before anything is traced, and no file named '-' is left (before: one was)."""
    p = subprocess.run(
        NFS_READDIR + ["record", "-o", "-", "--duration", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 128 and "name one (-o FILE)" in p.stderr, (p.returncode, p.stderr)
    assert not (tmp_path / "-").exists()
