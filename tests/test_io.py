"""Inputs and outputs a user can rely on: pipes and FIFOs, one export dataset for many traces
(queried with DuckDB), plots that write exactly their path, names that are not UTF-8, words."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from conftest import (
    FIXTURES,
    NFS_READDIR,
    TOP,
    fixture_dirs,
    key_values,
    one_of_each_kind,
    report_text,
    run_cli,
    sample_and_full,
)
from nfsreaddir.status import ERROR as EXIT_ERROR

BAD = os.path.join(FIXTURES, "5.10-v4.1")
GOOD = os.path.join(FIXTURES, "6.1-v4.1")
DAT = os.path.join(BAD, "modified.dat")


def listings(stdout):
    return [{k: v for k, v in lst.items()} for a in json.loads(stdout) for lst in a["listings"]]


def shell(cmd, **kw):
    return subprocess.run(
        ["bash", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=TOP,
        env=dict(
            os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
        ),
        **kw,
    )


@pytest.fixture(scope="module")
def expected():
    return listings(run_cli("analyze", "--json", DAT, check=0).stdout)


@pytest.mark.parametrize(
    "how",
    [
        "trace-cmd report {dat} 2>/dev/null | nfs-readdir analyze --json -",
        "nfs-readdir analyze --json - < {dat}",
        "cat {dat} | nfs-readdir analyze --json /dev/stdin",
        "nfs-readdir analyze --json <(cat {dat})",
        "rm -f {fifo}; mkfifo {fifo}; (cat {dat} > {fifo} &); nfs-readdir analyze --json {fifo}",
    ],
    ids=["report-text-pipe", "stdin", "dev-stdin", "process-substitution", "fifo"],
)
def test_a_trace_from_a_pipe_or_fifo(how, expected, tmp_path):
    p = shell(how.format(dat=DAT, fifo=tmp_path / "fifo"))
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""  # no progress line into a pipe
    got = listings(p.stdout)
    assert [(x["readdirs"], x["restarts"], x["ending"]) for x in got] == [
        (x["readdirs"], x["restarts"], x["ending"]) for x in expected
    ]


CAPTURE = os.path.join(FIXTURES, "6.1-v4.1-cap", "modified.pcap.gz")


@pytest.fixture(scope="module")
def from_capture():
    return listings(run_cli("analyze", "--json", CAPTURE, check=0).stdout)


@pytest.mark.parametrize(
    "how",
    [
        "zcat {cap} | nfs-readdir analyze --json -",
        "nfs-readdir analyze --json - < {cap}",
        "rm -f {fifo}; mkfifo {fifo}; (zcat {cap} > {fifo} &); nfs-readdir analyze --json {fifo}",
    ],
    ids=["pcap-pipe", "gzip-stdin", "fifo"],
)
def test_a_capture_from_a_pipe_or_fifo(how, from_capture, tmp_path):
    """A capture (the 6.1 fixture's, its gzip'd file or zcat of it) through a stream gives the
    listings of the file, and its spooled copy is gone afterwards (TMPDIR is watched)."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    p = shell(f"export TMPDIR={spool}; " + how.format(cap=CAPTURE, fifo=tmp_path / "fifo"))
    assert p.returncode == 0, p.stderr
    got = listings(p.stdout)
    assert got and [(x["readdirs"], x["restarts"], x["ending"]) for x in got] == [
        (x["readdirs"], x["restarts"], x["ending"]) for x in from_capture
    ]
    assert os.listdir(spool) == []


def test_a_stream_named_twice_is_refused():
    """`check - -` would read standard input empty the second time."""
    for how in ("nfs-readdir check - - < {dat}", "cat {dat} | nfs-readdir check - /dev/stdin"):
        p = shell(how.format(dat=DAT))
        assert p.returncode == EXIT_ERROR and p.stdout == "", (how, p.stdout)
        assert "a stream can be read only once" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "args,code",
    [
        (["check", BAD], 1),
        (["check", GOOD], 0),
        (["results", "--verdict", BAD], 1),
        (["analyze", BAD], 141),
        (["compare", BAD, GOOD], 141),
        (["plot", BAD, "-o", "-"], 141),
        (["report", BAD, "-o", "-"], 141),
        (["glossary"], 141),
    ],
)
def test_a_closed_output_is_never_success(args, code):
    """The reader of the output has gone before anything is written (as `| head` does to a
    long output): a verdict still answers; any other command does not say it is done."""
    p = subprocess.Popen(NFS_READDIR + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == code, err
    assert err == "", err


def test_a_full_disk_names_the_file_and_what_to_do(tmp_path):
    """Standard output on /dev/full, and export into a 16 KiB tmpfs mounted in a mount
    namespace of the test's own (gone with it)."""
    p = shell(f"nfs-readdir analyze {DAT} > /dev/full")
    assert p.returncode == EXIT_ERROR, p.stderr
    assert p.stderr.splitlines() == [
        "nfs-readdir: cannot write the output: standard output: "
        "No space left on device (free space there, or write "
        "somewhere else)"
    ]
    p = shell(f"nfs-readdir check {BAD} > /dev/full")
    assert p.returncode == 1 and "the exit status is the verdict (1)" in p.stderr, p.stderr
    small = tmp_path / "small"
    small.mkdir()
    p = shell(
        f"unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=16k "
        f"tmpfs {small} && nfs-readdir export {DAT} -o {small}/tables'"
    )
    assert p.returncode == EXIT_ERROR, (p.returncode, p.stderr)
    (line,) = p.stderr.splitlines()
    assert (
        line.startswith(f"nfs-readdir: cannot write {small}/tables/")
        and "No space left on device (free space there or export to another -o DIR" in line
    ), line
    assert "Traceback" not in p.stderr and os.listdir(small) == []


def run_kinds(name):
    """What a run's tables can differ by: its kernel, NFS version, file system and reproducer
    (its facts)."""
    facts = key_values(os.path.join(FIXTURES, name, "facts"))
    return {(k, facts[k]) for k in ("run.kernel", "run.nfs", "run.fs", "run.name")}


# Each run is exported and analyzed whole: make test exports one run of each kind (every
# kernel, NFS version, file system and reproducer: 5 of 12 runs, 2026-11-28), make test-full
# every run.
@pytest.fixture(
    scope="module", params=sample_and_full("kinds", "every", ids=("one-of-each-kind", "every-run"))
)
def dataset(request, tmp_path_factory):
    """The Parquet export of the readdir fixtures into one folder, what analyze says, and the
    runs exported."""
    out = tmp_path_factory.mktemp("export") / "tables"
    names = fixture_dirs() + fixture_dirs("readdir-multi")
    if request.param == "kinds":
        names = one_of_each_kind(names, run_kinds)
        print(f"one run of each kind: {names}")
    printed, truth = [], {}
    for name in names:
        d = os.path.join(FIXTURES, name)
        p = run_cli("export", d, "-o", out, "--format", "parquet", check=0)
        printed += p.stdout.split()
        for a in json.loads(run_cli("analyze", "--json", d, check=0).stdout):
            truth[a["trace"]["path"]] = a["listings"]
    return out, printed, truth, names


@pytest.mark.slow
def test_exports_of_many_traces_never_overwrite(dataset, tmp_path):
    out, printed, truth, names = dataset
    files = [os.path.join(r, f) for r, _, fs in os.walk(out) for f in fs]
    assert sorted(files) == sorted(printed) and len(set(printed)) == len(printed)
    assert not [f for f in files if f.endswith(".partial")]
    # The same trace again: nothing rewritten, and export says so of every file.
    first = os.path.join(FIXTURES, names[0])
    again = run_cli("export", first, "-o", out, "--format", "parquet", check=0)
    lines = again.stdout.splitlines()
    assert lines and all(
        x.endswith(": left as it was (already this export, byte for byte)") for x in lines
    )


def test_every_table_has_one_schema_for_every_kernel(dataset):
    import pyarrow.parquet as pq

    out, _, _, _ = dataset
    for table in os.listdir(out):
        schemas = {
            str(pq.read_schema(os.path.join(out, table, f)))
            for f in os.listdir(os.path.join(out, table))
        }
        assert len(schemas) == 1, (table, schemas)
        names = pq.read_schema(os.path.join(out, table, os.listdir(out / table)[0])).names
        assert names[:5] == ["trace_id", "trace", "kernel", "nfs", "listing"], names


def test_duckdb_answers_restarts_and_readdirs_per_listing(dataset):
    """The README's query, over the export of every fixture at once, equals analyze --json."""
    import duckdb

    out, _, truth, _ = dataset
    rows = duckdb.sql(f"""
        SELECT l.kernel, l.trace, l.listing, l.restarts, count(r.ts) AS readdirs
        FROM read_parquet('{out}/listings/*.parquet') l
        LEFT JOIN read_parquet('{out}/rpc/*.parquet') r USING (trace_id, listing)
        GROUP BY ALL ORDER BY ALL""").fetchall()
    got = {(t, i): (restarts, n) for _, t, i, restarts, n in rows}
    want = {
        (t, i): (lst["restarts"], lst["readdirs"])
        for t, lsts in truth.items()
        for i, lst in enumerate(lsts)
    }
    assert got == want
    kernels = {k for k, *_ in rows}
    assert any(k.startswith("5.10.") for k in kernels) and any(
        k.startswith("6.1.") for k in kernels
    )


@pytest.fixture(scope="module")
def dcache_dataset(tmp_path_factory):
    """The Parquet export of every dcache fixture into one folder."""
    out = tmp_path_factory.mktemp("dcache") / "tables"
    names = [
        d
        for r in ("dcache-negative", "dcache-unlink-storm", "dcache-readdirplus", "dcache-memcg")
        for d in fixture_dirs(r)
    ]
    assert len(names) >= 8
    for name in names:
        run_cli("export", os.path.join(FIXTURES, name), "-o", out, "--format", "parquet", check=0)
    return out, names


@pytest.mark.slow
def test_a_dcache_run_exports_phases_not_listings(dcache_dataset):
    import duckdb
    import pyarrow.parquet as pq

    out, names = dcache_dataset
    # A readdirplus run's umount phases are no listings: no readdir table at all.
    assert sorted(os.listdir(out)) == [
        "dcache_figures",
        "dcache_phases",
        "dcache_runs",
        "dcache_samples",
    ]
    for table in os.listdir(out):
        files = [os.path.join(out, table, f) for f in os.listdir(out / table)]
        assert len({str(pq.read_schema(f)) for f in files}) == 1, table
        assert pq.read_schema(files[0]).names[:5] == [
            "trace_id",
            "trace",
            "kernel",
            "nfs",
            "reproducer",
        ]
    runs = duckdb.sql(f"SELECT reproducer, verdict FROM read_parquet('{out}/dcache_runs/*')")
    assert len(runs.fetchall()) == len(names)
    # The storm's own count: run.files names removed, one nfs_unlink_exit each in the storm.
    removed = dict(
        duckdb.sql(f"""
        SELECT trace, delta FROM read_parquet('{out}/dcache_phases/*')
        WHERE phase = 'storm' AND counter = 'event:nfs_unlink_exit'""").fetchall()
    )
    # Negative dentries over time: the storm's samples climb by at least one per removed file.
    rise = dict(
        duckdb.sql(f"""
        SELECT trace, max(value) - min(value) FROM read_parquet('{out}/dcache_samples/*')
        WHERE phase = 'storm' AND counter = 'nr_negative' GROUP BY trace""").fetchall()
    )
    storms = fixture_dirs("dcache-unlink-storm")
    assert len(rise) == len(storms)
    for name in storms:
        with open(os.path.join(FIXTURES, name, "facts")) as f:
            facts = dict(ln.rstrip("\n").split("=", 1) for ln in f if "=" in ln)
        files = int(facts["run.files"])
        (r,) = [v for t, v in rise.items() if f"/{name}/" in t]
        assert r >= files
        # Through NFS the client logs one nfs_unlink_exit per removed name; a local storm none.
        n = [v for t, v in removed.items() if f"/{name}/" in t]
        assert n == ([] if facts.get("run.via") == "local" else [files])
    # A figure the run could not measure is null, never 0.
    unknown = duckdb.sql(f"""
        SELECT value, text FROM read_parquet('{out}/dcache_figures/*')
        WHERE kernel LIKE '6.1.%' AND figure = 'growth_cells'""").fetchall()
    assert unknown and all(row == (None, None) for row in unknown)


def test_export_of_a_trace_without_readdirs_says_so(tmp_path):
    p = run_cli("export", os.path.join(FIXTURES, "kmem-host", "kmem.dat"), "-o", tmp_path / "x")
    assert p.returncode == EXIT_ERROR
    assert "kmem.dat: no READDIR in this trace" in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "x") or not os.listdir(tmp_path / "x")


def test_parquet_without_pyarrow_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['pyarrow'] = None; from nfsreaddir.cli import main; "
        f"sys.exit(main(['export', {DAT!r}, '-o', {str(tmp_path / 'x')!r}, "
        "'--format', 'parquet']))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == EXIT_ERROR and "nfs-readdir-trace[parquet]" in p.stderr, p.stderr


# ------------------------------------------------------------------------------------ plot
@pytest.mark.parametrize("name", ["noext", "x.txt"])
def test_plot_refuses_what_it_cannot_write(tmp_path, name):
    p = run_cli("plot", BAD, "-o", tmp_path / name)
    assert p.returncode == EXIT_ERROR and ".png" in p.stderr and "internal error" not in p.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_plot_writes_exactly_the_path_it_prints(tmp_path):
    out = tmp_path / "p.svg"
    p = run_cli("plot", BAD, "-o", out, check=0)
    assert p.stdout.strip() == str(out) and os.listdir(tmp_path) == ["p.svg"]
    for dev in ("/dev/null", "/dev/full"):
        p = run_cli("plot", BAD, "-o", dev)
        assert p.returncode == (0 if dev == "/dev/null" else EXIT_ERROR), p.stderr
        assert stat.S_ISCHR(os.stat(dev).st_mode) and not os.path.exists(dev + ".png")


def test_plot_puts_traces_without_cookies_on_their_own_axes(tmp_path, trace_cmd):
    rpc_only = tmp_path / "rpc-only.txt"
    report_text(
        trace_cmd,
        os.path.join(GOOD, "modified.dat"),
        rpc_only,
        raw=True,
        only=["sunrpc/rpc_request", "ftrace/print"],
    )
    out = tmp_path / "mixed.svg"
    run_cli("plot", DAT, rpc_only, "-o", out, check=0)
    svg = out.read_text()
    assert "cookie / largest cookie" in svg and "no cookies traced" in svg
    # Short labels: kernel and phase, not paths.
    assert "5.10.0-46 modified" in svg and str(FIXTURES) not in svg


# ----------------------------------------------------------------------- names and words
def test_a_file_name_that_is_not_utf8(tmp_path):
    d = os.path.join(os.fsencode(tmp_path), b"bad\xffname")
    os.mkdir(d)
    trace = os.path.join(d, b"t.dat")
    with open(trace, "wb") as f, open(DAT, "rb") as src:
        f.write(src.read())
    for args in (
        ["analyze"],
        ["analyze", "--json"],
        ["check"],
        ["export", "-o", os.fsencode(tmp_path / "out")],
        # pyarrow takes paths as UTF-8: a folder whose name is not
        ["export", "--format", "parquet", "-o", os.path.join(d, b"tables")],
    ):
        p = subprocess.run(
            [os.fsencode(a) for a in NFS_READDIR] + [os.fsencode(a) for a in args] + [trace],
            capture_output=True,
        )
        assert p.returncode in (0, 1) and b"internal error" not in p.stderr, (args, p.stderr)
    assert b"listings" in os.listdir(os.path.join(d, b"tables"))
    assert (
        b"bad\xffname"
        in subprocess.run(NFS_READDIR + ["analyze", trace], capture_output=True).stdout
    )


def test_every_column_is_explained_by_explain_and_analyze_s_in_the_readme():
    from nfsreaddir.present import glossary

    text = run_cli("analyze", "--explain", check=0).stdout
    with open(os.path.join(TOP, "README.md")) as f:
        readme = f.read()
    for k in glossary.TEXT_TABLE:
        assert k in text and f"| {k} |" in readme, k
    # export's columns, too many for the README's first pages, are told by the command
    assert "`nfs-readdir glossary` prints these and every column of `export`" in readme
    for k in glossary.EXPORT_COLUMNS:
        assert k in text, k
    header = run_cli("analyze", DAT, check=0).stdout
    for col in ("time (s)", "ended", "READDIRs", "restarts"):
        assert col in header


def test_compare_prints_no_nan():
    p = run_cli("compare", BAD, GOOD, check=0)
    assert "NaN" not in p.stdout and "5.10.0-46-amd64" in p.stdout


def test_csv_columns_are_in_one_order_for_every_kernel(tmp_path):
    for d in (BAD, GOOD, os.path.join(FIXTURES, "5.10-series-v4.1")):
        run_cli("export", os.path.join(d, "modified.dat"), "-o", tmp_path, check=0)
    for table in os.listdir(tmp_path):
        heads = set()
        for f in os.listdir(tmp_path / table):
            with open(tmp_path / table / f) as fh:
                heads.add(fh.readline())
        assert len(heads) == 1, (table, heads)


@pytest.mark.parametrize("command", ["plot", "report"])
def test_a_reader_that_leaves_early_is_a_closed_pipe(command):
    """`| head -c10` reads the first bytes and goes: the command does not say it is done.
    (An output that fits in the pipe whole, written before the reader left, cannot be told
    from one read whole: the report of a run with several readers is 660 kB, ten pipes' worth.)"""
    src = BAD if command == "plot" else os.path.join(FIXTURES, "record-5.10-multi")
    p = shell(f"nfs-readdir {command} {src} -o - | head -c10 >/dev/null; exit ${{PIPESTATUS[0]}}")
    assert p.returncode == 141 and p.stderr == "", (p.returncode, p.stderr)
    p = shell(f"nfs-readdir {command} {BAD} -o - | cat >/dev/null; exit ${{PIPESTATUS[0]}}")
    assert p.returncode == 0, p.stderr


def test_report_to_standard_output_writes_no_file(tmp_path):
    p = subprocess.run(
        NFS_READDIR + ["report", BAD, "-o", "-"], capture_output=True, text=True, cwd=tmp_path
    )
    assert p.returncode == 0 and p.stdout.startswith("<!DOCTYPE html>"), p.stderr
    assert "</html>" in p.stdout and os.listdir(tmp_path) == []


def test_an_unwritable_page_is_named_as_asked(tmp_path):
    page = tmp_path / "no-such-dir" / "x.html"
    p = run_cli("report", BAD, "-o", page)
    assert p.returncode == EXIT_ERROR and p.stderr == (
        f"nfs-readdir: cannot write {page}: {page.parent} does not exist (make it first, or "
        "write elsewhere)\n"
    )


# ------------------------------------------------------------- inputs that never end, outputs
@pytest.mark.parametrize(
    "how",
    ["nfs-readdir check /dev/zero", "nfs-readdir check - < /dev/zero"],
    ids=["named", "stdin"],
)
def test_a_device_is_refused_not_read(how, tmp_path):
    """/dev/zero has no end: it was copied into TMPDIR until the disk was full."""
    p = shell(f"export TMPDIR={tmp_path}; {how}")
    assert p.returncode == EXIT_ERROR and p.stdout == "", (p.returncode, p.stderr)
    assert "is a device, not a file or a stream: name a file, or pipe one in" in p.stderr
    assert os.listdir(tmp_path) == []


def test_a_stream_of_none_of_the_kinds_is_refused_after_its_first_bytes(tmp_path):
    """An endless stream of zeros is refused from its first 4 KiB: its writer is the one left
    with no reader (cat ends by SIGPIPE, 141), not a check copying it for ever."""
    p = shell(
        f'export TMPDIR={tmp_path}; cat /dev/zero | nfs-readdir check -; echo "${{PIPESTATUS[*]}}"'
    )
    assert p.stdout.split() == ["141", str(EXIT_ERROR)], (p.stdout, p.stderr)
    assert p.stderr == (
        "nfs-readdir: standard input is none of the kinds nfs-readdir reads: give a trace.dat "
        "(`trace-cmd record`), `trace-cmd report` text, or a pcap or pcapng capture "
        "(`tcpdump -s 0 -w FILE port 2049`), each gzip'd or not\n"
    )
    assert os.listdir(tmp_path) == []


def test_a_fifo_no_program_writes_is_refused(tmp_path):
    """A FIFO whose writer never comes: opening it waited for ever."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    p = run_cli("check", fifo)
    assert p.returncode == EXIT_ERROR and p.stdout == "", p
    assert p.stderr == (
        f"nfs-readdir: no program wrote to '{fifo}' within 10 s: start the program that "
        "writes it first, or give a file\n"
    )


def test_a_fifo_whose_writer_holds_it_open_is_read_to_its_end(tmp_path):
    """A writer that has the FIFO open but writes only later is a writer: the FIFO is read
    when it writes, however late (here: after a `read` that waits on the test)."""
    fifo, go = tmp_path / "fifo", tmp_path / "go"
    os.mkfifo(fifo)
    os.mkfifo(go)
    p = subprocess.Popen(
        ["bash", "-c", f"exec 3>{fifo}; read < {go}; cat {DAT} >&3"], stdin=subprocess.DEVNULL
    )
    reader = subprocess.Popen(
        NFS_READDIR + ["check", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The writer is let go once the reader has waited past FIFO_WAIT (10 s) or so; on a busy
    # machine it may not have got that far, and the test asks less of it, never more.
    time.sleep(12)
    with open(go, "w") as f:
        f.write("\n")
    out, err = reader.communicate(timeout=300)
    assert p.wait(timeout=60) == 0
    assert reader.returncode == 1 and out.startswith("bad"), (out, err)


@pytest.mark.parametrize(
    "args",
    [
        ["export", DAT],
        ["export", "--format", "chrome-trace", DAT],
        ["report", DAT],
        ["plot", DAT],
    ],
    ids=["export", "chrome-trace", "report", "plot"],
)
def test_an_output_in_a_missing_directory_is_refused(args, tmp_path):
    """export -o /nonexistent/x made the whole tree and exited 0."""
    out = tmp_path / "missing" / "x"
    p = run_cli(*args, "-o", out)
    assert p.returncode == EXIT_ERROR and p.stdout == "", p
    assert p.stderr == (
        f"nfs-readdir: cannot write {out}: {out.parent} does not exist (make it first, or "
        "write elsewhere)\n"
    )
    assert os.listdir(tmp_path) == []


def test_a_page_written_over_a_file_keeps_it_as_name_tilde(tmp_path):
    page = tmp_path / "r.html"
    page.write_text("the page before")
    p = run_cli("report", DAT, "-o", page, check=0)
    assert p.stdout == f"{page} (the file that was there is kept as {page}~)\n"
    assert open(f"{page}~").read() == "the page before"
    assert open(page).read().startswith("<!DOCTYPE html>")


def test_chrome_trace_of_one_trace_is_the_file_named(tmp_path):
    """`-o x.json` made a directory x.json/ with a file named by the trace's id inside."""
    out = tmp_path / "x.json"
    assert run_cli("export", "--format", "chrome-trace", DAT, "-o", out, check=0).stdout == (
        f"{out}\n"
    )
    assert json.load(open(out))["traceEvents"]
    p = run_cli("export", "--format", "chrome-trace", DAT, "-o", "-", check=0)
    assert json.loads(p.stdout) == json.load(open(out))
    # A directory where one is named (a trailing /): a file per trace, named by its id.
    printed = run_cli("export", "--format", "chrome-trace", BAD, "-o", f"{tmp_path}/d/", check=0)
    made = sorted(printed.stdout.split())
    assert len(made) == 2 and all(
        os.path.dirname(m) == f"{tmp_path}/d/chrome-trace" for m in made
    ), made
    assert sorted(os.listdir(tmp_path)) == ["d", "x.json"]


@pytest.mark.parametrize(
    "args,words",
    [
        (["export", DAT, "-o", "-"], "csv is a file per table: name a directory"),
        (["export", "--format", "chrome-trace", BAD, "-o", "-"], "of 2 traces is 2 files"),
        (["export", "--format", "chrome-trace", BAD, "-o", "x.json"], "-o x.json/"),
        (["export", DAT, "-o", "file"], "file is a file, and csv tables go into a directory"),
    ],
    ids=["tables", "chrome-traces", "chrome-traces-to-a-file", "tables-to-a-file"],
)
def test_an_export_that_an_output_cannot_hold_is_refused(args, words, tmp_path, monkeypatch):
    """`export -o -` made a directory named -."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("mine")
    p = run_cli(*args)
    assert p.returncode == EXIT_ERROR and words in p.stderr and p.stdout == "", p
    assert os.listdir(tmp_path) == ["file"] and (tmp_path / "file").read_text() == "mine"
