"""The passes of a capture: its READDIRs cut into listings, one per client's pass over a
directory (wire.py says what a capture can and cannot tell of them)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..recordtype import names, record
from . import reader
from .listing import Listing
from .spool import ListingSpool

DELIMITED_BY = "wire"


# One READDIR of a listing, what the analysis and the export read of it: its row in the
# capture's order, its call's and reply's values, and which of them the capture gave. A listing
# keeps its READDIRs as one array of these (52 bytes a READDIR): a pandas frame each cost 4 KB
# however few its rows, and a server's capture has thousands of listings.
ROW = np.dtype(
    [
        ("row", "i8"),
        ("ts", "i8"),
        ("frame", "i8"),
        ("cookie", "u8"),
        ("maxcount", "i8"),
        ("status", "i8"),
        ("plus", "?"),
        ("has_cookie", "?"),
        ("has_maxcount", "?"),
        ("has_status", "?"),  # its reply came and said how it went
    ]
)


class Rows:
    """A wire listing's READDIRs: the columns of a listing's rpcs frame that a capture gives
    (ts, pid, comm, cookie, dtsize, error, frame), each made a Series when asked, from the
    listing's one array of ROWs."""

    __slots__ = ("a", "client")
    COLUMNS = ("ts", "pid", "comm", "cookie", "dtsize", "error", "frame")

    def __init__(self, a, client):
        self.a, self.client = a, client

    def __reduce__(self):
        # As bytes: a listing is written to disk and read back (model/spool), and numpy's own
        # pickling of a small array costs ten times the listing's other fields.
        return _rows_of, (self.a.tobytes(), self.client)

    def __len__(self):
        return len(self.a)

    def __contains__(self, column):
        return column in self.COLUMNS

    def __getitem__(self, column):
        a, n = self.a, len(self.a)
        if column in ("ts", "frame"):
            v = a[column].copy()
        elif column == "cookie":
            # 64-bit (ext4 gives hashes near 2**63): never through a float; one not known is
            # pd.NA, not 0.
            v = a["cookie"].copy()
            if not a["has_cookie"].all():
                v = np.array(
                    [c if k else pd.NA for c, k in zip(v.tolist(), a["has_cookie"])], dtype=object
                )
        elif column == "dtsize":
            v = np.where(a["has_maxcount"], a["maxcount"], np.nan)
        elif column == "comm":
            v = np.full(n, self.client, dtype=object)
        elif column == "pid":
            v = np.full(n, None, dtype=object)
        elif column == "error":
            v = np.full(n, np.nan)
        else:
            raise KeyError(column)
        return pd.Series(v, name=column)


def _rows_of(data, client):
    """The Rows that Rows.__reduce__ wrote."""
    return Rows(np.frombuffer(data, dtype=ROW), client)


@record(slots=True)
class WireListing(Listing):
    """A listing seen on the wire: a client and a directory filehandle, no process."""

    client: str = ""
    fh: str = ""
    refetched_entries: int = 0
    missing_replies: int = 0  # READDIRs whose reply is not in the capture, or gave no status
    # When each of its version_changes was seen (the GETATTR reply's time), for the page,
    # and the reply's frame, which orders it among the READDIRs.
    change_ts: Sequence = ()
    change_frames: Sequence = ()

    def __getstate__(self):
        # Its rpc_rows are a column of its rpcs: written once, made again when read back.
        return [getattr(self, name) for name in _STATE]

    def __setstate__(self, state):
        for name, value in zip(_STATE, state):
            object.__setattr__(self, name, value)
        self.rpc_rows = self.rpcs.a["row"] if len(self.rpcs) else ()

    def label(self):
        d = self.fileid if self.fileid is not None else "?"
        return f"listing of dir {d} (fh {self.fh}) by client {self.client}" + (
            f" ({self.phase})" if self.phase else ""
        )

    def summary(self):
        # (Listing by name: a slots record is a new class, which zero-argument super() misses.)
        s = Listing.summary(self)
        s.update(
            who=f"client {self.client}",
            client=self.client,
            fh=self.fh,
            refetched_entries=self.refetched_entries,
            missing_replies=self.missing_replies,
        )
        return s


_STATE = [n for n in names(WireListing) if n != "rpc_rows"]

# A listing's READDIRs until its pass ends: none.
_UNREAD = Rows(np.zeros(0, dtype=ROW), "")


def _new_listing(client, fh, ts, began_before):
    # No process and no readdir cache on the wire: what a trace would give there is unknown.
    # The lists it may never have are one empty tuple for all (close() gives it its own where
    # it has some): a server's capture has thousands of listings, each of ten such lists.
    return WireListing(
        rpcs=_UNREAD,
        restart_rows=(),
        ambiguous_rows=(),
        refill_rows=(),
        restarts=(),
        possible_restarts=(),
        invalidations=(),
        rpc_rows=(),
        pid=None,
        comm=client,
        dev=None,
        fileid=None,
        start=int(ts),
        end=int(ts),
        delimited_by=DELIMITED_BY,
        began_before_trace=began_before,
        ending=reader.CUT_OFF,
        invalidations_known=False,
        cache_range_trims=None,
        client=client,
        fh=fh,
    )


def listings(cap):
    """The listings of a Capture read with passes=Passes, in time order (a ListingSpool)."""
    return cap.passes.listings


def count(lst, lost=()):
    """Count the wire listing's restarts (reader.count_restarts, from the reader model's
    restart rows and its ambiguous ones; lost: restarts whose evidence is in what the capture
    lost). A change of the directory counts for the READDIRs after its reply in the capture's
    order (frame numbers: coarse clocks give ties)."""
    if not lst.restart_rows and not lst.ambiguous_rows:
        return
    a = lst.rpcs.a
    frames, ts = a["frame"], a["ts"]
    changes = np.asarray(lst.change_frames, dtype=np.int64)
    # When the catch-up rule asks whether the directory changed between two restarts: at the
    # first READDIR after the change.
    after = np.searchsorted(frames, changes, side="right")
    reader.count_restarts(
        lst, a["cookie"], ts, lst.restart_rows, ts[after[after < len(ts)]], lost=lost
    )
    # after_invalidation: on the wire, the directory's version moved since the READDIR
    # before the restart.
    for r in (*lst.restarts, *lst.possible_restarts):
        prev = frames[r.rpc_index - 1] if r.rpc_index else frames[r.rpc_index]
        r.after_invalidation = bool(((changes > prev) & (changes < frames[r.rpc_index])).any())


class Passes:
    """Every client's passes over every directory, followed while the capture is read:
    rpcmatch tells it of each READDIR call in the capture's order, of each reply as it comes,
    and of each reply that gave an object's version (GETATTR, or a READDIR's post-op
    attributes). A reply's entry cookies are used at once and dropped: what a pass keeps is
    its own set of cookies and its previous reply's; a listing, once its pass is over, gets its
    READDIRs' values and what they came to and goes to `listings`, on disk (model/spool). So
    memory follows the passes under way, not the listings found or the capture's length."""

    def __init__(self):
        self.follow: dict[tuple, _Follow] = {}  # (client, fh) -> its passes, first come first
        self.listings = ListingSpool()
        # The last version of each object a client asked the attributes of before it listed
        # it (a directory's passes start from it), and each filehandle's first inode number:
        # one entry an object, however long the capture.
        self.versions: dict[tuple, object] = {}
        self.fileids: dict[str, int] = {}

    def call(self, row, i):
        """A READDIR call: rpcmatch's Call (ts, frame, client, fh, cookie, maxcount), row
        i of the capture's READDIRs."""
        key = (row.client, row.fh)
        f = self.follow.get(key)
        if f is None:
            f = self.follow[key] = _Follow(
                *key, self.listings, len(self.follow), self.versions.pop(key, None)
            )
        f.waiting.append((i, row))

    def reply(self, row):
        """row's reply came (its reply_ts, status, eof, fileid and cookies set): its
        directory's passes read on as far as every earlier call of theirs has its reply."""
        self.follow[row.client, row.fh].read_on(now=row.reply_ts)

    def attr(self, client, fh, frame, version, fileid, asked=True, ts=None):
        """A reply in frame `frame` (at ts) gave the version (and inode number) of the object
        fh; asked: the reply to a GETATTR of it, not post-op attributes beside another call."""
        if fileid is not None:
            self.fileids.setdefault(fh, fileid)
        f = self.follow.get((client, fh))
        if f is None:
            self.versions[client, fh] = version
        else:
            # In the capture's order among the directory's calls: a change counts for the
            # READDIRs after it.
            f.waiting.append((-1, (frame, version, asked, ts)))
            f.read_on()

    def end(self):
        """The capture is read: a call still waiting has no reply in it."""
        for f in self.follow.values():
            f.read_on(end=True)
            f.close()
        self.listings.seal()


_NONE = np.zeros(0, dtype=np.uint64)

# How long a READDIR call waits for its reply, while later ones of its directory get theirs,
# before it is read as one without a reply: a reply missing from the capture (a packet the
# kernel dropped while capturing) would otherwise hold every later READDIR of the directory,
# its entry cookies and all, to the capture's end. A client retransmits a call within a few
# timeouts (60 s over TCP), and the retransmission's reply is the call's.
WAIT_NS = 10 * 60 * 10**9


def _late(call, now):
    """Whether the call (rpcmatch's Call) has waited longer than WAIT_NS at time now."""
    return now is not None and call.ts is not None and now - call.ts > WAIT_NS


def _has(sorted_cookies, cookie):
    """Whether the cookie (an int) is among sorted_cookies (a sorted uint64 array)."""
    c = np.uint64(cookie)  # never through a float: cookies near 2**63 are common
    i = int(np.searchsorted(sorted_cookies, c))
    return i < len(sorted_cookies) and sorted_cookies[i] == c


def _row(i, row):
    """The ROW of READDIR i (rpcmatch's Call), as a tuple."""
    return (
        i,
        row.ts,
        row.frame if row.frame is not None else -1,
        row.cookie or 0,
        row.maxcount or 0,
        row.status if row.status is not None else 0,
        bool(row.plus),
        row.cookie is not None,
        row.maxcount is not None,
        row.status is not None,
    )


class _Follow:
    """One client's passes over one directory: its READDIRs, in the capture's order, cut where
    one pass ends and the next begins, their restarts and refetched entries. The cookies it
    keeps are 8 bytes each in numpy arrays: a server's capture has thousands of passes open at
    once, each of thousands of entries (as Python sets, 0.5 MB a pass)."""

    def __init__(self, client, fh, spool, number, version=None):
        self.client, self.fh = client, fh
        # Where its listings go as their passes end, and its number there (the order the
        # directories' passes began in).
        self.spool, self.number = spool, number
        # (row number, Call) of calls not read yet, and (-1, (frame, version, asked, ts)) of
        # attribute replies, in the capture's order.
        self.waiting: deque = deque()
        self.lst: WireListing | None = None  # the listing of the pass under way
        self.version = version  # the directory's last version seen
        # The pass under way: its READDIRs (ROW tuples), the reader model's pass (fed each
        # READDIR's cookie, by its index among them), the directory's inode number where a
        # reply gave it, and (frame, time) of the GETATTR replies that showed the directory's
        # version move.
        self.rows: list[tuple] = []
        self.reader = reader.Pass()
        self.fileid: int | None = None
        self.changes: list[tuple] = []
        self.moved = False  # the directory's version moved since the pass began
        self.seen = _NONE  # entry cookies this pass has been given, sorted, each once
        self.last_reply_cookie: int | None = None
        self.older: set[int] = set()  # last cookies of earlier replies of this pass
        self.prev_cookies = None  # the entry cookies of the pass's previous reply, in order
        self.page = 0  # most entries the client took of a reply it did not use whole

    def read_on(self, end=False, now=None):
        """Read the waiting calls and attribute replies, in order, as far as each call has its
        reply. end: the capture is read; now: the time of the reply that came, before which a
        call waiting longer than WAIT_NS is read as one without a reply."""
        w = self.waiting
        while w:
            i, row = w[0]
            if i >= 0 and not (end or row.reply_ts is not None or _late(row, now)):
                break
            w.popleft()
            if i < 0:
                self._version(*row)
                continue
            self._read(i, row)
            row.cookies = None  # read: the pass keeps what it needs of them

    def _version(self, frame, version, asked, ts):
        # A change counts where the client acted on it: a GETATTR of the directory that found
        # a new version, which makes every kernel drop the directory's cached pages. NFSv3
        # post-op attributes beside a READDIR can show the directory's mtime move while the
        # client never drops its cache (stock 5.10: no invalidation in the trace of the same
        # run); such a change exercises nothing.
        if self.version is not None and version != self.version and self.lst is not None:
            if asked:
                self.changes.append((frame, ts))
            # Any change, acted on or not, may have dropped the cache under the pass's reader.
            self.moved = True
        self.version = version

    def close(self):
        """The pass under way is over: its listing gets its READDIRs and what they show, and
        goes to the spool."""
        lst, self.lst = self.lst, None
        if lst is None:
            return
        a = np.array(self.rows, dtype=ROW)
        lst.rpcs, lst.rpc_rows, lst.fileid = Rows(a, self.client), a["row"], self.fileid
        p = self.reader
        p.settle()
        lst.ambiguous_rows, lst.refill_rows = sorted(p.ambiguous_rows), list(p.refills)
        # The changes of the directory's version the listing met: shown by a reply after its
        # first READDIR call and before its last (only a READDIR after the change can go back
        # to cookie 0; frame numbers order the capture, where coarse clocks give ties).
        frames = a["frame"]
        # Only once the reader was past the first page (it needed a page from a cookie that is
        # not 0, or the pass began before the capture): a change while it is still inside the
        # first page makes every kernel fill that page again and go on, which tests nothing.
        past = np.flatnonzero(a["cookie"] != 0)
        since = frames[past[0]] if len(past) else frames[-1]
        met = [(f, t) for f, t in self.changes if since < f < frames[-1]]
        changes = np.array([f for f, _ in met], dtype=np.int64)
        lst.version_changes = len(changes)
        lst.change_ts = [t for _, t in met if t is not None]
        lst.change_frames = [f for f, _ in met]
        lst.restart_rows = p.restart_rows
        count(lst)
        # A pass that met a change once its reader had left the first page, reached eof and
        # never went back (not even at cookie 0 right after the eof, which would have joined
        # it, see _read) went on past the change: a kernel that restarts would have gone back
        # at the reader's next getdents.
        # Elsewhere the capture cannot tell: not known, not 0.
        clean = lst.ending == reader.EOF and not p.restart_rows and not lst.ambiguous_rows
        lst.survived = lst.version_changes if clean else None
        self.rows, self.changes, self.reader = [], [], reader.Pass()
        self.fileid, self.moved = None, False
        self.spool.put(lst, self.number)

    def _read(self, i, row):
        ts, cookie, reply_ts = row.ts, row.cookie, row.reply_ts
        lst, prev_cookies, page = self.lst, self.prev_cookies, self.page
        # A reply with eof ends the pass only when the client asks nothing more of it:
        # 5.10 fills one page of its readdir cache from each reply and asks again from
        # the last cookie that fitted the page, a cookie of a reply of this pass, so after
        # an eof reply it reads on from inside it.
        reads_on = (
            lst is not None
            and lst.ending == reader.EOF
            and bool(cookie)
            and _has(self.seen, cookie)
        )
        # Such a client, taking at most `page` entries of a reply, has not finished the
        # pass while its last eof reply held more: a READDIR at cookie 0 then is a restart.
        unfinished = (
            lst is not None
            and lst.ending == reader.EOF
            and page > 0
            and prev_cookies is not None
            and len(prev_cookies) > page
        )
        # After an eof reply the client has all of the directory, but its reader may still be
        # reading the last pages from the cache: where the directory changed since the pass
        # began, a READDIR at cookie 0 may be that reader's restart as well as a new listing.
        maybe_restart = (
            cookie == 0
            and lst is not None
            and lst.ending == reader.EOF
            and not unfinished
            and self.moved
        )
        if cookie == 0 and lst is not None and (lst.ending != reader.EOF or unfinished):
            # The pass goes on (the reader model says what its cookie-0 READDIR was).
            if unfinished:
                lst.ending = reader.CUT_OFF
        elif maybe_restart and lst is not None:
            lst.ending = reader.CUT_OFF
        elif lst is None or (lst.ending == reader.EOF and not reads_on) or cookie == 0:
            self.close()
            lst = self.lst = _new_listing(self.client, self.fh, ts, began_before=cookie != 0)
            self.seen, self.last_reply_cookie, self.older = _NONE, None, set()
            self.prev_cookies, self.page = None, 0
        else:
            if reads_on:
                lst.ending = reader.CUT_OFF
            if prev_cookies is not None and len(prev_cookies) and cookie is not None:
                at = np.flatnonzero(prev_cookies == np.uint64(cookie))
                if len(at) and at[0] + 1 < len(prev_cookies):
                    self.page = max(page, int(at[0]) + 1)
            # A client continues from the last cookie of its previous reply; from an older
            # one, a second pass over the same directory interleaves with this one.
            last = self.last_reply_cookie
            if last is not None and cookie != last and cookie in self.older:
                self.reader.interleaved(len(self.rows))
        # Reader position unknown on the wire: the pass's cookies alone say where it went.
        self.reader.asked_for(len(self.rows), cookie, visible=not maybe_restart)
        self.rows.append(_row(i, row))
        if self.fileid is None and row.status == 0:
            self.fileid = row.fileid
        lst.end = int(ts if reply_ts is None else reply_ts)
        status = row.status
        if reply_ts is None or status is None:
            # No reply in the capture, or one that does not say how the READDIR went: what it
            # gave is not known, as the listing's damage says; it may have ended the pass.
            lst.missing_replies += 1
            self.reader.lost()
            return
        if status != 0:
            lst.ending, lst.error = reader.ERROR, int(status)
            return
        got = row.cookies
        cookies = np.frombuffer(got, dtype=np.uint64) if got else _NONE
        # Entries given again: each of this reply's cookies the pass was given before
        # (at a restart too).
        seen, new = self.seen, cookies
        if len(seen) and len(cookies):
            at = np.minimum(np.searchsorted(seen, cookies), len(seen) - 1)
            again = seen[at] == cookies
            lst.refetched_entries += int(np.count_nonzero(again))
            new = cookies[~again]
        if len(new):
            # Into the sorted set: the new ones sorted, each once, inserted in place (np.union1d
            # hashed and sorted the whole set again at every reply: 8 s of the 1 M capture).
            new = np.sort(new)
            new = new[np.concatenate(([True], new[1:] != new[:-1]))]
            self.seen = np.insert(seen, np.searchsorted(seen, new), new)
        self.prev_cookies = cookies
        if self.last_reply_cookie is not None:
            self.older.add(self.last_reply_cookie)
        if len(cookies):
            self.last_reply_cookie = int(cookies[-1])
        if row.eof:
            lst.ending = reader.EOF
