"""The analysis on traces recorded by the reproducer (tests/fixtures/*/COMMAND)."""

import os

import pytest

from conftest import FIXTURES
from nfsreaddir import events
from nfsreaddir.model.analysis import analyze
from nfsreaddir.rules.verdict import judge
from nfsreaddir.trace import open_trace


def listing(path, phase):
    a = analyze(open_trace(path))
    (lst,) = [x for x in a.listings if x.phase == phase]
    return a, lst


@pytest.mark.parametrize("phase", ["idle", "modified"])
def test_restarts_are_the_cookie_zero_readdirs_after_the_first(fixture, phase):
    a, lst = listing(os.path.join(fixture["dir"], f"{phase}.dat"), phase)
    assert a.cookies_known, a.evidence
    cookies = list(lst.rpcs["cookie"])
    assert cookies[0] == 0
    # A cookie-0 READDIR before the listing asked for anything beyond the first page fills
    # that page again for a reader still inside it (the 7.3 fixture): no restart.
    assert len(lst.restarts) == sum(
        1 for i, c in enumerate(cookies) if i and c == 0 and max(cookies[:i]) > 0
    )
    # Every restart re-reads at least the READDIR it starts with.
    assert all(r.refetched >= 1 and r.cost_ns >= 0 for r in lst.restarts)


def test_only_5_10_nfsv4_modified_is_bad(fixture):
    """The bisect verdict: 5.10 over NFSv4 restarts after each invalidation; 6.1 continues
    from the cookie it reached; an idle listing, and 5.10 over NFSv3 (whose READDIR replies keep
    the directory's attributes fresh, so its cache is never invalidated), never met the bug."""
    for phase in ("idle", "modified"):
        a, lst = listing(os.path.join(fixture["dir"], f"{phase}.dat"), phase)
        v = judge([a])
        bad = fixture["name"] == "5.10-v4.1" and phase == "modified"
        untested = phase == "idle" or fixture["name"] == "5.10-v3"
        assert v.code == (1 if bad else 125 if untested else 0), (fixture["name"], phase, v.reason)
        if bad:
            assert "restarted" in v.reason and "cookie 0" in v.reason
            assert len(lst.restarts) >= 2
            assert len(lst.invalidations) >= len(lst.restarts)
            assert all(r.after_invalidation for r in lst.restarts)
            # 5.10 restarts after every invalidation, even when the emulated clock gives the
            # invalidation and the restarting READDIR the same timestamp.
            assert sum(i.followed_by_restart for i in lst.invalidations) == len(lst.restarts)
            inv = [i for i in lst.invalidations if i.followed_by_restart]
            # The chain that caused it: a revalidation whose GETATTR found the change.
            assert all("revalidate" in i.chain for i in inv), [i.chain for i in inv]
            assert any(s.endswith("(INVALID_DATA)") for i in inv for s in i.chain)
        else:
            assert lst.restarts == []
        if untested:
            assert "never exercised" in v.reason and not lst.exercised
        else:
            assert lst.exercised and lst.complete and lst.ending == "eof"


def test_analysis_matches_the_run(fixture):
    """READDIRs seen in the trace are the ones the mount counted, and the run's own
    results.json says what a fresh analysis says."""
    for phase, p in fixture["results"]["phases"].items():
        a, lst = listing(os.path.join(fixture["dir"], f"{phase}.dat"), phase)
        s = lst.summary()
        assert s["readdirs"] == p["readdir_rpcs"], (phase, s["readdirs"], p["readdir_rpcs"])
        assert s["restarts"] == p["restarts"]
        assert s["invalidations"] == p["invalidations"]
        assert s["entries"] == p["entries"] >= fixture["results"]["files"]


def test_5_10_refetches_account_for_the_extra_readdirs():
    d = os.path.join(FIXTURES, "5.10-v4.1")
    _, idle = listing(os.path.join(d, "idle.dat"), "idle")
    _, mod = listing(os.path.join(d, "modified.dat"), "modified")
    s = mod.summary()
    # Without the restarts, the modified listing would have needed about the idle count
    # (a few more for the files the writer added).
    assert len(idle.rpcs) <= s["readdirs"] - s["refetched_readdirs"] <= len(idle.rpcs) * 1.1


def test_evidence_names_the_kernel_events(fixture):
    a, _ = listing(os.path.join(fixture["dir"], "modified.dat"), "modified")
    rpc = a.evidence["rpc"]
    if fixture["name"].startswith("5.10-series"):
        # The series' own events: the cookie in nfs4_readdir, and every getdents call.
        assert rpc == ["nfs4:nfs4_readdir"]
        assert a.evidence["invalidations"] == ["nfs:nfs_readdir_invalidate_cache"]
        lst = a.listings[0]
        assert lst.getdents and lst.getdents >= lst.entries // 128
        assert all(i.reason == "REVALIDATE" for i in lst.invalidations)
    elif fixture["name"].startswith("5.10"):
        assert rpc and all(e.startswith(events.KPROBE_SYSTEM + ":") for e in rpc)
        assert a.listings[0].getdents is None
        if fixture["name"] == "5.10-v4.1":
            # NFSv4: the directory comes from the nfs4:nfs4_readdir event after each RPC.
            assert a.evidence["rpc_directory"] == ["nfs4:nfs4_readdir"]
            assert a.listings[0].fileid == int(
                fixture["results"]["phases"]["modified"]["dir_fileid"]
            )
    else:
        assert "nfs:nfs_readdir_cache_fill" in rpc


def test_dcache_samples_cover_each_listing(fixture):
    a, lst = listing(os.path.join(fixture["dir"], "modified.dat"), "modified")
    d = lst.dentries["nr_dentry"]
    assert d["after"] - d["before"] == d["added"]
    assert len(a.samples) >= 2 and a.samples["nr_dentry"].min() > 0


class _Without:
    """A recorded trace that lacks some of its events, as a trace recorded without them."""

    def __init__(self, trace, hidden):
        self.trace, self.hidden = trace, set(hidden)

    def event_names(self):
        return set(self.trace.event_names()) - self.hidden

    def event_format(self, name):
        return None if name in self.hidden else self.trace.event_format(name)

    def __getattr__(self, name):
        return getattr(self.trace, name)


# The series' page-fill events, under the names of v1-v2 (upstream's, with other fields) and of
# v3 on (its own); each fixture was recorded with one set.
SERIES_FILLS = {
    "5.10-series-v4.1": ("nfs:nfs_readdir_cache_fill", "nfs:nfs_readdir_uncached"),
    "5.10-series3-v4.1": (
        "nfs:nfs_readdir_cache_page_filled",
        "nfs:nfs_readdir_uncached_page_filled",
    ),
}


@pytest.mark.parametrize("name", sorted(SERIES_FILLS))
@pytest.mark.parametrize("phase", ["idle", "modified"])
def test_the_series_fill_events_read_as_its_nfs4_readdirs(name, phase):
    """Each READDIR of the series fires nfs4:nfs4_readdir and one page-fill event (cache or
    uncached). Read without nfs4:nfs4_readdir, as an NFSv3 trace is, a trace gives the same
    READDIRs (cookies, in order), the same restarts and the same verdict from its fill events,
    whichever names and layout its series version gave them."""
    path = os.path.join(FIXTURES, name, f"{phase}.dat")
    trace = open_trace(path)
    full = analyze(trace)
    fills = analyze(_Without(trace, ["nfs4:nfs4_readdir"]))
    assert full.evidence["rpc"] == ["nfs4:nfs4_readdir"]
    assert sorted(fills.evidence["rpc"]) == sorted(
        set(SERIES_FILLS[name]) & set(trace.event_names())
    )
    (a,) = [x for x in full.listings if x.phase == phase]
    (b,) = [x for x in fills.listings if x.phase == phase]
    assert list(a.rpcs["cookie"]) == list(b.rpcs["cookie"]) and len(a.rpcs) > 1
    assert a.summary() == b.summary()
    assert judge([full]).code == judge([fills]).code
