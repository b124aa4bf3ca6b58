"""The ring buffer `watch` reads: its per-CPU trace_pipe_raw pages (Reader) and the events read
so far as a trace like any other (LiveTrace), which keeps every event for the summary at the end
unless told not to (a service that runs for hours keeps none: memory stays flat)."""

import os
from collections.abc import Mapping

from .. import pipeline
from ..trace import BASE_COLUMNS, field_column, pipe
from ..trace.base import columns_of, one_piece
from . import recordplan


class LiveTrace:
    """The events read from the ring buffer so far, with the interface of a trace file
    (trace.base.Trace): what reads a trace (the pipeline, the tables) reads it as it reads one."""

    # Without keep, the process names looked up are forgotten past this many (pids are reused).
    COMMS_KEPT = 4096

    def __init__(self, tracefs, plan, keep=True):
        self.keep = keep
        # Events read so far; events lost (the counts the ring buffer gives) and the pages that
        # said some were lost (the count is not always known).
        self.events = self.lost = self.losses = 0
        self.path = "watch"
        self.info = {
            "format": "live ring buffer",
            "path": self.path,
            "uname": plan.release,
            "lost_events": [],
            "cpus": None,
        }
        self._formats = {}
        for ev in plan.events:
            fmt = recordplan.tracefs_format(tracefs, ev)
            if fmt is not None:
                self._formats[ev] = fmt
        self.by_id = {f.id: f for f in self._formats.values()}
        # each event's rows: (ts, cpu, pid, fields)
        self.rows: dict[str, list[tuple]] = {ev: [] for ev in self._formats}
        self.counts = dict.fromkeys(self._formats, 0)  # kept or not
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

    def event_counts(self):
        return {ev: n for ev, n in self.counts.items() if n}

    def comm(self, pid, fresh=False):
        """The process name, looked up when first seen (it may have exited by the end); fresh:
        looked up again, for a process that opens a directory: it may have exec'd since its
        first event (a lister started by a wrapper, whose events came first, was named after
        the wrapper for good)."""
        c = None if fresh else self._comms.get(pid)
        if c is None:
            if not self.keep and len(self._comms) >= self.COMMS_KEPT:
                self._comms.clear()
            try:
                with open(f"/proc/{pid}/comm") as f:
                    c = f.read().strip()
            except OSError:
                c = f"<{pid}>"
            self._comms[pid] = c
        return c

    def add(self, cpu, ts, eid, pid, fields):
        fmt = self.by_id[eid]
        self.comm(pid)
        self.events += 1
        self.counts[fmt.full_name] += 1
        if self.keep:
            self.rows[fmt.full_name].append((ts, cpu, pid, fields))

    def check_records(self):
        """The trace.dat reader's check of every record: the ring buffer's records were
        decoded as they came (lost events are counted in info)."""
        return []

    def read(self, req, on_damage="raise", base=BASE_COLUMNS):
        """The events kept so far (none without keep), as a trace file's read() gives them:
        nothing here is damaged, so on_damage has nothing to act on."""
        # pandas here, not at the top: only the summary reads frames, and it is most of watch's
        # start-up under emulation (model/causal.py says more).
        import pandas as pd

        if not isinstance(req, Mapping):
            req = dict.fromkeys(req)
        out = {}
        for ev, cols in req.items():
            if cols is None:  # all the event's own fields
                fmt = self._formats.get(ev)
                cols = fmt.user_fields() if fmt is not None else []
            elif isinstance(cols, str):
                cols = [cols]
            rows = sorted(self.rows.get(ev, []), key=lambda r: (r[0], r[1]))
            every = {
                "ts": [r[0] for r in rows],
                "cpu": [r[1] for r in rows],
                "pid": [r[2] for r in rows],
                "comm": [self._comms.get(r[2], "") for r in rows],
            }
            d = {c: every[c] for c in BASE_COLUMNS if c == "ts" or c in base}
            for c in cols:
                d[field_column(c)] = [r[3].get(c) for r in rows]
            df = pd.DataFrame(d)
            if not len(df):
                df = df.astype({c: "int64" for c in ("ts", "cpu", "pid") if c in df})
            out[ev] = df
        return out

    def read_columns(self, req, on_damage="raise", base=BASE_COLUMNS):
        return columns_of(self.read(req, on_damage, base))

    def read_pieces(self, req, on_damage="raise", base=BASE_COLUMNS):
        return one_piece(self.read_columns(req, on_damage, base))


class Reader:
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
        events from both in the order it made them. Events lost before a page are an item of
        their own, (the page's time, cpu, None, None, {"lost": count or None}), before that
        page's events: where they were lost is part of the stream (live/tracker.py)."""
        new = []
        for cpu, fd in self.fds.items():
            while True:
                try:
                    page = os.read(fd, self.page)
                except BlockingIOError:
                    break
                if not page:
                    break
                for item in pipe.decode_page(page, self.header, live.by_id, live.wanted):
                    if item[0] == "lost":
                        _, count, ts = item
                        live.lost += count or 0
                        live.losses += 1
                        if live.keep:
                            live.info["lost_events"].append({"cpu": cpu, "ts": ts, "count": count})
                        new.append((ts, cpu, None, None, {"lost": count}))
                        continue
                    ts, eid, pid, fields = item
                    live.add(cpu, ts, eid, pid, fields)
                    new.append((ts, cpu, eid, pid, fields))
        # (a loss before an event of the same time and CPU)
        new.sort(key=lambda x: (x[0], x[1], x[2] is not None))
        return new

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
