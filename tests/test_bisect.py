"""reproducers/bisect-run in a Debian 5.10 git tree with this project's series as commits.

In `make test`: a commit that does not build is skipped (125), never judged good or bad.
With NFSRT_TEST_BISECT=1 (`make test-bisect`): a whole `git bisect run` between the base
(broken) and the top of the series (fixed) names the cookie-resume patch (patch 5 of 7) as the
first fixed commit, with no manual step: the uncached_readdir() fix, the trace events and the
->readdir() verifier argument before it do not change how a listing restarts."""

import email
import os
import subprocess

import pytest

from conftest import KERNEL_TREE as TREE
from conftest import TOP, series_tree

BISECT_RUN = os.path.join(TOP, "reproducers", "bisect-run")
# The kernel tree is shared with test_kernel_series.py: both run in make test's guest half,
# one at a time (beside each other, one's checkouts made the other rebuild the whole kernel).
pytestmark = pytest.mark.kernel


def git(*args, **kw):
    return subprocess.run(
        ["git", "-C", TREE] + list(args), check=True, text=True, capture_output=True, **kw
    ).stdout.strip()


@pytest.mark.slow
def test_a_commit_that_does_not_build_is_skipped():
    series_tree("broken-build")
    # The break is in the first thing a build compiles (fixdep, the host tool every object's
    # dependencies go through, made by `make defconfig` already), so that the step fails in
    # seconds also on a tree never built: in init/main.c it took 32 minutes, a kernel's worth
    # of objects compiled before it.
    fixdep_c = os.path.join(TREE, "scripts", "basic", "fixdep.c")
    with open(fixdep_c, "a") as f:
        f.write("\n#error this commit does not build\n")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "break the build")
    head = git("rev-parse", "--short=12", "HEAD")
    log_dir = os.path.join(TREE, ".git", "nfsrt-bisect-test")
    subprocess.run(["rm", "-rf", log_dir], check=True)
    p = subprocess.run(
        [BISECT_RUN, "--log-dir", log_dir], cwd=TREE, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 125, p.stdout + p.stderr
    with open(os.path.join(log_dir, "steps.tsv")) as f:
        step = f.read().splitlines()[-1].split("\t")
    assert step[1] == head and step[5] == "skip" and "does not build" in step[6], step
    # skipped for the break made above, not for anything else that stopped the build
    with open(os.path.join(log_dir, f"01-{head}", "step.log")) as f:
        assert "fixdep.c" in f.read(), "the build did not stop at the broken fixdep.c"
    git("checkout", "-q", "nfsrt-base")


@pytest.mark.opt_in("NFSRT_TEST_BISECT", "make test-bisect")
def test_bisect_names_the_cookie_resume_fix():
    patches = series_tree("bisect")
    fix = [p for p in patches if "Continue-a-listing" in p]
    assert len(fix) == 1, patches
    # Patch 5: four patches that do not fix the listing before it must be bisected through.
    names = [os.path.basename(p) for p in patches]
    assert patches.index(fix[0]) == 4 and "uncached_readdir" in names[0], names
    with open(fix[0]) as f:
        # the whole subject, also where format-patch folded it onto a second line
        subject = " ".join(email.message_from_file(f)["Subject"].split()).split("] ", 1)[1]
    log_dir = os.path.join(TREE, ".git", "nfsrt-bisect")
    subprocess.run(["rm", "-rf", log_dir], check=True)
    git("bisect", "reset")
    git("bisect", "start", "--term-old=broken", "--term-new=fixed", "bisect", "nfsrt-base")
    try:
        p = subprocess.run(
            ["git", "bisect", "run", BISECT_RUN, "--find-fix"],
            cwd=TREE,
            capture_output=True,
            text=True,
            timeout=4 * 3600,
        )
        print(p.stdout[-6000:])
        found = git("bisect", "log")
    finally:
        git("bisect", "reset")
    summary = subprocess.run(
        [BISECT_RUN, "--summary"], cwd=TREE, capture_output=True, text=True
    ).stdout
    print(summary)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "first fixed commit" in found and subject in found, found
