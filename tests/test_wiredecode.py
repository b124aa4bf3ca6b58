"""The compiled capture decoder (trace/wiredecode, _wiredecode.c) against its oracle, tshark:
the same tables, facts and verdicts on every fixture capture, and on captures damaged by cut,
flipped and reordered segments never a verdict tshark's decoding would not give."""

import gzip
import json
import os
import random
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

import pcapedit
from conftest import FIXTURES, FULL, NFS_READDIR, needs_setup, run_cli
from nfsreaddir.model import analysis, wire, wire_passes
from nfsreaddir.rules import verdict
from nfsreaddir.trace import capture, rpcmatch, tcpholes, wiredecode

CAPTURES = sorted(
    os.path.join(d, f)
    for d in os.listdir(FIXTURES)
    for f in (
        os.listdir(os.path.join(FIXTURES, d)) if os.path.isdir(os.path.join(FIXTURES, d)) else ()
    )
    if f.endswith((".pcap", ".pcap.gz", ".pcapng", ".pcapng.gz"))
)


def _dropped(capture_path):
    """The packets tcpdump said it dropped while taking a fixture's capture (its facts)."""
    d, base = os.path.split(os.path.join(FIXTURES, capture_path))
    phase = base.split(".")[0]
    try:
        with open(os.path.join(d, "facts")) as f:
            facts = dict(ln.rstrip("\n").partition("=")[::2] for ln in f)
    except OSError:
        return 0
    return int(facts.get(f"{phase}.capture_dropped") or 0)


# Captures taken the way a busy machine takes them: tcpdump dropped packets, so their TCP
# streams have holes, which the compiled decoder reads through (tested below).
LOSSY = [c for c in CAPTURES if _dropped(c)]
# A capture where tshark is known to read less than the clients did (see the test of it below):
# the oracle's other captures are every fixture capture but this one.
REORDERED = os.path.join("fleet-5.10", "fleet.pcap.gz")
# A capture that joins its connections mid-stream: the decoder reads replies to calls made
# before it began, which tshark does not dissect (see the test of it below).
MIDSTREAM = os.path.join("fleet-5.10-midstream", "fleet.pcap.gz")
FACTS = (
    "frames",
    "port_frames",
    "messages",
    "truncated_frames",
    "snaplen",
    "retransmitted_calls",
    "versions",
    "ports",
    "warnings",
    "missing_replies",
    "split_frames",
    "unsplit_frames",
)

built = needs_setup(wiredecode.available(), "the compiled decoder nfsreaddir._wiredecode")


def test_there_are_fixture_captures():
    assert len(CAPTURES) >= 8, CAPTURES


def _judge(path):
    """(exit code, reason) of the wire analysis of a capture, or its error."""
    try:
        v = verdict.judge([wire.analyze(path)])
    except (analysis.AnalysisError, capture.CaptureError) as e:
        return ("error", str(e))
    return (v.code, v.reason)


def _judged_by(decoder, paths, monkeypatch):
    """_judge of each capture, decoded by `decoder` (NFSRT_DECODER); two at a time, as
    tshark's runs are processes and can use both cores."""
    monkeypatch.setenv("NFSRT_DECODER", decoder)
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(_judge, paths))


class _Cookies(wire_passes.Passes):
    """Passes that keep every reply's entry cookies, in the order they come (the tables do
    not have them)."""

    def __init__(self):
        super().__init__()
        self.cookies = []

    def reply(self, row):
        if row.status == 0:
            self.cookies.append(list(row.cookies))
        super().reply(row)


@built
@pytest.mark.parametrize(
    "name", [c for c in CAPTURES if c not in (REORDERED, MIDSTREAM) and c not in LOSSY]
)
def test_the_decoder_and_tshark_give_the_same_tables_and_verdicts(name, monkeypatch, capfd):
    path = os.path.join(FIXTURES, name)
    a = capture.read(path, decoder="tshark", passes=_Cookies)
    b = capture.read(path, decoder="compiled", passes=_Cookies)
    assert b.decoder == "compiled", capfd.readouterr().err  # no fallback on a fixture
    pd.testing.assert_frame_equal(a.readdirs, b.readdirs)
    assert a.passes.cookies == b.passes.cookies  # every reply's entry cookies, in order
    assert sum(map(len, b.passes.cookies)) == b.readdirs["entries"].sum()
    pd.testing.assert_frame_equal(a.attrs, b.attrs)
    assert len(b.readdirs) and len(b.attrs)
    assert {f: getattr(a, f) for f in FACTS} == {f: getattr(b, f) for f in FACTS}
    by_tshark = _judged_by("tshark", [path], monkeypatch)
    assert _judged_by("compiled", [path], monkeypatch) == by_tshark


# tshark names two main operations of a COMPOUND with GET_DIR_DELEGATION (SEQUENCE's and
# PUTFH's: nfs.main_opcode "53,22") and the first is taken; the decoder ranks it as the
# operation it is.
DIR_DELEGATION = ("7.3-v4.2-xfs-cap/idle.pcap.gz", "7.3-v4.2-xfs-cap/modified.pcap.gz")


@built
@pytest.mark.parametrize(
    "name",
    [c for c in CAPTURES if c not in (REORDERED, MIDSTREAM, *DIR_DELEGATION) and c not in LOSSY],
)
def test_the_decoders_call_log_is_the_one_tsharks_rows_make(name):
    """Every NFS and NFSACL call, as the compiled decoder logs them in C without a row, is
    what rpcops.CallLog makes of tshark's rows: the calls, their replies' times and entries,
    the XIDs each client used and each client's calls."""
    path = os.path.join(FIXTURES, name)
    a, b = (capture.read(path, decoder=d, tables=False).calls for d in ("tshark", "compiled"))
    assert a is not None and b is not None
    pd.testing.assert_frame_equal(a.table(), b.table())
    (seen, frames), (seen_b, frames_b) = a.xids(), b.xids()
    assert frames == frames_b and list(seen) == list(seen_b) and len(b) > len(frames)
    assert all((seen[c] == seen_b[c]).all() for c in seen)
    by, by_b = a.by_client(), b.by_client()
    assert list(by) == list(by_b)
    assert all((x == y).all() for c in by for x, y in zip(by[c], by_b[c], strict=True))
    assert a.retransmitted == b.retransmitted


def _read_through(path, capfd):
    """(tshark's Capture, the compiled decoder's) of a capture that lost packets: the
    decoder reads it through, never leaving it to tshark."""
    a = capture.read(path, decoder="tshark")
    capfd.readouterr()
    b = capture.read(path, decoder="compiled")
    err = capfd.readouterr().err
    assert (b.decoder, b.fallback) == ("compiled", None) and "with tshark" not in err, err
    return a, b


CALL = ["ts", "frame", "fh", "vers", "plus", "cookie", "verifier", "dircount", "maxcount"]
REPLY = ["reply_ts", "status", "entries", "last_cookie", "eof", "fileid"]


def _within(part, whole, calls=CALL):
    """Each READDIR of the table `part` is one of `whole`: the same call (its `calls`
    columns) and, where both have its reply, the same reply. The READDIRs whose reply `part`
    has and `whole` has not, as a mask over part's rows."""
    key = ["client", "xid"]
    p, w = part.set_index(key), whole.set_index(key)
    assert p.index.isin(w.index).all(), list(p.index.difference(w.index))
    w = w.loc[p.index]
    pd.testing.assert_frame_equal(p[calls], w[calls], check_index_type=False)
    both = (p["reply_ts"].notna() & w["reply_ts"].notna()).to_numpy()
    pd.testing.assert_frame_equal(p.loc[both, REPLY], w.loc[both, REPLY], check_index_type=False)
    return (p["reply_ts"].notna() & w["reply_ts"].isna()).to_numpy()


def _as_tshark_reads_it(a, b):
    """Each READDIR (call and reply) and attribute reply tshark decodes in a capture that lost
    packets, the compiled decoder decodes alike. It may read more: a record tshark's
    reassembly gives up on after a hole or an overlapping retransmission (the tests that can
    check those against the whole capture do). It reads less in one case: a reply a snaplen
    cut, of which tshark gives what is left (a status, the first entries, no eof) and the
    decoder nothing (a call without its reply): returns how many such replies."""
    missed = int(_within(a.readdirs, b.readdirs).sum())
    rows = [set(map(tuple, x.attrs.astype(str).to_numpy())) for x in (a, b)]
    assert missed or rows[0] <= rows[1], rows[0] - rows[1]
    return missed


@built
@pytest.mark.parametrize("name", LOSSY)
def test_a_capture_with_holes_is_read_through_and_its_loss_is_placed(name, capfd):
    """tcpdump dropped packets while taking these (its log says how many): the compiled
    decoder reads through the holes (it gives what tshark gives) and places each on its
    connection and in time as trace/tcpholes' walk of the file does (as many as tshark finds
    segments "not captured" before others, the capture's first aside); every listing of that
    connection that overlaps one carries the loss as damage, none else."""
    path = os.path.join(FIXTURES, name)
    a, cap = _read_through(path, capfd)
    assert _as_tshark_reads_it(a, cap) == 0
    holes = cap.holes.holes
    assert sorted(holes) == sorted(tcpholes.walk(path, {2049}).holes)
    flagged = subprocess.run(
        ["tshark", "-r", path, "-n", "-Y", "tcp.analysis.lost_segment"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.count("\n")
    assert flagged - 1 <= len(holes) <= flagged and holes, (len(holes), flagged)
    assert all(b > 0 and not cut and since <= until for _, since, until, cut, b, _ in holes)
    a = wire.analyze(path)
    assert a.info["decoder_fallback"] is None
    for lst in a.listings:
        # Only bytes lost on the way to the server, while its pass was under way, can hide a
        # call of it (model/wire._hiding_calls).
        near = any(
            c == lst.client and to_server and since <= lst.end and until >= lst.start
            for c, since, until, _, _, to_server in holes
        )
        assert near or not lst.damage, lst.label()
    damaged = [bool(lst.damage) for lst in a.listings]
    assert len(damaged) == 1 or not all(damaged), damaged


def _lose(packets, how):
    """The packets of a whole capture with some lost, as `how` says: every 7th NFS segment
    dropped (from the first, second or third on), the payload of every 5th reply segment over
    200 bytes cut to 120 bytes by a snaplen, or every 9th segment sent again overlapping the
    start of the next one of its direction."""
    if how.startswith("drop"):
        return pcapedit.drop_every(packets, 7, int(how[-1]))
    nfs = pcapedit.nfs_segments(packets)
    if how == "snaplen":
        big = [i for i in nfs if packets[i].ports()[0] == 2049 and len(packets[i].payload()) > 200]
        for i in big[::5]:
            packets = pcapedit.snap(packets, i, 120)
        return packets
    for i in reversed(nfs[::9]):
        if any(p.ports() == packets[i].ports() and p.payload() for p in packets[i + 1 :]):
            packets = pcapedit.overlap(packets, i, 10)
    return packets


@built
@pytest.mark.parametrize("how", ["drop0", "drop1", "drop2", "snaplen", "overlap"])
@pytest.mark.parametrize("name", ["6.1-v3-cap/modified.pcap.gz", "5.10-v4.1-cap/modified.pcap.gz"])
def test_the_decoder_reads_through_packets_lost_as_tshark_does(name, how, tmp_path, capfd):
    """Whole fixture captures with segments dropped, cut by a snaplen or sent again over the
    next one: the decoder reads them through, gives what tshark gives where tshark decodes and
    what tshark gives of the whole capture where it reads more (a reply after a snaplen cut or
    an overlapping retransmission, where tshark's reassembly gives up), counts the frames the
    snaplen cut as tshark does, and reports the holes tcpholes' walk of the file finds
    (snaplen cuts as such), with the bytes each lost."""
    whole = os.path.join(FIXTURES, name)
    head, packets = pcapedit.read(whole)
    path = str(tmp_path / f"{how}.pcap")
    pcapedit.write(path, head, _lose(packets, how))
    a, b = _read_through(path, capfd)
    missed = _as_tshark_reads_it(a, b)
    assert missed <= b.truncated_frames if how == "snaplen" else missed == 0
    # What it reads beyond tshark is what the whole capture says (frames move with drops).
    recorded = capture.read(whole, decoder="tshark").readdirs
    assert not _within(b.readdirs, recorded, [c for c in CALL if c != "frame"]).any()
    assert (b.truncated_frames, b.snaplen) == (a.truncated_frames, a.snaplen)
    holes = b.holes.holes
    assert sorted(holes) == sorted(tcpholes.walk(path, {2049}).holes)
    assert bool(holes) == (how != "overlap") and b.retransmitted_segments >= (how == "overlap")
    assert all(cut == (how == "snaplen") for _, _, _, cut, _, _ in holes)


def _cut_gzip(src, out, at):
    """The gzip'd capture src cut after `at` of its bytes: a copy stopped mid-way."""
    with open(src, "rb") as f:
        data = f.read()
    with open(out, "wb") as f:
        f.write(data[: int(len(data) * at)])


@built
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("decoder", ["compiled", "tshark"])
def test_a_cut_gzip_stream_is_a_cut_capture_never_a_traceback(
    decoder, fmt, tmp_path, monkeypatch, editcap
):
    """A .pcap.gz or .pcapng.gz whose gzip stream ends before its end (a copy stopped mid-way)
    is read up to the cut, as a plain capture cut short is, whichever decoder reads it: the cut
    is a warning, tcpholes' walk stops at it, and check answers (0, 1 or 125) without a
    traceback."""
    monkeypatch.setenv("NFSRT_DECODER", decoder)
    src = os.path.join(FIXTURES, "6.12-v4.2-ext4-cap-drops", "modified.pcap.gz")
    if fmt == "pcapng":
        ng = str(tmp_path / "whole.pcapng")
        subprocess.run([editcap, "-F", "pcapng", src, ng], check=True)
        with open(ng, "rb") as f, gzip.open(ng + ".gz", "wb") as g:
            g.write(f.read())
        src = ng + ".gz"
    for at in (0.3, 0.77):
        path = str(tmp_path / f"cut{at}.{fmt}.gz")
        _cut_gzip(src, path, at)
        cap = capture.read(path)
        assert cap.decoder == decoder and cap.messages, cap.fallback
        assert any("cut short" in w for w in cap.warnings), cap.warnings
        assert tcpholes.walk(path, {2049}).holes is not None
        p = subprocess.run(
            [*NFS_READDIR, "check", path], capture_output=True, text=True, timeout=600
        )
        assert p.returncode in (0, 1, 125) and "Traceback" not in p.stderr, p.stderr
        assert "internal error" not in p.stdout + p.stderr, p.stdout + p.stderr


@built
def test_a_capture_joined_mid_stream_is_decoded_where_a_record_mark_came_alone(capfd, monkeypatch):
    """A capture cut from a real one, its first frame a record mark alone (4 bytes, its message
    in a later segment): the decoder reads the mark with the next segment instead of taking
    that message's XID for a mark, and gives the tables and verdict tshark gives. It also reads
    the replies to calls made before the cut, which tshark does not dissect: six more RPC
    messages, and no row (a reply without its call is not followed)."""
    path = os.path.join(FIXTURES, MIDSTREAM)
    a = capture.read(path, decoder="tshark")
    b = capture.read(path, decoder="compiled")
    assert b.decoder == "compiled", capfd.readouterr().err
    pd.testing.assert_frame_equal(a.readdirs, b.readdirs)
    pd.testing.assert_frame_equal(a.attrs, b.attrs)
    assert len(b.readdirs) and len(b.attrs)
    assert (a.messages, b.messages) == (282, 288)
    same = [f for f in FACTS if f not in ("frames", "messages")]
    assert {f: getattr(a, f) for f in same} == {f: getattr(b, f) for f in same}
    by_tshark = _judged_by("tshark", [path], monkeypatch)
    assert _judged_by("compiled", [path], monkeypatch) == by_tshark


@built
def test_where_tshark_drops_a_reordered_call_the_decoder_reads_what_the_clients_sent():
    """fleet-5.10's capture, taken on the server's bridge, holds a READDIR call of 10.77.0.10
    (xid 0x5a944bfd, frame 3902) after the client's next segment: tshark 4.0 takes it for a
    retransmission and dissects nothing in it, unless told to reassemble out of order. The
    compiled decoder reads it: each client's READDIRs are then what its own mountstats counted
    (truth.json, written by the workload), and tshark's are the same less that one call."""
    path = os.path.join(FIXTURES, REORDERED)
    with open(os.path.join(FIXTURES, "fleet-5.10", "truth.json")) as f:
        truth = {c["client"]: c["readdir"] for c in json.load(f)["clients"]}
    by = {}
    for decoder in ("compiled", "tshark"):
        rows = capture.read(path, decoder=decoder).readdirs
        by[decoder] = rows
        counts = rows.groupby(rows["client"].str.rsplit(":", n=1).str[0]).size().to_dict()
        if decoder == "compiled":
            assert counts == truth
        else:
            assert counts == {**truth, "10.77.0.10": truth["10.77.0.10"] - 1}
    missing = set(by["compiled"]["xid"]) - set(by["tshark"]["xid"])
    assert missing == {0x5A944BFD}
    assert list(by["compiled"].loc[by["compiled"]["xid"] == 0x5A944BFD, "frame"]) == [3902]


def _mutations(packets, rng, n):
    """n damaged copies of a capture's packets, each with what was done: a segment of NFS
    payload cut short or dropped, a byte of it flipped, or two segments swapped."""
    nfs = [i for i, p in enumerate(packets) if p.payload()]
    out = []
    for k in range(n):
        ps = list(packets)
        i = rng.choice(nfs)
        p = ps[i]
        how = ("cut", "drop", "flip", "swap")[k % 4]
        if how == "cut":
            keep = p.payload_offset() + rng.randrange(len(p.payload()))
            ps[i] = pcapedit.Packet(p.sec, p.frac, p.data[:keep], p.orig_len)
        elif how == "drop":
            del ps[i]
        elif how == "flip":
            at = p.payload_offset() + rng.randrange(len(p.payload()))
            data = bytearray(p.data)
            data[at] ^= 1 << rng.randrange(8)
            ps[i] = pcapedit.Packet(p.sec, p.frac, bytes(data), p.orig_len)
        else:
            j = min(i + 1 + rng.randrange(3), len(ps) - 1)
            ps[i], ps[j] = ps[j], ps[i]
        out.append((f"{how} at packet {i + 1}", ps))
    return out


# Each damaged copy is decoded by tshark and by the decoder (22 s for the 64 at load 2): make test
# damages each capture (NFSv3 and NFSv4.1) in the first 8 of its ways (each kind of damage
# twice; the same copies make test-full begins with), make test-full in all.
DAMAGED_CAPTURES = [("6.1-v3-cap/modified.pcap.gz", 40), ("6.1-v4.1-cap/idle.pcap.gz", 24)]


@built
@pytest.mark.slow
@pytest.mark.parametrize(
    "name,n",
    [(name, 8) for name, _ in DAMAGED_CAPTURES]
    + [pytest.param(name, n, marks=FULL) for name, n in DAMAGED_CAPTURES],
)
def test_damaged_captures_never_get_a_verdict_tshark_would_not_give(
    name, n, tmp_path, capfd, monkeypatch
):
    head, packets = pcapedit.read(os.path.join(FIXTURES, name))
    cases = _mutations(packets, random.Random(34), n)
    paths = []
    for k, (_, ps) in enumerate(cases):
        paths.append(str(tmp_path / f"{k}.pcap"))
        pcapedit.write(paths[-1], head, ps)

    tsharks = _judged_by("tshark", paths, monkeypatch)
    capfd.readouterr()
    compiled = _judged_by("compiled", paths, monkeypatch)
    fell_back = capfd.readouterr().err.count("decoding this capture with tshark")
    same = sum(t == c for t, c in zip(tsharks, compiled))
    differ = [(what, t, c) for (what, _), t, c in zip(cases, tsharks, compiled) if t != c]
    print(
        f"{name}: {len(cases)} damaged captures: {same} the same verdict "
        f"({fell_back} of them decoded by tshark after the decoder stopped), {len(differ)} not"
    )
    assert not differ, differ


def _as_udp(packets):
    """The RPC messages of a TCP capture, each as one UDP datagram between the same
    endpoints, sent when its last segment was: NFS over UDP (mount -o udp) as the wire
    carries it. Ethernet and IPv4 headers are the segments' own, lengths and protocol
    rewritten (checksums stay as they were: tshark does not check them)."""
    out, streams = [], {}
    for p in packets:
        body, ip = p.payload(), pcapedit.ETH_LEN
        if not body:
            continue
        key = p.ports()
        buf = streams.get(key)
        if buf is None:  # joined mid-stream: begin at a segment that begins a record
            if not (body[0] & 0x80 and body[8:11] == b"\0\0\0" and body[11] <= 1):
                continue
            buf = streams[key] = bytearray()
        buf += body
        while len(buf) >= 4:
            mark = struct.unpack_from("!I", buf)[0]
            size = mark & 0x7FFFFFFF
            if len(buf) < 4 + size:
                break
            assert mark >> 31, "a record of several fragments"
            msg, buf[:] = bytes(buf[4 : 4 + size]), buf[4 + size :]
            iph = bytearray(p.data[ip : ip + 20])
            struct.pack_into("!H", iph, 2, 20 + 8 + len(msg))
            iph[9] = 17
            udp = struct.pack("!HHHH", *key, 8 + len(msg), 0)
            data = p.data[:ip] + bytes(iph) + udp + msg
            out.append(pcapedit.Packet(p.sec, p.frac, data, len(data)))
    return out


@built
def test_nfs_over_udp_gives_the_same_tables_as_tshark(tmp_path):
    head, packets = pcapedit.read(os.path.join(FIXTURES, "6.1-v3-cap/modified.pcap.gz"))
    path = str(tmp_path / "udp.pcap")
    pcapedit.write(path, head, _as_udp(packets))
    a = capture.read(path, decoder="tshark")
    b = capture.read(path, decoder="compiled")
    assert b.decoder == "compiled"
    assert len(a.readdirs) and a.readdirs["client"].str.startswith("127.0.0.1:").all()
    pd.testing.assert_frame_equal(a.readdirs, b.readdirs)
    pd.testing.assert_frame_equal(a.attrs, b.attrs)


@built
def test_retransmitted_and_reordered_segments_reach_the_text_and_json(tmp_path):
    """A capture with one segment sent twice and two segments of one direction swapped: the
    late one fills the hole the other left (no hole is reported), the decoder's counts (1 and
    1) in analyze's notes and its JSON trace block, and the READDIRs of the capture as it was
    recorded."""
    name = os.path.join(FIXTURES, "6.1-v4.1-cap/idle.pcap.gz")
    head, packets = pcapedit.read(name)
    nfs = [i for i, p in enumerate(packets) if p.payload()]
    # Two NFS segments one after the other in one direction, with nothing between them.
    i = next(
        a for a, b in zip(nfs, nfs[1:]) if b == a + 1 and packets[a].ports() == packets[b].ports()
    )
    ps = list(packets)
    ps[i], ps[i + 1] = ps[i + 1], ps[i]
    dup = next(k for k in nfs if k > i + 2)
    ps.insert(dup + 1, ps[dup])
    path = str(tmp_path / "damaged.pcap")
    pcapedit.write(path, head, ps)
    cap = capture.read(path, decoder="compiled")
    assert (cap.decoder, cap.retransmitted_segments, cap.reordered_segments) == ("compiled", 1, 1)
    assert cap.holes.holes == []
    # Every call and reply as recorded (tshark, not reassembling out of order, loses a reply
    # here); the swapped and copied frames move frame numbers and completion times only.
    moved = ["frame", "ts", "reply_ts"]
    recorded = capture.read(name, decoder="compiled").readdirs.drop(columns=moved)
    pd.testing.assert_frame_equal(cap.readdirs.drop(columns=moved), recorded)
    out = run_cli("analyze", path).stdout
    assert "TCP: 1 retransmitted segments (their data read once), 1 out of order" in out, out
    trace = json.loads(run_cli("analyze", "--json", path).stdout)[0]["trace"]
    assert trace["retransmitted_segments"] == 1 and trace["reordered_segments"] == 1
    assert trace["decoder_fallback"] is None


def _starts_record(p):
    """Whether a segment's payload begins an ONC RPC record: a last fragment's mark, an XID,
    a message type."""
    body = p.payload()
    return len(body) >= 12 and body[0] & 0x80 and body[8:11] == b"\0\0\0" and body[11] <= 1


def _whole_record(p):
    """Whether a segment's payload is one ONC RPC record, whole."""
    body = p.payload()
    return _starts_record(p) and struct.unpack_from("!I", body)[0] & 0x7FFFFFFF == len(body) - 4


# Two segments of one direction, one after the other, that a capture may swap: the two parts
# of one record (the late one in its middle), the first part of a record and the next one,
# two whole records (server replies: the READDIR table stays in call order).
LATE = {
    "middle": ("6.1-v4.1-cap/idle.pcap.gz", lambda a, b: not _starts_record(b)),
    "start": (
        "5.10-v4.1-cap/idle.pcap.gz",
        lambda a, b: _starts_record(a) and not _whole_record(a) and not _starts_record(b),
    ),
    "whole": (
        "5.10-v4.1-cap/modified.pcap.gz",
        lambda a, b: a.ports()[0] == 2049 and _whole_record(a) and _whole_record(b),
    ),
}


@built
@pytest.mark.parametrize("where", LATE)
def test_a_segment_that_comes_late_is_read_in_its_place(where, tmp_path, capfd):
    """Two segments swapped, the first late: the decoder has read on past the hole it left (at
    each message's own frame, never holding the stream back), and the late one, coming into
    it, is read in its place: into the record that kept its place for it (the middle of a
    record), before the bytes the hunt for a record mark passed over (the start of one), or
    alone (a whole record). Every READDIR as recorded, no hole, one segment out of order, and
    everything tshark reads (it loses the record where the late segment is part of one)."""
    name, pair = LATE[where]
    head, packets = pcapedit.read(os.path.join(FIXTURES, name))
    nfs = [i for i, p in enumerate(packets) if p.payload()]
    i = next(
        a
        for a, b in zip(nfs, nfs[1:])
        if b == a + 1 and packets[a].ports() == packets[b].ports() and pair(packets[a], packets[b])
    )
    ps = list(packets)
    ps[i], ps[i + 1] = ps[i + 1], ps[i]
    path = str(tmp_path / "swapped.pcap")
    pcapedit.write(path, head, ps)
    a, b = _read_through(path, capfd)
    assert (b.reordered_segments, b.holes.holes) == (1, [])
    assert _as_tshark_reads_it(a, b) == 0
    moved = ["frame", "ts", "reply_ts"]
    recorded = capture.read(os.path.join(FIXTURES, name), decoder="compiled").readdirs
    pd.testing.assert_frame_equal(b.readdirs.drop(columns=moved), recorded.drop(columns=moved))


def _listings(cap):
    return [
        (
            lst.client,
            lst.fh,
            lst.rpc_rows.tolist(),
            lst.rpcs["cookie"].tolist(),
            [vars(r) for r in lst.restarts],
            [vars(r) for r in lst.possible_restarts],
            list(lst.ambiguous_rows),
            lst.version_changes,
            lst.fileid,
            lst.ending,
            lst.refetched_entries,
            lst.missing_replies,
        )
        for lst in wire.listings(cap)
    ]


@built
@pytest.mark.parametrize("name", CAPTURES)
def test_without_its_tables_a_capture_gives_the_same_counts_and_listings(name):
    """analyze reads a capture without its READDIR and attribute tables (the passes keep what
    the listings need, as the capture is read): the counts the report gives are the tables'
    own, the listings are the same, and each listing's version changes are what the attribute
    table says: its client's replies for the directory after the listing's first READDIR call
    that asked a cookie other than 0 (the reader had left the first page) and before its last
    that showed a version other than the reply before."""
    path = os.path.join(FIXTURES, name)
    kept = capture.read(path, passes=wire_passes.Passes)
    lean = capture.read(path, passes=wire_passes.Passes, tables=False)
    assert lean.readdirs is None and lean.attrs is None
    rd, attrs = kept.readdirs, kept.attrs
    assert kept.readdir_calls == lean.readdir_calls == len(rd) > 0
    assert kept.missing_replies == lean.missing_replies == int(rd["reply_ts"].isna().sum())
    assert kept.attr_replies == lean.attr_replies == len(attrs)
    assert _listings(kept) == _listings(lean)
    for lst in wire.listings(lean):
        frames = lst.rpcs["frame"]
        mine = attrs[(attrs["client"] == lst.client) & (attrs["fh"] == lst.fh)]
        at, version = mine["frame"].tolist(), mine["version"].tolist()
        # Only a GETATTR's new version is a change the client acted on (wire_passes).
        asked = (mine["source"] == "GETATTR").tolist()
        moved = [at[k] for k in range(1, len(at)) if version[k] != version[k - 1] and asked[k]]
        past = frames[lst.rpcs["cookie"] != 0]
        since = past.min() if len(past) else frames.max()
        assert lst.version_changes == sum(since < f < frames.max() for f in moved)


class _Spied(wire_passes.Passes):
    """Passes that also keep in memory each listing they put on disk, as it was put."""

    def __init__(self):
        super().__init__()
        self.kept = []
        put = self.listings.put

        def keep(lst, follow):
            self.kept.append((follow, lst))
            put(lst, follow)

        self.listings.put = keep


def _same(lst):
    return (lst.summary(), lst.rpcs.a.tobytes(), lst.rpc_rows.tolist(), lst.restarts)


@built
def test_listings_are_read_back_from_disk_as_they_were_kept_in_time_order():
    """A capture's listings go to disk as their passes end (model/spool) and come back one at
    a time: each as it was put, in the order of their start, then client, then the order their
    directories' passes began in, read back as often as asked. fleet-5.10's 52 listings of many
    clients, and one client's passes over two directories that begin at the same time (a real
    capture's first READDIR, twice)."""
    cap = capture.read(os.path.join(FIXTURES, REORDERED), passes=_Spied, tables=False)
    out = wire.listings(cap)
    assert out.clients > 1 and len(out) == len(cap.passes.kept) > 50
    kept = sorted(cap.passes.kept, key=lambda x: (x[1].start, x[1].client, x[0]))
    assert [_same(lst) for lst in out] == [_same(lst) for _, lst in kept]
    assert [_same(lst) for lst in out] == [_same(out[i]) for i in range(len(out))]
    assert out[0] is not out[0]  # read back each time: known by number, not by id()
    first = capture.read(os.path.join(FIXTURES, REORDERED)).readdirs.iloc[0].to_dict()
    assert first["cookie"] == 0
    passes = wire_passes.Passes()
    for i, fh in enumerate(("b", "a")):  # the pass over "b" begins first: it comes first
        row = rpcmatch.Call("readdir", fh, first["vers"], i, first["ts"], first["client"], False)
        row.cookie, row.status, row.eof, row.frame = 0, 0, True, i
        passes.call(row, i)
        row.reply_ts = first["reply_ts"]
        passes.reply(row)
    passes.end()
    assert [(lst.fh, lst.start, lst.client) for lst in passes.listings] == [
        (fh, first["ts"], first["client"]) for fh in ("b", "a")
    ]


@built
def test_no_stage_holds_every_listing_of_a_capture(monkeypatch):
    """Peak memory flat in the capture's size: a capture's analysis keeps its listings on disk,
    and the verdict, the text and the JSON each go through them one at a time, keeping a few
    (those that speak for the others) and not all. Listings alive counted as each is read
    back and dropped, on fleet-5.10's 52 listings."""
    import io

    from nfsreaddir.present import jsonout, render

    a = wire.analyze(os.path.join(FIXTURES, REORDERED))
    alive = {"now": 0, "most": 0, "read": 0}
    setstate = wire_passes.WireListing.__setstate__

    def made(lst, state):
        setstate(lst, state)
        alive["now"] += 1
        alive["read"] += 1
        alive["most"] = max(alive["most"], alive["now"])

    def gone(lst):
        alive["now"] -= 1

    monkeypatch.setattr(wire_passes.WireListing, "__setstate__", made)
    monkeypatch.setattr(wire_passes.WireListing, "__del__", gone, raising=False)
    assert len(a.listings) > 50
    v = verdict.judge([a])
    render.print_analysis([a], out=io.StringIO())
    jsonout.dump([render.analysis_record(a, v)], io.StringIO())
    assert alive["read"] > 5 * len(a.listings) and alive["most"] <= 5, alive
