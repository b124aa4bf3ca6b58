"""Issue 46: a listing's round trips (model/roundtrips) and the findings on them
(rules/slowness), on the `ls -l` fixtures (reproducers/readdir-ls), against tshark's counts of
the same run's capture (TRUTH's wire.call.* keys, from reproducers/wire-ops)."""

import functools
import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import pandas as pd
import pytest

from conftest import FIXTURES, TOP, fixture_dirs, key_values
from nfsreaddir import pipeline
from nfsreaddir.model import roundtrips, windows
from nfsreaddir.rules import slowness
from nfsreaddir.trace import capture

LS_FIXTURES = fixture_dirs("readdir-ls")
INPUTS = [(d, f) for d in LS_FIXTURES for f in ("idle.dat", "idle.pcap.gz")]
# The NFSv4.1 client's lease renewals (SEQUENCE alone) in a run's capture: not the lister's
# calls, so its trace has none of them as the lister's (COMMAND says when each came):
# ls-l-6.1-v4.1's came 2 s before the listing, before trace-cmd started; ls-l-5.10-v4.1's
# three came before trace-cmd started, from the client's kworker 54 ms before the lister's
# first call, and 5.1 s after the listing's last reply, after the trace's last event.
LEASE_RENEWALS = {"ls-l-6.1-v4.1": {"NFS4.SEQUENCE": 1}, "ls-l-5.10-v4.1": {"NFS4.SEQUENCE": 3}}
# What the lister asks of the directory itself before its first READDIR: its stat (GETATTR),
# ACCESS, and on NFSv3 its ACL. Nothing else may fall outside a listing's window.
DIRECTORY_ITSELF = {"NFS3.GETATTR", "NFS3.ACCESS", "NFSACL3.GETACL", "NFS4.GETATTR", "NFS4.ACCESS"}


def truth_calls(name):
    """TRUTH's calls as the round trips name them: NFS3.GETATTR, NFSACL3.GETACL, and an NFSv4
    COMPOUND by its main operation (NFS4.READDIR)."""
    out = {}
    for k, v in key_values(os.path.join(FIXTURES, name, "TRUTH")).items():
        if not k.startswith("wire.call."):
            continue
        key = k[len("wire.call.") :]
        if key.startswith("NFS4."):
            if not key.startswith("NFS4.main."):
                continue  # NFS4.COMPOUND and NFS4.op.*: every operation, not the calls
            key = "NFS4." + key[len("NFS4.main.") :]
        out[key] = int(v)
    return out


@functools.cache
def analysis(name, what):
    return pipeline.readdir_analysis(os.path.join(FIXTURES, name, what))[0]


def the_listing(a):
    """(number, RoundTrips) of the fixture's one listing, the lister's (phase idle)."""
    found = [(n, a.round_trips[n]) for n, lst in enumerate(a.listings) if lst.phase == "idle"]
    assert len(found) == 1, [lst.label() for lst in a.listings]
    return found[0]


def traced_latency(name):
    """Whether the run's trace recorded sunrpc:rpc_stats_latency (nfs-readdir record's plan,
    which readdir-ls follows, has it since a3b1f3c: the ls-l runs recorded after it)."""
    facts = key_values(os.path.join(FIXTURES, name, "facts"))
    return "sunrpc:rpc_stats_latency" in facts["run.events"].split()


def test_there_are_ls_fixtures():
    """Issue 46's matrix: stock 5.10 and 6.1, NFSv3 with and without nordirplus and noacl,
    and NFSv4.1."""
    matrix = {f"ls-l-{k}-{v}" for k in ("5.10", "6.1") for v in CASES}
    assert matrix <= set(LS_FIXTURES) and set(CAUSES) == matrix, sorted(LS_FIXTURES)


@pytest.mark.parametrize("name,what", INPUTS)
def test_accounted_calls_are_tsharks(name, what):
    """The listing's calls and the same process's (client's) calls outside its window are,
    together, every call tshark counted in the run's capture (but the lease renewals, which
    are not the lister's); outside the window are only the lister's calls for the directory
    itself, once each, and on the wire the client's lease renewals."""
    _, rt = the_listing(analysis(name, what))
    expected = Counter(truth_calls(name))
    renewals = Counter(LEASE_RENEWALS.get(name, {}))
    if what.endswith(".dat"):
        expected, renewals = expected - renewals, Counter()
    got = Counter(rt.counts()) + Counter(rt.outside)
    assert dict(got) == dict(expected)
    once = {k: v for k, v in rt.outside.items() if k not in renewals}
    assert set(once) <= DIRECTORY_ITSELF and all(v == 1 for v in once.values()), rt.outside
    assert Counter(rt.outside) - Counter(once) <= renewals, rt.outside


@pytest.mark.parametrize("name", LS_FIXTURES)
def test_trace_and_capture_agree_on_the_window(name):
    """One run seen twice, by the kernel's events and on the wire: the same calls in the
    listing's window, and the window is as long (both end with the lister's last call)."""
    at, ac = analysis(name, "idle.dat"), analysis(name, "idle.pcap.gz")
    (_, t), (nc, c) = the_listing(at), the_listing(ac)
    assert t.counts() == c.counts()
    assert t.calls_from == "sunrpc:rpc_request" and "capture" in c.calls_from
    assert c.server_time_from
    if traced_latency(name):
        assert t.server_time_from == "sunrpc:rpc_stats_latency (rtt)"
    else:
        assert t.server_time_from is None
    assert all(o.replied == o.calls for o in c.ops)  # a reply to every call (0 dropped)
    # One window for the table and for where the time went, on both routes, and the wire's
    # as long as the trace's but for what the lister does after its last call, which the wire
    # cannot see (ls sorts and prints: up to 90 ms of these runs under TCG). Before, the
    # wire's listing ended with its last READDIR reply: 0.10-0.29 s against 37.9 s.
    lc = ac.listings[nc]
    assert (lc.start, lc.end) == (c.start, c.end)
    tail = (t.end - t.start) - (c.end - c.start)
    assert -(10**6) <= tail <= 10**8 + 0.01 * (t.end - t.start), (t.end - t.start, tail)
    assert all(o.share is None or 0 <= o.share <= 1 for o in (*t.ops, *c.ops))


@pytest.mark.parametrize("name", LS_FIXTURES)
def test_names_and_their_evidence(name):
    """Names: the capture's READDIR replies, each entry once (NFSv3 counts . and ..); the
    trace's: the lister's own count."""
    truth = key_values(os.path.join(FIXTURES, name, "TRUTH"))
    _, t = the_listing(analysis(name, "idle.dat"))
    _, c = the_listing(analysis(name, "idle.pcap.gz"))
    assert t.names == int(truth["names"]) and "lister" in t.names_from
    v4 = name.endswith("v4.1")
    assert c.names == int(truth["names"]) + (0 if v4 else 2)
    assert "READDIR replies" in c.names_from


@pytest.mark.parametrize("name", [n for n in LS_FIXTURES if traced_latency(n)])
def test_traced_server_time_holds_the_wires(name):
    """Where the trace recorded sunrpc:rpc_stats_latency, every call of the listing has its
    rtt, and the client's rtt (from sending the call to taking its reply) holds the wire's
    call-to-reply time: per operation, the trace's server time is at least the capture's."""
    _, t = the_listing(analysis(name, "idle.dat"))
    _, c = the_listing(analysis(name, "idle.pcap.gz"))
    wire = {o.key: o.server_seconds for o in c.ops}
    for o in t.ops:
        assert o.replied == o.calls and o.server_seconds is not None, o
        assert o.server_seconds >= wire[o.key], (o, wire[o.key])


# The findings that name each fixture's cause (issue 46's recordings), the same on both
# kernels: a GETATTR per name once READDIRPLUS's attributes expired (the GETACLs made the
# listing outlive them), a LOOKUP per name without readdirplus, a GETACL per name on NFSv3
# but with noacl; NFSv4.1 sends nothing per name (READDIR brings the attributes, and NFSv4
# has no NFSACL).
CASES = {
    "v3": {"per_name_getattr", "per_name_acl"},
    "v3-nordirplus": {"per_name_lookup", "per_name_acl"},
    "v3-noacl": set(),
    "v4.1": set(),
}
CAUSES = {f"ls-l-{k}-{v}": c for k in ("5.10", "6.1") for v, c in CASES.items()}


@pytest.mark.parametrize("name,what", INPUTS)
def test_findings_name_the_cause(name, what):
    n, rt = the_listing(analysis(name, what))
    found = slowness.findings(rt)
    kinds = {f.kind for f in found if f.kind.startswith("per_name")}
    assert kinds == CAUSES[name], [f.text() for f in found]
    for f in found:
        assert f.evidence and f.change
        if f.kind == "per_name_lookup":
            assert "nordirplus" in f.evidence and "LOOKUP" in f.evidence
        if f.kind == "per_name_acl":
            assert "noacl" in f.change
    # check's line: where a per-name call is the cause it names each; where none is, it
    # names no per-name call (it may say the READDIRs took most of the listing's time:
    # ls-l-5.10-v3-noacl's trace, whose 30 READDIRPLUS took 71% of its 1.00 s).
    lst = analysis(name, what).listings[n]
    said = slowness.line(lst, rt, found)
    per_name = {f.ops[0].split(".", 1)[1] for f in found if f.kind.startswith("per_name")}
    if CAUSES[name]:
        assert said is not None and all(f" {op}" in said for op in per_name), said
        assert said.startswith("time went to round trips per name"), said
    else:
        assert said is None or "READDIRs took most of it" in said, said
        assert said is None or said.startswith("time went to READDIRs"), said
        assert said is None or not any(op in said for op in ("GETATTR", "LOOKUP", "GETACL"))


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed")
@pytest.mark.parametrize("name", LS_FIXTURES)
def test_both_decoders_count_the_same_calls(name):
    path = os.path.join(FIXTURES, name, "idle.pcap.gz")
    tables = [
        capture.read(path, decoder=d, tables=False).calls.table() for d in ("compiled", "tshark")
    ]
    pd.testing.assert_frame_equal(tables[0], tables[1])


@pytest.mark.parametrize("name", ["ls-l-6.1-v3", "ls-l-6.1-v4.1"])
def test_check_adds_one_line_and_keeps_its_status(name):
    """check's exit status stays the restart verdict's (125 here); a slow listing adds one
    line saying where its time went."""
    for what in ("idle.dat", "idle.pcap.gz"):
        p = subprocess.run(
            [sys.executable, "-m", "nfsreaddir", "check", os.path.join(FIXTURES, name, what)],
            capture_output=True,
            text=True,
            cwd=TOP,
        )
        assert p.returncode == 125, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0].startswith("cannot decide: the bug was never exercised")
        if CAUSES[name]:
            assert len(lines) == 2 and "GETACL" in lines[1] and "noacl" in lines[1]
        else:
            assert len(lines) == 1
        assert "Traceback" not in p.stderr


def _rt(ops, names=3000, readdirs=3, seconds=30.0):
    return roundtrips.RoundTrips(
        "ls[1]", 0, int(seconds * 1e9), seconds, "test", "test", names, "test", "test",
        ops=[roundtrips.OpCount(p, o, n, n, s, n / names if names else None, s / seconds)
             for p, o, n, s in ops],
        readdirs=readdirs,
    )  # fmt: skip


def test_thresholds_are_ratios_of_the_evidence():
    rdp = ("NFS3", "READDIRPLUS", 3, 0.1)
    # One GETATTR a name, a fifth of the time: per name.
    assert [f.kind for f in slowness.findings(_rt([rdp, ("NFS3", "GETATTR", 3000, 6.0)]))] == [
        "per_name_getattr"
    ]
    # Under one call for every other name, or thirty a name (the directory asked again and
    # again), or a few names next to their READDIRs: not per name.
    for ops, names in (
        ([rdp, ("NFS3", "GETATTR", 1400, 6.0)], 3000),
        ([rdp, ("NFS3", "GETATTR", 90, 6.0)], 3),
        ([rdp, ("NFS3", "GETATTR", 20, 6.0)], 20),
    ):
        assert not slowness.findings(_rt(ops, names=names)), (ops, names)
    # Per name but a sliver of the listing's time where server time is known: not a finding.
    assert not slowness.findings(_rt([rdp, ("NFS3", "GETATTR", 3000, 0.3)]))
    # Many READDIRs taking most of the time: said; four READDIRs, whatever their share: not.
    many = slowness.findings(_rt([("NFS3", "READDIRPLUS", 300, 20.0)], readdirs=300))
    assert [f.kind for f in many] == ["readdir_share"]
    assert not slowness.findings(_rt([("NFS4", "READDIR", 4, 0.15)], readdirs=4, seconds=0.2))


def test_trace_server_time_from_rpc_statslatency_ns():
    """Where sunrpc:rpc_stats_latency was recorded, each request gets the rtt of its task's
    latency event that follows it (µs -> ns); requests without one stay unknown."""
    req = pd.DataFrame({"ts": [10, 20, 30], "task_id": [1, 2, 1], "client_id": [5, 5, 5]})
    lat = pd.DataFrame({"ts": [15, 35], "task_id": [1, 1], "client_id": [5, 5], "rtt": [7, 9]})
    got = roundtrips.latency_ns(req, lat)
    assert got[0] == 7000 and got[2] == 9000 and pd.isna(got[1])


@pytest.mark.parametrize("name", LS_FIXTURES)
def test_a_trace_without_the_listers_count_names_the_files_it_stat(name):
    """A trace recorded outside the reproducers has no lister's count: its names are the
    files the process stat'd (nfs:nfs_getattr_enter), each once, and the findings stand."""
    a = analysis(name, "idle.dat")
    n, _ = the_listing(a)
    lst = a.listings[n]
    entries, lst.entries = lst.entries, None
    try:
        rt = roundtrips.account(a)[n]
    finally:
        lst.entries = entries
    assert rt.names == entries and "stat'd" in rt.names_from
    kinds = {f.kind for f in slowness.findings(rt) if f.kind.startswith("per_name")}
    assert kinds == CAUSES[name]


# Issue 46's small READDIRs, on the runs that show them: stock 5.10 keeps one page of each
# reply (about 100 entries) and asks the server again from there. The capture of the same run
# says it from the wire (each reply's entries: tshark counts 23,178 nfs.readdir.entry in
# ls-l-5.10-v3-nordirplus's 30 READDIR replies, 6,378 in ls-l-5.10-v3-noacl's 30 READDIRPLUS
# replies, for 3,002 names each), the trace from the kernel's release.
SMALL_READDIRS = {
    (name, what)
    for name in (
        "ls-l-5.10-v3",
        "ls-l-5.10-v3-nordirplus",
        "ls-l-5.10-v3-noacl",
        "ls-l-5.10-v4.1",
        "5.10-v3-cap",
    )
    for what in ("idle.dat", "idle.pcap.gz")
}


@pytest.mark.parametrize(
    "name,what",
    sorted(SMALL_READDIRS | {(n, w) for n, w in INPUTS if "6.1" in n}),
)
def test_small_readdirs_where_replies_were_thrown_away(name, what):
    a = analysis(name, what)
    n, rt = the_listing(a)
    found = [f for f in slowness.findings(rt) if f.kind == "small_readdirs"]
    if (name, what) not in SMALL_READDIRS:
        # 6.1 keeps whole replies: 3 or 4 READDIRs for 3,000 names, nothing to say.
        assert not found and rt.readdirs < slowness.READDIR_FACTOR
        return
    assert len(found) == 1, [f.text() for f in slowness.findings(rt)]
    f = found[0]
    assert f.calls == rt.readdirs >= slowness.READDIR_FACTOR
    assert "names a READDIR" in f.evidence and "bytes asked" in f.evidence
    assert "5.18" in f.change
    if what.endswith(".gz"):
        # The wire's own count: the replies carried entries again (the client asked from
        # inside each), and whole replies would have needed at most 90% of the READDIRs
        # (ls-l-5.10-v4.1: 4,865 entries in 30 replies, 19 READDIRs for its 3,000 names).
        assert rt.refetched_entries and rt.readdir_entries > rt.names
        assert "(the wire)" in f.evidence and "would have brought every name" in f.evidence
    else:
        assert rt.kernel.startswith("5.10") and "one page of each reply" in f.evidence
    # Said beside the per-name findings, never in place of them.
    kinds = {g.kind for g in slowness.findings(rt) if g.kind.startswith("per_name")}
    assert kinds == CAUSES.get(name, kinds)


def test_small_readdirs_thresholds():
    """Ten READDIRs or more, of replies short of the ask even at the protocol's largest
    entries, or thrown away and asked again; a restarted listing's READDIRs are the restart
    verdict's; a directory one reply holds is no small-READDIR case."""

    def rt(names, readdirs, entries=None, dtsize=32768, kernel="6.1.0", op="READDIRPLUS"):
        r = _rt([], names=names, readdirs=readdirs)
        r.ops = [roundtrips.OpCount("NFS3", op, readdirs, 0, None, readdirs / names, None)]
        r.dtsizes, r.kernel = [dtsize] * readdirs, kernel
        r.readdir_entries, r.counted_replies = entries, (readdirs if entries else None)
        # (the wire: every entry past the names was carried again)
        r.refetched_entries = entries - names if entries else None
        return r

    kinds = lambda r: [f.kind for f in slowness.findings(r)]  # noqa: E731
    # 6.1, 20 READDIRs of 32 KiB asked, 10 names each: 10 x 440 bytes < half the ask.
    assert kinds(rt(200, 20)) == ["small_readdirs"]
    assert "less than half" in slowness.findings(rt(200, 20))[0].evidence
    # 100 names each could fill the ask (100 x 440 > 16 KiB): the directory is big, not the
    # replies small; 9 READDIRs: too few to save any.
    assert kinds(rt(2000, 20)) == [] and kinds(rt(90, 9)) == []
    # The wire: 500 entries a reply, 100 taken: thrown away.
    assert kinds(rt(2000, 20, entries=10000)) == ["small_readdirs"]
    # 162 a reply, 100 taken (ls-l-5.10-v4.1's wire): whole replies would have needed 19 of
    # the 30; 105 a reply, 100 taken: 20 of 20, nothing to save.
    assert kinds(rt(3000, 30, entries=4865)) == ["small_readdirs"]
    assert kinds(rt(2000, 20, entries=2100)) == []
    # ... but not where one reply holds the whole directory (a reader reading it again).
    assert kinds(rt(3, 200, entries=600)) == []
    r = rt(2000, 20, entries=10000)
    r.restarted = True
    assert kinds(r) == []
    # 5.10 without the wire: its one page of each reply; a kernel between 5.10 and 5.18
    # (not known) says nothing.
    assert kinds(rt(2000, 20, kernel="5.10.0-46-amd64")) == ["small_readdirs"]
    assert kinds(rt(2000, 20, kernel="5.15.0")) == []


def test_uncached_readdirs_from_the_kernels_events():
    """A 6.1 trace's READDIRs come from nfs:nfs_readdir_cache_fill and
    nfs:nfs_readdir_uncached: 0 uncached READDIRs is evidence (no finding); READDIRs of
    the uncached event are said, with their count (no recording has one: the rows are
    relabelled as the kernel would have named them)."""
    a = analysis("ls-l-6.1-v3", "idle.dat")
    n, rt = the_listing(a)
    assert rt.uncached_readdirs == 0
    assert not [f for f in slowness.findings(rt) if f.kind == "uncached_readdir"]
    lst = a.listings[n]
    source = lst.rpcs["source"]
    try:
        lst.rpcs["source"] = source.copy()
        lst.rpcs["source"][1:] = "nfs:nfs_readdir_uncached"
        again = roundtrips.account(a)[n]
    finally:
        lst.rpcs["source"] = source
    assert again.uncached_readdirs == len(lst.rpcs) - 1 == 2
    f = [f for f in slowness.findings(again) if f.kind == "uncached_readdir"]
    assert len(f) == 1 and f[0].calls == 2 and "uncached mode" in f[0].evidence
    # A capture, and a trace whose READDIRs came from other events, cannot tell.
    _, c = the_listing(analysis("ls-l-6.1-v3", "idle.pcap.gz"))
    _, t = the_listing(analysis("ls-l-5.10-v3", "idle.dat"))
    assert c.uncached_readdirs is None and t.uncached_readdirs is None


@pytest.mark.parametrize("what", ["idle.dat", "idle.pcap.gz"])
def test_small_readdirs_in_text_json_and_the_page(what, tmp_path):
    """The finding as a user meets it: analyze's text, analyze --json's slowness list, and the
    report page, on the stock 5.10 `ls -l` run."""
    from conftest import run_cli

    path = os.path.join(FIXTURES, "ls-l-5.10-v3", what)
    text = run_cli("analyze", path, check=0).stdout
    assert "finding: 30 READDIRs for" in text and "5.18" in text
    data = json.loads(run_cli("analyze", "--json", path, check=0).stdout)
    kinds = [f["kind"] for a in data for lst in a["listings"] for f in lst.get("slowness", [])]
    assert kinds.count("small_readdirs") == 1, kinds
    page = tmp_path / "r.html"
    run_cli("report", path, "-o", page, check=0)
    html = page.read_text()
    assert "30 READDIRs for" in html and "names a READDIR" in html


class _Watched:
    """One process's opens (opens.Opens, the tracker's reader model) and its RPCs fed to watch's
    Attribution as the tracker feeds them; given: (directory, op, calls) counted."""

    def __init__(self):
        from nfsreaddir.live import attribution
        from nfsreaddir.model import opens

        self.model = opens.Opens(True, False)
        self.given, self.requests, self.ended = [], [], []
        self.live = attribution.Attribution(
            lambda o, p, op, n, s: self.given.append((o.key[1], op, n))
        )

    def mine(self):
        return [o for o in self.model.live.values() if o.pid == 1]

    def finished(self):  # (the tracker's _finished, at the end of each batch of events)
        for o in self.model.done:
            self.live.ended(o)
        self.ended.extend(self.model.done)
        self.model.done.clear()

    def call(self, ts, what, f):
        before = self.mine()
        self.model.call({"pid": 1, "comm": "find", "ts": ts, "call": what, "file": f})
        self.live.event(1, ts, before + self.mine())

    def readdir(self, ts, row):
        before = self.mine()
        o = self.model.readdir(1, "find", ts, row, None)
        self.live.readdir(o, ts)
        self.live.event(1, ts, before + self.mine())

    def rpc(self, ts, op):
        self.requests.append((1, ts))
        self.live.call(1, ts, self.mine(), "NFS4", op)


@pytest.mark.parametrize("second_sends_readdir", [False, True])
def test_watch_gives_each_call_the_listing_analyze_does(second_sends_readdir):
    """One window rule for a listing's RPCs (roundtrips.window), applied to a whole trace
    (_owners) and as the events come (Attribution, watch's): find closes directory A and opens
    B at the same nanosecond (an emulated guest's clock), and a LOOKUP of that time, sent
    before the close, is B's where B's window begins then (the cache served B whole), A's
    where B sends a READDIR later (B's window begins there). Watch learns B's window only at
    B's end, and the close of A (the tracker's end of A) comes before B opens: the call
    waits, and goes where analyze puts it."""
    w = _Watched()
    w.call(10, "opendir", "A")
    w.readdir(11, 0)
    w.call(12, "getdents", "A")
    w.rpc(15, "GETATTR")
    w.rpc(20, "LOOKUP")
    w.call(20, "closedir", "A")
    w.finished()
    w.call(20, "opendir", "B")
    w.call(25, "getdents", "B")
    if second_sends_readdir:
        w.readdir(26, 1)
    w.call(30, "closedir", "B")
    w.finished()
    w.live.stop()
    want = "A" if second_sends_readdir else "B"
    assert sorted(w.given) == [("A", "GETATTR", 1), (want, "LOOKUP", 1)], w.given
    # analyze's: the same opens as listings (first READDIR, start, end), the same calls
    listings = [
        type("L", (), {"pid": 1, "start": o.start, "end": o.end, "rpcs": pd.DataFrame({"ts": ts})})
        for o, ts in zip(w.ended, ([11], [26] if second_sends_readdir else []))
    ]
    owner = roundtrips._owners(listings, pd.DataFrame(w.requests, columns=["pid", "ts"]))
    assert ["AB"[n] for n in owner] == ["A", want]


def test_watch_keeps_a_bounded_wait():
    """A process that holds a directory open for ever, served by the page cache (no READDIR),
    and stats names between its getdents: whether its calls are that listing's is known only
    at its end, so they wait; past MAX_WAITING_GAPS gaps the oldest go to the open it reads,
    and nothing is lost."""
    from nfsreaddir.live import attribution

    w = _Watched()
    w.call(10, "opendir", "A")
    gaps = attribution.MAX_WAITING_GAPS + 500
    for k in range(gaps):
        w.call(100 + 10 * k, "getdents", "A")
        w.rpc(105 + 10 * k, "GETATTR")
        waiting = sum(len(g) for g in w.live._waiting.values())
        assert waiting <= attribution.MAX_WAITING_GAPS
    # (the last call's gap is still being filled: no event of the process after it yet)
    assert sum(n for _, _, n in w.given) == gaps - waiting - 1 > 0
    w.call(100 + 10 * gaps, "closedir", "A")
    w.finished()
    assert sum(n for _, _, n in w.given) == gaps and {d for d, _, _ in w.given} == {"A"}


SERIES_5_10 = ["5.10-series-v4.1", "5.10-series-v4.1-cap", "5.10-series3-v4.1", "multi-5.10-series"]


@pytest.mark.parametrize("name", SERIES_5_10)
def test_a_window_begins_at_the_first_readdirs_call(name):
    """The series on 5.10 over NFSv4 reads READDIRs from nfs4:nfs4_readdir, which fires at the
    reply: a listing's window begins at its first READDIR's call, so it counts each READDIR it
    read, and every READDIR call of a lister is one listing's (multi-5.10-series: find, its
    clock coarse enough that a reply and the next call tie)."""
    import numpy as np

    from nfsreaddir.model import analysis as analyses
    from nfsreaddir.trace import open_trace

    for dat in sorted(f for f in os.listdir(os.path.join(FIXTURES, name)) if f.endswith(".dat")):
        a = analyses.analyze(open_trace(os.path.join(FIXTURES, name, dat)))
        rts = roundtrips.account(a)
        assert rts
        got = {n: rt.readdirs for n, rt in rts.items()}
        assert got == {n: len(a.listings[n].rpcs) for n in rts}, dat
        req = a.tables["requests"]
        pids = {a.listings[n].pid for n in rts}
        readdir = np.isin(np.asarray(req["op"], dtype=object), roundtrips.READDIR_OPS)
        sent = readdir & np.isin(np.asarray(req["pid"]), list(pids))
        assert sum(got.values()) == int(sent.sum()), dat
        if len(rts) == 1:
            (rt,) = rts.values()
            assert not any(k.endswith(".READDIR") for k in rt.outside), rt.outside


def test_a_reply_is_paired_with_its_own_call():
    """ReplyCalls: a process's READDIRs one at a time, on a coarse clock (the next call tied
    with a reply, two replies tied), a call lost, an event lost."""
    pair = windows.ReplyCalls()
    got = []
    for what, ts in [
        ("call", 10),
        ("reply", 20),  # 10
        ("call", 20),  # (tied with the reply before it)
        ("reply", 30),  # 20
        ("call", 40),
        ("call", 40),
        ("reply", 40),  # 40, the first one
        ("reply", 40),  # 40, the second one
        ("reply", 50),  # its call not traced: none
        ("call", 60),  # its event lost
        ("call", 70),
        ("reply", 80),  # 60: the first not paired since the reply before (a lost event's)
    ]:
        if what == "call":
            pair.call(ts)
        else:
            got.append(pair.reply(ts))
    assert got == [10, 20, 40, 40, None, 60]


@pytest.mark.parametrize("name", SERIES_5_10)
def test_uncached_readdirs_of_the_series_beside_nfs4_readdir(name):
    """The series on 5.10 over NFSv4: READDIRs come from nfs4:nfs4_readdir, which does not
    tell the modes apart, and the series' uncached-mode events fire beside it. tables.load
    reads them as a side table ("uncached": ts, pid, fileid), every one the trace fired, and
    each listing counts those of its process and directory: none in an idle listing, most
    READDIRs of a listing whose directory changed (the cache was dropped), never more than its
    READDIRs (its window begins at its first READDIR's call, so it counts them all), and all
    of the trace's where one listing read the directory; the finding says so."""
    from nfsreaddir import events
    from nfsreaddir.model import analysis as analyses
    from nfsreaddir.trace import open_trace

    for dat in sorted(f for f in os.listdir(os.path.join(FIXTURES, name)) if f.endswith(".dat")):
        path = os.path.join(FIXTURES, name, dat)
        trace = open_trace(path)
        a = analyses.analyze(trace)
        side = a.tables["uncached"]
        evs = [e for e in events.UNCACHED_READDIR if e in trace.event_names()]
        fired = sum(len(f) for f in trace.read(dict.fromkeys(evs, ["fileid"])).values())
        assert side is not None and len(side) == fired, (len(side), fired)
        rts = roundtrips.account(a)
        got = {n: rt.uncached_readdirs for n, rt in rts.items()}
        assert all(0 <= u <= rts[n].readdirs for n, u in got.items()), got
        assert all(rts[n].readdirs == len(a.listings[n].rpcs) for n in got)
        if dat == "idle.dat":
            assert fired == 0 and set(got.values()) == {0}
        elif len(rts) == 1:
            ((n, rt),) = rts.items()
            assert got[n] == fired > len(a.listings[n].rpcs) / 2, (got, fired)
            f = [f for f in slowness.findings(rt) if f.kind == "uncached_readdir"]
            assert len(f) == 1 and f[0].calls == fired, f
        else:
            assert 0 < sum(got.values()) <= fired, (got, fired)
