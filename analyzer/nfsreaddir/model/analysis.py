"""From canonical events to listings: READDIRs, cookie restarts, invalidations, dentries.

A listing is one open of a directory by one process, from its first getdents to its close, to
the end of the directory, or to the end of the trace; opens.py says how the trace's events are
split into listings and which READDIRs are restarts. Here each listing gets what it cost, the
invalidations it met and the causes the trace shows for them, how its directory's change
attribute moved, the damage that overlaps it, and the dcache's growth during it.
"""

import numpy as np

from .. import events
from ..trace.base import bare_name
from ..units import NS, int_or_none
from . import markers as markers_mod
from . import tables as tables_mod
from .columns import Columns, concat, isna, known
from .listing import (  # noqa: F401 (what an analysis is made of: part of this module's answers)
    Analysis,
    AnalysisError,
    Invalidation,
    Listing,
)
from .opens import by_opens, by_phases, by_readdirs, by_syscalls
from .reader import (  # noqa: F401 (how a listing ended: part of this module's answers)
    CLOSED,
    CUT_OFF,
    ENDINGS,
    EOF,
    ERROR,
    KILLED,
    UNKNOWN,
    count_restarts,
    lost_stretch,
    near_loss,
    went_on,
)

CHAIN_WINDOW_NS = 5 * NS  # how far back an invalidation's causes are looked for


def evidence_damage(damage, events):
    """The damage among a listing's that can touch the evidence of a restart: the READDIRs and
    the reader's calls (events: their names), events lost or damaged whatever they were, not a
    damaged event of another kind (a revalidation's flags cut short changes no cookie)."""
    named = {bare_name(e) for e in events}
    return [d for d in damage if not d.get("event") or bare_name(d["event"]) in named]


def restarts(lst, restart_idx, targets, change_ts, evidence):
    """Count the listing's restarts (reader.count_restarts) from the reader model's restart
    rows (indexes into its READDIRs, with the reader's position each had to get back to, 0
    where not known) and its ambiguous rows; a restart whose evidence touches a stretch where
    events were lost or damaged (lst.damage, evidence_damage) is ambiguous."""
    cookies = lst.rpcs["cookie"]
    cookies = np.asarray([0 if c is None or c != c else int(c) for c in cookies], dtype=np.uint64)
    ts = np.asarray(lst.rpcs["ts"], dtype=np.int64)
    lost = near_loss(ts, restart_idx, evidence_damage(lst.damage, evidence))
    count_restarts(lst, cookies, ts, restart_idx, change_ts, targets, lost)


def _next_readdir(ts, when):
    """Index of the first READDIR at or after each instant (len(ts) where none follows). At one
    instant the change comes first: under emulation the clock is coarse, and the READDIR it
    causes can carry its timestamp."""
    return np.searchsorted(ts, when, side="left")


def _survived(lst, change_ts, versions):
    """READDIRs that met a change of the directory mid-way and asked for a cookie that is not 0
    and that the listing had not asked before (reader.went_on): it went on, neither back to
    cookie 0 nor to a page it had. The READDIR that met a change is the first one after it,
    or, where the kernel keys its cache by the change attribute (versions: 5.18+), one whose
    own change attribute differs from the READDIR's before (before 5.18 only an invalidation
    drops the cache: a change without one tests nothing). A change at the very instant of the
    READDIR before may have come before that one instead, so then both must have gone on.
    None where the READDIRs' cookies are not all known."""
    rpcs = lst.rpcs
    if not lst.cookies_known or isna(rpcs["cookie"]).any():
        return None
    cookies = np.asarray(rpcs["cookie"]).astype(np.uint64)
    ts = np.asarray(rpcs["ts"]).astype(np.int64)
    above = went_on(cookies)
    above[:1] = False  # the first READDIR has nothing before it to go on from
    # A READDIR that went back (a restart below the reader's position asks for a cookie the
    # listing never asked, as the page boundaries moved), or still catches up after one, did
    # not go on.
    for r in lst.possible_restarts:
        above[r.rpc_index : r.rpc_index + max(r.refetched, 1)] = False
    met = np.zeros(len(rpcs), dtype=bool)
    t = np.asarray(change_ts, dtype=np.int64)
    k = np.searchsorted(ts, t, side="right")
    inside = (k > 0) & (k < len(ts))
    k, t = k[inside], t[inside]
    tied = ts[k - 1] == t
    met[k[~tied]] = True
    met[k[tied]] |= above[k[tied] - 1]
    if versions and "version" in rpcs and len(rpcs) > 1 and not isna(rpcs["version"]).any():
        v = np.asarray(rpcs["version"]).astype(np.uint64)
        met[1:] |= v[1:] != v[:-1]
    return int((met & above).sum())


def _chain(revals, inv_ts, since):
    """The revalidation steps between `since` and the invalidation, in order, deduplicated;
    a step that found the data cache invalid (NFS_INO_INVALID_DATA) says so."""
    rows = revals[(revals["ts"] > max(since, inv_ts - CHAIN_WINDOW_NS)) & (revals["ts"] <= inv_ts)]
    # Start at the last revalidation: the one whose GETATTR found the change.
    starts = np.flatnonzero([s == "revalidate" for s in rows["step"].tolist()])
    if len(starts):
        rows = rows[starts[-1] :]
    steps = [
        step + ("(INVALID_DATA)" if cv == cv and int(cv) & events.NFS_INO_INVALID_DATA else "")
        for step, cv in zip(rows["step"].tolist(), rows["cache_validity"].tolist())
    ]
    out: list[str] = []
    for s in steps:
        if not out or out[-1] != s:
            out.append(s)
    return out


def _select(df, lst):
    """Rows of a per-directory table that belong to the listing's directory and time."""
    in_time = (df["ts"] >= lst.start) & (df["ts"] <= lst.end)
    # Rows that name no directory (a GETATTR RPC, a kprobe) belong to the listing's process.
    mine = isna(df["fileid"]) & (df["pid"] == lst.pid)
    if lst.fileid is not None:
        same = df["fileid"] == lst.fileid
        if lst.dev is not None:
            same &= isna(df["dev"]) | (df["dev"] == lst.dev)
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
    parts = [_ts_version(lst.rpcs)]
    if len(revals) and "version" in revals:
        parts.append(_ts_version(_select(revals, lst)))
    v = _known_rows(concat(parts)).sorted_by("ts")
    if not len(v):
        return None
    vals = v["version"].astype(np.int64)
    changes = np.flatnonzero(vals[1:] != vals[:-1])
    last_readdir = lst.rpcs["ts"].max() if len(lst.rpcs) else None
    # Only changes a READDIR of the listing met afterwards, once the reader was past the start,
    # and not by filling again the first page that still held the reader.
    since = lst.progressed_at
    rpc_ts = lst.rpcs["ts"].astype(np.int64)
    refills = set(lst.refill_rows)
    vts = v["ts"]
    return int(
        sum(
            1
            for k in changes
            if last_readdir is not None
            and since is not None
            and since <= vts[k + 1] <= last_readdir
            and int(_next_readdir(rpc_ts, vts[k + 1])) not in refills
        )
    )


def _ts_version(t):
    """The table's time stamps and change attributes."""
    return Columns({"ts": t["ts"], "version": t["version"]})


def _known_rows(t):
    """The rows with no missing value."""
    return t[~np.any([isna(v) for v in t.cols.values()], axis=0)] if len(t) else t


def _version_moves(lst, revals):
    """When a revalidation saw the directory's change attribute move during the listing (the
    READDIRs' own values are compared in _survived)."""
    if lst.fileid is None or not len(revals) or "version" not in revals:
        return []
    v = _known_rows(_ts_version(_select(revals, lst)))
    vals = v["version"].astype(np.int64)
    return [int(t) for t in v["ts"].astype(np.int64)[1:][vals[1:] != vals[:-1]]]


def _dentries(samples, start, end):
    """dcache change over [start, end]: last sample at or before start to first at or after end."""
    if samples is None or not len(samples):
        return {}
    before = np.flatnonzero(samples["ts"] <= start)
    after = np.flatnonzero(samples["ts"] >= end)
    first = before[-1] if len(before) else 0
    last = after[0] if len(after) else len(samples) - 1
    out = {}
    for col in ("nr_dentry", "nr_negative", "slab_active"):
        a, b = samples[col][first], samples[col][last]
        if not (isna([a]).any() or isna([b]).any()):
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


def damage_windows(info, read=()):
    """The stretches of the trace where events are known to be damaged or missing: [from, to]
    in ns, with the pid when the damage names one. read: tables of events read (ts and cpu
    columns), where a loss is placed as trace-cmd places it: the ring buffer marks the page
    after the lost events, so they lie between that CPU's last event before the page and the
    page (ts: its time stamp, or the next event's where report text said it)."""
    out = []
    lost = sorted(
        info.get("lost_events") or [], key=lambda x: (x.get("cpu") or 0, x.get("ts") or 0)
    )
    seen = _cpu_times(read) if lost else {}
    prev: dict[int, float] = {}
    for x in lost:
        cpu, ts = x.get("cpu"), x.get("ts")
        # The last of the CPU's events read before ts is the latest known (others, not read,
        # may follow it).
        last = -1
        mine = seen.get(cpu)
        if ts is not None and mine is not None:
            k = int(np.searchsorted(mine, ts, side="left"))
            if k:
                last = int(mine[k - 1])
        n = x["count"] if x.get("count") is not None else "an unknown number of"
        stretch = lost_stretch(prev.get(cpu, -1), last, ts if ts is not None else 1 << 62)
        out.append(
            {
                **stretch,
                "what": f"{n} events lost on CPU {cpu}",
                # (what rules/words folds a thousand such places into: one clause, the events)
                "kind": "events lost",
                "events": x.get("count"),
            }
        )
        if ts is not None:
            prev[cpu] = ts
    if not lost and info.get("lost_total"):
        # The ring buffer's own counters say events were lost, but not where: anywhere.
        out.append(
            {
                "from": -1,
                "to": 1 << 62,
                "what": f"{info['lost_total']} events lost (the trace's CPU stats), where is "
                "not known",
            }
        )
    for d in info.get("damaged_events") or []:
        out.append(
            {
                "from": d.get("from", d.get("ts")),
                "to": d.get("to", d.get("ts")),
                "pid": d.get("pid"),
                "event": d.get("event"),
                "what": d["what"],
            }
        )
    if info.get("partial"):
        out.append(
            {
                "from": info.get("partial_from", -1),
                "to": 1 << 62,
                "what": "the trace is damaged: only the part before the damage was read",
            }
        )
    return out


def _cpu_times(tables):
    """{cpu: the sorted times of its events} in the tables."""
    ts = [np.asarray(t["ts"], dtype=np.int64) for t in tables if len(t) and "cpu" in t]
    cpu = [np.asarray(t["cpu"], dtype=np.int64) for t in tables if len(t) and "cpu" in t]
    if not ts:
        return {}
    ts_all, cpu_all = np.concatenate(ts), np.concatenate(cpu)
    return {int(c): np.sort(ts_all[cpu_all == c]) for c in np.unique(cpu_all)}


def analyze(trace):
    """Find the listings in an open trace (see nfsreaddir.trace.open_trace); it reads the
    trace through tables.load, which says what it reads."""
    read = tables_mod.load(trace)
    tables = read.frames
    rpc = tables["rpc"]
    if not len(rpc):
        raise AnalysisError(
            "no READDIR in this trace. Record a listing with: "
            + events.record_advice(trace.info.get("uname"), {"rpc", "invalidations"})
        )
    marks = markers_mod.parse(tables["markers"])
    sources = read.sources
    cookies_known = any(not e.startswith("sunrpc:") for e in sources["rpc"])
    calls = tables["calls"]
    kinds = set(known(calls["call"]).tolist())
    first_page = events.searches_from_first_page(marks.run.get("kernel") or trace.info.get("uname"))
    if first_page is None and read.cookie_is_position:
        # A trace that does not name its kernel (report text) but has upstream's readdir
        # events, which came with the cookie-indexed cache in 5.18.
        first_page = False
    opens = _opens(read, kinds, marks, cookies_known, first_page)
    # A listing still open at the end of the trace was cut off only where closes are seen.
    ends_visible = "closedir" in kinds
    listings = [_listing(o, read, kinds, cookies_known, ends_visible) for o in opens]
    _label_phases(listings, marks.phases)
    # The events a restart is read from: where a loss among them lies, and damage to others
    # cannot make one (evidence_damage).
    damage = damage_windows(trace.info, [tables[n] for n in ("rpc", "calls") if n in tables])
    evidence_events = [
        e for name in ("rpc", "calls", "rpc_directory") for e in sources.get(name) or ()
    ]
    out = []
    for lst, found, phase in listings:
        if phase is not None:
            lst.phase, lst.status, lst.entries = phase.name, phase.status, phase.entries
            if lst.fileid is None:
                lst.fileid = phase.dir_fileid
            # The lister's exit status says how it ended where the trace's events do not.
            if lst.ending in (UNKNOWN, CUT_OFF, CLOSED) or lst.delimited_by == "phases":
                lst.ending = _phase_ending(phase.status)
        lst.damage = _damage_in(lst, damage)
        _changes(lst, found, tables, read.cookie_is_position, evidence_events)
        lst.dentries = _dentries(marks.counters, lst.start, lst.end)
        out.append(lst)
    out.sort(key=lambda x: (x.start, x.pid))
    _other_readers(out)
    for lst in out:
        lst.searches_from_first_page = first_page
    evidence = {name: list(src or []) for name, src in sources.items()}
    return Analysis(
        out,
        marks.run,
        marks.counters,
        evidence,
        cookies_known,
        trace.info,
        recorded=read.recorded,
        tables=tables,
    )


def _opens(read, kinds, marks, cookies_known, first_page):
    """The reader model's listings, delimited by the best evidence the trace has: the reader's
    opens and calls, its system calls, the reproducer's phases, else the READDIRs alone."""
    rpc, calls, sources = read.frames["rpc"], read.frames["calls"], read.sources
    if {"opendir", "getdents"} <= kinds or (
        "getdents" in kinds and sources["calls"] and not sources["calls"][0].startswith("syscalls:")
    ):
        keyed_by_file = bool(len(known(calls["file"])))
        opens = by_opens(rpc, calls, cookies_known, keyed_by_file, first_page)
        return [o for o in opens if o.rows or o.getdents]
    if "sys_getdents" in kinds:
        return by_syscalls(rpc, calls, cookies_known)
    if marks.phases:
        return by_phases(rpc, marks.phases, cookies_known)
    return by_readdirs(rpc, cookies_known, read.cookie_is_position)


def _listing(o, read, kinds, cookies_known, ends_visible):
    """(Listing, (restart rows, their targets), phase) of one of the reader model's listings."""
    rpc = read.frames["rpc"]
    o.settle()
    rows = rpc[np.asarray(o.rows, dtype=np.int64)]
    devs, fileids = known(rows["dev"]), known(rows["fileid"])
    dev = int_or_none(devs[0]) if len(devs) else o.dev
    fileid = int_or_none(fileids[0]) if len(fileids) else o.fileid
    comm = str(rows["comm"][0]) if len(rows) else o.comm
    lst = Listing(
        int(o.pid),
        comm,
        dev,
        fileid,
        int(o.start),
        int(o.end),
        delimited_by=o.delimited_by,
        rpcs=rows,
        cookies_known=cookies_known,
        began_before_trace=o.began_before_trace,
        rpc_rows=list(o.rows),
        invalidations_known=bool(read.recorded["invalidations"]),
    )
    # Where neither cookies nor the reader's calls are recorded, when it left the start is
    # not known: any change during the listing counts.
    seen = cookies_known or o.delimited_by in ("opens", "syscalls")
    lst.progressed_at = o.progressed_at if seen and not o.began_before_trace else lst.start
    if o.delimited_by in ("opens", "syscalls"):
        lst.getdents = o.getdents
    if o.delimited_by == "opens" or "sys_lseek" in kinds:
        lst.rewinds = [int(t) for t in o.rewinds]
    pos = {r: k for k, r in enumerate(o.rows)}
    restart_idx = [pos[r] for r in o.restart_rows]
    targets = [o.targets.get(r, 0) for r in o.restart_rows]
    lst.ambiguous_rows = [pos[r] for r in o.ambiguous_rows]
    lst.refill_rows = [pos[r] for r in o.refills]
    lst.ending = o.ending or (CUT_OFF if ends_visible else UNKNOWN)
    lst.error = o.error
    # A READDIR interrupted by a signal: the reader was killed mid-listing.
    errs = known(rows["error"])
    if lst.ending != EOF and len(errs) and int(errs[-1]) in events.KILLED_ERRORS:
        lst.ending, lst.error = KILLED, int(errs[-1])
    return lst, (restart_idx, targets), o.phase


def _changes(lst, found, tables, cookie_is_position, evidence_events):
    """What the directory's changes did to one listing: its restarts (found: the reader
    model's restart rows and targets) and their other bound, its invalidations and whether a
    restart followed each, the cache trims, version changes and READDIRs that survived one."""
    invals, revals, ranges = tables["invalidations"], tables["revalidations"], tables["ranges"]
    my_invals = _select(invals, lst)
    inv_ts = my_invals["ts"]
    if lst.cookies_known:
        restarts(lst, found[0], found[1], inv_ts, evidence_events)
    restart_ts = np.array([r.ts for r in lst.restarts], dtype=np.int64)
    rpc_ts = lst.rpcs["ts"].astype(np.int64)
    ambiguous = set(lst.ambiguous_rows)
    refills = set(lst.refill_rows)
    my_revals = _select(revals, lst) if len(revals) else revals
    prev = lst.start
    for k, (ts, reason) in enumerate(zip(inv_ts.tolist(), my_invals["reason"].tolist())):
        nxt = inv_ts[k + 1] if k + 1 < len(inv_ts) else lst.end + 1
        # >=: under emulation the clock is coarse, and the READDIR that restarts can carry
        # the invalidation's own timestamp (it still comes after it in the trace).
        followed = (
            bool(((restart_ts >= ts) & (restart_ts < nxt)).any()) if lst.cookies_known else None
        )
        after = int(_next_readdir(rpc_ts, ts))
        maybe = after in ambiguous and not followed
        lst.invalidations.append(
            Invalidation(
                int(ts),
                str(reason),
                _chain(my_revals, ts, prev),
                None if maybe else followed,
                followed_by_ambiguous=maybe,
                refilled_start=after in refills,
            )
        )
        prev = ts
    if ranges is not None and len(ranges) and lst.progressed_at is not None:
        trims = _select(ranges, lst)["ts"].astype(np.int64)
        trims = trims[trims >= lst.progressed_at]
        lst.cache_range_trims = int(
            sum(int(_next_readdir(rpc_ts, t)) not in refills for t in trims)
        )
    lst.version_changes = _version_changes(lst, revals, cookie_is_position)
    changes = inv_ts.tolist() + (
        _select(ranges, lst)["ts"].tolist() if ranges is not None and len(ranges) else []
    )
    moves = _version_moves(lst, revals) if cookie_is_position else []
    lst.survived = _survived(lst, sorted(changes + moves), cookie_is_position)


def _other_readers(listings):
    """Mark the listings whose directory another process listed at the same time: before 5.18
    that reader's refill of the first pages can make this one restart below its position."""
    by_dir: dict[tuple, list[Listing]] = {}
    for lst in listings:
        if lst.fileid is not None:
            by_dir.setdefault((lst.dev, lst.fileid), []).append(lst)
    for group in by_dir.values():
        for a in group:
            a.other_readers = any(
                b.pid != a.pid and b.start <= a.end and b.end >= a.start for b in group
            )


def _label_phases(listings, phases):
    """Give each reproducer phase to the listing that did its work: the one with the most
    READDIRs that started inside the phase's window."""
    for p in phases or []:
        inside = [
            i
            for i, (lst, _, ph) in enumerate(listings)
            if ph is None and lst.start >= p.start and (p.end is None or lst.start <= p.end)
        ]
        if inside:
            i = max(inside, key=lambda i: len(listings[i][0].rpcs))
            listings[i] = (listings[i][0], listings[i][1], p)
