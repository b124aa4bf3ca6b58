"""How vm-run reads a guest's console, on consoles real guests wrote, and how the scenarios
that share a guest each get their own answer (no VM needed)."""

import gzip
import os
import re
import shutil
import subprocess

from conftest import FIXTURES, TOP
from vmrun import SCENARIOS_SCRIPT, ConsoleWatch, outcome


def test_a_guest_whose_cpu_stopped_is_found_hung():
    """The console CI kept of a 6.1 guest whose second vCPU stopped (tests/consoles/README):
    vm-run finds it hung once one grace period has been reported stalled for 240 s (at 350 s
    of guest time, not at the 1200 s timeout), and a console whose grace periods each stall
    less than that is not hung."""
    with gzip.open(os.path.join(TOP, "tests", "consoles", "rcu-stall-6.1.log.gz")) as f:
        console = f.read()
    watch = ConsoleWatch()
    for i in range(0, len(console), 4000):  # as the pipe delivers it: lines cut anywhere
        watch.feed(console[i : i + 4000])
    assert watch.hung == ("30917", 252.047737), watch.hung
    # The reports up to 287 s of guest time (189 s of one stall), and the same with each report
    # naming a grace period of its own (stalls that ended): neither is a hung guest.
    cut = console[: console.index(b"[  350.080148]")]
    numbers = iter(range(10**6))
    renumbered = re.sub(rb"g=30917", lambda m: b"g=%d" % next(numbers), cut)
    for text in (cut, renumbered):
        watch = ConsoleWatch()
        watch.feed(text)
        assert watch.hung is None


def test_a_5_10_guest_whose_grace_period_never_ended_is_found_hung():
    """5.10 words its stall reports otherwise ("(detected by 0, t=5252 jiffies, g=328469, ...)",
    tests/consoles/rcu-stall-5.10.log.gz): the same grace period reported every 63 s from
    1,952 s of guest time on is found hung at its fifth report, 252 s after the first."""
    with gzip.open(os.path.join(TOP, "tests", "consoles", "rcu-stall-5.10.log.gz")) as f:
        console = f.read()
    watch = ConsoleWatch()
    for i in range(0, len(console), 4000):
        watch.feed(console[i : i + 4000])
    assert watch.hung is not None and watch.hung[0] == "328469", watch.hung
    assert round(watch.hung[1], 3) == round(2204.638182 - 1952.553280, 3), watch.hung
    watch = ConsoleWatch()
    watch.feed(console[: console.index(b"[ 2204.638182]")])
    assert watch.hung is None


def test_a_guest_whose_kernel_never_started_is_told_from_one_that_did():
    """A console that stopped at the boot loader (tests/consoles/boot-hang-5.10.log) has no
    kernel line: vm-run stops such a guest after KERNEL_START_LIMIT seconds. A console whose
    kernel did start, cut anywhere after its first line, does not count as one."""
    with open(os.path.join(TOP, "tests", "consoles", "boot-hang-5.10.log"), "rb") as f:
        hung = f.read()
    watch = ConsoleWatch()
    watch.feed(hung)
    assert not watch.kernel_started
    with gzip.open(os.path.join(TOP, "tests", "consoles", "rcu-stall-6.1.log.gz")) as f:
        started = f.read(20000)
    first = started.index(b"\n[") + 1  # where the kernel's first line begins
    for cut in (first, first + 40, started.index(b"\n", first) + 1, len(started)):
        watch = ConsoleWatch()
        for i in range(0, cut, 7):  # as the pipe delivers it: lines cut anywhere
            watch.feed(started[i : min(i + 7, cut)])
        # (a line counts once whole)
        assert watch.kernel_started == (b"\n" in started[first:cut]), cut


def test_a_kernel_that_panicked_is_told_from_one_that_did_not():
    """A Debian 6.1 that panicked 1.3 s into its boot (tests/consoles/boot-panic-6.1.log.gz):
    vm-run boots such a guest again when the command never ran. The consoles of guests that
    stalled or hung without a panic, and the panicked one cut before its panic line ends, do
    not count as one."""
    with gzip.open(os.path.join(TOP, "tests", "consoles", "boot-panic-6.1.log.gz")) as f:
        panicked = f.read()
    watch = ConsoleWatch()
    for i in range(0, len(panicked), 7):  # as the pipe delivers it: lines cut anywhere
        watch.feed(panicked[i : i + 7])
    assert watch.kernel_started and watch.panicked
    line = panicked.index(b"Kernel panic - not syncing")
    others = [panicked[: panicked.index(b"\n", line)]]
    for name in ("rcu-stall-6.1.log.gz", "rcu-stall-5.10.log.gz"):
        with gzip.open(os.path.join(TOP, "tests", "consoles", name)) as f:
            others.append(f.read())
    with open(os.path.join(TOP, "tests", "consoles", "boot-hang-5.10.log"), "rb") as f:
        others.append(f.read())
    for text in others:
        watch = ConsoleWatch()
        watch.feed(text)
        assert not watch.panicked


def test_each_scenario_in_a_guest_gets_its_own_answer(tmp_path):
    """tests/vm/scenarios as a guest runs it (here on the host): each scenario in a directory of
    its own with its own status, read as vm-run reads a reproducer's. A recorded run (a real
    5.10 one) gets the verdict made on the host; a status of no agreed meaning, and a scenario
    whose status never came back (the guest died first), are no answer (125)."""
    p = subprocess.run(
        [SCENARIOS_SCRIPT, "passes", "/bin/true", "+", "fails", "/bin/sh", "-c", "echo bad; exit 1"]
        + ["+", "crashes", os.path.join(TOP, "tests", "vm", "exit-255")]
        + ["--results", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    recorded = tmp_path / "recorded"
    shutil.copytree(os.path.join(FIXTURES, "5.10-v4.1"), recorded)
    (recorded / "results.json").unlink()
    (recorded / ".vm-status").write_text("0\n")
    (recorded / "output").write_text("")
    got = {
        name: outcome(p, tmp_path / name)
        for name in ("passes", "fails", "crashes", "recorded", "never-ran")
    }
    assert {name: o.returncode for name, o in got.items()} == {
        "passes": 0,
        "fails": 1,
        "crashes": 125,
        "recorded": 1,
        "never-ran": 125,
    }
    assert got["fails"].stdout == "bad\n"
    assert "FAIL" in got["recorded"].stdout and (recorded / "results.json").exists()
    assert "no status came back" in got["never-ran"].stderr
    log = (tmp_path / "log").read_text()
    assert "passes: exit 0" in log and "fails: exit 1" in log and "crashes: exit 255" in log, log
