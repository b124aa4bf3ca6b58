"""The verdict on traces the project did not record as it records them: report text pasted into a
bug report, traces without cookies, cut short, damaged or edited; one rule for check,
results.json and analyze; exit statuses git bisect run can trust."""

import json
import os
import random
import re
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, TOP, fixture_dirs, report_text, run_cli, sample_and_full
from nfsreaddir.pipeline import judge_paths

BAD = os.path.join(FIXTURES, "5.10-v4.1")
GOOD = os.path.join(FIXTURES, "6.1-v4.1")
RESULT_CODES = {"PASS": 0, "FAIL": 1, "UNDECIDED": 125}


def readdir_fixtures():
    return fixture_dirs() + fixture_dirs("readdir-multi")


def rebuild(src, dst):
    shutil.copytree(src, dst)
    os.unlink(os.path.join(dst, "results.json"))
    run_cli("results", dst, check=0)
    with open(os.path.join(dst, "results.json")) as f:
        return json.load(f)


@pytest.mark.slow
@pytest.mark.parametrize("name", readdir_fixtures())
def test_check_results_json_and_analyze_agree(name, tmp_path):
    """One verdict: check's exit status and line, the run's results.json (stored and rebuilt),
    the reproducer's --verdict exit, and analyze's closing line and JSON."""
    d = os.path.join(FIXTURES, name)
    c = run_cli("check", d)
    res = rebuild(d, tmp_path / "run")
    with open(os.path.join(d, "results.json")) as f:
        stored = json.load(f)
    assert RESULT_CODES[res["verdict"]] == RESULT_CODES[stored["verdict"]] == c.returncode, (
        res["verdict"],
        stored["verdict"],
        c.stdout,
    )
    assert res["reasons"] == [c.stdout.strip()] == stored["reasons"]
    v = subprocess.run(
        [sys.executable, "-m", "nfsreaddir", "results", "--verdict", str(tmp_path / "run")],
        capture_output=True,
        text=True,
    )
    assert v.returncode == c.returncode
    text = run_cli("analyze", d, check=0).stdout
    assert text.rstrip().splitlines()[-1] == "verdict: " + c.stdout.strip()
    js = json.loads(run_cli("analyze", "--json", d, check=0).stdout)
    assert {a["verdict"]["code"] for a in js} == {c.returncode}


BAD_TRACE = os.path.join(BAD, "modified.dat")


def report_lines(trace_cmd, tmp_path, dat=BAD_TRACE, raw=False):
    out = report_text(trace_cmd, dat, tmp_path / ("r.txt" if raw else "t.txt"), raw=raw)
    with open(out) as f:
        return f.read().splitlines(keepends=True)


def write(tmp_path, lines, name="edited.txt"):
    p = tmp_path / name
    p.write_text("".join(lines))
    return p


def readdir_lines(lines):
    """Indexes of the cookie kprobe's lines in a report of the 5.10 fixture."""
    return [i for i, ln in enumerate(lines) if "nfs4_proc_readdir:" in ln and "cookie=" in ln]


# -------------------------------------------------------------- finding 2: one rule for both
def rpc_only_run(trace_cmd, src, dst):
    """A copy of a run as a kernel without cookies would have recorded it: only
    sunrpc:rpc_request and the reproducer's markers, as report text in place of the traces."""
    shutil.copytree(src, dst)
    for phase in ("idle", "modified"):
        dat = os.path.join(dst, f"{phase}.dat")
        with open(dat + ".txt", "w") as f:
            subprocess.run(
                [trace_cmd, "report", "-R", "-F", "sunrpc/rpc_request", "-F", "ftrace/print", dat],
                stdout=f,
                check=True,
                timeout=300,
            )
        os.replace(dat + ".txt", dat)
    os.unlink(os.path.join(dst, "results.json"))
    run_cli("results", dst, check=0)
    with open(os.path.join(dst, "results.json")) as f:
        return json.load(f)


def test_without_cookies_check_and_results_json_use_one_rule(tmp_path, trace_cmd):
    """6.1 over NFSv3 needs 9 READDIRs against 3 idle: a ratio of small counts says nothing, and
    neither check nor results.json may call it bad or good."""
    res = rpc_only_run(trace_cmd, os.path.join(FIXTURES, "6.1-v3"), tmp_path / "v3")
    ph = res["phases"]
    assert (ph["idle"]["trace_readdirs"], ph["modified"]["trace_readdirs"]) == (3, 9)
    c = run_cli("check", tmp_path / "v3")
    assert res["verdict"] == "UNDECIDED" and c.returncode == 125, (res["reasons"], c.stdout)
    assert "too few READDIRs" in c.stdout and res["reasons"] == [c.stdout.strip()]
    # With enough READDIRs the ratio decides, the same way for both.
    res = rpc_only_run(trace_cmd, BAD, tmp_path / "bad")
    c = run_cli("check", tmp_path / "bad")
    assert res["verdict"] == "FAIL" and c.returncode == 1, (res["reasons"], c.stdout)
    assert ph["modified"]["restarts"] is None  # unknown, not 0
    # Nothing that reports an invalidation was recorded: unknown too, in results.json, in
    # analyze --json and in the text (the 5.10 modified listing met 4 in the full trace).
    for phase in res["phases"].values():
        assert phase["invalidations"] is None, phase
        assert phase["invalidations_followed_by_restart"] is None, phase
    js = json.loads(run_cli("analyze", "--json", tmp_path / "bad" / "modified.dat").stdout)[0]
    assert js["listings"][0]["invalidations"] is None and js["invalidations"] == [None]
    text = run_cli("analyze", tmp_path / "bad" / "modified.dat", check=0).stdout
    assert "invalidation events were not recorded" in text
    lines = text.splitlines()
    head = next(k for k, ln in enumerate(lines) if ln.split()[-2:] == ["invalidations", "dentries"])
    assert lines[head + 1].split()[-2] == "?", text


# ------------------------------------------------------- finding 3: one bad line, strict text
@pytest.mark.parametrize("value", ["", "184467440737095516160"])
def test_a_malformed_cookie_is_damage_not_good(tmp_path, trace_cmd, value):
    lines = report_lines(trace_cmd, tmp_path)
    i = readdir_lines(lines)[10]
    lines[i] = re.sub(r"cookie=\S+", f"cookie={value}", lines[i])
    p = write(tmp_path, lines)
    c = run_cli("check", p)
    assert c.returncode in (1, 125), c.stdout + c.stderr
    text = run_cli("analyze", p, check=0).stdout
    assert f"line {i + 1}" in text and "damaged" in text, text


def test_a_line_cut_short_is_read(tmp_path, trace_cmd):
    lines = [ln[:229] + "\n" for ln in report_lines(trace_cmd, tmp_path)]
    c = run_cli("check", write(tmp_path, lines))
    assert c.returncode == 1 and "internal error" not in c.stderr, c.stdout + c.stderr


LINE_EDITS = ("sub", "del", "ins", "cut", "drop", "dup")


# Each edited copy is judged whole (14 s for the 240 at load 2): make test judges the first 4
# edits of each kind (24 of the 120 of each report style, drawn as make test-full draws them),
# make test-full all 120.
@pytest.mark.slow
@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("per_kind", sample_and_full(4, 120, ids=("4-of-each-edit", "120-edits")))
def test_no_single_line_edit_of_a_bad_report_is_good(tmp_path, trace_cmd, raw, per_kind):
    """A bounded fuzz: random single-line edits (a character changed, dropped or added, the line
    cut, dropped or doubled) of the bad trace's report never give good or an internal error."""
    lines = report_lines(trace_cmd, tmp_path, raw=raw)
    rng = random.Random(11 + raw)
    chars = "0123456789abcdefx:=- []()"
    seen = set()
    judged = dict.fromkeys(LINE_EDITS, 0)
    for _ in range(120):
        i = rng.randrange(len(lines))
        ln = lines[i]
        j = rng.randrange(max(1, len(ln) - 1))
        op = rng.choice(LINE_EDITS)
        new = {
            "sub": ln[:j] + rng.choice(chars) + ln[j + 1 :],
            "del": ln[:j] + ln[j + 1 :],
            "ins": ln[:j] + rng.choice(chars) + ln[j:],
            "cut": ln[:j] + "\n",
            "drop": "",
            "dup": ln + ln,
        }[op]
        if judged[op] == per_kind:
            continue
        judged[op] += 1
        p = write(tmp_path, lines[:i] + [new] + lines[i + 1 :])
        v = judge_paths([str(p)])
        seen.add(v.code)
        assert v.code != 0, (op, i, ln, new, v.reason)
    print(f"single-line edits judged, of each kind: {judged}; answers: {sorted(seen)}")
    assert min(judged.values()) >= min(per_kind, 4), judged  # every kind of edit, and often
    assert 1 in seen


# ------------------------------------------------ finding 4: unfinished listings are unfinished
def test_a_listing_cut_off_by_the_end_of_the_trace_is_not_complete(tmp_path, trace_cmd):
    """Not complete, and said so; but it went on past changes of its directory before the cut,
    which decides (issue 30: a listing that survived a change is evidence)."""
    lines = report_lines(trace_cmd, tmp_path, dat=os.path.join(GOOD, "modified.dat"))
    end = next(i for i, ln in enumerate(lines) if "event=end" in ln)
    p = write(tmp_path, lines[: end - 3])
    c = run_cli("check", p)
    assert c.returncode == 0 and "cut off by the end of the trace" in c.stdout, c.stdout
    assert "the end of the directory was not seen" in c.stdout, c.stdout
    (lst,) = json.loads(run_cli("analyze", "--json", p, check=0).stdout)[0]["listings"]
    assert lst["ending"] == "cut_off" and lst["complete"] is False
    assert lst["finding"] == "survived"


def test_a_killed_listing_is_not_complete(tmp_path, trace_cmd):
    """The lister stopped by its timeout (status 124 in the reproducer's end marker)."""
    lines = report_lines(trace_cmd, tmp_path, dat=os.path.join(GOOD, "modified.dat"))
    end = next(i for i, ln in enumerate(lines) if "event=end" in ln)
    lines[end] = lines[end].replace("status=0", "status=124")
    p = write(tmp_path, lines)
    (lst,) = json.loads(run_cli("analyze", "--json", p, check=0).stdout)[0]["listings"]
    assert lst["ending"] == "killed" and not lst["complete"] and lst["timed_out"]
    c = run_cli("check", p)
    assert "killed" in c.stdout and "the end of the directory was not seen" in c.stdout, c.stdout
    assert c.returncode == 0 and lst["finding"] == "survived", c.stdout


# ------------------------------------------------------- finding 5: unknown is never zero
def test_unknowns_are_null_question_marks_and_cannot_tell(tmp_path, trace_cmd):
    out = tmp_path / "rpc-only.txt"
    report_text(
        trace_cmd,
        os.path.join(BAD, "modified.dat"),
        out,
        raw=True,
        only=["sunrpc/rpc_request", "nfs/nfs_invalidate_mapping_enter"],
    )
    js = json.loads(run_cli("analyze", "--json", out, check=0).stdout)[0]
    for lst in js["listings"]:
        for k in (
            "restarts",
            "refetched_readdirs",
            "restart_cost_seconds",
            "invalidations_followed_by_restart",
            "cookie_zero_readdirs",
        ):
            assert lst[k] is None, (k, lst[k])
    assert js["restarts"] == [None] * len(js["listings"])
    text = run_cli("analyze", out, check=0).stdout
    assert "(no restart)" not in text and " ? " in text
    cmp = run_cli("compare", "--json", out, os.path.join(BAD, "modified.dat"), check=0)
    row = json.loads(cmp.stdout)["listings"][0]
    # Not known is null, never a word in place of a number, nor 0.
    assert row["before"]["restarts"] is None and row["ratio"]["restarts"] is None, row


def test_an_idle_trace_that_recorded_invalidations_is_not_told_to_record_them():
    text = run_cli("analyze", os.path.join(BAD, "idle.dat"), check=0).stdout
    assert "not recorded" not in text and "record with" not in text, text


# --------------------------------------- finding 6: a threshold cannot hide a restart's message
def test_max_restarts_does_not_hide_the_restarts():
    c = run_cli("check", "--max-restarts", "100", BAD, check=0)
    assert "5 restarts at cookie 0, at most 100 allowed" in c.stdout, c.stdout
    assert "no restart" not in c.stdout


# --------------------------------------------- finding 7: a trace that never met the bug
@pytest.mark.parametrize("name", ["5.10-v4.1", "6.1-v4.1", "5.10-series-v4.1"])
def test_an_idle_listing_cannot_be_good(name):
    c = run_cli("check", os.path.join(FIXTURES, name, "idle.dat"))
    assert c.returncode == 125 and "never exercised" in c.stdout, c.stdout


def test_nfsv3_on_5_10_never_invalidates_so_it_cannot_decide():
    c = run_cli("check", os.path.join(FIXTURES, "5.10-v3"))
    assert c.returncode == 125 and "never exercised" in c.stdout, c.stdout


# ------------------------------------------------------------------- finding 8: exit statuses
def test_bisect_run_usage_errors_stop_the_bisect(tmp_path):
    br = os.path.join(TOP, "reproducers", "bisect-run")
    for args in (["--log-dir"], ["--timeout", "soon"], ["--frob"]):
        p = subprocess.run([br] + args, capture_output=True, text=True, cwd=tmp_path)
        assert p.returncode == 128 and "bisect-run:" in p.stderr, (args, p.returncode, p.stderr)


def test_a_results_json_that_cannot_be_read_has_no_verdict(tmp_path):
    (tmp_path / "results.json").write_text('{"verdict": ')
    p = subprocess.run(
        [sys.executable, "-m", "nfsreaddir", "results", "--verdict", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 125 and p.stdout.startswith("UNDECIDED"), p.stdout


# ------------------------------------------------------- evidence from what the trace recorded
def test_a_cookie_kprobe_is_read_under_any_group_name(tmp_path, trace_cmd):
    """A user's own kprobe group: the same trace with its group renamed (v6, where the group
    name is stored once, as text) gives the same restarts."""
    v6 = tmp_path / "v6.dat"
    subprocess.run(
        [
            trace_cmd,
            "convert",
            "--file-version",
            "6",
            "-i",
            os.path.join(BAD, "modified.dat"),
            "-o",
            str(v6),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    data = v6.read_bytes()
    assert data.count(b"nfsprobe") == 1
    mine = tmp_path / "myprobes.dat"
    mine.write_bytes(data.replace(b"nfsprobe", b"myprobes"))
    c = run_cli("check", mine, check=1)
    assert "restarted 5 times" in c.stdout
    # (the evidence read: analyze says it above its table)
    assert "READDIRs from myprobes:nfs4_proc_readdir" in run_cli("analyze", mine).stdout


@pytest.mark.parametrize(
    "name,has,lacks",
    [
        ("6.1-v4.1", "nfs:nfs_readdir_*", "p:nfsprobe/nfs4_proc_readdir"),
        ("5.10-v4.1", "p:nfsprobe/nfs4_proc_readdir", "nfs:nfs_readdir_*"),
    ],
)
def test_advice_names_only_events_the_traces_kernel_has(tmp_path, trace_cmd, name, has, lacks):
    out = tmp_path / "rpc-only.txt"
    report_text(
        trace_cmd,
        os.path.join(FIXTURES, name, "modified.dat"),
        out,
        raw=True,
        only=["sunrpc/rpc_request", "ftrace/print"],
    )
    c = run_cli("check", out)
    # What to record is a line of its own after the verdict's, never inside it.
    verdict, advice = c.stdout.splitlines()
    assert c.returncode == 125 and advice.startswith("record with: nfs-readdir record"), c.stdout
    assert has in advice and lacks not in c.stdout and "record" not in verdict, c.stdout
    text = run_cli("analyze", out, check=0).stdout
    assert has in text and lacks not in text


def test_lost_events_are_counted_where_known_and_undecide_the_listings_they_hit(
    tmp_path, trace_cmd
):
    """trace-cmd report prints 'CPU:N [LOST n EVENTS]' where a CPU lost events: the count is
    reported, and a good listing that the loss overlaps can no longer be called good."""
    lines = report_lines(trace_cmd, tmp_path, dat=os.path.join(GOOD, "modified.dat"))
    mid = [i for i, ln in enumerate(lines) if "nfs_readdir_cache_fill:" in ln][3]
    cpu = re.search(r"\[(\d+)\]", lines[mid]).group(1)
    lost = lines[:mid] + [f"CPU:{int(cpu)} [LOST 3995446 EVENTS]\n"] + lines[mid:]
    p = write(tmp_path, lost)
    text = run_cli("analyze", p, check=0).stdout
    assert "3,995,446 events lost" in text and "overlap the loss: listing of dir 12" in text
    c = run_cli("check", p)
    assert c.returncode == 125 and "lost" in c.stdout, c.stdout
    # Without a count: "an unknown number", never 0.
    p = write(tmp_path, [ln.replace("[LOST 3995446 EVENTS]", "[LOST EVENTS]") for ln in lost])
    assert "an unknown number of events lost" in run_cli("analyze", p, check=0).stdout


# ------------------------------------------------------------- advice true of the mount
def _round_trips(program, readdir_op, per_name="LOOKUP"):
    """A listing's round trips as model/roundtrips makes them of `ls -l` or `rm -rf` of 3,000
    names: a LOOKUP (or per_name) each, and 30 READDIRs of the given program and operation."""
    from nfsreaddir.model.roundtrips import OpCount, RoundTrips

    ops = [
        OpCount(program, per_name, 3000, 3000, 3.0, 1.0, 0.4),
        OpCount(program, readdir_op, 30, 30, 0.3, 0.01, 0.04),
    ]
    return RoundTrips(
        who="client 127.0.0.1:700",
        start=0,
        end=9 * 10**9,
        seconds=9.0,
        calls_from="the capture",
        window="its first READDIR to its end",
        names=3000,
        names_from="the READDIR replies' entries",
        server_time_from="the capture",
        ops=ops,
        readdirs=30,
    )


@pytest.mark.parametrize(
    "program,readdir_op,names_option",
    [("NFS3", "READDIR", True), ("NFS3", "READDIRPLUS", False), ("NFS4", "READDIR", False)],
)
def test_per_name_lookups_name_nordirplus_only_where_readdirplus_was_off(
    program, readdir_op, names_option
):
    """Issue 58: an rm -rf over NFSv4.1 was told "mount without nordirplus". Only plain NFSv3
    READDIRs (names alone) show readdirplus off; a mount that sent READDIRPLUS, or NFSv4
    READDIRs, gets what the calls were and what removes them, and no option it is not using."""
    from nfsreaddir import pipeline
    from nfsreaddir.rules import slowness

    rt = _round_trips(program, readdir_op)
    (f,) = slowness.findings(rt)
    assert f.kind == "per_name_lookup" and "3,000 LOOKUPs for 3,000 names" in f.evidence
    assert ("nordirplus" in f.change + f.evidence) == names_option, f
    # check's line, on a real listing that no restart explains (an idle `ls -l`)
    (x,) = pipeline.load([os.path.join(FIXTURES, "ls-l-6.1-v4.1", "idle.pcap.gz")])
    lst = x.analysis.listings[0]
    line = slowness.line(lst, rt, slowness.findings(rt))
    assert line is not None and "3,000 LOOKUP for 3,000 names" in line, line
    assert ("nordirplus" in line) == names_option, line


@pytest.mark.parametrize(
    "program,readdir_op,brought", [("NFS3", "READDIRPLUS", True), ("NFS4", "READDIR", False)]
)
def test_per_name_getattrs_say_attributes_expired_only_where_readdirs_brought_them(
    program, readdir_op, brought
):
    """READDIRPLUS brings every name's attributes; an NFSv4 READDIR only in the client's
    readdirplus mode, which the calls do not show: there "expired" is one of two readings."""
    from nfsreaddir.rules import slowness

    (f,) = slowness.findings(_round_trips(program, readdir_op, "GETATTR"))
    assert f.kind == "per_name_getattr" and "acregmin" in f.evidence + f.change, f
    assert ("brought no attributes" in f.evidence) != brought, f
    assert (f.short == "the attributes expired before use") == brought, f
