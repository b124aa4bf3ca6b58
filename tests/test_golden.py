"""Every fixture's outputs, byte for byte as tests/golden/make stored them: a change of the
code's shape (moving, splitting, renaming) must change nothing a user or a script sees."""

import filecmp
import json
import os
import subprocess
import sys

from conftest import TOP

GOLDEN = os.path.join(TOP, "tests", "golden")


def _files(top):
    return sorted(os.path.relpath(os.path.join(d, f), top) for d, _, fs in os.walk(top) for f in fs)


def test_outputs_are_the_stored_ones(tmp_path):
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, os.path.join(GOLDEN, "make"), "--out", str(out)], check=True, timeout=900
    )
    stored = os.path.join(GOLDEN, "out")
    assert _files(out) == _files(stored)
    differ = [
        f
        for f in _files(stored)
        if not filecmp.cmp(os.path.join(stored, f), out / f, shallow=False)
    ]
    assert not differ, f"outputs changed (tests/golden/make rewrites them): {differ}"


def test_every_listing_lies_within_the_bounds_it_gives():
    """Each stored analyze --json listing: the count (where known) lies between the fewest and
    the most the evidence allows, for restarts, refetched READDIRs and their cost. A bound left
    unset (0 beside restarts=4: the wire's listings before stop 37) is an unknown shown as a
    number."""
    checked = 0
    for f in _files(os.path.join(GOLDEN, "out")):
        if not f.endswith("analyze-json.out"):
            continue
        with open(os.path.join(GOLDEN, "out", f)) as fh:
            text = fh.read()
        for trace in json.loads(text) if text else []:  # (empty: not a trace, said on stderr)
            for lst in trace.get("listings", []):  # (dcache and slab runs have none)
                for name, lo, hi in (
                    ("restarts", "restarts_min", "restarts_max"),
                    ("refetched_readdirs", "refetched_readdirs_min", "refetched_readdirs_max"),
                    ("restart_cost_seconds", "restart_cost_seconds", "restart_cost_seconds_max"),
                ):
                    v, a, b = lst[name], lst[lo], lst[hi]
                    if a is None or b is None:
                        assert v is None, (f, lst["listing"], name)
                        continue
                    assert a <= b and (v is None or a <= v <= b), (f, lst["listing"], name)
                    checked += 1
    assert checked > 100, checked
