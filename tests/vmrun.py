"""Guests for the tests: reproducers/vm-run, once more when the guest was lost.

A guest lost under emulation (vm-run's 125 when the guest died, hung or hit the timeout: no
status came back from it) says nothing of what a test checks, so it runs once more; the first
run's files move to RESULTS/lost-vm, and a warning keeps what vm-run said of its console (CI
lost one guest in three runs: two died, one hung; later one more hung with a stopped vCPU)."""

import contextlib
import importlib.machinery
import importlib.util
import io
import os
import re
import subprocess
import warnings

import pytest

from conftest import TOP

VM_RUN = os.path.join(TOP, "reproducers", "vm-run")
LOST = re.compile(r"vm-run: (the guest died|the guest hung|timeout after)")


def _script_module(path, name):
    """A Python script without the .py suffix, imported as a module."""
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


_VM_RUN_SCRIPT = _script_module(VM_RUN, "vm_run_script")
ConsoleWatch = _VM_RUN_SCRIPT.ConsoleWatch


def vm_run(kernel, results, *cmd, timeout=1200, again_if_lost=True):
    """`vm-run --kernel KERNEL --results RESULTS -- CMD...` as a CompletedProcess (text)."""
    args = [
        VM_RUN,
        "--kernel",
        kernel,
        "--results",
        str(results),
        "--timeout",
        str(timeout),
        "--",
    ] + [str(c) for c in cmd]
    p = subprocess.run(args, text=True, capture_output=True, timeout=timeout + 60)
    if again_if_lost and was_lost(kernel, results, p.returncode, p.stderr):
        p = subprocess.run(args, text=True, capture_output=True, timeout=timeout + 60)
    return p


def was_lost(kernel, results, returncode, stderr):
    """Whether vm-run's run was a lost guest (then to be run once more): if so its files move
    to RESULTS/lost-vm and a warning keeps what vm-run said."""
    if returncode != 125 or not LOST.search(stderr):
        return False
    lost = os.path.join(results, "lost-vm")
    os.mkdir(lost)
    for name in os.listdir(results):
        if name != "lost-vm":
            os.rename(os.path.join(results, name), os.path.join(lost, name))
    warnings.warn(
        f"{kernel}: the guest was lost, ran once more; vm-run said:\n" + stderr[-3000:],
        pytest.PytestWarning,
        stacklevel=3,
    )
    return True


SCENARIOS_SCRIPT = os.path.join(TOP, "tests", "vm", "scenarios")
RECORD_WATCH = os.path.join(TOP, "tests", "vm", "record-watch")
# A short listing that still meets several attribute-cache expiries.
SMALL_LOOPBACK = ["--files", "4000", "--fs", "ext4", "--pause", "0.3", "--bufsize", "4096"]
SMALL_LOOPBACK += ["--timeout", "150"]
# What the guest tests run, by name: the kernel, the command (a reproducer or a script of
# tests/vm) and the seconds it may take under emulation once the guest is up. The scenarios of
# one kernel run in one guest, in this order; interrupt-all, which lists what is left behind,
# comes last.
SCENARIOS = {
    "loopback-5.10": ("5.10", ["readdir-loopback", "--nfs", "4.1", *SMALL_LOOPBACK], 900),
    "record-watch-5.10": ("5.10", [RECORD_WATCH, "--watch", "--signals"], 2100),
    "loopback-6.1": ("6.1", ["readdir-loopback", "--nfs", "4.1", *SMALL_LOOPBACK], 900),
    "record-6.1": ("6.1", [RECORD_WATCH], 500),
    "interrupt-all-6.1": ("6.1", [os.path.join(TOP, "tests", "vm", "interrupt-all")], 1500),
    "record-6.12": ("6.12", [RECORD_WATCH], 500),
    "record-7.3": ("7.3", [RECORD_WATCH, "--watch"], 500),
}
BOOT_SECONDS = 300  # a boot and the guest's start under emulation, with room
_host_results = _VM_RUN_SCRIPT.host_results


class Guests:
    """One guest per kernel for every scenario the session's tests need on it, booted when the
    first of them asks (vm_run's once-more-when-lost rule holds for the guest as a whole).
    `wanted` is the scenario names the selected tests name (their `guest` marks)."""

    def __init__(self, wanted, tmp_path_factory):
        self.wanted, self.tmp = wanted, tmp_path_factory
        self.runs = {}

    def scenario(self, name):
        """(p, d): what vm-run would have said of the scenario run alone (a CompletedProcess:
        the reproducer's status, or the verdict made here of what it recorded), and its
        results directory."""
        kernel = SCENARIOS[name][0]
        if kernel not in self.runs:
            names = [n for n, s in SCENARIOS.items() if s[0] == kernel and n in self.wanted]
            names += [] if name in names else [name]
            self.runs[kernel] = self._boot(kernel, names)
        p, d = self.runs[kernel]
        return outcome(p, d / name), d / name

    def _boot(self, kernel, names):
        d = self.tmp.mktemp(f"guest-{kernel}")
        cmd = []
        for n in names:
            cmd += (["+"] if cmd else []) + [n] + SCENARIOS[n][1]
        timeout = BOOT_SECONDS + sum(SCENARIOS[n][2] for n in names)
        return vm_run(f"debian:{kernel}", d, SCENARIOS_SCRIPT, *cmd, timeout=timeout), d


def outcome(p, d):
    """What vm-run would have said of the scenario in d, the guest as a whole having given p
    (a CompletedProcess): the scenario's status, or the verdict made here of what it
    recorded; 125 when its status never came back or has no agreed meaning."""
    said = f"{d}: the guest's vm-run said:\n{p.stdout}{p.stderr[-3000:]}"
    try:
        code = int((d / ".vm-status").read_text())
        out = (d / "output").read_text()
    except (OSError, ValueError):
        return subprocess.CompletedProcess(p.args, 125, "", "no status came back\n" + said)
    if code == 0 and (d / "facts").exists():
        # As vm-run does for a reproducer that only recorded: the verdict is made here.
        verdict = io.StringIO()
        with contextlib.redirect_stdout(verdict):
            code = _host_results(str(d))
        out += verdict.getvalue()
    elif code not in (0, 1, 125, 130):
        code = 125
    return subprocess.CompletedProcess(p.args, code, out, said)
