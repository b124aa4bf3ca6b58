"""A server's capture of several clients, client by client (issue 34's triage).

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
from nfsreaddir.model import wire

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
