"""What the report says first: the answer in one sentence a support engineer can forward, the
few listings that matter (worst first), and what to record so that the next trace tells more.

Read from the verdict and its findings (rules/verdict.py) and the listings, in the glossary's
words (the verdict's good, bad, cannot decide as `check` says them; restart, invalidation,
change of the directory, READDIR), never in git bisect's (skip). A count the trace cannot pin
down is shown as the range it allows ("25-26")."""

import re

from .. import events, status
from ..recordtype import field, record
from ..rules.words import counted
from ..status import BAD, GOOD
from .charts import changes
from .render import lost_text
from .timeline import process_of, readdirs

WORST = 5  # listings shown under the answer
# Findings with nothing to tell: no change of the directory met, or no end and no restart.
QUIET = ("untested", "unfinished")


def word(code):
    """The verdict's word, as check's line begins (glossary.VERDICTS says each)."""
    return status.word(code) if code in (GOOD, BAD) else status.word(status.UNDECIDED)


@record
class Seen:
    """What the page shows of one listing, kept while its analysis' listings are gone through
    once (a capture's are read back from disk one at a time)."""

    n: int  # its number in its analysis
    who: str
    label: str
    start: int
    end: int
    word: str  # its finding
    why: str
    readdirs: int
    restarts: tuple | None  # (at least, at most); None: no cookies, cannot be seen
    # What its restarts cost getting back, READDIRs and ns: (at least, at most), as the
    # restarts are a range where the trace cannot tell a restart from a new listing.
    refetched: tuple
    lost_ns: tuple
    invalidation_count: int | None  # None: not recorded
    version_changes: int | None
    invalidations: list = field(default_factory=list)  # ts
    restart_ts: list = field(default_factory=list)
    changes: list = field(default_factory=list)  # (ts, words)

    @property
    def quiet(self):
        return self.word in QUIET and not (self.restarts and self.restarts[1])

    @property
    def badness(self):
        """What ranks listings worst first: restarts, time lost, READDIRs re-fetched; then a
        listing the trace cannot decide before one it can."""
        hi = self.restarts[1] if self.restarts else 0
        return (hi, self.lost_ns[1], self.refetched[1], self.word == "undecided", not self.quiet)

    @property
    def refetched_text(self):
        lo, hi = self.refetched
        return str(lo) if lo == hi else f"{lo}-{hi}"

    @property
    def lost_text(self):
        lo, hi = (x / 1e9 for x in self.lost_ns)
        return f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"

    @property
    def restarts_text(self):
        if self.restarts is None:
            return "cannot tell"
        lo, hi = self.restarts
        return str(lo) if lo == hi else f"{lo}-{hi}"


def seen(analysis, verdict):
    """A Seen of each listing of the analysis, in its order."""
    out = []
    for n, lst in enumerate(analysis.listings):
        f = verdict.finding(lst)
        rd = readdirs(lst)
        lo = len(lst.restarts)
        hi = max(lo, len(lst.possible_restarts)) if lst.ambiguous_rows else lo
        out.append(
            Seen(
                n=n,
                who=process_of(lst),
                label=f"the listing of dir {_dir(lst)} by {process_of(lst)}"
                + (f" ({lst.phase})" if lst.phase else ""),
                start=lst.start,
                end=lst.end,
                word=f.word,
                why=f.why,
                readdirs=len(rd),
                restarts=(lo, hi) if lst.cookies_known else None,
                refetched=(
                    sum(r.refetched for r in lst.restarts),
                    sum(r.refetched for r in (lst.possible_restarts if hi > lo else lst.restarts)),
                ),
                lost_ns=(
                    sum(r.cost_ns for r in lst.restarts),
                    sum(r.cost_ns for r in (lst.possible_restarts if hi > lo else lst.restarts)),
                ),
                invalidation_count=len(lst.invalidations) if lst.invalidations_known else None,
                version_changes=lst.version_changes,
                invalidations=[i.ts for i in lst.invalidations],
                restart_ts=[r.ts for r in lst.restarts],
                changes=changes(lst, rd),
            )
        )
    return out


def _dir(lst):
    return lst.fileid if lst.fileid is not None else "?"


def _times(text):
    return "once" if text == "1" else f"{text} times"


def _after(s):
    """'after 5 invalidations', or the changes of the directory where invalidations are not
    recorded (a capture), or ''."""
    if s.invalidation_count:
        return f" after {counted(s.invalidation_count, 'invalidation')}"
    if s.version_changes:
        return f" after {counted(s.version_changes, 'change')} of the directory"
    return ""


def _refetch(s):
    """What the restarts cost, in words."""
    lo, hi = s.refetched
    if not hi:
        return ""
    lost = f" ({s.lost_text} s of its {(s.end - s.start) / 1e9:.2f} s)"
    if 2 * lo > s.readdirs:
        return f"; most of its READDIRs re-read what it had already read{lost}"
    return (
        f"; {s.refetched_text} of its {s.readdirs} READDIRs re-read what it had already read{lost}"
    )


def cleaned(reason):
    """A verdict's reason without its leading word (the page shows it apart)."""
    return re.sub(r"^[a-z ]+: ", "", reason, count=1)


def _proof(s):
    """What ranks the listings that show the kernel going on at a change, best first."""
    return (s.word == "good", s.invalidation_count or 0, s.version_changes or 0, s.readdirs)


def sentence(verdict, seen_):
    """The answer for one input, one sentence (two where other listings restarted too)."""
    if verdict.code == BAD:
        bad = [s for s in seen_ if s.word == "bad"]
        if not bad:  # bad for a reason of the run's (names repeated or lost, READDIR counts)
            return f"A listing went wrong: {cleaned(verdict.reason)}."
        w = max(bad, key=lambda s: s.badness)
        text = (
            f"{w.label[0].upper()}{w.label[1:]} restarted {_times(w.restarts_text)}{_after(w)}"
            f"{_refetch(w)}."
        )
        if len(bad) > 1:
            text += f" {counted(len(bad) - 1, 'other listing')} restarted too."
        return text
    proof = [s for s in seen_ if s.word in ("good", "survived")]
    if verdict.code == GOOD and proof:
        b = max(proof, key=_proof)
        more = f" ({counted(len(proof) - 1, 'other listing')} too)" if len(proof) > 1 else ""
        return f"No listing went back to the start: {b.label} {b.why}{more}."
    if verdict.code == GOOD:  # good for a reason of the run's (READDIR counts)
        return f"No listing went back to the start: {cleaned(verdict.reason)}."
    return f"This trace cannot decide whether a listing restarted: {cleaned(verdict.reason)}."


def worst(pairs, k=WORST):
    """The listings that matter, worst first: at most k of the (anything, Seen) pairs, none
    that is quiet."""
    mattering = (p for p in pairs if not p[1].quiet)
    return sorted(mattering, key=lambda p: p[1].badness, reverse=True)[:k]


def advice(analysis, verdict):
    """What to record next time so that the trace tells more (the verdict's own advice, else
    what the trace lacks), and what it lost; [] if nothing."""
    out = []
    missing = set()
    if not analysis.cookies_known:
        missing.add("rpc")
    recorded = analysis.recorded.get("invalidations")
    if not recorded and not analysis.evidence.get("version"):
        missing.add("invalidations")
    if verdict.advice:
        out.append(f"Record with: {verdict.advice}")
    elif missing:
        out.append(f"Record with: {events.record_advice(analysis.kernel, missing)}")
    if analysis.evidence.get("version") and not recorded:
        out.append(
            "A capture shows the changes of a directory but no invalidation: trace the client "
            "to count them."
        )
    lost = lost_text(analysis.info)
    if lost:
        out.append(f"The trace lost events ({lost}): the counts are lower bounds.")
    return out
