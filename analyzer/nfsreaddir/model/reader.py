"""A reader's pass over a directory, and what it costs when it goes back: the rules every input
shares. A trace's opens (opens.py), a capture's passes (wire_passes.py) and `watch` each say
which READDIRs went back; here, and only here, is decided how a listing ended, what one
restart cost and where it ended, when two returns are one restart, and when the evidence of a
restart lies in what was lost, so that the restart is possible and not certain.

Cookies are opaque: a file system hands them out in an order of its own (ext4 and xfs: hashes),
so "the listing went on" means it asked for a cookie that is not 0 and that it had not asked
for before, never a cookie above the others. Only where the reader's own position is known (a
cookie, at each getdents) is a value compared with it, as the kernel compares it.
"""

from __future__ import annotations

import numpy as np

from ..recordtype import record

# How a listing ended.
EOF, ERROR, KILLED, CLOSED, CUT_OFF, UNKNOWN = (
    "eof",
    "error",
    "killed",
    "closed",
    "cut_off",
    "unknown",
)
ENDINGS = {
    EOF: "reached the end of the directory",
    ERROR: "stopped by an error",
    KILLED: "killed by a signal",
    CLOSED: "closed before the end of the directory",
    CUT_OFF: "cut off by the end of the trace",
    UNKNOWN: "not known to have reached the end (the trace has no end-of-listing event)",
}


_U64 = 0xFFFF_FFFF_FFFF_FFFF


class Pass:
    """A reader's pass over a directory, fed event by event, and the one place that decides
    which of its READDIRs went back: the trace's opens (opens._Open is one), the capture's
    passes (wire_passes._Follow feeds one a pass) and `watch` (through opens) all feed it.

    Fed: asked_for (a READDIR's cookie), entered (the reader's position at a getdents, where
    the trace gives one), went_back (a rewind), read_entries (a getdents that returned
    entries), lost (the evidence just before the next READDIR is not in the input),
    interleaved (a READDIR of another pass over the same directory came in between) and
    settle (nothing more comes). It settles each READDIR after the start as one of:

        restart      back to cookie 0 while the reader was past the start, or for a whole page
                     below the reader's position (below_restarts, see opens.py);
        refill       cookie 0 again while the reader was still inside the first page: what
                     follows (a cookie above the position, or a getdents at or past it) shows
                     the kernel filled that page again and went on;
        ambiguous    a restart that a rewind, a new open or lost evidence would look the same
                     as, one that nothing follows, or one that what follows contradicts:
                     counted as neither (a range);

    A restart is claimed on agreeing evidence, never on one field: where the reader's position
    is not known, a cookie-0 READDIR is a restart only once the next READDIR of the pass walks
    back from the start (a cookie at or below the highest asked before, where the cookies
    grew). One that carries on above everything asked before continued the old chain: the
    cookie-0 READDIR did not send the reader back (a damaged field, or a first page dropped
    alone and filled again), so it is ambiguous, as is one that nothing follows (no catch-up).

    and keeps the reader's position known (targets: restart -> where the reader was)."""

    def __init__(self, below_restarts=False):
        # A READDIR below the reader's position: True a restart, None ambiguous, False nothing
        # (events.searches_from_first_page).
        self.below_restarts = below_restarts
        self.restart_rows: list = []
        self.ambiguous_rows: list = []
        self.refills: list = []  # cookie-0 READDIRs that refilled the page holding the position
        self.targets: dict = {}  # restart row -> the reader's position it had to get back to
        self.at_start = True
        self.progressed = False  # the reader has been past the start
        self.pos = None  # the reader's position (a cookie) at this getdents
        self.last_pos = 0  # ... at the previous one, since the start or a rewind
        self.ordered = True  # positions grew: cookies can be compared by value
        self.searched = False  # this getdents already restarted
        self.below = None  # its last READDIR below the position, if it was below
        self.asked = 0  # the highest cookie asked since the start or a rewind
        self.grew = True  # ... and the cookies asked (but 0) never went down
        self.last_asked = 0  # the last cookie (but 0) asked
        # A cookie-0 READDIR after the start, until what follows settles it: (row, the reader's
        # position then or None where not known, whether a restart would be visible as one,
        # not as a rewind, and the highest cookie asked before it where the cookies grew, else
        # None).
        self.zero: tuple | None = None
        self.unsure = False  # the evidence before the next READDIR was lost
        self.mixed = False  # another pass's READDIRs came in between: no restart is sure

    def entered(self, pos):
        """The reader enters the file system at position pos (None: not known). Returns
        whether that went back to the start of a pass under way (a rewind)."""
        if self.zero is not None:
            # The getdents that asked for cookie 0 returned without another READDIR: the
            # refilled page held the position if the reader goes on from there.
            p = None if pos is None else pos & _U64
            held = self.zero[1]
            self._settle(None if p is None or p == 0 or held is None else p >= held)
        self.searched = False
        self.below = None
        self.pos = None
        if pos is None:
            return False
        rewound = False
        if pos == 0:
            if self.progressed:
                self.went_back()
                rewound = True
            self.at_start = True
            return rewound
        # The kprobe reads loff_t, signed; cookies are unsigned 64-bit.
        self.pos = pos & _U64
        if self.pos < self.last_pos:
            self.ordered = False
        self.last_pos = self.pos
        self.at_start = False
        self.progressed = True
        return False

    def went_back(self):
        """The reader went back to the start: what it reads next is a new pass."""
        self._settle(None)
        self.at_start = True
        self.pos, self.last_pos = None, 0
        self.asked, self.grew, self.last_asked = 0, True, 0

    def read_entries(self):
        """A getdents returned entries: the reader is past the start."""
        self.at_start = False
        self.progressed = True

    def lost(self):
        """What came just before the next READDIR is not in the input (a READDIR's reply
        missing from a capture): had it ended the pass, a cookie-0 READDIR next would begin a
        new one, so such a READDIR is ambiguous, not a restart."""
        self.unsure = True

    def interleaved(self, row):
        """READDIR `row` continued another pass over the same directory: two readers'
        READDIRs are one stream, and any cookie-0 READDIR may be the other's start."""
        self.ambiguous_rows.append(row)
        self.mixed = True

    def asked_for(self, row, cookie, visible=True):
        """A READDIR (row: the caller's name for it) asked for cookie (None: not known).
        visible: a rewind by the reader would show in the input (else a restart and a rewind
        look the same). Returns whether it went past the start (a cookie that is not 0)."""
        visible = visible and not self.unsure
        self.unsure = False
        if cookie is None:
            return False
        if self.zero is not None:
            self._settle(_refilled(self.zero, cookie))
        went = False
        if cookie == 0:
            if self.at_start:
                self.at_start = False
            elif self.pos is None and self.asked:
                # Where the reader is is not known, only that it had needed more than the
                # first page: going back to cookie 0 is a restart (or a new pass) if what
                # follows walks back from the start (_refilled).
                self.zero = (row, None, visible, self.asked if self.grew else None)
                self.searched = True
            else:
                self.zero = (row, self.pos or 0, visible, None)
                self.searched = True
        else:
            self.at_start = False
            self.asked = max(self.asked, cookie)
            self.grew = self.grew and cookie >= self.last_asked
            self.last_asked = cookie
            if self.pos is not None and not self.searched and self.below_restarts is not False:
                # A READDIR below where the reader is fills the page that holds its position,
                # unless the next one still starts at or below it: then that page lay wholly
                # behind the reader, a search from the start that the cache served up to there
                # (see opens.py).
                if self.below is not None and cookie <= self.pos:
                    sure = self.ordered and self.below_restarts
                    (self.restart_rows if sure else self.ambiguous_rows).append(self.below)
                    self.targets[self.below] = self.pos
                    self.searched = True
                self.below = row if cookie < self.pos else None
            went = True
        self.progressed = True
        return went

    def _settle(self, refill):
        """What the pending cookie-0 READDIR was: refill True, the page that holds the
        position filled again; False, a restart (ambiguous where a rewind or a new open would
        look the same); None, the input does not tell."""
        if self.zero is None:
            return
        row, _, visible, _ = self.zero
        self.zero = None
        if refill:
            self.refills.append(row)
        elif refill is False and visible:
            self.restart_rows.append(row)
            # The walk back from the start: cookies grow again from there.
            self.grew, self.last_asked = True, 0
        else:
            self.ambiguous_rows.append(row)

    def settle(self):
        """The pass's READDIRs are all in: a cookie-0 READDIR that nothing followed cannot be
        told from a restart; where two passes interleaved, no restart is sure."""
        self._settle(None)
        if self.mixed and self.restart_rows:
            self.ambiguous_rows = sorted({*self.ambiguous_rows, *self.restart_rows})
            self.restart_rows = []


def _refilled(zero, cookie):
    """What the READDIR after a pending cookie-0 one (zero: Pass.zero), asking cookie, says of
    it: where the reader's position was known, a cookie above it shows the page that held it
    was filled again (True), else the reader was walked back (False). Where it was not known,
    a walk back from the start asks at or below the highest cookie asked before (False); a
    cookie above all of them, in cookies that grew, carries on the old chain, which a restart
    does not do (None: not a restart that the trace agrees on)."""
    _, held, _, highest = zero
    if held is not None:
        return cookie > held
    if highest is not None and cookie > highest:
        return None
    return False


@record
class Restart:
    ts: int
    rpc_index: int  # index of the READDIR that restarted within the listing
    cookie: int  # what it asked for: 0, or a cookie below the reader's position
    refetched: int  # READDIRs until the listing reached a cookie not read before
    cost_ns: int  # time from the restart until then
    after_invalidation: bool


def restart_costs(cookies, ts, restart_idx, change_ts, targets=None):
    """What each restart cost (cookies, ts: the listing's READDIRs in order; cookies unsigned,
    every one known): READDIRs and time until the listing is past what it had read, where the
    reader's position is known (targets: per restart, 0 where it is not) past that too. Where
    the listing's cookies grew until its first restart (ext4's hashes, xfs and tmpfs offsets
    grow along one pass), past means above every cookie asked before: the re-read after a
    change asks for other cookies than the first pass did, as the page boundaries moved. Where
    they did not grow, a cookie is only a name: past means a cookie not 0 and not asked before.
    A READDIR is costed to one restart at most: a catch-up ends where the next restart begins,
    so the restarts' costs never add up to more READDIRs or time than the listing had.
    change_ts: when the listing's directory changed (invalidations), for after_invalidation."""
    cookies = np.asarray(cookies, dtype=np.uint64)
    ts = np.asarray(ts, dtype=np.int64)
    change_ts = np.asarray(change_ts, dtype=np.int64)
    targets = list(targets) if targets is not None else [0] * len(restart_idx)
    order = sorted(range(len(restart_idx)), key=lambda k: restart_idx[k])
    first = int(restart_idx[order[0]]) if order else 0
    head = cookies[:first][cookies[:first] != 0]
    ordered = bool(np.all(head[1:] >= head[:-1]))
    out: list[Restart | None] = [None] * len(restart_idx)
    for n, k in enumerate(order):
        i, target = int(restart_idx[k]), int(targets[k])
        stop = int(restart_idx[order[n + 1]]) if n + 1 < len(order) else len(cookies)
        before = cookies[:i].tolist()
        reached = max(max(before, default=0), target)
        asked = set(before)
        j = i
        while j < stop:
            c = int(cookies[j])
            if (c > reached) if ordered else (c != 0 and c not in asked and c > target):
                break
            j += 1
        end_ts = ts[j] if j < len(ts) else ts[-1]
        changed = change_ts[change_ts <= ts[i]]
        prev = ts[i - 1] if i else ts[i]
        out[k] = Restart(
            int(ts[i]),
            i,
            int(cookies[i]),
            j - i,
            int(end_ts - ts[i]),
            bool(len(changed) and changed[-1] >= prev),
        )
    return out


def count_restarts(lst, cookies, ts, restart_idx, change_ts, targets=None, lost=()):
    """The one count of a listing's restarts, for every input: from the reader model's
    restarts (restart_idx: indexes into the listing's READDIRs, cookies and ts theirs in
    order; targets: the reader's position each had to get back to, 0 where not known) and its
    ambiguous READDIRs (lst.ambiguous_rows). A restart among `lost` (its evidence lies in or
    next to what was lost or damaged, near_loss) could as well be a new listing whose end or
    start was lost: it joins the ambiguous ones, so loss and damage make the count a range,
    never a restart. Sets lst.restart_rows (the model's restarts, so the count can be made
    again once more loss is known), lst.restarts, lst.possible_restarts (the other bound:
    every ambiguous READDIR a restart, at cookie 0) and lst.ambiguous_rows."""
    targets = list(targets) if targets is not None else [0] * len(restart_idx)
    target = dict(zip(restart_idx, targets))
    lst.restart_rows = list(restart_idx)
    lost = set(lost) & set(restart_idx)
    if lost:
        lst.ambiguous_rows = sorted(set(lst.ambiguous_rows) | lost)
    kept = [i for i in restart_idx if i not in lost]
    lst.restarts = one_per_catchup(
        restart_costs(cookies, ts, kept, change_ts, [target[i] for i in kept]), change_ts
    )
    both = sorted(set(restart_idx) | set(lst.ambiguous_rows))
    lst.possible_restarts = one_per_catchup(
        restart_costs(cookies, ts, both, change_ts, [target.get(i, 0) for i in both]), change_ts
    )


def went_on(cookies):
    """Per READDIR (cookies: a listing's, in order, unsigned), whether it went on: it asked for
    a cookie that is not 0 and that no READDIR before it in the listing had asked for."""
    out = np.zeros(len(cookies), dtype=bool)
    asked: set[int] = set()
    for k, c in enumerate(np.asarray(cookies, dtype=np.uint64).tolist()):
        out[k] = c != 0 and c not in asked
        asked.add(c)
    return out


def one_per_catchup(restarts, change_ts):
    """Each restart once: a READDIR that goes back while the listing is still catching up after
    a restart (before it asked for a cookie it had not asked before) is part of that restart,
    unless a new change of the directory came between them."""
    change_ts = np.asarray(change_ts, dtype=np.int64)
    out: list[Restart] = []
    for r in restarts:
        if out:
            p = out[-1]
            again = ((change_ts > p.ts) & (change_ts <= r.ts)).any()
            if r.rpc_index <= p.rpc_index + p.refetched and not again:
                # The catch-up it interrupted now reaches to where this one ends.
                p.refetched = r.rpc_index + r.refetched - p.rpc_index
                p.cost_ns = r.ts + r.cost_ns - p.ts
                continue
        out.append(r)
    return out


def lost_stretch(last_loss, last_event, ts):
    """Where a CPU's ring buffer lost events, as trace-cmd places them: the page at ts says
    some were lost before it, so they lie after that CPU's last event read and its last loss
    (-1: none) and before ts ({"from", "to"} in ns, as near_loss takes them)."""
    return {"from": max(last_loss, last_event), "to": ts}


def near_loss(ts, idx, windows):
    """The READDIRs among idx (indexes into ts, the listing's READDIR times) whose evidence of a
    restart touches a stretch where events or frames were lost or damaged (windows: dicts with
    "from" and "to" in ns): the READDIR itself, and what lies between it and the READDIRs
    beside it, where a lost end of one pass or start of another would have made it a new
    listing, not a restart."""
    if not windows or not len(idx):
        return set()
    out = set()
    n = len(ts)
    for i in idx:
        lo = int(ts[i - 1]) if i > 0 else int(ts[i])
        hi = int(ts[i + 1]) if i + 1 < n else int(ts[i])
        if any(w["from"] <= hi and w["to"] >= lo for w in windows):
            out.add(int(i))
    return out


class Catchup:
    """restart_costs and one_per_catchup as a stream, for a reader that sees each READDIR as it
    comes (`watch`), with the same rules: a catch-up ends at the first READDIR past what the
    listing had read before the restart (above every cookie asked before it where the cookies
    grew until the first restart, else a cookie not 0 and not asked before it; past the
    reader's position where known), or where the next restart begins; a restart with no change
    of the directory since the one being caught up on is part of it. A restart is settled a
    READDIR or two after its own (opens._Open), so what was asked before each of the latest
    READDIRs is kept, `recent` of them."""

    def __init__(self, recent=64):
        self.recent = recent
        self.first: dict[int, int] = {}  # cookie -> the row of the READDIR that first asked it
        self.highest = 0  # the highest cookie asked so far
        self.grew = True  # the cookies asked so far (but 0) never went down
        self.last = 0  # the last cookie (but 0) asked
        self.before: dict[int, tuple] = {}  # row -> (highest, grew) before that READDIR
        self.ordered = None  # whether cookies grew until the first restart, decided there
        # The restart being caught up on: (its row, ts, the changes seen then, what a
        # READDIR must pass: the cookie where ordered, else the row before which it was
        # asked; and the reader's position, 0 where not known).
        self.pending = None

    def restart(self, row, ts, changes, target=0):
        """A restart was settled at READDIR `row` (the rows are increasing). Returns (whether
        it is a restart of its own, the (row, ts) of the restart whose catch-up it cut short
        or None). Not its own: part of the restart being caught up on (no change between)."""
        highest, grew = self.before.get(row, (self.highest, self.grew))
        if self.ordered is None:
            self.ordered = grew
        mark = max(highest, target) if self.ordered else row
        p = self.pending
        if p is not None and p[2] == changes:
            self.pending = (p[0], p[1], changes, mark, target)
            return False, None
        self.pending = (row, ts, changes, mark, target)
        return True, (p[0], p[1]) if p is not None else None

    def readdir(self, row, cookie):
        """READDIR `row` asked for cookie (None: not known), fed after restart() for the same
        READDIR (one that settles a restart can also end its catch-up). Returns (row, ts) of
        the restart whose catch-up it ends, or None."""
        if cookie is None:
            return None
        c = int(cookie)
        self.before[row] = (self.highest, self.grew)
        if len(self.before) > self.recent:
            del self.before[min(self.before)]
        first = self.first.setdefault(c, row)
        if c:
            self.grew = self.grew and c >= self.last
            self.last = c
            self.highest = max(self.highest, c)
        p = self.pending
        if p is None:
            return None
        _, _, _, mark, target = p
        past = c > mark if self.ordered else (c != 0 and first >= mark and c > target)
        if past:
            self.pending = None
            return p[0], p[1]
        return None
