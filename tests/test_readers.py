"""The reproducers' directory readers on a local directory (no VM): what they record as ground
truth must be what they did, checked against os.listdir and against the program they ran."""

import json
import os
import subprocess

from conftest import TOP

READER = os.path.join(TOP, "reproducers", "multi-reader")
PACED = os.path.join(TOP, "reproducers", "paced-lister")


def make_dir(tmp_path, n):
    d = tmp_path / "d"
    d.mkdir()
    for i in range(n):
        (d / f"file{i:05d}").touch()
    return d


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_paced_lister_lists_every_name_once(tmp_path):
    d = make_dir(tmp_path, 1500)
    out = subprocess.run(
        [PACED, "--bufsize", "1024", str(d)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(n for n in out if n not in (".", "..")) == sorted(os.listdir(d))


def test_poller_lists_until_told_to_stop(tmp_path):
    d = make_dir(tmp_path, 700)
    rec, stop = tmp_path / "poller.jsonl", tmp_path / "stop"
    p = subprocess.Popen(
        [
            READER,
            "list",
            "--kind",
            "poller",
            "--record",
            rec,
            "--every",
            "0.05",
            "--until",
            stop,
            "--bufsize",
            "4096",
            d,
        ]
    )
    while not rec.exists() or len(records(rec)) < 3:
        assert p.poll() is None
    stop.touch()
    assert p.wait(30) == 0
    listings = records(rec)
    assert len(listings) >= 3
    for r in listings:
        assert r["kind"] == "poller" and r["pid"] == p.pid
        # Every open reads all 700 names plus . and .., in 32-byte dirents: 6 calls of 4 KiB
        # (the last returning 0).
        assert r["entries"] == 702 and r["eof"] is True and r["rewinds"] == 0
        assert r["getdents"] == 7 and r["entries_after_rewind"] is None
        assert r["start"] <= r["end"]
    assert all(a["end"] <= b["start"] for a, b in zip(listings, listings[1:]))


def test_rewinder_reads_part_then_all(tmp_path):
    d = make_dir(tmp_path, 500)
    rec = tmp_path / "rewinder.jsonl"
    subprocess.run(
        [
            READER,
            "list",
            "--kind",
            "rewinder",
            "--record",
            rec,
            "--rewind",
            "1024",
            "--times",
            "2",
            d,
        ],
        check=True,
    )
    listings = records(rec)
    assert len(listings) == 2
    for r in listings:
        # 1024 bytes hold 32 dirents of 32 bytes; after the rewind, all 502 again.
        assert r["rewinds"] == 1 and r["entries_after_rewind"] == 502
        assert r["entries"] == 32 + 502 and r["eof"] is True


def test_run_records_the_programs_own_pid_and_output(tmp_path):
    d = make_dir(tmp_path, 300)
    rec, out = tmp_path / "ls.jsonl", tmp_path / "ls"
    # The consumer reads 100 bytes per 10 ms through a 4 KiB pipe: ls (3.6 KB of names) must
    # wait for it, so the run takes at least 0.3 s.
    subprocess.run(
        [
            READER,
            "run",
            "--kind",
            "slow-ls",
            "--record",
            rec,
            "--out",
            out,
            "--pipe-size",
            "4096",
            "--chunk",
            "100",
            "--pause",
            "0.01",
            "--times",
            "2",
            "--",
            "sh",
            "-c",
            'echo $$; exec ls -f "$0"',
            d,
        ],
        check=True,
    )
    runs = records(rec)
    assert len(runs) == 2
    for i, r in enumerate(runs, 1):
        with open(f"{out}-{i}.txt") as f:
            lines = f.read().splitlines()
        # The pid recorded is the process that printed its pid and then exec'd ls.
        assert int(lines[0]) == r["pid"]
        assert sorted(lines[1:]) == sorted(os.listdir(d) + [".", ".."])
        assert r["lines"] == 303 and r["exit"] == 0 and r["timed_out"] is False
        assert r["end"] - r["start"] >= 0.3
    assert runs[0]["pid"] != runs[1]["pid"]


def test_run_stops_a_program_at_its_timeout(tmp_path):
    rec = tmp_path / "r.jsonl"
    p = subprocess.run(
        [
            READER,
            "run",
            "--kind",
            "find",
            "--record",
            rec,
            "--out",
            tmp_path / "o",
            "--timeout",
            "1",
            "--",
            "sleep",
            "30",
        ],
        timeout=20,
    )
    assert p.returncode == 1
    (r,) = records(rec)
    assert r["timed_out"] is True and r["signal"] == 15 and r["exit"] is None


def test_unknown_options_are_refused(tmp_path):
    p = subprocess.run(
        [READER, "list", "--kind", "x", "--record", tmp_path / "r", "--frob", "1", tmp_path],
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0 and "unknown option --frob" in p.stderr
