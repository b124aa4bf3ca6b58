"""`watch --metrics` / `--textfile`: the counters against analyze() on real traces replayed
through watch's tracker, bounded series and state, the exposition, and the alert rule and
scrape configuration of contrib/ checked by Prometheus' own promtool. (The real Prometheus
scraping a real watch runs in the guests of tests/test_record.py.)"""

import collections
import glob
import io
import os
import shutil
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import FIXTURES, TOP, needs_setup, run_cli
from nfsreaddir.live import metrics, tracker
from nfsreaddir.model import analysis, roundtrips, tables
from nfsreaddir.model.columns import isna
from nfsreaddir.trace import open_trace
from test_record import Replay

CONTRIB = os.path.join(TOP, "contrib")
promtool = needs_setup(shutil.which("promtool") is not None, "needs Debian's prometheus")


def series(m, name, *by):
    """{(label values): sum} of one metric's samples, by the given labels."""
    out = collections.Counter()
    for fam in m.registry.collect():
        for s in fam.samples:
            if s.name == name:
                out[tuple(s.labels.get(b, "") for b in by)] += s.value
    return +out


def sums(m, name, by):
    """{label value: sum} of one metric's samples, summed by one label."""
    return collections.Counter({k[0]: v for k, v in series(m, name, by).items()})


def replayed(trace, **kw):
    replay = Replay(os.path.join(TOP, "tests", "fixtures", trace))
    m = metrics.Metrics(**kw)
    t = tracker.Tracker(replay, io.StringIO(), None, replay.items[0][0], m, quiet=True)
    return replay, m, t


def _watchable():
    """Every fixture trace watch's tracker can follow (listings delimited by the reader's
    opens: the open kprobes or the series' events), relative to tests/fixtures."""
    out = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "*", "*.dat"))):
        kinds = {t for t, _, _ in tables.stream_sources(open_trace(path)).values()}
        if {"rpc", "calls"} <= kinds:
            out.append(os.path.relpath(path, FIXTURES))
    return out


WATCHABLE = _watchable()
# Stock 5.10 runs whose readers' truth has restarts: the counts compared include some.
RESTARTED = {"5.10-v4.1-cap/modified.dat", "multi-5.10/multi.dat", "record-5.10-catchup/t.dat"}


def test_most_fixtures_are_watchable():
    # (So that the comparison below cannot shrink to nothing without a word.)
    assert len(WATCHABLE) >= 30 and RESTARTED <= set(WATCHABLE), WATCHABLE


def _where(lst):
    """A listing's series: its comm and the directory the trace's events named (a reproducer's
    phase marker names it to analyze() only, and watch does not read markers)."""
    named = lst.fileid is not None and not (
        lst.phase is not None and isna(lst.rpcs["fileid"]).all() and lst.fileid
    )
    return (lst.comm, str(lst.fileid) if named else "")


@pytest.mark.parametrize("trace", WATCHABLE)
def test_counters_are_what_analyze_finds(trace):
    """Fed a real trace event by event, as the ring buffer gives it: per process and
    directory, the restarts, ambiguous cookie-0 READDIRs, READDIRs, re-fetched READDIRs,
    invalidations and finished listings (by how they ended) analyze() finds in the whole
    trace, and as many restart and invalidation lines; the RPCs of each listing by program
    and operation, and their server time, that analyze accounts (model/roundtrips: every
    watchable fixture has sunrpc:rpc_request); the tracker forgets each listing once it ends;
    and with metrics nothing is printed (a service's journal). A READDIR whose directory the
    kernel names only after it (a kprobe at the call, the directory in the reply's event) is
    counted under that directory, not under an empty one. A trace that lost events is no
    exception: the tracker places each loss where the ring buffer marks it (before its CPU's
    next page) and makes a restart next to it ambiguous, and takes a listing's invalidations
    up to its last event, as analyze() does."""
    replay, m, t = replayed(trace)
    lines = tracker.Tracker(replay, io.StringIO(), None, replay.items[0][0])
    for i in range(0, len(replay.items), 500):
        t.feed(replay.items[i : i + 500])
        lines.feed(replay.items[i : i + 500])
        # State is per open being read: nothing kept of the listings that ended.
        assert not t.model.done
        assert set(t._printed) <= {id(o) for o in t.model.live.values()}
    t.stop()  # (watch's end: a catch-up under way is counted as far as it went)
    lines.stop()
    a = analysis.analyze(replay.trace)
    want = {
        k: collections.Counter()
        for k in ("restarts", "ambiguous_restarts", "readdirs", "refetched_readdirs")
    }
    want["invalidations"] = collections.Counter()
    ended, phased = collections.Counter(), collections.Counter()
    for lst in a.listings:
        where = _where(lst)
        want["restarts"][where] += len(lst.restarts)
        want["ambiguous_restarts"][where] += len(lst.ambiguous_rows)
        want["readdirs"][where] += len(lst.rpcs)
        # The catch-ups, by the one rule (model/reader.py) both follow.
        want["refetched_readdirs"][where] += sum(r.refetched for r in lst.restarts)
        want["invalidations"][where] += len(lst.invalidations)
        if lst.phase is None:
            ended[(lst.comm, lst.ending)] += 1
        else:  # (a reproducer's lister's exit status, not the kernel's, says how it ended)
            phased[lst.comm] += 1
    for k, w in want.items():
        assert series(m, f"nfs_readdir_{k}_total", "comm", "fileid") == +w, k
    # The RPCs by one window rule (roundtrips.window: the listing's first READDIR, or its
    # start where it sent none, to its last event; each call the process's listing begun
    # last), applied as the events come: the windows of find's nested opens, of listings the
    # cache served whole and of calls tied in time with an open or close (multi-5.10-series)
    # give each call to the same listing. Nothing waits once watch stops.
    rpcs, server = collections.Counter(), collections.Counter()
    for n, rt in roundtrips.account(a).items():
        for op in rt.ops:
            k = _where(a.listings[n]) + (op.program, op.op)
            rpcs[k] += op.calls
            server[k] += op.server_seconds or 0
    by = ("comm", "fileid", "program", "op")
    assert rpcs and series(m, "nfs_readdir_rpcs_total", *by) == +rpcs
    got = series(m, "nfs_readdir_rpc_server_seconds_total", *by)
    # (analyze rounds each listing's server time per operation to the ms)
    assert set(got) == set(+server), (got, server)
    assert all(abs(got[k] - server[k]) <= 0.0005 * len(a.listings) for k in got), (got, server)
    assert not (t.round_trips._gaps or t.round_trips._waiting)
    assert t.out.getvalue() == ""
    printed = lines.out.getvalue().splitlines()
    for what in ("restarts", "invalidations"):
        word = f"] {what[:-1]} "
        assert sum(word in ln for ln in printed) == sum(want[what].values()), what
    if trace in RESTARTED:
        assert sum(sums(m, "nfs_readdir_restarts_total", "comm").values()) > 0
        assert sum(sums(m, "nfs_readdir_refetched_readdirs_total", "comm").values()) > 0
    # How each listing that ended in the trace ended, as far as the kernel's events say; one
    # still open at its end is in progress for watch, cut off or unknown for analyze().
    finished = series(m, "nfs_readdir_listings_finished_total", "comm", "ending")
    assert all(n <= ended[k] + phased[k[0]] for k, n in finished.items()), (finished, ended)
    in_progress = sums(m, "nfs_readdir_listings_in_progress", "comm")
    assert sum(finished.values()) + sum(in_progress.values()) >= len(a.listings) > 0


def test_series_capped_with_an_other_bucket():
    """Past max_series, new directories and processes count under "other": nothing is lost
    and the series stay bounded."""
    replay, m, t = replayed("multi-6.1/multi.dat", max_series=2)
    t.feed(replay.items)
    readdirs = sums(m, "nfs_readdir_readdirs_total", "comm")
    assert len(m.series) == 2 and readdirs["other"] > 0, readdirs
    assert sum(sums(m, "nfs_readdir_watch_series_overflow_total", "").values()) > 0
    replay, whole, t = replayed("multi-6.1/multi.dat")
    t.feed(replay.items)
    assert sum(readdirs.values()) == sum(sums(whole, "nfs_readdir_readdirs_total", "comm").values())


def test_series_overflow_counts_events_not_polls():
    """The overflow counter counts what went to "other", once: watch's polls with no new
    event (5 a second) while a listing of an "other" series is under way add nothing."""
    replay, m, t = replayed("multi-6.1/multi.dat", max_series=2)
    overflow = "nfs_readdir_watch_series_overflow_total"
    polled = 0
    for i in range(0, len(replay.items), 50):
        t.feed(replay.items[i : i + 50])
        before = sums(m, overflow, "")
        polled += sums(m, "nfs_readdir_listings_in_progress", "comm")["other"] > 0
        for _ in range(3):
            t.feed([])
        assert sums(m, overflow, "") == before
    assert polled and sum(sums(m, overflow, "").values()) > 0


def test_mount_table_read_once_for_devices_of_no_mount(monkeypatch):
    """The replayed traces' devices are mounts of the guest that recorded them, of none here,
    as a container's own mounts are for a watch on its host: the mount table is read when
    watch starts, not again for each event counted (337 reads in this replay, before)."""
    reads = []
    real = metrics.mounts
    monkeypatch.setattr(metrics, "mounts", lambda: reads.append(1) or real())
    replay, m, t = replayed("multi-5.10/multi.dat")
    t.feed(replay.items)
    assert sum(sums(m, "nfs_readdir_readdirs_total", "comm").values()) > 0
    assert len(reads) == 1 and any(k[0] for k in m.series), (len(reads), m.series)


def test_mount_table_read_again_when_it_changes(tmp_path):
    """A mount made after watch started (each client mount of a fleet's automounter) is named
    by its mount point from its first event; until then the table is not read again."""
    code = f"""
import os, subprocess
from nfsreaddir.live import metrics
reads = []
real = metrics.mounts
metrics.mounts = lambda: reads.append(1) or real()
m = metrics.Mounts()
st = os.stat({str(tmp_path)!r}).st_dev
dev = os.major(st) << 20 | os.minor(st)
assert m.get(dev) != {str(tmp_path)!r} and m.get(dev) == m.get(dev), m.get(dev)
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", {str(tmp_path)!r}], check=True)
st = os.stat({str(tmp_path)!r}).st_dev
print(len(reads), m.get(os.major(st) << 20 | os.minor(st)), len(reads))
"""
    p = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", str(tmp_path), "2"], p.stdout


def test_exposition_http_and_textfile(tmp_path):
    """The same text on http://ADDR:PORT/metrics and in DIR/nfs_readdir.prom (the textfile
    collector's), parsed by the client library's parser; stopping closes the port and removes
    the file (no stale counters exported for ever)."""
    replay, m, t = replayed("5.10-v4.1/modified.dat")
    t.feed(replay.items)
    e = metrics.Exposition(m, ("127.0.0.1", 0), str(tmp_path))
    port = e.server[0].server_port
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    text = (tmp_path / metrics.TEXTFILE).read_text()
    assert [x for x in os.listdir(tmp_path)] == [metrics.TEXTFILE]  # no temporary left
    for body in (page, text):
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        restarts = sum(s.value for s in fams["nfs_readdir_restarts"].samples)
        assert fams["nfs_readdir_restarts"].type == "counter" and restarts > 0
        assert fams["nfs_readdir_listings_in_progress"].type == "gauge"
    assert "process_cpu_seconds_total" in page
    e.close()
    assert not os.listdir(tmp_path)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_bad_addresses_and_directories_refused(tmp_path):
    p = run_cli("watch", "--metrics", "9617", check=None)
    assert p.returncode == 128 and "ADDR:PORT" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("watch", "--metrics", ":99999", check=None)
    assert p.returncode == 128 and "Traceback" not in p.stderr, p.stderr


@promtool
def test_contrib_config_and_alert_rule(tmp_path):
    """promtool accepts the scrape configuration and the rule file, and the rule fires for a
    directory restarting every 15 s and not for one that restarted once."""
    for what, f in (("config", "prometheus.yml"), ("rules", "nfs-readdir-alerts.yml")):
        p = subprocess.run(
            ["promtool", "check", what, os.path.join(CONTRIB, f)], capture_output=True, text=True
        )
        assert p.returncode == 0, p.stdout + p.stderr
    labels = 'job="nfs-readdir",mount="/home",path="",comm="ls"'
    (tmp_path / "t.yml").write_text(
        f"""rule_files: [{os.path.join(CONTRIB, "nfs-readdir-alerts.yml")}]
evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'nfs_readdir_restarts_total{{instance="c1:9617",fileid="42",{labels}}}'
        values: '0 1 2 3 4 5 6 7 8'
      - series: 'nfs_readdir_restarts_total{{instance="c2:9617",fileid="43",{labels}}}'
        values: '0 0 0 1 1 1 1 1 1'
    alert_rule_test:
      - eval_time: 2m
        alertname: NfsReaddirRestarts
        exp_alerts:
          - exp_labels: {{severity: warning, instance: "c1:9617", mount: /home, fileid: "42"}}
            exp_annotations:
              summary: "NFS listings restart: /home fileid 42"
              description: "4 READDIR restarts in the last minute on c1:9617: listings of this
                directory search it again from the start after each change. `nfs-readdir record
                -- ls DIR` and `nfs-readdir analyze` show why."
"""
    )
    p = subprocess.run(
        ["promtool", "test", "rules", tmp_path / "t.yml"], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr
