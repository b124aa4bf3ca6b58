"""The `facts` file a reproducer leaves in its results directory: key=value lines, the key
GROUP.NAME (run settings under `run.`, per-phase timings and READDIR counts under the phase's
name). One reader for every kind of run."""

import collections
import os


def read_facts(path):
    facts = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if not sep:
                continue
            group, _, name = key.partition(".")
            facts[group][name] = value
    return facts


def is_dcache_run(path):
    """True for a results directory of a dcache-* reproducer (its facts say so), or for a
    trace file in one."""
    d = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        with open(os.path.join(d, "facts")) as f:
            return any(line.startswith("run.name=dcache-") for line in f)
    except OSError:
        return False
