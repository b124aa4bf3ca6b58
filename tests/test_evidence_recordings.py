"""Issue 43's classes of evidence, each on a real recording made in a guest, with its command
and the workload's own truth beside it (tests/fixtures/*/COMMAND): the verdict `check` gives is
the one the truth implies, and the class's own property holds on the real thing, not only on a
rewritten copy (test_one_answer.py makes those).

    record-5.10-ties      stock 5.10, `nfs-readdir record`, the `global` clock under TCG, 2 vCPUs:
                          events that share a time stamp, whole READDIRs in one instant
    report-6.12-ext4-nfs  stock 6.12 on ext4, `trace-cmd report` text of the nfs, nfs4 and
                          sunrpc events only: a listing that met an invalidation and went on
                          with hash-order cookies
    record-6.12-poller    stock 6.12, `nfs-readdir record` (open kprobes): a poller opening its
                          directory 40 times beside an `ls`

The truth is the readers' (truth.jsonl, written by reproducers/multi-reader), what ls printed
(names.txt), what the writer added (written) and the reader mount's READDIR count from
/proc/self/mountstats before and after the readers (mountstats), never the analyzer's."""

import collections
import gzip
import json
import os
import re
import subprocess

from conftest import FIXTURES, run_cli

GOOD, BAD, UNDECIDED = 0, 1, 125


def _dir(name):
    return os.path.join(FIXTURES, name)


def _truth(name):
    """The readers' own records: one per listing (multi-reader list) or per program run."""
    with open(os.path.join(_dir(name), "truth.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _mountstats(name):
    """The reader mount's READDIR count before and after the readers, as the guest read it."""
    with open(os.path.join(_dir(name), "mountstats")) as f:
        counts = {w: int(rd) for w, rd, _ in (line.split() for line in f)}
    return counts["before"], counts["after"]


def _names(name):
    with open(os.path.join(_dir(name), "names.txt")) as f:
        return f.read().splitlines()


def _analyzed(path):
    """`nfs-readdir analyze --json PATH` as a user runs it: the one input's record."""
    (a,) = json.loads(run_cli("analyze", "--json", path, check=0).stdout)
    return a


_EVENT = re.compile(r"^\s*\S.*?-(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+(\S+):")


def _report_events(trace_cmd, dat):
    """(time stamp text, cpu, event) of every event in `trace-cmd report -t` (nanoseconds)."""
    out = subprocess.run(
        [trace_cmd, "report", "-t", dat], capture_output=True, text=True, check=True, timeout=600
    ).stdout
    return [(m[3], int(m[2]), m[4]) for m in map(_EVENT.match, out.splitlines()) if m]


# ------------------------------------------------------------------ 1. tied time stamps

TIES = "record-5.10-ties"
# One pass over big/ (6,022-6,054 names) is 60 READDIRs of 32 KiB on this kernel (count=32768
# in every nfs4_proc_readdir of the trace, about 101 names each; COMMAND): 61 at most.
PASS_READDIRS = 61


def _call_then_end(evs):
    """A READDIR call (nfs4_proc_readdir) and, after it in the file, an end (nfs4_readdir)."""
    return "nfs4_proc_readdir" in evs and "nfs4_readdir" in evs[evs.index("nfs4_proc_readdir") :]


def test_a_record_made_5_10_trace_has_ties_of_the_global_clock(trace_cmd):
    """The counts COMMAND gives: 86 time stamps shared by 215 events, 2 of them across the two
    CPUs (one of them a READDIR's end and another process's getdents), and an instant holding a
    whole READDIR (its call, its rpc_request and its end)."""
    dat = os.path.join(_dir(TIES), "t.dat")
    events = _report_events(trace_cmd, dat)
    by_ts = collections.defaultdict(list)
    for ts, cpu, ev in events:
        by_ts[ts].append((cpu, ev))
    tied = {ts: evs for ts, evs in by_ts.items() if len(evs) > 1}
    across = [ts for ts, evs in tied.items() if len({cpu for cpu, _ in evs}) > 1]
    assert len(events) == 6532
    assert (len(tied), sum(map(len, tied.values())), len(across)) == (86, 215, 2)
    whole = [ts for ts, evs in tied.items() if _call_then_end([ev for _, ev in evs])]
    assert whole == ["168.696011016"], whole
    assert sorted(across) == ["119.796563058", "127.783693014"], across
    a = _analyzed(dat)
    assert a["trace"]["clock"] == "global" and a["trace"]["cpus"] == 2, a["trace"]


def test_ties_are_not_damage_on_the_real_trace():
    """No damage comes from the ties: none in the trace, none in any listing (before: 44
    events "an event is missing" on a trace of this kind)."""
    a = _analyzed(os.path.join(_dir(TIES), "t.dat"))
    assert a["trace"]["damage"] == [], a["trace"]["damage"][:3]
    assert a["trace"]["lost_total"] == 0
    damaged = [
        (lst["pid"], lst["damaged_events"]) for lst in a["listings"] if lst["damaged_events"]
    ]
    assert not damaged, damaged


def test_the_tied_trace_gives_the_verdict_its_truth_implies():
    """Twenty-one listings (the poller's 20 opens and ls), none sought back, each reading big/
    once would make at most 21 x 61 READDIRs; mountstats counted 1929: the kernel read the
    directory again inside listings, a restart, so stock 5.10 is bad (exit 1). The analyzer's
    READDIRs add up to mountstats' count."""
    truth = _truth(TIES)
    listings = [r for r in truth if r["kind"] == "poller"] + [
        r for r in truth if r["kind"] == "slow-ls"
    ]
    assert len(listings) == 21
    assert all(r.get("rewinds", 0) == 0 for r in listings)
    assert all(r["eof"] for r in listings if r["kind"] == "poller")
    assert [r["exit"] for r in listings if r["kind"] == "slow-ls"] == [0]
    before, after = _mountstats(TIES)
    restarted = after - before > len(listings) * PASS_READDIRS
    assert restarted
    dat = os.path.join(_dir(TIES), "t.dat")
    p = run_cli("check", dat)
    assert p.returncode == (BAD if restarted else GOOD), (p.returncode, p.stdout)
    assert "restarted" in p.stdout, p.stdout
    a = _analyzed(dat)
    assert sum(lst["readdirs"] for lst in a["listings"]) == after - before


# ------------------------------------------------------------------ 2. hash-order cookies, no opens

HASH = "report-6.12-ext4-nfs"
# What the nfs, nfs4 and sunrpc systems gave of record's plan on 6.12 (record.txt).
NFS_ONLY = {
    "rpc_request",
    "nfs_set_cache_invalid",
    "nfs_readdir_cache_fill",
    "nfs_readdir_cache_fill_done",
    "nfs_readdir_uncached",
    "nfs_readdir_uncached_done",
    "nfs_readdir_force_readdirplus",
    "nfs_readdir_invalidate_cache_range",
    "nfs_revalidate_inode_enter",
    "nfs_revalidate_inode_exit",
    "nfs_getattr_enter",
    "nfs_getattr_exit",
    "nfs_invalidate_mapping_enter",
    "nfs_invalidate_mapping_exit",
    "nfs4_getattr",
}


def _text_events(path):
    """(pid, event, rest of the line) of every event line of report text."""
    with open(path) as f:
        return [
            (int(m[1]), m[4], line[m.end() :])
            for m, line in ((_EVENT.match(line), line) for line in f)
            if m
        ]


def test_the_nfs_only_text_holds_no_opens_and_a_listing_that_met_invalidations():
    """The trace is what COMMAND says: nfs, nfs4 and sunrpc events alone (no kprobe, no
    syscall, no open or getdents event); ls's READDIRs ask cookie 0 once, then after each
    invalidation a cookie it had not asked before, never 0."""
    events = _text_events(os.path.join(_dir(HASH), "t.txt"))
    assert {ev for _, ev, _ in events} <= NFS_ONLY, {ev for _, ev, _ in events} - NFS_ONLY
    (ls,) = [r["pid"] for r in _truth(HASH) if r["kind"] == "slow-ls"]
    asked, after_change = [], []
    changed = False
    for pid, ev, rest in events:
        if pid != ls:
            continue
        if ev == "nfs_invalidate_mapping_enter":
            changed = True
        elif ev == "nfs_readdir_cache_fill":
            cookie = int(re.search(r"cookie=[0-9a-f]+:0x([0-9a-f]+)", rest)[1], 16)
            if changed:
                after_change.append(cookie not in asked and cookie != 0)
                changed = False
            asked.append(cookie)
    assert asked.count(0) == 1 and asked[0] == 0, asked
    assert after_change == [True, True], after_change
    assert len(asked) == _mountstats(HASH)[1] - _mountstats(HASH)[0] == 8


def test_a_listing_that_went_on_with_hash_order_cookies_is_good():
    """6.12 never restarts, and ls printed every name once (names.txt.gz: the 20,000 files,
    . and .., and what the writer added while it listed), exit 0: good, exit 0 (before: cannot
    decide, as "went on" wanted a cookie above every cookie asked before)."""
    (ls,) = [r for r in _truth(HASH) if r["kind"] == "slow-ls"]
    assert ls["exit"] == 0 and not ls["timed_out"]
    with gzip.open(os.path.join(_dir(HASH), "names.txt.gz"), "rt") as f:
        names = f.read().splitlines()
    assert len(names) == len(set(names)) == ls["lines"] == 20047
    assert {f"file{i:07d}" for i in range(1, 20001)} <= set(names)
    path = os.path.join(_dir(HASH), "t.txt")
    p = run_cli("check", path)
    assert p.returncode == GOOD, (p.returncode, p.stdout)
    a = _analyzed(path)
    (lst,) = [lst for lst in a["listings"] if lst["pid"] == ls["pid"]]
    assert lst["invalidations"] >= 1 and lst["exercised"], lst
    assert lst["restarts_max"] == 0 and lst["damaged_events"] == 0, lst


# ------------------------------------------------------------------ 3. a fresh opendir

POLLER = "record-6.12-poller"


def test_the_poller_trace_has_fresh_opens_at_position_0(trace_cmd):
    """What COMMAND says the trace holds: the poller's 40 opens and closes, and 40 getdents at
    position 0, each the first after an open, the one before it having ended at the end of the
    directory, with no seek between."""
    (poller,) = {r["pid"] for r in _truth(POLLER) if r["kind"] == "poller"}
    out = subprocess.run(
        [trace_cmd, "report", os.path.join(_dir(POLLER), "t.dat")],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    calls = [
        (m[4], line)
        for m, line in ((_EVENT.match(line), line) for line in out.splitlines())
        if m and int(m[1]) == poller and m[4] in ("nfs_opendir", "nfs_closedir", "nfs_readdir")
    ]
    # One listing per open: opendir, getdents (nfs_readdir) as many times as the truth's
    # getdents64 calls, closedir; the first at position 0, the last at the end (INT64_MAX).
    polls = [r for r in _truth(POLLER) if r["kind"] == "poller"]
    want = [
        ev
        for r in polls
        for ev in ["nfs_opendir"] + ["nfs_readdir"] * r["getdents"] + ["nfs_closedir"]
    ]
    assert [ev for ev, _ in calls] == want and len(polls) == 40
    pos = [int(line.rsplit("pos=", 1)[1]) for ev, line in calls if ev == "nfs_readdir"]
    firsts, k = [], 0
    for r in polls:
        firsts.append(pos[k])
        k += r["getdents"]
        assert pos[k - 1] == 2**63 - 1, pos[k - r["getdents"] : k]
    assert firsts == [0] * 40


def test_fresh_opens_are_new_listings_not_damage():
    """40 opens of one directory by one poller beside an `ls`: no damaged event anywhere (before:
    39 "starts at position 0 with no seek between" on the series' 5.10), 40 listings of the
    poller as its truth has, none restarting, and the check the truth implies: 6.12 never
    restarts and ls reached its end (exit 0), so good, exit 0."""
    truth = _truth(POLLER)
    polls = [r for r in truth if r["kind"] == "poller"]
    (ls,) = [r for r in truth if r["kind"] == "slow-ls"]
    assert len(polls) == 40 and all(r["eof"] and not r["rewinds"] for r in polls)
    assert ls["exit"] == 0 and not ls["timed_out"]
    names = _names(POLLER)
    assert len(names) == len(set(names)) == ls["lines"]
    path = os.path.join(_dir(POLLER), "t.dat")
    a = _analyzed(path)
    assert a["trace"]["damage"] == [], a["trace"]["damage"][:3]
    damaged = [
        (lst["pid"], lst["damaged_events"]) for lst in a["listings"] if lst["damaged_events"]
    ]
    assert not damaged, damaged
    mine = [lst for lst in a["listings"] if lst["pid"] == polls[0]["pid"]]
    assert len(mine) == len(polls)
    assert all(lst["delimited_by"] == "opens" and lst["ending"] == "eof" for lst in mine), mine
    assert not [lst for lst in a["listings"] if lst["restarts_max"]]
    (lsl,) = [lst for lst in a["listings"] if lst["pid"] == ls["pid"]]
    assert lsl["finding"] == "good" and lsl["complete"], lsl
    before, after = _mountstats(POLLER)
    assert sum(lst["readdirs"] for lst in a["listings"]) == after - before
    p = run_cli("check", path)
    assert p.returncode == GOOD, (p.returncode, p.stdout)
