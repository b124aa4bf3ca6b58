"""Changing the running kernel's tracefs and putting it back exactly: the kprobes a plan needs,
the events enabled, the buffer size, tracing_on and the clock.

`record` and `watch` change tracefs through a Session; whatever they exit by (success, an error,
SIGINT, SIGTERM), Session.close() removes the kprobes it added, turns off every event that was
off before, and writes back the buffer size, tracing_on and the trace clock it found. Nothing
here knows an event name: the plan (recordplan.plan) says what to add.
"""

import os
import re
import signal
import subprocess

from .recordplan import KernelLacks


class Refused(Exception):
    """The command cannot run here; the message says why and what to do."""


def check_root():
    if os.geteuid() != 0:
        raise Refused(
            "must run as root: adding kprobes and enabling trace events needs it "
            "(sudo nfs-readdir ...)"
        )


def _write(path, text, append=False):
    # os.open, not open(path, "a"): Python seeks to the end of a file opened for appending, and
    # kprobe_events refuses SEEK_END (EINVAL); O_TRUNC would delete every kprobe.
    fd = os.open(path, os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path):
    with open(path) as f:
        return f.read()


def buffer_kb(text):
    """The size a buffer_size_kb text stands for. A buffer no one has used yet reads "7
    (expanded: 1408)": 7 KiB now, 1408 KiB from the first use on (enabling any event). Once
    used it cannot shrink back to unexpanded, so 1408 is what putting it back means; writing
    the whole text is refused (EINVAL), and writing 7 would leave a real 7 KiB buffer."""
    m = re.match(r"\s*\d+\s*\(expanded:\s*(\d+)\)", text)
    return m.group(1) if m else text.strip()


def _kernel_says(tracefs, function):
    """Why the kernel refused a probe: tracefs error_log, or its log lines naming the function
    (a refusal after parsing, e.g. a function that cannot be probed, goes only there)."""
    path = os.path.join(tracefs, "error_log")
    lines = _read(path).strip().splitlines()[-3:] if os.path.exists(path) else []
    if not lines:
        try:
            log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
            lines = [x for x in log.splitlines() if function in x][-2:]
        except (OSError, subprocess.SubprocessError):
            pass
    return f" (kernel: {' | '.join(x.strip() for x in lines)})" if lines else ""


class Terminated(Exception):
    """SIGTERM arrived: unwind like Ctrl-C, with SIGTERM's exit status."""


def _on_term(signum, frame):
    raise Terminated()


def trap_sigterm():
    """SIGTERM unwinds through the finally blocks, as Ctrl-C does."""
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGHUP, _on_term)


def shield():
    """From here on, SIGINT and SIGTERM wait: cleanup must not be cut short."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)


class Session:
    """The changes one command makes to tracefs, undone by close(). With instance, events and
    buffer live in a tracefs instance of that name (removed again), so the top buffer (where
    another recorder may run) is left alone; kprobes are always global."""

    def __init__(self, tracefs, instance=None):
        self.tracefs = tracefs
        self.top = tracefs
        self.root = tracefs
        self.instance = None
        self.kprobes = []  # events this session added, to remove
        self.enabled = []  # events this session enabled (instance mode)
        self.filters = {}  # event -> the filter it had before this session set one
        self._saved = {}
        if instance:
            d = os.path.join(tracefs, "instances", instance)
            try:
                os.mkdir(d)
            except FileExistsError:
                raise Refused(
                    f"the tracefs instance {d} exists already: another watch is "
                    f"running, or remove it with rmdir {d}"
                ) from None
            except OSError as e:
                raise Refused(f"cannot create the tracefs instance {d}: {e.strerror}") from None
            self.instance, self.root = d, d
        for name in ("buffer_size_kb", "tracing_on", "trace_clock"):
            self._saved[name] = _read(os.path.join(self.root, name))
        self._saved["set_event"] = set(_read(os.path.join(self.root, "set_event")).split())
        # "X": the CPUs' buffers differ in size; each is put back on its own.
        self._per_cpu = {}
        if self._saved["buffer_size_kb"].strip() == "X":
            pc = os.path.join(self.root, "per_cpu")
            self._per_cpu = {
                os.path.join(pc, c, "buffer_size_kb"): _read(os.path.join(pc, c, "buffer_size_kb"))
                for c in os.listdir(pc)
            }

    # -------------------------------------------------------------------------- kprobes
    def add_kprobes(self, kprobes):
        """Add each kprobe in the first form the kernel takes. Returns (the definitions used,
        {event: why the kernel refused it}) for the caller to record without the refused ones.
        A kprobe of the same name already there (a run that was killed with SIGKILL) is
        refused, never reused or removed: it is not ours."""
        path = os.path.join(self.tracefs, "kprobe_events")
        existing = (
            {
                line.split()[0].split(":", 1)[1].replace("/", ":")
                for line in _read(path).splitlines()
                if line.strip()
            }
            if kprobes
            else set()
        )
        used, refused = [], {}
        for k in kprobes:
            if k.event in existing:
                raise Refused(
                    f"a kprobe {k.event} exists already; if no other nfs-readdir or "
                    f"reproducer runs, remove it: echo '-:{k.event.replace(':', '/')}'"
                    f" >> {path}"
                )
            errors = []
            for d in k.definitions:
                try:
                    _write(path, d + "\n", append=True)
                except OSError as e:
                    errors.append(f"{d!r}: {e.strerror}")
                    continue
                self.kprobes.append(k.event)
                used.append(d)
                break
            else:
                refused[k.event] = "; ".join(errors) + _kernel_says(self.tracefs, k.spec.function)
        return used, refused

    # -------------------------------------------------------------------------- instance
    def enable(self, events, buffer_kb, clock=None, filters=None):
        """Instance mode: enable the events, size the buffer, pick the clock, then trace.
        filters: {event: tracefs filter expression}, set before the event goes on, so that
        the kernel drops the records the filter rejects before they reach the buffer.

        The events go on before the buffer is sized: before 6.x "expanded" is one flag for
        all buffers, and writing an instance's buffer_size_kb while the top buffer is still
        unexpanded ("7 (expanded: 1408)") sets it without expanding the top one, which then
        stays a real 7 KiB for good (a stock 5.10 guest read 7 after watch). Enabling an
        event first expands the top buffer as any first use does."""
        _write(os.path.join(self.root, "tracing_on"), "0")
        for ev in events:
            system, name = ev.split(":", 1)
            expr = (filters or {}).get(ev)
            if expr:
                path = os.path.join(self.root, "events", system, name, "filter")
                self.filters.setdefault(ev, _read(path).strip())
                try:
                    _write(path, expr)
                except OSError as e:
                    raise KernelLacks(
                        f"cannot filter {ev} with {expr!r}: {e.strerror}"
                        + _kernel_says(self.tracefs, name)
                    ) from None
            try:
                _write(os.path.join(self.root, "events", system, name, "enable"), "1")
            except OSError as e:
                raise KernelLacks(f"cannot enable {ev}: {e.strerror}") from None
            self.enabled.append(ev)
        _write(os.path.join(self.root, "buffer_size_kb"), str(buffer_kb))
        if clock:
            _write(os.path.join(self.root, "trace_clock"), clock)
        _write(os.path.join(self.root, "tracing_on"), "1")

    # -------------------------------------------------------------------------- undo
    def close(self):
        """Put back everything this session changed. Returns the steps that failed."""
        failed = []

        def step(what, fn):
            try:
                fn()
            except OSError as e:
                failed.append(f"{what}: {e.strerror or e}")

        before = self._saved["set_event"]
        now = set(_read(os.path.join(self.root, "set_event")).split())
        for ev in sorted((now - before) | set(self.enabled)):
            system, name = ev.split(":", 1)
            step(
                f"disable {ev}",
                lambda s=system, n=name: _write(
                    os.path.join(self.root, "events", s, n, "enable"), "0"
                ),
            )
        for ev, old in sorted(self.filters.items()):
            system, name = ev.split(":", 1)
            # "none" is how an event without a filter reads; "0" clears one.
            step(
                f"restore the filter of {ev}",
                lambda s=system, n=name, v=old: _write(
                    os.path.join(self.root, "events", s, n, "filter"), "0" if v == "none" else v
                ),
            )
        self.filters = {}
        if self.instance:
            step(f"remove {self.instance}", lambda: os.rmdir(self.instance))
        else:
            for name in ("buffer_size_kb", "trace_clock", "tracing_on"):
                value = self._saved[name]
                if name == "trace_clock":  # "[local] global ...": the bracketed one
                    value = value.split("[", 1)[1].split("]", 1)[0] if "[" in value else ""
                if name == "buffer_size_kb" and self._per_cpu:
                    for p, v in self._per_cpu.items():
                        if buffer_kb(_read(p)) != buffer_kb(v):
                            step(f"restore {p}", lambda p=p, v=v: _write(p, buffer_kb(v)))
                elif name == "buffer_size_kb":
                    path, value = os.path.join(self.root, name), buffer_kb(value)
                    if buffer_kb(_read(path)) != value:
                        step(f"restore {name}", lambda p=path, v=value: _write(p, v))
                elif value.strip() and _read(os.path.join(self.root, name)) != self._saved[name]:
                    step(
                        f"restore {name}",
                        lambda n=name, v=value: _write(os.path.join(self.root, n), v.strip()),
                    )
        path = os.path.join(self.tracefs, "kprobe_events")
        for ev in reversed(self.kprobes):
            step(
                f"remove kprobe {ev}",
                lambda e=ev: _write(path, f"-:{e.replace(':', '/')}\n", append=True),
            )
        self.kprobes = []
        return failed
