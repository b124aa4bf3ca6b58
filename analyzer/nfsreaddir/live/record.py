"""`nfs-readdir record`: trace a listing on the machine itself with what its kernel has.

The events and kprobes come from recordplan.plan (the running kernel's tracefs and kallsyms); the
kprobes are added here, `trace-cmd record` records, and tracing.Session puts tracefs back as it
was on any exit. The exact command and kprobe definitions are printed first, so a user can
repeat them by hand or paste them into a bug report. All of record's own lines go to stderr:
stdout is COMMAND's (`record -o t.dat -- ls -f /mnt/big >names` keeps the names apart).
"""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading

from .. import events, status
from ..model import markers
from . import recordplan, tracing
from .tracing import Refused

BUFFER_KB = 20000  # per CPU: dropped nothing for 100,000-name listings under emulation
STOP_SECONDS = 120  # trace-cmd writing its file after Ctrl-C, under emulation


def prepare(dcache=False, slab=False, group=events.KPROBE_SYSTEM):
    """Root, tracefs and a plan, or Refused / KernelLacks saying what is missing."""
    tracing.check_root()
    tfs = recordplan.find_tracefs()
    return tfs, recordplan.plan(tfs, dcache=dcache, slab=slab, group=group)


def describe(plan, out):
    """The plan in words: where each table comes from, and what the trace will lack."""
    out.write(f"nfs-readdir record: kernel {plan.release} ({plan.machine})\n")
    for table, src in plan.sources.items():
        out.write(f"  {table:<14} {src}\n")
    for w in plan.warnings:
        out.write(f"  warning: {w}\n")


def _sampler(tfs, stop):
    """--dcache: a dcache sample marker every second (the reproducers' format)."""
    path = os.path.join(tfs, "trace_marker")
    while not stop.wait(1.0):
        try:
            with open(path, "w") as f:
                f.write(markers.sample_text())
        except OSError:
            return


def run(output, command=None, duration=None, dcache=False, slab=False, out=sys.stderr):
    """Record; returns the exit status (0 recorded, 130 Ctrl-C, 143 SIGTERM)."""
    if not shutil.which("trace-cmd"):
        raise Refused("trace-cmd not found: install it (apt-get install trace-cmd)")
    tfs, plan = prepare(dcache, slab)
    argv = list(command) if command else ["sleep", str(duration)]
    describe(plan, out)
    tracing.trap_sigterm()
    session = tracing.Session(tfs)
    proc = None
    stop = threading.Event()
    code = 0
    try:
        used, refused = session.add_kprobes(plan.kprobes)
        for d in used:
            out.write(f"  kprobe: echo '{d}' >> {tfs}/kprobe_events\n")
        for ev, why in refused.items():
            out.write(f"  warning: recording without {ev}: the kernel refused it: {why}\n")
        plan.events = [e for e in plan.events if e not in refused]
        cmd = plan.trace_cmd(output, argv, BUFFER_KB)
        out.write(f"  running: {shlex.join(cmd)}\n")
        out.flush()
        # A process group of its own, which every stop signals as a terminal's Ctrl-C would:
        # trace-cmd, its per-CPU recorders and COMMAND (trace-cmd waits for COMMAND to end).
        proc = subprocess.Popen(cmd, process_group=0)
        if dcache:
            threading.Thread(target=_sampler, args=(tfs, stop), daemon=True).start()
        rc = proc.wait()
        if rc != 0:
            raise Refused(f"trace-cmd record failed (exit {rc}); its message is above")
    except (KeyboardInterrupt, tracing.Terminated) as e:
        code = 143 if isinstance(e, tracing.Terminated) else 130
        out.write("nfs-readdir record: interrupted: stopping trace-cmd, keeping what it recorded\n")
    finally:
        tracing.shield()
        stop.set()
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(STOP_SECONDS)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        failed = session.close()
        for f in failed:
            out.write(f"nfs-readdir record: cleanup failed: {f}\n")
    out.write(
        f"nfs-readdir record: tracefs restored; trace in {output}: "
        f"nfs-readdir check {shlex.quote(output)}\n"
    )
    # tracefs not put back is an error, never a verdict: git bisect run must stop, not skip.
    return code if not failed else status.ERROR
