"""Every rule that turns analyses into an answer: good, bad, or cannot decide.

`git bisect run` acts on the exit status, and a false good or bad costs a user days, so an
answer claims only what the trace shows. Each listing is judged on its own:

    bad        it restarted (more often than allowed): at cookie 0, or below the reader's
               position (see analysis)
    undecided  the trace cannot rule out a restart in it: no READDIR cookies, READDIRs that went
               back for a cause the trace cannot tell, or events damaged or lost during it
    survived   it did not reach the end of its directory in the trace, but met a change of its
               directory mid-way and went on: its next READDIR asked for a cookie above every
               one it had asked before (not cookie 0, not a page it had), so the kernel did
               not restart it there
    unfinished it did not reach the end of its directory (closed, killed, cut off by the trace),
               survived no change, and restarted nowhere in what the trace shows: no evidence
               either way
    good       its directory changed under it once it had read past the first page (the cache
               was invalidated, or on 5.18+ its change attribute moved), it reached the end,
               and it did not restart
    untested   its directory did not change under it after it left the first page: no restart
               was possible (a change while the reader is still in the first page makes every
               kernel fill that page again, and tests nothing)

A survived change proves that the kernel went on at a change, except where another reader of
the same directory could have refilled its first pages on a kernel that searches from the first
page (before 5.18, or a kernel the trace does not name): there the listing is unfinished.

A trace, or a run of several, is bad when any listing is bad; cannot decide when any listing is
undecided, as a restart may hide there, unless that listing only went back to cookie 0 for a
cause the trace cannot tell (a restart, or a new open of a poller beside it) and another listing
proved by a survived change that the kernel goes on: a definite restart anywhere is bad, but
such returns to cookie 0 do not undo that proof. Otherwise it is good when at least one listing
is good or survived; and cannot decide otherwise, since nothing exercised the bug. An unfinished
listing does not stop the others from deciding: a directory poller stopped mid-listing when the
trace ends says nothing against the listings that finished. Without cookies, the READDIRs of a
modified listing against an idle one of the same run decide instead, and a reproducer's run is
also bad when a listing repeated or lost a name. `check`, results.json, vm-run and bisect-run all
answer through judge().
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import events, status
from ..model.reader import CLOSED, CUT_OFF, ENDINGS, EOF, ERROR, KILLED, UNKNOWN
from ..recordtype import record
from ..status import BAD, GOOD, UNDECIDED
from .limits import MAX_RATIO
from .words import counted, damage_summary

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ..model.listing import Analysis, Listing

# Without cookies, a ratio of small counts means little: 6.1 spends one READDIR per
# invalidation to continue a listing, 3 against 9 on a small directory. Ask for both.
MIN_EXTRA_READDIRS = 10


class Finding(NamedTuple):  # (not a dataclass: see events.py)
    listing: Listing
    word: str  # bad, undecided, survived, unfinished, good, untested
    why: str


# The verdict line's length a reader takes in at once: what explains it (the evidence, what
# to record next time) goes on lines of its own (Verdict.advice; the analysis' evidence).
LINE = 200


@record
class Verdict:
    code: int  # 0 good, 1 bad, 125 cannot decide (git bisect run's meaning)
    reason: str  # one line of about LINE characters: which listing decided, and why
    max_restarts: int = 0  # the restarts a listing was allowed
    # What to record so that the next input decides, for this one's kernel and kind (a
    # sentence of its own, said after the verdict line; "" where nothing would help).
    advice: str = ""

    def said(self, code: int, reason: str, advice: str = "") -> Verdict:
        """This verdict with its answer."""
        self.code, self.reason, self.advice = code, reason, advice
        return self

    def finding(self, lst: Listing) -> Finding:
        """The finding this verdict came to on one listing (judged again: a verdict keeps no
        finding of every listing, a server's capture has tens of thousands)."""
        return judge_listing(lst, self.max_restarts)

    @property
    def word(self) -> str:
        return status.bisect_word(self.code)

    @property
    def result(self) -> str:
        return status.result_word(self.code)

    def to_dict(self) -> dict[str, Any]:
        """The verdict as `analyze --json` and `watch --json` give it."""
        return {"code": self.code, "word": self.word, "reason": self.reason}


def _change(lst: Listing) -> str:
    """What changed under a listing, in words."""
    parts = []
    if lst.exercising:
        parts.append(counted(len(lst.exercising), "invalidation"))
    if lst.cache_range_trims:
        parts.append(counted(lst.cache_range_trims, "cache trim"))
    if lst.version_changes:
        parts.append(counted(lst.version_changes, "change") + " of its change attribute")
    return " and ".join(parts) or "no change of its directory"


def _times(n: int, most: int | None = None) -> str:
    """'once', '5 times', or the range the evidence allows: '25-26 times'."""
    if most is not None and most > n:
        return f"{n}-{most} times"
    return "once" if n == 1 else f"{n} times"


def _where(restarts: Sequence) -> str:
    """Where restarts went back to: 'at cookie 0', below the reader's position, or both."""
    below = sum(1 for r in restarts if r.cookie)
    return (
        "at cookie 0"
        if not below
        else "below the reader's position"
        if below == len(restarts)
        else f"({len(restarts) - below} at cookie 0, {below} below the reader's position)"
    )


def _restarted(
    lst: Listing, restarts: Sequence, invalidations: int, most: int | None = None
) -> str:
    """'restarted 5 times at cookie 0 after 5 invalidations (157 READDIRs)'; most: the most
    restarts the evidence allows, where more than len(restarts) (a range, as the table says)."""
    return (
        f"restarted {_times(len(restarts), most)} {_where(restarts)}"
        + (f" after {counted(invalidations, 'invalidation')}" if invalidations else "")
        + f" ({len(lst.rpcs)} READDIRs)"
    )


def survival_counts(lst: Listing) -> bool:
    """Whether the listing's survived changes prove that its kernel goes on at a change: not
    where another reader of the directory could have made it restart below its position
    without a READDIR at cookie 0 the trace would show as one (see the module's text)."""
    return bool(lst.survived) and not (
        lst.other_readers and lst.searches_from_first_page is not False
    )


def _went_back_to_zero(lst: Listing) -> bool:
    """Every ambiguous READDIR of the listing asked for cookie 0: a restart, or a new open."""
    if not lst.ambiguous_rows:
        return False
    cookies = np.asarray(lst.rpcs["cookie"])
    return all(cookies[i] == 0 for i in lst.ambiguous_rows)


def _who(lst: Listing) -> str:
    """Who listed: comm[pid], or a capture's client."""
    return f"{lst.comm}[{lst.pid}]" if lst.pid is not None else f"client {lst.comm}"


# How a listing that did not reach the end of its directory ended, in a clause.
_UNENDED = {
    ERROR: "stopped by an error",
    KILLED: "killed by a signal",
    CLOSED: "closed before the end",
    CUT_OFF: "cut off by the end of the trace",
    UNKNOWN: "the trace has no end-of-listing event",
}


def _unended(lst: Listing) -> str:
    return "began before the trace" if lst.began_before_trace else _UNENDED[lst.ending]


def judge_listing(lst: Listing, max_restarts: int = 0) -> Finding:
    """The finding for one listing (see the module's text)."""
    if lst.cookies_known and len(lst.restarts) > max_restarts:
        inv = sum(bool(i.followed_by_restart) for i in lst.invalidations)
        why = _restarted(lst, lst.restarts, inv, len(lst.possible_restarts))
        if lst.ending != EOF:
            why += f", and did not reach the end ({ENDINGS[lst.ending]})"
        return Finding(lst, "bad", why)
    if lst.damage:
        lo, hi = lst.restart_range or (0, 0)
        # (a return to the start next to a loss could be a new listing: a range)
        lost = f"data was lost ({damage_summary(lst.damage)})"
        return Finding(lst, "undecided", f"{lo}-{hi} restarts, as {lost}" if hi else lost)
    if not lst.cookies_known:
        return Finding(
            lst, "undecided", "the trace has no READDIR cookies, so a restart cannot be seen"
        )
    if lst.ambiguous_rows:
        lo, hi = lst.restart_range
        once = f"; {hi} if {_who(lst)} opened the directory once" if hi > lo else ""
        return Finding(
            lst,
            "undecided",
            f"{lo}-{hi} restarts: {counted(len(lst.ambiguous_rows), 'READDIR')} went back for a "
            f"cause the trace cannot tell (a restart, a rewind or a new open){once}",
        )
    survived = (
        f"went on past {counted(lst.survived, 'change')} of its directory without a restart"
        if lst.survived
        else ""
    )
    if not lst.complete:
        if survival_counts(lst) and not lst.restarts:
            return Finding(
                lst,
                "survived",
                f"{survived}; the end of the directory was not seen ({_unended(lst)})",
            )
        return Finding(
            lst, "unfinished", f"the end of the directory was not seen ({_unended(lst)})"
        )
    allowed = (
        f"{counted(len(lst.restarts), 'restart')} {_where(lst.restarts)}, at most "
        f"{max_restarts} allowed"
        if lst.restarts
        else ""
    )
    if not lst.exercised:
        return Finding(
            lst,
            "untested",
            "its directory did not change during it after the first page, so no restart was "
            "possible" + (f"; {allowed}" if allowed else ""),
        )
    return Finding(
        lst,
        "good",
        f"met {_change(lst)} and reached the end with {allowed or 'no restart'}"
        + (f", going on past {counted(lst.survived, 'change')} mid-way" if lst.survived else ""),
    )


def _ratio_rule(by_phase: dict[str, Listing], max_ratio: float) -> tuple[int, str] | None:
    """Without cookies: the modified listing's READDIRs against the idle one's of the same run
    (by_phase: {phase: its listing}). Returns (code, text) or None when the run has no such
    pair."""
    if not ("idle" in by_phase and "modified" in by_phase):
        return None
    idle, mod = by_phase["idle"], by_phase["modified"]
    ni, nm = len(idle.rpcs), len(mod.rpcs)
    ratio = nm / max(ni, 1)
    text = (
        f"the modified listing needed {nm} READDIRs against {ni} idle ({ratio:.2f}x; "
        f"limit {max_ratio}x and at least {MIN_EXTRA_READDIRS} more)"
    )
    if ratio > max_ratio and nm - ni >= MIN_EXTRA_READDIRS:
        return BAD, text
    if ratio > max_ratio:
        return UNDECIDED, text + ": too few READDIRs to tell"
    f = judge_listing(mod)
    if mod.damage or not mod.complete:
        return UNDECIDED, text + f", but {f.why}"
    if not mod.exercised:
        return UNDECIDED, text + ", but its directory did not change during it"
    return GOOD, text + f"; it met {_change(mod)} and reached the end"


@record
class _Kind:
    """The findings of one word: how many, and the one that speaks for them (the first, or
    the one with the highest key, the first of those), with the analysis it is of."""

    count: int = 0
    finding: Any = None  # a Finding, once one is added
    analysis: Any = None
    key: tuple = ()

    def add(self, f: Finding, a: Analysis, key: tuple | None = None) -> None:
        self.count += 1
        if self.finding is None or (key is not None and key > self.key):
            self.finding, self.analysis, self.key = f, a, key or ()


class _Tally:
    """What judge() needs of the findings, counted listing by listing: a server's capture has
    tens of thousands of listings, read back one at a time (model/spool), and only the few
    that speak for the others are kept."""

    def __init__(self, max_restarts: int) -> None:
        self.max_restarts = max_restarts
        self.listings = 0
        self.delimited: set[str] = set()
        self.by_phase: dict = {}  # phase -> its listing, the last one (a reproducer's few)
        self.bad, self.good, self.unfinished = _Kind(), _Kind(), _Kind()
        # Undecided listings apart by whether a proof that the kernel goes on (a good or
        # survived listing, known only at the end) would excuse them: only returns to cookie 0
        # that may be new opens, nothing damaged.
        self.strict, self.excusable = _Kind(), _Kind()
        self.first_undecided: _Kind | None = None  # which of the two came first
        self.proof = False

    def add(self, a: Analysis, lst: Listing) -> None:
        f = judge_listing(lst, self.max_restarts)
        self.listings += 1
        self.delimited.add(lst.delimited_by)
        if lst.phase:
            self.by_phase[lst.phase] = lst
        if f.word == "bad":
            self.bad.add(f, a, (len(lst.restarts), len(lst.rpcs)))
        elif f.word == "undecided":
            kind = self.excusable if not lst.damage and _went_back_to_zero(lst) else self.strict
            kind.add(f, a)
            if self.first_undecided is None:
                self.first_undecided = kind
        elif f.word in ("good", "survived"):
            self.proof = self.proof or survival_counts(lst)
            key = (f.word == "good", len(lst.invalidations), lst.survived or 0, len(lst.rpcs))
            self.good.add(f, a, key)
        elif f.word == "unfinished":
            self.unfinished.add(f, a)

    def undecided(self) -> tuple[int, _Kind | None]:
        """(the undecided listings that keep the answer open, the first of them or None)."""
        if self.proof:  # a return to cookie 0 that may be a new open does not undo a proof
            return self.strict.count, self.strict
        first = self.first_undecided
        return self.strict.count + self.excusable.count, first


def judge(
    analyses: Sequence[Analysis],
    max_restarts: int = 0,
    max_ratio: float = MAX_RATIO,
    names: dict[str, dict] | None = None,
) -> Verdict:
    """One answer from one or more analysed traces (model.listing.Analysis) of one run. names: per
    phase, {"duplicates": n, "missing": n or None} from a reproducer's name check. Its reason
    names the listing that decided and why, in a line; the evidence read is the analyses' own
    (analyze says it above its table, --json in "evidence"), and what to record next time is
    the verdict's advice."""
    t = _Tally(max_restarts)
    for a in analyses:
        for lst in a.listings:
            t.add(a, lst)
    verdict = Verdict(UNDECIDED, "cannot decide: no listing found", max_restarts)
    if not t.listings:
        return verdict
    if t.bad.count:
        worst = t.bad.finding
        more = f"; {counted(t.bad.count - 1, 'other listing')} too" if t.bad.count > 1 else ""
        return verdict.said(BAD, f"bad: {worst.listing.label()} {worst.why}{more}")
    for phase, nm in (names or {}).items():
        if nm.get("duplicates") or nm.get("missing"):
            return verdict.said(
                BAD,
                f"bad: the {phase} listing returned {nm['duplicates']} duplicate "
                f"and {nm['missing'] or 0} missing names",
            )
    if not any(a.cookies_known for a in analyses):
        rule = _ratio_rule(t.by_phase, max_ratio)
        if rule is not None:
            code, text = rule
            return verdict.said(code, f"{status.word(code)}: {text}")
    count, first = t.undecided()
    if count:
        assert first is not None  # (set by the first undecided listing)
        f = first.finding
        more = f"; {counted(count - 1, 'other listing')} undecided too" if count > 1 else ""
        return verdict.said(
            UNDECIDED,
            f"cannot decide: {f.listing.label()}: {f.why}{more}",
            _advice(first.analysis, f),
        )
    unfinished = t.unfinished.count
    if t.good.count:
        best = t.good.finding
        more = f", {unfinished} unfinished" if unfinished else ""
        maybe = t.strict.count + t.excusable.count
        more += f", {maybe} back at cookie 0 for a cause the trace cannot tell" if maybe else ""
        exercised = (
            f"{t.good.count} of {counted(t.listings, 'listing')} exercised"
            if t.listings > 1
            else "its only listing"
        )
        return verdict.said(GOOD, f"good: {best.listing.label()} {best.why} ({exercised}{more})")
    if unfinished:
        f = t.unfinished.finding
        more = (
            f"; {counted(unfinished - 1, 'other listing')} unfinished too" if unfinished > 1 else ""
        )
        return verdict.said(
            UNDECIDED,
            f"cannot decide: {f.listing.label()}: {f.why}{more}; none went on past a change "
            "of its directory",
            _advice(t.unfinished.analysis, f),
        )
    during = (
        f"any of the {t.listings} listings, so none could"
        if t.listings > 1
        else "its only listing, so it could not"
    )
    return verdict.said(
        UNDECIDED,
        f"cannot decide: the bug was never exercised: no directory changed during {during} restart",
    )


# Which answer of several inputs stands for them all: the worst.
_WORST = {BAD: 0, UNDECIDED: 1, GOOD: 2}


def worst(answers: Sequence[tuple[str, Verdict]], again: Iterable[str] = ()) -> Verdict:
    """One Verdict from the verdicts of several inputs ((input, Verdict), each judged on its
    own evidence): the worst of them, which names its input; again: inputs given twice, read
    once."""
    g, v = min(answers, key=lambda a: _WORST.get(a[1].code, 1))
    if len(answers) > 1:
        others = sorted({status.word(w.code) for h, w in answers if h != g})
        v.reason += f" [the worst of {len(answers)} inputs: {g}; the others {', '.join(others)}]"
    if again:
        v.reason += f" [read once, given twice: {', '.join(sorted(set(again)))}]"
    return v


def _advice(a: Analysis, finding: Finding) -> str:
    """What to record so that the next input (a: the analysis of the finding's listing) can
    decide, for this one's kernel and kind; "" where nothing recorded would help. A capture
    names no kernel: the trace of its client tells what the wire cannot, and `record`, run
    there, picks that kernel's events (a recipe of registers would fit one kernel only)."""
    lst = finding.listing
    missing = set()
    if not lst.cookies_known:
        missing.add("rpc")
    if lst.ambiguous_rows or (not lst.complete and lst.ending == UNKNOWN):
        missing.add("calls")
    if not missing:
        return ""
    if "capture" in str(a.info.get("format", "")):
        return (
            "nfs-readdir record -o trace.dat -- COMMAND, run on the client: its trace tells "
            "a restart from a new open"
        )
    return events.record_advice(a.kernel, missing)


def judge_overhead(
    untraced_median: float | None, traced_median: float | None, limit: float
) -> tuple[int, str, float | None]:
    """readdir-overhead: the traced listings' median against the untraced one of the same run.
    Returns (code, text, slowdown)."""
    if not (untraced_median and traced_median):
        return UNDECIDED, "no listing of one kind was timed", None
    slowdown = round(traced_median / untraced_median, 3)
    text = (
        f"traced listing median {traced_median:.3f}s against {untraced_median:.3f}s "
        f"untraced ({(slowdown - 1) * 100:+.1f}%, limit {(limit - 1) * 100:+.0f}%)"
    )
    return (GOOD if slowdown <= limit else BAD), text, slowdown


def from_reasons(fail: list[str], ok: list[str]) -> tuple[str, list[str]]:
    """A reproducer judge's findings as (result word, reasons): any failure is FAIL."""
    return (status.result_word(BAD), fail) if fail else (status.result_word(GOOD), ok)
