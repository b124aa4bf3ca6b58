"""The one place that knows each kernel's event names and fields.

Every analysis works on canonical tables; this module says, per kernel generation, which trace
events fill them and how their fields map:

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

Sources of a table come in groups, best group first; a trace uses the first group it recorded,
so a READDIR is never counted twice from two events describing the same RPC. A kprobe is
recognised by its function name under any group name (`*:nfs4_proc_readdir`), since users name
their own kprobe groups.
"""

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Source:
    event: str                      # system:name; "*:name" matches a kprobe of any group
    fields: dict                    # canonical column -> raw field name
    constants: dict = field(default_factory=dict)   # canonical column -> fixed value
    where: tuple = ()               # (raw field, allowed values): rows to keep
    kernels: str = ""               # which kernels have it, for messages
    optional: tuple = ()            # canonical columns filled only when the event has them


# The group the reproducers and `nfs-readdir record` give their kprobes; any other is read too.
KPROBE_SYSTEM = "nfsprobe"

# The READDIR cookie kprobes of 5.0-5.10 (x86-64: nfs{4,3}_proc_readdir(dentry, cred, cookie,
# pages, count, plus) -> cookie in %dx, count in %r8, plus in %r9).
COOKIE_KPROBES = {
    "nfs4_proc_readdir": "cookie=%dx:u64 count=%r8:u32 plus=%r9:u8",
    "nfs3_proc_readdir": "cookie=%dx:u64 count=%r8:u32 plus=%r9:u8",
}
# What the reader did, on kernels without the series' events: the open file and its position
# (nfs_opendir/nfs_closedir(inode, file), nfs_readdir(file, ctx) with ctx->pos after the actor).
OPEN_KPROBES = {
    "nfs_opendir": "file=%si:x64",
    "nfs_closedir": "file=%si:x64",
    "nfs_readdir": "file=%di:x64 pos=+8(%si):s64",
}

RPC_SOURCES = [
    # This project's 5.10 series: one event per READDIR reply with the cookie asked for.
    (Source("nfs4:nfs4_readdir", {"dev": "dev", "fileid": "fileid", "cookie": "cookie",
                                 "dtsize": "count", "plus": "plus"},
            optional=("error",), kernels="5.10 with kernel-patches/v5.10"),),
    # 5.18 and later, and 5.10 with this project's series over NFSv3: the page cache fill and
    # the uncached read, each one READDIR.
    (Source("nfs:nfs_readdir_cache_fill", {"dev": "dev", "fileid": "fileid", "cookie": "cookie",
                                          "dtsize": "dtsize"}, optional=("version", "error"),
            kernels="5.18+ (6.1, 6.12)"),
     Source("nfs:nfs_readdir_uncached", {"dev": "dev", "fileid": "fileid", "cookie": "cookie",
                                         "dtsize": "dtsize"}, optional=("version", "error"),
            kernels="5.18+ (6.1, 6.12)")),
    # Stock 5.0-5.10: the kprobe on nfs{4,3}_proc_readdir, with the cookie but not the
    # directory (NFSv4 gets it from nfs4:nfs4_readdir, see PAIRED_DIRECTORY).
    tuple(Source(f"*:{fn}", {"cookie": "cookie"}, optional=("dtsize", "plus"),
                 kernels="5.0-5.10 (kprobe)") for fn in COOKIE_KPROBES),
    # Any kernel: the RPC itself, counted but with no cookie and no directory.
    (Source("sunrpc:rpc_request", {}, where=("procname", ("READDIR", "READDIRPLUS")),
            kernels="any"),),
]
# Optional columns and the raw fields they come from, where the name differs.
OPTIONAL_FIELDS = {"dtsize": ("count", "dtsize"), "plus": ("plus",), "version": ("version",),
                   "error": ("error",)}

# Stock 5.10's nfs4:nfs4_readdir (no cookie) follows each NFSv4 READDIR of the same task: it
# names the directory and the error of the RPC the cookie kprobe saw.
PAIRED_DIRECTORY = Source("nfs4:nfs4_readdir", {"dev": "dev", "fileid": "fileid",
                                               "error": "error"}, kernels="any")

# A READDIR error that means the reader was interrupted by a signal (ERESTARTSYS): killed.
ERESTARTSYS = 512
KILLED_ERRORS = {ERESTARTSYS, 4}        # ERESTARTSYS, EINTR

INVALIDATION_SOURCES = [
    (Source("nfs:nfs_readdir_invalidate_cache", {"dev": "dev", "fileid": "fileid",
                                                  "reason": "reason"},
            kernels="5.10 with kernel-patches/v5.10"),),
    (Source("nfs:nfs_invalidate_mapping_enter", {"dev": "dev", "fileid": "fileid"},
            constants={"reason": "invalidate_mapping"}, kernels="any"),),
]

# 5.18+ trims the readdir page cache instead of dropping it; recorded beside the drops.
RANGE_INVALIDATION = Source("nfs:nfs_readdir_invalidate_cache_range",
                            {"dev": "dev", "fileid": "fileid", "start": "range_start",
                             "end": "range_end"}, kernels="5.18+")

REVALIDATION_SOURCES = [
    Source("nfs:nfs_revalidate_inode_enter", {"dev": "dev", "fileid": "fileid"},
           constants={"step": "revalidate"}),
    Source("nfs:nfs_revalidate_inode_exit", {"dev": "dev", "fileid": "fileid",
                                             "cache_validity": "cache_validity"},
           optional=("version",), constants={"step": "revalidate_done"}),
    Source("nfs:nfs_getattr_enter", {"dev": "dev", "fileid": "fileid"},
           constants={"step": "getattr"}),
    Source("nfs:nfs_set_cache_invalid", {"dev": "dev", "fileid": "fileid",
                                         "cache_validity": "cache_validity"},
           constants={"step": "set_cache_invalid"}),
    Source("sunrpc:rpc_request", {}, constants={"step": "GETATTR"},
           where=("procname", ("GETATTR",))),
]

# What the reader asked for, best group first: this project's 5.10 series, or the kprobes of
# OPEN_KPROBES on any other kernel. They delimit listings (one per open) and give the reader's
# position, which tells a rewind or a new listing from a restart.
CALL_SOURCES = [
    tuple(Source(f"nfs:nfs_{event}", {"dev": "dev", "fileid": "fileid", **extra},
                 constants={"call": call}, kernels="5.10 with kernel-patches/v5.10")
          for event, call, extra in (
              ("readdir_enter", "getdents", {"pos": "pos", "cookie": "cookie"}),
              ("readdir_exit", "getdents_done", {"pos": "pos", "eof": "eof",
                                                 "error": "error"}),
              ("opendir", "opendir", {}),
              ("closedir", "closedir", {"pos": "pos", "cookie": "cookie"}),
              ("llseek_dir", "llseek", {"pos": "pos", "cookie": "cookie",
                                        "old_pos": "old_pos"}),
          )),
    (Source("*:nfs_opendir", {"file": "file"}, constants={"call": "opendir"},
            kernels="any (kprobe)"),
     Source("*:nfs_closedir", {"file": "file"}, constants={"call": "closedir"},
            kernels="any (kprobe)"),
     Source("*:nfs_readdir", {"file": "file", "pos": "pos"}, constants={"call": "getdents"},
            kernels="any (kprobe)")),
]
# The reader's system calls, on any kernel with syscall events: how each getdents64 returned
# (0 at the end of the directory) and the seeks that rewind it.
SYSCALL_SOURCES = [
    Source("syscalls:sys_enter_getdents64", {"fd": "fd"}, constants={"call": "sys_getdents"},
           kernels="any"),
    Source("syscalls:sys_exit_getdents64", {"ret": "ret"}, constants={"call": "sys_getdents_ret"},
           kernels="any"),
    Source("syscalls:sys_enter_lseek", {"fd": "fd", "pos": "offset", "whence": "whence"},
           constants={"call": "sys_lseek"}, kernels="any"),
]

MARKER_SOURCE = Source("ftrace:print", {"text": "buf"})

# NFS_INO_INVALID_DATA in nfs_inode cache_validity (include/linux/nfs_fs.h, 5.10 to 6.12).
NFS_INO_INVALID_DATA = 1 << 1

TABLE_COLUMNS = {
    "rpc": ["dev", "fileid", "cookie", "dtsize", "plus", "version", "error"],
    "invalidations": ["dev", "fileid", "reason"],
    "revalidations": ["dev", "fileid", "step", "cache_validity", "version"],
    "calls": ["dev", "fileid", "call", "file", "fd", "pos", "cookie", "old_pos", "ret", "eof",
              "error", "whence"],
}


def release(text):
    """The kernel release in a release string or a trace's uname line, or None."""
    words = str(text or "").split()
    if len(words) >= 3 and words[0] == "Linux":
        return words[2]
    return words[0] if words else None


def kernel_generation(kernel):
    """(5, 10) from a release ('5.10.0-46-amd64') or a trace's uname line ('Linux HOST 5.10.0-46
    -amd64 x86_64'); None when it says nothing."""
    m = re.match(r"^(\d+)\.(\d+)", release(kernel) or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def record_advice(kernel, missing):
    """What to record for the missing tables ("rpc", "invalidations", "calls"), naming only
    events the trace's kernel has (by its release; unknown: the events of every kernel)."""
    gen = kernel_generation(kernel)
    out = []
    if "rpc" in missing or "calls" in missing:
        if gen is None or gen >= (5, 18):
            out.append("-e 'nfs:nfs_readdir_*'")
        if gen is None or gen < (5, 18):
            probes = "; ".join(f"p:{KPROBE_SYSTEM}/{fn} {fn} {args}"
                               for fn, args in {**COOKIE_KPROBES, **OPEN_KPROBES}.items())
            out.append(f"kprobes ({probes}) with -e '{KPROBE_SYSTEM}:*'"
                       + (" (x86-64 registers; 5.0-5.10)" if gen is None else ""))
        out.append("-e syscalls:sys_enter_getdents64 -e syscalls:sys_exit_getdents64")
    if "invalidations" in missing:
        out.append("-e nfs:nfs_invalidate_mapping_enter -e 'nfs:nfs_revalidate_inode_*'")
    return "trace-cmd record " + " ".join(out)


def symbols(fmt, field_name):
    """The value -> name table of a field printed with __print_symbolic, from the event's
    print format (the kernel's own names, e.g. a drop reason), or {}."""
    text = getattr(fmt, "print_fmt", "") or ""
    m = re.search(r"__print_symbolic\(REC->" + re.escape(field_name) + r"\s*,(.*?)\)\s*(?:,|$)",
                  text)
    if not m:
        return {}
    return {int(v, 0): name for v, name in
            re.findall(r'\{\s*(-?(?:0x[0-9a-fA-F]+|\d+))\s*,\s*"([^"]*)"\s*\}', m.group(1))}


def _names(trace, src):
    """The trace's event names a source stands for: itself, or for "*:fn" every kprobe named
    fn whatever its group (text input has no group: the bare name)."""
    if not src.event.startswith("*:"):
        return [src.event]
    bare = src.event[2:]
    return sorted(n for n in trace.event_names() if n.replace("/", ":").rsplit(":", 1)[-1] == bare)


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


@dataclass(frozen=True)
class _Use:
    """One event of the trace standing for a source, with the fields it has."""
    src: Source
    name: str
    fields: tuple       # ((canonical, raw), ...)


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
    wanted = {}
    for u in uses:
        cols = {raw for _, raw in u.fields} | ({u.src.where[0]} if u.src.where else set())
        wanted.setdefault(u.name, set()).update(cols)
    return wanted


def _frame(trace, use, frames):
    """The canonical columns of one use's frame (already read)."""
    raw = frames[use.name]
    if use.src.where:
        col, allowed = use.src.where
        raw = raw[raw[col].isin(allowed)]
    out = pd.DataFrame({"ts": raw["ts"].to_numpy(), "pid": raw["pid"].to_numpy(),
                        "comm": raw["comm"].to_numpy(), "cpu": raw["cpu"].to_numpy()})
    for canon, rawname in use.fields:
        out[canon] = raw[rawname].to_numpy()
        if canon == "reason":
            names = symbols(trace.event_format(use.name), rawname)
            out[canon] = [names.get(v, v) if isinstance(v, (int, np.integer)) else v
                          for v in out[canon]]
    for canon, value in use.src.constants.items():
        out[canon] = value
    out["source"] = use.name
    return out


def _all_sources():
    return ([s for g in RPC_SOURCES + INVALIDATION_SOURCES + CALL_SOURCES for s in g]
            + REVALIDATION_SOURCES + SYSCALL_SOURCES
            + [PAIRED_DIRECTORY, RANGE_INVALIDATION, MARKER_SOURCE])


def has_readdir_source(trace):
    """Whether the trace recorded any event READDIRs are counted from (without one, the readdir
    analysis has nothing to read)."""
    return bool(_uses(trace, [s for g in RPC_SOURCES for s in g]))


def wanted(trace):
    """{event: fields} of everything load() reads from this trace (for trace.OnePass)."""
    return _request(_uses(trace, _all_sources()))


def _concat(parts):
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    return pd.concat(parts, ignore_index=True).sort_values("ts", kind="stable")


def _pair_directory(rpc, paired):
    """Give kprobe READDIRs the directory and error of the nfs4:nfs4_readdir event the same task
    logs after the RPC (before its next READDIR)."""
    if paired is None or not len(paired) or not len(rpc):
        return rpc
    rpc = rpc.reset_index(drop=True)
    nxt = rpc.groupby("pid")["ts"].shift(-1)
    left = rpc[["ts", "pid"]].assign(_row=np.arange(len(rpc)), _next=nxt.to_numpy())
    right = paired[["ts", "pid", "dev", "fileid", "error"]].rename(columns={"ts": "_pts"})
    m = pd.merge_asof(left.sort_values("ts"), right.sort_values("_pts"), left_on="ts",
                      right_on="_pts", by="pid", direction="forward")
    ok = m["_pts"].notna() & (m["_next"].isna() | (m["_pts"] <= m["_next"]))
    m = m[ok]
    for c in ("dev", "fileid", "error"):
        if c not in rpc:
            rpc[c] = np.nan
        rpc[c] = rpc[c].astype("object")
        rpc.loc[m["_row"].to_numpy(), c] = m[c].to_numpy()
    return rpc


def load(trace):
    """Read a trace into the canonical tables. Returns a dict of DataFrames plus 'sources' (per
    table, the events it was read from) and 'recorded' (per table, the events the trace recorded
    whether or not they fired)."""
    uses = _uses(trace, _all_sources())
    req = _request(uses)
    frames = trace.read({ev: sorted(cols) for ev, cols in req.items()}) if req else {}

    def frames_of(sources):
        return [u for u in uses if u.src in sources]

    tables, used, recorded = {}, {}, {}
    for name, groups in (("rpc", RPC_SOURCES), ("invalidations", INVALIDATION_SOURCES),
                         ("calls", CALL_SOURCES)):
        recorded[name] = [u.name for g in groups for u in frames_of(g)]
        tables[name], used[name] = None, []
        for group in groups:
            gu = frames_of(group)
            df = _concat([_frame(trace, u, frames) for u in gu])
            if df is not None or (gu and name == "calls"):
                tables[name], used[name] = df, [u.name for u in gu]
                break
    if used["rpc"] and any(u.src.event.startswith("*:") for u in uses if u.name in used["rpc"]):
        paired = frames_of([PAIRED_DIRECTORY])
        if paired and tables["rpc"] is not None:
            tables["rpc"] = _pair_directory(tables["rpc"], _frame(trace, paired[0], frames))
            used["rpc_directory"] = [paired[0].name]
    syscalls = frames_of(SYSCALL_SOURCES)
    if syscalls:
        tables["calls"] = _concat([tables["calls"] if tables["calls"] is not None
                                   else pd.DataFrame()]
                                  + [_frame(trace, u, frames) for u in syscalls])
        used["calls"] = used["calls"] + [u.name for u in syscalls]
        recorded["calls"] = recorded["calls"] + [u.name for u in syscalls]
    revals = frames_of(REVALIDATION_SOURCES)
    tables["revalidations"] = _concat([_frame(trace, u, frames) for u in revals])
    used["revalidations"] = recorded["revalidations"] = [u.name for u in revals]
    ranges = frames_of([RANGE_INVALIDATION])
    tables["ranges"] = _frame(trace, ranges[0], frames) if ranges else None
    marks = frames_of([MARKER_SOURCE])
    tables["markers"] = _frame(trace, marks[0], frames) if marks else None
    for name, cols in TABLE_COLUMNS.items():
        df = tables[name]
        if df is None:
            df = pd.DataFrame({c: pd.Series(dtype="float64") for c in ["ts", "pid", "cpu"]})
            df["comm"] = pd.Series(dtype="object")
            df["source"] = pd.Series(dtype="object")
        for c in cols:
            if c not in df:
                df[c] = np.nan
        tables[name] = df.reset_index(drop=True)
    tables["sources"] = used
    tables["recorded"] = recorded
    # The cookie a 5.18+ cache fill asks for is the reader's own position (the cache is indexed
    # by cookie), so a fill at cookie 0 means the reader was at the start.
    tables["cookie_is_position"] = any(
        u.name in used["rpc"] and u.src.event.startswith("nfs:nfs_readdir_")
        and "index" in trace.event_format(u.name).user_fields() for u in uses)
    return tables
