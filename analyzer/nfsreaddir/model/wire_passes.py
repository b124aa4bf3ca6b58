"""The passes of a capture: its READDIRs cut into listings, one per client's pass over a
directory (wire.py says what a capture can and cannot tell of them)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import analysis
from .listing import Listing

DELIMITED_BY = "wire"


@dataclass
class WireListing(Listing):
    """A listing seen on the wire: a client and a directory filehandle, no process."""

    client: str = ""
    fh: str = ""
    refetched_entries: int = 0
    missing_replies: int = 0
    # While listings() builds it: its rows of the capture's READDIRs, and the indexes among
    # them of the READDIRs that restarted.
    _rows: list = field(default_factory=list, init=False, repr=False, compare=False)
    _restart_idx: list = field(default_factory=list, init=False, repr=False, compare=False)

    def label(self):
        d = self.fileid if self.fileid is not None else "?"
        return f"listing of dir {d} (fh {self.fh}) by client {self.client}" + (
            f" ({self.phase})" if self.phase else ""
        )

    def summary(self):
        s = super().summary()
        s.update(
            who=f"client {self.client}",
            client=self.client,
            fh=self.fh,
            refetched_entries=self.refetched_entries,
            missing_replies=self.missing_replies,
        )
        return s


# A listing's READDIRs until listings() gives it its own: one empty frame for all of them.
_UNREAD = pd.DataFrame()


def _new_listing(client, fh, ts, began_before):
    # No process and no readdir cache on the wire: what a trace would give there is unknown.
    return WireListing(
        rpcs=_UNREAD,
        pid=None,
        comm=client,
        dev=None,
        fileid=None,
        start=int(ts),
        end=int(ts),
        delimited_by=DELIMITED_BY,
        began_before_trace=began_before,
        ending=analysis.CUT_OFF,
        invalidations_known=False,
        cache_range_trims=None,
        client=client,
        fh=fh,
    )


def by_dir(table):
    """{(client, filehandle): its row numbers in the table}, in the order they first come."""
    out: dict[tuple, list] = {}
    for i, key in enumerate(zip(table["client"].tolist(), table["fh"].tolist())):
        out.setdefault(key, []).append(i)
    return out


def listings(cap):
    """The listings of a Capture read with passes=Passes, in time order."""
    out = [lst for f in cap.passes.follow.values() for lst in f.out]
    _give_rpcs(out, cap.readdirs)
    return sorted(out, key=lambda x: (x.start, x.client))


class Passes:
    """Every client's passes over every directory, followed while the capture is read:
    rpcmatch tells it of each READDIR call in the capture's order and of each reply as it
    comes. A reply's entry cookies are used at once and dropped: what a pass keeps is its
    own set of cookies and its previous reply's, so memory follows the passes under way, not
    the capture's length."""

    def __init__(self):
        self.follow: dict[tuple, _Follow] = {}  # (client, fh) -> its passes, first come first

    def call(self, row, i):
        """A READDIR call: rpcmatch's Call (ts, client, fh, cookie), row i of the table."""
        key = (row.client, row.fh)
        f = self.follow.get(key)
        if f is None:
            f = self.follow[key] = _Follow(*key)
        f.waiting.append((i, row))

    def reply(self, row):
        """row's reply came (its reply_ts, status, eof and cookies set): its directory's passes
        read on as far as every earlier call of theirs has its reply."""
        self.follow[row.client, row.fh].read_on()

    def end(self):
        """The capture is read: a call still waiting has no reply in it."""
        for f in self.follow.values():
            f.read_on(end=True)


_NONE = np.zeros(0, dtype=np.uint64)


def _has(sorted_cookies, cookie):
    """Whether the cookie (an int) is among sorted_cookies (a sorted uint64 array)."""
    c = np.uint64(cookie)  # never through a float: cookies near 2**63 are common
    i = int(np.searchsorted(sorted_cookies, c))
    return i < len(sorted_cookies) and sorted_cookies[i] == c


class _Follow:
    """One client's passes over one directory: its READDIRs, in the capture's order, cut where
    one pass ends and the next begins, their restarts and refetched entries. The cookies it
    keeps are 8 bytes each in numpy arrays: a server's capture has thousands of passes open at
    once, each of thousands of entries (as Python sets, 0.5 MB a pass)."""

    def __init__(self, client, fh):
        self.client, self.fh = client, fh
        self.waiting: deque = deque()  # (row number, row) of calls not read yet, in order
        self.out: list[WireListing] = []
        self.lst: WireListing | None = None
        self.seen = _NONE  # entry cookies this pass has been given, sorted, each once
        self.last_reply_cookie: int | None = None
        self.older: set[int] = set()  # last cookies of earlier replies of this pass
        self.prev_cookies = None  # the entry cookies of the pass's previous reply, in order
        self.page = 0  # most entries the client took of a reply it did not use whole

    def read_on(self, end=False):
        w = self.waiting
        while w and (end or w[0][1].reply_ts is not None):
            i, row = w.popleft()
            self._read(i, row)
            row.cookies = None  # read: the pass keeps what it needs of them

    def _read(self, i, row):
        ts, cookie, reply_ts = row.ts, row.cookie, row.reply_ts
        lst, prev_cookies, page = self.lst, self.prev_cookies, self.page
        # A reply with eof ends the pass only when the client asks nothing more of it:
        # 5.10 fills one page of its readdir cache from each reply and asks again from
        # the last cookie that fitted the page, a cookie of a reply of this pass, so after
        # an eof reply it reads on from inside it.
        reads_on = (
            lst is not None
            and lst.ending == analysis.EOF
            and bool(cookie)
            and _has(self.seen, cookie)
        )
        # Such a client, taking at most `page` entries of a reply, has not finished the
        # pass while its last eof reply held more: a READDIR at cookie 0 then is a restart.
        unfinished = (
            lst is not None
            and lst.ending == analysis.EOF
            and page > 0
            and prev_cookies is not None
            and len(prev_cookies) > page
        )
        if cookie == 0 and lst is not None and (lst.ending != analysis.EOF or unfinished):
            lst._restart_idx.append(len(lst._rows))  # a restart
            if unfinished:
                lst.ending = analysis.CUT_OFF
        elif lst is None or (lst.ending == analysis.EOF and not reads_on) or cookie == 0:
            lst = self.lst = _new_listing(self.client, self.fh, ts, began_before=cookie != 0)
            self.seen, self.last_reply_cookie, self.older = _NONE, None, set()
            self.prev_cookies, self.page = None, 0
            self.out.append(lst)
        else:
            if reads_on:
                lst.ending = analysis.CUT_OFF
            if prev_cookies is not None and len(prev_cookies) and cookie is not None:
                at = np.flatnonzero(prev_cookies == np.uint64(cookie))
                if len(at) and at[0] + 1 < len(prev_cookies):
                    self.page = max(page, int(at[0]) + 1)
            # A client continues from the last cookie of its previous reply; from an older
            # one, a second pass over the same directory interleaves with this one.
            last = self.last_reply_cookie
            if last is not None and cookie != last and cookie in self.older:
                lst.ambiguous_rows.append(len(lst._rows))
        lst._rows.append(i)
        lst.end = int(ts if reply_ts is None else reply_ts)
        if reply_ts is None:
            lst.missing_replies += 1
            return
        status = row.status
        if status != 0:
            lst.ending, lst.error = analysis.ERROR, int(status)
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
            lst.ending = analysis.EOF


def _give_rpcs(out, rd):
    """Each listing's READDIRs as its rpcs frame, its fileid where a READDIR knew it, and its
    restarts set aside where two passes interleave."""
    cookie_na = rd["cookie"].isna().to_numpy()
    fileid_na = rd["fileid"].isna().to_numpy()
    fileid = rd["fileid"].to_numpy("int64", na_value=0)
    # The columns the analysis and the verdict read, of every listing's READDIRs one listing
    # after the other in one frame, each listing's rows a slice of it: a frame of its own for
    # each of a server's thousands of listings cost ten times more.
    order = np.array([i for lst in out for i in lst._rows], dtype=np.int64)
    whole = pd.DataFrame(
        {
            "ts": rd["ts"].to_numpy("int64")[order],
            "pid": np.full(len(order), None, dtype=object),
            "comm": rd["client"].to_numpy(object)[order],
            # Cookies are 64-bit (ext4 gives hashes near 2**63): never through a float.
            "cookie": rd["cookie"].to_numpy("uint64", na_value=0)[order],
            "dtsize": rd["maxcount"].to_numpy("float64", na_value=np.nan)[order],
            "entries": rd["entries"].to_numpy("float64", na_value=np.nan)[order],
            "eof": rd["eof"].to_numpy(object)[order],
            "xid": rd["xid"].array[order],
            "error": np.full(len(order), np.nan),
            "frame": rd["frame"].to_numpy("int64")[order],
        }
    )
    start = 0
    for lst in out:
        if lst.ambiguous_rows:
            # Two passes interleave: a cookie-0 READDIR may be the other reader's start as
            # well as a restart, so none of them is counted as either.
            lst.ambiguous_rows = sorted(set(lst.ambiguous_rows) | set(lst._restart_idx))
            lst._restart_idx = []
        rows = np.array(lst._rows, dtype=np.int64)
        lst.rpcs = whole.iloc[start : start + len(rows)].reset_index(drop=True)
        start += len(rows)
        if cookie_na[rows].any():  # a call whose cookie is not known: pd.NA, not 0
            ck = lst.rpcs["cookie"].tolist()
            na = cookie_na[rows].tolist()
            lst.rpcs = lst.rpcs.assign(
                cookie=np.array([pd.NA if n else v for v, n in zip(ck, na)], dtype=object)
            )
        lst.rpc_rows = list(lst._rows)
        known = np.flatnonzero(~fileid_na[rows])
        if len(known):
            lst.fileid = int(fileid[rows[known[0]]])
