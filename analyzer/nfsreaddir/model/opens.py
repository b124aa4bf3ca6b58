"""The reader: each open of a directory, from the reader's calls and its READDIRs, and the
READDIRs that were restarts.

A listing is one open of a directory by one process, from its first getdents to its close, to
the end of the directory, or to the end of the trace. What delimits it depends on what the trace
recorded, best first:

    opens      opendir/closedir and the reader's position at each getdents (this project's
               5.10 series, or the kprobes of events.OPEN_KPROBES on any kernel)
    syscalls   getdents64 per (process, fd), ended by a getdents64 that returned 0
    phases     the reproducer's phase markers: one lister, one open, per phase
    readdirs   nothing but the READDIRs: one listing per process and directory

A restart is a READDIR at cookie 0 while the reader's position is past the start: the kernel
went back to the start although the reader did not ask it to. Not every such READDIR is one: a
change of the directory while the reader is still inside its first cached page makes any kernel
fill that page again at cookie 0, and go on. With the reader's position in the trace, what
follows settles it: the open's next READDIR asks a cookie at or below the position (walking back
to the reader: a restart), or above it, or the next getdents starts at or past it (the refill of
the page that holds the position: no restart, and no test of the bug either, as stock 5.10 would
have spent the same single READDIR). Without the position, only a listing that never asked
beyond cookie 0 can be inside the first page. A cookie-0 READDIR whose cause the trace cannot
tell (a restart, a rewind, a new open of the same directory; or nothing follows it) is counted
as ambiguous, never as a restart or as a new listing.

Where the trace gives the reader's position as a cookie at each getdents (the open kprobes, the
series), READDIRs of that getdents for pages wholly below the position (one below it, followed by
another still at or below it) are a restart too on kernels that look for the position from the
first page of the directory's page cache (events.searches_from_first_page): when another reader
of the directory has filled the first pages again after an invalidation, the search reads them
from the cache and asks the server only from where they end, never at cookie 0. The page that
holds the position starts below it; filling that one alone is no restart. Cookies are compared
by value, as the file systems that export them hand them out in increasing order along a
listing (ext4's hashes, xfs and tmpfs offsets); in a listing whose positions went backwards
without a rewind that order does not hold, and such a READDIR is ambiguous, as it is when the
trace does not name its kernel.
"""

import numpy as np

from .. import events
from ..units import int_or_none
from . import reader
from .causal import merged
from .columns import isna
from .reader import CLOSED, EOF, ERROR, KILLED


class _Open(reader.Pass):
    """One open being read: a reader's pass (reader.Pass decides which of its READDIRs went
    back) and what delimits it: its process, its times, its getdents, rewinds and ending."""

    def __init__(self, pid, comm, start, delimited_by, key=None, below_restarts=False):
        super().__init__(below_restarts)
        self.pid, self.comm, self.start, self.end = pid, comm, start, start
        self.key, self.delimited_by = key, delimited_by
        self.rows = []  # rpc table row numbers
        self.progressed_at = None  # when the reader was first past the start
        self.getdents, self.rewinds, self.ending, self.error = 0, [], None, None
        self.dev = self.fileid = None
        self.began_before_trace = False
        self.phase = None  # the reproducer's phase, where one delimits the listing

    def position(self, ts, pos):
        """The reader enters the file system at position pos (None: not known)."""
        self.getdents += 1
        self.end = max(self.end, ts)
        first = not self.progressed and not self.rows and self.getdents == 1
        if self.entered(pos):
            self._rewound(ts)
        if pos:
            self.began_before_trace |= first
            self.past_start(ts)

    def past_start(self, ts):
        if self.progressed_at is None:
            self.progressed_at = ts

    def rewind(self, ts):
        """The reader went back to the start: what it reads next is a new pass."""
        self._rewound(ts)
        self.went_back()

    def _rewound(self, ts):
        if self.progressed or self.rows:
            self.rewinds.append(ts)
        self.ending = None

    def readdir(self, row, ts, cookie, rewinds_visible=True):
        """A READDIR of this open; cookie None: not known."""
        self.rows.append(row)
        self.end = max(self.end, ts)
        if self.asked_for(row, cookie, rewinds_visible):
            self.past_start(ts)


class Opens:
    """The opens of a trace, fed one event at a time in the trace's order (mode "opens"):
    by_opens() feeds it a whole trace, `watch` the events as the ring buffer hands them out.
    READDIRs go to the open their process is reading (readdir()); the reader's calls open,
    position, rewind and close them (call()). done: the opens closed so far; live: key ->
    _Open of those still open; current: pid -> the key of the open it last read."""

    def __init__(self, keyed_by_file, below_restarts):
        self.keyed_by_file, self.below_restarts = keyed_by_file, below_restarts
        self.done, self.live, self.current = [], {}, {}

    def reading(self, pid):
        """The open process pid last read from, if it is still open."""
        key = self.current.get(pid)
        return self.live.get(key) if key is not None else None

    def of_readdir(self, pid, comm, ts):
        """The open a READDIR of process pid belongs to; those outside any open seen are one
        listing of their own (the process's "orphan" open, kept until the end: a second one
        would replace it, and its READDIRs would be lost)."""
        o = self.reading(pid)
        if o is None:
            mine = [o2 for k, o2 in self.live.items() if k[0] == pid]
            o = mine[0] if len(mine) == 1 else self.live.get(("orphan", pid))
        if o is None:
            o = _Open(pid, comm, ts, "readdirs", key=("orphan", pid))
            o.began_before_trace = True
            self.live[o.key] = o
            self.current[pid] = o.key
        return o

    def readdir(self, pid, comm, ts, row, cookie):
        """A READDIR (rpc table row `row`, cookie None: not known); returns its open."""
        o = self.of_readdir(pid, comm, ts)
        o.readdir(row, ts, cookie)
        return o

    def call(self, r):
        """One of the reader's calls: a dict with pid, comm, ts, call and the calls table's
        columns that the call has (file, dev, fileid, pos, eof, error, ret, in_fs)."""
        pid, ts, call = r["pid"], r["ts"], r["call"]
        live = self.live
        key = (pid, r.get("file")) if self.keyed_by_file else (pid, r.get("dev"), r.get("fileid"))
        if call == "opendir":
            if key in live:
                self.done.append(_close(live.pop(key), None))
            live[key] = _Open(
                pid, r["comm"], ts, "opens", key=key, below_restarts=self.below_restarts
            )
        elif call in ("getdents", "llseek", "closedir", "getdents_done"):
            o = live.get(key)
            if o is None:
                if call in ("closedir", "getdents_done"):
                    return
                o = _Open(pid, r["comm"], ts, "opens", key=key, below_restarts=self.below_restarts)
                o.began_before_trace = call == "llseek"
                live[key] = o
            if call == "getdents":
                o.position(ts, int_or_none(r.get("pos")))
                self.current[pid] = key
            elif call == "llseek":
                if int_or_none(r.get("pos")) == 0:
                    o.rewind(ts)
            elif call == "getdents_done":
                _returned(o, ts, eof=r.get("eof"), err=r.get("error"))
            else:
                self.done.append(_close(live.pop(key), ts))
                if self.current.get(pid) == key:
                    del self.current[pid]
        elif call == "sys_getdents_ret":
            o = self.reading(pid)
            if o is not None and r.get("in_fs"):
                _returned(o, ts, ret=r.get("ret"))
        dev = int_or_none(r.get("dev"))
        if not self.keyed_by_file and dev is not None:
            o2 = live.get(key)
            if o2 is not None:
                o2.dev, o2.fileid = dev, int_or_none(r.get("fileid"))

    def all(self):
        return self.done + list(self.live.values())


def by_opens(rpc, calls, cookies_known, keyed_by_file, below_restarts):
    """Listings from opendir/closedir and the reader's position (mode "opens")."""
    m = Opens(keyed_by_file, below_restarts)
    for r in merged(rpc, calls):
        if r["kind"] == "rpc":
            m.readdir(
                r["pid"],
                r["comm"],
                r["ts"],
                r["row"],
                int_or_none(r["cookie"]) if cookies_known else None,
            )
        else:
            m.call(r)
    return m.all()


def _returned(o, ts, ret=None, eof=None, err=None):
    """How a getdents call came back: at the end of the directory, or with an error."""
    o.end = max(o.end, ts)
    ret = int_or_none(ret)
    err = int_or_none(err)
    if ret is not None and ret < 0:
        err = -ret
    if err:
        o.ending = KILLED if err in events.KILLED_ERRORS else ERROR
        o.error = err
    elif ret == 0 or int_or_none(eof):
        o.ending = EOF
    elif ret:
        o.past_start(ts)


def _close(o, ts):
    if ts is not None:
        o.end = max(o.end, ts)
        if o.ending is None:
            o.ending = CLOSED
    return o


def by_syscalls(rpc, calls, cookies_known):
    """Listings from getdents64 per (process, fd) (mode "syscalls"): one ends when getdents64
    returns 0, the next getdents64 on that fd starts another."""
    lseeks_seen = "sys_lseek" in calls["call"].tolist()
    done: list[_Open] = []
    live: dict[tuple | None, _Open] = {}  # (None: no listing is current)
    current: dict[int, tuple] = {}
    for r in merged(rpc, calls):
        pid, ts = r["pid"], r["ts"]
        if r["kind"] == "rpc":
            key = current.get(pid)
            o = live.get(key) if key is not None else None
            if o is None:
                o = _Open(pid, r["comm"], ts, "readdirs", key=("orphan", pid))
                o.began_before_trace = True
                live[o.key] = o
                current[pid] = o.key
            # Without lseek events a rewind cannot be seen, so a restart cannot be told from
            # one.
            o.readdir(
                r["row"],
                ts,
                int_or_none(r["cookie"]) if cookies_known else None,
                rewinds_visible=bool(lseeks_seen),
            )
            continue
        call = r["call"]
        if call == "sys_getdents":
            key = (pid, int_or_none(r["fd"]))
            o = live.get(key)
            if o is None:
                o = _Open(pid, r["comm"], ts, "syscalls", key=key)
                live[key] = o
            o.getdents += 1
            current[pid] = key
        elif call == "sys_getdents_ret":
            key = current.get(pid)
            o = live.get(key)
            if o is None:
                continue
            _returned(o, ts, ret=r["ret"])
            if o.ending is not None:  # end of directory, or an error: the listing is over
                done.append(live.pop(key))
                del current[pid]
            elif int_or_none(r["ret"]):
                o.read_entries()
        elif call == "sys_lseek":
            o = live.get((pid, int_or_none(r["fd"])))
            if o is not None and int_or_none(r["pos"]) == 0 and int_or_none(r["whence"]) == 0:
                o.rewind(ts)
    done.extend(live.values())
    # A getdents64 of a local directory enters no NFS: only listings with READDIRs, or that
    # the kernel served from its cache, belong here; without a file system event that is not
    # known, so keep those with READDIRs.
    return [o for o in done if o.rows]


def by_phases(rpc, phases, cookies_known):
    """One listing per reproducer phase (mode "phases"): its lister opens the directory once
    and never seeks, so a cookie-0 READDIR after the first is a restart."""
    out = []
    ts, pids = rpc["ts"], rpc["pid"]
    last_ts = int(ts.max()) if len(rpc) else None
    for p in phases:
        end = p.end if p.end is not None else (last_ts if last_ts is not None else p.start)
        rows = np.flatnonzero((ts >= p.start) & (ts <= end))
        pid = _most_common(pids[rows].tolist(), p.pid)
        mine = rows[pids[rows] == pid]
        o = _Open(pid, str(rpc["comm"][mine[0]]) if len(mine) else "", p.start, "phases")
        o.end = end
        for i in mine.tolist():
            c = rpc["cookie"][i]
            o.readdir(i, int(ts[i]), int_or_none(c) if cookies_known else None)
        o.phase = p
        out.append(o)
    return out


def _most_common(values, default):
    """The value most of the values are (the first to come of those tied), or default."""
    if not values:
        return default
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return int(max(counts, key=lambda v: counts[v]))


def by_readdirs(rpc, cookies_known, cookie_is_position):
    """One listing per process and directory (mode "readdirs"). Where the cookie a READDIR asks
    for is the reader's own position (5.18+ cache fills), a cookie-0 READDIR after the reader
    had needed more than the first page is a new listing (before that, it fills the first page
    again, see _Open); elsewhere it cannot be told from a restart."""
    out = []
    keys = ["pid"] + [c for c in ("dev", "fileid") if not isna(rpc[c]).all()]
    # a missing value is a key of its own (None, as NaN is not itself)
    cols = [[None if m else v for v, m in zip(rpc[k].tolist(), isna(rpc[k]))] for k in keys]
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(*cols)):
        groups.setdefault(key, []).append(i)
    for rows in groups.values():
        # A group has at least one row: the first open starts at the first READDIR.
        pid, comm = int(rpc["pid"][rows[0]]), str(rpc["comm"][rows[0]])
        o = _Open(pid, comm, int(rpc["ts"][rows[0]]), "readdirs")
        for i, ts, c in zip(rows, rpc["ts"][rows].tolist(), rpc["cookie"][rows].tolist()):
            c = int_or_none(c) if cookies_known else None
            if cookie_is_position and c == 0 and o.asked:
                out.append(o)
                o = _Open(pid, comm, int(ts), "readdirs")
            o.readdir(int(i), int(ts), c, rewinds_visible=False)
        out.append(o)
    return out
