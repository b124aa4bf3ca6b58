"""Which listing of one trace stands for which of another: the one pairing that `compare` and
the HTML report's before/after share, made to pair the same work on two kernels.

Listings pair by process name (and the reproducer's phase, where the trace names one) and
directory, never by position: a trace's third listing may be another reader's. A directory is
the same on both sides by its inode number when both sides have it; two VMs give the same
directory other inode numbers, so the directories a process listed that only one side has pair
by their size (the names listed where the trace counts them, else whether one READDIR read them
whole) in the order they were first listed. A process name and directory seen several times (a
poller) pair in order, first with first. A listing seen on the wire has a client, not a process:
its name is "client" (the client's port changes with every mount). A listing with no
counterpart is paired with None, and named so.
"""

from ..recordtype import record


@record
class Pair:
    """One row of a before/after: who listed which directory, and the listing summary of each
    side (None where that side has no such listing)."""

    process: str
    dir: int | None  # the before side's inode number, else the after side's
    phase: str | None
    nth: int  # 1 for the first listing of this process and directory, 2 for the next...
    before: dict | None
    after: dict | None
    dir_after: int | None = None  # the after side's, where the directory's number differs

    @property
    def name(self):
        """How a person reads the row: process, directory, phase, which of them, and the
        side it is on alone."""
        d = self.dir if self.dir is not None else "?"
        words = [f"{self.process} dir {d}"]
        if self.dir_after is not None:
            words[0] += f" (B: {self.dir_after})"
        if self.phase:
            words.append(f"({self.phase})")
        if self.nth > 1:
            words.append(f"#{self.nth}")
        if self.before is None or self.after is None:
            words.append("- only in " + ("A" if self.after is None else "B"))
        return " ".join(words)


def process_name(summary):
    """The process name of a listing summary ("client" for a listing seen on the wire)."""
    return summary["comm"] if summary.get("pid") is not None else "client"


def _size(ss):
    """What tells one directory's size from another's on any kernel: the names listed where
    the trace counts them, else whether one READDIR read it whole (the READDIRs of a bigger one
    vary with each kernel's READDIR size)."""
    entries = [s["entries"] for s in ss if s.get("entries") is not None]
    if entries:
        return ("entries", max(entries))
    return ("one READDIR", max(s["readdirs"] for s in ss) <= 1)


def _dirs(summaries):
    """{(process, phase): {dir: [its summaries]}}, directories in the order first listed."""
    out: dict = {}
    for s in summaries:
        group = out.setdefault((process_name(s), s.get("phase")), {})
        group.setdefault(s.get("dir_fileid"), []).append(s)
    return out


def _dir_map(da, db):
    """{before's dir: after's dir} for one process and phase: the same number where both
    sides have it, else by size in the order first listed (see the module's text)."""
    mapping = {d: d for d in da if d in db}
    left_a = [d for d in da if d not in mapping and d is not None]
    left_b = [d for d in db if d not in mapping.values() and d is not None]
    for d in left_a:
        same = next((e for e in left_b if _size(db[e]) == _size(da[d])), None)
        if same is not None:
            mapping[d] = same
            left_b.remove(same)
    return mapping


def pair(before, after):
    """Pairs of two lists of listing summaries (Listing.summary()): every listing of either
    side once, those of the first side first, in their order."""
    at = {id(s): n for n, s in enumerate(before)} | {id(s): n for n, s in enumerate(after)}
    ga, gb = _dirs(before), _dirs(after)
    out = []
    for key in list(ga) + [k for k in gb if k not in ga]:
        process, phase = key
        da, db = ga.get(key, {}), gb.get(key, {})
        mapping = _dir_map(da, db)
        for d, listed in da.items():
            theirs = db.get(mapping.get(d, d), []) if d in mapping or d is None else []
            other = mapping.get(d, d)
            for n in range(max(len(listed), len(theirs))):
                out.append(
                    Pair(
                        process,
                        d,
                        phase,
                        n + 1,
                        listed[n] if n < len(listed) else None,
                        theirs[n] if n < len(theirs) else None,
                        other if other != d and n < len(theirs) else None,
                    )
                )
        paired = {mapping.get(d, d) for d in da if d in mapping or d is None}
        for d, listed in db.items():
            if d not in paired:
                out += [Pair(process, d, phase, n + 1, None, s) for n, s in enumerate(listed)]
    return sorted(out, key=lambda p: (p.before is None, at[id(p.before or p.after)]))
