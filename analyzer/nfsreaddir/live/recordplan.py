"""What to record on the running kernel: its tracefs and kallsyms asked which of the events
and kprobes that fill the tables (events.py) it has; for `nfs-readdir record`, `watch` and the
reproducers' shell (`python3 -m nfsreaddir.live.recordplan plan`).
"""

import os
import re
from dataclasses import dataclass

from ..events import (
    ARG_REGISTERS,
    CALL_SOURCES,
    CONTEXT_EVENTS,
    COOKIE_KPROBES,
    DCACHE_EVENTS,
    INVALIDATION_SOURCES,
    KPROBE_SYSTEM,
    OPEN_KPROBES,
    PAIRED_DIRECTORY,
    RANGE_INVALIDATION,
    REVALIDATION_SOURCES,
    RPC_SOURCES,
    SLAB_EVENTS,
    SYSCALL_SOURCES,
    ProbeSpec,
    kernel_generation,
    kprobe_definition,
)

TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


class KernelLacks(Exception):
    """The running kernel cannot give what is asked; the message says what it lacks."""


@dataclass(frozen=True)
class Kprobe:
    """One kprobe to add: its event (group:function) and its definitions, best form first
    (a kernel that refuses one is given the next)."""
    event: str
    spec: ProbeSpec
    definitions: tuple


@dataclass
class Plan:
    """What to record on the running kernel, and why."""
    release: str
    machine: str
    events: list                # system:event to enable, kprobe events included
    kprobes: list               # Kprobe
    sources: dict               # table -> text: where it comes from on this kernel
    warnings: list              # what the trace will lack

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
    raise KernelLacks("no tracefs: neither /sys/kernel/tracing nor /sys/kernel/debug/tracing "
                      "is mounted (mount -t tracefs nodev /sys/kernel/tracing; the kernel needs "
                      "CONFIG_FTRACE)")


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
    return {fn for fn in wanted
            if re.search(rb" [tTwW] " + re.escape(fn.encode()) + rb"(?:\t|\n|$)", text)}


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


def plan(tracefs, kallsyms="/proc/kallsyms", release=None, machine=None, dcache=False,
         slab=False, group=KPROBE_SYSTEM):
    """The events and kprobes that fill the tables on the running kernel, from its tracefs
    (available_events, the formats, kprobe_events and its README) and kallsyms. Raises
    KernelLacks when the kernel has no source of READDIRs at all."""
    release = release or os.uname().release
    machine = machine or os.uname().machine
    gen = kernel_generation(release)
    have = set(_read(os.path.join(tracefs, "available_events")).split())
    kprobes_ok = os.path.exists(os.path.join(tracefs, "kprobe_events"))
    forms = _arg_forms(_read(os.path.join(tracefs, "README")), machine) if kprobes_ok else []
    functions = kallsyms_functions(kallsyms, set(COOKIE_KPROBES) | set(OPEN_KPROBES))
    events, kprobes, sources, warnings = [], [], {}, []

    def add(ev):
        if ev not in events:
            events.append(ev)

    def probe(spec):
        defs = []
        for form in forms:
            try:
                defs.append(kprobe_definition(spec, form, machine, group))
            except KeyError:
                continue
        kprobes.append(Kprobe(f"{group}:{spec.function}", spec, tuple(defs)))
        add(f"{group}:{spec.function}")

    def usable(spec):
        return kprobes_ok and forms and spec.function in functions and spec.fits(gen)

    # READDIRs: every tracepoint that carries the cookie; else the cookie kprobes (with the
    # event that names their directory); and the RPC itself, counted on any kernel.
    cookie_events = [s.event for g in RPC_SOURCES for s in g if not s.event.startswith("*:")
                     and "cookie" in s.fields and s.event in have
                     and _has_fields(tracefs, s.event, s.fields.values())]
    for ev in cookie_events:
        add(ev)
    if cookie_events:
        sources["rpc"] = ", ".join(cookie_events)
    else:
        probes = [s for s in COOKIE_KPROBES.values() if usable(s)]
        for s in probes:
            probe(s)
        if probes:
            sources["rpc"] = "kprobes on " + ", ".join(s.function for s in probes)
            if PAIRED_DIRECTORY.event in have:
                add(PAIRED_DIRECTORY.event)
        else:
            why = ("kprobe_events is missing (CONFIG_KPROBE_EVENTS)" if not kprobes_ok else
                   "no kprobe argument form known for " + machine if not forms else
                   f"the READDIR cookie kprobes fit 5.0-5.10 and this is {release}"
                   if not any(s.fits(gen) for s in COOKIE_KPROBES.values()) else
                   "nfs{3,4}_proc_readdir are not in kallsyms (is the nfs module loaded?)")
            warnings.append(f"no READDIR cookies on this kernel ({why}): a restart cannot be "
                            "seen, only READDIR counts")
    for s in RPC_SOURCES[-1]:
        if s.event in have:
            add(s.event)
            sources.setdefault("rpc", s.event + " (counts, no cookies)")
    if "rpc" not in sources:
        nfs_loaded = any(e.startswith(("nfs:", "nfs4:")) for e in have)
        raise KernelLacks(
            "this kernel has no source of READDIRs: none of the events "
            + ", ".join(s.event for g in RPC_SOURCES for s in g if not s.event.startswith("*:"))
            + ", and no kprobe on nfs{3,4}_proc_readdir"
            + ("" if nfs_loaded else "; no nfs or nfs4 trace events at all: load the NFS "
               "client (modprobe nfs nfsv3 nfsv4) or mount an NFS share first")
            + ("" if have & {"sunrpc:rpc_request"} or not nfs_loaded else
               "; sunrpc:rpc_request is missing too"))
    for s in [s for g in INVALIDATION_SOURCES for s in g] + [RANGE_INVALIDATION]:
        if s.event in have:
            add(s.event)
    sources["invalidations"] = ", ".join(
        s.event for g in INVALIDATION_SOURCES for s in g if s.event in have) or "-"
    if sources["invalidations"] == "-":
        warnings.append("no invalidation event: restarts are counted but not explained")
    for s in REVALIDATION_SOURCES:
        if s.event in have:
            add(s.event)
    # Listings: the series' own events, else the open/position kprobes; the getdents64 system
    # calls on any kernel with syscall events.
    series = [s.event for s in CALL_SOURCES[0] if s.event in have]
    if series:
        for ev in series:
            add(ev)
        sources["calls"] = ", ".join(series)
    else:
        opens = [s for s in OPEN_KPROBES.values() if usable(s)]
        for s in opens:
            probe(s)
        sources["calls"] = ("kprobes on " + ", ".join(s.function for s in opens)) if opens \
            else ""
    sys_events = [s.event for s in SYSCALL_SOURCES if s.event in have]
    for ev in sys_events:
        add(ev)
    sources["calls"] = ", ".join(x for x in (sources["calls"], ", ".join(sys_events)) if x) \
        or "-"
    if sources["calls"] == "-":
        warnings.append("nothing tells listings apart (no open kprobes, no syscall events): "
                        "a cookie-0 READDIR after the start cannot be told from a new open")
    for ev in CONTEXT_EVENTS + (DCACHE_EVENTS if dcache else ()):
        if ev in have:
            add(ev)
    if slab:
        kmem = [ev for ev in SLAB_EVENTS if ev in have]
        if not kmem:
            raise KernelLacks("--slab: this kernel has none of the kmem events "
                              + ", ".join(SLAB_EVENTS))
        for ev in kmem:
            add(ev)
    return Plan(release, machine, events, kprobes, sources, warnings)


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
