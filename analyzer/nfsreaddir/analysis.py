"""From canonical events to listings: READDIRs, cookie restarts, invalidations, dentries.

A listing is one open of a directory by one process, from its first getdents to its close, to
the end of the directory, or to the end of the trace. What delimits it depends on what the trace
recorded, best first:

    opens      opendir/closedir and the reader's position at each getdents (this project's
               5.10 series, or the kprobes of events.OPEN_KPROBES on any kernel)
    syscalls   getdents64 per (process, fd), ended by a getdents64 that returned 0
    phases     the reproducer's phase markers: one lister, one open, per phase
    readdirs   nothing but the READDIRs: one listing per process and directory

A restart is a READDIR at cookie 0 while the reader's position is past the start: the kernel
went back to the start of the directory although the reader did not ask it to. A cookie-0 READDIR
whose cause the trace cannot tell (a restart, a rewind, or a new open of the same directory) is
counted as ambiguous, never as a restart or as a new listing.

Where the trace gives the reader's position as a cookie at each getdents (the open kprobes, the
series), READDIRs of that getdents for pages that lie wholly below the position (one below it,
followed by another that still starts at or below it) are a restart too on kernels that look for
the position from the first page of the directory's page cache
(events.searches_from_first_page): when another reader of the same directory has filled the
first pages again after an invalidation, the search reads them from the cache and asks the server
only from where they end, never at cookie 0. The page that holds the position starts below it;
filling that one alone is no restart. Cookies are compared by value, as the file systems
that export them hand them out in increasing order along a listing (ext4's hashes, xfs and tmpfs
offsets); in a listing whose positions went backwards without a rewind that order does not hold,
and such a READDIR is ambiguous, as it is when the trace does not name its kernel.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import events, markers as markers_mod

NS = 1_000_000_000
CHAIN_WINDOW_NS = 5 * NS    # how far back an invalidation's causes are looked for

# How a listing ended.
EOF, ERROR, KILLED, CLOSED, CUT_OFF, UNKNOWN = ("eof", "error", "killed", "closed", "cut_off",
                                                "unknown")
ENDINGS = {
    EOF: "reached the end of the directory",
    ERROR: "stopped by an error",
    KILLED: "killed by a signal",
    CLOSED: "closed before the end of the directory",
    CUT_OFF: "cut off by the end of the trace",
    UNKNOWN: "not known to have reached the end (the trace has no end-of-listing event)",
}


class AnalysisError(Exception):
    """The trace cannot answer the question; the message says what to record instead."""


@dataclass
class Restart:
    ts: int
    rpc_index: int              # index of the READDIR that restarted within the listing
    cookie: int                 # what it asked for: 0, or a cookie below the reader's position
    refetched: int              # READDIRs until the listing reached a cookie not read before
    cost_ns: int                # time from the restart until then
    after_invalidation: bool


@dataclass
class Invalidation:
    ts: int
    reason: str
    chain: list                 # the steps that led to it: revalidate, GETATTR, ...
    followed_by_restart: bool | None    # None: restarts are not known


@dataclass
class Listing:
    pid: int
    comm: str
    dev: int | None
    fileid: int | None
    start: int
    end: int
    delimited_by: str = "readdirs"
    phase: str | None = None
    status: int | None = None       # the reproducer's lister exit status
    entries: int | None = None
    ending: str = UNKNOWN
    error: int | None = None        # errno of the error that stopped it
    rpcs: pd.DataFrame = field(repr=False, default=None)
    restart_rows: list = field(default_factory=list)    # READDIR indexes of the restarts
    ambiguous_rows: list = field(default_factory=list)  # cookie-0 READDIRs of unknown cause
    restarts: list = field(default_factory=list)
    invalidations: list = field(default_factory=list)
    version_changes: int | None = None  # times the directory's change attribute moved
    cache_range_trims: int = 0
    getdents: int | None = None     # None: the trace has no getdents event
    rewinds: list | None = None     # ts of each seek back to 0; None: not observable
    began_before_trace: bool = False
    # When the reader was first past the start of the directory (None: it never was). Only a
    # change after that can make it restart: a poller's revalidation when it opens the
    # directory drops a cache it has not read from yet.
    progressed_at: int | None = None
    rpc_rows: list = field(default_factory=list)    # its rows of the canonical rpc table
    damage: list = field(default_factory=list)      # damaged or lost events during it
    dentries: dict = field(default_factory=dict)
    cookies_known: bool = True

    @property
    def complete(self):
        return self.ending == EOF and not self.began_before_trace

    @property
    def timed_out(self):
        return self.status == 124

    @property
    def restart_count(self):
        """Restarts at cookie 0; None when the trace cannot tell (no cookies)."""
        return len(self.restarts) if self.cookies_known else None

    @property
    def exercising(self):
        """The invalidations that came while the reader was past the start."""
        if self.progressed_at is None:
            return []
        return [i for i in self.invalidations if i.ts >= self.progressed_at]

    @property
    def exercised(self):
        """The directory changed under the listing, after the reader was past the start, in a
        way that makes a restart possible: its cache was invalidated, or (5.18+) its change
        attribute moved (cache_range_trims and version_changes count only such changes)."""
        return bool(self.exercising or self.cache_range_trims or self.version_changes
                    or self.restarts)

    def label(self):
        who = f"{self.comm}[{self.pid}]"
        return (f"listing of dir {self.fileid if self.fileid is not None else '?'} by {who}"
                + (f" ({self.phase})" if self.phase else ""))

    def summary(self):
        cookies = self.rpcs["cookie"].dropna()
        known = self.cookies_known
        return {
            "phase": self.phase, "pid": self.pid, "comm": self.comm,
            "dev": self.dev, "dir_fileid": self.fileid,
            "delimited_by": self.delimited_by,
            "seconds": round((self.end - self.start) / NS, 3),
            "entries": self.entries, "status": self.status,
            "ending": self.ending, "complete": self.complete, "error": self.error,
            "began_before_trace": self.began_before_trace,
            "timed_out": self.timed_out,
            "getdents": self.getdents,
            "readdirs": int(len(self.rpcs)),
            "cookie_zero_readdirs": int((cookies == 0).sum()) if known else None,
            "restarts": self.restart_count,
            "ambiguous_cookie_zero_readdirs": len(self.ambiguous_rows) if known else None,
            "rewinds": len(self.rewinds) if self.rewinds is not None else None,
            "refetched_readdirs": sum(r.refetched for r in self.restarts) if known else None,
            "restart_cost_seconds": (round(sum(r.cost_ns for r in self.restarts) / NS, 3)
                                     if known else None),
            "invalidations": len(self.invalidations),
            "invalidations_followed_by_restart": (sum(bool(i.followed_by_restart)
                                                      for i in self.invalidations)
                                                  if known else None),
            "version_changes": self.version_changes,
            "cache_range_trims": self.cache_range_trims,
            "exercised": self.exercised,
            "damaged_events": len(self.damage),
            "max_dtsize": (int(self.rpcs["dtsize"].max())
                           if self.rpcs["dtsize"].notna().any() else None),
            "dentries": self.dentries,
        }


@dataclass
class Analysis:
    listings: list
    run: dict
    samples: pd.DataFrame
    evidence: dict          # table -> the events it came from
    cookies_known: bool
    info: dict
    recorded: dict = field(default_factory=dict)    # table -> events recorded (fired or not)
    tables: dict = field(default_factory=dict, repr=False)  # the canonical tables it read

    @property
    def kernel(self):
        """The kernel release the trace was recorded on, where it says."""
        return events.release(self.run.get("kernel") or self.info.get("uname"))

    def to_dict(self):
        return {"trace": self.info, "run": self.run, "evidence": self.evidence,
                "cookies_known": self.cookies_known,
                "listings": [lst.summary() for lst in self.listings],
                "restarts": [[vars(r) for r in lst.restarts] if lst.cookies_known else None
                             for lst in self.listings],
                "rewinds": [lst.rewinds for lst in self.listings],
                "invalidations": [[vars(i) for i in lst.invalidations]
                                  for lst in self.listings]}


def _opt_int(v):
    return None if v is None or pd.isna(v) else int(v)


# ------------------------------------------------------------------------------ the reader
class _Open:
    """One open being read: its READDIRs and whether the reader is at the start."""

    def __init__(self, pid, comm, start, delimited_by, key=None, below_restarts=False):
        self.pid, self.comm, self.start, self.end = pid, comm, start, start
        # A READDIR below the reader's position: True a restart, None ambiguous, False nothing
        # (events.searches_from_first_page).
        self.below_restarts = below_restarts
        self.key = key
        self.delimited_by = delimited_by
        self.rows = []              # rpc table row numbers
        self.restart_rows, self.ambiguous_rows = [], []
        self.targets = {}           # restart row -> the reader's position it had to get back to
        self.at_start = True
        self.progressed = False     # the reader has been past the start
        self.progressed_at = None   # when it first was (what it had read could then be lost)
        self.getdents = 0
        self.rewinds = []
        self.ending = None
        self.error = None
        self.dev = self.fileid = None
        self.began_before_trace = False
        self.phase = None           # the reproducer's phase, where one delimits the listing
        self.pos = None             # the reader's position (a cookie) at this getdents
        self.last_pos = 0           # ... at the previous one, since the start or a rewind
        self.ordered = True         # positions grew: cookies can be compared by value
        self.searched = False       # this getdents already restarted
        self.below = None           # its last READDIR below the position, if it was below

    def position(self, ts, pos):
        """The reader enters the file system at position pos (None: not known)."""
        self.getdents += 1
        self.end = max(self.end, ts)
        self.searched = False
        self.below = None
        self.pos = None
        if pos is None:
            return
        if pos == 0:
            if self.progressed:
                self.rewind(ts)
            self.at_start = True
        else:
            # The kprobe reads loff_t, signed; cookies are unsigned 64-bit.
            self.pos = pos & 0xFFFF_FFFF_FFFF_FFFF
            if self.pos < self.last_pos:
                self.ordered = False
            self.last_pos = self.pos
            if not self.progressed and not self.rows and self.getdents == 1:
                self.began_before_trace = True
            self.at_start = False
            self.progressed = True
            self.past_start(ts)

    def past_start(self, ts):
        if self.progressed_at is None:
            self.progressed_at = ts

    def rewind(self, ts):
        """The reader went back to the start: what it reads next is a new pass."""
        if self.progressed or self.rows:
            self.rewinds.append(ts)
        self.at_start = True
        self.ending = None
        self.pos, self.last_pos = None, 0

    def readdir(self, row, ts, cookie, rewinds_visible=True):
        """A READDIR of this open; cookie None: not known."""
        self.rows.append(row)
        self.end = max(self.end, ts)
        if cookie is None:
            return
        if cookie == 0:
            if self.at_start:
                self.at_start = False
            elif rewinds_visible:
                self.restart_rows.append(row)
                self.searched = True
            else:
                self.ambiguous_rows.append(row)
        else:
            self.at_start = False
            if self.pos is not None and not self.searched and self.below_restarts is not False:
                # A READDIR below where the reader is fills the page that holds its position,
                # unless the next one still starts at or below it: then that page lay wholly
                # behind the reader, a search from the start that the cache served up to there
                # (see the module's text).
                if self.below is not None and cookie <= self.pos:
                    sure = self.ordered and self.below_restarts
                    (self.restart_rows if sure else self.ambiguous_rows).append(self.below)
                    self.targets[self.below] = self.pos
                    self.searched = True
                self.below = row if cookie < self.pos else None
            self.past_start(ts)
        self.progressed = True


def _cookie(v):
    return None if v is None or pd.isna(v) else int(v)


def _by_opens(rpc, calls, cookies_known, keyed_by_file, below_restarts):
    """Listings from opendir/closedir and the reader's position (mode "opens")."""
    rows = _merged(rpc, calls)
    done, live, current = [], {}, {}     # live: key -> _Open; current: pid -> key
    for r in rows:
        pid, ts, kind = r["pid"], r["ts"], r["kind"]
        if kind == "rpc":
            key = current.get(pid)
            o = live.get(key) if key is not None else None
            if o is None:
                mine = [o2 for k, o2 in live.items() if k[0] == pid]
                o = mine[0] if len(mine) == 1 else None
            if o is None:       # a READDIR outside any open we saw: its own listing
                o = _Open(pid, r["comm"], ts, "readdirs", key=("orphan", pid))
                o.began_before_trace = True
                live[o.key] = o
                current[pid] = o.key
            o.readdir(r["row"], ts, _cookie(r["cookie"]) if cookies_known else None)
            continue
        call = r["call"]
        key = (pid, r["file"]) if keyed_by_file else (pid, r["dev"], r["fileid"])
        if call == "opendir":
            if key in live:
                done.append(_close(live.pop(key), None))
            o = _Open(pid, r["comm"], ts, "opens", key=key, below_restarts=below_restarts)
            live[key] = o
        elif call in ("getdents", "llseek", "closedir", "getdents_done"):
            o = live.get(key)
            if o is None:
                if call in ("closedir", "getdents_done"):
                    continue
                o = _Open(pid, r["comm"], ts, "opens", key=key, below_restarts=below_restarts)
                o.began_before_trace = call == "llseek"
                live[key] = o
            if call == "getdents":
                o.position(ts, _cookie(r["pos"]))
                current[pid] = key
            elif call == "llseek":
                if _cookie(r["pos"]) == 0:
                    o.rewind(ts)
            elif call == "getdents_done":
                _returned(o, ts, eof=r["eof"], err=r["error"])
            else:
                done.append(_close(live.pop(key), ts))
                if current.get(pid) == key:
                    del current[pid]
        elif call == "sys_getdents_ret":
            key = current.get(pid)
            o = live.get(key) if key is not None else None
            if o is not None and r.get("in_fs"):
                _returned(o, ts, ret=r["ret"])
        if not keyed_by_file and not pd.isna(r.get("dev")):
            o2 = live.get(key)
            if o2 is not None:
                o2.dev, o2.fileid = _opt_int(r["dev"]), _opt_int(r["fileid"])
    done.extend(live.values())
    return done


def _returned(o, ts, ret=None, eof=None, err=None):
    """How a getdents call came back: at the end of the directory, or with an error."""
    o.end = max(o.end, ts)
    ret = _cookie(ret)
    err = _cookie(err)
    if ret is not None and ret < 0:
        err = -ret
    if err:
        o.ending = KILLED if err in events.KILLED_ERRORS else ERROR
        o.error = err
    elif ret == 0 or (eof is not None and not pd.isna(eof) and int(eof)):
        o.ending = EOF
    elif ret:
        o.past_start(ts)


def _close(o, ts):
    if ts is not None:
        o.end = max(o.end, ts)
        if o.ending is None:
            o.ending = CLOSED
    return o


def _merged(rpc, calls):
    """READDIRs and reader calls in time order (a call before a READDIR at the same instant:
    the READDIR happens inside the call), with each syscall return marked when the
    getdents64 it ends went into NFS."""
    a = pd.DataFrame({"ts": rpc["ts"].to_numpy(), "pid": rpc["pid"].to_numpy(),
                      "comm": rpc["comm"].to_numpy(), "kind": "rpc", "order": 1,
                      "row": np.arange(len(rpc)), "cookie": rpc["cookie"].to_numpy(),
                      "dir": rpc["fileid"].to_numpy()})
    # The tables hold each event's rows apart, so at one timestamp (a coarse emulated clock
    # gives several events one) the trace's own order is gone; _causal() puts a process's
    # events of one instant back in the only order its calls allow.
    b = calls.assign(kind="call", row=-1, order=0)
    df = pd.concat([b, a], ignore_index=True).sort_values(["ts"], kind="stable")
    out = _causal(df.to_dict("records"), "sys_getdents" in set(calls["call"].dropna()))
    # A getdents64 whose return we attribute: one during which the task entered NFS.
    entered = {}
    for r in out:
        if r["kind"] == "call" and r["call"] == "sys_getdents":
            entered[r["pid"]] = False
        elif r["kind"] == "rpc" or (r["kind"] == "call" and r["call"] == "getdents"):
            if r["pid"] in entered:
                entered[r["pid"]] = True
        elif r["kind"] == "call" and r["call"] == "sys_getdents_ret":
            r["in_fs"] = entered.pop(r["pid"], False)
    return out


# Where a process is: outside any call (0), in a getdents64 system call (1), in the file
# system's readdir within it (2), or back from the file system and returning (3).
def _causal(rows, has_sys):
    """Each process's events of one timestamp in causal order: opens, closes and seeks outside
    a call; a getdents64's entry, the file system's readdir within it, the READDIRs it makes,
    its return, the system call's return. has_sys: the trace records the system calls (else a
    file system return ends the call)."""
    level, cur, out, i = {}, {}, [], 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j]["ts"] == rows[i]["ts"]:
            j += 1
        group, i = rows[i:j], j
        pids = list(dict.fromkeys(r["pid"] for r in group))
        for pid in pids:
            pending = [r for r in group if r["pid"] == pid]
            lv = level.get(pid, 0)
            while pending:
                r = pending.pop(_pick(pending, lv, cur.get(pid)))
                out.append(r)
                lv = _after(_kind(r), lv, has_sys)
                if _kind(r) == "getdents":
                    cur[pid] = _known(r.get("fileid"))
            level[pid] = lv
    return out


# Outside a call an open comes before the reads of the file, and a close after them.
_OUTSIDE = ("llseek", "sys_lseek", "opendir", "sys_getdents", "getdents", "rpc",
            "sys_getdents_ret", "getdents_done", "closedir")
_PREFER = {  # what can happen next at each level, most likely first
    0: _OUTSIDE,
    1: ("getdents", "rpc", "sys_getdents_ret", "getdents_done"),
    2: ("rpc", "getdents_done", "sys_getdents_ret"),
    3: ("sys_getdents_ret",) + _OUTSIDE,
}


def _pick(pending, lv, directory):
    """Which of a process's pending events of one instant happened next. directory: the one
    the process's current readdir reads, where the trace says."""
    if lv in (0, 3):
        # A file closed and its slot opened again: the close first.
        opening = {r.get("file") for r in pending if _kind(r) == "opendir"}
        for n, r in enumerate(pending):
            if _kind(r) == "closedir" and r.get("file") in opening:
                return n
    for want in _PREFER[lv]:
        for n, r in enumerate(pending):
            # A READDIR of another directory belongs to a later readdir.
            if _kind(r) == want and not (want == "rpc" and lv == 2 and directory is not None
                                         and _known(r.get("dir")) not in (None, directory)):
                return n
    return 0


def _known(v):
    return None if v is None or pd.isna(v) else int(v)


def _kind(r):
    return "rpc" if r["kind"] == "rpc" else r["call"]


def _after(kind, lv, has_sys):
    return {"sys_getdents": 1, "getdents": 2, "getdents_done": 3 if has_sys else 0,
            "sys_getdents_ret": 0}.get(kind, lv)


def _by_syscalls(rpc, calls, cookies_known):
    """Listings from getdents64 per (process, fd) (mode "syscalls"): one ends when getdents64
    returns 0, the next getdents64 on that fd starts another."""
    lseeks_seen = (calls["call"] == "sys_lseek").any()
    done, live, current = [], {}, {}
    for r in _merged(rpc, calls):
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
            o.readdir(r["row"], ts, _cookie(r["cookie"]) if cookies_known else None,
                      rewinds_visible=bool(lseeks_seen))
            continue
        call = r["call"]
        if call == "sys_getdents":
            key = (pid, _cookie(r["fd"]))
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
            if o.ending is not None:        # end of directory, or an error: the listing is over
                done.append(live.pop(key))
                del current[pid]
            elif _cookie(r["ret"]):
                o.at_start = False
                o.progressed = True
        elif call == "sys_lseek":
            o = live.get((pid, _cookie(r["fd"])))
            if o is not None and _cookie(r["pos"]) == 0 and _cookie(r["whence"]) == 0:
                o.rewind(ts)
    done.extend(live.values())
    # A getdents64 of a local directory enters no NFS: only listings with READDIRs, or that
    # the kernel served from its cache, belong here; without a file system event that is not
    # known, so keep those with READDIRs.
    return [o for o in done if o.rows]


def _by_phases(rpc, phases, cookies_known):
    """One listing per reproducer phase (mode "phases"): its lister opens the directory once
    and never seeks, so a cookie-0 READDIR after the first is a restart."""
    out = []
    last_ts = int(rpc["ts"].max()) if len(rpc) else None
    for p in phases:
        end = p.end if p.end is not None else (last_ts if last_ts is not None else p.start)
        rows = rpc[(rpc["ts"] >= p.start) & (rpc["ts"] <= end)]
        pids = rows["pid"].value_counts()
        pid = int(pids.index[0]) if len(pids) else p.pid
        mine = rows[rows["pid"] == pid]
        o = _Open(pid, str(mine["comm"].iloc[0]) if len(mine) else "", p.start, "phases")
        o.end = end
        for i, c in zip(mine.index, mine["cookie"]):
            o.readdir(int(i), int(rpc.at[i, "ts"]), _cookie(c) if cookies_known else None)
        o.phase = p
        out.append(o)
    return out


def _by_readdirs(rpc, cookies_known, cookie_is_position):
    """One listing per process and directory (mode "readdirs"). Where the cookie a READDIR asks
    for is the reader's own position (5.18+ cache fills), a cookie-0 READDIR after progress is
    a new listing; elsewhere it cannot be told from a restart."""
    out = []
    keys = ["pid"] + [c for c in ("dev", "fileid") if rpc[c].notna().any()]
    for _, rows in rpc.groupby(keys, sort=False, dropna=False):
        o = None
        for i, ts, c in zip(rows.index, rows["ts"], rows["cookie"]):
            c = _cookie(c) if cookies_known else None
            if o is None or (cookie_is_position and c == 0 and o.progressed):
                if o is not None:
                    out.append(o)
                o = _Open(int(rows["pid"].iloc[0]), str(rows["comm"].iloc[0]), int(ts),
                          "readdirs")
            o.readdir(int(i), int(ts), c, rewinds_visible=False)
        out.append(o)
    return out


# ------------------------------------------------------------------------------ per listing
def _restarts(rpcs, restart_idx, invalidation_ts, targets=None):
    """What each restart cost: READDIRs and time until the listing asks for a cookie above every
    cookie asked before the restart, and above the reader's position where that is known
    (targets: per restart, 0 where it is not). Cookies are compared by value: ext4 (hash order), xfs and
    tmpfs (offsets) hand out cookies that grow along a listing, while the page boundaries of a
    re-read move whenever the directory changed, so the same cookies are not asked for again."""
    cookies = rpcs["cookie"].to_numpy()
    ts = rpcs["ts"].to_numpy()
    out = []
    for i, target in zip(restart_idx, targets or [0] * len(restart_idx)):
        reached = max(int(max(cookies[:i])) if i else 0, target)
        j = i
        while j < len(cookies) and cookies[j] <= reached:
            j += 1
        end_ts = ts[j] if j < len(cookies) else ts[-1]
        inv_before = invalidation_ts[invalidation_ts <= ts[i]]
        prev = ts[i - 1] if i else ts[i]
        out.append(Restart(int(ts[i]), int(i), int(cookies[i]), int(j - i),
                           int(end_ts - ts[i]), bool(len(inv_before) and inv_before[-1] >= prev)))
    return out


def _chain(revals, inv_ts, since):
    """The revalidation steps between `since` and the invalidation, in order, deduplicated;
    a step that found the data cache invalid (NFS_INO_INVALID_DATA) says so."""
    rows = revals[(revals["ts"] > max(since, inv_ts - CHAIN_WINDOW_NS)) &
                  (revals["ts"] <= inv_ts)]
    # Start at the last revalidation: the one whose GETATTR found the change.
    starts = (rows["step"] == "revalidate").to_numpy().nonzero()[0]
    if len(starts):
        rows = rows.iloc[starts[-1]:]
    steps = [step + ("(INVALID_DATA)" if not pd.isna(cv) and int(cv) &
                     events.NFS_INO_INVALID_DATA else "")
             for step, cv in zip(rows["step"], rows["cache_validity"])]
    out = []
    for s in steps:
        if not out or out[-1] != s:
            out.append(s)
    return out


def _select(df, lst):
    """Rows of a per-directory table that belong to the listing's directory and time."""
    in_time = (df["ts"] >= lst.start) & (df["ts"] <= lst.end)
    # Rows that name no directory (a GETATTR RPC, a kprobe) belong to the listing's process.
    mine = df["fileid"].isna() & (df["pid"] == lst.pid)
    if lst.fileid is not None:
        same = df["fileid"] == lst.fileid
        if lst.dev is not None:
            same &= df["dev"].isna() | (df["dev"] == lst.dev)
        mine |= same
    else:
        mine |= df["pid"] == lst.pid
    return df[in_time & mine]


def _version_changes(lst, revals, cookie_is_position):
    """How often the directory's change attribute moved during the listing, counted where the
    kernel keys its readdir cache by it (5.18+: a READDIR after the change refills at the
    reader's cookie); None where the trace cannot say."""
    if not cookie_is_position or lst.fileid is None:
        return None
    parts = [lst.rpcs[["ts", "version"]]]
    if len(revals) and "version" in revals:
        parts.append(_select(revals, lst)[["ts", "version"]])
    v = pd.concat(parts).dropna().sort_values("ts", kind="stable")
    if not len(v):
        return None
    vals = v["version"].astype("int64").to_numpy()
    changes = np.flatnonzero(vals[1:] != vals[:-1])
    last_readdir = lst.rpcs["ts"].max() if len(lst.rpcs) else None
    # Only changes a READDIR of the listing met afterwards, once the reader was past the start.
    since = lst.progressed_at
    return int(sum(1 for k in changes if last_readdir is not None and since is not None
                   and since <= v["ts"].iloc[k + 1] <= last_readdir))


def _dentries(samples, start, end):
    """dcache change over [start, end]: last sample at or before start to first at or after end."""
    if samples is None or samples.empty:
        return {}
    before = samples[samples["ts"] <= start]
    after = samples[samples["ts"] >= end]
    first = before.iloc[-1] if len(before) else samples.iloc[0]
    last = after.iloc[0] if len(after) else samples.iloc[-1]
    out = {}
    for col in ("nr_dentry", "nr_negative", "slab_active"):
        a, b = first[col], last[col]
        if not (pd.isna(a) or pd.isna(b)):
            out[col] = {"before": int(a), "after": int(b), "added": int(b) - int(a)}
    return out


def _phase_ending(status):
    """How the reproducer's lister ended, from its exit status: ls -f and paced-lister exit 0
    only after reading to the end of the directory; timeout(1) gives 124, a signal 128+n."""
    if status is None:
        return CUT_OFF
    if status == 0:
        return EOF
    if status == 124 or status > 128:
        return KILLED
    return ERROR


def _damage_in(lst, damage):
    """Damaged or lost stretches of the trace that overlap the listing in time. Any process's
    damaged event counts: another reader's invalidation of the same directory matters too."""
    return [d for d in damage if d["from"] <= lst.end and d["to"] >= lst.start]


def damage_windows(info):
    """The stretches of the trace where events are known to be damaged or missing: [from, to]
    in ns, with the pid when the damage names one."""
    out = []
    lost = sorted(info.get("lost_events") or [], key=lambda x: (x.get("cpu") or 0,
                                                                x.get("ts") or 0))
    prev = {}
    for x in lost:
        cpu, ts = x.get("cpu"), x.get("ts")
        # Events were lost before ts and after the last loss (or the start) on that CPU.
        out.append({"from": prev.get(cpu, -1), "to": ts if ts is not None else 1 << 62,
                    "what": f"{x['count'] if x.get('count') is not None else 'an unknown number of'}"
                            f" events lost on CPU {cpu}"})
        if ts is not None:
            prev[cpu] = ts
    if not lost and info.get("lost_total"):
        # The ring buffer's own counters say events were lost, but not where: anywhere.
        out.append({"from": -1, "to": 1 << 62,
                    "what": f"{info['lost_total']} events lost (the trace's CPU stats), where is "
                            "not known"})
    for d in info.get("damaged_events") or []:
        out.append({"from": d.get("from", d.get("ts")), "to": d.get("to", d.get("ts")),
                    "pid": d.get("pid"), "what": d["what"]})
    if info.get("partial"):
        out.append({"from": info.get("partial_from", -1), "to": 1 << 62,
                    "what": "the trace is damaged: only the part before the damage was read"})
    return out


def analyze(trace):
    """Find the listings in an open trace (see nfsreaddir.trace.open_trace)."""
    tables = events.load(trace)
    rpc = tables["rpc"]
    if rpc.empty:
        raise AnalysisError(
            "no READDIR in this trace. Record a listing with: "
            + events.record_advice(trace.info.get("uname"), {"rpc", "invalidations"}))
    marks = markers_mod.parse(tables["markers"])
    sources = tables["sources"]
    cookies_known = any(not e.startswith("sunrpc:") for e in sources["rpc"])
    invals, revals, ranges = tables["invalidations"], tables["revalidations"], tables["ranges"]
    calls = tables["calls"]
    kinds = set(calls["call"].dropna())
    if {"opendir", "getdents"} <= kinds or ("getdents" in kinds and sources["calls"]
                                            and not sources["calls"][0].startswith("syscalls:")):
        keyed_by_file = calls["file"].notna().any()
        kernel = marks.run.get("kernel") or trace.info.get("uname")
        opens = _by_opens(rpc, calls, cookies_known, keyed_by_file,
                          events.searches_from_first_page(kernel))
        opens = [o for o in opens if o.rows or o.getdents]
    elif "sys_getdents" in kinds:
        opens = _by_syscalls(rpc, calls, cookies_known)
    elif marks.phases:
        opens = _by_phases(rpc, marks.phases, cookies_known)
    else:
        opens = _by_readdirs(rpc, cookies_known, tables["cookie_is_position"])
    # A listing still open at the end of the trace was cut off only where closes are seen.
    ends_visible = "closedir" in kinds
    damage = damage_windows(trace.info)
    listings = []
    for o in opens:
        rows = rpc.loc[o.rows].reset_index(drop=True) if o.rows else rpc.iloc[0:0]
        dev = _opt_int(rows["dev"].dropna().iloc[0]) if rows["dev"].notna().any() else o.dev
        fileid = (_opt_int(rows["fileid"].dropna().iloc[0]) if rows["fileid"].notna().any()
                  else o.fileid)
        comm = str(rows["comm"].iloc[0]) if len(rows) else o.comm
        lst = Listing(int(o.pid), comm, dev, fileid, int(o.start), int(o.end),
                      delimited_by=o.delimited_by, rpcs=rows, cookies_known=cookies_known,
                      began_before_trace=o.began_before_trace, rpc_rows=list(o.rows))
        # Where neither cookies nor the reader's calls are recorded, when it left the start is
        # not known: any change during the listing counts.
        seen = cookies_known or o.delimited_by in ("opens", "syscalls")
        lst.progressed_at = (o.progressed_at if seen and not o.began_before_trace
                             else lst.start)
        if o.delimited_by in ("opens", "syscalls"):
            lst.getdents = o.getdents
        if o.delimited_by == "opens" or "sys_lseek" in kinds:
            lst.rewinds = [int(t) for t in o.rewinds]
        pos = {r: k for k, r in enumerate(o.rows)}
        restart_idx = [pos[r] for r in o.restart_rows]
        targets = [o.targets.get(r, 0) for r in o.restart_rows]
        lst.ambiguous_rows = [pos[r] for r in o.ambiguous_rows]
        lst.ending = o.ending or (CUT_OFF if ends_visible else UNKNOWN)
        lst.error = o.error
        # A READDIR interrupted by a signal: the reader was killed mid-listing.
        errs = rows["error"].dropna()
        if lst.ending != EOF and len(errs) and int(errs.iloc[-1]) in events.KILLED_ERRORS:
            lst.ending, lst.error = KILLED, int(errs.iloc[-1])
        listings.append((lst, (restart_idx, targets), o.phase))
    _label_phases(listings, marks.phases)
    out = []
    for lst, found, phase in listings:
        if phase is not None:
            lst.phase, lst.status, lst.entries = phase.name, phase.status, phase.entries
            if lst.fileid is None:
                lst.fileid = phase.dir_fileid
            # The lister's exit status says how it ended where the trace's events do not.
            if lst.ending in (UNKNOWN, CUT_OFF, CLOSED) or lst.delimited_by == "phases":
                lst.ending = _phase_ending(phase.status)
        my_invals = _select(invals, lst)
        inv_ts = my_invals["ts"].to_numpy()
        if cookies_known:
            lst.restarts = _restarts(lst.rpcs, found[0], inv_ts, found[1])
        restart_ts = np.array([r.ts for r in lst.restarts], dtype=np.int64)
        my_revals = _select(revals, lst) if len(revals) else revals
        prev = lst.start
        for k, (ts, reason) in enumerate(zip(inv_ts, my_invals["reason"])):
            nxt = inv_ts[k + 1] if k + 1 < len(inv_ts) else lst.end + 1
            # >=: under emulation the clock is coarse, and the READDIR that restarts can carry
            # the invalidation's own timestamp (it still comes after it in the trace).
            followed = (bool(((restart_ts >= ts) & (restart_ts < nxt)).any())
                        if cookies_known else None)
            lst.invalidations.append(Invalidation(int(ts), str(reason),
                                                  _chain(my_revals, ts, prev), followed))
            prev = ts
        if ranges is not None and len(ranges) and lst.progressed_at is not None:
            trims = _select(ranges, lst)
            lst.cache_range_trims = int((trims["ts"] >= lst.progressed_at).sum())
        lst.version_changes = _version_changes(lst, revals, tables["cookie_is_position"])
        lst.damage = _damage_in(lst, damage)
        lst.dentries = _dentries(marks.samples, lst.start, lst.end)
        out.append(lst)
    out.sort(key=lambda x: (x.start, x.pid))
    evidence = {name: list(src or []) for name, src in sources.items()}
    return Analysis(out, marks.run, marks.samples, evidence, cookies_known, trace.info,
                    recorded=tables["recorded"], tables=tables)


def _label_phases(listings, phases):
    """Give each reproducer phase to the listing that did its work: the one with the most
    READDIRs that started inside the phase's window."""
    for p in phases or []:
        inside = [i for i, (lst, _, ph) in enumerate(listings) if ph is None
                  and lst.start >= p.start and (p.end is None or lst.start <= p.end)]
        if inside:
            i = max(inside, key=lambda i: len(listings[i][0].rpcs))
            listings[i] = (listings[i][0], listings[i][1], p)
