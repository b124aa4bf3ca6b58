"""A trace's events read into the canonical tables every analysis works on.

Which events fill each table, and how their fields map, is the kernel knowledge's (events.py);
this reads them:

    rpc            a READDIR/READDIRPLUS sent: ts, pid, comm, dev, fileid, cookie, dtsize, plus,
                   version (the directory's change attribute), error
    invalidations  the directory's page cache thrown away: ts, pid, dev, fileid, reason
    revalidations  attribute checks that can lead to one: ts, pid, dev, fileid, step,
                   cache_validity, version
    calls          what the reader did: ts, pid, call, dev, fileid, file (the open file), fd,
                   pos, cookie, old_pos, ret, eof, error; call is one of opendir, closedir,
                   getdents (entering the file system, with the reader's position where the
                   kernel says), getdents_done (how it returned), llseek, and the system calls
                   sys_getdents, sys_getdents_ret, sys_lseek
    markers        the reproducer's trace_marker lines: ts, pid, text
    requests       every RPC sent (sunrpc:rpc_request): ts, pid, comm, task_id, client_id,
                   program, version, op (model/roundtrips counts a listing's)
    latencies      each RPC's reply (sunrpc:rpc_stats_latency): ts, task_id, client_id, rtt,
                   execute (microseconds)
    uncached       the uncached mode's READDIR events where the rpc table was read from others
                   (the series on 5.10 over NFSv4: nfs4:nfs4_readdir, with
                   nfs:nfs_readdir_uncached(_page_filled) beside it): ts, pid, fileid

load() reads a whole trace; wanted() says what it reads (for a reader that reads once for
several analyses); stream_sources() maps events to tables for a reader that takes them one at a
time. What in the tables shows the trace damaged is found by :mod:`.damage`.
"""

import re
from typing import Any, NamedTuple

import numpy as np

from ..events import (
    CALL_SOURCES,
    INVALIDATION_SOURCES,
    LATENCY_SOURCE,
    MARKER_SOURCE,
    NFS_READDIR_CACHE_EVENTS,
    OPTIONAL_FIELDS,
    PAIRED_DIRECTORY,
    PRINTED_NAMES,
    RANGE_INVALIDATION,
    REQUEST_SOURCE,
    REVALIDATION_SOURCES,
    RPC_SOURCES,
    SYSCALL_SOURCES,
    UNCACHED_READDIR,
    Source,
)
from ..recordtype import record
from ..trace.arrays import Strs
from ..trace.base import bare_name
from .columns import Columns, concat, fill, inferred, isna
from .damage import TEXT_FIELDS, impossible_values, not_numbers, position_back, unpaired_readdirs
from .requires import requires_events

# The tables are numpy columns (model/columns): pandas (0.5 s to import) is for the frames made
# of them where a table, a plot or an export is shown.

TABLE_COLUMNS = {
    "rpc": ["dev", "fileid", "cookie", "dtsize", "plus", "version", "error", "index"],
    "invalidations": ["dev", "fileid", "reason"],
    "revalidations": ["dev", "fileid", "step", "cache_validity", "version"],
    "calls": [
        "dev",
        "fileid",
        "call",
        "file",
        "fd",
        "pos",
        "cookie",
        "old_pos",
        "ret",
        "eof",
        "error",
        "whence",
    ],
}


def symbols(fmt, field_name):
    """The value -> name table of a field printed with __print_symbolic, from the event's
    print format (the kernel's own names, e.g. a drop reason), or {}."""
    text = getattr(fmt, "print_fmt", "") or ""
    m = re.search(
        r"__print_symbolic\(REC->" + re.escape(field_name) + r"\s*,(.*?)\)\s*(?:,|$)", text
    )
    if not m:
        return {}
    return {
        int(v, 0): name
        for v, name in re.findall(
            r'\{\s*(-?(?:0x[0-9a-fA-F]+|\d+))\s*,\s*"([^"]*)"\s*\}', m.group(1)
        )
    }


def _names(trace, src):
    """The trace's event names a source stands for: itself, or for "*:fn" every kprobe named
    fn whatever its group (text input has no group: the bare name)."""
    if not src.event.startswith("*:"):
        return [src.event]
    bare = src.event[2:]
    return sorted(n for n in trace.event_names() if bare_name(n) == bare)


def _raw_fields(trace, src, name):
    """{canonical: raw field} this event has, or None when it lacks a required field."""
    fmt = trace.event_format(name)
    if fmt is None:
        return None
    have = set(fmt.user_fields())
    need = set(src.fields.values()) | ({src.where[0]} if src.where else set())
    if not need <= have:
        return None
    out = dict(src.fields)
    for canon in src.optional:
        raw = next((r for r in OPTIONAL_FIELDS.get(canon, (canon,)) if r in have), None)
        if raw is not None:
            out[canon] = raw
    return out


class _Use(NamedTuple):
    """One event of the trace standing for a source, with the fields it has."""

    src: Source
    name: str
    fields: tuple  # ((canonical, raw), ...)


def _uses(trace, sources):
    out = []
    for s in sources:
        for name in _names(trace, s):
            f = _raw_fields(trace, s, name)
            if f is not None:
                out.append(_Use(s, name, tuple(sorted(f.items()))))
    return out


def _request(uses):
    """{event: fields} to read for these uses."""
    wanted: dict[str, set[str]] = {}
    for u in uses:
        cols = {raw for _, raw in u.fields} | ({u.src.where[0]} if u.src.where else set())
        wanted.setdefault(u.name, set()).update(cols)
    return wanted


def values(col):
    """A column of the reader's columns (read_columns) as one numpy array: a string column
    (Strs) as its values (objects; NaN where it has none, as pandas gives a missing string),
    any other as it is."""
    if isinstance(col, Strs):
        return np.array(list(col.values) + [np.nan], dtype=object)[np.asarray(col.codes)]
    return np.asarray(col)


def _kept(col, allowed):
    """Which rows of a column hold one of the allowed values."""
    if isinstance(col, Strs):
        keep = [k for k, v in enumerate(col.values) if v in allowed]
        return np.isin(np.asarray(col.codes), np.asarray(keep, dtype=np.int64))
    return np.isin(values(col), list(allowed))


def _frame(trace, use, frames):
    """The canonical columns of one use's table (its columns already read); a value that is
    not what its column holds is damage (the trace's damaged_events)."""
    raw = frames[use.name]
    rows = _kept(raw[use.src.where[0]], use.src.where[1]) if use.src.where else slice(None)
    out = Columns({c: values(raw[c])[rows] for c in ("ts", "pid", "comm", "cpu")})
    found: list = []
    for canon, rawname in use.fields:
        out[canon] = values(raw[rawname])[rows]
        if canon not in TEXT_FIELDS:
            found += not_numbers(out, canon, use.name)
        if canon in UNSIGNED and out[canon].dtype.kind == "i":
            # report text types a column by its values (signed where all fit): a cookie is
            # unsigned wherever it comes from, so that one compares with another exactly
            out[canon] = out[canon].astype(np.uint64)
        if canon == "reason":
            names: dict = symbols(trace.event_format(use.name), rawname) or PRINTED_NAMES.get(
                (use.src.event, rawname), {}
            )
            out[canon] = inferred(
                [names.get(v, v) if isinstance(v, (int, np.integer)) else v for v in out[canon]]
            )
    for canon, value in use.src.constants.items():
        fill(out, canon, value)
    fill(out, "source", use.name)
    if found:
        damaged = trace.info.setdefault("damaged_events", [])
        # (a use read for two tables is damaged once)
        damaged.extend(d for d in found if d not in damaged)
    return out


def _all_sources():
    return (
        [s for g in RPC_SOURCES + INVALIDATION_SOURCES + CALL_SOURCES for s in g]
        + REVALIDATION_SOURCES
        + SYSCALL_SOURCES
        + [PAIRED_DIRECTORY, RANGE_INVALIDATION, MARKER_SOURCE, REQUEST_SOURCE, LATENCY_SOURCE]
    )


def has_readdir_source(trace):
    """Whether the trace recorded any event READDIRs are counted from (without one, the readdir
    analysis has nothing to read)."""
    return bool(_uses(trace, [s for g in RPC_SOURCES for s in g]))


def wanted(trace):
    """{event: fields} of everything load() reads from this trace (for trace.OnePass)."""
    return _request(_uses(trace, _all_sources()))


# The canonical fields that are unsigned 64-bit wherever they come from; every other integer
# field is signed (a position is a loff_t, a return a long), so that one column has one type
# whichever event a row came from (numpy's casts wrap, as the kernel's do).
UNSIGNED = {"cookie", "fileid", "file", "dev"}


def _nullable(t):
    ints = [c for c, v in t.cols.items() if c not in ("ts", "cpu", "pid") and v.dtype.kind in "iu"]
    out = Columns(t.cols, t.types)
    for c in ints:
        out[c] = out[c].astype(np.uint64 if c in UNSIGNED else np.int64).astype(object)
        out.types[c] = "UInt64" if c in UNSIGNED else "Int64"
    return out


def _concat(parts, exact=False):
    """One table from per-event tables, in time order. exact: integer fields stay integers
    where another event lacks them (nullable): a struct file pointer or a 64-bit cookie in a
    float64 column loses its low bits, and two open files become one."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    if exact:
        parts = [_nullable(p) for p in parts]
    return concat(parts).sorted_by("ts")


def _other_directories(trace, rpc, later, frames):
    """The READDIRs from the first source a trace has, and those of the directories it does
    not name from later sources that name directories: on the series' 5.10 nfs4:nfs4_readdir
    gives the NFSv4 READDIRs and the cache fill events give the same ones and NFSv3's too, so
    a trace of both mounts keeps each directory's READDIRs once, from its first source.
    Returns (table, the later events used)."""
    if "fileid" not in rpc or isna(rpc["fileid"]).all():
        return rpc, []

    def named(t):
        """Each row's (dev, fileid), None where it names no directory."""
        return [
            None if d != d or i != i or d is None or i is None else (int(d), int(i))
            for d, i in zip(t["dev"].tolist(), t["fileid"].tolist())
        ]

    have = set(named(rpc))
    parts, names = [rpc], []
    for uses in later:
        for u in uses:
            if "fileid" not in dict(u.fields):
                continue
            f = _frame(trace, u, frames)
            if not len(f):
                continue
            mine = [k is not None and k not in have for k in named(f)]
            if any(mine):
                parts.append(f[np.asarray(mine)])
                names.append(u.name)
        if names:
            break
    return (_concat(parts) if names else rpc), names


def _pair_directory(rpc, paired):
    """Give kprobe READDIRs the directory and error of the nfs4:nfs4_readdir event the same task
    logs after the RPC (before its next READDIR)."""
    if paired is None or not len(paired) or not len(rpc):
        return rpc
    ts, pid = rpc["ts"], rpc["pid"]
    # each READDIR's first event of its task at or after it, and the task's next READDIR
    match = np.full(len(rpc), -1, dtype=np.int64)
    ok = np.zeros(len(rpc), dtype=bool)
    pts = paired["ts"]
    # (not np.unique: numpy 2's imports numpy.ma, a tenth of check's time on a small trace)
    for p in set(pid.tolist()):
        mine = np.flatnonzero(pid == p)
        theirs = np.flatnonzero(paired["pid"] == p)
        theirs = theirs[np.argsort(pts[theirs], kind="stable")]
        k = np.searchsorted(pts[theirs], ts[mine], side="left")
        found = k < len(theirs)
        match[mine[found]] = theirs[k[found]]
        nxt = np.append(ts[mine][1:], np.iinfo(np.int64).max)
        ok[mine[found]] = pts[theirs[k[found]]] <= nxt[found]
    rows = np.flatnonzero(ok)
    rpc = Columns(rpc.cols, rpc.types)
    for c in ("dev", "fileid", "error"):
        col = rpc[c] if c in rpc else np.full(len(rpc), np.nan)
        col = col.astype(object)
        got = paired[c]
        if (match < 0).any() and got.dtype.kind in "iub":
            got = got.astype(np.float64)  # (as pandas' merge gives a column some rows lack)
        col[rows] = got[match[rows]]
        rpc[c] = col
    return rpc


def stream_sources(trace):
    """For a reader that takes events one at a time (watch): {event name: (table, Source,
    {canonical: raw field})} of the events load() reads the rpc, invalidations, calls,
    requests and latencies tables from. Each table comes from its first group the trace has
    (load() takes the first whose events fired, which a live reader cannot wait for); kprobe
    READDIRs add the event that names their directory, as table "rpc_directory". The
    reader's system calls join the calls, as in load(): where the opens come from kprobes, a
    getdents64's return is what says the reader reached the end of the directory (0) or read
    past its start."""
    out = {}
    for table, groups in (
        ("rpc", RPC_SOURCES),
        ("invalidations", INVALIDATION_SOURCES),
        ("calls", CALL_SOURCES),
    ):
        for group in groups:
            uses = _uses(trace, group)
            if uses:
                for u in uses:
                    out[u.name] = (table, u.src, dict(u.fields))
                break
    for u in _uses(trace, SYSCALL_SOURCES):
        out[u.name] = ("calls", u.src, dict(u.fields))
    if any(t == "rpc" and src.event.startswith("*:") for t, src, _ in out.values()):
        for u in _uses(trace, [PAIRED_DIRECTORY]):
            out.setdefault(u.name, ("rpc_directory", u.src, dict(u.fields)))
    # every RPC sent and, where recorded, its server time: what a listing's time went to
    # (model/roundtrips), read by a live reader as load() reads them
    for name, src in (("requests", REQUEST_SOURCE), ("latencies", LATENCY_SOURCE)):
        for u in _uses(trace, [src]):
            out.setdefault(u.name, (name, u.src, dict(u.fields)))
    return out


# The uncached mode's READDIR events (events.UNCACHED_READDIR), read beside an rpc table that
# came from other events ("uncached").
UNCACHED_SOURCES = [s for g in RPC_SOURCES for s in g if s.event in UNCACHED_READDIR]


@record
class Tables:
    """What load() read: the canonical tables and what they were made from."""

    # rpc, invalidations, revalidations, calls (always a table, columns.Columns, with
    # TABLE_COLUMNS' columns), ranges, markers, requests and latencies (None where the trace
    # has no such event), uncached (None where the trace recorded none of its events, or the
    # rpc table was read from them)
    frames: dict[str, Any]
    sources: dict[str, list[str]]  # per table, the events it was read from
    recorded: dict[str, list[str]]  # per table, the events the trace recorded, fired or not
    # The cookie a 5.18+ cache fill asks for is the reader's own position (the cache is indexed
    # by cookie), so a fill at cookie 0 means the reader was at the start.
    cookie_is_position: bool


@requires_events(wanted, applies=has_readdir_source)
def load(trace):
    """Read a trace into the canonical tables (a Tables)."""
    uses = _uses(trace, _all_sources())
    req = _request(uses)
    # A damaged or cut trace is read up to the damage: the reader says from when events may be
    # missing (info "partial", "partial_from"), and the listings from then on cannot decide.
    frames = (
        trace.read_columns({ev: sorted(cols) for ev, cols in req.items()}, on_damage="partial")
        if req
        else {}
    )
    trace.check_records()

    def frames_of(sources):
        return [u for u in uses if u.src in sources]

    tables: dict[str, Any] = {}
    used: dict[str, list[str]] = {}
    recorded: dict[str, list[str]] = {}
    for name, groups in (
        ("rpc", RPC_SOURCES),
        ("invalidations", INVALIDATION_SOURCES),
        ("calls", CALL_SOURCES),
    ):
        recorded[name] = [u.name for g in groups for u in frames_of(g)]
        tables[name], used[name] = None, []
        for k, group in enumerate(groups):
            gu = frames_of(group)
            df = _concat([_frame(trace, u, frames) for u in gu], exact=name == "calls")
            if df is not None or (gu and name == "calls"):
                tables[name], used[name] = df, [u.name for u in gu]
                if name == "rpc":
                    tables[name], more = _other_directories(
                        trace, df, [frames_of(g) for g in groups[k + 1 :]], frames
                    )
                    used[name] += more
                break
    if used["rpc"] and any(u.src.event.startswith("*:") for u in uses if u.name in used["rpc"]):
        paired = frames_of([PAIRED_DIRECTORY])
        if paired and tables["rpc"] is not None:
            pframe = _frame(trace, paired[0], frames)
            tables["rpc"] = _pair_directory(tables["rpc"], pframe)
            used["rpc_directory"] = [paired[0].name]
            unpaired = unpaired_readdirs(tables["rpc"], pframe, paired[0].name)
            if unpaired:
                trace.info["damaged_events"] = (
                    list(trace.info.get("damaged_events") or []) + unpaired
                )
    syscalls = frames_of(SYSCALL_SOURCES)
    if syscalls:
        tables["calls"] = _concat(
            [tables["calls"] if tables["calls"] is not None else Columns()]
            + [_frame(trace, u, frames) for u in syscalls],
            exact=True,
        )
        used["calls"] = used["calls"] + [u.name for u in syscalls]
        recorded["calls"] = recorded["calls"] + [u.name for u in syscalls]
    revals = frames_of(REVALIDATION_SOURCES)
    tables["revalidations"] = _concat([_frame(trace, u, frames) for u in revals])
    used["revalidations"] = recorded["revalidations"] = [u.name for u in revals]
    ranges = frames_of([RANGE_INVALIDATION])
    tables["ranges"] = _frame(trace, ranges[0], frames) if ranges else None
    marks = frames_of([MARKER_SOURCE])
    tables["markers"] = _frame(trace, marks[0], frames) if marks else None
    for name, src in (("requests", REQUEST_SOURCE), ("latencies", LATENCY_SOURCE)):
        found = frames_of([src])
        tables[name] = _frame(trace, found[0], frames) if found else None
    # The uncached mode's READDIR events where the rpc table came from others (the series on
    # 5.10 over NFSv4: nfs4:nfs4_readdir, nfs:nfs_readdir_uncached beside it): recorded and
    # none fired is evidence too (model/roundtrips counts a listing's).
    side = [u for u in frames_of(UNCACHED_SOURCES) if u.name not in used["rpc"]]
    tables["uncached"] = None
    if side:
        got = _concat([_frame(trace, u, frames) for u in side])
        empty = Columns({c: np.zeros(0) for c in ("ts", "pid", "fileid")})
        tables["uncached"] = got if got is not None else empty
    for name, cols in TABLE_COLUMNS.items():
        df = tables[name]
        if df is None:
            df = Columns({c: np.zeros(0) for c in ["ts", "pid", "cpu"]})
            df["comm"] = df["source"] = np.zeros(0, dtype=object)
        df = Columns(df.cols, df.types)
        for c in cols:
            if c not in df:
                df[c] = np.full(len(df), np.nan)
        tables[name] = df
    damaged = impossible_values(tables) + position_back(tables["calls"])
    if damaged:
        trace.info["damaged_events"] = list(trace.info.get("damaged_events") or []) + damaged
    return Tables(tables, used, recorded, _cookie_is_position(trace, uses, used["rpc"]))


def _cookie_is_position(trace, uses, rpc):
    """Tables.cookie_is_position, from the events the READDIRs came from."""
    return any(
        u.name in rpc
        and u.src.event in NFS_READDIR_CACHE_EVENTS
        and "index" in trace.event_format(u.name).user_fields()
        for u in uses
    )
