"""A reproducer's results directory: what kind of run it is (decided here only), what it lacks,
and what a readdir run adds to its traces for the verdict (the name checks, the ratio limit)."""

import collections
import os

from .facts import read_facts
from .rules.limits import MAX_RATIO

DCACHE, READDIR, OVERHEAD = "dcache", "readdir", "overhead"
READDIR_RUNS = ("readdir-loopback", "readdir-multi")

# Only disk file systems give names that can be checked: tmpfs directory cookies are positions
# before 6.6, so entries created during a listing shift the others.
NAMES_CHECKED_FS = ("ext4", "xfs")


class NotARun(Exception):
    """A directory that is not a reproducer's results directory; the message says what it
    lacks."""


def name(directory):
    """run.name in the directory's facts, or None (no facts, unreadable, no name)."""
    try:
        return read_facts(os.path.join(directory, "facts")).get("run", {}).get("name")
    except OSError:
        return None


def kind(path):
    """DCACHE for a dcache-* run's directory or a trace in one (its analysis comes from its
    markers and facts); READDIR or OVERHEAD for a readdir reproducer's directory (its traces
    are read as traces when named one by one); None for anything else."""
    d = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    run = name(d)
    if run is None:
        return None
    if run.startswith("dcache-"):
        return DCACHE
    if not os.path.isdir(path):
        return None
    if run in READDIR_RUNS:
        return READDIR
    return OVERHEAD if run == "readdir-overhead" else None


def require(directory, file):
    """directory/file, or NotARun saying what the directory lacks and what to give instead."""
    path = os.path.join(directory, file)
    if os.path.isfile(path):
        return path
    if not os.path.isdir(directory):
        raise NotARun(f"{directory}: no such directory (give a reproducer's --results directory)")
    if file == "results.json" and os.path.isfile(os.path.join(directory, "facts")):
        raise NotARun(
            f"{directory} has no results.json yet: write it from the run's traces "
            f"with `nfs-readdir results {directory}`"
        )
    what = "facts file (the run's settings)" if file == "facts" else file
    raise NotARun(
        f"{directory} is not a reproducer's results directory: it has no {what} "
        "(the reproducers and vm-run write one into their --results directory)"
    )


def results_json(directory):
    """The path of a run's results.json; NotARun where there is none."""
    return require(directory, "results.json")


def check_names(directory, phase, finished):
    """Duplicates and missing names of a listing against the files created before it; a
    listing that did not finish is only checked for duplicates."""
    with open(os.path.join(directory, "names-expected.txt")) as f:
        expected = set(f.read().split())
    with open(os.path.join(directory, f"names-{phase}.txt")) as f:
        listed = f.read().split()
    counts = collections.Counter(listed)
    dups = sorted(n for n, c in counts.items() if c > 1)
    missing = sorted(expected - counts.keys()) if finished else []
    return {
        "duplicates": len(dups),
        "missing": len(missing) if finished else None,
        "duplicate_examples": dups[:10],
        "missing_examples": missing[:10],
    }


def checks(directory):
    """What a readdir reproducer's run adds to its traces for the verdict, for results.json and
    `check` alike: the name check of each phase's listing and the run's READDIR ratio limit."""
    facts = read_facts(os.path.join(directory, "facts"))
    run = facts.get("run", {})
    names = {}
    if run.get("fs") in NAMES_CHECKED_FS:
        for phase in facts:
            if os.path.exists(os.path.join(directory, f"names-{phase}.txt")):
                names[phase] = check_names(
                    directory, phase, finished=facts[phase].get("status") == "0"
                )
    return names, float(run.get("max_ratio") or MAX_RATIO)
