"""End to end: boot stock kernels in QEMU, run the reproducer, check the direction of the
effect. These need root and the host setup (reproducers/setup-host); each boots a VM."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import TOP
from vmrun import VM_RUN, vm_run, was_lost

pytestmark = pytest.mark.vm


def results_of(d):
    with open(os.path.join(d, "results.json")) as f:
        return json.load(f)


@pytest.mark.guest("loopback-5.10")
def test_stock_5_10_restarts_and_fails(guest):
    p, d = guest
    assert p.returncode == 1, p.stdout + p.stderr  # FAIL: the problem is reproduced
    assert "FAIL" in p.stdout
    r = results_of(d)
    idle, mod = r["phases"]["idle"], r["phases"]["modified"]
    assert r["kernel"].startswith("5.10.")
    assert mod["readdir_rpcs"] >= 2 * idle["readdir_rpcs"], (mod, idle)
    assert mod["invalidations"] >= 2 and mod["restarts"] >= 2
    assert idle["restarts"] == 0
    # The same answer from the analyzer, as git bisect run would get it.
    c = subprocess.run(
        [os.path.join(TOP, ".venv", "bin", "nfs-readdir"), "check", str(d)],
        capture_output=True,
        text=True,
    )
    assert c.returncode == 1 and c.stdout.startswith("bad:"), c.stdout + c.stderr


@pytest.mark.guest("loopback-6.1")
def test_stock_6_1_continues_and_passes(guest):
    p, d = guest
    assert p.returncode == 0, p.stdout + p.stderr
    r = results_of(d)
    idle, mod = r["phases"]["idle"], r["phases"]["modified"]
    assert r["kernel"].startswith("6.1.")
    # 6.1 continues at the cookie it reached: at most one READDIR more per invalidation
    # (on a small directory that can still be 9 against 5), never a restart.
    assert mod["restarts"] == 0
    assert mod["readdir_rpcs"] - idle["readdir_rpcs"] <= mod["invalidations"] + 2, (mod, idle)
    assert mod["duplicates"] == 0 and mod["missing"] == 0
    assert mod["entries"] >= r["files"]


# interrupt-all: each reproducer gets Ctrl-C in the middle of its work, in the 6.1 guest.
interrupted = pytest.mark.guest("interrupt-all-6.1")


def interrupt_check(interrupted, repro):
    """What interrupt-check said of one reproducer: it exited 130 and left nothing behind."""
    p, d = interrupted
    said = (d / repro / "interrupt-check.txt").read_text()
    assert "reproducer exit 130" in said, said + p.stdout + p.stderr
    assert "LEFTOVER" not in said, said
    with open(d / repro / "log") as f:
        assert "interrupted: cleaning up" in f.read()
    return d / repro


@interrupted
def test_sigint_leaves_nothing_behind(guest):
    """readdir-loopback inside the modified listing; what was recorded before is kept."""
    run = interrupt_check(guest, "readdir-loopback")
    assert os.path.getsize(run / "idle.dat") > 0


@interrupted
def test_sigint_to_readdir_multi_leaves_nothing_behind(guest):
    """While all five readers run (ls and find under their perl wrappers) and the writer adds."""
    run = interrupt_check(guest, "readdir-multi")
    assert os.path.getsize(run / "multi.dat") > 0


@interrupted
def test_sigint_to_dcache_reproducers_leaves_nothing_behind(guest):
    """Mid-storm (4 unlink workers) and mid-cell (mounts and memory cgroups up); and the guest
    as a whole found nothing left after all four."""
    for repro in ("dcache-unlink-storm", "dcache-memcg"):
        interrupt_check(guest, repro)
    p, _ = guest
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_reproducers_255_is_not_a_lost_vm(tmp_path):
    """The guest writes the reproducer's status itself, so vm-run can tell a reproducer's 255
    from a VM that died; neither is a verdict."""
    p = vm_run("debian:6.1", tmp_path, os.path.join(TOP, "tests", "vm", "exit-255"))
    assert p.returncode == 125, p.stdout + p.stderr
    assert "reproducer exited 255" in p.stderr and "no agreed meaning" in p.stderr, p.stderr
    assert "guest died" not in p.stderr
    assert (tmp_path / ".vm-status").read_text().strip() == "255"


def test_a_guest_that_dies_leaves_its_console(tmp_path):
    """A guest that panics is no verdict (125), and what its kernel said last reaches the
    user: the console is kept in RESULTS/console.log and its last lines are printed."""
    (tmp_path / "console.boot1.log").write_text("an earlier run's first boot\n")
    p = vm_run(
        "debian:6.1", tmp_path, os.path.join(TOP, "tests", "vm", "panic"), again_if_lost=False
    )
    assert p.returncode == 125, p.stdout + p.stderr
    assert "guest died" in p.stderr and "no verdict" in p.stderr, p.stderr
    assert "Kernel panic" in p.stderr.split("from its last report:")[-1], p.stderr
    assert "sysrq: Trigger a crash" in (tmp_path / "console.log").read_text()
    assert not (tmp_path / ".vm-status").exists()
    # The command had begun: booting again could run it twice. (An earlier run's kept console
    # is gone: it would read as a boot of this one.)
    assert "booting it again" not in p.stderr and not (tmp_path / "console.boot1.log").exists()


def test_a_kernel_that_panics_while_booting_is_booted_again(tmp_path):
    """A guest whose kernel panics before the command runs ran nothing, so vm-run boots it
    again (CI lost a stock 6.12 that way once, 0.7 s into its boot), up to three boots, each
    one's console kept; then no verdict (125). 80 MiB is too little memory for Debian's 6.1 to
    reach its init: it panics ("System is deadlocked on memory") about 1.3 s in, every time."""
    p = subprocess.run(
        [VM_RUN, "--kernel", "debian:6.1", "--memory", "80M", "--results", str(tmp_path)]
        + ["--timeout", "600", "--", "/bin/true"],
        text=True,
        capture_output=True,
        timeout=660,
    )
    assert p.returncode == 125, p.stdout + p.stderr
    said = re.findall(r"the guest never ran the command .*: (.*)", p.stderr)
    panicked = "its kernel panicked while booting"
    assert said == [f"{panicked}, booting it again"] * 2 + [panicked], p.stderr
    for console in ("console.boot1.log", "console.boot2.log", "console.log"):
        text = (tmp_path / console).read_text(errors="replace")
        assert "Kernel panic - not syncing" in text, console
    assert not (tmp_path / ".vm-status").exists()


def _booted(results, cmd):
    """vm-run of CMD in a 6.1 guest, still running, once its guest has booted; once more if
    the guest was lost before it booted (as vmrun.vm_run does)."""
    again = True
    while True:
        p = subprocess.Popen(
            [VM_RUN, "--kernel", "debian:6.1", "--results", str(results), "--", cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 900
            while not (results / ".vm-booted").exists() and p.poll() is None:
                assert time.monotonic() < deadline, "the guest never booted"
                time.sleep(0.5)
        except BaseException:
            p.kill()
            raise
        if p.poll() is None:
            return p
        out, err = p.communicate()
        if not (again and was_lost("debian:6.1", str(results), p.returncode, err)):
            pytest.fail(f"vm-run ended before its guest booted: {p.returncode}\n{out}{err}")
        again = False


def test_two_signals_at_once_still_stop_the_vm(tmp_path):
    """vm-run given SIGTERM and at once SIGINT while its guest runs (as `pkill` and timeout(1)
    passing its own on, or Ctrl-C pressed twice): no QEMU or vng outlives it. The second
    signal once cut vm-run's cleanup short before it killed the VM, which ran on."""
    p = _booted(tmp_path, os.path.join(TOP, "tests", "vm", "sleep"))
    try:
        p.send_signal(signal.SIGTERM)
        p.send_signal(signal.SIGINT)  # (another signal: two of one kind may be merged)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0, (out, err)
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert left.stdout == "", ("left running", left.stdout, err)


def test_bad_arguments_are_named(tmp_path):
    """Checked before anything is set up (on the host, no VM needed)."""
    lb = os.path.join(TOP, "reproducers", "readdir-loopback")
    for args, words in (
        (["--nfs", "5"], "--nfs must be"),
        (["--files", "x"], "--files"),
        (["--fs", "btrfs"], "--fs must be"),
        (["--frob"], "unknown option"),
        (["--files"], "needs a value"),
    ):
        p = subprocess.run([lb] + args, capture_output=True, text=True)
        assert p.returncode == 125 and words in p.stderr, (args, p.stderr)
    ovh = os.path.join(TOP, "reproducers", "readdir-overhead")
    for args, words in (
        (["--recorder", "bogus"], "unknown recorder 'bogus'"),
        (["--recorder", "record:x"], "unknown recorder"),
        (["--warmup", "x"], "--warmup must be"),
        (["--repeat", "0"], "--repeat must be"),
    ):
        p = subprocess.run([ovh] + args, capture_output=True, text=True)
        assert p.returncode == 125 and words in p.stderr, (args, p.stderr)
    multi = os.path.join(TOP, "reproducers", "readdir-multi")
    for args, words in (
        (["--slow-chunk", "0"], "--slow-chunk must be"),
        (["--poll-every", "x"], "'x' is not a number"),
        (["--nfs", "5"], "--nfs must be"),
        (["--frob"], "unknown option"),
    ):
        p = subprocess.run([multi] + args, capture_output=True, text=True)
        assert p.returncode == 125 and words in p.stderr, (args, p.stderr)
    p = subprocess.run(
        [VM_RUN, "--kernel", "debian:4.19", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 125 and "unknown Debian kernel" in p.stderr, p.stderr
