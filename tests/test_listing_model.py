"""The listing model itself, fed event sequences by hand: which READDIRs of a reader's pass went
back (reader.Pass), and how a capture's READDIRs are cut into passes (wire_passes.Passes). Each
row of the tables is one sequence a kernel or a capture makes, with what the model must make of
it; the routes tests (test_one_answer, test_reporttext, test_metrics) check that every input
feeds the model the same sequence.

The sequences, for reader.Pass (READDIR rows are numbered from 0 in the order asked):
    rC     a READDIR asking for cookie C (r? : its cookie is not known)
    hC     the same, where a rewind by the reader would not show in the input
    gP     a getdents entering the file system at position P (g? : not known)
    b      the reader went back to the start (a seek to 0)
    e      a getdents returned entries
    L      what came just before the next READDIR was lost
    x      the next READDIR continued another pass over the same directory
"""

import numpy as np
import pytest

from nfsreaddir.model import damage, reader, wire, wire_passes
from nfsreaddir.model.columns import Columns
from nfsreaddir.trace.rpcmatch import Call

EOF_POS = 9223372036854775807  # ext4's end-of-directory position, as 5.10 reports it

# (name, sequence, below_restarts, (restarts, ambiguous, refills))
PASSES = [
    ("one pass, no return", "r0 r100 r200", False, ([], [], [])),
    ("a lone first READDIR", "r0", False, ([], [], [])),
    ("cookie unknown", "r0 r? r100", False, ([], [], [])),
    (
        "position unknown: back to 0, then a walk from the start",
        "r0 r100 r200 r0 r100 r200",
        False,
        ([3], [], []),
    ),
    (
        "forged cookie 0: the next READDIR carries on above everything asked",
        "r0 r100 r200 r0 r300",
        False,
        ([], [3], []),
    ),
    ("cookie 0 that nothing follows (a cut last record)", "r0 r100 r0", False, ([], [2], [])),
    (
        "two restarts, each walked back",
        "r0 r100 r200 r0 r100 r200 r300 r0 r100",
        False,
        ([3, 7], [], []),
    ),
    (
        "a restart, then a forged cookie 0",
        "r0 r100 r200 r0 r100 r200 r300 r0 r400",
        False,
        ([3], [7], []),
    ),
    (
        "cookies that did not grow: a return cannot be contradicted by value",
        "r0 r500 r100 r0 r900",
        False,
        ([3], [], []),
    ),
    ("two cookie-0 READDIRs at the start, nothing after", "r0 r0", False, ([], [1], [])),
    ("cookie 0 again inside the first page, then on", "r0 r0 r100", False, ([], [], [1])),
    (
        "refill inside the first page (position known)",
        "g0 r0 g50 r0 r100",
        False,
        ([], [], [1]),
    ),
    (
        "restart with the reader past the first page",
        "g0 r0 g50 r100 g150 r0 r100 r200",
        False,
        ([2], [], []),
    ),
    (
        "refill settled by the next getdents at the position",
        "g0 r0 g50 r0 g60",
        False,
        ([], [], [1]),
    ),
    (
        "cookie 0 with the reader's position, nothing follows",
        "g0 r0 g500 r100 r0",
        False,
        ([], [2], []),
    ),
    ("refill, then a restart", "g0 r0 g50 r0 r100 g500 r0 r100", False, ([3], [], [1])),
    ("a rewind (getdents at 0) before cookie 0", "g0 r0 g50 r100 g0 r0 r100", False, ([], [], [])),
    ("a seek to 0 before cookie 0", "r0 r100 r200 b r0 r100", False, ([], [], [])),
    (
        "a poller re-reading from 0 after the end of the directory",
        f"g0 r0 r100 g{EOF_POS} g0 r0 r100",
        False,
        ([], [], []),
    ),
    ("loss before a cookie 0, then a walk back", "r0 r100 r200 L r0 r100", False, ([], [3], [])),
    ("loss before a forged cookie 0", "r0 r100 L r0 r300", False, ([], [2], [])),
    ("a rewind the input cannot show", "r0 r100 r200 h0 r100", False, ([], [3], [])),
    (
        "interleaved passes: no restart is sure",
        "r0 r100 r200 x r150 r0 r100",
        False,
        ([], [3, 4], []),
    ),
    (
        "pre-5.18 search: pages wholly below the reader's position",
        "g0 r0 g500 r100 r400 r600",
        True,
        ([1], [], []),
    ),
    (
        "pre-5.18 search on a kernel not named",
        "g0 r0 g500 r100 r400 r600",
        None,
        ([], [1], []),
    ),
    ("5.18+: no search below the position", "g0 r0 g500 r100 r400 r600", False, ([], [], [])),
    (
        "the page that holds the position alone is filled",
        "g0 r0 g500 r450 r600",
        True,
        ([], [], []),
    ),
    (
        "positions that went back: below cannot be sure",
        "g0 r0 g500 r100 g300 r100 r200",
        True,
        ([], [2], []),
    ),
    ("entries read, then cookie 0, nothing after", "e r0", False, ([], [0], [])),
    ("entries read, then cookie 0 and on", "e r0 r100", False, ([], [], [0])),
    (
        "a restart's walk back that goes past the old chain",
        "r0 r100 r200 r0 r150 r250",
        False,
        ([3], [], []),
    ),
    (
        "an unknown position mid-listing, then cookie 0 and a walk back",
        "g0 r0 g50 r100 g? r0 r100",
        False,
        ([2], [], []),
    ),
]


def _feed(seq, below):
    p = reader.Pass(below)
    row = 0
    for tok in seq.split():
        kind, arg = tok[0], tok[1:]
        value = None if arg == "?" else int(arg) if arg else None
        if kind in "rh":
            p.asked_for(row, value, visible=kind == "r")
            row += 1
        elif kind == "g":
            p.entered(value)
        elif kind == "b":
            p.went_back()
        elif kind == "e":
            p.read_entries()
        elif kind == "L":
            p.lost()
        elif kind == "x":
            p.interleaved(row)
        else:
            raise ValueError(tok)
    p.settle()
    return sorted(p.restart_rows), sorted(p.ambiguous_rows), sorted(p.refills)


@pytest.mark.parametrize(
    ("seq", "below", "want"), [c[1:] for c in PASSES], ids=[c[0] for c in PASSES]
)
def test_a_pass_settles_each_return(seq, below, want):
    assert _feed(seq, below) == want


# A capture: (name, sequence, [(ending, restarts, ambiguous rows) per listing, in order]).
#    cC     a READDIR call at cookie C
#    R...   its reply with these entry cookies (R100,200); Re... with eof; M: no reply at all
#    AV     a GETATTR reply giving the directory version V; PV the same in post-op attributes
WIRE = [
    ("one pass to the end", "c0 R100,200 c200 Re300", [("eof", 0, [])]),
    (
        "cookie 0 after eof, the directory unchanged: a new pass",
        "c0 R100,200 c200 Re300 c0 R100,200 c200 Re300",
        [("eof", 0, []), ("eof", 0, [])],
    ),
    (
        "cookie 0 before eof: a restart",
        "A1 c0 R100,200 c200 R300,400 A2 c0 R100,200 c200 R300,400 c400 Re500",
        [("eof", 1, [])],
    ),
    (
        "cookie 0 after eof, the directory changed: a restart or a new pass",
        "A1 c0 R100,200 c200 A2 Re300 c0 R100,200 c200 Re300",
        [("eof", 0, [2])],
    ),
    (
        "a missing reply before cookie 0: a restart or a new pass",
        "A1 c0 R100,200 c200 M c0 R100,200 c200 Re300",
        [("eof", 0, [2])],
    ),
    (
        "a missing reply the chain goes on from: nothing in doubt",
        "c0 R100,200 c200 M c300 Re400",
        [("eof", 0, [])],
    ),
]


def _wire(seq):
    passes = wire_passes.Passes()
    frame, i, last = 0, 0, None
    pending = []
    for tok in seq.split():
        frame += 1
        kind, arg = tok[0], tok[1:]
        if kind == "c":
            last = Call("readdir", "fh", 4, i=i, ts=frame * 1000, client="c:1", cookie=int(arg))
            last.frame, last.maxcount, last.plus = frame, 4096, False
            passes.call(last, i)
            i += 1
        elif kind in "RM":
            if kind == "M":
                pending.append(last)
                continue
            eof = arg.startswith("e")
            got = [int(c) for c in arg.lstrip("e").split(",") if c]
            last.reply_ts, last.status, last.eof = frame * 1000 + 1, 0, eof
            last.cookies = np.array(got, dtype=np.uint64).tobytes()
            passes.reply(last)
        elif kind in "AP":
            passes.attr("c:1", "fh", frame, int(arg), None, asked=kind == "A", ts=frame * 1000)
        else:
            raise ValueError(tok)
    passes.end()
    return [
        (lst.ending, len(lst.restarts), sorted(int(r) for r in lst.ambiguous_rows))
        for lst in passes.listings
    ]


@pytest.mark.parametrize(("seq", "want"), [c[1:] for c in WIRE], ids=[c[0] for c in WIRE])
def test_a_capture_is_cut_into_passes(seq, want):
    assert _wire(seq) == want


def test_a_cache_fill_at_cookie_0_of_another_page_is_damage():
    """5.18+ fills page 0 for cookie 0: a fill event at cookie 0 naming page 255,193 has a
    damaged field (one forged cookie made a good 6.1 trace "bad: restarted once")."""
    rpc = Columns(
        {
            "ts": np.array([1, 2, 3], dtype=np.int64),
            "pid": np.array([7, 7, 7], dtype=np.int64),
            "cookie": np.array([0, 0, 5], dtype=np.uint64),
            "index": np.array([0, 255193, 77], dtype=np.int64),
            "source": np.array(["nfs:nfs_readdir_cache_fill"] * 3, dtype=object),
        }
    )
    found = damage._cookie_zero_elsewhere(rpc)
    assert [(d["from"], d["pid"]) for d in found] == [(2, 7)], found
    assert "page 255193" in found[0]["what"]


# A capture's lost bytes against one pass of three READDIRs (calls at 10, 20, 30 ms; each reply
# 1 ms later), as model/wire._hiding_calls judges them: whether the hole may hide a restart.
# Holes: ">F-T" bytes to the server lost between F and T ms, "<F-T" replies lost; "oT:OP" a
# reply at T ms whose call is lost, answering NFSv4 operation OP (-1: it does not say, as an
# NFSv3 reply); "m" the last READDIR's reply is missing; "x" every XID between the READDIRs
# is in the capture. The pass ended at eof.
HOLES = [
    ("a call lost whose reply came after the next READDIR: not the pass's", ">12-20", False),
    ("its reply answered CLOSE: no READDIR was lost", ">12-20 o15:4", False),
    ("its reply answered READDIR: perhaps a restart", ">12-20 o15:26", True),
    ("an NFSv3 reply: which procedure is not said", ">12-20 o15:-1", True),
    ("a reply lost too: it may have been the READDIR's", ">12-20 o15:4 <14-17", True),
    ("the next READDIR's reply missing: what came before is not known", ">22-30 o25:9 m", True),
    ("lost bytes that end at the first READDIR: a GETATTR", ">5-10 o7:9", False),
    ("bytes lost after the eof READDIR: no call of the pass", ">31-40", False),
    ("lost bytes across the last READDIR, a GETATTR before it", ">25-35 o27:9", False),
    ("every XID between the READDIRs seen: only a reply's bytes", ">12-20 x", False),
    ("lost replies alone: no call lost", "<12-20", False),
]


def _holes(seq):
    ms = 1_000_000
    a = np.zeros(3, dtype=wire_passes.ROW)
    a["ts"], a["frame"], a["has_status"] = [10 * ms, 20 * ms, 30 * ms], [1, 2, 3], True
    holes, orphans, xids = [], [], None
    for tok in seq.split():
        if tok[0] in "<>":
            lo, hi = (int(v) * ms for v in tok[1:].split("-"))
            holes.append({"from": lo, "to": hi, "to_server": tok[0] == ">"})
        elif tok[0] == "o":
            t, op = tok[1:].split(":")
            orphans.append((int(t) * ms, int(op)))
        elif tok == "m":
            a["has_status"][-1] = False
        elif tok == "x":
            xids = (np.array([100, 101, 102, 103, 104]), {1: 100, 2: 102, 3: 104})
    lst = wire_passes.WireListing(None, "c:1", None, None, 0, 0, ending=reader.EOF)
    lst.rpcs = wire_passes.Rows(a, "c:1")
    return bool(wire._hiding_calls(lst, holes, xids, orphans))


@pytest.mark.parametrize(("seq", "want"), [c[1:] for c in HOLES], ids=[c[0] for c in HOLES])
def test_a_hole_hides_a_restart_only_where_a_readdir_could_be_lost(seq, want):
    assert _holes(seq) == want
