"""Several readers of one client at once (readdir-multi: a poller, a rewinder, a slow ls, small
ls's and two finds while a writer adds files). The ground truth is what each reader wrote about
itself (truth.json): its pid, how many listings it made and whether each reached the end. The
analyzer must find those listings, in the trace.dat and in the report text a user would paste,
and judge the kernel by the listings that met a change, never by a poller's fresh opens."""

import json
import os

import pytest

from conftest import FIXTURES, report_text, run_cli

# Stock 5.10 restarts; 6.1 does not. 5.10 with this project's series resumes at the reader's
# cookie when the cache is empty, but like stock 5.10 (and 5.11-5.17) it still looks for the
# cookie from the first cached page: when another reader has filled some pages again, a whole
# page behind the reader is fetched again.
KERNELS = {"multi-5.10": 1, "multi-6.1": 0, "multi-5.10-series": 1}


def truth(name):
    with open(os.path.join(FIXTURES, name, "truth.json")) as f:
        return json.load(f)


def listings_of(path):
    (a,) = json.loads(run_cli("analyze", "--json", path, check=0).stdout)
    return a["listings"]


def expected(reader):
    """The listings a reader made, each True when the workload saw it reach the end."""
    if "listings" in reader:
        return [bool(lst["eof"]) for lst in reader["listings"]]
    # find and ls exit 0 only after reading every directory they opened to its end
    return [reader["exit"] == 0] * len(reader["dirs"])


@pytest.mark.parametrize("form", ["dat", "report", "report -R"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_reader_has_its_own_listings(name, form, trace_cmd, tmp_path):
    """One listing per open, per reader, ending as the reader saw it end: a listing that ends at
    the same instant as the next begins (a coarse emulated clock) is still one listing that
    reached the end."""
    dat = os.path.join(FIXTURES, name, "multi.dat")
    path = (
        dat
        if form == "dat"
        else report_text(trace_cmd, dat, tmp_path / "multi.txt", raw=form.endswith("-R"))
    )
    found = listings_of(path)
    for reader in truth(name)["readers"]:
        mine = [lst for lst in found if lst["pid"] == reader["pid"]]
        want = expected(reader)
        assert len(mine) == len(want), (reader["kind"], reader["pid"], len(mine), len(want))
        got = sorted(lst["ending"] == "eof" for lst in mine)
        assert got == sorted(want), (reader["kind"], [lst["ending"] for lst in mine])


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_kernel_is_judged_by_the_readers_that_met_the_changes(name):
    """Only a reader that came back to the directory the writer changed, after the change, with
    its place in the middle of it can restart: the slow ls and the rewinder (small buffers),
    never a poller's fresh open, the small directory or the tree. Stock 5.10's slow ls does
    (below its own position: the poller had refilled the first pages of the cache, so the ls
    never asks for cookie 0 itself); on 6.1 nothing does."""
    t = truth(name)
    kind = {r["pid"]: r["kind"] for r in t["readers"]}
    c = run_cli("check", os.path.join(FIXTURES, name))
    assert c.returncode == KERNELS[name], c.stdout + c.stderr
    restarted = [lst for lst in listings_of(os.path.join(FIXTURES, name)) if lst["restarts"]]
    for lst in restarted:
        assert lst["dir_fileid"] == t["directories"]["big"]["fileid"], lst
        assert kind[lst["pid"]] in ("slow-ls", "rewinder"), lst
    if not KERNELS[name]:
        assert not restarted and c.stdout.startswith("good:"), c.stdout
    elif name == "multi-5.10":
        slow = next(p for p, k in kind.items() if k == "slow-ls")
        assert f"ls[{slow}] restarted" in c.stdout, c.stdout


def test_a_read_below_the_position_needs_the_kernel(trace_cmd, tmp_path):
    """Whether a READDIR below the reader's position is a restart depends on the kernel's page
    cache search (before 5.18 it starts at the first page): a report whose kernel is not
    known cannot decide, and says why."""
    dat = os.path.join(FIXTURES, "multi-5.10", "multi.dat")
    lines = open(report_text(trace_cmd, dat, tmp_path / "r.txt")).readlines()
    kept = [ln for ln in lines if "nfsrt: run kernel=" not in ln]
    assert len(kept) == len(lines) - 1
    p = tmp_path / "no-kernel.txt"
    p.write_text("".join(kept))
    c = run_cli("check", p)
    assert c.returncode == 125 and "went back" in c.stdout, c.stdout


def test_a_change_before_the_reader_left_the_start_is_no_evidence():
    """A poller's revalidation when it opens the directory drops a cache it has not read from:
    no kernel can restart from that, so such a listing is untested, never good (on stock 5.10
    a good there would be a false good)."""
    from nfsreaddir import trace
    from nfsreaddir.model import analysis
    from nfsreaddir.rules import verdict

    a = analysis.analyze(trace.open_trace(os.path.join(FIXTURES, "multi-5.10", "multi.dat")))
    early = [
        lst
        for lst in a.listings
        if lst.invalidations
        and len(lst.rpcs)
        and all(i.ts <= lst.rpcs["ts"].min() for i in lst.invalidations)
    ]
    assert early
    for lst in early:
        assert not lst.exercised and verdict.judge_listing(lst).word == "untested", lst.label()
