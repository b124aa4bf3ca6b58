"""From canonical events to listings: READDIRs, cookie restarts, invalidations, dentries.

A listing is one process reading one directory. With the reproducer's markers it is the phase
between `event=start` and `event=end`; without them, all READDIRs of one process for one
directory. A restart is a READDIR at cookie 0 after the listing's first one: the kernel went
back to the start of the directory although the reader did not ask it to.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import events, markers as markers_mod

NS = 1_000_000_000
CHAIN_WINDOW_NS = 5 * NS    # how far back an invalidation's causes are looked for


class AnalysisError(Exception):
    """The trace cannot answer the question; the message says what to record instead."""


@dataclass
class Restart:
    ts: int
    rpc_index: int              # index of the cookie-0 READDIR within the listing
    refetched: int              # READDIRs until the listing reached a cookie not read before
    cost_ns: int                # time from the restart until then
    after_invalidation: bool


@dataclass
class Invalidation:
    ts: int
    reason: str
    chain: list                 # the steps that led to it: revalidate, GETATTR, ...
    followed_by_restart: bool


@dataclass
class Listing:
    pid: int
    comm: str
    dev: int | None
    fileid: int | None
    start: int
    end: int
    phase: str | None = None
    status: int | None = None
    entries: int | None = None
    rpcs: pd.DataFrame = field(repr=False, default=None)
    restarts: list = field(default_factory=list)
    invalidations: list = field(default_factory=list)
    cache_range_trims: int = 0
    getdents: int | None = None     # None: the kernel has no getdents event
    rewinds: list = field(default_factory=list)     # ts of each seek back to 0
    dentries: dict = field(default_factory=dict)

    @property
    def timed_out(self):
        return self.status == 124

    def summary(self):
        cookies = self.rpcs["cookie"].dropna()
        return {
            "phase": self.phase, "pid": self.pid, "comm": self.comm,
            "dev": self.dev, "dir_fileid": self.fileid,
            "seconds": round((self.end - self.start) / NS, 3),
            "entries": self.entries, "status": self.status, "timed_out": self.timed_out,
            "getdents": self.getdents,
            "readdirs": int(len(self.rpcs)),
            "cookie_zero_readdirs": int((cookies == 0).sum()),
            "restarts": len(self.restarts),
            "rewinds": len(self.rewinds),
            "refetched_readdirs": sum(r.refetched for r in self.restarts),
            "restart_cost_seconds": round(sum(r.cost_ns for r in self.restarts) / NS, 3),
            "invalidations": len(self.invalidations),
            "invalidations_followed_by_restart": sum(i.followed_by_restart
                                                     for i in self.invalidations),
            "cache_range_trims": self.cache_range_trims,
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

    def to_dict(self):
        return {"trace": self.info, "run": self.run, "evidence": self.evidence,
                "cookies_known": self.cookies_known,
                "listings": [lst.summary() for lst in self.listings],
                "restarts": [[vars(r) for r in lst.restarts] for lst in self.listings],
                "rewinds": [lst.rewinds for lst in self.listings],
                "invalidations": [[vars(i) for i in lst.invalidations]
                                  for lst in self.listings]}


def _opt_int(v):
    return None if v is None or pd.isna(v) else int(v)


def _restarts(rpcs, invalidation_ts, rewind_ts=np.array([], dtype=np.int64)):
    """Cookie-0 READDIRs after the first READDIR, and what each one cost.

    The cost is counted until a READDIR asks for a cookie above every cookie asked before the
    restart. Cookies are compared by value: ext4 (hash order), xfs and tmpfs (offsets) hand out
    cookies that grow along a listing, while the page boundaries of a re-read move whenever the
    directory changed, so the same cookies are not asked for again.
    """
    cookies = rpcs["cookie"].to_numpy()
    ts = rpcs["ts"].to_numpy()
    out = []
    reached = None
    for i, c in enumerate(cookies):
        asked = ((rewind_ts > ts[i - 1]) & (rewind_ts <= ts[i])).any() if i else False
        if i > 0 and c == 0 and not asked:
            j = i
            while j < len(cookies) and cookies[j] <= reached:
                j += 1
            end_ts = ts[j] if j < len(cookies) else ts[-1]
            inv_before = invalidation_ts[invalidation_ts <= ts[i]]
            out.append(Restart(int(ts[i]), i, j - i, int(end_ts - ts[i]),
                               bool(len(inv_before) and inv_before[-1] >= ts[i - 1])))
        reached = c if reached is None else max(reached, c)
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


def _windows(rpc, phases, calls):
    """(pid, start, end, phase) for each listing."""
    out = []
    if phases:
        for p in phases:
            end = p.end if p.end is not None else (int(rpc["ts"].max()) if len(rpc) else p.start)
            rows = rpc[(rpc["ts"] >= p.start) & (rpc["ts"] <= end)]
            pids = rows["pid"].value_counts()
            pid = int(pids.index[0]) if len(pids) else p.pid
            out.append((pid, p.start, end, p))
        return out
    opens = calls[calls["call"] == "opendir"]
    if len(opens):
        closes = calls[calls["call"] == "closedir"]
        for pid, fileid, ts in zip(opens["pid"], opens["fileid"], opens["ts"]):
            c = closes[(closes["pid"] == pid) & (closes["fileid"] == fileid) &
                       (closes["ts"] > ts)]["ts"]
            end = int(c.iloc[0]) if len(c) else int(rpc["ts"].max())
            if ((rpc["pid"] == pid) & (rpc["ts"] >= ts) & (rpc["ts"] <= end)).any():
                out.append((int(pid), int(ts), end, None))
        return out
    keys = ["pid"] + [c for c in ("dev", "fileid") if rpc[c].notna().any()]
    for key, rows in rpc.groupby(keys, sort=False):
        pid = key[0] if isinstance(key, tuple) else key
        out.append((int(pid), int(rows["ts"].min()), int(rows["ts"].max()), None))
    return out


def analyze(trace):
    """Find the listings in an open trace (see nfsreaddir.trace.open_trace)."""
    tables = events.load(trace)
    rpc = tables["rpc"]
    if rpc.empty:
        raise AnalysisError(
            "no READDIR in this trace. Record a listing with: trace-cmd record "
            + events.RECORD_HINT["rpc"] + " " + events.RECORD_HINT["invalidations"])
    marks = markers_mod.parse(tables["markers"])
    cookies_known = "cookie" in {k for s in tables["sources"]["rpc"] for k in s.fields}
    invals, revals, ranges = tables["invalidations"], tables["revalidations"], tables["ranges"]
    calls = tables["calls"]
    listings = []
    for pid, start, end, phase in _windows(rpc, marks.phases, calls):
        rows = rpc[(rpc["pid"] == pid) & (rpc["ts"] >= start) & (rpc["ts"] <= end)]
        dev = _opt_int(rows["dev"].dropna().iloc[0]) if rows["dev"].notna().any() else None
        fileid = (_opt_int(rows["fileid"].dropna().iloc[0]) if rows["fileid"].notna().any()
                  else (phase.dir_fileid if phase else None))
        comm = str(rows["comm"].iloc[0]) if len(rows) else ""
        lst = Listing(pid, comm, dev, fileid, start, end, rpcs=rows.reset_index(drop=True))
        if phase:
            lst.phase, lst.status, lst.entries = phase.name, phase.status, phase.entries
        my_invals = _select(invals, lst)
        inv_ts = my_invals["ts"].to_numpy()
        if tables["sources"]["calls"]:
            mine = calls[(calls["pid"] == pid) & (calls["ts"] >= start) & (calls["ts"] <= end)]
            lst.getdents = int((mine["call"] == "getdents").sum())
            # A seek that moved the position back to 0; lseek(fd, 0, SEEK_CUR) at 0 is none.
            seeks = mine[(mine["call"] == "llseek") & (mine["pos"] == 0) & (mine["old_pos"] != 0)]
            lst.rewinds = [int(t) for t in seeks["ts"]]
        rewind_ts = np.array(lst.rewinds, dtype=np.int64)
        if cookies_known:
            lst.restarts = _restarts(lst.rpcs, inv_ts, rewind_ts)
        restart_ts = np.array([r.ts for r in lst.restarts], dtype=np.int64)
        my_revals = _select(revals, lst) if len(revals) else revals
        prev = start
        for k, (ts, reason) in enumerate(zip(inv_ts, my_invals["reason"])):
            nxt = inv_ts[k + 1] if k + 1 < len(inv_ts) else end + 1
            # >=: under emulation the clock is coarse, and the READDIR that restarts can carry
            # the invalidation's own timestamp (it still comes after it in the trace).
            followed = bool(((restart_ts >= ts) & (restart_ts < nxt)).any())
            lst.invalidations.append(Invalidation(int(ts), str(reason),
                                                  _chain(my_revals, ts, prev), followed))
            prev = ts
        if ranges is not None and len(ranges):
            lst.cache_range_trims = int(len(_select(ranges, lst)))
        lst.dentries = _dentries(marks.samples, start, end)
        listings.append(lst)
    evidence = {name: [s.event for s in (src or [])] for name, src in tables["sources"].items()}
    return Analysis(listings, marks.run, marks.samples, evidence, cookies_known, trace.info)


@dataclass
class Verdict:
    code: int               # 0 good, 1 bad, 125 cannot decide (git bisect run's meaning)
    reason: str

    @property
    def word(self):
        return {0: "good", 1: "bad"}.get(self.code, "skip")


def verdict(analyses, max_restarts=0, max_ratio=1.5):
    """One answer for git bisect run from one or more analysed traces."""
    listings = [lst for a in analyses for lst in a.listings]
    if not listings:
        return Verdict(125, "no listing found")
    if all(a.cookies_known for a in analyses):
        evidence = "cookies from " + ", ".join(sorted({e for a in analyses
                                                       for e in a.evidence["rpc"]}))
        worst = max(listings, key=lambda lst: (len(lst.restarts), lst.timed_out))
        n = len(worst.restarts)
        if n > max_restarts or worst.timed_out:
            inv = sum(i.followed_by_restart for i in worst.invalidations)
            what = f"restarted {n} times at cookie 0" + (
                f" after {inv} invalidations" if inv else "")
            if worst.timed_out:
                what += ", and did not finish"
            return Verdict(1, f"bad: listing of dir {worst.fileid} by {worst.comm}"
                              f"[{worst.pid}]{' (' + worst.phase + ')' if worst.phase else ''} "
                              f"{what} ({len(worst.rpcs)} READDIRs; evidence: {evidence})")
        inv = sum(len(lst.invalidations) for lst in listings)
        return Verdict(0, f"good: {len(listings)} listings, no restart at cookie 0 "
                          f"(at most {max_restarts} allowed), {inv} invalidations during them "
                          f"(evidence: {evidence})")
    # No cookies: only a modified listing against an idle one of the same run can tell.
    by_phase = {lst.phase: lst for lst in listings if lst.phase}
    if "idle" in by_phase and "modified" in by_phase:
        idle, mod = len(by_phase["idle"].rpcs), len(by_phase["modified"].rpcs)
        ratio = mod / max(idle, 1)
        evidence = f"READDIR counts from {', '.join(analyses[0].evidence['rpc'])}"
        if ratio > max_ratio or by_phase["modified"].timed_out:
            return Verdict(1, f"bad: modified listing needed {mod} READDIRs against {idle} idle "
                              f"({ratio:.1f}x > {max_ratio}x; evidence: {evidence})")
        return Verdict(0, f"good: modified listing needed {mod} READDIRs against {idle} idle "
                          f"({ratio:.1f}x <= {max_ratio}x; evidence: {evidence})")
    return Verdict(125, "cannot decide: the trace has no READDIR cookies and no idle listing "
                        "to compare with; record the cookie with "
                        f"`trace-cmd record {events.RECORD_HINT['rpc']}` (or the reproducer's "
                        "kprobe on 5.10)")
