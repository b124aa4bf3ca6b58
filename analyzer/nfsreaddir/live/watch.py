"""`nfs-readdir watch`: invalidations and restarts as they happen, from the ring buffer.

The events and kprobes are record's (recordplan.plan), enabled in a tracefs instance of the watch's
own (its buffer, with the CLOCK_MONOTONIC clock, so that how late a line comes can be measured),
read page by page from per_cpu/cpuN/trace_pipe_raw. The events read so far are a trace like any
other (LiveTrace). Each event is fed to the analyzer's reader model (live/tracker.py),
which prints each restart and invalidation as it is found; where no open or getdents event
delimits listings, analysis.analyze runs over everything read so far instead. At the end,
analyze() over all the events and its verdict (verdict.judge) are the summary it returns, which
the command prints, and the exit status. So `watch` answers exactly what `record` + `analyze`
would of the same events.
With --metrics or --textfile it is a service instead: the tracker counts into Prometheus metrics
(live/metrics.py), prints no line and keeps no event, so that it can run for months.
"""

import os
import sys
import time
from typing import Any, NamedTuple

from .. import events, pipeline
from ..units import NS
from . import recordplan, tracing
from .metrics import Exposition, Metrics
from .ringbuffer import LiveTrace, Reader
from .tracker import Tracker, now_ns, restart_at, say, who

BUFFER_KB = 4096  # per CPU; read every POLL_SECONDS, a listing's events fit many times
POLL_SECONDS = 0.2
# The dirent type of a directory (DT_DIR, include/linux/fs_types.h), as the inode events that
# carry the inode's type (the nfs_inode_event_done class: nfs_umode_to_dtype(i_mode)) give it.
DT_DIR = 4


def watched(live, plan):
    """What watch enables, from the plan: only the events analyze() reads (its requires: the
    context events the plan adds for a person reading `trace-cmd report` are read by no table),
    and {event: tracefs filter}. Inode events of the revalidations and invalidations tables
    that say the inode's type are kept to directories: 6.x and 7.x log
    nfs:nfs_set_cache_invalid for the files under the directory too, whenever their attributes
    change (22-28 in a modified 4,000-file listing, 23,794 in the multi-6.1 trace), none of which
    analyze() selects (its rows are the listing's directory's, analysis._select)."""
    read = set(pipeline.readdir_events(live))
    evs = [e for e in plan.events if e in read]
    inode_tables = (
        [s for g in events.INVALIDATION_SOURCES for s in g]
        + events.REVALIDATION_SOURCES
        + [events.RANGE_INVALIDATION]
    )
    filters = {}
    for s in inode_tables:
        fmt = live.event_format(s.event)
        if s.event in evs and fmt is not None and {"type", "fileid"} <= set(fmt.user_fields()):
            filters[s.event] = f"type == {DT_DIR}"
    return evs, filters


class _Printer:
    """One line per restart and per invalidation the analysis finds, each once."""

    def __init__(self, out, dir_fileid, start_ns):
        self.out, self.dir, self.start = out, dir_fileid, start_ns
        self.seen = set()

    def listings(self, a):
        return [lst for lst in a.listings if self.dir is None or lst.fileid in (None, self.dir)]

    def show(self, a):
        now = now_ns()
        for lst in self.listings(a):
            whose = who(lst.comm, lst.pid, lst.fileid)
            items = sorted(
                [(r.ts, 1, r) for r in lst.restarts] + [(i.ts, 0, i) for i in lst.invalidations],
                key=lambda x: x[:2],
            )
            for ts, kind, x in items:
                key = (lst.pid, lst.start, kind, ts)
                if key in self.seen:
                    continue
                self.seen.add(key)
                if kind:
                    done = [r for r in lst.restarts if r.ts <= ts]
                    n_rpc = int((lst.rpcs["ts"] <= ts).sum())
                    text = (
                        f"READDIR #{x.rpc_index + 1} {restart_at(x.cookie)}; so far "
                        f"{len(done)} restart{'s' * (len(done) != 1)}, {n_rpc} READDIRs, "
                        f"{sum(r.refetched for r in done)} re-read in "
                        f"{sum(r.cost_ns for r in done) / NS:.3f}s"
                    )
                    say(self.out, self.start, ts, "restart", whose, text, now)
                else:
                    n = sum(1 for i in lst.invalidations if i.ts <= ts)
                    chain = " -> ".join(x.chain + [x.reason]) if x.chain else x.reason
                    then = (
                        "; then cookie 0: a restart or a new open"
                        if x.followed_by_ambiguous
                        else ""
                    )
                    say(
                        self.out,
                        self.start,
                        ts,
                        "invalidation",
                        whose,
                        f"{chain}; so far {n}, {(ts - lst.start) / NS:.3f}s into the listing{then}",
                        now,
                    )
        self.out.flush()


class Summary(NamedTuple):
    """What watch ends with, for the command to show: the analysis of the events read (None
    while they hold no listing) and its verdict (whose code is the exit status), whether it was
    interrupted, and the restart lines printed as they came (None where the lines came from the
    analysis itself: they are its restarts)."""

    analysis: Any
    verdict: Any
    interrupted: bool
    restart_lines: int | None


class ServiceEnd(NamedTuple):
    """How watch as a service (--metrics, --textfile) ended: interrupted or at the end of its
    duration, and what its tracker counted ((events read, lost, restarts); None if it never
    began)."""

    interrupted: bool
    counts: tuple[int, int, int] | None


def run(duration=None, directory=None, as_json=False, out=sys.stdout, listen=None, textfile=None):
    """Watch until Ctrl-C, SIGTERM or the end of the duration, printing to out what it finds
    as it comes; returns its Summary (check's answer on what it read). With listen ((addr,
    port): --metrics) or textfile (a directory: --textfile), a service: Prometheus metrics
    instead of lines, no event kept for a summary (memory stays flat over months), and a
    ServiceEnd."""
    dir_fileid = None
    if directory is not None:
        try:
            dir_fileid = os.stat(directory).st_ino
        except OSError as e:
            raise tracing.Refused(f"--dir {directory}: {e.strerror}") from None
    tracing.check_root()
    tfs = recordplan.find_tracefs()
    group = f"{events.KPROBE_SYSTEM}_w{os.getpid()}"
    plan = recordplan.plan(tfs, group=group)
    service = listen is not None or textfile is not None
    metrics = expo = None
    if service:
        metrics = Metrics(paths={dir_fileid: directory} if directory else None)
        try:
            expo = Exposition(metrics, listen, textfile)
        except OSError as e:
            what = f"--metrics {listen[0]}:{listen[1]}" if listen else f"--textfile {textfile}"
            raise tracing.Refused(f"{what}: {e.strerror or e}") from None
    tracing.trap_sigterm()
    session = tracing.Session(tfs, instance=f"nfs-readdir-watch-{os.getpid()}")
    reader = None
    interrupted = False
    live = tracker = None
    try:
        _, refused = session.add_kprobes(plan.kprobes)
        plan.events = [e for e in plan.events if e not in refused]
        with open(os.path.join(session.root, "trace_clock")) as f:
            clock = (
                "mono" if "mono" in f.read().replace("[", " ").replace("]", " ").split() else None
            )
        live = LiveTrace(tfs, plan, keep=not service)
        plan.events, filters = watched(live, plan)
        reader = Reader(session.root, tfs)
        live.info["cpus"] = len(reader.fds)
        session.enable(plan.events, BUFFER_KB, clock, filters)
        start = now_ns()
        # With --json, stdout is the summary alone; what runs and the lines go to stderr.
        say = sys.stderr if as_json else out
        _announce(say, plan, directory, dir_fileid, refused, filters)
        say.flush()
        tracker = Tracker(live, say, dir_fileid, start, metrics, quiet=service)
        if service and not tracker.usable:
            raise tracing.Refused(
                "--metrics and --textfile count listings as the events delimit them, and this "
                f"kernel gives no event of a reader's calls ({plan.sources['calls']}): "
                "run watch without them"
            )
        if metrics is not None:
            metrics.tracing.set(1)
        # Without opens to delimit listings, the lines come from analyze() over everything so
        # far, whenever an invalidation or a READDIR at cookie 0 comes in (slow, but exact).
        printer = None if tracker.usable else _Printer(say, dir_fileid, start)
        deadline = start + int(duration * NS) if duration else None
        _follow(reader, live, plan, tracker, printer, deadline, metrics, expo)
    except (KeyboardInterrupt, tracing.Terminated):
        interrupted = True
    finally:
        tracing.shield()
        if reader is not None:
            try:
                reader.drain(live)
            finally:
                reader.close()
        if tracker is not None and tracker.usable:
            tracker.stop()
        failed = session.close()
        for f in failed:
            print(f"nfs-readdir watch: cleanup failed: {f}", file=sys.stderr)
        if expo is not None:
            expo.metrics.tracing.set(1 if failed else 0)
            expo.close()
    if service:
        counts = None
        if tracker is not None:
            counts = (tracker.live.events, tracker.live.lost, tracker.restarts)
        return ServiceEnd(interrupted, counts)
    return summary(live, dir_fileid, interrupted, tracker)


def _announce(say, plan, directory, dir_fileid, refused, filters):
    """What watch traces: the kernel, where READDIRs and listings come from, what the kernel
    refused and what it filters."""
    say.write(
        f"nfs-readdir watch: kernel {plan.release}; READDIRs from "
        f"{plan.sources['rpc']}; listings from {plan.sources['calls']}"
        + (f"; directory {directory} (fileid {dir_fileid})" if directory else "")
        + "; Ctrl-C for the summary\n"
    )
    for w in plan.warnings + [
        f"watching without {ev}: the kernel refused it: {why}" for ev, why in refused.items()
    ]:
        say.write(f"  warning: {w}\n")
    for ev, expr in filters.items():
        say.write(f"  {ev} only where {expr} (filtered in the kernel)\n")


def _follow(reader, live, plan, tracker, printer, deadline, metrics, expo):
    """Reads the new events every POLL_SECONDS until the deadline (None: until stopped), into
    the tracker, or without opens to delimit listings to the printer; a service's metrics
    (metrics, expo) are written after each read."""
    inval = {s.event for g in events.INVALIDATION_SOURCES for s in g}
    rpc = {s.event for g in events.RPC_SOURCES for s in g} | {k.event for k in plan.kprobes}
    while deadline is None or now_ns() < deadline:
        new = reader.drain(live)
        if printer is None:
            tracker.feed(new)
            if metrics is not None:
                metrics.health(live)
                expo.write()
        elif any(
            live.by_id[e].full_name in inval
            or (live.by_id[e].full_name in rpc and f.get("cookie") == 0)
            for _, _, e, _, f in new
            if e is not None  # (events lost)
        ):
            a = pipeline.listings_so_far(live)
            if a is not None:
                printer.show(a)
        time.sleep(POLL_SECONDS)


def summary(live, dir_fileid, interrupted, tracker=None):
    """The Summary of the events read so far (live: a trace), its listings kept to the
    directory's (dir_fileid; None: all); tracker: the one that printed lines as they came."""
    a, v = pipeline.live_summary(
        live, keep=lambda lst: dir_fileid is None or lst.fileid in (None, dir_fileid)
    )
    lines = None if tracker is None or not tracker.usable else tracker.restarts
    return Summary(a, v, interrupted, lines)
