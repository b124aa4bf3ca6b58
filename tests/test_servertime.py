"""Issue 46: a trace's server time per operation, from sunrpc:rpc_stats_latency (its rtt),
on the one recording that has those events (record-5.10-ringloss: `nfs-readdir record`'s plan
on 5.10; no other fixture recorded them). The oracle is trace-cmd's own report of the same
events, summed by procedure."""

import collections
import os
import re
import shutil
import subprocess

import pytest

from conftest import FIXTURES
from nfsreaddir import pipeline

TRACE = os.path.join(FIXTURES, "record-5.10-ringloss", "t.dat")
pytestmark = pytest.mark.skipif(not shutil.which("trace-cmd"), reason="needs trace-cmd")


def reported_rtt():
    """{procname: (events, rtt summed in s)} of the trace's rpc_stats_latency, by trace-cmd."""
    p = subprocess.run(
        ["trace-cmd", "report", "-i", TRACE],
        capture_output=True,
        text=True,
        check=True,
    )
    out = collections.defaultdict(lambda: [0, 0.0])
    for ln in p.stdout.splitlines():
        m = re.search(r"rpc_stats_latency:.* (\w+) backlog=\d+ rtt=(\d+)", ln)
        if m:
            out[m.group(1)][0] += 1
            out[m.group(1)][1] += int(m.group(2)) / 1e6
    return out


def test_server_time_per_operation_from_rpc_stats_latency():
    a, _ = pipeline.readdir_analysis(TRACE)
    rts = list(a.round_trips.values())
    assert rts and all(rt.server_time_from == "sunrpc:rpc_stats_latency (rtt)" for rt in rts)
    got = collections.defaultdict(lambda: [0, 0.0])
    for rt in rts:
        for o in rt.ops:
            assert o.replied <= o.calls
            if o.server_seconds is not None:
                got[o.op][0] += o.replied
                got[o.op][1] += o.server_seconds
    truth = reported_rtt()
    assert truth["READDIR"][0] > 0, dict(truth)
    # The listings' calls are some of the trace's (the process's calls outside the listings,
    # and those the lost events took, are not): never more calls or time than trace-cmd's,
    # and the READDIRs, most of what the readers sent, nearly all of it.
    for op, (n, s) in got.items():
        assert n <= truth[op][0] and s <= truth[op][1] + 0.001 * n, (op, n, s, truth[op])
    n, s = got["READDIR"]
    assert n >= 0.8 * truth["READDIR"][0] and s >= 0.8 * truth["READDIR"][1], (got, dict(truth))
    # The text names where the server time came from, and shows it per operation.
    from nfsreaddir.present import roundtrips

    text = roundtrips.text([a])
    assert "server time from sunrpc:rpc_stats_latency (rtt)" in text
    assert re.search(r"\d+\s+\S+\s+\d+\.\d{3}\s+\d+%\s+NFS4\.READDIR", text), text[:2000]
