"""Damage in traces is seen, never swallowed into a false verdict (issue 30, section 4).

Traces under test: tests/fixtures/5.10-v4.1/modified.dat (stock 5.10, recorded by the
reproducer; "bad": restarted 5 times at cookie 0) and copies made from it by stated
transformations: `trace-cmd convert` to v6 / v7 uncompressed, trixie's trace-cmd to v7 zlib,
`trace-cmd report [--ts-diff]`, then bytes cut off, bits flipped or fields overwritten at the
offsets the reader's own walk gives for the records named in each test.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import installed, report_text, sample_and_full
from nfsreaddir.model import tables
from nfsreaddir.model.analysis import AnalysisError, analyze
from nfsreaddir.model.damage import PID_MAX_LIMIT
from nfsreaddir.rules import verdict
from nfsreaddir.trace import TraceError, open_trace

HERE = Path(__file__).resolve().parent
BAD_DAT = HERE / "fixtures" / "5.10-v4.1" / "modified.dat"
SERIES_DAT = HERE / "fixtures" / "5.10-series-v4.1" / "modified.dat"
TRACE_CMD_TRIXIE = HERE / "tools" / "trace-cmd-trixie"


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """{"zstd", "none", "v6", "zlib"}: the bad fixture as those file versions/compressions."""
    tc = installed("trace-cmd")
    d = tmp_path_factory.mktemp("copies")
    out = {"zstd": BAD_DAT}
    for name, tool, args in (
        ("none", tc, ["--compression", "none"]),
        ("v6", tc, ["--file-version", "6"]),
        ("zlib", str(TRACE_CMD_TRIXIE), ["--compression", "zlib"]),
    ):
        out[name] = d / f"{name}.dat"
        subprocess.run(
            [tool, "convert", *args, "-i", str(BAD_DAT), "-o", str(out[name])],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return out


def verdict_of_bytes(data):
    """(code, reason) of `check` on a trace given as bytes (2: refused, with the message)."""
    fd = os.memfd_create("trace")
    try:
        os.write(fd, data)
        a = analyze(open_trace(f"/proc/self/fd/{fd}"))
        v = verdict.judge([a])
        return v.code, v.reason
    except (TraceError, AnalysisError) as e:
        return 2, str(e)
    finally:
        os.close(fd)


def _listings_damage(data):
    """The damage the listings of a trace (bytes) carry."""
    fd = os.memfd_create("trace")
    try:
        os.write(fd, data)
        return [
            d for lst in analyze(open_trace(f"/proc/self/fd/{fd}")).listings for d in lst.damage
        ]
    finally:
        os.close(fd)


def records(path, event):
    """(file offset of the record's data, cpu, ts) of each record of ``event`` in an
    uncompressed trace.dat, from the reader's walk."""
    t = open_trace(path)
    eid = t.file.formats.by_name[event]
    P = t.file.buf.page_size
    out = []
    for cpu, off, size in t.file.buf.cpus:
        first = 0
        for block in t.streams.blocks(cpu, off, size):
            for (pos, ts, _, ids), _ in t.walker.walk(block, None, cpu, [], first):
                for p, stamp in zip(pos[ids == eid].tolist(), ts[ids == eid].tolist()):
                    out.append((off + first * P + p, cpu, stamp))
            first += len(block) // P
    return t, out


def restart_records(path):
    """The cookie-0 READDIR kprobe records after the listing's first: its restarts."""
    t, recs = records(path, "nfsprobe:nfs4_proc_readdir")
    f = t.event_format("nfsprobe:nfs4_proc_readdir").fields["cookie"]
    data = path.read_bytes()
    zero = [
        r
        for r in recs
        if int.from_bytes(data[r[0] + f.offset : r[0] + f.offset + f.size], "little") == 0
    ]
    return t, zero[1:]


def test_v6_cut_short_is_analyzed_up_to_the_cut(copies):
    """Cut inside the second CPU's data, after the restarts: "bad" from what precedes the cut
    (before: refused whole, "the trace data is damaged"). Cut inside the first CPU's data,
    before any READDIR: never a verdict of good or bad."""
    data = copies["v6"].read_bytes()
    t = open_trace(copies["v6"])
    (_, off0, size0), (_, off1, size1) = t.file.buf.cpus
    code, reason = verdict_of_bytes(data[: off1 + size1 * 3 // 4])
    assert code == verdict.BAD, reason
    assert "restarted" in reason
    code, reason = verdict_of_bytes(data[: off0 + 100])
    assert code not in (verdict.GOOD, verdict.BAD), reason


@pytest.mark.parametrize("copy", ["none", "zstd", "zlib"])
def test_v7_cut_short_is_analyzed_up_to_the_cut(copies, copy):
    """A v7 file cut anywhere from its first CPU's data to its end loses the BUFFER option
    (trace-cmd writes it after the data), and was refused whole ("cannot read the trace
    metadata: options section: needs 2 bytes"). Now the CPU streams are found in the data
    section: "bad" where the restarts lie before the cut (past the data; inside the second
    CPU's uncompressed pages), undecided where the cut takes events of the listing (a
    compressed CPU stream here is one chunk: a cut in it loses all of it), never good."""
    data = copies[copy].read_bytes()
    t = open_trace(copies[copy])
    (_, off0, _), (_, off1, size1) = t.file.buf.cpus
    t.close()
    end1 = off1 + size1 + (4 if copy != "none" else 0)
    cuts = {
        off0 + 100: None,
        (off0 + off1) // 2: None,
        off1 + 2: verdict.UNDECIDED,
        off1 + size1 * 3 // 4: verdict.BAD if copy == "none" else verdict.UNDECIDED,
        end1: verdict.BAD,
        len(data) - 10: verdict.BAD,
    }
    for cut, want in cuts.items():
        code, reason = verdict_of_bytes(data[:cut])
        assert "metadata" not in reason, (cut, reason)
        assert code != verdict.GOOD, (cut, reason)
        if want is not None:
            assert code == want, (cut, reason)
        if want == verdict.BAD:
            assert "restarted" in reason, (cut, reason)


def test_unknown_event_id_is_damage(copies):
    """The event id of each restart's READDIR overwritten with an id the file has no format
    for: the reader reports the unknown event where it is, and the listing cannot decide
    (before: the restarts vanished with `damage: []`)."""
    path = copies["none"]
    t, restarts = restart_records(path)
    assert len(restarts) >= 4
    unused = max(t.file.formats.by_id) + 1
    data = bytearray(path.read_bytes())
    for pos, _, _ in restarts:
        data[pos : pos + 2] = unused.to_bytes(2, "little")
    code, reason = verdict_of_bytes(bytes(data))
    assert code == verdict.UNDECIDED, reason
    assert f"unknown id {unused}" in reason and "[UNKNOWN EVENT]" in reason


def test_time_running_backwards_is_damage(copies):
    """A clear high bit set in the time stamp of the page holding the first restart moves its
    events 2**36 ns (69 s) or more later; the next page starts earlier: time runs backwards on that
    CPU, and the listing it falls in carries the damage (the other restarts still make it bad)."""
    path = copies["none"]
    t, restarts = restart_records(path)
    P = t.file.buf.page_size
    page = restarts[0][0] // P * P
    data = bytearray(path.read_bytes())
    stamp = int.from_bytes(data[page : page + 8], "little")
    bit = next(b for b in range(36, 40) if not stamp >> b & 1)  # set: later, not earlier
    data[page + bit // 8] ^= 1 << (bit % 8)
    code, reason = verdict_of_bytes(bytes(data))
    assert code != verdict.GOOD, reason
    hit = [d["what"] for d in _listings_damage(bytes(data))]
    assert any("time runs backwards" in w for w in hit), hit


def test_impossible_pid_is_damage(copies):
    """common_pid of a restart's READDIR set beyond the kernel's PID_MAX_LIMIT."""
    path = copies["none"]
    t, restarts = restart_records(path)
    pf = t.event_format("nfsprobe:nfs4_proc_readdir").fields["common_pid"]
    data = bytearray(path.read_bytes())
    pos = restarts[0][0] + pf.offset
    data[pos : pos + 4] = (PID_MAX_LIMIT + 1).to_bytes(4, "little")
    code, reason = verdict_of_bytes(bytes(data))
    assert code != verdict.GOOD, reason
    assert any(
        "beyond the kernel's PID_MAX_LIMIT" in d["what"] for d in _listings_damage(bytes(data))
    )


def test_zeroed_page_is_damage(tmp_path):
    """One 4 KiB data page of a good trace zeroed (as a disk or a copy loses one): a page with
    no commit is damage the reader names, and a listing whose events it could hold cannot
    decide (before: its events silently gone, the answer good, damaged_events 0). The compiled
    walk and the numpy one say the same of it."""
    from nfsreaddir.trace import numpywalk

    path = tmp_path / "none.dat"
    subprocess.run(
        [installed("trace-cmd"), "convert", "--compression", "none", "-i", str(SERIES_DAT)]
        + ["-o", str(path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert verdict_of_bytes(path.read_bytes())[0] == verdict.GOOD
    t, recs = records(path, "nfs4:nfs4_readdir")
    P = t.file.buf.page_size
    at = recs[len(recs) // 2][0] // P * P  # a page in the middle of the listing
    data = bytearray(path.read_bytes())
    data[at : at + P] = bytes(P)
    code, reason = verdict_of_bytes(bytes(data))
    assert code == verdict.UNDECIDED, reason
    assert _listings_damage(bytes(data))
    cpu, off, size = next(c for c in t.file.buf.cpus if c[1] <= at < c[1] + c[2])
    block = np.frombuffer(bytes(data[off : off + size]), np.uint8)
    said = [d for _, d in t.walker.walk(block, None, cpu, [])][-1]
    assert said == numpywalk.walk(block, t.layout, None, cpu, [])[1]
    assert f"page {(at - off) // P} of its data is empty" in said


def test_report_ts_diff_is_read(tmp_path):
    """`trace-cmd report --ts-diff` prints "(+delta)" before each event's name: the same
    verdict as the trace.dat (before: every line skipped, "no READDIR in this trace")."""
    txt = tmp_path / "ts-diff.txt"
    with open(txt, "w") as f:
        subprocess.run(
            [installed("trace-cmd"), "report", "--ts-diff", str(BAD_DAT)],
            stdout=f,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=300,
        )
    assert "(+" in txt.read_text()[:100000]
    code, reason = verdict_of_bytes(txt.read_bytes())
    want = verdict_of_bytes(BAD_DAT.read_bytes())
    assert (code, reason.split(" (evidence")[0]) == (want[0], want[1].split(" (evidence")[0])


@pytest.fixture(scope="module")
def bad_report(tmp_path_factory):
    """The lines of `trace-cmd report` of the bad fixture (stock 5.10: READDIR kprobe,
    rpc_request, nfs4:nfs4_readdir per call)."""
    out = tmp_path_factory.mktemp("report") / "bad.txt"
    return report_text(installed("trace-cmd"), BAD_DAT, out).read_text().splitlines(True)


def test_deleted_readdir_line_is_damage(bad_report):
    """The READDIR kprobe line of the last restart (cookie=0) deleted, its nfs4:nfs4_readdir
    line kept: the task's calls and their ends no longer alternate, and the listing carries
    that damage (before: no damage, the restart silently gone)."""
    i = [
        k
        for k, line in enumerate(bad_report)
        if "nfs4_proc_readdir:" in line and " cookie=0 " in line
    ][-1]
    edited = "".join(bad_report[:i] + bad_report[i + 1 :]).encode()
    code, reason = verdict_of_bytes(edited)
    assert code != verdict.GOOD, reason
    assert any(
        "no end logged between" in d["what"] or "of one successful READDIR" in d["what"]
        for d in _listings_damage(edited)
    )


def test_deleted_end_line_is_damage(bad_report):
    """The nfs4:nfs4_readdir line after the last restart's kprobe deleted: two READDIR calls
    of one task with no end between is damage (before: none)."""
    i = [
        k
        for k, line in enumerate(bad_report)
        if "nfs4_proc_readdir:" in line and " cookie=0 " in line
    ][-1]
    j = next(k for k in range(i + 1, len(bad_report)) if " nfs4_readdir:" in bad_report[k])
    edited = "".join(bad_report[:j] + bad_report[j + 1 :]).encode()
    assert any("no end logged between" in d["what"] for d in _listings_damage(edited))


def test_position_edited_to_zero_is_damage(tmp_path):
    """The patched series' trace (good): a getdents' `pos=` edited to 0 makes the reader's
    position go back with no seek, which only a seek can do: the listing is damaged, not
    judged from the edited position (before: judged, "good", the damage unseen)."""
    lines = (
        report_text(installed("trace-cmd"), SERIES_DAT, tmp_path / "series.txt")
        .read_text()
        .splitlines(True)
    )
    i = next(
        k for k, line in enumerate(lines) if "nfs_readdir_enter:" in line and " pos=0 " not in line
    )
    edited = "".join(
        lines[:i] + [re.sub(r" pos=\d+", " pos=0", lines[i], count=1)] + lines[i + 1 :]
    ).encode()
    code, reason = verdict_of_bytes(edited)
    assert code == verdict.UNDECIDED, reason
    assert any("with no seek between" in d["what"] for d in _listings_damage(edited))


# ---------------------------------------------------------------- the sweep

_DATA = None
_BASE = None


def _fingerprint(path):
    """Everything the verdict is computed from: the events the tables read, and what the
    reader says of damage and loss. Equal fingerprints give equal verdicts, so a flip that
    leaves it unchanged needs no analysis (10x cheaper)."""
    t = open_trace(path)
    cols = t.read_columns(
        {ev: sorted(c) for ev, c in tables.wanted(t).items()}, on_damage="partial"
    )
    t.check_records()
    parts = [
        repr(
            {
                k: t.info.get(k)
                for k in (
                    "partial",
                    "partial_from",
                    "damage",
                    "damaged_events",
                    "lost_events",
                    "lost_total",
                )
            }
        )
    ]
    for ev in sorted(cols):
        for c in sorted(cols[ev]):
            v = cols[ev][c]
            if hasattr(v, "codes"):
                parts.append(repr([v.values[i] for i in np.asarray(v.codes).tolist()]))
            else:
                parts.append(np.asarray(v).tobytes())
    return parts


def _flipped(bit):
    data = bytearray(_DATA)
    data[bit // 8] ^= 1 << (bit % 8)
    fd = os.memfd_create("trace")
    try:
        os.write(fd, data)
        try:
            same = _fingerprint(f"/proc/self/fd/{fd}") == _BASE[2]
        except (TraceError, AnalysisError):
            same = False
    finally:
        os.close(fd)
    return _BASE[:2] if same else verdict_of_bytes(bytes(data))


def _sweep(path, stride, pool_size=2):
    """Flip every ``stride``th bit of the CPUs' data of ``path`` (the ring-buffer pages as
    stored, compressed or not, their unused ends left out; not the file's headers), one flip
    per copy: {outcome: count}."""
    global _DATA, _BASE
    t = open_trace(path)
    _DATA = Path(path).read_bytes()
    if t.file.buf.compressed:
        spans = [(off, off + size + 4) for _, off, size in t.file.buf.cpus if size]
    else:
        # An uncompressed page is its header (time stamp, then the commit: the bytes written,
        # with flags in the high bits) and that many bytes of events; the rest of the page is
        # unused and holds no data to damage.
        P = t.file.buf.page_size
        spans = [
            (p, p + 16 + (int.from_bytes(_DATA[p + 8 : p + 16], "little") & 0xFFFFF))
            for _, off, size in t.file.buf.cpus
            for p in range(off, off + size, P)
        ]
    _BASE = verdict_of_bytes(_DATA) + (_fingerprint(path),)
    assert _BASE[0] == verdict.BAD
    bits = [b for a, z in spans for b in range(a * 8, z * 8, stride)]
    with multiprocessing.get_context("fork").Pool(pool_size) as pool:
        results = pool.map(_flipped, bits, chunksize=16)
    counts = {"caught as damage": 0, "unchanged": 0, "changed but still not good": 0, "GOOD": 0}
    for code, reason in results:
        if (code, reason) == _BASE[:2]:
            counts["unchanged"] += 1
        elif code == verdict.GOOD:
            counts["GOOD"] += 1
        elif code == 2 or "damage" in reason or "lost" in reason:
            counts["caught as damage"] += 1
        else:
            counts["changed but still not good"] += 1
    return len(bits), counts


# Every 97th bit: 330 s for the zstd copy alone in a fresh make test beside the guests (2026-11-28);
# make test flips every 997th (a tenth of the flips, every copy), make test-full every 97th.
@pytest.mark.slow
@pytest.mark.parametrize("stride", sample_and_full(997, 97, ids=("every-997th", "every-97th")))
@pytest.mark.parametrize("copy", ["zstd", "zlib", "none"])
def test_no_flipped_bit_turns_bad_into_good(copies, copy, stride):
    start = time.monotonic()
    n, counts = _sweep(copies[copy], stride)
    print(
        f"\n{copy}: {n} flips (every {stride}th bit) in {time.monotonic() - start:.0f} s: {counts}"
    )
    assert counts["GOOD"] == 0, counts


_LINES = None


def _edited(edit):
    """The verdict of the report text with one edit: (line, None) deletes the line, (line,
    (start, end, text)) replaces those characters of it."""
    i, change = edit
    lines = list(_LINES)
    if change is None:
        del lines[i]
    else:
        a, z, text = change
        lines[i] = lines[i][:a] + text + lines[i][z:]
    return verdict_of_bytes("".join(lines).encode())


def _edits_near_restarts(lines, around=3):
    """Each line within ``around`` lines of a restart (a cookie=0 READDIR kprobe after the
    listing's first): deleted, and each number in it changed (to 0; a 0 to 1), one edit per
    copy."""
    restarts = [
        k for k, line in enumerate(lines) if "nfs4_proc_readdir:" in line and " cookie=0 " in line
    ][1:]
    near = sorted(
        {k for r in restarts for k in range(r - around, r + around + 1) if 0 <= k < len(lines)}
    )
    edits = []
    for k in near:
        edits.append((k, None))
        for m in re.finditer(r"\d+", lines[k]):
            edits.append((k, (m.start(), m.end(), "1" if int(m.group()) == 0 else "0")))
    return edits


# The lines next to each restart (and the restart's own) in make test, the three on each side
# in make test-full (98 s in a fresh make test, 2026-11-28).
@pytest.mark.slow
@pytest.mark.parametrize("around", sample_and_full(1, 3, ids=("1-line-around", "3-lines-around")))
def test_no_edited_line_turns_bad_into_good(bad_report, around):
    """The Done-when's second half: edits of `trace-cmd report` text near the restarts of
    the bad fixture; none may give "good"."""
    global _LINES
    start = time.monotonic()
    _LINES = bad_report
    base = verdict_of_bytes("".join(bad_report).encode())
    assert base[0] == verdict.BAD
    edits = _edits_near_restarts(bad_report, around)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(_edited, edits, chunksize=8)
    counts = {"caught as damage": 0, "unchanged": 0, "changed but still not good": 0, "GOOD": 0}
    goods = []
    for edit, (code, reason) in zip(edits, results):
        if (code, reason) == base:
            counts["unchanged"] += 1
        elif code == verdict.GOOD:
            counts["GOOD"] += 1
            goods.append((edit, bad_report[edit[0]]))
        elif code == 2 or "damage" in reason or "lost" in reason:
            counts["caught as damage"] += 1
        else:
            counts["changed but still not good"] += 1
    print(
        f"\nreport text: {len(edits)} edits ({around} line(s) around each restart) in "
        f"{time.monotonic() - start:.0f} s: {counts}"
    )
    assert not goods, goods[:5]
