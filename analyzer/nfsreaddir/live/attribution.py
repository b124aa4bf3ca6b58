"""A listing's RPCs counted as the events come (`watch`'s nfs_readdir_rpcs metric): each
call of a process goes to the listing analyze would give it (model/windows: window(), the
listing's first READDIR's call (ReplyCalls, where its READDIR events fire at the reply), or its
start where it sent none, to its last event; of the process's listings whose window holds the
call, the one whose window began last, as model/roundtrips' _owners)."""

import weakref
from typing import Any

from ..events import REPLY_TIME_READDIR
from ..model.windows import READDIR_OPS, ReplyCalls, window
from ..units import NS

# Attribution's bounds: the gaps a process's calls may wait in for their listing to be known
# (a listing the cache serves is known to have sent no READDIR only at its end), and the calls
# waiting for their server time (a call with no latency event, as a lost one, is forgotten).
MAX_WAITING_GAPS = 1000
MAX_WAITING_REPLIES = 65536
MAX_PROCESSES = 4096  # processes whose last event's time is kept (for the calls tied with it)


class _Gap:
    """A process's calls between two of its events (opens.Opens'), as counts: {(program, op):
    [calls, server ns]}; lo and hi, the times of its first and last; owner, the open they were
    given to (None: not decided yet, False: no listing's); blocker, the open whose window
    decides it next, and what was known of that window (while it waits)."""

    __slots__ = ("opens", "counts", "lo", "hi", "owner", "tail", "last", "before", "blocker")

    def __init__(self, opens, ts):
        self.opens, self.counts, self.lo, self.hi = opens, {}, ts, ts
        self.owner: Any = None
        self.tail: _Gap | None = None  # its calls of the next event's time, split off
        self.last: dict = {}  # while it is filled: the counts of its calls of time hi
        self.before: int | None = None  # and the time of its calls before those
        self.blocker: Any = None

    def add(self, key, n=1, server_ns=0.0):
        c = self.counts.get(key)
        if c is None:
            c = self.counts[key] = [0, 0.0]
        c[0] += n
        c[1] += server_ns

    def split(self, ts):
        """Its calls of time ts (the event that ends it) as a gap of their own, where it has
        calls before them: the event's open may be theirs and not the others'."""
        if self.hi != ts or self.before is None:
            return
        t = self.tail = _Gap(self.opens, ts)
        for key, n in self.last.items():
            t.add(key, n)
            c = self.counts[key]
            c[0] -= n
            if not c[0]:
                del self.counts[key]
        self.hi = self.before


class Attribution:
    """The window rule (roundtrips.window, _owners) applied as events come: each call of a
    process goes to the one of its opens (opens._Open, as the tracker's opens.Opens keeps them)
    whose window holds it, the one whose window began last. A window is final only later: an
    open's end is its last event, and one that sends no READDIR before it ends begins at its
    start, else at its first READDIR; so a process's calls wait, counted per gap between its
    events, until what they depend on is known, and are then handed to count(open, program,
    op, calls, server_seconds). Calls tied in time with an event (a coarse clock) are kept
    apart from the others of their gap, so that the window's ends, both in, decide them as
    analyze does.

    Fed, in the events' order: event(pid, ts, opens) after each of the process's opens'
    events (a READDIR or a reader's call, once opens.Opens took it; opens: the process's opens
    being read just before it and just after it), readdir(o, ts, source) for each READDIR of
    open o (source: the event it was read from),
    call(pid, ts, opens, program, op, task) for each RPC (opens: the process's opens being
    read; task: what pairs it with its latency, None where none is traced), latency(task,
    rtt_ns) for each reply's server time, ended(o) once an open is over, stop() when the
    events stop (the opens still being read end at their last event)."""

    def __init__(self, count):
        self.count = count
        # Per open, while a gap still names it: its first READDIR's time, and whether it ended.
        self._first: Any = weakref.WeakKeyDictionary()
        self._over: Any = weakref.WeakSet()
        self._gaps: dict[Any, list] = {}  # pid -> [head, body] of the gap being filled
        # pid -> (time of its last event, its opens just before or after it): a call of the
        # same time, before or after it, may be any of theirs (both ends are in a window)
        self._after: dict[Any, tuple[int, tuple]] = {}
        self._waiting: dict[Any, list[_Gap]] = {}  # pid -> its filled gaps not decided yet
        self._tasks: dict[Any, tuple[_Gap, Any, int]] = {}  # task -> (its call's gap, key, time)
        # pid -> its READDIR calls, paired with its READDIR events that fire at the reply
        self._calls: dict[Any, ReplyCalls] = {}

    def readdir(self, o, ts, source=None):
        first = int(ts)
        if source in REPLY_TIME_READDIR:
            got = self._pairs(o.pid).reply(ts)
            first = got if got is not None else first
        self._first.setdefault(o, first)

    def _pairs(self, pid):
        got = self._calls.pop(pid, None)
        self._calls[pid] = got = got or ReplyCalls()
        if len(self._calls) > MAX_PROCESSES:
            del self._calls[next(iter(self._calls))]  # (the process heard of longest ago)
        return got

    def call(self, pid, ts, opens, program, op, task=None):
        ts = int(ts)
        at, around = self._after.get(pid, (None, ()))
        if op in READDIR_OPS:
            # A READDIR's call may begin a window (that of the listing whose READDIR event, at
            # the reply, comes next): the calls before it are a gap of their own.
            self._pairs(pid).call(ts)
            if ts != at:
                self._cut(pid, ts)
        if ts == at:
            opens = tuple(dict.fromkeys((*around, *opens)))
        if not opens:
            return
        gap = self._gaps.get(pid)
        if gap is None:
            gap = self._gaps[pid] = [None, None]
        key = (program, op)
        if ts == at:
            g = gap[0]
            if g is None:
                g = gap[0] = _Gap(tuple(opens), ts)
        else:
            g = gap[1]
            if g is None:
                g = gap[1] = _Gap(tuple(opens), ts)
            elif ts != g.hi:
                g.before, g.hi, g.last = g.hi, ts, {}
            g.last[key] = g.last.get(key, 0) + 1
        g.add(key)
        if task is not None:
            self._tasks.pop(task, None)  # (a task id used again: the newer call's)
            self._tasks[task] = (g, key, ts)
            if len(self._tasks) > MAX_WAITING_REPLIES:
                del self._tasks[next(iter(self._tasks))]

    def latency(self, task, rtt_ns):
        got = self._tasks.pop(task, None)
        if got is None:
            return
        g, key, ts = got
        if g.tail is not None and ts > g.hi:
            g = g.tail
        if g.owner is None:
            g.add(key, 0, float(rtt_ns))
        elif g.owner is not False:
            self.count(g.owner, key[0], key[1], 0, rtt_ns / NS)

    def _cut(self, pid, ts):
        """The process's calls before time ts wait apart from those of ts and after."""
        gap = self._gaps.get(pid)
        if gap is None or gap[1] is None:
            return
        head, body = gap
        body.split(ts)
        tail = body.tail
        if tail is not None:
            tail.last = dict(body.last)
        elif body.hi == ts:
            return  # (all its calls are of time ts)
        body.last = {}
        self._waiting.setdefault(pid, []).extend(g for g in (head, body) if g is not None)
        self._gaps[pid] = [None, tail]

    def event(self, pid, ts, opens=()):
        """An event of the process's opens (opens: those being read just before it and just
        after it): the calls before it are a gap of their own."""
        ts = int(ts)
        at, around = self._after.pop(pid, (None, ()))
        opens = tuple(dict.fromkeys((*around, *opens) if at == ts else opens))
        self._after[pid] = (ts, opens)
        if len(self._after) > MAX_PROCESSES:
            # (the process whose last event is the oldest: its calls since are no listing's
            # once all its opens are over)
            old = next(iter(self._after))
            del self._after[old]
            self._close(old)
        self._close(pid, ts, opens)

    def _close(self, pid, ts=None, opens=()):
        """The gap being filled is over: an event of time ts, with those opens around it."""
        gap = self._gaps.pop(pid, None)
        if gap is not None:
            head, body = gap
            if body is not None:
                body.split(ts)
                body.last = {}
            new = (head, body, body and body.tail)
            self._waiting.setdefault(pid, []).extend(g for g in new if g is not None)
        for g in self._waiting.get(pid, ()):
            if g.lo == ts:
                # (calls of the same time as the event, before or after it: the open it began
                # or ended may be theirs)
                g.opens, g.blocker = tuple(dict.fromkeys((*g.opens, *opens))), None
        self._decide(pid)

    def ended(self, o):
        """Open o is over."""
        self._over.add(o)
        self._decide(o.pid)

    def stop(self):
        self._after.clear()
        for pid in list(self._gaps):
            self._close(pid)
        for pid, gaps in list(self._waiting.items()):
            for g in gaps:
                for o in g.opens:
                    self._over.add(o)
            self._decide(pid)
        self._gaps.clear()
        self._waiting.clear()

    def _inside(self, o, g):
        """(whether gap g is in open o's window: True, False or None, not known yet, and where
        it is, the window's start)."""
        over = o in self._over
        first = self._first.get(o)
        start, end = window(first, o.start, o.end)  # (end: so far, until it is over)
        if first is None and not over:
            lo = None  # (its start, unless a READDIR comes)
        else:
            # An open that read nothing is no listing (analysis: neither READDIR nor getdents).
            lo = start <= g.lo and bool(o.rows or o.getdents)
        hi = True if end >= g.hi else (False if over else None)
        if lo is False or hi is False:
            return False, start
        return (None if lo is None or hi is None else True), start

    def _owner(self, g, unsent):
        """The open gap g's calls are, False for none, None while it is not known yet (then
        g.blocker is the open that decides it next, and what was known of it). unsent: {open:
        whether it is still being read and has sent no READDIR} of this round."""
        if g.blocker is not None:
            o, was = g.blocker
            if was is None:  # (it waits for the open's first READDIR or its end)
                now = unsent.get(o)
                if now is None:
                    now = unsent[o] = o not in self._first and o not in self._over
                if now:
                    return None
            elif self._inside(o, g) == was:
                return None  # (nothing new of the open it waits for)
        seen = sorted(
            (self._inside(o, g) + (-k, o) for k, o in enumerate(g.opens)),
            key=lambda x: (x[1], x[2]),
            reverse=True,
        )
        for inside, start, _, o in seen:
            if inside is None:
                unsent = o not in self._first and o not in self._over
                g.blocker = (o, None if unsent else (inside, start))
                return None
            if inside:
                return o
        return False

    def _decide(self, pid):
        gaps = self._waiting.get(pid)
        if not gaps:
            return
        # Calls of the time of the process's last event wait for its next one: another event
        # of that time may begin an open whose window holds them.
        at = self._after.get(pid, (None,))[0]
        left: list[_Gap] = []
        unsent: dict = {}
        for i, g in enumerate(gaps):
            o = None if g.hi == at else self._owner(g, unsent)
            if o is None and len(gaps) - i > MAX_WAITING_GAPS:
                # A process that holds a directory open for ever, served by the cache: its
                # oldest calls go to the open it reads, as if it were to send no READDIR.
                o = next((x for x in reversed(g.opens) if x not in self._over), False)
            if o is None:
                left.append(g)
                continue
            g.owner, g.opens, g.blocker = o, (), None
            if o is not False:
                for (program, op), (n, server) in g.counts.items():
                    self.count(o, program, op, n, server / NS)
            g.counts = {}
        if left:
            self._waiting[pid] = left
        else:
            del self._waiting[pid]
