"""Every fixture's outputs, byte for byte as tests/golden/make stored them: a change of the
code's shape (moving, splitting, renaming) must change nothing a user or a script sees."""

import filecmp
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
