"""export --format chrome-trace: Trace Event JSON that Perfetto's UI and chrome://tracing open,
checked against the format (required fields, one track per process, timestamps in order) and
against the listings of `analyze --json` on the same trace."""

import glob
import json
import os

from conftest import FIXTURES, run_cli

MULTI = os.path.join(FIXTURES, "multi-5.10", "multi.dat")
# Fields every event of its phase must carry (the Trace Event Format document).
REQUIRED = {
    "X": {"name", "cat", "ph", "ts", "dur", "pid", "tid"},
    "i": {"name", "cat", "ph", "ts", "s", "pid", "tid"},
    "M": {"name", "ph", "pid", "tid", "args"},
}


def exported(tmp_path, trace):
    run_cli("export", "--format", "chrome-trace", trace, "-o", f"{tmp_path}/", check=0)
    (out,) = glob.glob(str(tmp_path / "chrome-trace" / "*.json"))
    with open(out) as f:
        return json.load(f)["traceEvents"], out


def test_chrome_trace_follows_the_trace_event_format(tmp_path):
    evs, _ = exported(tmp_path, MULTI)
    for e in evs:
        assert e["ph"] in REQUIRED, e
        assert REQUIRED[e["ph"]] <= set(e), e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g"), e
    timed = [e for e in evs if e["ph"] != "M"]
    assert [e["ts"] for e in timed] == sorted(e["ts"] for e in timed)
    # One track per process: one name for each pid, and every pid named.
    names = {}
    for e in evs:
        if e["ph"] == "M" and e["name"] == "process_name":
            assert e["pid"] not in names, e
            names[e["pid"]] = e["args"]["name"]
    assert {e["pid"] for e in timed} == set(names)
    assert {"multi-reader[432]", "multi-reader[437]", "ls[453]"} <= set(names.values())


def test_chrome_trace_slices_match_the_listings(tmp_path):
    evs, _ = exported(tmp_path, MULTI)
    (js,) = json.loads(run_cli("analyze", "--json", MULTI, check=0).stdout)
    listings = js["listings"]
    slices = [e for e in evs if e.get("cat") == "listing"]
    assert len(slices) == len(listings)
    for n, s in enumerate(listings):
        mine = [e for e in evs if e.get("args", {}).get("listing") == n]

        def cat(c, mine=mine):
            return [e for e in mine if e["cat"] == c]

        (whole,) = cat("listing")
        assert abs(whole["dur"] / 1e6 - s["seconds"]) < 0.002, (n, whole, s["seconds"])
        assert len(cat("readdir")) == s["readdirs"], n
        assert len(cat("restart")) == (s["restarts"] or 0), n
        assert len(cat("invalidation")) == (s["invalidations"] or 0), n
        assert len(cat("getdents")) == s["getdents"], n
        # Each READDIR lies inside its listing's slice.
        for e in cat("readdir"):
            assert (
                whole["ts"] <= e["ts"] and e["ts"] + e["dur"] <= whole["ts"] + whole["dur"] + 1e-3
            )


def test_chrome_trace_of_a_capture_has_a_track_per_client(tmp_path):
    cap = os.path.join(FIXTURES, "5.10-v4.1-cap", "modified.pcap.gz")
    evs, _ = exported(tmp_path, cap)
    tracks = [e["args"]["name"] for e in evs if e.get("name") == "process_name"]
    assert tracks and all(t.startswith("client ") for t in tracks), tracks
    (js,) = json.loads(run_cli("analyze", "--json", cap, check=0).stdout)
    restarts = sum(s["restarts"] for s in js["listings"])
    assert restarts > 0 and sum(e.get("cat") == "restart" for e in evs) == restarts


def test_chrome_trace_of_the_same_trace_is_left_as_it_was(tmp_path):
    _, out = exported(tmp_path, MULTI)
    p = run_cli("export", "--format", "chrome-trace", MULTI, "-o", tmp_path, check=0)
    assert "left as it was" in p.stdout and out in p.stdout


def test_a_dcache_run_is_refused_with_what_to_use(tmp_path):
    p = run_cli(
        "export",
        "--format",
        "chrome-trace",
        os.path.join(FIXTURES, "dcache-negative-5.10"),
        "-o",
        tmp_path,
    )
    assert p.returncode == 128 and "csv or parquet" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and os.listdir(tmp_path) == []


# Float noise of microseconds with three decimals, far below the nanosecond they keep.
NOISE = 1e-6


def partial_overlaps(evs):
    """Pairs of "X" slices on one track (pid, tid) that overlap without one holding the
    other, as no viewer can draw them."""
    tracks: dict = {}
    for e in evs:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e))
    bad = []
    for slices in tracks.values():
        slices.sort(key=lambda s: (s[0], -s[1]))
        open_ = []  # the slices that hold the current one, innermost last
        for a, b, e in slices:
            while open_ and open_[-1][1] <= a + NOISE:
                open_.pop()
            if open_ and b > open_[-1][1] + NOISE:
                bad.append((open_[-1][2]["name"], e["name"]))
            open_.append((a, b, e))
    return bad


def test_no_two_slices_on_a_track_overlap_partially(tmp_path):
    """A track per listing: a capture's client, whose passes overlap, and a trace's
    processes (find lists a tree, a poller several times) draw as nested slices."""
    for trace in (MULTI, os.path.join(FIXTURES, "fleet-5.10", "fleet.pcap.gz")):
        evs, _ = exported(tmp_path / os.path.basename(trace), trace)
        assert [e for e in evs if e["ph"] == "X"]
        assert partial_overlaps(evs) == [], trace
        # Every listing on a track of its own, its READDIRs with it.
        lsts = [e for e in evs if e.get("cat") == "listing"]
        assert len({(e["pid"], e["tid"]) for e in lsts}) == len(lsts) > 1
        track = {e["args"]["listing"]: (e["pid"], e["tid"]) for e in lsts}
        for e in evs:
            if e.get("cat") in ("readdir", "restart", "invalidation"):
                assert (e["pid"], e["tid"]) == track[e["args"]["listing"]], e
        named = [e for e in evs if e["ph"] == "M" and e["name"] == "thread_name"]
        assert len({(e["pid"], e["tid"]) for e in named}) == len(named)


def test_the_overlap_check_sees_a_partial_overlap():
    def x(ts, dur):
        return {"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": dur, "name": f"{ts}"}

    assert partial_overlaps([x(0, 10), x(2, 3), x(5, 5)]) == []
    assert partial_overlaps([x(0, 10), x(5, 10)]) == [("0", "5")]
