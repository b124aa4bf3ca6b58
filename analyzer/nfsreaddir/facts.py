"""The `facts` file a reproducer leaves in its results directory: key=value lines, the key
GROUP.NAME (run settings under `run.`, per-phase timings and READDIR counts under the phase's
name). One reader for every kind of run."""

import collections


def read_facts(path):
    facts: collections.defaultdict[str, dict[str, str]] = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if not sep:
                continue
            group, _, name = key.partition(".")
            facts[group][name] = value
    return facts
