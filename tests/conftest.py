import json
import os
import shutil
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(TOP, "tests", "fixtures")
NFS_READDIR = [sys.executable, "-m", "nfsreaddir.cli"]


def fixture_dirs(reproducer="readdir-loopback"):
    """The fixture directories recorded by one reproducer (run.name in their facts). Runs
    recorded with captures (*-cap) are judged by test_capture.py, against their own traces."""
    out = []
    for d in sorted(os.listdir(FIXTURES)):
        if d.endswith("-cap"):
            continue
        facts = os.path.join(FIXTURES, d, "facts")
        if os.path.exists(os.path.join(FIXTURES, d, "COMMAND")) and os.path.exists(facts):
            with open(facts) as f:
                if f"run.name={reproducer}\n" in f.read():
                    out.append(d)
    return out


@pytest.fixture(params=fixture_dirs())
def fixture(request):
    """One recorded run: its directory, name and results.json."""
    d = os.path.join(FIXTURES, request.param)
    with open(os.path.join(d, "results.json")) as f:
        return {"name": request.param, "dir": d, "results": json.load(f)}


def run_cli(*args, check=None):
    """nfs-readdir as a user runs it: a process, its exit status and both streams."""
    p = subprocess.run(NFS_READDIR + [str(a) for a in args], text=True, capture_output=True,
                       timeout=600)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


@pytest.fixture(scope="session")
def trace_cmd():
    path = shutil.which("trace-cmd")
    if not path:
        pytest.fail("trace-cmd is not installed: run reproducers/setup-host")
    return path


def report_text(trace_cmd, dat, out, raw=False):
    """`trace-cmd report [-R]` of a trace, as a user would paste it into a bug report."""
    with open(out, "w") as f:
        subprocess.run([trace_cmd, "report"] + (["-R"] if raw else []) + [dat], stdout=f,
                       stderr=subprocess.DEVNULL, check=True, timeout=600)
    return out


CACHE = os.environ.get("NFSRT_CACHE") or os.path.expanduser("~/.cache/nfs-readdir-trace")
# The tree check-series keeps: one extraction of the kernel source serves every kernel test.
KERNEL_TREE = os.environ.get("NFSRT_CHECK_TREE") or os.path.join(CACHE, "trees",
                                                                  "linux-5.10-check")
SERIES = os.path.join(TOP, "kernel-patches", "v5.10")


def series_tree(branch, tree=KERNEL_TREE):
    """The pristine Debian 5.10 tree (made once, kept with its build products) on a fresh
    branch that carries the series as commits; returns the patch files applied."""
    subprocess.run([os.path.join(TOP, "kernel-patches", "prepare-tree"), "--reset", tree],
                   check=True, capture_output=True, timeout=3600)
    git = ["git", "-C", tree, "-c", "user.name=nfsrt-test", "-c", "user.email=test@invalid"]
    subprocess.run(git + ["checkout", "-q", "-B", branch, "nfsrt-base"], check=True)
    with open(os.path.join(SERIES, "series")) as f:
        patches = [os.path.join(SERIES, p.strip()) for p in f
                   if p.strip() and not p.startswith("#")]
    subprocess.run(git + ["am", "-q"] + patches, check=True, capture_output=True)
    return patches
