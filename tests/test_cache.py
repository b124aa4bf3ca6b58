"""One cache for everything: reproducers/cache-dir says where (NFSRT_CACHE, else
XDG_CACHE_HOME's nfs-readdir-trace), and every tool that keeps something between runs asks it,
so that one empty directory gives a cold run of the tests, vm-run, check-series and
build-kernel alike (a fresh `make test` is timed that way: docs/measurements/fresh-test.md)."""

import os
import re
import subprocess
import sys

import pytest

from conftest import TOP

CACHE_DIR = os.path.join(TOP, "reproducers", "cache-dir")


def env_of(**values):
    env = {k: v for k, v in os.environ.items() if k not in ("NFSRT_CACHE", "XDG_CACHE_HOME")}
    env.update(values)
    return env


@pytest.mark.parametrize(
    "values, expected",
    [
        ({"NFSRT_CACHE": "/c/n", "XDG_CACHE_HOME": "/c/x"}, "/c/n"),
        ({"XDG_CACHE_HOME": "/c/x"}, "/c/x/nfs-readdir-trace"),
        ({"HOME": "/c/h"}, "/c/h/.cache/nfs-readdir-trace"),
    ],
)
def test_cache_dir_follows_nfsrt_cache_then_xdg_cache_home(values, expected):
    out = subprocess.run(
        [CACHE_DIR, "bench"], env=env_of(**values), capture_output=True, text=True, check=True
    )
    assert out.stdout == expected + "/bench\n"


@pytest.mark.parametrize(
    "code",
    [
        # the tests' cache, where series_tree() keeps the kernel tree
        "import conftest; print(conftest.KERNEL_TREE)",
        # vm-run's (its Debian kernels), read from the script as it runs
        f"import runpy; print(runpy.run_path({os.path.join(TOP, 'reproducers', 'vm-run')!r})"
        "['CACHE'] + '/trees/linux-5.10-check')",
    ],
    ids=["tests", "vm-run"],
)
def test_the_tests_and_vm_run_use_the_one_cache(code, tmp_path):
    env = env_of(XDG_CACHE_HOME=str(tmp_path), PYTHONPATH=os.path.join(TOP, "tests"))
    env.pop("NFSRT_CHECK_TREE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{tmp_path}/nfs-readdir-trace/trees/linux-5.10-check"


# Where a cache's place may be written: cache-dir itself, and the one script another engineer
# owns that still spells the same rule out (tests/tools/trace-cmd-trixie, to ask cache-dir).
SAME_RULE_ELSEWHERE = {"reproducers/cache-dir"}


def test_no_tool_decides_its_cache_by_itself():
    """A second spelling of the rule is how the tests came to ignore XDG_CACHE_HOME that vm-run
    and check-series followed. Comments may name the directory; code asks cache-dir."""
    rule = re.compile(r"NFSRT_CACHE|XDG_CACHE_HOME|\.cache/nfs-readdir-trace")
    tracked = subprocess.run(
        [
            "git",
            "-C",
            TOP,
            "ls-files",
            "Makefile",
            "reproducers",
            "kernel-patches",
            "analyzer",
            "tests",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    paths = [
        os.path.join(TOP, p)
        for p in tracked
        if not p.endswith(".md") and not p.startswith(("tests/fixtures/", "tests/golden/"))
    ]
    found = []
    for path in paths:
        rel = os.path.relpath(path, TOP)
        if rel in SAME_RULE_ELSEWHERE or rel == "tests/test_cache.py":
            continue
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError:  # a compiled extension, an image
            continue
        found += [
            f"{rel}:{n}: {line.strip()}"
            for n, line in enumerate(lines, 1)
            if rule.search(line.split("#", 1)[0])
        ]
    assert not found, "\n".join(found)
