"""A server's capture of several clients, client by client (issue 34's triage).

fleet-5.10 is a capture of many clients recorded for real: readdir-fleet's knfsd and its
clients, each in a network namespace of its own, listing at once on stock 5.10 while the writer
changed the directories of some of them. What each client did is its truth.json, written by the
workload (its own mount's READDIR count, whether its directory changed), and the clients' own
trace (fleet.dat) says what each lister's kernel did, by its pid.

The server's capture here is three real client captures merged by Wireshark's mergecap, one
per kernel, each recorded by readdir-loopback with --capture on (the *-cap fixtures), each its
own client connection (127.0.0.1 with its own port). What each client did comes from its own
run, not from the analyzer: its facts (the mount's own READDIR count) and the kernel it ran
(stock 5.10 restarts a listing whose directory changes under it; 6.1 and 5.10 with
kernel-patches/v5.10 do not, test_capture.py's KERNELS).
"""

import json
import os
import subprocess

import pandas as pd
import pytest

from conftest import FIXTURES, installed, run_cli
from nfsreaddir.model import analysis, wire
from nfsreaddir.trace import open_trace

# fixture -> does its client restart (its kernel)
CLIENTS = {"5.10-v4.1-cap": True, "6.1-v4.1-cap": False, "5.10-series-v4.1-cap": False}


def _source(name):
    return os.path.join(FIXTURES, name, "modified.pcap.gz")


def _readdirs(name):
    """The READDIRs the client's own mount counted (mountstats, in the run's facts)."""
    with open(os.path.join(FIXTURES, name, "facts")) as f:
        facts = dict(line.rstrip("\n").partition("=")[::2] for line in f)
    return int(facts["modified.readdir"])


@pytest.fixture(scope="module")
def server_capture(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fleet") / "server.pcap")
    subprocess.run(
        [installed("mergecap"), "-F", "pcap", "-w", out] + [_source(n) for n in CLIENTS],
        check=True,
        timeout=120,
    )
    return out


@pytest.fixture(scope="module")
def alone():
    """{fixture: its one client's listing, from its own capture}."""
    out = {}
    for name in CLIENTS:
        (lst,) = wire.analyze(_source(name)).listings
        out[name] = lst
    return out


def test_each_client_is_ranked_by_readdirs_spent_refetching(server_capture, alone):
    a = wire.analyze(server_capture)
    clients = a.tables["clients"]
    assert list(clients["rank"]) == [1, 2, 3]
    by_client = {row["client"]: row for row in clients.to_dict("records")}
    assert set(by_client) == {lst.client for lst in alone.values()}
    for name, restarts in CLIENTS.items():
        lst = alone[name]
        row = by_client[lst.client]
        # The server's view of a client is the client's own.
        assert row["readdirs"] == _readdirs(name) == len(lst.rpcs), name
        assert row["listings"] == row["complete"] == row["dirs"] == 1, name
        assert row["restarts"] == len(lst.restarts) and bool(row["restarts"]) == restarts, name
        assert row["refetched_readdirs"] == sum(r.refetched for r in lst.restarts), name
        assert row["refetched_entries"] == lst.refetched_entries, name
    # The restarting client first; the others spent nothing, ranked by READDIRs.
    assert clients["client"].iat[0] == alone["5.10-v4.1-cap"].client
    assert (
        clients["refetched_readdirs"].iat[0] > 0
        and not clients["refetched_readdirs"].iloc[1:].any()
    )
    assert clients["readdirs"].iat[1] >= clients["readdirs"].iat[2]
    assert clients["refetched_share"].iat[0] == round(
        clients["refetched_readdirs"].iat[0] / clients["readdirs"].iat[0], 3
    )
    dirs = a.tables["client_dirs"]
    assert list(dirs["client"]) == list(clients["client"])
    assert list(dirs["version_changes"]) == [
        next(x for x in alone.values() if x.client == c).version_changes for c in dirs["client"]
    ]


def test_triage_in_text_json_and_export(server_capture, alone, tmp_path):
    bad = alone["5.10-v4.1-cap"]
    text = run_cli("analyze", server_capture, check=0).stdout
    assert "3 client connections over" in text
    assert "2 more clients restarted no listing" in text
    (line,) = [x for x in text.splitlines() if x.strip().startswith("1 ") and bad.client in x]
    assert str(sum(r.refetched for r in bad.restarts)) in line.split()
    (d,) = json.loads(run_cli("analyze", "--json", server_capture, check=0).stdout)
    assert [c["rank"] for c in d["triage"]["clients"]] == [1, 2, 3]
    assert d["triage"]["clients"][0]["client"] == bad.client
    assert len(d["triage"]["client_dirs"]) == 3
    run_cli("export", server_capture, "-o", str(tmp_path), check=0)
    for table, n in (("clients", 3), ("client_dirs", 3)):
        (f,) = os.listdir(tmp_path / table)
        df = pd.read_csv(tmp_path / table / f)
        assert len(df) == n and df["client"].iat[0] == bad.client, table


def test_one_client_has_no_triage(alone):
    (d,) = json.loads(run_cli("analyze", "--json", _source("6.1-v4.1-cap"), check=0).stdout)
    assert "triage" not in d
    assert "client connections" not in run_cli("analyze", _source("6.1-v4.1-cap"), check=0).stdout


FLEET = os.path.join(FIXTURES, "fleet-5.10")


@pytest.fixture(scope="module")
def fleet():
    """(truth.json's clients, {client address: its listings in the server's capture})."""
    with open(os.path.join(FLEET, "truth.json")) as f:
        clients = json.load(f)["clients"]
    by_address = {}
    for lst in wire.analyze(os.path.join(FLEET, "fleet.pcap.gz")).listings:
        by_address.setdefault(lst.client.rpartition(":")[0], []).append(lst)
    return clients, by_address


def _restarts(listings):
    return sum(len(lst.restarts) for lst in listings)


def _unclear(listings):
    return sum(len(lst.ambiguous_rows) for lst in listings)


def _back_to_start(listings):
    """The times a client's READDIRs went back to cookie 0 on the wire: its restarts, its
    returns that may be restarts or new listings, its refills of the first page, and its passes
    over the directory after the first."""
    refills = sum(len(lst.refill_rows) for lst in listings)
    return _restarts(listings) + _unclear(listings) + refills + len(listings) - 1


def test_a_capture_of_many_clients_gives_each_client_its_listings(fleet):
    clients, by_address = fleet
    assert len(clients) >= 50 and any(c["changing"] for c in clients)
    assert not all(c["changing"] for c in clients)
    assert set(by_address) == {c["client"] for c in clients}
    for c in clients:
        listings = by_address[c["client"]]
        who = f"{c['client']} ({c['directory']})"
        # One connection per namespace, its own directory only, listed to the end.
        assert len({lst.client for lst in listings}) == 1, who
        # Not the one lister of a reproducer's phase, though the facts name a phase "fleet".
        assert not any(lst.phase for lst in listings), who
        assert {lst.fileid for lst in listings} == {c["fileid"]}, who
        assert c["eof"] and listings[-1].complete, who
        # The server saw every READDIR the client's own mount counted, and no other.
        assert sum(len(lst.rpcs) for lst in listings) == c["readdir"] > 0, who
        assert c["readdirplus"] == 0, who
        # The lister made one pass: its client went back to the start only when the directory
        # changed under it, and a restart the capture is sure of is one of those.
        assert bool(_back_to_start(listings)) == c["changing"], who
        assert c["changing"] or not _restarts(listings), who


def test_each_clients_restarts_are_those_of_its_own_trace(fleet):
    """Each lister's trace (by its pid) against its client's READDIRs on the wire. 5.10 keeps one
    page (about 127 entries) of each READDIR reply, and with its 32 KiB READDIRs every reply of
    these 300-file directories reaches eof; a lister behind its client's cache when the directory
    changes restarts after the client has fetched to eof: on the wire a READDIR at cookie 0
    after an eof reply, which a capture cannot tell from a new listing, so it counts as either.
    So the wire's restarts are some of the trace's, never more, with its unclear returns all of
    them (a range that holds the trace's count), and the trace's restarts and refills of the
    first page (before the lister read from it) are the wire's returns to cookie 0, one for
    one."""
    clients, by_address = fleet
    traced = {}
    for lst in analysis.analyze(open_trace(os.path.join(FLEET, "fleet.dat"))).listings:
        traced.setdefault(lst.pid, []).append(lst)
    assert {c["pid"] for c in clients} <= set(traced)
    on_wire = 0
    for c in clients:
        mine, seen = traced[c["pid"]], by_address[c["client"]]
        assert len(mine) == 1, c["client"]  # its one opendir
        assert sum(len(lst.rpcs) for lst in mine) == c["readdir"], c["client"]
        assert bool(_restarts(mine)) == c["changing"], c["client"]
        assert _restarts(seen) <= _restarts(mine) <= _restarts(seen) + _unclear(seen), c["client"]
        refills = sum(len(lst.refill_rows) for lst in mine)
        assert _back_to_start(seen) == _restarts(mine) + refills, c["client"]
        on_wire += _restarts(seen)
    assert on_wire > 0


def test_the_fleets_triage_ranks_the_changing_clients_first(fleet):
    clients, by_address = fleet
    changing = {c["client"] for c in clients if c["changing"]}
    path = os.path.join(FLEET, "fleet.pcap.gz")
    (d,) = json.loads(run_cli("analyze", "--json", path, check=0).stdout)
    ranked = d["triage"]["clients"]
    assert [c["rank"] for c in ranked] == list(range(1, len(clients) + 1))
    for c in ranked:
        mine = by_address[c["client"].rpartition(":")[0]]
        assert c["readdirs"] == sum(len(x.rpcs) for x in mine)
        assert c["restarts"] == _restarts(mine)
    spent = [c["refetched_readdirs"] for c in ranked]
    assert spent == sorted(spent, reverse=True)
    # The clients that spent READDIRs refetching come first, and all are changing ones.
    busy = [c["client"].rpartition(":")[0] for c in ranked if c["refetched_readdirs"]]
    assert busy and set(busy) <= changing
    assert busy == [c["client"].rpartition(":")[0] for c in ranked[: len(busy)]]
    text = run_cli("analyze", path, check=0).stdout
    assert f"{len(clients)} client connections over {len(clients)} directories" in text
    # A line for each client that restarted or may have: every changing client, no other.
    shown = {c["client"].rpartition(":")[0] for c in ranked if c["restarts"] or c["ambiguous"]}
    assert shown == changing
    assert f"{len(clients) - len(shown)} more clients restarted no listing" in text
    # The triage table's first row: rank 1, the client ranked first, what it spent.
    top = next(x for x in text.splitlines() if x.split()[:2] == ["1", ranked[0]["client"]])
    assert str(spent[0]) in top.split()
