"""The passes of a capture: its READDIRs cut into listings, one per client's pass over a
directory (wire.py says what a capture can and cannot tell of them)."""

from __future__ import annotations

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
    """The listings of a Capture, in time order."""
    rd = cap.readdirs
    # Plain lists and arrays, read once: a server's capture has thousands of listings, and a
    # pandas selection for each cost more than the whole decoding.
    cols = {c: rd[c].tolist() for c in ("ts", "cookie", "reply_ts", "status", "cookies", "eof")}
    out = [
        lst for (client, fh), idx in by_dir(rd).items() for lst in _passes(client, fh, idx, cols)
    ]
    _give_rpcs(out, rd)
    return sorted(out, key=lambda x: (x.start, x.client))


def _passes(client, fh, idx, cols):
    """One client's passes over one directory: its READDIRs (rows idx of cols, in time order)
    cut where one pass ends and the next begins, their restarts and refetched entries."""
    out = []
    lst = None
    seen: set[int] = set()  # entry cookies this pass has been given
    last_reply_cookie = None
    older: set[int] = set()  # last cookies of earlier replies of this pass
    prev_cookies = None  # the entry cookies of the pass's previous reply
    page = 0  # most entries the client took of a reply it did not use whole
    seen_before: set[int] = set()  # entry cookies given before the reply being read
    for i in idx:
        ts, c, reply_ts = cols["ts"][i], cols["cookie"][i], cols["reply_ts"][i]
        status, cookies, eof = cols["status"][i], cols["cookies"][i], cols["eof"][i]
        cookie = None if pd.isna(c) else int(c)
        # A reply with eof ends the pass only when the client asks nothing more of it:
        # 5.10 fills one page of its readdir cache from each reply and asks again from
        # the last cookie that fitted the page, a cookie of a reply of this pass, so after
        # an eof reply it reads on from inside it.
        reads_on = (
            lst is not None and lst.ending == analysis.EOF and bool(cookie) and cookie in seen
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
            seen_before = set(seen)
        elif lst is None or (lst.ending == analysis.EOF and not reads_on) or cookie == 0:
            if lst is not None:
                out.append(lst)
            lst = _new_listing(client, fh, ts, began_before=cookie != 0)
            seen, last_reply_cookie, older = set(), None, set()
            prev_cookies, page = None, 0
            seen_before = set()
        else:
            if reads_on:
                lst.ending = analysis.CUT_OFF
            if prev_cookies and cookie in prev_cookies:
                took = prev_cookies.index(cookie) + 1
                if took < len(prev_cookies):
                    page = max(page, took)
            seen_before = seen
            # A client continues from the last cookie of its previous reply; from an older
            # one, a second pass over the same directory interleaves with this one.
            if last_reply_cookie is not None and cookie != last_reply_cookie and cookie in older:
                lst.ambiguous_rows.append(len(lst._rows))
        lst._rows.append(i)
        lst.end = int(ts if pd.isna(reply_ts) else reply_ts)
        if pd.isna(reply_ts):
            lst.missing_replies += 1
            continue
        if status != 0:
            lst.ending, lst.error = analysis.ERROR, int(status)
            continue
        cookies = cookies.tolist() if cookies else []  # as ints once, not at each use
        again = seen_before.intersection(cookies)  # none, or all: no need to count one by one
        partly = 0 < len(again) < len(cookies)
        lst.refetched_entries += sum(map(again.__contains__, cookies)) if partly else len(again)
        seen.update(cookies)
        prev_cookies = cookies
        if last_reply_cookie is not None:
            older.add(last_reply_cookie)
        if cookies:
            last_reply_cookie = cookies[-1]
        if eof:
            lst.ending = analysis.EOF
    if lst is not None:
        out.append(lst)
    return out


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
