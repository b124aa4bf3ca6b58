"""The reproducer's results.json and PASS/FAIL, rebuilt from the recorded fixtures."""

import json
import shutil
import subprocess
import sys

from conftest import run_cli
from nfsreaddir.facts import read_facts


def rebuild(src, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(src, d)
    (d / "results.json").unlink()
    run_cli("results", d, check=0)
    return d, json.loads((d / "results.json").read_text())


def verdict_line(d):
    """The reproducer's last line, and its exit status: 0 PASS, 1 FAIL, 125 UNDECIDED."""
    p = run_cli("results", "--verdict", d)
    word = p.stdout.split(":", 1)[0]
    assert p.returncode == {"PASS": 0, "FAIL": 1, "UNDECIDED": 125}[word], p.stdout
    return p.stdout


def test_rebuilt_results_match_the_recorded_run(fixture, tmp_path):
    d, res = rebuild(fixture["dir"], tmp_path)
    bad = fixture["name"] == "5.10-v4.1"
    # 5.10 over NFSv3 never invalidates the directory's cache: nothing to judge.
    expected = "FAIL" if bad else "UNDECIDED" if fixture["name"] == "5.10-v3" else "PASS"
    assert res["verdict"] == expected, res["reasons"]
    assert verdict_line(d).startswith(res["verdict"] + ": ")
    for phase, p in res["phases"].items():
        rec = fixture["results"]["phases"][phase]
        for key in ("readdir_rpcs", "restarts", "invalidations", "entries", "seconds"):
            assert p[key] == rec[key], (phase, key)
        # ext4 cookies are stable: every file created before the listing, exactly once.
        assert p["duplicates"] == 0 and p["missing"] == 0
        assert p["entries"] >= res["files"]
    if bad:
        assert any("restarted" in r and "cookie 0" in r for r in res["reasons"])


def test_a_repeated_or_lost_name_fails_the_run(tmp_path):
    from conftest import FIXTURES

    d = tmp_path / "run"
    shutil.copytree(f"{FIXTURES}/6.1-v3", d)
    names = (d / "names-modified.txt").read_text().split()
    names.append(names[10])  # listed twice
    del names[20]  # never listed
    (d / "names-modified.txt").write_text("\n".join(sorted(names)) + "\n")
    subprocess.check_call([sys.executable, "-m", "nfsreaddir", "results", str(d)])
    res = json.loads((d / "results.json").read_text())
    assert res["verdict"] == "FAIL"
    mod = res["phases"]["modified"]
    assert mod["duplicates"] == 1 and mod["missing"] == 1
    assert mod["duplicate_examples"] == [names[10]]


def test_table_puts_kernels_side_by_side():
    from conftest import FIXTURES

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nfsreaddir",
            "results",
            "--table",
            f"{FIXTURES}/5.10-v4.1",
            f"{FIXTURES}/6.1-v3",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "5.10.0-" in out and "6.1.0-" in out and "READDIR RPCs" in out
    assert "FAIL" in out and "PASS" in out


def test_overhead_is_the_ratio_of_the_medians_of_one_run(tmp_path):
    """readdir-overhead's verdict, from the listing times of a real run on the patched 5.10
    (tests/fixtures/overhead-5.10-series/COMMAND); the other recorders it timed alongside
    (traced_flight) do not enter the verdict."""
    import statistics

    from conftest import FIXTURES

    src = f"{FIXTURES}/overhead-5.10-series"
    facts = read_facts(f"{src}/facts")
    d, res = rebuild(src, tmp_path)
    times = {k: [float(v) for v in facts[k].values()] for k in ("untraced", "traced")}
    assert res["untraced"]["median"] == round(statistics.median(times["untraced"]), 3)
    assert res["traced"]["median"] == round(statistics.median(times["traced"]), 3)
    assert res["slowdown"] == round(res["traced"]["median"] / res["untraced"]["median"], 3)
    assert res["verdict"] == ("PASS" if res["slowdown"] <= 1.10 else "FAIL")
    assert res == json.loads(open(f"{src}/results.json").read())
    # The same times judged against a limit below the measured slowdown fail.
    text = (
        (d / "facts")
        .read_text()
        .replace("run.max_slowdown=1.10", f"run.max_slowdown={res['slowdown'] - 0.01:.2f}")
    )
    (d / "facts").write_text(text)
    subprocess.check_call([sys.executable, "-m", "nfsreaddir", "results", str(d)])
    strict = json.loads((d / "results.json").read_text())
    assert strict["verdict"] == "FAIL" and "limit" in strict["reasons"][0]


def test_a_directory_that_is_no_run_says_what_it_lacks(tmp_path):
    """results on a directory that is no reproducer's: what it lacks, in one line, and no
    verdict (an error, which stops a bisect), never a raw errno."""
    from nfsreaddir.status import ERROR as EXIT_ERROR

    p = run_cli("results", "--verdict", tmp_path)
    assert p.returncode == EXIT_ERROR and p.stdout == "", p.stdout
    assert p.stderr == (
        f"nfs-readdir: {tmp_path} is not a reproducer's results directory: it "
        "has no results.json (the reproducers and vm-run write one into their "
        "--results directory)\n"
    )
    p = run_cli("results", tmp_path)
    assert p.returncode == EXIT_ERROR and "it has no facts file" in p.stderr, p.stderr
    # A run whose results.json was not written yet: the command that writes it.
    (tmp_path / "facts").write_text("run.name=readdir-loopback\n")
    p = run_cli("results", "--verdict", tmp_path)
    assert p.returncode == EXIT_ERROR and f"`nfs-readdir results {tmp_path}`" in p.stderr
    assert "Errno" not in p.stderr
