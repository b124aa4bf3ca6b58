"""The dcache reproducers' analysis (nfsreaddir.model.dcache), on runs recorded in VMs on stock
Debian kernels (tests/fixtures/dcache-*/COMMAND says how each was made; re-record them with
tests/fixtures/record-dcache) and on small hand-made marker tables. No VM is started here."""

import json
import os
import statistics
import subprocess

import pandas as pd
import pytest

from conftest import needs_setup
from nfsreaddir import pipeline
from nfsreaddir.facts import read_facts
from nfsreaddir.model import dcache, markers
from nfsreaddir.present import compare, plot
from nfsreaddir.rules import dcache_judge
from nfsreaddir.units import NS

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(TOP, "tests", "fixtures")
REPRODUCERS = os.path.join(TOP, "reproducers")
S = NS


def fixture_path(name):
    return os.path.join(FIXTURES, f"dcache-{name}")


def have(name):
    return os.path.exists(os.path.join(fixture_path(name), "COMMAND"))


DCACHE_FIXTURES = sorted(
    d[len("dcache-") :]
    for d in os.listdir(FIXTURES)
    if d.startswith("dcache-") and have(d[len("dcache-") :])
)


@pytest.fixture(scope="module")
def built():
    """build_results of every fixture, once."""
    return {name: dcache_judge.build_results(fixture_path(name)) for name in DCACHE_FIXTURES}


def res(built, name):
    if name not in built:
        pytest.fail(f"fixture dcache-{name} is missing: run tests/fixtures/record-dcache {name}")
    return built[name]


def facts(name):
    return read_facts(os.path.join(fixture_path(name), "facts"))


# ------------------------------------------------------------------ hand-made markers
def table(lines):
    """A markers table (ts in seconds, text)."""
    return pd.DataFrame(
        {"ts": [int(t * S) for t, _ in lines], "pid": 1, "text": [x for _, x in lines]}
    )


SYNTH = [
    (0.0, "nfsrt: run kernel=6.1.0-50-amd64 reproducer=dcache-negative nfs=4.1"),
    (
        0.5,
        "nfsrt: sample nr_dentry=100 nr_unused=50 nr_negative=10 slab_active=120 "
        "slab_total=130 slab_objsize=192 kmalloc32_active=7",
    ),
    (1.0, "nfsrt: phase=before event=start"),
    (
        1.2,
        "nfsrt: timing loop=before target=nfs n=10 ns=10.0,20.0,30.0 ref_ns=5.0,5.0,5.0 "
        "median_ns=20.0 ref_median_ns=5.0",
    ),
    (1.4, "nfsrt: phase=before event=end seconds=0.4"),
    (2.0, "nfsrt: phase=misses event=start count=200"),
    (
        2.5,
        "nfsrt: sample nr_dentry=150 nr_unused=90 nr_negative=60 slab_active=170 "
        "slab_total=190 slab_objsize=192 kmalloc32_active=7",
    ),
    (
        3.0,
        "nfsrt: sample nr_dentry=400 nr_unused=50 nr_negative=190 slab_active=420 "
        "slab_total=440 slab_objsize=192 kmalloc32_active=9 label=peak",
    ),
    (4.0, "nfsrt: phase=misses event=end seconds=2.0 count=200 found=0 missing=200"),
    (
        4.1,
        "nfsrt: sample nr_dentry=300 nr_unused=250 nr_negative=210 slab_active=320 "
        "slab_total=330 slab_objsize=192 kmalloc32_active=9",
    ),
    (5.0, "nfsrt: phase=after event=start"),
    # The stat loop twice as slow, but the fstat reference too: the host slowed down.
    (
        5.2,
        "nfsrt: timing loop=after target=nfs n=10 ns=20.0,40.0,60.0 ref_ns=10.0,10.0,10.0 "
        "median_ns=40.0 ref_median_ns=10.0",
    ),
    (5.4, "nfsrt: phase=after event=end seconds=0.4"),
    (6.0, "nfsrt: phase=dropped event=start"),
    (
        6.2,
        "nfsrt: timing loop=dropped target=nfs n=10 ns=11.0,21.0,31.0 ref_ns=5.0,5.0,5.0 "
        "median_ns=21.0 ref_median_ns=5.0",
    ),
    (6.4, "nfsrt: phase=dropped event=end seconds=0.4"),
    (7.0, "somebody else's marker"),
]


def test_parse_markers_keeps_every_sample_key_and_phase_value():
    m = markers.parse(table(SYNTH))
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
    s = dcache.summary(markers.parse(table(SYNTH)))
    json.dumps(s)  # JSON-able as it is
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
    lk = dcache.summary(markers.parse(table(SYNTH)))["lookup"]["nfs"]
    assert lk["loops"]["before"]["median_ns"] == 20.0
    assert lk["loops"]["after"]["median_ns"] == 40.0
    assert lk["slowdown"] == 2.0
    assert lk["ref_slowdown"] == 2.0
    # stat/fstat per repetition: 2,4,6 before and 2,4,6 after: the walk did not slow down.
    assert lk["walk_slowdown"] == 1.0
    assert lk["control_slowdown"] == 1.05
    assert lk["control_walk_slowdown"] == round(statistics.median([11 / 5, 21 / 5, 31 / 5]) / 4, 3)


def test_summary_takes_a_samples_frame_and_phases():
    m = markers.parse(table(SYNTH))
    s = dcache.summary(m.samples, m.phases[1:2])
    assert list(s["phases"]) == ["misses"] and "lookup" not in s
    assert s["phases"]["misses"]["delta"]["nr_negative"] == 200


def test_summary_of_a_phase_cut_short_uses_the_last_sample():
    lines = SYNTH[:8]  # stops inside `misses`
    s = dcache.summary(markers.parse(table(lines)))
    p = s["phases"]["misses"]
    assert p["seconds"] is None
    assert p["after"]["nr_dentry"] == 400 and p["delta"]["nr_dentry"] == 300


def test_plot_draws_dentries_and_negatives_over_time():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = markers.parse(table(SYNTH))
    fig, ax = plt.subplots()
    plot.dcache_samples(ax, m.samples, m.phases)
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"nr_dentry", "nr_negative"}
    assert list(lines["nr_dentry"].get_ydata()) == [100, 150, 400, 300]
    assert list(lines["nr_negative"].get_xdata()) == pytest.approx([0.0, 2.0, 2.5, 3.6])
    assert len(ax.patches) == 4  # one span per phase
    plt.close(fig)


def test_compare_rows():
    a = {"kernel": "5.10", "verdict": "PASS", "figures": {"x": 2, "y": 0, "z": "k1"}}
    b = {"kernel": "6.1", "verdict": "FAIL", "figures": {"x": 5, "w": 1}}
    rows = {r["figure"]: r for r in compare.dcache_rows(a, b)}
    assert rows["x"] == {"figure": "x", "5.10": 2, "6.1": 5, "B/A": 2.5}
    assert rows["y"]["B/A"] is None and rows["y"]["6.1"] is None
    assert rows["w"]["5.10"] is None and rows["w"]["6.1"] == 1
    assert rows["verdict"]["5.10"] == "PASS" and rows["verdict"]["6.1"] == "FAIL"
    same = compare.dcache_rows(a, a)
    assert {"A 5.10", "B 5.10"} <= set(same[0])


def test_build_results_without_a_run_says_why(tmp_path):
    with pytest.raises(dcache.DcacheError, match="facts"):
        dcache_judge.build_results(tmp_path)
    (tmp_path / "facts").write_text("run.name=dcache-negative\n")
    with pytest.raises(dcache.DcacheError, match="dcache.dat"):
        dcache_judge.build_results(tmp_path)
    (tmp_path / "facts").write_text("run.name=readdir-loopback\n")
    with pytest.raises(dcache.DcacheError, match="not one of"):
        dcache_judge.build_results(tmp_path)


# ------------------------------------------------------------------ reproducer options
SCRIPTS = ["dcache-negative", "dcache-unlink-storm", "dcache-readdirplus", "dcache-memcg"]


def run_script(name, *args):
    return subprocess.run(
        [os.path.join(REPRODUCERS, name)] + list(args), text=True, capture_output=True, timeout=60
    )


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


@pytest.mark.parametrize(
    "name,args,message",
    [
        ("dcache-negative", ["--reps", "0"], "--reps must be an integer >= 1"),
        ("dcache-negative", ["--local", "xfs"], "--local must be ext4 or tmpfs"),
        ("dcache-negative", ["--max-slowdown", "x"], "--max-slowdown must be a number"),
        ("dcache-negative", ["--exec-loop", "x"], "--exec-loop must be an integer >= 0"),
        ("dcache-negative", ["--miss-by", "open"], "--miss-by must be stat or cat"),
        ("dcache-negative", ["--paired", "3"], "--paired needs --exec-loop N"),
        ("dcache-negative", ["--miss-dir", "dev"], "--miss-dir must be beside or own"),
        (
            "dcache-negative",
            ["--local-misses", "10", "--relookup", "11"],
            "--relookup must not exceed --local-misses",
        ),
        ("dcache-unlink-storm", ["--via", "smb"], "--via must be nfs or local"),
        ("dcache-memcg", ["--nfs", "3"], "--nfs must be 4.0, 4.1 or 4.2"),
        ("dcache-unlink-storm", ["--files", "2", "--workers", "3"], "must not exceed --files"),
        ("dcache-unlink-storm", ["--restat", "2"], "--restat must be 0 or 1"),
        ("dcache-readdirplus", ["--sizes", "10,10"], "a size twice"),
        ("dcache-readdirplus", ["--sizes", "10,,20"], "comma-separated integers"),
        ("dcache-readdirplus", ["--mount-opts", "a b"], "--mount-opts"),
        ("dcache-memcg", ["--mounts", "1,0"], "--mounts must be an integer >= 1"),
        ("dcache-memcg", ["--memcgs", "1,5000"], "at most 4096"),
        ("dcache-memcg", ["--mounts", "1,2000"], "at most 1024"),
        ("dcache-memcg", ["--touch-mounts", "0"], "--touch-mounts must be an integer >= 1"),
    ],
)
def test_option_values_are_checked_before_anything_runs(name, args, message):
    p = run_script(name, *args)
    assert p.returncode == 125 and message in p.stderr, p.stderr


# ------------------------------------------------------------------ every recorded run
@pytest.mark.parametrize("name", DCACHE_FIXTURES)
def test_fixture_is_small_and_says_how_it_was_made(name):
    d = fixture_path(name)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    assert size < 3 * 1024 * 1024, f"dcache-{name} is {size} bytes"
    with open(os.path.join(d, "COMMAND")) as f:
        head, cmd = f.read().splitlines()[:2]
    assert head.startswith("# Recorded")
    repro = facts(name)["run"]["name"]
    assert cmd.startswith("reproducers/vm-run --kernel debian:") and f" -- {repro} " in cmd
    assert cmd.split()[2] == "debian:" + name.rsplit("-", 1)[1]


@pytest.mark.parametrize("name", DCACHE_FIXTURES)
def test_results_json_is_what_the_analyzer_says(built, name):
    """The results.json written when the run was recorded is what the analyzer makes of the
    same directory now (regenerate with `nfs-readdir results DIR` after changing
    the analyzer on purpose)."""
    with open(os.path.join(fixture_path(name), "results.json")) as f:
        stored = json.load(f)
    fresh = json.loads(json.dumps(res(built, name), sort_keys=True))
    assert fresh["verdict"] == stored["verdict"] and fresh["reasons"] == stored["reasons"]
    assert fresh["figures"] == stored["figures"]
    assert fresh["kernel"].startswith(name.rsplit("-", 1)[1] + ".")


@pytest.mark.parametrize("name", DCACHE_FIXTURES)
def test_every_phase_is_framed_by_samples(name):
    m, events = dcache.read_trace(os.path.join(fixture_path(name), "dcache.dat"))
    f = facts(name)
    timed = [p for p in f if p != "run" and "seconds" in f[p]]
    assert [p.name for p in m.phases if p.name in timed] == sorted(
        timed, key=[p.name for p in m.phases].index
    )
    ts = m.samples["ts"]
    for p in m.phases:
        assert p.end is not None, p.name
        assert (ts <= p.start).any() and (ts >= p.end).any(), p.name
        # The phase's own clock and the trace's agree: the markers frame the timed part
        # (spawning `date` and `awk` takes a second or so under emulation, and a guest on a
        # busy host stalls for several: 6.9 s around a 61 s cell), never a phase's length.
        lag = p.seconds - float(f[p.name]["seconds"])
        assert 0 <= lag < max(5.0, 0.25 * p.seconds), p.name
    assert m.run["reproducer"] == f["run"]["name"]
    s = dcache.summary(m, events=events)
    json.dumps(s)
    assert set(s["phases"]) == {p.name for p in m.phases}


@pytest.mark.parametrize("name", DCACHE_FIXTURES)
def test_plot_of_a_run(name, tmp_path):
    run = fixture_path(name)
    out = plot.dcache_runs(
        [(pipeline.dcache_saved(run), pipeline.dcache_markers(run))], tmp_path / "run.png"
    )
    assert os.path.getsize(out) > 10000


def test_plot_of_two_kernels_draws_the_figures_they_are_about(built):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1)
    rdp = [res(built, f"readdirplus-{k}") for k in ("5.10", "6.1")]
    plot.dcache_figures(a, rdp)
    for line, r in zip(a.get_lines(), rdp):
        ns = sorted(sizes_of(r))
        assert list(line.get_xdata()) == ns
        assert list(line.get_ydata()) == [r["figures"][f"n{n}_client_dentries"] for n in ns]
    memcg = [res(built, f"memcg-{k}") for k in ("5.10", "6.1")]
    plot.dcache_figures(b, memcg)
    cells = [c for c in memcg[0]["phase_order"] if "memcg" in memcg[0]["phases"][c]]
    heights = [p.get_height() for p in b.patches]
    # bars: per kernel, the setup bars of every cell, then the lookup bars stacked on them
    first = heights[: len(cells)]
    assert first == [memcg[0]["phases"][c]["memcg"]["lru_bytes_setup"] for c in cells]
    plt.close(fig)


@pytest.mark.parametrize("repro", ["negative", "unlink-storm", "readdirplus", "memcg"])
def test_compare_two_kernels(built, repro):
    a, b = res(built, f"{repro}-5.10"), res(built, f"{repro}-6.1")
    rows = compare.dcache_rows(a, b)
    cols = set(rows[0]) - {"figure", "B/A"}
    assert len(cols) == 2 and all(c.startswith(("5.10", "6.1")) for c in cols)
    assert {r["figure"] for r in rows} == set(a["figures"]) | set(b["figures"]) | {"verdict"}
    for r in rows:
        va, vb = (r[c] for c in sorted(cols))
        if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va:
            assert r["B/A"] == round(vb / va, 3)


# ------------------------------------------------------------------ through nfs-readdir
def test_cli_analyze_prints_the_phase_deltas_and_figures(built):
    from conftest import run_cli

    name = "unlink-storm-6.1"
    r = res(built, name)
    out = run_cli("analyze", fixture_path(name), check=0).stdout
    assert out.startswith(
        f"{fixture_path(name)}: dcache-unlink-storm on {r['kernel']}: "
        f"{r['verdict']}: {r['reasons'][0]}"
    )
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.split()[:1] and line.split()[0] in r["phases"]
    }
    storm = r["phases"]["storm"]
    assert rows["storm"][2:4] == [
        str(storm["delta"]["nr_dentry"]),
        str(storm["delta"]["nr_negative"]),
    ]
    figures = {
        line.split()[0]: line.split()[1:]
        for line in out.split("figures:")[1].splitlines()
        if line.strip()
    }
    assert figures["storm_negative_delta"] == [str(r["figures"]["storm_negative_delta"])]


def test_cli_analyze_shows_the_lookup_slowdown(built):
    from conftest import run_cli

    r = res(built, "negative-6.1")
    out = run_cli("analyze", fixture_path("negative-6.1"), check=0).stdout
    block = out.split("lookup loops", 1)[1].split("\n\n", 1)[0]
    for target in ("nfs", "local"):
        row = next(line.split() for line in block.splitlines() if line.split()[:1] == [target])
        lk = r["lookup"][target]
        assert float(row[-2]) == lk["slowdown"] and float(row[-1]) == lk["walk_slowdown"]


def test_cli_analyze_json_of_a_dcache_trace_is_its_results(built):
    from conftest import run_cli

    name = "negative-5.10"
    out = json.loads(
        run_cli("analyze", "--json", os.path.join(fixture_path(name), "dcache.dat"), check=0).stdout
    )
    assert len(out) == 1
    fresh = json.loads(json.dumps(res(built, name), sort_keys=True))
    assert out[0]["dcache"]["figures"] == fresh["figures"]
    for target in ("nfs", "local"):
        lookup = out[0]["dcache"]["lookup"][target]
        assert lookup["walk_slowdown"] == fresh["figures"][f"{target}_walk_slowdown"]
        assert lookup["slowdown"] == round(
            lookup["loops"]["after"]["median_ns"] / lookup["loops"]["before"]["median_ns"], 3
        )


def test_cli_compare_and_plot_two_kernels(built, tmp_path):
    from conftest import run_cli

    a, b = fixture_path("memcg-5.10"), fixture_path("memcg-6.1")
    out = run_cli("compare", a, b, check=0).stdout
    ra, rb = res(built, "memcg-5.10"), res(built, "memcg-6.1")
    header = next(line for line in out.splitlines() if ra["kernel"] in line)
    assert rb["kernel"] in header
    k = "k1-m16_lru_bytes_setup"
    row = next(line.split() for line in out.splitlines() if line.startswith(k + " "))
    assert row[1:3] == [str(ra["figures"][k]), str(rb["figures"][k])]
    png = tmp_path / "memcg.png"
    assert run_cli("plot", a, b, "-o", png, check=0).stdout.strip() == str(png)
    assert os.path.getsize(png) > 20000


def test_cli_will_not_mix_dcache_runs_and_readdir_traces(tmp_path):
    from conftest import run_cli

    readdir = os.path.join(FIXTURES, "6.1-v3")
    p = run_cli("compare", fixture_path("memcg-6.1"), readdir, check=128)
    assert "is a dcache run and the other is not" in p.stderr
    p = run_cli("plot", fixture_path("memcg-6.1"), readdir, "-o", tmp_path / "x.png", check=128)
    assert "separately" in p.stderr and not (tmp_path / "x.png").exists()


def test_cli_names_a_dcache_run_without_its_trace(tmp_path):
    import shutil

    from conftest import run_cli

    d = tmp_path / "run"
    shutil.copytree(fixture_path("negative-6.1"), d)
    os.unlink(d / "dcache.dat")
    with open(d / "other.txt", "w") as f:
        f.write("x")
    p = run_cli("analyze", d / "facts", check=128)
    assert "no dcache.dat" in p.stderr and "Traceback" not in p.stderr


def test_results_module_dispatches_to_dcache(tmp_path):
    """`python -m nfsreaddir results DIR` (what vm-run runs) writes the dcache results."""
    import shutil

    name = DCACHE_FIXTURES[0]
    d = tmp_path / "run"
    shutil.copytree(fixture_path(name), d)
    os.unlink(d / "results.json")
    py = os.path.join(TOP, ".venv", "bin", "python")
    subprocess.run([py, "-m", "nfsreaddir", "results", str(d)], check=True, timeout=300)
    p = subprocess.run(
        [py, "-m", "nfsreaddir", "results", "--verdict", str(d)], text=True, capture_output=True
    )
    with open(d / "results.json") as f:
        r = json.load(f)
    assert p.stdout.startswith(r["verdict"] + ": ") and r["name"] == facts(name)["run"]["name"]
    # The exit status is the verdict's, as the reproducers and vm-run read it.
    assert p.returncode == {"PASS": 0, "FAIL": 1}[r["verdict"]]


# ------------------------------------------------------------------ dcache-negative
def median_of(name, key):
    return statistics.median(
        float(x) for x in facts(name)[key.split(".")[0]][key.split(".", 1)[1]].split(",")
    )


@pytest.mark.parametrize("kernel", ["5.10", "6.1"])
def test_negative_lookups_leave_one_negative_dentry_each(built, kernel):
    r = res(built, f"negative-{kernel}")
    f = r["figures"]
    # tmpfs export: knfsd keeps no negative dentry, so the NFS ones are the client's.
    assert r["fs"] == "tmpfs" and r["local"] == "ext4"
    assert r["nfs_misses"] <= f["nfs_negative_added"] <= r["nfs_misses"] * 1.01
    assert r["local_misses"] <= f["local_negative_added"] <= r["local_misses"] * 1.01
    # Each NFS miss was one LOOKUP (the loops before add a handful).
    assert r["nfs_misses"] <= f["nfs_lookups_traced"] <= r["nfs_misses"] + 20
    assert r["phases"]["nfs-misses"]["missing"] == r["nfs_misses"]
    # A negative dentry is a whole dentry: the dentry slab grows by its size per miss.
    objsize = (
        r["phases"]["local-misses"]["after"]["slab_bytes"]
        / r["phases"]["local-misses"]["after"]["slab_active"]
    )
    assert f["local_dentry_bytes_added"] == pytest.approx(objsize * r["local_misses"], rel=0.02)
    # drop_caches takes them all back.
    assert f["nr_negative_after_drop"] < 0.001 * r["local_misses"]


@pytest.mark.parametrize("kernel", ["5.10", "6.1"])
def test_negative_slowdown_is_the_ratio_of_the_two_medians(built, kernel):
    name = f"negative-{kernel}"
    r = res(built, name)
    for target in ("nfs", "local"):
        before = median_of(name, f"before.{target}.ns")
        after = median_of(name, f"after.{target}.ns")
        assert r["figures"][f"{target}_slowdown"] == round(after / before, 3)
        ff = facts(name)
        walk = {
            loop: statistics.median(
                float(a) / float(b)
                for a, b in zip(
                    ff[loop][f"{target}.ns"].split(","), ff[loop][f"{target}.ref_ns"].split(",")
                )
            )
            for loop in ("before", "after", "dropped")
        }
        assert r["figures"][f"{target}_walk_slowdown"] == round(walk["after"] / walk["before"], 3)
        assert r["figures"][f"{target}_control_walk_slowdown"] == round(
            walk["dropped"] / walk["before"], 3
        )
        assert len(ff["before"][f"{target}.ns"].split(",")) == r["reps"]


@pytest.mark.parametrize("kernel", ["5.10", "6.1"])
def test_negative_verdict_follows_the_threshold(built, kernel):
    r = res(built, f"negative-{kernel}")
    limit = r["max_slowdown"]
    bad = [
        t
        for t in ("nfs", "local")
        if r["figures"][f"{t}_walk_slowdown"] > limit
        and r["figures"][f"{t}_control_walk_slowdown"] <= limit
    ]
    assert r["verdict"] == ("FAIL" if bad else "PASS"), r["reasons"]
    # Lowering the threshold below what was measured turns it into a FAIL, unless the
    # control was as slow.
    f = dict(facts(f"negative-{kernel}"))
    lk = r["lookup"]["local"]
    if lk["control_walk_slowdown"] < lk["walk_slowdown"]:
        r2 = dict(r, max_slowdown=(lk["control_walk_slowdown"] + lk["walk_slowdown"]) / 2)
        _, fail, _ = dcache_judge.JUDGES["dcache-negative"](r2, f, None, None)
        assert any(x.startswith("local path walk") for x in fail)


# ------------------------------------------------------------------ dcache-unlink-storm
@pytest.mark.parametrize("kernel", ["5.10", "6.1"])
def test_unlink_storm_removes_every_file_through_nfs(built, kernel):
    r = res(built, f"unlink-storm-{kernel}")
    f, files = r["figures"], r["files"]
    assert r["phases"]["storm"]["removed"] == files and r["phases"]["storm"]["other"] == 0
    assert f["nfs_unlinks_traced"] == files
    # ext4 export: knfsd's unlink leaves a negative dentry on the server side per file.
    assert r["fs"] == "ext4"
    assert 0.95 * files <= f["server_negative"] <= 1.05 * files
    # Client and server together: at least one negative dentry per removed file is left.
    assert f["negative_left"] >= files
    assert f["negative_left"] == pytest.approx(f["client_negative"] + f["server_negative"])
    # drop_caches frees them.
    assert r["phases"]["drop"]["after"]["nr_negative"] < 0.05 * files


@pytest.mark.parametrize("kernel", ["5.10", "6.1"])
def test_unlink_storm_client_keeps_the_unlinked_dentry_as_negative(built, kernel):
    """Both kernels turn the unlinked dentry negative instead of dropping it (5.10.262 has
    the 6.0 change backported: nfs_unlink() blocks revalidation instead of unhashing)."""
    r = res(built, f"unlink-storm-{kernel}")
    f, files = r["figures"], r["files"]
    assert f["client_negative_from_unlink"] >= 0.95 * files
    assert f["storm_negative_delta"] >= 1.95 * files  # client + server
    assert f["nfs_lookups_traced"] >= files  # each unlink looked the name up
    # So the re-lookups of the removed names are answered from the dcache: no LOOKUP.
    assert f["restat_lookups_traced"] == 0 and abs(f["restat_negative_delta"]) < 0.01 * files
    assert r["phases"]["restat"]["missing"] == files
    assert r["verdict"] == "FAIL" and "negative dentries on the NFS client" in r["reasons"][0]


def test_storm_steady_rate_leaves_out_the_workers_start_and_the_wait_for_the_last():
    """Hand-made: nothing removed for the storm's first 2 s (workers starting), then 100
    negative dentries a second until all 1,000 are there at 13 s, then 7 s of waiting. The
    early, late and fitted rates are the 100 a second of the removals themselves."""
    lines = [
        (0.0, "nfsrt: run kernel=6.1.0-50-amd64 reproducer=dcache-unlink-storm"),
        (0.5, "nfsrt: sample nr_dentry=50 nr_unused=0 nr_negative=0"),
        (1.0, "nfsrt: phase=storm event=start files=1000"),
    ]
    for t in range(2, 21):
        n = min(max(t - 3, 0), 10) * 100
        lines.append((t, f"nfsrt: sample nr_dentry={1050 - n} nr_unused=0 nr_negative={n}"))
    lines.append((20.5, "nfsrt: phase=storm event=end seconds=19.5"))
    lines.append((21.0, "nfsrt: sample nr_dentry=50 nr_unused=0 nr_negative=1000"))
    rates = dcache_judge._steady_rates(markers.parse(table(lines)), "storm")
    assert rates == {"early": 100.0, "late": 100.0, "fit": 100.0}


@pytest.mark.parametrize("kernel", ["5.10", "6.1"])
def test_storm_steady_rates_follow_the_traced_unlinks(built, kernel):
    """The rates read from the dcache samples against an oracle that never looks at them: the
    nfs:nfs_unlink_exit events between the 10th and 30th, 70th and 90th, 10th and 90th
    percentile of the unlinks, times the negative dentries each removed file left."""
    f = res(built, f"unlink-storm-{kernel}")["figures"]
    _, events = dcache.read_trace(
        os.path.join(fixture_path(f"unlink-storm-{kernel}"), "dcache.dat")
    )
    ts = sorted(events.loc[events["key"] == "nfs_unlink_exit", "ts"])
    n = len(ts)
    assert n == f["files"]
    for lo, hi, name in ((0.1, 0.3, "early"), (0.7, 0.9, "late"), (0.1, 0.9, "fit")):
        a, b = int(lo * n), int(hi * n)
        oracle = f["storm_negative_per_file"] * (b - a) / ((ts[b] - ts[a]) / S)
        assert f[f"storm_negative_per_s_{name}"] == pytest.approx(oracle, rel=0.15), name


# ------------------------------------------------------------------ dcache-readdirplus
def sizes_of(r):
    return [int(x) for x in str(r["sizes"]).split(",")]


@pytest.mark.parametrize("kernel", ["5.10", "6.1"])
def test_readdirplus_lists_every_name_and_knfsd_looks_each_up(built, kernel):
    r = res(built, f"readdirplus-{kernel}")
    f = r["figures"]
    for n in sizes_of(r):
        assert f[f"n{n}_entries"] == n
        # NFSv4 READDIR asks for attributes that need a server-side lookup of every name.
        assert 0.9 * n <= f[f"n{n}_server_dentries"] <= 1.1 * n + 300
        assert f[f"n{n}_dentries_added"] == f[f"n{n}_client_dentries"] + f[f"n{n}_server_dentries"]
        assert f[f"n{n}_readdir_rpcs"] >= 1


def test_readdirplus_6_1_primes_a_dentry_per_traced_name(built):
    r = res(built, "readdirplus-6.1")
    f = r["figures"]
    for n in sizes_of(r):
        primed, client = f[f"n{n}_primed_traced"], f[f"n{n}_client_dentries"]
        assert 0 < primed <= n
        assert client == pytest.approx(primed, rel=0.2, abs=150)
    n = max(sizes_of(r))
    assert f["largest_client_per_name"] > r["max_per_name"] and r["verdict"] == "FAIL"


def test_readdirplus_5_10_primes_only_the_first_getdents(built):
    """5.10 primes dentries only from the READDIR replies that fill the first getdents call
    (pos 0: about 1,000 names for `ls -f`'s 32 KiB buffer, rounded up to whole replies), so
    past that size the count stays flat."""
    r = res(built, "readdirplus-5.10")
    f = r["figures"]
    sizes = sizes_of(r)
    for n in sizes:
        assert f[f"n{n}_primed_traced"] == 0  # no such event on 5.10
    small, mid, big = (f[f"n{n}_client_dentries"] for n in sizes)
    assert small == pytest.approx(sizes[0], rel=0.15, abs=50)  # all of a small one
    assert mid == pytest.approx(big, rel=0.15)  # flat past the first call
    assert big < 0.2 * sizes[-1]
    assert f["largest_client_per_name"] <= r["max_per_name"] and r["verdict"] == "PASS"


def test_readdirplus_6_1_needs_fewer_readdirs(built):
    a, b = res(built, "readdirplus-5.10"), res(built, "readdirplus-6.1")
    n = max(sizes_of(a))
    assert n == max(sizes_of(b))
    assert b["figures"][f"n{n}_readdir_rpcs"] * 4 < a["figures"][f"n{n}_readdir_rpcs"]


# ------------------------------------------------------------------ dcache-memcg
def cells(r):
    return {p: v["memcg"] for p, v in r["phases"].items() if "memcg" in v}


def test_memcg_5_10_allocates_list_lru_lists_before_any_use(built):
    r = res(built, "memcg-5.10")
    c = cells(r)
    assert set(c) == {"k1-m1", "k1-m16", "k8-m1", "k8-m16"}
    for name, x in c.items():
        assert x["lru_allocs_touch"] == 0, name  # all of it at setup
    # New memcgs grow the id space: every list_lru of every superblock gets new lists.
    assert c["k1-m16"]["lru_allocs_setup"] > 10 * 16
    # New superblocks get lists for every memcg id, even with one memcg.
    assert c["k8-m1"]["lru_allocs_setup"] >= 8 * 2 * 16
    assert r["verdict"] == "FAIL"
    assert any(x.startswith("k1-m16: making 1 mounts and 16 memcgs") for x in r["reasons"])


def test_memcg_6_1_allocates_a_list_per_used_pair(built):
    r = res(built, "memcg-6.1")
    c = cells(r)
    for name, x in c.items():
        k, m = x["mounts"], x["memcgs"]
        # Setup: the two list_lru heads of each new superblock, nothing per memcg.
        assert x["lru_allocs_setup"] == 2 * k, name
        # Each touched (superblock, memcg) pair: its dentry and inode lists (plus the other
        # file systems the memcg's process touched).
        assert x["lru_allocs_touch"] >= 2 * k * m, name
        assert x["lru_bytes_setup"] <= r["max_setup_bytes"]
    assert c["k8-m16"]["lru_allocs_touch"] - c["k1-m16"]["lru_allocs_touch"] >= 2 * 7 * 16
    assert r["verdict"] == "PASS"
    # The memcgs were charged for the dentries and inodes their lookups made.
    assert c["k8-m16"]["charged_slab_bytes"] > c["k8-m1"]["charged_slab_bytes"] > 0


def test_memcg_pair_figure_is_the_interaction_of_the_corners(built):
    for kernel in ("5.10", "6.1"):
        r = res(built, f"memcg-{kernel}")
        c, f = cells(r), r["figures"]
        v = [c[x]["lru_bytes_total"] for x in ("k8-m16", "k8-m1", "k1-m16", "k1-m1")]
        assert f["pair_lru_bytes"] == round((v[0] - v[1] - v[2] + v[3]) / (7 * 15))


# ------------------------------------------------------------------ the list_lru model
def test_capacity_follows_the_5_10_rule():
    from nfsreaddir.model import listlru

    # 4 at first; the id that overflows C makes it 2 x (id + 1).
    assert [listlru.capacity(n) for n in (1, 4, 5, 10, 11, 22, 23)] == [4, 4, 10, 10, 22, 22, 46]
    assert listlru.capacity(1024) == 1534 and listlru.capacity(10_000) == 12_286


def test_5_10_pointer_arrays_above_8_kib_are_not_counted():
    """Measured on 5.10 at C = 1,534 (`dcache-memcg --mounts 1,16,256 --memcgs 1,64,1024`, a
    run too big for a fixture): 256 superblocks made 785,920 list_lru allocations of
    25,165,824 bytes, C lists and a node array per list_lru and no pointer array (a 12,288-byte
    kvmalloc, kmalloc_large, whose event names kvmalloc_node)."""
    from nfsreaddir.model import listlru

    assert listlru.array_traced(1022) and not listlru.array_traced(1023)
    assert 2 * 256 * listlru.lru_bytes_510(1534, traced=True) == 25_165_824
    assert 2 * 256 * listlru.lru_bytes_510(1534) == 2 * 256 * 65_536
    assert listlru.capacity_of_allocs(785_920 // 512) == 1534
    assert listlru.capacity_of_allocs(48) == 46  # the array counted: 1 + C + 1
    assert listlru.lru_bytes_510(46, traced=True) == listlru.lru_bytes_510(46) == 2048


def test_5_10_code_law_gives_the_recorded_bytes_exactly(built):
    """The 2x2 fixture recorded before the law was written down: a new superblock's two
    list_lrus at the capacity of the time, and the capacity's growth paid by every
    memcg-aware list_lru in the system (the k8 anomaly: k1-m16 grew it, the k8 cells reuse
    the ids and pay only for their own superblocks)."""
    from nfsreaddir.model import listlru

    c = cells(res(built, "memcg-5.10"))
    assert c["k1-m1"]["lru_bytes_setup"] == 2 * listlru.lru_bytes_510(4) == 512
    for name in ("k8-m1", "k8-m16"):
        assert c[name]["lru_bytes_setup"] == 8 * 2 * listlru.lru_bytes_510(22) == 15_360
    growth = c["k1-m16"]["lru_bytes_setup"] - 512
    per_lru = listlru.growth_bytes_510(4, 10) + listlru.growth_bytes_510(10, 22)
    assert growth % per_lru == 0 and 40 < growth // per_lru < 200  # list_lrus in the guest


def test_fit_recovers_known_coefficients():
    from nfsreaddir.model import listlru

    rows = [
        {"K": k, "M": m, "P": m * min(k, 2), "C": listlru.capacity(m + 5)}
        for k in (1, 2, 4)
        for m in (1, 8, 32)
    ]
    for r in rows:
        r["bytes"] = 300 * r["K"] + 80 * r["K"] * r["C"] + 150 * r["P"] + 20 * r["M"]
    fit = listlru.fit(rows)
    assert fit["max_rel_error"] < 1e-6
    assert fit["coef"] == pytest.approx({"K": 300, "KC": 80, "P": 150, "M": 20}, rel=1e-6)
    assert listlru.fit(rows[:3]) is None
    # Lazy: no K x C column, and the prediction takes it as 0.
    for r in rows:
        r["bytes"] = 128 * r["K"] + 190 * r["P"] + 140 * r["M"]
    fit = listlru.fit(rows, listlru.LAZY_FEATURES)
    assert fit["coef"] == pytest.approx({"K": 128, "P": 190, "M": 140}, rel=1e-6)
    assert listlru.predict(fit["coef"], 10, 5, 7) == pytest.approx(1280 + 1330 + 700)
    assert listlru.fit(rows[:2], listlru.LAZY_FEATURES) is None


def test_memcg_grid_6_1_fits_a_cost_per_used_pair(built):
    """Nine cells, each memcg on 2 of the K mounts (--touch-mounts 2): on 6.1 the lookups
    allocate per used (superblock, memcg) pair, so the fit puts the bytes on P, not on K x C
    (5.10's law) or K x M."""
    if not have("memcg-grid-6.1"):
        pytest.skip("no dcache-memcg-grid-6.1 fixture: tests/fixtures/record-dcache memcg-grid-6.1")
    r = res(built, "memcg-grid-6.1")
    f, c = r["figures"], cells(r)
    assert r["lru_count"] == "hist" and r["touch_mounts"] == 2
    assert len(c) == 9 and f["model_cells"] == 9
    for name, x in c.items():
        assert x["pairs"] == x["memcgs"] * min(2, x["mounts"]), name
        assert x["lru_bytes_mkdir"] == 0, name  # making memcgs costs nothing
        assert x["lru_allocs_mount"] == 2 * x["mounts"], name  # two list heads a superblock
        # At least the dentry and inode lists of every used pair.
        assert x["lru_allocs_touch"] >= 2 * x["pairs"], name
    assert f["eager"] is False and f["growth_bytes"] == 0
    # The lazy fit (no K x C term: C is in none of 6.1's paths): a superblock costs its two
    # list heads (2 x kmalloc-64), a used pair its two kmalloc-64 lists or more (the
    # transient ancestor table), and each memcg something of its own (the lists its process
    # fills on the other file systems it touches).
    assert "model_bytes_per_KC" not in f
    assert abs(f["model_bytes_per_K"] / 128 - 1) < 0.25
    assert f["model_bytes_per_P"] >= 2 * 64
    assert f["model_bytes_per_M"] > 0
    assert f["model_max_rel_error"] < 0.25
    # The same pairs over more superblocks cost the same: k2 and k4 with M memcgs use 2M pairs.
    for m in (8, 32):
        a, b = c[f"k2-m{m}"]["lru_bytes_touch"], c[f"k4-m{m}"]["lru_bytes_touch"]
        assert abs(b / a - 1) < 0.25, (m, a, b)


def test_a_cell_cut_short_before_its_lookups_is_left_out_of_the_model(monkeypatch):
    """A run stopped during a cell's lookups has no `touched` sample there: what they cost is
    unknown. Taken as 0, the lazy 6.1 would look eager and be held to 5.10's law."""
    if not have("memcg-grid-6.1"):
        pytest.skip("no dcache-memcg-grid-6.1 fixture: tests/fixtures/record-dcache memcg-grid-6.1")
    read = dcache_judge.read_trace

    def figures(until):
        """The run's figures with the `touched` samples after time `until` taken away."""

        def cut(path):
            markers, events = read(path)
            s = markers.samples
            markers.samples = s[(s["label"] != "touched") | (s["ts"] < until(s["ts"]))]
            return markers, events

        monkeypatch.setattr(dcache_judge, "read_trace", cut)
        return dcache_judge.build_results(fixture_path("memcg-grid-6.1"))["figures"]

    f = figures(lambda ts: ts.quantile(0.8))  # the last cells cut short
    assert f["eager"] is False and "law_max_rel_error" not in f
    assert 0 < f["model_cells"] < 9
    f = figures(lambda ts: ts.min())  # every cell cut short
    assert "eager" not in f and "model_cells" not in f


def test_memcg_grid_5_10_follows_the_code_law(built):
    if not have("memcg-grid-5.10"):
        pytest.skip(
            "no dcache-memcg-grid-5.10 fixture: tests/fixtures/record-dcache memcg-grid-5.10"
        )
    r = res(built, "memcg-grid-5.10")
    f = r["figures"]
    c = cells(r)
    assert r["touch_mounts"] == 2 and len(c) == 9 and f["model_cells"] == 9
    # The code's law, to the byte, in every cell: two list_lrus per new superblock at the
    # capacity C the memcgs made so far (4 for k1-m1 and k1-m8; 46 once 32 memcgs took ids).
    assert f["eager"] is True and f["law_max_rel_error"] == 0
    assert f["capacity_cells_matching_code"] == f["law_cells"] == 9
    assert c["k1-m1"]["lru_bytes_mount"] == 512 and c["k4-m32"]["lru_bytes_mount"] == 16_384
    # Eager: the lookups allocate nothing, and making memcgs costs only where C grew.
    assert all(x["lru_allocs_touch"] == 0 for x in c.values())
    assert set(f["growth_cells"].split(",")) == {"k1-m8", "k1-m32"}
    # The linear fit: per superblock and memcg id 2 x (32-byte list + 8-byte pointer) = 80
    # bytes, a little more for kmalloc's rounding of the pointer array. The used pairs get
    # less than the smallest kmalloc object (8 bytes) a pair would cost if it cost anything:
    # what P takes is the rounding the linear fit cannot follow.
    assert f["model_max_rel_error"] < 0.05
    assert 80 <= f["model_bytes_per_KC"] < 100
    assert abs(f["model_bytes_per_P"]) < 8
    assert 0.5 < f["report_law_ratio"] < 2 and 0.5 < f["report_model_ratio"] < 2


@pytest.mark.parametrize("kernel", ["5.10", "6.1"])
def test_memcg_touch_counts_pairs_and_splits_the_setup(built, kernel):
    """--touch-mounts 1 on two mounts: each memcg uses one superblock, so a cell has M used
    pairs, not K x M; the mount and mkdir steps are sampled apart; the list_lru allocations
    are counted in the kernel (hist trigger) and carried by the samples where the kernel has
    hist triggers (6.1), recorded one by one where it has not (Debian's 5.10)."""
    if not have(f"memcg-touch-{kernel}"):
        pytest.skip(
            f"no dcache-memcg-touch-{kernel} fixture: "
            f"tests/fixtures/record-dcache memcg-touch-{kernel}"
        )
    r = res(built, f"memcg-touch-{kernel}")
    c, f = cells(r), r["figures"]
    assert r["lru_count"] == ("trace" if kernel == "5.10" else "hist")
    assert str(r["touch_mounts"]) == "1"
    assert set(c) == {"k1-m1", "k1-m8", "k2-m1", "k2-m8"}
    for name, x in c.items():
        assert x["pairs"] == x["memcgs"], name
        assert x["lru_bytes_setup"] == x["lru_bytes_mount"] + x["lru_bytes_mkdir"], name
        assert x["lru_bytes_total"] == x["lru_bytes_setup"] + x["lru_bytes_touch"], name
    if kernel == "5.10":
        # Eager: nothing at the lookups, the mounts cost the law's bytes at the capacity of
        # the time, and the first 8 memcgs grew the capacity for every list_lru.
        assert f["eager"] is True and f["law_max_rel_error"] == 0
        assert f["capacity_cells_matching_code"] == 4
        assert all(x["lru_allocs_touch"] == 0 for x in c.values())
        assert c["k1-m8"]["lru_bytes_mkdir"] > 0 and c["k2-m8"]["lru_bytes_mkdir"] == 0
    else:
        # Lazy: two list heads per superblock, nothing for making memcgs, and the lookups
        # of k2-m8 (8 pairs) cost what k1-m8's (8 pairs) did, not twice as much.
        assert f["eager"] is False and f["growth_bytes"] == 0
        assert all(x["lru_allocs_mount"] == 2 * x["mounts"] for x in c.values())
        a, b = c["k1-m8"]["lru_bytes_touch"], c["k2-m8"]["lru_bytes_touch"]
        assert a > 0 and abs(b / a - 1) < 0.25, (a, b)


def _dcache_sh(script, **env):
    lib = os.path.join(REPRODUCERS, "lib", "dcache.sh")
    return subprocess.run(
        ["bash", "-c", f". {lib}; {script}"],
        text=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_exec_driver_counts_runs_failures_and_child_time():
    """The driver behind --exec-loop and --miss-by cat: every %d becomes the run's index."""
    p = _dcache_sh('perl -e "$DC_PERL" run 3 7 test -e /nonexistent-nfsrt-%d')
    kv = dict(w.split("=") for w in p.stdout.split())
    assert p.returncode == 0 and kv["runs"] == "4" and kv["failed"] == "4", p.stderr
    assert float(kv["wall_s"]) > 0 and float(kv["sys_s"]) >= 0
    p = _dcache_sh('perl -e "$DC_PERL" run 0 2 true')
    assert "runs=2 failed=0 " in p.stdout and "ref_ns" not in p.stdout
    # --ref K PATH: K timed fstat()s of PATH after each exec, their mean in ns.
    p = _dcache_sh(f'perl -e "$DC_PERL" run 0 3 --ref 50 {REPRODUCERS}/dcache-negative true')
    kv = dict(w.split("=") for w in p.stdout.split())
    assert kv["runs"] == "3" and kv["failed"] == "0" and float(kv["ref_ns"]) > 0, p.stderr
    assert 0 < float(kv["exec_med_us"]) <= float(kv["wall_s"]) * 1e6
    p = _dcache_sh('perl -e "$DC_PERL" run 0 3 --ref 50 /nonexistent-nfsrt true')
    assert p.returncode == 3 and "cannot open /nonexistent-nfsrt" in p.stderr


def test_hist_counts_are_summed_over_call_sites(tmp_path):
    """dc_hist_read: the hits and bytes of every call site of a hist trigger (the format of
    5.10 and 6.1's events/*/hist)."""
    d = tmp_path / "events" / "kmem" / "kmalloc"
    d.mkdir(parents=True)
    (d / "hist").write_text(
        "# event histogram\n#\n# trigger info: hist:keys=call_site:vals=hitcount,bytes_alloc"
        ":sort=hitcount:size=256 if call_site >= 0x1 [active]\n#\n\n"
        "{ call_site: 18446744071583000000 } hitcount:          4  bytes_alloc:        128\n"
        "{ call_site: 18446744071583000064 } hitcount:       1852  bytes_alloc:      79360\n"
        "\nTotals:\n    Hits: 1856\n    Entries: 2\n    Dropped: 0\n"
    )
    p = _dcache_sh("TRACEFS=$T; dc_hist_read kmem:kmalloc", T=str(tmp_path))
    assert p.stdout.split() == ["1856", "79488"], p.stderr


def test_memcg_6_1_bytes_follow_the_used_pairs_not_the_superblocks(built):
    """Four cells, each memcg on one of the K mounts (--touch-mounts 1): a superblock costs its
    two list heads, making memcgs costs nothing, and the lookups cost the same for the same
    pairs on 1 or 2 superblocks."""
    r = res(built, "memcg-touch-6.1")
    c = cells(r)
    assert r["touch_mounts"] == 1 and sorted(c) == ["k1-m1", "k1-m8", "k2-m1", "k2-m8"]
    for name, x in c.items():
        assert x["pairs"] == x["memcgs"], name
        assert x["lru_bytes_mkdir"] == 0, name
        assert x["lru_allocs_mount"] == 2 * x["mounts"], name
    for m in (1, 8):
        assert c[f"k1-m{m}"]["lru_bytes_touch"] == c[f"k2-m{m}"]["lru_bytes_touch"], m
    assert c["k1-m8"]["lru_allocs_touch"] >= 2 * 8
    assert r["figures"]["pair_lru_bytes"] == 0


@needs_setup(
    subprocess.run(["sh", "-c", "command -v mkfs.xfs"], capture_output=True).returncode == 0,
    "no mkfs.xfs on this host",
)
def test_mkfs_gives_xfs_the_size_it_needs(tmp_path):
    """lb_mkfs: xfsprogs refuses a file system under 300 MB, and --via local --fs xfs sizes
    its image by the files (161 MiB for 100,000): the image is grown to 320 MiB (sparse)."""
    lib = os.path.join(REPRODUCERS, "lib", "loopback.sh")
    img = tmp_path / "x.img"
    p = subprocess.run(
        ["bash", "-c", f". {lib}; lb_mkfs xfs {img} 161 100000"],
        text=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "RESULTS": str(tmp_path)},
    )
    assert p.returncode == 0, (p.stderr, (tmp_path / "log").read_text())
    assert img.stat().st_size == 320 << 20
    with open(img, "rb") as f:
        assert f.read(4) == b"XFSB"


def test_unlink_storm_via_local_keeps_a_negative_dentry_per_removed_file(built):
    """--via local: the storm on the xfs itself, no NFS (no nfs events, no server share); the
    workers' own count says every file went, and each removed name stays as one negative
    dentry (memory to spare), freed by the unmount of that xfs."""
    if not have("unlink-local-6.1"):
        pytest.skip(
            "no dcache-unlink-local-6.1 fixture: tests/fixtures/record-dcache unlink-local-6.1"
        )
    r = res(built, "unlink-local-6.1")
    f, fx = r["figures"], facts("unlink-local-6.1")
    assert r["via"] == "local" and r["fs"] == "xfs"
    n = int(fx["run"]["files"])
    assert int(fx["storm"]["removed"]) == n and int(fx["storm"]["left_on_export"]) == 0
    assert f["nfs_unlinks_traced"] == 0 and f["nfs_lookups_traced"] == 0
    assert f["storm_negative_delta"] == pytest.approx(n, rel=0.02)
    assert f["client_negative_from_unlink"] == pytest.approx(n, rel=0.02)
    assert f["restat_negative_delta"] == 0  # the re-lookups find them in the dcache
    # the storm turned the files' own dentries negative: no share of the dentries it added
    # (a handful) describes the thousands of negative ones
    storm = r["phases"]["storm"]
    assert storm["delta"]["nr_negative"] > storm["delta"]["nr_dentry"]
    assert storm["negative_share"] is None


def test_negative_exec_loop_and_misses_by_cat(built):
    """--miss-by cat --exec-loop N: every miss is an exec of cat on a missing name (each leaves
    one negative dentry), and each loop times N execs of cat on each target; the figures are
    the ratios of the children's system time the driver reported (its facts)."""
    if not have("negative-exec-6.1"):
        pytest.skip(
            "no dcache-negative-exec-6.1 fixture: tests/fixtures/record-dcache negative-exec-6.1"
        )
    r = res(built, "negative-exec-6.1")
    f, fx = r["figures"], facts("negative-exec-6.1")
    assert fx["run"]["miss_by"] == "cat"
    n = int(fx["run"]["exec_loop"])
    for tag, key in (("nfs", "nfs-misses"), ("local", "local-misses")):
        count = int(fx[key]["count"])
        assert int(fx[key]["missing"]) == count and int(fx[key]["found"]) == 0
        assert f[f"{tag}_negative_added"] == count, tag
    for target in ("nfs", "local"):
        loops = {}
        for loop in ("before", "after", "dropped"):
            kv = dict(w.split("=") for w in fx[loop][f"{target}.exec"].split())
            assert int(kv["runs"]) == n and int(kv["failed"]) == 0, (target, loop)
            loops[loop] = float(kv["sys_s"])
            assert f[f"{target}_exec_{loop}_sys_us"] == round(loops[loop] * 1e6 / n)
        assert f[f"{target}_exec_sys_slowdown"] == pytest.approx(
            loops["after"] / loops["before"], abs=1e-3
        )
        assert f[f"{target}_control_exec_sys_slowdown"] == pytest.approx(
            loops["dropped"] / loops["before"], abs=1e-3
        )


# ------------------------------------------------------------------ --paired
def _block(t, cycle, state, sys_s, ref_ns, neg, target="nfs", med=None):
    return (
        t,
        f"nfsrt: paired cycle={cycle} step=block state={state} target={target} n=10 "
        f"nr_negative={neg} runs=10 failed=0 wall_s=2.0 user_s=0.1 sys_s={sys_s} "
        f"ref_ns={ref_ns} exec_med_us={med or sys_s * 1e5:.0f}",
    )


def test_paired_cycles_compare_each_polluted_block_with_both_clean_neighbours():
    """A host that slows steadily (clean blocks 1.0, 2.0, 3.0 s) and misses that add nothing:
    each polluted block lies halfway between its neighbours, so every ratio is 1.0, where the
    comparison with the clean block before it alone would say 1.5 and 1.25."""
    m = markers.parse(
        table(
            [
                (0.0, "nfsrt: run kernel=6.1.0-50-amd64 reproducer=dcache-negative"),
                _block(1, 0, "clean", 1.0, 100.0, 10),
                (
                    2,
                    "nfsrt: paired cycle=1 step=misses target=nfs count=500 found=0 missing=500 "
                    "other=0 seconds=1.5",
                ),
                _block(3, 1, "polluted", 1.5, 150.0, 510),
                _block(4, 1, "clean", 2.0, 200.0, 11),
                _block(5, 2, "polluted", 2.5, 250.0, 511),
                _block(6, 2, "clean", 3.0, 300.0, 12),
                # a polluted block without its clean neighbour (an interrupted run) is no cycle
                _block(7, 3, "polluted", 9.0, 300.0, 512),
            ]
        )
    )
    t = dcache.summary(m)["paired"]["nfs"]
    assert [c["cycle"] for c in t["cycles"]] == [1, 2]
    assert [c["sys_ratio"] for c in t["cycles"]] == [1.0, 1.0]
    assert [c["ref_ratio"] for c in t["cycles"]] == [1.0, 1.0]
    assert [c["sys_per_ref_ratio"] for c in t["cycles"]] == [1.0, 1.0]
    assert [c["exec_med_ratio"] for c in t["cycles"]] == [1.0, 1.0]
    assert [c["misses_per_s"] for c in t["cycles"]] == [333.3, None]
    assert [c["negative_removed"] for c in t["cycles"]] == [499, 499]
    assert t["cycles"][0]["polluted_sys_us"] == 150000 and t["cycles"][0]["clean_sys_us"] == 150000
    assert t["sys_ratio_median"] == 1.0 and t["sys_ratio_min"] == t["sys_ratio_max"] == 1.0
    # the reference moved 1.5x and 2x between the blocks of each cycle: no steady cycle
    assert [c["ref_spread"] for c in t["cycles"]] == [2.0, 1.5] and t["steady_cycles"] == 0
    assert t["steady_exec_med_ratio_median"] is None


def test_paired_verdict_is_the_median_of_the_cycles():
    """Three cycles, one an outlier: the median decides, the spread is reported."""
    lines = [
        (0.0, "nfsrt: run kernel=6.1.0-50-amd64 reproducer=dcache-negative"),
        _block(1, 0, "clean", 1.0, 100.0, 10),
    ]
    # The outlier cycle is a burst inside one block: its sum moved, its median exec did not.
    for c, pol, med in ((1, 1.6, 1.6e5), (2, 9.0, 1.5e5), (3, 1.7, 1.7e5)):
        lines += [
            _block(2 * c, c, "polluted", pol, 100.0, 510, med=med),
            _block(2 * c + 1, c, "clean", 1.0, 100.0, 10),
        ]
    s = dcache.summary(markers.parse(table(lines)))
    t = s["paired"]["nfs"]
    assert t["sys_ratio_median"] == 1.7 and t["sys_ratio_max"] == 9.0
    assert t["sys_ratio_q1"] == 1.65 and t["sys_ratio_q3"] == 5.35
    assert t["exec_med_ratio_median"] == 1.6 and t["exec_med_ratio_max"] == 1.7
    # the reference never moved: every cycle is steady
    assert t["steady_cycles"] == 3 and t["steady_exec_med_ratio_median"] == 1.6
    res = {"cycles": s["paired"], "phases": {}, "max_slowdown": 1.5}
    f, fail, ok = dcache_judge.JUDGES["dcache-negative"](res, {}, None, None)
    assert f["nfs_paired_sys_ratio_median"] == 1.7 and f["nfs_paired_cycles"] == 3
    # the reference did not move: the ratio against it is the same
    assert f["nfs_paired_sys_per_ref_ratio_median"] == 1.7 and f["negative_added"] == 500
    assert len(fail) == 1 and "1.7x the system time" in fail[0] and not ok
    res["max_slowdown"] = 2.0
    _, fail, ok = dcache_judge.JUDGES["dcache-negative"](res, {}, None, None)
    assert not fail and "median of the cycles, <= 2.0x" in ok[0]


def test_negative_paired_cycles_remove_the_misses_and_time_both_states(built):
    """--paired R --miss-dir own: R cycles per target, each with its misses made (one negative
    dentry each) and then removed by the rmdir of their directory; the figures are the ratios
    of the system times the driver reported (the facts)."""
    if not have("negative-paired-6.1"):
        pytest.skip(
            "no dcache-negative-paired-6.1 fixture: "
            "tests/fixtures/record-dcache negative-paired-6.1"
        )
    r = res(built, "negative-paired-6.1")
    f, fx = r["figures"], facts("negative-paired-6.1")
    cycles, n = int(fx["run"]["paired"]), int(fx["run"]["exec_loop"])
    assert fx["run"]["miss_dir"] == "own" and cycles >= 2
    misses = int(fx["run"]["nfs_misses"]) + int(fx["run"]["local_misses"])
    for target in ("nfs", "local"):
        t = r["cycles"][target]
        assert f[f"{target}_paired_cycles"] == cycles == len(t["cycles"])
        sys_of = {}
        for key, v in fx["cycle"].items():
            c, state, tg = key.split(".")
            if tg == target and state != "misses":
                kv = dict(w.split("=") for w in v.split())
                assert int(kv["runs"]) == n and int(kv["failed"]) == 0 and float(kv["ref_ns"]) > 0
                # one exec's median wall time lies within the block's wall time
                assert 0 < float(kv["exec_med_us"]) < float(kv["wall_s"]) * 1e6
                sys_of[(state, int(c))] = float(kv["sys_s"])
        for c in t["cycles"]:
            i = c["cycle"]
            clean = (sys_of[("clean", i - 1)] + sys_of[("clean", i)]) / 2
            assert c["sys_ratio"] == pytest.approx(sys_of[("polluted", i)] / clean, abs=1e-3)
            # Both targets' misses are gone by the clean block (a few dentries of the
            # removed directory and the renames come and go as well).
            assert c["negative_removed"] == pytest.approx(misses, abs=0.02 * misses + 10), i
        ratios = sorted(c["sys_ratio"] for c in t["cycles"])
        assert f[f"{target}_paired_sys_ratio_median"] == pytest.approx(
            statistics.median(ratios), abs=1e-3
        )
        assert f[f"{target}_paired_sys_ratio_min"] == ratios[0]
    for c in range(1, cycles + 1):
        for target in ("nfs", "local"):
            kv = dict(w.split("=") for w in fx["cycle"][f"{c}.misses.{target}"].split())
            assert int(kv["missing"]) == int(kv["count"]) and int(kv["found"]) == 0


def test_relookup_rate_is_the_known_missing_names_a_second():
    """--relookup N: the phase's count over its seconds, and the negative dentries it added
    (none: every name is answered by the dentry its miss left)."""
    m = markers.parse(
        table(
            [
                (0.0, "nfsrt: run kernel=6.1.0-50-amd64 reproducer=dcache-negative"),
                (0.5, "nfsrt: sample nr_dentry=100 nr_unused=50 nr_negative=10"),
                (1.0, "nfsrt: phase=local-misses event=start count=1000"),
                (
                    3.0,
                    "nfsrt: phase=local-misses event=end seconds=2.0 count=1000 found=0 "
                    "missing=1000",
                ),
                (3.1, "nfsrt: sample nr_dentry=1100 nr_unused=1050 nr_negative=1010"),
                (3.2, "nfsrt: phase=local-relookup event=start count=500"),
                (
                    3.4,
                    "nfsrt: phase=local-relookup event=end seconds=0.25 count=500 found=0 "
                    "missing=500",
                ),
                (3.5, "nfsrt: sample nr_dentry=1100 nr_unused=1050 nr_negative=1010"),
            ]
        )
    )
    s = dcache.summary(m)
    res = {"phases": s["phases"], "local_misses": 1000, "nfs_misses": 0}
    f, _, _ = dcache_judge.JUDGES["dcache-negative"](res, {}, m, None)
    assert f["local_misses_per_s"] == 500.0 and f["local_negative_per_miss"] == 1.0
    assert f["local_relookups"] == 500 and f["local_relookups_per_s"] == 2000.0
    assert f["local_relookup_negative_added"] == 0


def test_a_sequential_run_with_the_paired_option_off_is_judged_on_its_loops():
    """Runs since --paired have run.paired=0 among their facts (res["paired"]): no cycles."""
    f, fail, _ = dcache_judge.JUDGES["dcache-negative"](
        {"paired": 0, "phases": {}, "lookup": {}}, {}, None, None
    )
    assert fail == ["no lookup timings in the trace"] and f["negative_added"] == 0
