"""The dcache reproducers' analysis (nfsreaddir.dcache), on runs recorded in VMs on stock
Debian kernels (tests/fixtures/dcache-*/COMMAND says how each was made; re-record them with
tests/fixtures/record-dcache) and on small hand-made marker tables. No VM is started here."""

import json
import os
import statistics
import subprocess

import pandas as pd
import pytest

from nfsreaddir import dcache
from nfsreaddir.results import read_facts

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(TOP, "tests", "fixtures")
REPRODUCERS = os.path.join(TOP, "reproducers")
S = dcache.NS


def fixture_path(name):
    return os.path.join(FIXTURES, f"dcache-{name}")


def have(name):
    return os.path.exists(os.path.join(fixture_path(name), "COMMAND"))


DCACHE_FIXTURES = sorted(d[len("dcache-"):] for d in os.listdir(FIXTURES)
                         if d.startswith("dcache-") and have(d[len("dcache-"):]))


@pytest.fixture(scope="module")
def built():
    """build_results of every fixture, once."""
    return {name: dcache.build_results(fixture_path(name)) for name in DCACHE_FIXTURES}


def res(built, name):
    if name not in built:
        pytest.fail(f"fixture dcache-{name} is missing: run tests/fixtures/record-dcache {name}")
    return built[name]


def facts(name):
    return read_facts(os.path.join(fixture_path(name), "facts"))


# ------------------------------------------------------------------ hand-made markers
def table(lines):
    """A markers table (ts in seconds, text)."""
    return pd.DataFrame({"ts": [int(t * S) for t, _ in lines],
                         "pid": 1, "text": [x for _, x in lines]})


SYNTH = [
    (0.0, "nfsrt: run kernel=6.1.0-50-amd64 reproducer=dcache-negative nfs=4.1"),
    (0.5, "nfsrt: sample nr_dentry=100 nr_unused=50 nr_negative=10 slab_active=120 "
          "slab_total=130 slab_objsize=192 kmalloc32_active=7"),
    (1.0, "nfsrt: phase=before event=start"),
    (1.2, "nfsrt: timing loop=before target=nfs n=10 ns=10.0,20.0,30.0 ref_ns=5.0,5.0,5.0 "
          "median_ns=20.0 ref_median_ns=5.0"),
    (1.4, "nfsrt: phase=before event=end seconds=0.4"),
    (2.0, "nfsrt: phase=misses event=start count=200"),
    (2.5, "nfsrt: sample nr_dentry=150 nr_unused=90 nr_negative=60 slab_active=170 "
          "slab_total=190 slab_objsize=192 kmalloc32_active=7"),
    (3.0, "nfsrt: sample nr_dentry=400 nr_unused=50 nr_negative=190 slab_active=420 "
          "slab_total=440 slab_objsize=192 kmalloc32_active=9 label=peak"),
    (4.0, "nfsrt: phase=misses event=end seconds=2.0 count=200 found=0 missing=200"),
    (4.1, "nfsrt: sample nr_dentry=300 nr_unused=250 nr_negative=210 slab_active=320 "
          "slab_total=330 slab_objsize=192 kmalloc32_active=9"),
    (5.0, "nfsrt: phase=after event=start"),
    # The stat loop twice as slow, but the fstat reference too: the host slowed down.
    (5.2, "nfsrt: timing loop=after target=nfs n=10 ns=20.0,40.0,60.0 ref_ns=10.0,10.0,10.0 "
          "median_ns=40.0 ref_median_ns=10.0"),
    (5.4, "nfsrt: phase=after event=end seconds=0.4"),
    (6.0, "nfsrt: phase=dropped event=start"),
    (6.2, "nfsrt: timing loop=dropped target=nfs n=10 ns=11.0,21.0,31.0 ref_ns=5.0,5.0,5.0 "
          "median_ns=21.0 ref_median_ns=5.0"),
    (6.4, "nfsrt: phase=dropped event=end seconds=0.4"),
    (7.0, "somebody else's marker"),
]


def test_parse_markers_keeps_every_sample_key_and_phase_value():
    m = dcache.parse_markers(table(SYNTH))
    assert m.run["kernel"] == "6.1.0-50-amd64" and m.run["reproducer"] == "dcache-negative"
    assert [p.name for p in m.phases] == ["before", "misses", "after", "dropped"]
    misses = m.phases[1]
    assert misses.attrs == {"count": 200, "seconds": 2.0, "found": 0, "missing": 200}
    assert misses.seconds == 2.0
    assert list(m.samples["nr_dentry"]) == [100, 150, 400, 300]
    assert list(m.samples["kmalloc32_active"]) == [7, 7, 9, 9]
    assert list(m.samples["label"].fillna("-")) == ["-", "-", "peak", "-"]
    assert list(m.samples["slab_bytes"]) == [120 * 192, 170 * 192, 420 * 192, 320 * 192]
    assert list(m.timings["loop"]) == ["before", "after", "dropped"]
    assert list(m.timings["ns"].iloc[1]) == [20.0, 40.0, 60.0]


def test_summary_deltas_rates_and_negative_share():
    s = dcache.summary(dcache.parse_markers(table(SYNTH)))
    json.dumps(s)                                   # JSON-able as it is
    p = s["phases"]["misses"]
    # From the last sample before the start (t=0.5) to the first after the end (t=4.1).
    assert p["before"]["nr_dentry"] == 100 and p["after"]["nr_dentry"] == 300
    assert p["delta"]["nr_dentry"] == 200 and p["delta"]["nr_negative"] == 200
    assert p["delta"]["slab_bytes"] == 200 * 192
    assert p["rate_per_s"]["nr_dentry"] == 100.0 and p["rate_per_s"]["nr_negative"] == 100.0
    assert p["negative_share"] == 1.0
    assert p["negative_fraction_after"] == 0.7
    assert p["peak"] == {"nr_dentry": 400, "nr_negative": 210}
    assert p["count"] == 200 and p["missing"] == 200
    # No sample frames `before` here: its end takes the next sample, inside `misses`.
    assert s["phases"]["before"]["delta"]["nr_dentry"] == 50


def test_summary_lookup_slowdown_is_the_ratio_of_the_medians():
    lk = dcache.summary(dcache.parse_markers(table(SYNTH)))["lookup"]["nfs"]
    assert lk["loops"]["before"]["median_ns"] == 20.0
    assert lk["loops"]["after"]["median_ns"] == 40.0
    assert lk["slowdown"] == 2.0
    assert lk["ref_slowdown"] == 2.0
    # stat/fstat per repetition: 2,4,6 before and 2,4,6 after: the walk did not slow down.
    assert lk["walk_slowdown"] == 1.0
    assert lk["control_slowdown"] == 1.05
    assert lk["control_walk_slowdown"] == round(statistics.median([11 / 5, 21 / 5, 31 / 5]) / 4, 3)


def test_summary_takes_a_samples_frame_and_phases():
    m = dcache.parse_markers(table(SYNTH))
    s = dcache.summary(m.samples, m.phases[1:2])
    assert list(s["phases"]) == ["misses"] and "lookup" not in s
    assert s["phases"]["misses"]["delta"]["nr_negative"] == 200


def test_summary_of_a_phase_cut_short_uses_the_last_sample():
    lines = SYNTH[:8]                              # stops inside `misses`
    s = dcache.summary(dcache.parse_markers(table(lines)))
    p = s["phases"]["misses"]
    assert p["seconds"] is None
    assert p["after"]["nr_dentry"] == 400 and p["delta"]["nr_dentry"] == 300


def test_plot_draws_dentries_and_negatives_over_time():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    m = dcache.parse_markers(table(SYNTH))
    fig, ax = plt.subplots()
    dcache.plot(ax, m.samples, m.phases)
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"nr_dentry", "nr_negative"}
    assert list(lines["nr_dentry"].get_ydata()) == [100, 150, 400, 300]
    assert list(lines["nr_negative"].get_xdata()) == pytest.approx([0.0, 2.0, 2.5, 3.6])
    assert len(ax.patches) == 4                    # one span per phase
    plt.close(fig)


def test_compare_rows():
    a = {"kernel": "5.10", "verdict": "PASS", "figures": {"x": 2, "y": 0, "z": "k1"}}
    b = {"kernel": "6.1", "verdict": "FAIL", "figures": {"x": 5, "w": 1}}
    rows = {r["figure"]: r for r in dcache.compare(a, b)}
    assert rows["x"] == {"figure": "x", "5.10": 2, "6.1": 5, "B/A": 2.5}
    assert rows["y"]["B/A"] is None and rows["y"]["6.1"] is None
    assert rows["w"]["5.10"] is None and rows["w"]["6.1"] == 1
    assert rows["verdict"]["5.10"] == "PASS" and rows["verdict"]["6.1"] == "FAIL"
    same = dcache.compare(a, a)
    assert {"A 5.10", "B 5.10"} <= set(same[0])


def test_build_results_without_a_run_says_why(tmp_path):
    with pytest.raises(dcache.DcacheError, match="facts"):
        dcache.build_results(tmp_path)
    (tmp_path / "facts").write_text("run.name=dcache-negative\n")
    with pytest.raises(dcache.DcacheError, match="dcache.dat"):
        dcache.build_results(tmp_path)
    (tmp_path / "facts").write_text("run.name=readdir-loopback\n")
    with pytest.raises(dcache.DcacheError, match="not one of"):
        dcache.build_results(tmp_path)


# ------------------------------------------------------------------ reproducer options
SCRIPTS = ["dcache-negative", "dcache-unlink-storm", "dcache-readdirplus", "dcache-memcg"]


def run_script(name, *args):
    return subprocess.run([os.path.join(REPRODUCERS, name)] + list(args), text=True,
                          capture_output=True, timeout=60)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_and_bad_options(name):
    p = run_script(name, "--help")
    assert p.returncode == 0 and "--results DIR" in p.stdout and "Exit status" in p.stdout
    p = run_script(name, "--no-such-option")
    assert p.returncode == 125 and "unknown option '--no-such-option'" in p.stderr
    p = run_script(name, "--nfs", "5")
    assert p.returncode == 125 and "--nfs must be" in p.stderr
    p = run_script(name, "--sample")
    assert p.returncode == 125 and "needs a value" in p.stderr


@pytest.mark.parametrize("name,args,message", [
    ("dcache-negative", ["--reps", "0"], "--reps must be an integer >= 1"),
    ("dcache-negative", ["--local", "xfs"], "--local must be ext4 or tmpfs"),
    ("dcache-negative", ["--max-slowdown", "x"], "--max-slowdown must be a number"),
    ("dcache-unlink-storm", ["--files", "2", "--workers", "3"], "must not exceed --files"),
    ("dcache-unlink-storm", ["--restat", "2"], "--restat must be 0 or 1"),
    ("dcache-readdirplus", ["--sizes", "10,10"], "a size twice"),
    ("dcache-readdirplus", ["--sizes", "10,,20"], "comma-separated integers"),
    ("dcache-readdirplus", ["--mount-opts", "a b"], "--mount-opts"),
    ("dcache-memcg", ["--mounts", "1,0"], "--mounts must be an integer >= 1"),
    ("dcache-memcg", ["--memcgs", "1,1000"], "at most 512"),
])
def test_option_values_are_checked_before_anything_runs(name, args, message):
    p = run_script(name, *args)
    assert p.returncode == 125 and message in p.stderr, p.stderr
