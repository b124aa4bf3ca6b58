"""The reader model fed as the ring buffer hands out events (`watch`): restarts and
invalidations printed, or counted into metrics, the moment their event is read, by the rules
analyze() applies to a whole trace (opens.Opens, reader.Catchup)."""

import bisect
import time

from .. import events
from ..model import causal, opens, reader, roundtrips, tables
from ..units import NS
from .attribution import Attribution


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def who(comm, pid, fileid):
    return f"{comm}[{pid}] dir {fileid if fileid is not None else '?'}"


def say(out, start, ts, what, who, text, now=None):
    """One line of the watch: when the event happened (from the start), what, whose listing,
    and how late the line comes."""
    now = now_ns() if now is None else now
    out.write(
        f"[{(ts - start) / NS:+9.3f}s] {what:<12} {who}: {text} "
        f"(seen {(now - ts) / NS:.2f}s after)\n"
    )


def restart_at(below):
    return "below the reader's position" if below else "at cookie 0"


# The READDIRs per open whose times are kept: a restart is settled by the event after its
# READDIR (a cookie-0 one), or by the READDIR after it (one below the reader's position).
RECENT_READDIRS = 4


def _mine(o, inv):
    """Whether an invalidation (ts, pid, dev, fileid, event, reason) is one of open o's, as
    analyze() selects a listing's (analysis._select): one of its directory, or, where either
    names no directory, one by its own process."""
    _, pid, dev, fileid, _, _ = inv
    if fileid is None or o.fileid is None:
        return pid == o.pid
    return fileid == o.fileid and (o.dev is None or dev is None or dev == o.dev)


class Tracker:
    """Restarts and invalidations printed the moment their event is read. The analyzer's
    reader model (opens.Opens, what analyze() runs over a whole trace: a READDIR at cookie 0,
    or for a whole page below its position, while the reader is past the start is a restart)
    is fed one event at a time, with the events load() would read (tables.stream_sources),
    so a line costs microseconds; analyzing every event so far on each one took seconds under
    emulation, and the lines came 10-16 s late. Used where listings are delimited by opens
    (the open kprobes or the series' events); the summary at the end is analyze()'s over all
    the events either way."""

    def __init__(self, live, out, dir_fileid, start_ns, metrics=None, quiet=False):
        self.live, self.out, self.dir, self.start = live, out, dir_fileid, start_ns
        # metrics: a live.metrics.Metrics to count into; quiet: no lines (a service's journal
        # would grow by a line per restart of every client's listings).
        self.metrics, self.quiet = metrics, quiet
        self.map = tables.stream_sources(live)
        calls = [f for t, _, f in self.map.values() if t == "calls"]
        self.usable = bool(calls) and any(t == "rpc" for t, _, _ in self.map.values())
        # The kernel the events come from (LiveTrace: the running one), as analyze() takes it
        # from the trace: whether a READDIR below the reader's position is a restart.
        self.model = opens.Opens(
            any("file" in f for f in calls),
            events.searches_from_first_page(live.info.get("uname")),
        )
        self.rows = 0
        self.restarts = self.invalidations = 0  # lines printed
        # Per open (by id): a READDIR is a restart or not by what follows it (opens._Open: a
        # cookie-0 one by the next event, one below the reader's position by the next
        # READDIR), so the times of its latest READDIRs wait here, by row; the restarts
        # printed so far; and its reader.Catchup, the restart being caught up on (what the
        # metrics count as re-fetched): a READDIR that goes back again before the catch-up
        # ends, with no new invalidation, is part of the same restart (as analyze() counts).
        self._times = {}
        self._printed = {}
        self._catchup = {}
        # Counts of an open whose directory is not known yet, by id: a READDIR's kprobe fires
        # at the call, and the event that names its directory comes with the reply, so the
        # first READDIR of a listing would be counted under an empty directory (and, with
        # --dir, another directory's under this one's).
        self._pending = {}
        # Invalidations met by an open whose directory was not named yet, by id: counted as
        # its own, or not, once it is (as analyze() selects a listing's invalidations).
        self._unnamed = {}
        # Which getdents64 returns went into NFS (only they end a listing at eof), as
        # analyze() marks them (causal.merged).
        self.returns = causal.Returns()
        # Each listing's RPCs (sunrpc:rpc_request), by analyze's window (model/roundtrips),
        # counted once the window holding them is known.
        self.round_trips = Attribution(self._rpcs) if metrics is not None else None
        # (a call waits for its server time only where the replies are traced)
        self._replies = any(t == "latencies" for t, _, _ in self.map.values())
        self._reading = {}  # (_opens)
        # Events lost, where the stream places them (ringbuffer.drain: before a page, on its
        # CPU), as analyze() places a ring-buffer loss (analysis.damage_windows): after its
        # CPU's last READDIR or reader's event and its last loss. Per CPU those two times,
        # and the stretches lost ([from, to]) that a listing under way may still touch.
        self._last_on = {}
        self._lost_on = {}
        self.losses = []
        # Per open (by id): the invalidations of its directory not counted yet, held until an
        # event of the open comes after them (analyze() takes a listing's up to its last
        # event: an open whose close was lost has none after it); and the times of those
        # counted (how many so far, and a restart's catch-up ends at a change before it:
        # reader.Catchup).
        self._held = {}
        self._inval_ts = {}

    def _opens(self, pid):
        """The opens process pid is reading (none where no RPC is counted); kept from one
        event of the opens to the next (an `ls -l` sends a few RPCs per getdents)."""
        if self.round_trips is None:
            return []
        got = self._reading.get(pid)
        if got is None:
            got = self._reading[pid] = [o for o in self.model.live.values() if o.pid == pid]
        return got

    def _shown(self, o):
        return self.dir is None or o.fileid in (None, self.dir)

    def _line(self, ts, what, o, text):
        if self.quiet:
            return
        say(self.out, self.start, ts, what, who(o.comm, o.pid, o.fileid), text)

    def feed(self, new):
        """Take the events drain() returned; print a line for each restart and invalidation."""
        wrote = False
        model = self.model
        for ts, cpu, eid, pid, fields in new:
            if eid is None:
                self._lost(cpu, ts)
                continue
            m = self.map.get(self.live.by_id[eid].full_name)
            if m is None:
                continue
            table, src, fmap = m
            if src.where and fields.get(src.where[0]) not in src.where[1]:
                continue
            if table in ("rpc", "calls"):
                self._last_on[cpu] = ts
            row = {canon: fields.get(raw) for canon, raw in fmap.items()}
            row.update(src.constants)
            if table == "rpc":
                self.returns.seen(pid)
                before = self._opens(pid)
                o = model.of_readdir(pid, self.live.comm(pid), ts)
                self._reading.clear()
                cookie = row.get("cookie")
                o.readdir(self.rows, ts, cookie)
                times = self._times.setdefault(id(o), {})
                times[self.rows] = ts
                if len(times) > RECENT_READDIRS:
                    del times[min(times)]
                self.rows += 1
                if row.get("fileid") is not None and o.fileid is None:
                    o.dev, o.fileid = row.get("dev"), row["fileid"]
                if self.round_trips is not None:
                    self.round_trips.readdir(o, ts, src.event)
                    self.round_trips.event(pid, ts, before + self._opens(pid))
                self._count("readdirs", o)
                wrote |= self._settle(o)
                wrote |= self._restarts(o)
                # After _restarts: the READDIR that settles a restart can end its catch-up.
                done = self._catchups(o).readdir(self.rows - 1, cookie)
                if done is not None:
                    self._refetched(o, done, len(o.rows) - 1, ts)
            elif table == "calls":
                fresh = row.get("call") == "opendir"
                r = dict(row, pid=pid, ts=ts, comm=self.live.comm(pid, fresh))
                in_fs = self.returns.seen(pid, r.get("call"))
                if in_fs is not None:
                    r["in_fs"] = in_fs
                before = self._opens(pid)
                model.call(r)
                self._reading.clear()
                if self.round_trips is not None:
                    self.round_trips.event(pid, ts, before + self._opens(pid))
                o = model.reading(pid)
                if o is not None:
                    self._flush(o)
                    wrote |= self._settle(o)
                    wrote |= self._restarts(o)
            elif table == "rpc_directory":
                o = model.reading(pid)
                if o is not None and o.fileid is None:
                    o.dev, o.fileid = row.get("dev"), row.get("fileid")
                    self._flush(o)
                    wrote |= self._settle(o)
            elif table == "requests":
                if self.round_trips is not None:
                    self.round_trips.call(
                        pid,
                        ts,
                        self._opens(pid),
                        roundtrips.program_name(row.get("program"), row.get("version")),
                        row.get("op"),
                        (row.get("client_id"), row.get("task_id")) if self._replies else None,
                    )
            elif table == "latencies":
                if self.round_trips is not None and row.get("rtt") is not None:
                    # (rtt in µs)
                    task = (row.get("client_id"), row.get("task_id"))
                    self.round_trips.latency(task, row["rtt"] * 1000)
            elif table == "invalidations":
                inv = (ts, pid, row.get("dev"), row.get("fileid"), src.event, row.get("reason"))
                for o in model.live.values():
                    if o.fileid is None:
                        # Whose it is is known once the open's directory is named (analyze()
                        # judges it by the directory the listing turns out to have).
                        self._unnamed.setdefault(id(o), []).append(inv)
                    elif _mine(o, inv):
                        self._held.setdefault(id(o), []).append(inv)
        self._finished()
        if wrote and not self.quiet:
            self.out.flush()

    def _invalidation(self, o, inv):
        """Count and print an invalidation (inv: ts, pid, dev, fileid, event, reason) of the
        open's directory."""
        if not self._shown(o):
            return False
        ts, pid, _, _, event, reason = inv
        counted = self._inval_ts.setdefault(id(o), [])
        counted.append(ts)
        n = len(counted)
        self.invalidations += 1
        self._count("invalidations", o)
        self._line(
            ts,
            "invalidation",
            o,
            f"{event} ({reason}) by {self.live.comm(pid)}[{pid}]; so far {n}, "
            f"{(ts - o.start) / NS:.3f}s into the listing",
        )
        return True

    def _named(self, o):
        """The invalidations an open met before its directory was named, now that it is (or
        it ended unnamed)."""
        for inv in self._unnamed.pop(id(o), ()):
            if _mine(o, inv):
                self._held.setdefault(id(o), []).append(inv)

    def _settle(self, o):
        """Count the invalidations held for the open that came before its last event."""
        held = self._held.get(id(o))
        if not held:
            return False
        wrote = False
        while held and held[0][0] <= o.end:
            wrote |= self._invalidation(o, held.pop(0))
        return wrote

    def _lost(self, cpu, ts):
        """Events were lost on cpu before ts (reader.lost_stretch)."""
        self.losses.append(
            reader.lost_stretch(self._lost_on.get(cpu, -1), self._last_on.get(cpu, -1), ts)
        )
        self._lost_on[cpu] = ts

    def _count(self, what, o, n=1, *extra):
        """Count into the metrics once the open's directory is known (_pending)."""
        if self.metrics is None or not n:
            return
        if o.fileid is None:
            self._pending.setdefault(id(o), []).append((what, n, extra))
            return
        self._flush(o)
        if self._shown(o):
            self.metrics.count(what, o, n, *extra)

    def _flush(self, o, ended=False):
        """Count what waited for the open's directory, once it is known or the open ended
        without naming it (a listing the cache served whole: analyze() has it with no
        directory too)."""
        if o.fileid is None and not ended:
            return
        self._named(o)
        for what, n, extra in self._pending.pop(id(o), ()):
            if self._shown(o):
                self.metrics.count(what, o, n, *extra)

    def _finished(self):
        """Count the listings that ended and forget them: what is kept per open is only that
        of the opens being read, so a watch that runs for months keeps no more than a
        minute's. An open that read nothing (no getdents, no READDIR) is no listing, as in
        analyze()."""
        for o in self.model.done:
            key = id(o)
            self._named(o)
            self._settle(o)  # (what is still held came after its last event: not its)
            self._restarts(o, ended=True)
            self._caught_up(o)
            if self.round_trips is not None:
                self.round_trips.ended(o)
            if self.metrics is not None:
                self._flush(o, ended=True)
                if (o.rows or o.getdents) and self._shown(o):
                    self.metrics.count("listings_finished", o, 1, o.ending or "unknown")
            for d in (
                self._times,
                self._printed,
                self._catchup,
                self._pending,
                self._unnamed,
                self._held,
                self._inval_ts,
            ):
                d.pop(key, None)
        self.model.done.clear()
        # A loss matters while a listing under way may reach back to it.
        oldest = min((o.start for o in self.model.live.values()), default=None)
        self.losses = [w for w in self.losses if oldest is not None and w["to"] >= oldest]
        if self.metrics is not None:
            # A listing is under way in its directory once the kernel has named it.
            self.metrics.listings(
                o for o in self.model.live.values() if o.fileid is not None and self._shown(o)
            )

    def _caught_up(self, o):
        """An open still catching up when it ended, or when watch stops: the catch-up runs to
        its last READDIR, as analyze() costs it."""
        c = self._catchup.pop(id(o), None)
        if c is not None and c.pending is not None and o.rows:
            last = self._times.get(id(o), {}).get(o.rows[-1], o.end)
            self._refetched(o, c.pending[:2], len(o.rows), last)

    def stop(self):
        """Watch stops: the catch-ups under way are counted as far as they went."""
        for o in list(self.model.live.values()):
            self._restarts(o, ended=True)
            self._caught_up(o)
        if self.round_trips is not None:
            self.round_trips.stop()

    def _rpcs(self, o, program, op, calls, server_seconds):
        """Count a listing's RPCs of one program and operation, and their server time (once
        its reply came, where sunrpc:rpc_stats_latency is traced), once they are known to be
        its (attribution.Attribution); an open that ended was counted under its directory as it
        ended, and its RPCs are too."""
        extra = (program, op)
        if o in self.model.live.values() or o in self.model.done:
            self._count("rpcs", o, calls, *extra)
            self._count("rpc_server_seconds", o, server_seconds, *extra)
        elif self._shown(o):
            self.metrics.count("rpcs", o, calls, *extra)
            self.metrics.count("rpc_server_seconds", o, server_seconds, *extra)

    def _refetched(self, o, restart, end, ts):
        """Count a catch-up that ended: from the restart ((row, ts)) to the READDIR at index
        `end` of the open's READDIRs (not itself), at time ts."""
        if restart[0] in o.rows:
            self._count("refetched_readdirs", o, end - o.rows.index(restart[0]))
            self._count("refetch_seconds", o, (ts - restart[1]) / NS)

    def _catchups(self, o):
        """The open's catch-up (reader.Catchup: the rule analyze() costs restarts by)."""
        c = self._catchup.get(id(o))
        if c is None:
            c = self._catchup[id(o)] = reader.Catchup()
        return c

    def _restarts(self, o, ended=False):
        """Print the restarts the open's last event settled. One is taken once the READDIR
        after it came (or the open ended): then whether its evidence touches a loss is known
        (reader.near_loss over the READDIRs beside it), and one that does is ambiguous, as in
        analyze(). (A loss on another CPU is known once that CPU's next page is read: one that
        reaches back past the next READDIR and is read after it is not seen here.)"""
        key = id(o)
        done = self._printed.get(key, (0, 0, 0))
        rows = o.restart_rows
        ready = len(rows) if ended or not rows or rows[-1] != o.rows[-1] else len(rows) - 1
        shown = done[1]
        wrote = False
        self._count("ambiguous_restarts", o, len(o.ambiguous_rows) - done[2])
        for r in rows[done[0] : ready]:
            when = self._times.get(key, {}).get(r, o.end)
            if self._near_loss(o, r):
                self._count("ambiguous_restarts", o)
                continue
            changes = bisect.bisect_right(self._inval_ts.get(key, []), when)
            own, cut = self._catchups(o).restart(r, when, changes, o.targets.get(r, 0))
            if cut is not None:  # a catch-up ends where the next restart begins
                self._refetched(o, cut, o.rows.index(r), when)
            if not own:
                continue  # part of the restart being caught up on
            self._count("restarts", o)
            if not self._shown(o):
                continue
            self.restarts += 1
            shown += 1
            at = restart_at(r in o.targets)
            self._line(
                when,
                "restart",
                o,
                f"READDIR #{o.rows.index(r) + 1} {at}; so far {shown} "
                f"restart{'s' * (shown != 1)}, {len(o.rows)} READDIRs in "
                f"{(when - o.start) / NS:.3f}s",
            )
            wrote = True
        self._printed[key] = (ready, shown, len(o.ambiguous_rows))
        return wrote

    def _near_loss(self, o, r):
        """Whether events were lost between the READDIRs beside restart r of the open
        (reader.near_loss, as analyze() asks it; a time not kept: the open's start or end)."""
        if not self.losses:
            return False
        times = self._times.get(id(o), {})
        k = o.rows.index(r)
        beside = [
            times.get(o.rows[k - 1], o.start) if k else times.get(r, o.start),
            times.get(r, o.end),
            times.get(o.rows[k + 1], o.end) if k + 1 < len(o.rows) else times.get(r, o.end),
        ]
        return bool(reader.near_loss(beside, [1], self.losses))
