"""How vm-run reads a guest's console, on consoles real guests wrote (no VM needed)."""

import gzip
import os
import re

from conftest import TOP
from vmrun import StallWatch


def test_a_guest_whose_cpu_stopped_is_found_hung():
    """The console CI kept of a 6.1 guest whose second vCPU stopped (tests/consoles/README):
    vm-run finds it hung once one grace period has been reported stalled for 240 s (at 350 s
    of guest time, not at the 1200 s timeout), and a console whose grace periods each stall
    less than that is not hung."""
    with gzip.open(os.path.join(TOP, "tests", "consoles", "rcu-stall-6.1.log.gz")) as f:
        console = f.read()
    watch = StallWatch()
    for i in range(0, len(console), 4000):  # as the pipe delivers it: lines cut anywhere
        watch.feed(console[i : i + 4000])
    assert watch.hung == ("30917", 252.047737), watch.hung
    # The reports up to 287 s of guest time (189 s of one stall), and the same with each report
    # naming a grace period of its own (stalls that ended): neither is a hung guest.
    cut = console[: console.index(b"[  350.080148]")]
    numbers = iter(range(10**6))
    renumbered = re.sub(rb"g=30917", lambda m: b"g=%d" % next(numbers), cut)
    for text in (cut, renumbered):
        watch = StallWatch()
        watch.feed(text)
        assert watch.hung is None
