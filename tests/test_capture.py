"""Packet captures: the same answers as the traces recorded beside them.

The *-cap fixtures are runs of readdir-loopback with --capture on: each listing was recorded
both as a trace.dat and as a tcpdump capture on the guest's loopback. Damaged captures are made
from them here with Wireshark's own tools (editcap), so every input is a real capture.
"""

import gzip
import json
import os
import signal
import subprocess
import time

import pandas as pd
import pytest

from conftest import FIXTURES, TOP, installed, run_cli

from nfsreaddir import analysis, capture, verdict, wire
from nfsreaddir.trace import open_trace

CAP_FIXTURES = sorted(d for d in os.listdir(FIXTURES) if d.endswith("-cap")
                      and os.path.exists(os.path.join(FIXTURES, d, "COMMAND")))
PHASES = ("idle", "modified")
SOURCE = "6.1-v4.1-cap"     # the capture the damaged ones are made from

# Issue 14's three kernels, each recorded by tests/fixtures/record with the same workload (the
# COMMAND beside each): what their modified listing is comes from the workload, never from the
# analyzer (test_the_workload_says_what_each_listing_is checks it on the wire with tshark's own
# fields and the client's own READDIR count): stock 5.10 goes back to cookie 0 after the
# directory changed (bad), 6.1 and 5.10 with kernel-patches/v5.10 continue at the reader's
# cookie (good). Each idle listing met no change, so it cannot decide.
KERNELS = {
    "5.10-v4.1-cap": ("5.10.0-", verdict.BAD),
    "6.1-v4.1-cap": ("6.1.0-", verdict.GOOD),
    "5.10-series-v4.1-cap": ("5.10.262-nfsrt", verdict.GOOD),
}
EXPECTED = {(name, "modified"): code for name, (_, code) in KERNELS.items()}
EXPECTED.update({(name, "idle"): verdict.UNDECIDED for name in KERNELS})


def _pcap(d, phase):
    for ext in (".pcap", ".pcap.gz", ".pcapng", ".pcapng.gz"):
        p = os.path.join(FIXTURES, d, phase + ext)
        if os.path.exists(p):
            return p
    pytest.fail(f"{d} has no {phase} capture")


def _main(a, phase):
    return next(lst for lst in a.listings if lst.phase == phase)


def _facts(name):
    with open(os.path.join(FIXTURES, name, "facts")) as f:
        return dict(line.rstrip("\n").partition("=")[::2] for line in f if "=" in line)


def _names(name, which):
    with open(os.path.join(FIXTURES, name, f"names-{which}.txt")) as f:
        return f.read().split()


def _wire_readdir_cookies(cap):
    """The cookie of every NFSv4 READDIR call in a capture, in order, first transmission only,
    straight from tshark's fields (nothing of capture.py or wire.py)."""
    out = subprocess.run(["tshark", "-r", cap, "-n", "-Y", "rpc.msgtyp == 0 && nfs.opcode == 26",
                          "-T", "fields", "-e", "tcp.srcport", "-e", "rpc.xid",
                          "-e", "nfs.cookie4"], capture_output=True, text=True,
                         check=True).stdout
    seen, cookies = set(), []
    for line in out.splitlines():
        port, xid, cookie = line.split("\t")
        if (port, xid) not in seen:
            seen.add((port, xid))
            cookies.append(int(cookie))
    return cookies


def test_every_field_is_one_this_tshark_knows():
    """tshark refuses an unknown -e field outright; name the missing one instead."""
    known = set()
    out = subprocess.run(["tshark", "-G", "fields"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) > 2 and parts[0] in ("F", "P"):     # fields and protocols
            known.add(parts[2])
    assert [f for _, f in capture.FIELDS if f not in known] == []


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_three_kernels_are_recorded_with_captures(name):
    """Stock 5.10, 6.1 and 5.10 with the series: each a fixture with its COMMAND, both phases
    captured (gzip'd, small) with nothing dropped, on the kernel its name says."""
    assert name in CAP_FIXTURES, f"{name} is missing: record it with tests/fixtures/record"
    facts = _facts(name)
    assert facts["run.kernel"].startswith(KERNELS[name][0]), facts["run.kernel"]
    assert facts["run.capture"] == "on"
    for phase in PHASES:
        cap = _pcap(name, phase)
        assert cap.endswith(".gz") and os.path.getsize(cap) < 4 << 20
        assert facts[f"{phase}.capture_dropped"] == "0"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_workload_says_what_each_listing_is(name):
    """The ground truth behind EXPECTED, from the run itself: each phase's one lister listed
    every file (and, modified, some of the writer's), the capture holds exactly the READDIRs
    the client counted (mountstats, in the facts), and every READDIR at cookie 0 after the
    first was the client going back to the start of the directory."""
    assert name in CAP_FIXTURES, f"{name} is missing: record it with tests/fixtures/record"
    facts = _facts(name)
    expected = set(_names(name, "expected"))
    for phase in PHASES:
        names = _names(name, phase)
        assert facts[f"{phase}.status"] == "0" and facts[f"{phase}.timed_out"] == "0"
        assert len(names) == len(set(names)) and expected <= set(names), phase
        cookies = _wire_readdir_cookies(_pcap(name, phase))
        assert len(cookies) == int(facts[f"{phase}.readdir"]), phase
        assert cookies[0] == 0, phase
        back_to_zero = cookies.count(0) - 1
        if EXPECTED[name, phase] == verdict.BAD:
            assert back_to_zero > 0, phase
        else:
            assert back_to_zero == 0, (phase, back_to_zero)
    # The writer's files: the modified listing ran while the directory changed.
    assert any(n.startswith("new-") for n in _names(name, "modified"))
    assert not any(n.startswith("new-") for n in _names(name, "idle"))


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("name", CAP_FIXTURES)
def test_capture_and_trace_give_the_same_answers(name, phase):
    cap = _pcap(name, phase)
    a_wire = wire.analyze(cap)
    a_trace = analysis.analyze(open_trace(os.path.join(FIXTURES, name, f"{phase}.dat")))
    w, t = _main(a_wire, phase), _main(a_trace, phase)
    # The trace counts a READDIR as the client sends it (kprobe or tracepoint); the capture
    # counts the call on the wire, first transmission only.
    assert len(w.rpcs) == len(t.rpcs), (len(w.rpcs), len(t.rpcs))
    zero_w = [c == 0 for c in w.rpcs["cookie"]]
    assert zero_w == [c == 0 for c in t.rpcs["cookie"]]
    if set(a_trace.evidence["rpc"]) <= {"nfsprobe:nfs4_proc_readdir", "nfs4:nfs4_readdir"}:
        # The kprobe and the series' nfs4_readdir record the READDIR's argument itself. 6.1's
        # nfs_readdir_cache_fill records a cookie of the client's own that is not the one on
        # the wire (they differ at every page), so there only the cookie-0 READDIRs compare.
        assert [int(c) for c in w.rpcs["cookie"]] == [int(c) for c in t.rpcs["cookie"]]
    assert len(w.restarts) == len(t.restarts)
    assert [r.refetched for r in w.restarts] == [r.refetched for r in t.restarts]
    assert w.ending == analysis.EOF and w.fileid == t.fileid
    vw, vt = verdict.judge([a_wire]), verdict.judge([a_trace])
    assert vw.code == vt.code, (vw.reason, vt.reason)
    if (name, phase) in EXPECTED:
        assert vt.code == EXPECTED[name, phase], vt.reason


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_analyze_of_capture_and_trace_agree(name, phase):
    """`nfs-readdir analyze --json` as a user runs it, once on the capture and once on the
    trace.dat of the same listing: the same READDIR count, restarts and verdict, and the verdict
    the workload says. What differs by design is named below."""
    cap = _pcap(name, phase)
    dat = os.path.join(FIXTURES, name, f"{phase}.dat")
    w = json.loads(run_cli("analyze", "--json", cap, check=0).stdout)[0]
    t = json.loads(run_cli("analyze", "--json", dat, check=0).stdout)[0]
    lw = next(x for x in w["listings"] if x["phase"] == phase)
    lt = next(x for x in t["listings"] if x["phase"] == phase)
    for k in ("readdirs", "restarts", "cookie_zero_readdirs", "refetched_readdirs", "ending",
              "dir_fileid", "entries"):
        assert lw[k] == lt[k], (k, lw[k], lt[k])
    assert w["verdict"]["code"] == t["verdict"]["code"] == EXPECTED[name, phase], (
        w["verdict"]["reason"], t["verdict"]["reason"])
    # ... and what the workload says: the client's own READDIR count, and every READDIR at
    # cookie 0 after the first a restart.
    assert lt["readdirs"] == int(_facts(name)[f"{phase}.readdir"])
    assert lt["restarts"] == _wire_readdir_cookies(cap).count(0) - 1
    # Different by design: the wire carries no process (the client's address and port stand
    # for it) and no invalidation, only its cause: the directory's change attribute moving in
    # the GETATTR replies the client fetched. The capture counts those changes, the trace the
    # client's invalidations of its readdir cache; several changes can come before the one
    # invalidation that drops the cache (5.10 with the series: 5 changes, 1 invalidation), so
    # the two numbers differ, but a modified listing met both and an idle one neither. What the
    # wire cannot see is unknown (null), never 0.
    assert lw["comm"].startswith("127.0.0.1:") and lt["comm"] == "paced-lister"
    assert lw["invalidations"] is None and lw["invalidations_followed_by_restart"] is None
    if phase == "modified":
        assert lw["version_changes"] > 0 and lt["invalidations"] > 0
    else:
        assert not lw["version_changes"] and lt["invalidations"] == 0


@pytest.mark.parametrize("name", CAP_FIXTURES)
def test_the_wire_shows_why(name):
    """A restart on the wire follows a change of the directory's change attribute that the
    client fetched with GETATTR; a modified listing met such changes."""
    a = wire.analyze(_pcap(name, "modified"))
    lst = _main(a, "modified")
    assert lst.version_changes and lst.version_changes > 0
    assert all(r.after_invalidation for r in lst.restarts)
    # Every entry after a restart was fetched before: re-fetched entries are counted.
    if lst.restarts:
        assert lst.refetched_entries > 0
    assert a.info["missing_replies"] == 0 and a.info["truncated_frames"] == 0


@pytest.mark.parametrize("name", CAP_FIXTURES)
def test_check_and_analyze_accept_captures(name):
    """check answers for a capture with the same exit status as for the trace beside it."""
    expected = verdict.judge([analysis.analyze(open_trace(
        os.path.join(FIXTURES, name, "modified.dat")))]).code
    cap = _pcap(name, "modified")
    p = run_cli("check", cap, check=expected)
    assert "client 127.0.0.1:" in p.stdout
    p = run_cli("analyze", cap, check=0)
    assert "listings by wire" in p.stdout and "verdict: " in p.stdout


def test_gzip_and_plain_captures_give_the_same_listings(tmp_path):
    src = _pcap(SOURCE, "modified")
    assert capture.sniff(src) == "gzip-pcap"
    plain = tmp_path / "modified.pcap"
    plain.write_bytes(gzip.decompress(open(src, "rb").read()))
    assert capture.sniff(str(plain)) == "pcap"
    a, b = wire.analyze(src), wire.analyze(str(plain))
    assert [len(x.rpcs) for x in a.listings] == [len(x.rpcs) for x in b.listings]
    assert [x.version_changes for x in a.listings] == [x.version_changes for x in b.listings]


def test_pcapng_gives_the_same_listings(tmp_path, editcap):
    src = _pcap(SOURCE, "modified")
    ng = tmp_path / "modified.pcapng"
    subprocess.run([editcap, "-F", "pcapng", src, str(ng)], check=True)
    assert capture.sniff(str(ng)) == "pcapng"
    a, b = wire.analyze(src), wire.analyze(str(ng))
    assert [len(x.rpcs) for x in a.listings] == [len(x.rpcs) for x in b.listings]


# --------------------------------------------------------------------------- bad captures
def test_snaplen_96_is_named(tmp_path, editcap):
    out = tmp_path / "short.pcap"
    subprocess.run([editcap, "-s", "96", _pcap(SOURCE, "modified"), str(out)],
                   check=True)
    p = run_cli("analyze", out)
    assert p.returncode == 128 and "snaplen" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("check", out, check=125)
    assert "snaplen" in p.stdout and "tcpdump -s 0" in p.stdout


def test_truncated_capture_is_damage_not_a_verdict(tmp_path):
    src = _pcap(SOURCE, "modified")
    data = gzip.decompress(open(src, "rb").read())
    out = tmp_path / "cut.pcap"
    out.write_bytes(data[: len(data) // 2 + 7])     # mid-packet
    p = run_cli("check", out)
    assert "Traceback" not in p.stdout + p.stderr
    a = wire.analyze(str(out))
    assert any("cut short" in d["what"] or "missing" in d["what"]
               for lst in a.listings for d in lst.damage), [lst.damage for lst in a.listings]
    # Cut before its end, the listing did not reach eof: cannot decide, never good.
    assert p.returncode == 125, p.stdout


def test_wrong_link_type_is_no_nfs(tmp_path, editcap):
    out = tmp_path / "usb.pcap"
    subprocess.run([editcap, "-T", "usb-linux", _pcap(SOURCE, "idle"), str(out)],
                   check=True)
    p = run_cli("analyze", out)
    assert p.returncode == 128 and "no ONC RPC" in p.stderr and "Traceback" not in p.stderr
    run_cli("check", out, check=125)


def test_capture_without_nfs(tmp_path):
    # Frames that are TCP but no RPC at all: the first 3 of a capture (handshake or acks).
    tshark = installed("tshark")
    out = tmp_path / "nothing.pcap"
    subprocess.run([tshark, "-r", _pcap(SOURCE, "idle"), "-Y", "!rpc", "-w", str(out)],
                   check=True, capture_output=True)
    p = run_cli("analyze", out)
    assert p.returncode == 128 and "no ONC RPC" in p.stderr and "Traceback" not in p.stderr


def test_not_a_capture_is_left_to_the_trace_readers(tmp_path):
    f = tmp_path / "x.pcap"
    f.write_bytes(b"\x00" * 64)
    assert not capture.is_capture(str(f))
    p = run_cli("analyze", f)
    assert p.returncode == 128 and "Traceback" not in p.stderr


# --------------------------------------------------------------------------- the reproducer
def test_capture_stops_with_the_reproducer(tmp_path):
    """lb_capture_start registers tcpdump with the undo stack: SIGINT of the reproducer's shell
    leaves no tcpdump behind (on the host's own loopback: no NFS needed)."""
    installed("tcpdump")
    script = f"""
        set -euo pipefail
        NAME=test RESULTS={tmp_path}
        . {TOP}/reproducers/lib/loopback.sh
        trap lb_cleanup EXIT; trap lb_interrupted INT TERM
        WORK=$(mktemp -d /run/nfsrt-test.XXXXXX); lb_on_exit "rm -rf '$WORK'"
        lb_capture_start {tmp_path}/x.pcap
        echo "$CAPTURER" >{tmp_path}/pid
        sleep 60 & wait $!
    """
    # A shell started with SIGINT ignored (any job a non-interactive shell put in the
    # background, and so a CI run started that way) cannot trap it; a user's terminal gives the
    # reproducer the default, as this does.
    p = subprocess.Popen(["bash", "-c", script], start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pidfile = tmp_path / "pid"
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.1)
    pid = int(pidfile.read_text())
    os.kill(p.pid, signal.SIGINT)
    assert p.wait(30) == 130
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}") or \
        open(f"/proc/{pid}/comm").read().strip() != "tcpdump"
    assert capture.sniff(str(tmp_path / "x.pcap")) == "pcap"
    assert "packets captured" in (tmp_path / "log").read_text()


def test_pcapng_interface_statistics_give_the_drop_count(tmp_path):
    """dumpcap writes pcapng with interface statistics (isb_ifdrop); editcap's conversion of a
    pcap has none, so it says nothing rather than 0."""
    out = tmp_path / "lo.pcapng"
    subprocess.run(["dumpcap", "-q", "-i", "lo", "-a", "duration:1", "-w", str(out)],
                   check=True, capture_output=True, timeout=60)
    assert capture.sniff(str(out)) == "pcapng"
    assert capture.pcapng_drops(str(out)) == 0
    gz = tmp_path / "lo.pcapng.gz"
    gz.write_bytes(gzip.compress(out.read_bytes()))
    assert capture.pcapng_drops(str(gz)) == 0


def test_two_passes_over_one_directory_cannot_be_separated():
    """Two readers of one directory on one client are one stream: a READDIR that continues from
    an older reply than the last marks the listing, and the verdict cannot decide. Made from a
    real capture's table: its READDIRs twice, the second pass shifted to interleave."""
    cap = capture.read(_pcap(SOURCE, "idle"))
    one = cap.readdirs
    assert len(one) >= 3
    gap = int(one["ts"].diff().dropna().min() // 2) or 1
    two = one.assign(ts=one["ts"] + gap, reply_ts=one["reply_ts"] + gap, xid=one["xid"] + 1)
    cap.readdirs = (pd.concat([one, two], ignore_index=True)
                    .sort_values("ts", kind="stable").reset_index(drop=True))
    out = wire.listings(cap)
    assert any(lst.ambiguous_rows for lst in out)
    for lst in out:
        lst.version_changes = 1
    v = verdict.judge([analysis.Analysis(out, {}, None, {"rpc": ["capture"]}, True, {})])
    assert v.code == verdict.UNDECIDED, v.reason
