"""The fuzz targets' inputs replayed (tests/fuzz/harness: libFuzzer under ASan and UBSan, and
atheris): every input that ever crashed one (tests/fuzz/TARGET/crash-*), each alone, and a
short sample of each target (its seeds from the fixtures and some inputs mutated from them,
the same each run). `make fuzz` is the fuzzing itself."""

import functools
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "tests"))
from conftest import needs_setup  # noqa: E402

_spec = importlib.util.spec_from_file_location("fuzzrun", TOP / "tests/fuzz/harness/run.py")
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)
os.environ.setdefault("PYTHON", sys.executable)

pytestmark = pytest.mark.slow
needs_clang = needs_setup(shutil.which("clang"), "clang is not installed (libFuzzer, ASan)")
needs_atheris = needs_setup(importlib.util.find_spec("atheris"), "atheris is not installed")

# Found by the fuzzing in files whose fix is not merged yet: (target, input) -> the bug.
OPEN: dict[tuple, str] = {}


def _marks(target):
    return [needs_atheris] if target == "text" else [needs_clang]


def _crashes():
    for t in run.TARGETS:
        for p in run.kept_crashes(t):
            bug = OPEN.get((t, p.name))
            marks = _marks(t) + ([pytest.mark.xfail(reason=bug, strict=True)] if bug else [])
            yield pytest.param(t, p, id=f"{t}/{p.name}", marks=marks)


@functools.cache
def built(target):
    """The target's harness and seeds, made once in a test session for every input it replays
    (run.build: from the cache where these sources were built before)."""
    run.build([target])


def _why(proc):
    """The sanitizer's or the fuzzer's report, shortened."""
    lines = proc.stderr.splitlines()
    at = next((i for i, s in enumerate(lines) if "ERROR" in s or "runtime error" in s), 0)
    return "\n".join(lines[at : at + 25])


@pytest.mark.parametrize("target,path", list(_crashes()))
def test_a_crash_found_once_stays_fixed(target, path):
    built(target)
    proc = run.replay(target, [path])
    assert proc.returncode == 0, _why(proc)


@pytest.mark.parametrize("target", [pytest.param(t, marks=_marks(t)) for t in run.TARGETS])
def test_a_short_sample_of_each_target_finds_nothing(target):
    built(target)
    proc = run.replay(
        target, [run.BUILD / "seeds" / target], fuzzing=True, runs=run.SAMPLE_RUNS[target]
    )
    assert proc.returncode == 0, _why(proc)
    assert "Done" in proc.stderr  # (libFuzzer's last line: the runs were made)
