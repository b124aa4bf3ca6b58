"""Guests for the tests: reproducers/vm-run, once more when the guest was lost.

A guest lost under emulation (vm-run's 125 when the guest died, hung or hit the timeout: no
status came back from it) says nothing of what a test checks, so it runs once more; the first
run's files move to RESULTS/lost-vm, and a warning keeps what vm-run said of its console (CI
lost one guest in three runs: two died, one hung; later one more hung with a stopped vCPU)."""

import importlib.machinery
import importlib.util
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


StallWatch = _script_module(VM_RUN, "vm_run_script").StallWatch


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
    if again_if_lost and p.returncode == 125 and LOST.search(p.stderr):
        lost = os.path.join(results, "lost-vm")
        os.mkdir(lost)
        for name in os.listdir(results):
            if name != "lost-vm":
                os.rename(os.path.join(results, name), os.path.join(lost, name))
        warnings.warn(
            f"{kernel}: the guest was lost, ran once more; vm-run said:\n" + p.stderr[-3000:],
            pytest.PytestWarning,
            stacklevel=2,
        )
        p = subprocess.run(args, text=True, capture_output=True, timeout=timeout + 60)
    return p
