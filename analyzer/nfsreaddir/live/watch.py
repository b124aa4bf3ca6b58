"""`nfs-readdir watch`: invalidations and restarts as they happen, from the ring buffer.

The events and kprobes are record's (recordplan.plan), enabled in a tracefs instance of the watch's
own (its buffer, with the CLOCK_MONOTONIC clock, so that how late a line comes can be measured),
read page by page from per_cpu/cpuN/trace_pipe_raw. The events read so far are a trace like any
other (LiveTrace). Each event is fed to the analyzer's reader model (opens.Opens, see _Tracker),
which prints each restart and invalidation as it is found; where no open or getdents event
delimits listings, analysis.analyze runs over everything read so far instead. At the end,
analyze() over all the events and its verdict (verdict.judge) are the summary and the exit
status. So `watch` answers exactly what `record` + `analyze` would of the same events.
"""

import json
import os
import sys
import time

import pandas as pd

from .. import events, pipeline
from ..model import opens, tables
from ..trace import BASE_COLUMNS, field_column, pipe
from ..units import NS
from . import recordplan, tracing

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


class LiveTrace:
    """The events read from the ring buffer so far, with the interface of a trace file."""

    def __init__(self, tracefs, plan):
        self.info = {
            "format": "live ring buffer",
            "path": "watch",
            "uname": plan.release,
            "lost_events": [],
            "cpus": None,
        }
        self._formats = {}
        for ev in plan.events:
            fmt = recordplan.tracefs_format(tracefs, ev)
            if fmt is not None:
                self._formats[ev] = fmt
        self._by_id = {f.id: f for f in self._formats.values()}
        self.rows = {ev: [] for ev in self._formats}  # (ts, cpu, pid, fields)
        self._comms = {}
        self.wanted = {
            self._formats[ev].id: sorted(cols)
            for ev, cols in pipeline.readdir_events(self).items()
            if ev in self._formats
        }

    def event_names(self):
        return set(self._formats)

    def event_format(self, name):
        return self._formats.get(name)

    def comm(self, pid):
        """The process name, looked up when first seen (it may have exited by the end)."""
        c = self._comms.get(pid)
        if c is None:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    c = f.read().strip()
            except OSError:
                c = f"<{pid}>"
            self._comms[pid] = c
        return c

    def add(self, cpu, ts, eid, pid, fields):
        fmt = self._by_id[eid]
        self.comm(pid)
        self.rows[fmt.full_name].append((ts, cpu, pid, fields))

    def check_records(self):
        """The trace.dat reader's check of every record: the ring buffer's records were
        decoded as they came (lost events are counted in info)."""
        return []

    def read(self, req, on_damage="raise", base=BASE_COLUMNS):
        out = {}
        for ev, cols in req.items():
            rows = sorted(self.rows.get(ev, []), key=lambda r: (r[0], r[1]))
            d = {
                "ts": [r[0] for r in rows],
                "cpu": [r[1] for r in rows],
                "pid": [r[2] for r in rows],
                "comm": [self._comms.get(r[2], "") for r in rows],
            }
            for c in cols or []:
                d[field_column(c)] = [r[3].get(c) for r in rows]
            df = pd.DataFrame(d)
            if not len(df):
                df = df.astype({"ts": "int64", "cpu": "int64", "pid": "int64"})
            out[ev] = df
        return out


class _Reader:
    """trace_pipe_raw of every CPU of the instance, read without blocking."""

    def __init__(self, root, tracefs):
        sub = os.path.join(root, "buffer_subbuf_size_kb")
        self.page = (
            int(open(sub).read()) * 1024 if os.path.exists(sub) else os.sysconf("SC_PAGE_SIZE")
        )
        from ..trace.format import parse_header_page as _parse_header_page

        with open(os.path.join(tracefs, "events", "header_page")) as f:
            self.header = _parse_header_page(f.read(), 8)
        cpus = sorted(
            int(d[3:]) for d in os.listdir(os.path.join(root, "per_cpu")) if d.startswith("cpu")
        )
        self.fds = {
            c: os.open(
                os.path.join(root, "per_cpu", f"cpu{c}", "trace_pipe_raw"),
                os.O_RDONLY | os.O_NONBLOCK,
            )
            for c in cpus
        }

    def drain(self, live):
        """Read every page there is; returns the events taken, in time order
        ((ts, cpu, event id, pid, fields)): a reader that moved between CPUs meanwhile has its
        events from both in the order it made them."""
        new = []
        for cpu, fd in self.fds.items():
            while True:
                try:
                    page = os.read(fd, self.page)
                except BlockingIOError:
                    break
                if not page:
                    break
                for item in pipe.decode_page(page, self.header, live._by_id, live.wanted):
                    if item[0] == "lost":
                        live.info["lost_events"].append({"cpu": cpu, "ts": None, "count": item[1]})
                        continue
                    ts, eid, pid, fields = item
                    live.add(cpu, ts, eid, pid, fields)
                    new.append((ts, cpu, eid, pid, fields))
        new.sort(key=lambda x: (x[0], x[1]))
        return new

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def _now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _who(comm, pid, fileid):
    return f"{comm}[{pid}] dir {fileid if fileid is not None else '?'}"


def _say(out, start, ts, what, who, text, now=None):
    """One line of the watch: when the event happened (from the start), what, whose listing,
    and how late the line comes."""
    now = _now_ns() if now is None else now
    out.write(
        f"[{(ts - start) / NS:+9.3f}s] {what:<12} {who}: {text} "
        f"(seen {(now - ts) / NS:.2f}s after)\n"
    )


def _restart_at(below):
    return "below the reader's position" if below else "at cookie 0"


class _Tracker:
    """Restarts and invalidations printed the moment their event is read. The analyzer's
    reader model (opens.Opens, what analyze() runs over a whole trace: a READDIR at cookie 0,
    or for a whole page below its position, while the reader is past the start is a restart)
    is fed one event at a time, with the events load() would read (tables.stream_sources),
    so a line costs microseconds; analyzing every event so far on each one took seconds under
    emulation, and the lines came 10-16 s late. Used where listings are delimited by opens
    (the open kprobes or the series' events); the summary at the end is analyze()'s over all
    the events either way."""

    def __init__(self, live, out, dir_fileid, start_ns):
        self.live, self.out, self.dir, self.start = live, out, dir_fileid, start_ns
        self.map = tables.stream_sources(live)
        calls = [f for t, _, f in self.map.values() if t == "calls"]
        self.usable = bool(calls) and any(t == "rpc" for t, _, _ in self.map.values())
        # The kernel watched is the running one.
        self.model = opens.Opens(
            any("file" in f for f in calls), events.searches_from_first_page(os.uname().release)
        )
        self.rows = 0
        self.restarts = self.invalidations = 0  # lines printed
        self._invals = {}  # id(open) -> invalidations seen
        # Per open (by id): a cookie-0 READDIR is a restart or not by what follows it
        # (opens._Open), so its (row, time) waits here; the restarts printed so far; and the
        # restart being caught up on: (the cookie to pass, the invalidations seen then). A
        # READDIR that goes back again before that cookie, with no new invalidation, is part
        # of the same restart (analysis counts it once too).
        self._zero = {}
        self._printed = {}
        self._catchup = {}

    def _shown(self, o):
        return self.dir is None or o.fileid in (None, self.dir)

    def _line(self, ts, what, o, text):
        _say(self.out, self.start, ts, what, _who(o.comm, o.pid, o.fileid), text)

    def feed(self, new):
        """Take the events drain() returned; print a line for each restart and invalidation."""
        wrote = False
        model = self.model
        for ts, _cpu, eid, pid, fields in new:
            m = self.map.get(self.live._by_id[eid].full_name)
            if m is None:
                continue
            table, src, fmap = m
            if src.where and fields.get(src.where[0]) not in src.where[1]:
                continue
            row = {canon: fields.get(raw) for canon, raw in fmap.items()}
            row.update(src.constants)
            if table == "rpc":
                o = model.of_readdir(pid, self.live.comm(pid), ts)
                cookie = row.get("cookie")
                before = o.asked
                o.readdir(self.rows, ts, cookie)
                if cookie == 0:
                    self._zero[id(o)] = (self.rows, ts)
                self.rows += 1
                if row.get("fileid") is not None and o.fileid is None:
                    o.dev, o.fileid = row.get("dev"), row["fileid"]
                c = self._catchup.get(id(o))
                if c is not None and cookie is not None and cookie > c[0]:
                    del self._catchup[id(o)]
                wrote |= self._restarts(o, before)
            elif table == "calls":
                model.call(dict(row, pid=pid, ts=ts, comm=self.live.comm(pid)))
                o = model.reading(pid)
                if o is not None:
                    wrote |= self._restarts(o, o.asked)
            elif table == "rpc_directory":
                o = model.reading(pid)
                if o is not None and o.fileid is None:
                    o.dev, o.fileid = row.get("dev"), row.get("fileid")
            elif table == "invalidations":
                fileid = row.get("fileid")
                # The opens of that directory, else the one the invalidating process reads.
                mine = [o for o in model.live.values() if o.fileid == fileid] or [
                    o for o in (model.reading(pid),) if o is not None
                ]
                for o in mine:
                    if not self._shown(o):
                        continue
                    n = self._invals[id(o)] = self._invals.get(id(o), 0) + 1
                    self.invalidations += 1
                    self._line(
                        ts,
                        "invalidation",
                        o,
                        f"{src.event} ({row.get('reason')}) by "
                        f"{self.live.comm(pid)}[{pid}]; so far {n}, "
                        f"{(ts - o.start) / NS:.3f}s into the listing",
                    )
                    wrote = True
        if wrote:
            self.out.flush()

    def _restarts(self, o, asked):
        """Print the restarts the open's last event settled; asked: the highest cookie it
        had asked before that event."""
        key = id(o)
        done = self._printed.get(key, (0, 0))
        new = o.restart_rows[done[0] :]
        shown = done[1]
        wrote = False
        for r in new:
            zero = self._zero.get(key)
            when = zero[1] if zero is not None and zero[0] == r else o.end
            invals = self._invals.get(key, 0)
            c = self._catchup.get(key)
            if c is not None and c[1] == invals:
                continue
            self._catchup[key] = (max(asked, o.targets.get(r, 0)), invals)
            if not self._shown(o):
                continue
            self.restarts += 1
            shown += 1
            at = _restart_at(r in o.targets)
            self._line(
                when,
                "restart",
                o,
                f"READDIR #{o.rows.index(r) + 1} {at}; so far {shown} "
                f"restart{'s' * (shown != 1)}, {len(o.rows)} READDIRs in "
                f"{(when - o.start) / NS:.3f}s",
            )
            wrote = True
        self._printed[key] = (len(o.restart_rows), shown)
        return wrote


class _Printer:
    """One line per restart and per invalidation the analysis finds, each once."""

    def __init__(self, out, dir_fileid, start_ns):
        self.out, self.dir, self.start = out, dir_fileid, start_ns
        self.seen = set()

    def listings(self, a):
        return [lst for lst in a.listings if self.dir is None or lst.fileid in (None, self.dir)]

    def show(self, a):
        now = _now_ns()
        for lst in self.listings(a):
            who = _who(lst.comm, lst.pid, lst.fileid)
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
                        f"READDIR #{x.rpc_index + 1} {_restart_at(x.cookie)}; so far "
                        f"{len(done)} restart{'s' * (len(done) != 1)}, {n_rpc} READDIRs, "
                        f"{sum(r.refetched for r in done)} re-read in "
                        f"{sum(r.cost_ns for r in done) / NS:.3f}s"
                    )
                    _say(self.out, self.start, ts, "restart", who, text, now)
                else:
                    n = sum(1 for i in lst.invalidations if i.ts <= ts)
                    chain = " -> ".join(x.chain + [x.reason]) if x.chain else x.reason
                    then = (
                        "; then cookie 0: a restart or a new open"
                        if x.followed_by_ambiguous
                        else ""
                    )
                    _say(
                        self.out,
                        self.start,
                        ts,
                        "invalidation",
                        who,
                        f"{chain}; so far {n}, {(ts - lst.start) / NS:.3f}s into the listing{then}",
                        now,
                    )
        self.out.flush()


def run(duration=None, directory=None, as_json=False, out=sys.stdout):
    """Watch until Ctrl-C, SIGTERM or the end of the duration; returns check's exit status
    (0 good, 1 bad, 125 cannot decide)."""
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
        live = LiveTrace(tfs, plan)
        plan.events, filters = watched(live, plan)
        reader = _Reader(session.root, tfs)
        live.info["cpus"] = len(reader.fds)
        session.enable(plan.events, BUFFER_KB, clock, filters)
        start = _now_ns()
        # With --json, stdout is the summary alone; what runs and the lines go to stderr.
        say = sys.stderr if as_json else out
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
        say.flush()
        tracker = _Tracker(live, say, dir_fileid, start)
        # Without opens to delimit listings, the lines come from analyze() over everything so
        # far, whenever an invalidation or a READDIR at cookie 0 comes in (slow, but exact).
        printer = None if tracker.usable else _Printer(say, dir_fileid, start)
        inval = {s.event for g in events.INVALIDATION_SOURCES for s in g}
        rpc = {s.event for g in events.RPC_SOURCES for s in g} | {k.event for k in plan.kprobes}
        deadline = start + int(duration * NS) if duration else None
        while deadline is None or _now_ns() < deadline:
            new = reader.drain(live)
            if printer is None:
                tracker.feed(new)
            elif any(
                live._by_id[e].full_name in inval
                or (live._by_id[e].full_name in rpc and f.get("cookie") == 0)
                for _, _, e, _, f in new
            ):
                a = pipeline.listings_so_far(live)
                if a is not None:
                    printer.show(a)
            time.sleep(POLL_SECONDS)
    except (KeyboardInterrupt, tracing.Terminated):
        interrupted = True
    finally:
        tracing.shield()
        if reader is not None:
            try:
                reader.drain(live)
            finally:
                reader.close()
        failed = session.close()
        for f in failed:
            print(f"nfs-readdir watch: cleanup failed: {f}", file=sys.stderr)
    return _summary(live, dir_fileid, as_json, out, interrupted, tracker)


def _summary(live, dir_fileid, as_json, out, interrupted, tracker=None):
    from ..present.render import print_analysis

    a, v = pipeline.live_summary(
        live, keep=lambda lst: dir_fileid is None or lst.fileid in (None, dir_fileid)
    )
    # The lines against the summary: they differ only where the stream missed what the whole
    # trace shows (an event read after Ctrl-C, a READDIR before its open was seen).
    lines = None if tracker is None or not tracker.usable else tracker.restarts
    total = sum(len(lst.restarts) for lst in a.listings) if a is not None else 0
    if as_json:
        d = a.to_dict() if a is not None else {"listings": []}
        d["verdict"] = v.to_dict()
        d["restart_lines"] = lines
        json.dump(d, out, indent=2, default=str)
        out.write("\n")
    else:
        out.write("\nnfs-readdir watch: " + ("interrupted; " if interrupted else "") + "summary\n")
        if a is not None and a.listings:
            print_analysis([a], out=out)
        if lines is not None and lines != total:
            out.write(
                f"\nnote: {lines} restart line(s) above, {total} restart(s) in the "
                "whole trace: the summary is the one to go by\n"
            )
        out.write(f"\nverdict: {v.reason}\n")
    out.flush()
    return v.code
