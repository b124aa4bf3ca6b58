"""What to record on the running kernel: its tracefs and kallsyms asked which of the events
and kprobes that fill the tables (events.py) it has; for `nfs-readdir record`, `watch` and the
reproducers' shell (`python3 -m nfsreaddir.live.recordplan plan`).
"""

import os
import re
from typing import NamedTuple

from ..events import (
    ARG_REGISTERS,
    CALL_SOURCES,
    CONTEXT_EVENTS,
    COOKIE_KPROBES,
    DCACHE_EVENTS,
    INVALIDATION_SOURCES,
    KPROBE_SYSTEM,
    LATENCY_SOURCE,
    OPEN_KPROBES,
    PAIRED_DIRECTORY,
    RANGE_INVALIDATION,
    REQUEST_SOURCE,
    REVALIDATION_SOURCES,
    RPC_SOURCES,
    SLAB_EVENTS,
    SYSCALL_SOURCES,
    ProbeSpec,
    kernel_generation,
    kprobe_definition,
)
from ..recordtype import record

TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


class KernelLacks(Exception):
    """The running kernel cannot give what is asked; the message says what it lacks."""


class Kprobe(NamedTuple):
    """One kprobe to add: its event (group:function) and its definitions, best form first
    (a kernel that refuses one is given the next)."""

    event: str
    spec: ProbeSpec
    definitions: tuple


@record
class Plan:
    """What to record on the running kernel, and why."""

    release: str
    machine: str
    events: list  # system:event to enable, kprobe events included
    kprobes: list  # Kprobe
    sources: dict  # table -> text: where it comes from on this kernel
    warnings: list  # what the trace will lack

    def trace_cmd(self, output, command, buffer_kb=20000):
        """The `trace-cmd record` command line for this plan."""
        cmd = ["trace-cmd", "record", "-q", "-b", str(buffer_kb), "-o", output]
        for e in self.events:
            cmd += ["-e", e]
        return cmd + ["--"] + list(command)


def find_tracefs():
    """The mounted tracefs directory, or KernelLacks saying how to mount it."""
    for d in TRACEFS_DIRS:
        if os.path.exists(os.path.join(d, "available_events")):
            return d
    raise KernelLacks(
        "no tracefs: neither /sys/kernel/tracing nor /sys/kernel/debug/tracing "
        "is mounted (mount -t tracefs nodev /sys/kernel/tracing; the kernel needs "
        "CONFIG_FTRACE)"
    )


def _read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def tracefs_format(tracefs, event):
    """The format of an event of the running kernel (tracedat.EventFormat), or None."""
    from ..trace.format import parse_format

    system, name = event.split(":", 1)
    text = _read(os.path.join(tracefs, "events", system, name, "format"))
    return parse_format(text, system) if text else None


def kallsyms_functions(path, wanted):
    """Which of the wanted function names /proc/kallsyms lists as code (module symbols
    included). One search of the whole text per name: a line-by-line parse of 100,000+ symbols
    takes minutes in an emulated guest."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return set()
    return {
        fn
        for fn in wanted
        if re.search(rb" [tTwW] " + re.escape(fn.encode()) + rb"(?:\t|\n|$)", text)
    }


def _has_fields(tracefs, event, fields):
    fmt = tracefs_format(tracefs, event)
    return fmt is not None and set(fields) <= set(fmt.user_fields())


def _arg_forms(readme, machine):
    forms = []
    if "<argname>" in readme:
        forms.append("btf")
    if "$arg<N>" in readme:
        forms.append("argn")
    if machine in ARG_REGISTERS:
        forms.append("register")
    return forms


class _Planner:
    """What one running kernel offers (its events, kprobe argument forms and functions) and
    the plan being made from it, one table's sources at a time."""

    def __init__(self, tracefs, kallsyms, release, machine, group):
        self.tracefs, self.release, self.machine, self.group = tracefs, release, machine, group
        self.gen = kernel_generation(release)
        self.have = set(_read(os.path.join(tracefs, "available_events")).split())
        self.kprobes_ok = os.path.exists(os.path.join(tracefs, "kprobe_events"))
        self.forms = (
            _arg_forms(_read(os.path.join(tracefs, "README")), machine) if self.kprobes_ok else []
        )
        self.functions = kallsyms_functions(kallsyms, set(COOKIE_KPROBES) | set(OPEN_KPROBES))
        self.events, self.kprobes, self.sources, self.warnings = [], [], {}, []

    def add(self, ev):
        if ev not in self.events:
            self.events.append(ev)

    def probe(self, spec):
        defs = []
        for form in self.forms:
            try:
                defs.append(kprobe_definition(spec, form, self.machine, self.group))
            except KeyError:
                continue
        self.kprobes.append(Kprobe(f"{self.group}:{spec.function}", spec, tuple(defs)))
        self.add(f"{self.group}:{spec.function}")

    def usable(self, spec):
        return (
            self.kprobes_ok
            and self.forms
            and spec.function in self.functions
            and spec.fits(self.gen)
        )

    def readdirs(self):
        """Every tracepoint that carries the cookie; else the cookie kprobes (with the event
        that names their directory); and the RPC itself, counted on any kernel."""
        have = self.have
        cookie_events = [
            s.event
            for g in RPC_SOURCES
            for s in g
            if not s.event.startswith("*:")
            and "cookie" in s.fields
            and s.event in have
            and _has_fields(self.tracefs, s.event, s.fields.values())
        ]
        for ev in cookie_events:
            self.add(ev)
        if cookie_events:
            self.sources["rpc"] = ", ".join(cookie_events)
        else:
            self.cookie_kprobes()
        for s in RPC_SOURCES[-1]:
            if s.event in have:
                self.add(s.event)
                self.sources.setdefault("rpc", s.event + " (counts, no cookies)")
        if "rpc" not in self.sources:
            nfs_loaded = any(e.startswith(("nfs:", "nfs4:")) for e in have)
            raise KernelLacks(
                "this kernel has no source of READDIRs: none of the events "
                + ", ".join(s.event for g in RPC_SOURCES for s in g if not s.event.startswith("*:"))
                + ", and no kprobe on nfs{3,4}_proc_readdir"
                + (
                    ""
                    if nfs_loaded
                    else "; no nfs or nfs4 trace events at all: load the NFS "
                    "client (modprobe nfs nfsv3 nfsv4) or mount an NFS share first"
                )
                + (
                    ""
                    if have & {"sunrpc:rpc_request"} or not nfs_loaded
                    else "; sunrpc:rpc_request is missing too"
                )
            )

    def cookie_kprobes(self):
        probes = [s for s in COOKIE_KPROBES.values() if self.usable(s)]
        for s in probes:
            self.probe(s)
        if probes:
            self.sources["rpc"] = "kprobes on " + ", ".join(s.function for s in probes)
            if PAIRED_DIRECTORY.event in self.have:
                self.add(PAIRED_DIRECTORY.event)
            return
        why = (
            "kprobe_events is missing (CONFIG_KPROBE_EVENTS)"
            if not self.kprobes_ok
            else "no kprobe argument form known for " + self.machine
            if not self.forms
            else f"the READDIR cookie kprobes fit 5.0-5.10 and this is {self.release}"
            if not any(s.fits(self.gen) for s in COOKIE_KPROBES.values())
            else "nfs{3,4}_proc_readdir are not in kallsyms (is the nfs module loaded?)"
        )
        self.warnings.append(
            f"no READDIR cookies on this kernel ({why}): a restart cannot be "
            "seen, only READDIR counts"
        )

    def invalidations(self):
        for s in [s for g in INVALIDATION_SOURCES for s in g] + [RANGE_INVALIDATION]:
            if s.event in self.have:
                self.add(s.event)
        self.sources["invalidations"] = (
            ", ".join(s.event for g in INVALIDATION_SOURCES for s in g if s.event in self.have)
            or "-"
        )
        if self.sources["invalidations"] == "-":
            self.warnings.append("no invalidation event: restarts are counted but not explained")
        for s in REVALIDATION_SOURCES:
            if s.event in self.have:
                self.add(s.event)

    def calls(self):
        """Listings: the series' own events, else the open/position kprobes; the getdents64
        system calls on any kernel with syscall events."""
        series = [s.event for s in CALL_SOURCES[0] if s.event in self.have]
        if series:
            for ev in series:
                self.add(ev)
            calls = ", ".join(series)
        else:
            opens = [s for s in OPEN_KPROBES.values() if self.usable(s)]
            for s in opens:
                self.probe(s)
            calls = ("kprobes on " + ", ".join(s.function for s in opens)) if opens else ""
        sys_events = [s.event for s in SYSCALL_SOURCES if s.event in self.have]
        for ev in sys_events:
            self.add(ev)
        self.sources["calls"] = ", ".join(x for x in (calls, ", ".join(sys_events)) if x) or "-"
        if self.sources["calls"] == "-":
            self.warnings.append(
                "nothing tells listings apart (no open kprobes, no syscall "
                "events): a cookie-0 READDIR after the start cannot be told "
                "from a new open"
            )

    def round_trips(self):
        """Every RPC the reader sends, and each one's reply time where the kernel has it
        (model/roundtrips: where a listing's time went)."""
        found = [s.event for s in (REQUEST_SOURCE, LATENCY_SOURCE) if s.event in self.have]
        for ev in found:
            self.add(ev)
        self.sources["round_trips"] = ", ".join(found) or "-"
        if REQUEST_SOURCE.event in found and LATENCY_SOURCE.event not in found:
            self.warnings.append(
                f"no {LATENCY_SOURCE.event}: round trips are counted without server time"
            )

    def slab(self):
        kmem = [ev for ev in SLAB_EVENTS if ev in self.have]
        if not kmem:
            raise KernelLacks(
                "--slab: this kernel has none of the kmem events " + ", ".join(SLAB_EVENTS)
            )
        for ev in kmem:
            self.add(ev)


def plan(
    tracefs,
    kallsyms="/proc/kallsyms",
    release=None,
    machine=None,
    dcache=False,
    slab=False,
    group=KPROBE_SYSTEM,
):
    """The events and kprobes that fill the tables on the running kernel, from its tracefs
    (available_events, the formats, kprobe_events and its README) and kallsyms. Raises
    KernelLacks when the kernel has no source of READDIRs at all."""
    release = release or os.uname().release
    p = _Planner(tracefs, kallsyms, release, machine or os.uname().machine, group)
    p.readdirs()
    p.invalidations()
    p.calls()
    p.round_trips()
    for ev in CONTEXT_EVENTS + (DCACHE_EVENTS if dcache else ()):
        if ev in p.have:
            p.add(ev)
    if slab:
        p.slab()
    return Plan(release, p.machine, p.events, p.kprobes, p.sources, p.warnings)


def main(argv=None):
    """`python3 -m nfsreaddir.live.recordplan plan`: the plan for the running kernel, for the
    reproducers' shell, one item a line: `event SYSTEM:NAME`, `warning TEXT`, and
    `kprobe<TAB>TABLE<TAB>EVENT<TAB>DEFINITION...` (TABLE: rpc or calls, what it fills; the
    definitions best form first). Exit 2, saying why, when the kernel has no READDIR source."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python3 -m nfsreaddir.live.recordplan")
    p.add_argument("what", choices=["plan"])
    p.add_argument("--dcache", action="store_true")
    args = p.parse_args(argv)
    try:
        pl = plan(find_tracefs(), dcache=args.dcache)
    except KernelLacks as e:
        print(e, file=sys.stderr)
        return 2
    for k in pl.kprobes:
        role = "rpc" if k.spec.function in COOKIE_KPROBES else "calls"
        print("\t".join(["kprobe", role, k.event, *k.definitions]))
    for ev in pl.events:
        print("event", ev)
    for w in pl.warnings:
        print("warning", w)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
