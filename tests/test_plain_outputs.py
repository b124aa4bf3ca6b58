"""What a new user reads: results tables, plots, ids, help texts and the export's messages say
what they show, and no run, label or file is lost or changed without a word (issue 32)."""

import io
import json
import os
import re
import subprocess

import pandas as pd
import pytest

from conftest import FIXTURES, TOP, run_cli
from nfsreaddir import cli, pipeline
from nfsreaddir.present import glossary, plot, render, table

BAD = os.path.join(FIXTURES, "5.10-v4.1")  # 157 READDIRs, 5 restarts in 'modified'
BAD_V3 = os.path.join(FIXTURES, "5.10-v3")  # the same kernel, never exercised
DCACHE = os.path.join(FIXTURES, "dcache-negative-6.1")
CAPTURED = os.path.join(FIXTURES, "5.10-v4.1-cap")
OVERHEAD = os.path.join(FIXTURES, "overhead-5.10-series")


# ------------------------------------------------------------------------------ results --table
def test_results_table_keeps_runs_that_share_a_kernel():
    out = run_cli("results", "--table", BAD, BAD_V3, check=0).stdout
    # Both runs of 5.10.0-46, each under its own name: the restarting one is not hidden.
    assert "5.10.0-46-amd64 (5.10-v4.1)" in out and "5.10.0-46-amd64 (5.10-v3)" in out
    row = next(x for x in out.splitlines() if x.startswith("READDIR RPCs"))
    assert row.split()[2:] == ["40", "157", "40", "40"], row
    assert "NFSv4.1, 4000 files on ext4" in out and "NFSv3, 4000 files on ext4" in out


def test_results_table_gives_a_dcache_run_its_own_section():
    out = run_cli("results", "--table", BAD, DCACHE, check=0).stdout
    assert "None" not in out, out
    # The readdir table has the readdir run alone; the dcache run's phases are its own.
    assert "local-misses" not in out.split("dcache-negative on")[0]
    assert f"{DCACHE}: dcache-negative on 6.1.0-50-amd64: PASS" in out
    assert "change over each phase:" in out


def test_results_table_shows_an_overhead_run_as_one():
    """An overhead run has no phases: its listing times, untraced and traced, and the medians
    its verdict compares (it failed with "cannot tabulate: 'phases'")."""
    res = json.loads(open(os.path.join(OVERHEAD, "results.json")).read())
    p = run_cli("results", "--table", OVERHEAD, BAD, check=0)
    assert f"{OVERHEAD}: readdir-overhead on 5.10.262-nfsrt+: PASS" in p.stdout, p.stdout
    rows = {x.split()[0]: x.split()[1:] for x in p.stdout.splitlines() if x.strip()}
    for kind in ("untraced", "traced"):
        shown = [float(v) for v in rows[kind]]
        assert shown == res[kind]["seconds"] + [res[kind]["median"]], (kind, shown)
    assert "5.10.0-46-amd64 (5.10-v4.1)" not in p.stdout  # the readdir run alone: its kernel


def test_results_table_says_which_time_is_which():
    """The lister's run time (the reproducer's clock) and the listing's time in the trace (as
    analyze gives it) are two labelled rows, not one number that differs from analyze's."""
    out = run_cli("results", "--table", BAD, check=0).stdout
    labels = ("lister's run (s)", "listing in trace (s)")
    rows = {k: x[len(k) :].split() for x in out.splitlines() for k in labels if x.startswith(k)}
    assert rows["lister's run (s)"] == ["25.09", "39.126"]
    analyze = json.loads(run_cli("analyze", "--json", BAD, check=0).stdout)
    seconds = {x["phase"]: x["seconds"] for a in analyze for x in a["listings"]}
    assert rows["listing in trace (s)"] == [
        str(round(seconds["idle"], 3)),
        str(round(seconds["modified"], 3)),
    ]


def test_analyze_says_what_a_listing_time_spans():
    out = run_cli(
        "analyze",
        os.path.join(CAPTURED, "idle.dat"),
        os.path.join(CAPTURED, "idle.pcap.gz"),
        check=0,
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("time (s): "))
    assert f"{glossary.TIME_SPANS['opens']} (opens)" in line
    assert f"{glossary.TIME_SPANS['wire']} (wire)" in line


# ---------------------------------------------------------------------------------------- ids
def test_the_listing_table_is_written_part_by_part_as_pandas_writes_it_whole(monkeypatch):
    """analyze writes its table of listings from a file its rows went to as the listings were
    read (a server's capture has tens of thousands), PART_ROWS at a time: the text is the one
    pandas gives for the whole table, column widths and all. Parts of one row, of the 52
    listings of a fleet capture and of two traces' listings side by side; and a table whose
    rows come out of order, with negative numbers, a column of numbers and text, names wider
    and narrower than their values, and a tab."""
    monkeypatch.setattr(table, "PART_ROWS", 1)
    fleet = os.path.join(FIXTURES, "fleet-5.10", "fleet.pcap.gz")
    traces = [os.path.join(BAD, "idle.dat"), os.path.join(BAD, "modified.dat")]
    for paths in ([fleet], traces):
        t = render.listing_table([x.analysis for x in pipeline.load(paths)])
        assert t.rows > 1
        out = io.StringIO()
        t.write(out)
        assert out.getvalue() == t.frame().to_string(index=False) + "\n"
    rows = [(2, (-100, "x", 7, "a\tb")), (0, (3, 12, 123456, "")), (1, (5, "?", -1, "long text"))]
    t = table.Table(["n", "dir", "a wide name", "s"])
    for position, row in rows:
        t.add(position, row)
    out = io.StringIO()
    t.write(out)
    whole = pd.DataFrame([row for _, row in sorted(rows)], columns=["n", "dir", "a wide name", "s"])
    assert out.getvalue() == whole.to_string(index=False) + "\n"


def test_one_trace_id_and_listing_number_in_analyze_export_and_results(tmp_path):
    trace = os.path.join(BAD, "modified.dat")
    (a,) = json.loads(run_cli("analyze", "--json", trace, check=0).stdout)
    tid = a["trace"]["trace_id"]
    # A string jq and JavaScript keep whole; trace-cmd's own id beside it, a string too.
    assert re.fullmatch(r"[0-9a-f]{16}", tid) and tid == pipeline.trace_id(trace)
    assert isinstance(a["trace"]["tracecmd_id"], str) and int(a["trace"]["tracecmd_id"]) > 2**53
    assert [x["listing"] for x in a["listings"]] == list(range(len(a["listings"])))
    printed = run_cli("export", trace, "-o", tmp_path, check=0).stdout.split()
    assert os.path.join(tmp_path, "rpc", f"{tid}.csv") in printed
    rpc = pd.read_csv(tmp_path / "rpc" / f"{tid}.csv", dtype={"trace_id": str})
    assert set(rpc["trace_id"]) == {tid}
    for x in a["listings"]:
        assert (rpc["listing"] == x["listing"]).sum() == x["readdirs"]
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", BAD, run], check=True)
    run_cli("results", run, check=0)
    with open(run / "results.json") as f:
        stored = json.load(f)
    mine = [x for x in stored["listings"] if x["trace"] == "modified.dat"]
    assert [(x["trace_id"], x["listing"]) for x in mine] == [
        (tid, x["listing"]) for x in a["listings"]
    ]


def test_every_json_entry_has_its_trace_id(tmp_path):
    """A kmem trace's and a dcache run's analyze --json entries carry the id export names
    their files by, as a readdir trace's do; watch's summary says it has none (null)."""
    import io

    from nfsreaddir import commands
    from nfsreaddir.live import watch
    from nfsreaddir.trace import open_trace

    kmem = os.path.join(FIXTURES, "kmem-host", "kmem.dat")
    slab, dc = json.loads(run_cli("analyze", "--json", kmem, DCACHE, check=0).stdout)
    assert slab["trace_id"] == pipeline.trace_id(kmem) and "slab" in slab
    printed = run_cli("export", DCACHE, "-o", tmp_path, check=0).stdout.split()
    runs = pd.read_csv(tmp_path / "dcache_runs" / f"{dc['trace_id']}.csv", dtype=str)
    assert str(tmp_path / "dcache_runs" / f"{dc['trace_id']}.csv") in printed
    assert set(runs["trace_id"]) == {dc["trace_id"]} and "dcache" in dc
    out = io.StringIO()
    ended = watch.summary(open_trace(os.path.join(BAD, "modified.dat")), None, False)
    commands.print_watch(ended, True, out)
    w = json.loads(out.getvalue())
    assert w["trace"]["trace_id"] is None and w["listings"], w["trace"]
    assert "null in watch --json" in glossary.EXPORT_COLUMNS["trace_id"]


# ------------------------------------------------------------------------------------- export
def test_export_replaces_a_stale_or_damaged_table_and_says_what_it_did(tmp_path):
    trace = os.path.join(BAD, "modified.dat")
    first = run_cli("export", trace, "-o", tmp_path, "--format", "parquet", check=0).stdout
    files = first.split()
    rpc = next(f for f in files if "/rpc/" in f)
    good = open(rpc, "rb").read()
    with open(rpc, "r+b") as f:  # cut short, as a run killed mid-write by another tool leaves it
        f.truncate(len(good) // 2)
    again = run_cli("export", trace, "-o", tmp_path, "--format", "parquet", check=0).stdout
    said = dict(x.split(": ", 1) for x in again.splitlines())
    assert said.pop(rpc).startswith("replaced")
    assert set(said) == set(files) - {rpc}
    assert all(v.startswith("left as it was") for v in said.values())
    assert open(rpc, "rb").read() == good


# ---------------------------------------------------------------------------------- help texts
def commands():
    p = cli.parser()
    (sub,) = [a for a in p._actions if isinstance(a, cli._Commands)]
    return sub.choices


def test_a_command_named_first_is_built_alone_with_the_same_help():
    """parser(argv) builds only the command argv names: each name must be its adder's, and its
    help and usage the same as with every command built."""
    every = commands()
    assert list(every) == list(cli.COMMANDS)
    for name in cli.COMMANDS:
        (sub,) = [a for a in cli.parser([name])._actions if isinstance(a, cli._Commands)]
        assert list(sub.choices) == [name]
        assert sub.choices[name].format_help() == every[name].format_help()


def test_every_command_says_what_it_does_and_what_each_argument_is():
    for name, parser in commands().items():
        assert parser.description and len(parser.description) > 20, name
        for action in parser._actions:
            assert action.help, (name, action.dest)


@pytest.mark.parametrize(
    "name, verdict", [("check", True), ("results", True), ("plot", False), ("export", False)]
)
def test_every_command_help_gives_its_exit_statuses(name, verdict, capsys):
    with pytest.raises(SystemExit):
        cli.main([name, "--help"])
    text = capsys.readouterr().out
    statuses = text.split("exit status:\n")[1]
    codes = [int(m) for m in re.findall(r"^  (\d+)", statuses, re.M)]
    assert codes == ([0, 1, 125, 128, 130, 141] if verdict else [0, 128, 130, 141]), text


def test_glossary_is_a_command():
    text = run_cli("glossary", check=0).stdout
    assert text == run_cli("analyze", "--explain", check=0).stdout
    assert "time (s)" in text and glossary.TIME_SPANS["wire"] in text


# ---------------------------------------------------------------------------------------- plot
def figure_of(*inputs):
    return plot.listings_figure([x.analysis for x in pipeline.load(list(inputs))])


def test_plot_title_names_the_traces_and_kernel():
    fig = figure_of(BAD)
    title = fig.axes[0].get_title()
    assert "5.10-v4.1/idle.dat, 5.10-v4.1/modified.dat on 5.10.0-46-amd64" in title


def test_plot_draws_restarts_where_they_asked_and_invalidations_plainly():
    """record-5.10-catchup's ls restarted 8 times, 3 of them below the reader's position (its
    COMMAND): those crosses are drawn at their cookie, not at 0."""
    fig = figure_of(os.path.join(FIXTURES, "record-5.10-catchup"))
    ax = fig.axes[0]
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    ys = [y for ln in crosses for y in ln.get_ydata()]
    assert sum(y == 0 for y in ys) >= 5 and sum(y > 0 for y in ys) >= 3, ys
    invalidations = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    assert invalidations and all(ln.get_alpha() >= 0.5 for ln in invalidations)


def test_plot_legend_gives_each_listing_its_own_colour_and_counts_in_words():
    from matplotlib.colors import to_hex

    fig = figure_of(os.path.join(FIXTURES, "multi-5.10-series"))
    ax = fig.axes[0]
    drawn = [ln for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
    assert len(drawn) > 10
    assert len({to_hex(ln.get_color()) for ln in drawn}) == len(drawn)
    labels = [ln.get_label() for ln in drawn]
    assert any(lb.endswith(": 1 READDIR") for lb in labels), labels
    assert not any(re.search(r"\b1 READDIRs", lb) for lb in labels)


def test_dcache_plot_keeps_phase_names_clear_of_the_curves():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    m = pipeline.dcache_markers(DCACHE)

    fig = Figure(figsize=(10, 3.6))
    ax = fig.subplots()
    plot.dcache_samples(ax, m.samples, m.phases)
    FigureCanvasAgg(fig).draw()
    box = ax.get_window_extent()
    top = max(max(ln.get_ydata()) for ln in ax.get_lines())
    above = ax.transData.transform((0, top))[1]
    names = [t for t in ax.texts if t.get_text() in {p.name for p in m.phases}]
    assert len(names) == len(m.phases)
    for t in names:
        ext = t.get_window_extent()
        assert ext.y1 <= box.y1 + 1 and ext.y0 >= above, (t.get_text(), ext, box, above)


def test_plot_to_standard_output_and_over_a_file_says_so(tmp_path):
    p = subprocess.run(
        [os.path.join(TOP, ".venv", "bin", "nfs-readdir"), "plot", BAD, "-o", "-"],
        capture_output=True,
        check=True,
    )
    assert p.stdout.startswith(b"\x89PNG") and len(p.stdout) > 20000
    out, idle = tmp_path / "p.png", os.path.join(BAD, "idle.dat")
    assert run_cli("plot", idle, "-o", out, check=0).stdout == f"{out}\n"
    first = out.read_bytes()
    again = run_cli("plot", idle, "-o", out, check=0).stdout
    assert again == f"{out} (the file that was there is kept as {out}~)\n"
    assert open(f"{out}~", "rb").read() == first


def test_json_written_as_it_is_made_is_json_dump_byte_for_byte():
    """analyze --json writes a capture's listings as they are read back from disk (jsonout
    Streams): the text is json.dump's, indent and all, for the records of a fleet capture and of
    two traces, and for arrays empty, nested, of keys not strings and of values json cannot
    write (written as str)."""
    from nfsreaddir.present import jsonout

    def plain(obj):
        if isinstance(obj, jsonout.Stream):
            return [plain(x) for x in obj.items()]
        if isinstance(obj, dict):
            return {k: plain(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [plain(x) for x in obj]
        return obj

    fleet = os.path.join(FIXTURES, "fleet-5.10", "fleet.pcap.gz")
    traces = [os.path.join(BAD, "idle.dat"), os.path.join(BAD, "modified.dat")]
    made = []
    for paths in ([fleet], traces):
        loaded = pipeline.load(paths)
        v = pipeline.judge(loaded, paths)
        made.append([render.analysis_record(x.analysis, v) for x in loaded])
    made.append(
        {
            "empty": jsonout.Stream(lambda: iter(())),
            "nested": [jsonout.Stream(lambda: ({1: [], False: {}, None: x} for x in (1.5, "a")))],
            "odd": jsonout.Stream(lambda: iter([{"set": {3}}, pd.Timestamp(0), ()])),
            "none": {},
        }
    )
    for obj in made:
        out = io.StringIO()
        jsonout.dump(obj, out)
        assert out.getvalue() == json.dumps(plain(obj), indent=2, default=str)


# ------------------------------------------------------------------- the text people read
GOLDEN = os.path.join(TOP, "tests", "golden", "out")
# A count of one said as many (the dcache reproducers' own reasons aside: rules/dcache_*).
PLURAL_OF_ONE = re.compile(
    r"(?<![\d,.-])1 (listings|directories|calls|READDIRs|restarts|invalidations|places|holes|"
    r"changes|names|more listings|other listings|client connections|clients)\b"
)


def _golden(name):
    """(input, text) of each stored output NAME of the analyzer on every fixture and capture
    (tests/golden/make; test_golden.py keeps them what the code says now)."""
    for d, dirs, files in sorted(os.walk(GOLDEN)):
        dirs[:] = [x for x in dirs if x != "export"]
        if name in files:
            with open(os.path.join(d, name)) as f:
                yield os.path.relpath(d, GOLDEN), f.read()


def test_check_says_its_verdict_in_a_short_line_and_what_to_record_after_it():
    """Issue 58: verdict lines of 1,100 characters, a kprobe recipe inside them. The first
    line is about verdict.LINE (a capture's listing's name alone is 70), with no evidence list
    and no recipe; what to record, where anything would help, is a line of its own."""
    from nfsreaddir.rules import verdict

    said = 0
    for inp, text in _golden("check.out"):
        lines = text.splitlines()
        if not lines:  # (a run check gives no readdir verdict on: overhead-5.10-series)
            continue
        first = lines[0]
        assert len(first) <= verdict.LINE + 30, (inp, len(first), first)
        for w in ("record with", "trace-cmd", "kprobes", "evidence:"):
            assert w not in first, (inp, first)
        advice = [ln for ln in lines[1:] if ln.startswith("record")]
        assert len(advice) <= 1 and all(ln in lines[-1:] for ln in advice), (inp, lines)
        said += bool(advice)
    assert said > 10


def test_text_has_no_none_no_clause_twice_and_counts_of_one_are_singular():
    """Issue 58: "127.0.0.1:746[None]", "TCP segments missing from the capture; TCP segments
    missing from the capture", "561 packets dropped ... (376 bytes to the server); 561 packets
    dropped ...", "1 more listings", "over 1 directories"."""
    texts = [("check", *x) for x in _golden("check.out")]
    texts += [("analyze", *x) for x in _golden("analyze.out")]
    assert len(texts) > 100
    for what, inp, text in texts:
        assert not re.search(r"\bNone\b", text), (what, inp)
        m = PLURAL_OF_ONE.search(text)
        # (dcache runs' reasons are the reproducer judge's own: rules/dcache_memcg)
        assert not m or "dcache" in inp, (what, inp, text[m.start() - 80 : m.end() + 20])
        for line in text.splitlines():
            clauses = [c for c in re.split(r"; |\(|\)|, ", line) if len(c) > 25]
            assert len(clauses) == len(set(clauses)), (what, inp, line)
    lossy = dict(_golden("check.out"))["multi-5.10-cap/multi.pcap.gz"]
    assert lossy.count("packets dropped") == 1 and "56 holes, 22,036 bytes" in lossy, lossy


def test_the_recording_recipe_is_given_only_for_a_kernel_it_fits():
    """The x86-64 kprobe recipe ("the cookie probes fit 5.0-5.10") is for a trace of a kernel
    before 5.18: never for a capture (its client's kernel is not known) nor for a later kernel,
    whose own tracepoints have the cookies."""
    from nfsreaddir import events

    checked = dict(_golden("check.out"))
    analyzed = dict(_golden("analyze.out"))
    captures = later = 0
    for inp, js in _golden("analyze-json.out"):
        text = checked.get(inp, "") + analyzed.get(inp, "")
        if inp.endswith((".pcap.gz", ".pcapng.gz", ".pcap")):
            captures += 1
            assert "trace-cmd" not in text and "x86-64" not in text, inp
            continue
        kernels = {
            events.kernel_generation((x.get("trace") or {}).get("uname"))
            for x in (json.loads(js) if js.strip() else [])  # (no readdir: no JSON)
            if "listings" in x
        }
        if kernels and all(k is not None and k >= (5, 18) for k in kernels):
            later += 1
            assert "nfs4_proc_readdir cookie=" not in text and "fit 5.0-5.10" not in text, inp
    assert captures > 10 and later > 10


def test_analyze_folds_alike_events_into_one_line_with_a_count():
    """Issue 58: 28 identical "invalidation: getattr -> invalidate_mapping (no restart)" blocks
    before the verdict. Alike invalidations of a listing in a row are one line with their
    count; listings of one reader whose events read alike are one block with theirs."""
    folded = 0
    for inp, text in _golden("analyze.out"):
        untimed = [re.sub(r"^\s+[\d.-]+s\s+", "", ln) for ln in text.splitlines()]
        for a, b, raw in zip(untimed, untimed[1:], text.splitlines()):
            assert not (a == b and "invalidation" in a and raw.startswith("  ")), (inp, a)
        blocks = re.findall(r"\n(\S.* dir \S+):\n((?:  .*\n)+)", text)
        keys = [(h, re.sub(r"^\s+[\d.-]+s\s+", "", body, flags=re.M)) for h, body in blocks]
        assert len(keys) == len(set(keys)), inp
        folded += text.count(" listings, each:")
    assert folded >= 5


def test_check_and_the_page_say_the_verdict_in_the_same_word(tmp_path):
    """Issue 58: check said "good"/"cannot decide", the page "no restart"/"cannot tell": the
    glossary's words (status.word) on both."""
    from nfsreaddir import status

    assert set(glossary.VERDICTS) == {status.word(c) for c in (0, 1, 125)}
    for d in (BAD, BAD_V3, os.path.join(FIXTURES, "6.1-v4.1")):
        c = run_cli("check", d)
        word = c.stdout.split(":", 1)[0]
        assert word == status.word(c.returncode), c.stdout
        page = run_cli("report", d, "-o", "-").stdout
        m = re.search(r'class="answer v\d+"><b><span class="num" data-k="verdict">([^<]*)<', page)
        assert m and m.group(1) == word, (d, m and m.group(0))
