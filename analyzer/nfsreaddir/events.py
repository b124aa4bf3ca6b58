"""The one place that knows each kernel's event names and fields.

Every analysis works on canonical tables; this module says, per kernel generation, which trace
events fill them and how their fields map:

    rpc            a READDIR/READDIRPLUS sent: ts, pid, comm, dev, fileid, cookie, dtsize, plus
    invalidations  the directory's page cache thrown away: ts, pid, dev, fileid, reason
    revalidations  attribute checks that can lead to one: ts, pid, dev, fileid, step
    calls          getdents, opendir, closedir, llseek: ts, pid, dev, fileid, call, pos, cookie,
                   old_pos
                   (only kernels with this project's series)
    markers        the reproducer's trace_marker lines: ts, pid, text

Sources of a table come in groups, best group first; a trace uses the first group it has events
of, so a READDIR is never counted twice from two events describing the same RPC.
"""

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Source:
    event: str                      # system:name
    fields: dict                    # canonical column -> raw field name
    constants: dict = field(default_factory=dict)   # canonical column -> fixed value
    where: tuple = ()               # (raw field, allowed values): rows to keep
    kernels: str = ""               # which kernels have it, for messages


# The READDIR cookie kprobe the reproducer adds on 5.0-5.10 (see reproducers/readdir-loopback).
KPROBE_SYSTEM = "nfsprobe"

RPC_SOURCES = [
    # This project's 5.10 series: one event per READDIR reply with the cookie asked for.
    (Source("nfs4:nfs4_readdir", {"dev": "dev", "fileid": "fileid", "cookie": "cookie",
                                 "dtsize": "count", "plus": "plus"},
           kernels="5.10 with kernel-patches/v5.10"),),
    # 5.18 and later, and 5.10 with this project's series over NFSv3: the page cache fill and
    # the uncached read, each one READDIR.
    (Source("nfs:nfs_readdir_cache_fill", {"dev": "dev", "fileid": "fileid", "cookie": "cookie",
                                          "dtsize": "dtsize"}, kernels="5.18+ (6.1, 6.12)"),
    Source("nfs:nfs_readdir_uncached", {"dev": "dev", "fileid": "fileid", "cookie": "cookie",
                                        "dtsize": "dtsize"}, kernels="5.18+ (6.1, 6.12)")),
    # Stock 5.0-5.10: the kprobe on nfs{4,3}_proc_readdir, with the cookie but not the directory.
    (Source(f"{KPROBE_SYSTEM}:nfs4_proc_readdir", {"cookie": "cookie", "dtsize": "count",
                                                  "plus": "plus"}, kernels="5.0-5.10 (kprobe)"),
    Source(f"{KPROBE_SYSTEM}:nfs3_proc_readdir", {"cookie": "cookie", "dtsize": "count",
                                                  "plus": "plus"}, kernels="5.0-5.10 (kprobe)")),
    # Any kernel: the RPC itself, counted but with no cookie and no directory.
    (Source("sunrpc:rpc_request", {}, where=("procname", ("READDIR", "READDIRPLUS")),
            kernels="any"),),
]

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
           constants={"step": "revalidate_done"}),
    Source("nfs:nfs_getattr_enter", {"dev": "dev", "fileid": "fileid"},
           constants={"step": "getattr"}),
    Source("nfs:nfs_set_cache_invalid", {"dev": "dev", "fileid": "fileid",
                                         "cache_validity": "cache_validity"},
           constants={"step": "set_cache_invalid"}),
    Source("sunrpc:rpc_request", {}, constants={"step": "GETATTR"},
           where=("procname", ("GETATTR",))),
]

# What the reader asked for: getdents, opendir, closedir and seeks on the directory. Only
# this project's 5.10 series has them; they delimit listings and tell a rewind from a restart.
CALL_SOURCES = [
    Source(f"nfs:nfs_{event}", {"dev": "dev", "fileid": "fileid", **extra},
           constants={"call": call}, kernels="5.10 with kernel-patches/v5.10")
    for event, call, extra in (
        ("readdir_enter", "getdents", {"pos": "pos", "cookie": "cookie"}),
        ("opendir", "opendir", {}),
        ("closedir", "closedir", {"pos": "pos", "cookie": "cookie"}),
        ("llseek_dir", "llseek", {"pos": "pos", "cookie": "cookie", "old_pos": "old_pos"}),
    )
]

MARKER_SOURCE = Source("ftrace:print", {"text": "buf"})

# NFS_INO_INVALID_DATA in nfs_inode cache_validity (include/linux/nfs_fs.h, 5.10 to 6.12).
NFS_INO_INVALID_DATA = 1 << 1

# What to record, for messages that name a missing event.
RECORD_HINT = {
    "rpc": "-e sunrpc:rpc_request -e nfs4:nfs4_readdir -e 'nfs:nfs_readdir_*'",
    "invalidations": "-e nfs:nfs_invalidate_mapping_enter -e 'nfs:nfs_readdir_*'",
    "revalidations": "-e 'nfs:nfs_revalidate_inode_*' -e nfs:nfs_getattr_enter",
}


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


def _frame(trace, src, frames):
    """The canonical columns of one source's frame (already read)."""
    raw = frames[src.event]
    if src.where:
        col, allowed = src.where
        raw = raw[raw[col].isin(allowed)]
    out = pd.DataFrame({"ts": raw["ts"].to_numpy(), "pid": raw["pid"].to_numpy(),
                        "comm": raw["comm"].to_numpy(), "cpu": raw["cpu"].to_numpy()})
    for canon, rawname in src.fields.items():
        out[canon] = raw[rawname].to_numpy()
        if canon == "reason":
            names = symbols(trace.event_format(src.event), rawname)
            out[canon] = [names.get(v, v) if isinstance(v, (int, np.integer)) else v
                          for v in out[canon]]
    for canon, value in src.constants.items():
        out[canon] = value
    out["source"] = src.event
    return out


def _has_fields(trace, src):
    fmt = trace.event_format(src.event)
    need = set(src.fields.values()) | ({src.where[0]} if src.where else set())
    return fmt is not None and need <= set(fmt.user_fields())


def _wanted(usable):
    """{event: fields} of sources the trace has the fields of."""
    wanted = {}
    for s in usable:
        cols = set(s.fields.values()) | ({s.where[0]} if s.where else set())
        wanted.setdefault(s.event, set()).update(cols)
    return wanted


def _read(trace, sources):
    usable = [s for s in sources if _has_fields(trace, s)]
    wanted = _wanted(usable)
    frames = trace.read({ev: sorted(cols) for ev, cols in wanted.items()}) if wanted else {}
    return usable, frames


def has_readdir_source(trace):
    """Whether the trace has the format of any event READDIRs are counted from (without
    one, the readdir analysis has nothing to read)."""
    return any(_has_fields(trace, s) for g in RPC_SOURCES for s in g)


def wanted(trace):
    """{event: fields} of everything load() reads from this trace (for trace.OnePass)."""
    sources = ([s for g in RPC_SOURCES + INVALIDATION_SOURCES for s in g]
               + REVALIDATION_SOURCES + CALL_SOURCES + [RANGE_INVALIDATION, MARKER_SOURCE])
    return _wanted([s for s in sources if _has_fields(trace, s)])


def _first_group(trace, groups):
    """The events of the first group (best first) that has any, and that group."""
    usable, frames = _read(trace, [s for g in groups for s in g])
    for group in groups:
        parts = [_frame(trace, s, frames) for s in group if s in usable]
        if any(len(p) for p in parts):
            df = pd.concat(parts, ignore_index=True).sort_values("ts", kind="stable")
            return df, group
    return None, None


def load(trace):
    """Read a trace into the canonical tables. Returns a dict of DataFrames plus 'sources'."""
    columns = {"rpc": ["dev", "fileid", "cookie", "dtsize", "plus"],
               "invalidations": ["dev", "fileid", "reason"],
               "revalidations": ["dev", "fileid", "step", "cache_validity"],
               "calls": ["dev", "fileid", "call", "pos", "cookie", "old_pos"]}
    tables, used = {}, {}
    tables["rpc"], used["rpc"] = _first_group(trace, RPC_SOURCES)
    tables["invalidations"], used["invalidations"] = _first_group(trace, INVALIDATION_SOURCES)
    usable, frames = _read(trace, REVALIDATION_SOURCES + CALL_SOURCES
                           + [RANGE_INVALIDATION, MARKER_SOURCE])
    for name, sources in (("revalidations", REVALIDATION_SOURCES), ("calls", CALL_SOURCES)):
        parts = [_frame(trace, s, frames) for s in usable if s in sources]
        tables[name] = (pd.concat(parts, ignore_index=True).sort_values("ts", kind="stable")
                        if parts else None)
        used[name] = [s for s in usable if s in sources]
    tables["ranges"] = _frame(trace, RANGE_INVALIDATION, frames) if RANGE_INVALIDATION in usable else None
    tables["markers"] = _frame(trace, MARKER_SOURCE, frames) if MARKER_SOURCE in usable else None
    for name, cols in columns.items():
        df = tables[name]
        if df is None:
            df = pd.DataFrame({c: pd.Series(dtype="float64") for c in
                               ["ts", "pid", "cpu"] + cols})
            df["comm"] = pd.Series(dtype="object")
            df["source"] = pd.Series(dtype="object")
        for c in cols:
            if c not in df:
                df[c] = np.nan
        tables[name] = df.reset_index(drop=True)
    tables["sources"] = used
    return tables
