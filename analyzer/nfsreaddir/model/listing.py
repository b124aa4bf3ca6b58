"""What the readdir analysis answers, per trace: its listings, each with its READDIRs, restarts
and invalidations (analysis.analyze and wire.analyze fill them in; the rules judge them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import events
from ..recordtype import field, record
from ..units import NS
from .columns import Columns, isna
from .reader import EOF, UNKNOWN, Restart  # noqa: F401 (a listing is made of Restarts)


def _no_rows():
    """An empty table of READDIRs (no pandas: what a listing is and what a trace cannot answer
    are asked by check's path, which makes no frame)."""
    return Columns()


class AnalysisError(Exception):
    """The input cannot answer the question; the message says what to record instead."""


@record
class Invalidation:
    ts: int
    reason: str
    chain: list  # the steps that led to it: revalidate, GETATTR, ...
    followed_by_restart: bool | None  # None: not known (no cookies, or only ambiguous ones)
    # The listing's next READDIR went back to cookie 0 for a cause the trace cannot tell.
    followed_by_ambiguous: bool = False
    # The listing's next READDIR filled again the first page, which held the reader: the
    # invalidation cost what it costs any kernel, and tested nothing.
    refilled_start: bool = False


@record(slots=True)
class Listing:
    pid: int | None  # None: not known (a listing seen on the wire)
    comm: str
    dev: int | None
    fileid: int | None
    start: int
    end: int
    delimited_by: str = "readdirs"
    phase: str | None = None
    status: int | None = None  # the reproducer's lister exit status
    entries: int | None = None
    ending: str = UNKNOWN
    error: int | None = None  # errno of the error that stopped it
    # Its READDIRs (empty until the reader that builds the listing sets them): the rows of the
    # trace's rpc table (columns.Columns), or a wire listing's wire_passes.Rows (the same
    # columns, each a Series when asked).
    rpcs: Any = field(repr=False, default_factory=_no_rows)
    # Sequences, not lists: a wire listing has one empty tuple for all those it never fills.
    restart_rows: Sequence = field(default_factory=list)  # READDIR indexes of the restarts
    ambiguous_rows: Sequence = field(default_factory=list)  # cookie-0 READDIRs, unknown cause
    refill_rows: Sequence = field(default_factory=list)  # cookie-0 refills of the first page
    restarts: Sequence = field(default_factory=list)
    # What the restarts would be if every ambiguous READDIR were one: the other bound.
    possible_restarts: Sequence = field(default_factory=list)
    invalidations: Sequence = field(default_factory=list)
    version_changes: int | None = None  # times the directory's change attribute moved
    # READDIRs that met a change of the directory and went on past every cookie asked before:
    # the kernel did not restart there (None: no cookies).
    survived: int | None = None
    other_readers: bool = False  # another process listed the directory at the same time
    # The trace's kernel looks for the reader's cookie from the first cached page (before
    # 5.18; None: not known), see events.searches_from_first_page.
    searches_from_first_page: bool | None = None
    cache_range_trims: int | None = 0  # None: not known (no readdir cache on the wire)
    getdents: int | None = None  # None: the trace has no getdents event
    rewinds: list | None = None  # ts of each seek back to 0; None: not observable
    began_before_trace: bool = False
    # When the reader was first past the start of the directory (None: it never was). Only a
    # change after that can make it restart: a poller's revalidation when it opens the
    # directory drops a cache it has not read from yet.
    progressed_at: int | None = None
    # Its rows of the canonical rpc table (a wire listing's: a numpy array).
    rpc_rows: Any = field(default_factory=list)
    damage: list = field(default_factory=list)  # damaged or lost events during it
    dentries: dict = field(default_factory=dict)
    cookies_known: bool = True
    # False where nothing that reports an invalidation was recorded (a trace of RPCs only, a
    # packet capture): the list above is then empty because it could not be seen, not because
    # nothing happened.
    invalidations_known: bool = True

    @property
    def complete(self):
        return self.ending == EOF and not self.began_before_trace

    @property
    def timed_out(self):
        return self.status == 124

    @property
    def restart_count(self):
        """Restarts (at cookie 0 or below the reader's position); None when the trace cannot
        tell: no cookies, or READDIRs that went back for a cause it does not show."""
        return len(self.restarts) if self.cookies_known and not self.ambiguous_rows else None

    @property
    def restart_range(self):
        """(fewest, most) restarts the trace allows; None without cookies."""
        if not self.cookies_known:
            return None
        return len(self.restarts), len(self.possible_restarts)

    @property
    def exercising(self):
        """The invalidations that came while the reader was past the start, but for those
        whose cost was the refill of the first page that still held the reader."""
        if self.progressed_at is None:
            return []
        return [
            i for i in self.invalidations if i.ts >= self.progressed_at and not i.refilled_start
        ]

    @property
    def exercised(self):
        """The directory changed under the listing, after the reader was past the start, in a
        way that makes a restart possible: its cache was invalidated, or (5.18+) its change
        attribute moved (cache_range_trims and version_changes count only such changes)."""
        return bool(
            self.exercising
            or self.cache_range_trims
            or self.version_changes
            or self.restarts
            or self.survived
        )

    def label(self):
        who = f"{self.comm}[{self.pid}]"
        return f"listing of dir {self.fileid if self.fileid is not None else '?'} by {who}" + (
            f" ({self.phase})" if self.phase else ""
        )

    def summary(self):
        # Each column read once and counted in numpy where it is a numpy one: a server's
        # capture has thousands of listings, and pandas' dropna and notna on each cost more
        # than the listing's own finding.
        known = self.cookies_known
        sure = known and not self.ambiguous_rows
        lo, hi = self.restarts, self.possible_restarts
        followed = [bool(i.followed_by_restart) for i in self.invalidations]
        maybe = [bool(i.followed_by_restart or i.followed_by_ambiguous) for i in self.invalidations]
        with_invals = known and self.invalidations_known
        return {
            "phase": self.phase,
            "pid": self.pid,
            "comm": self.comm,
            "dev": self.dev,
            "dir_fileid": self.fileid,
            "delimited_by": self.delimited_by,
            "seconds": round((self.end - self.start) / NS, 3),
            "entries": self.entries,
            "status": self.status,
            "ending": self.ending,
            "complete": self.complete,
            "error": self.error,
            "began_before_trace": self.began_before_trace,
            "timed_out": self.timed_out,
            "getdents": self.getdents,
            "readdirs": int(len(self.rpcs)),
            "cookie_zero_readdirs": _zeros(self.rpcs["cookie"]) if known else None,
            # Where the trace cannot tell, null, and the bounds it allows beside it.
            "restarts": self.restart_count,
            "restarts_min": len(lo) if known else None,
            "restarts_max": len(hi) if known else None,
            "ambiguous_cookie_zero_readdirs": len(self.ambiguous_rows) if known else None,
            "rewinds": len(self.rewinds) if self.rewinds is not None else None,
            "refetched_readdirs": sum(r.refetched for r in lo) if sure else None,
            "refetched_readdirs_min": sum(r.refetched for r in lo) if known else None,
            "refetched_readdirs_max": sum(r.refetched for r in hi) if known else None,
            "restart_cost_seconds": (round(sum(r.cost_ns for r in lo) / NS, 3) if sure else None),
            "restart_cost_seconds_max": (
                round(sum(r.cost_ns for r in hi) / NS, 3) if known else None
            ),
            "invalidations": len(self.invalidations) if self.invalidations_known else None,
            "invalidations_followed_by_restart": (
                sum(followed) if with_invals and not self.ambiguous_rows else None
            ),
            "invalidations_followed_by_restart_min": sum(followed) if with_invals else None,
            "invalidations_followed_by_restart_max": sum(maybe) if with_invals else None,
            "survived_changes": self.survived,
            "start_refills": len(self.refill_rows) if known else None,
            "version_changes": self.version_changes,
            "cache_range_trims": self.cache_range_trims,
            "exercised": self.exercised,
            "damaged_events": len(self.damage),
            "max_dtsize": _most(self.rpcs["dtsize"]),
            "dentries": self.dentries,
        }


def _zeros(col):
    """How many of the column's known values are 0."""
    v = np.asarray(col)
    if v.dtype.kind in "iuf":  # NaN is not 0
        return int(np.count_nonzero(v == 0))
    return sum(1 for x in v[~isna(v)].tolist() if x == 0)


def _most(col):
    """The column's largest known value as an int, None where none is known."""
    v = np.asarray(col)
    v = v[~isna(v)]
    return int(v.max()) if len(v) else None


class LazyTables(dict):
    """{table: DataFrame} of an analysis. A value may be a function that makes the table, made
    when it is first asked for: a capture's table of READDIRs has a row each, and only export
    asks for it, so an analysis to print does not hold it."""

    def __getitem__(self, name):
        v = super().__getitem__(name)
        if callable(v):
            v = v()
            self[name] = v
        return v

    def get(self, name, default=None):
        return self[name] if name in self else default


@record
class Analysis:
    listings: Sequence  # a list; a capture's: a spool.ListingSpool, read back from disk
    run: dict
    # The reproducer's counter samples (markers.Markers.counters); None: none (a capture)
    samples: Columns | None
    evidence: dict  # table -> the events it came from
    cookies_known: bool
    info: dict
    recorded: dict = field(default_factory=dict)  # table -> events recorded (fired or not)
    # the canonical tables it read: a trace's Columns, a capture's frames (columns.frame makes
    # either a DataFrame)
    tables: dict = field(default_factory=dict, repr=False)
    # {listing number: roundtrips.RoundTrips}: the RPCs each listing's reader sent (the
    # pipeline fills it in; empty where the input has no such evidence).
    round_trips: dict = field(default_factory=dict, repr=False)

    @property
    def kernel(self):
        """The kernel release the trace was recorded on, where it says."""
        return events.release(self.run.get("kernel") or self.info.get("uname"))

    def to_dict(self, each=None, array=lambda items: list(items())):
        """The analysis as `analyze --json` gives it. each(number, listing): what to add to a
        listing's summary; array(items): the JSON array of what items() yields, a list, or a
        presenter's array written as it is made (a capture's listings are read back from disk
        one at a time, model/spool, each time items() goes through them)."""

        def summaries():
            for n, lst in enumerate(self.listings):
                s = lst.summary()
                yield s if each is None else dict(s, **each(n, lst))

        return {
            "trace": self.info,
            "run": self.run,
            "evidence": self.evidence,
            "cookies_known": self.cookies_known,
            "listings": array(summaries),
            "restarts": array(
                lambda: (
                    [vars(r) for r in lst.restarts] if lst.cookies_known else None
                    for lst in self.listings
                )
            ),
            "rewinds": array(lambda: (lst.rewinds for lst in self.listings)),
            "invalidations": array(
                lambda: (
                    [vars(i) for i in lst.invalidations] if lst.invalidations_known else None
                    for lst in self.listings
                )
            ),
        }


# ------------------------------------------------------------------------------ per listing
