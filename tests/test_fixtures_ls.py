"""The issue-46 fixtures (reproducers/readdir-ls: `ls -l` of an idle directory, a trace and a
capture of one run): their TRUTH files parse, agree with the run's facts and names, and the
operation counts in them are what tshark counts in the captures (reproducers/wire-ops)."""

import gzip
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, FULL, TOP, fixture_dirs, key_values

LS_FIXTURES = fixture_dirs("readdir-ls")
WIRE_OPS = os.path.join(TOP, "reproducers", "wire-ops")


def one_capture_of_each_kind(names):
    """The smallest capture (gzip'd bytes) of each kind of wire, the set of calls its TRUTH
    counts: tshark's PDML of a capture takes 5-40 s, so make test recounts one of each (the
    two kernels send the same kinds of call) and make test-full every one."""
    chosen = {}
    for name in sorted(names, key=lambda n: os.path.getsize(capture(n))):
        truth = key_values(os.path.join(FIXTURES, name, "TRUTH"))
        chosen.setdefault(frozenset(k for k in truth if k.startswith("wire.call.")), name)
    return set(chosen.values())


def capture(name):
    return os.path.join(FIXTURES, name, "idle.pcap.gz")


RECOUNTED = one_capture_of_each_kind(LS_FIXTURES)


def test_there_are_ls_fixtures():
    assert LS_FIXTURES


@pytest.mark.parametrize("name", LS_FIXTURES)
def test_the_name_says_the_run(name):
    """ls-l-SERIES-vVERS[-OPTION]: the run's kernel series, NFS version and mount option
    (facts), and the option is on the mount itself (/proc/mounts), not only asked for."""
    facts = key_values(os.path.join(FIXTURES, name, "facts"))
    m = re.fullmatch(r"ls-l-(\d+\.\d+)-v(\d(?:\.\d)?)(?:-(\w+))?", name)
    assert m, name
    series, vers, option = m.groups()
    assert facts["run.kernel"].startswith(series + ".")
    assert facts["run.nfs"] == vers and facts["run.reader_mount_opts"] == (option or "")
    mount = facts["idle.mount"].split(",")
    assert f"vers={vers}" in mount and (option is None or option in mount), mount


@pytest.mark.parametrize("name", LS_FIXTURES)
def test_truth_agrees_with_the_run(name):
    d = os.path.join(FIXTURES, name)
    truth, facts = key_values(os.path.join(d, "TRUTH")), key_values(os.path.join(d, "facts"))
    with open(os.path.join(d, "names-idle.txt")) as f:
        names = f.read().split()
    assert int(truth["names"]) == int(facts["idle.entries"]) == len(names)
    assert float(truth["ls_seconds"]) == float(facts["idle.seconds"]) > 0
    assert truth["capture_dropped"] == facts["idle.capture_dropped"] == "0"
    for k, v in facts.items():
        if k.startswith("idle.mountstats_"):
            assert truth["mountstats." + k[len("idle.mountstats_") :]] == v
    assert any(k.startswith("wire.call.") for k in truth)
    # The capture is a whole gzip'd pcap.
    with gzip.open(capture(name), "rb") as f:
        assert f.read(4) in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1")


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed")
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in RECOUNTED else FULL) for n in LS_FIXTURES]
)
def test_wire_counts_are_tsharks(name):
    truth = key_values(os.path.join(FIXTURES, name, "TRUTH"))
    out = subprocess.run(
        [sys.executable, WIRE_OPS, capture(name)],
        check=True,
        text=True,
        stdout=subprocess.PIPE,
    ).stdout
    counted = dict(ln.split("=", 1) for ln in out.split())
    assert {k[len("wire.") :]: v for k, v in truth.items() if k.startswith("wire.")} == counted
