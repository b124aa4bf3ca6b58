"""The capture fixtures recorded with tcpdump losing packets (tests/fixtures/*/COMMAND says how):
their truth files parse and agree with each other. Nothing here runs the analyzer: what it says
of these runs is for the analyzer's own tests; this only checks that the ground truth beside
each run is whole."""

import gzip
import json
import os
import re

import pytest

from conftest import FIXTURES

# fixture: (reproducer, kernel release prefix, the captures' phases)
NEW = {
    "multi-5.10-cap": ("readdir-multi", "5.10.", ("multi",)),
    "multi-6.12-cap": ("readdir-multi", "6.12.", ("multi",)),
    "5.10-v3-cap": ("readdir-loopback", "5.10.", ("idle", "modified")),
    "7.3-v4.2-xfs-cap": ("readdir-loopback", "7.3.", ("idle", "modified")),
    "6.12-v4.2-ext4-cap-drops": ("readdir-loopback", "6.12.", ("idle", "modified")),
}
PRESENT = sorted(n for n in NEW if os.path.isdir(os.path.join(FIXTURES, n)))


def _facts(name):
    with open(os.path.join(FIXTURES, name, "facts")) as f:
        return dict(line.rstrip("\n").partition("=")[::2] for line in f if "=" in line)


def _tcpdump_counts(path):
    """tcpdump's own summary: captured, received by filter, dropped by kernel."""
    with open(path) as f:
        text = f.read()
    assert "listening on lo" in text, text
    out = {}
    for key, words in (
        ("captured", "packets captured"),
        ("received", "packets received by filter"),
        ("dropped", "packets dropped by kernel"),
    ):
        m = re.search(rf"^(\d+) {words}$", text, re.M)
        assert m, (path, words, text)
        out[key] = int(m.group(1))
    return out


@pytest.mark.parametrize("name", PRESENT)
def test_command_and_facts(name):
    reproducer, kernel, _ = NEW[name]
    d = os.path.join(FIXTURES, name)
    with open(os.path.join(d, "COMMAND")) as f:
        command = f.read()
    assert "reproducers/vm-run --kernel debian:" in command and f"-- {reproducer} " in command
    assert "--capture" in command or reproducer == "readdir-loopback"  # vm-run captures anyway
    facts = _facts(name)
    assert facts["run.name"] == reproducer and facts["run.kernel"].startswith(kernel)
    assert facts["run.capture"] == "on"
    # The kernel release is in COMMAND too, as the run reported it.
    assert facts["run.kernel"] in command


@pytest.mark.parametrize("name", PRESENT)
def test_tcpdump_logs_are_kept_and_match_the_facts(name):
    """Each capture has tcpdump's own log beside it, and the facts carry the same counts; the
    capture itself holds as many packets as tcpdump says it captured."""
    _, _, phases = NEW[name]
    facts = _facts(name)
    for phase in phases:
        d = os.path.join(FIXTURES, name)
        counts = _tcpdump_counts(os.path.join(d, f"{phase}.tcpdump.log"))
        for key, n in counts.items():
            assert int(facts[f"{phase}.capture_{key}"]) == n, (phase, key)
        with gzip.open(os.path.join(d, f"{phase}.pcap.gz"), "rb") as f:
            data = f.read()
        assert data[:4] == b"\xd4\xc3\xb2\xa1"  # little-endian microsecond pcap
        frames, at = 0, 24
        while at < len(data):
            caplen = int.from_bytes(data[at + 8 : at + 12], "little")
            at += 16 + caplen
            frames += 1
        assert at == len(data) and frames == counts["captured"], (phase, frames, counts)


@pytest.mark.parametrize("name", [n for n in PRESENT if NEW[n][0] == "readdir-multi"])
def test_multi_truth_parses(name):
    with open(os.path.join(FIXTURES, name, "truth.json")) as f:
        t = json.load(f)
    big = t["directories"]["big"]
    assert big["files_at_end"] == big["files_at_start"] + t["writer"]["files_added"]
    kinds = {}
    for r in t["readers"]:
        kinds.setdefault(r["kind"], []).append(r)
        if "listings" in r:
            for lst in r["listings"]:
                assert lst["eof"] and lst["entries"] > 0, (r["kind"], lst)
        if "argv" in r:
            assert r["exit"] == 0 and not r["timed_out"], r
    assert sorted(kinds) == ["find", "poller", "rewinder", "slow-ls", "small-ls"]
    assert len(kinds["poller"]) == 1 and len(kinds["poller"][0]["listings"]) >= 2
    (ls,) = kinds["slow-ls"]
    # ls -f prints . and .. and every name it was given: at least the files there at the start.
    assert big["files_at_start"] + 2 <= ls["names"] <= big["files_at_end"] + 2


@pytest.mark.parametrize("name", [n for n in PRESENT if NEW[n][0] == "readdir-loopback"])
def test_loopback_names_agree_with_the_facts(name):
    facts = _facts(name)
    d = os.path.join(FIXTURES, name)
    with open(os.path.join(d, "names-expected.txt")) as f:
        expected = f.read().split()
    assert len(expected) == int(facts["run.files"])
    for phase in NEW[name][2]:
        with open(os.path.join(d, f"names-{phase}.txt")) as f:
            names = f.read().split()
        assert len(names) == int(facts[f"{phase}.entries"]), phase
        assert facts[f"{phase}.status"] == "0", phase
        # Every file there before the listing was listed; new ones only while modified.
        assert set(expected) <= set(names), phase
        new = [n for n in names if n.startswith("new-")]
        assert bool(new) == (phase == "modified"), (phase, new[:3])
