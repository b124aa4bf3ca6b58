"""Which listing of one trace stands for which of another: the one pairing that `compare` and
the HTML report's before/after share.

Listings pair by process name and directory (and the reproducer's phase, where the trace names
one), never by position: a trace's third listing may be another reader's. A process name and
directory seen several times (a poller) pair in order, first with first. A listing seen on the
wire has a client, not a process: its name is "client" (the client's port changes with every
mount, so it cannot pair two captures).
"""

from dataclasses import dataclass


@dataclass
class Pair:
    """One row of a before/after: who listed which directory, and the listing summary of each
    side (None where that side has no such listing)."""

    process: str
    dir: int | None
    phase: str | None
    nth: int  # 1 for the first listing of this process and directory, 2 for the next...
    before: dict | None
    after: dict | None

    @property
    def name(self):
        """How a person reads the row: process, directory, phase and which of them."""
        d = self.dir if self.dir is not None else "?"
        words = [f"{self.process} dir {d}"]
        if self.phase:
            words.append(f"({self.phase})")
        if self.nth > 1:
            words.append(f"#{self.nth}")
        return " ".join(words)


def process_name(summary):
    """The process name of a listing summary ("client" for a listing seen on the wire)."""
    return summary["comm"] if summary.get("pid") is not None else "client"


def _keyed(summaries):
    """{(process, dir, phase, nth): summary}, in the order of the listings."""
    seen, out = {}, {}
    for s in summaries:
        k = (process_name(s), s.get("dir_fileid"), s.get("phase"))
        seen[k] = seen.get(k, 0) + 1
        out[(*k, seen[k])] = s
    return out


def pair(before, after):
    """Pairs of two lists of listing summaries (Listing.summary()): every listing of either
    side once, those of the first side first, in their order."""
    a, b = _keyed(before), _keyed(after)
    return [Pair(*k, a.get(k), b.get(k)) for k in list(a) + [k for k in b if k not in a]]
