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

import os
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

@dataclass(frozen=True)
class Arg:
    """One value a kprobe fetches: the function's argument `argno` (1-based, C order), or the
    `type` value at `offset` bytes into what that argument points to; `btf` is the same by the
    parameter's name, for kernels whose probes read BTF (`ctx->pos`)."""
    name: str
    argno: int
    type: str
    offset: int | None = None
    btf: str = ""


@dataclass(frozen=True)
class ProbeSpec:
    """A function to probe where no tracepoint carries what a table needs, and the kernels
    whose signature the arguments were read from (inclusive; None: open-ended)."""
    function: str
    args: tuple
    since: tuple | None = None
    until: tuple | None = None

    def fits(self, gen):
        """Whether the signature holds for kernel generation gen (None: not known)."""
        if gen is None:
            return self.since is None and self.until is None
        return ((self.since is None or gen >= self.since)
                and (self.until is None or gen <= self.until))


# The READDIR cookie of stock 5.0-5.10: nfs{4,3}_proc_readdir(struct dentry *dentry,
# const struct cred *cred, u64 cookie, struct page **pages, unsigned int count, bool plus).
# 5.11 passes a struct nfs_readdir_arg instead, and 5.18 adds tracepoints with the cookie.
_PROC_READDIR_ARGS = (Arg("cookie", 3, "u64"), Arg("count", 5, "u32"), Arg("plus", 6, "u8"))
COOKIE_KPROBES = {fn: ProbeSpec(fn, _PROC_READDIR_ARGS, since=(5, 0), until=(5, 10))
                  for fn in ("nfs4_proc_readdir", "nfs3_proc_readdir")}
# What the reader did, on kernels without the series' events: the open file and its position.
# nfs_opendir/nfs_closedir(struct inode *inode, struct file *filp) and nfs_readdir(struct file
# *file, struct dir_context *ctx), whose ctx->pos follows the actor pointer (offset 8 on 64-bit)
# from 3.11 to 7.3.
OPEN_KPROBES = {
    "nfs_opendir": ProbeSpec("nfs_opendir", (Arg("file", 2, "x64", btf="filp"),)),
    "nfs_closedir": ProbeSpec("nfs_closedir", (Arg("file", 2, "x64", btf="filp"),)),
    "nfs_readdir": ProbeSpec("nfs_readdir", (Arg("file", 1, "x64", btf="file"),
                                             Arg("pos", 2, "s64", offset=8, btf="ctx->pos"))),
}
# The kernel's calling convention: the registers of the first arguments, per `uname -m`.
ARG_REGISTERS = {
    "x86_64": ("di", "si", "dx", "cx", "r8", "r9"),
    "aarch64": ("x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"),
}
# How a kprobe names an argument, best first: by BTF name (tracefs README shows
# "<argname>", 6.5+ with CONFIG_PROBE_EVENTS_BTF_ARGS), as $argN (README shows "$arg<N>":
# CONFIG_HAVE_FUNCTION_ARG_ACCESS_API, x86-64 since 4.20, arm64 since 5.0), or by register.
ARG_FORMS = ("btf", "argn", "register")


def fetch_arg(arg, form, machine):
    """The kprobe fetch text of one Arg in one form, e.g. "pos=+8(%si):s64"."""
    if form == "btf":
        return f"{arg.name}={arg.btf}:{arg.type}"
    if form == "argn":
        base = f"$arg{arg.argno}"
    else:
        regs = ARG_REGISTERS.get(machine)
        if regs is None or arg.argno > len(regs):
            raise KeyError(machine)
        base = f"%{regs[arg.argno - 1]}"
    return f"{arg.name}={f'+{arg.offset}({base})' if arg.offset is not None else base}:{arg.type}"


def kprobe_definition(spec, form, machine, group=None):
    """The kprobe_events line of a ProbeSpec, e.g. "p:nfsprobe/nfs_readdir nfs_readdir ..."."""
    args = " ".join(fetch_arg(a, form, machine) for a in spec.args)
    return f"p:{group or KPROBE_SYSTEM}/{spec.function} {spec.function} {args}"


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

# The slab analysis (slab.py): allocations and frees, and per event the fields it reads.
SLAB_ALLOC = ("kmem:kmem_cache_alloc", "kmem:kmem_cache_alloc_node", "kmem:kmalloc",
              "kmem:kmalloc_node")
SLAB_FREE = ("kmem:kmem_cache_free", "kmem:kfree")
SLAB_EVENTS = {
    "kmem:kmem_cache_alloc": ["ptr", "bytes_alloc", "name"],
    "kmem:kmem_cache_alloc_node": ["ptr", "bytes_alloc", "name"],
    "kmem:kmalloc": ["ptr", "bytes_alloc"],
    "kmem:kmalloc_node": ["ptr", "bytes_alloc"],
    "kmem:kmem_cache_free": ["ptr", "name"],
    "kmem:kfree": ["ptr"],
}

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


def searches_from_first_page(kernel):
    """Whether the kernel looks for the reader's cookie from the first page of the directory's
    page cache: True before 5.18 (728dd0ab3742 ended it), False from 5.18 on, None when the
    trace does not say which kernel. Where it does, and another reader of the directory has
    filled the first pages again after an invalidation, the search reads them and asks the
    server from where they end: a READDIR below the reader's position, a restart with no
    cookie-0 READDIR. From 5.18 the cache is indexed by cookie and a fill starts at the page
    that holds the position, whose first cookie lies below it by design."""
    gen = kernel_generation(kernel)
    return None if gen is None else gen < (5, 18)


def record_advice(kernel, missing):
    """What to record for the missing tables ("rpc", "invalidations", "calls", "slab"):
    `nfs-readdir record`, which asks the running kernel, then the trace-cmd equivalent naming
    only events the trace's kernel has (by its release; unknown: the events of every kernel)."""
    gen = kernel_generation(kernel)
    out = []
    if "rpc" in missing or "calls" in missing:
        if gen is None or gen >= (5, 18):
            out.append("-e 'nfs:nfs_readdir_*'")
        # Before 5.18 the kprobes give the cookie and the reader's position; on later kernels
        # the tracepoints have the cookie, and the open kprobes only delimit listings.
        old = gen is None or gen < (5, 18)
        probes = ([s for s in COOKIE_KPROBES.values() if old]
                  + [s for s in OPEN_KPROBES.values() if old or "calls" in missing])
        if probes:
            defs = "; ".join(kprobe_definition(s, "register", "x86_64") for s in probes)
            out.append(f"kprobes ({defs}) with -e '{KPROBE_SYSTEM}:*'"
                       + (" (x86-64 registers; the cookie probes fit 5.0-5.10)"
                          if gen is None else " (x86-64 registers)"))
        out.append("-e syscalls:sys_enter_getdents64 -e syscalls:sys_exit_getdents64")
    if "invalidations" in missing:
        out.append("-e nfs:nfs_invalidate_mapping_enter -e 'nfs:nfs_revalidate_inode_*'")
    if "slab" in missing:
        out.append(" ".join(f"-e {ev}" for ev in ("kmem:kmem_cache_alloc", "kmem:kmem_cache_free",
                                                  "kmem:kmalloc", "kmem:kfree")))
    only_slab = missing == {"slab"}
    return (f"nfs-readdir record{' --slab' if 'slab' in missing else ''} -o trace.dat -- "
            "COMMAND" + ("" if only_slab else " (it picks the events and kprobes of the "
                         "running kernel)") + ", or trace-cmd record " + " ".join(out))


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


# The canonical fields that are unsigned 64-bit wherever they come from; every other integer
# field is signed (a position is a loff_t, a return a long), so that one column has one type
# whichever event a row came from (numpy's casts wrap, as the kernel's do).
UNSIGNED = {"cookie", "fileid", "file", "dev"}


def _nullable(df):
    ints = [c for c in df.columns if c not in ("ts", "cpu", "pid")
            and isinstance(df[c].dtype, np.dtype) and df[c].dtype.kind in "iu"]
    wrapped = df.astype({c: "uint64" if c in UNSIGNED else "int64" for c in ints})
    return wrapped.astype({c: "UInt64" if c in UNSIGNED else "Int64" for c in ints})


def _concat(parts, exact=False):
    """One table from per-event frames, in time order. exact: integer fields stay integers
    where another event lacks them (pandas' nullable types): a struct file pointer or a 64-bit
    cookie in a float64 column loses its low bits, and two open files become one."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    if exact:
        parts = [_nullable(p) for p in parts]
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


def stream_sources(trace):
    """For a reader that takes events one at a time (watch): {event name: (table, Source,
    {canonical: raw field})} of the events load() reads the rpc, invalidations and calls
    tables from. Each table comes from its first group the trace has (load() takes the first
    whose events fired, which a live reader cannot wait for); kprobe READDIRs add the event
    that names their directory, as table "rpc_directory". The reader's system calls are left
    out: they matter only where no open is seen."""
    out = {}
    for table, groups in (("rpc", RPC_SOURCES), ("invalidations", INVALIDATION_SOURCES),
                          ("calls", CALL_SOURCES)):
        for group in groups:
            uses = _uses(trace, group)
            if uses:
                for u in uses:
                    out[u.name] = (table, u.src, dict(u.fields))
                break
    if any(t == "rpc" and src.event.startswith("*:") for t, src, _ in out.values()):
        for u in _uses(trace, [PAIRED_DIRECTORY]):
            out.setdefault(u.name, ("rpc_directory", u.src, dict(u.fields)))
    return out


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
            df = _concat([_frame(trace, u, frames) for u in gu], exact=name == "calls")
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
                                  + [_frame(trace, u, frames) for u in syscalls], exact=True)
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


# ------------------------------------------------------------------------- the running kernel
# Recorded beside the tables' events, read by no table: they end the steps the tables start
# (a READDIR's reply, the end of an invalidation or a GETATTR) or show the steps between (the
# series' page-cache search and buffer fill), for a person reading `trace-cmd report`; they are
# what the reproducers have always recorded.
CONTEXT_EVENTS = ("nfs:nfs_readdir_cache_fill_done", "nfs:nfs_readdir_uncached_done",
                  "nfs:nfs_readdir_force_readdirplus", "nfs:nfs_readdir_search_cookie",
                  "nfs:nfs_readdir_search_pos", "nfs:nfs_readdir_filldir",
                  "nfs:nfs_invalidate_mapping_exit", "nfs:nfs_getattr_exit",
                  "nfs:nfs_fsync_dir", "nfs4:nfs4_getattr")
# --dcache: the names 5.18+ puts into the dcache from READDIR replies (one event per name: only
# on request, a big listing logs one per entry).
DCACHE_EVENTS = ("nfs:nfs_readdir_lookup", "nfs:nfs_readdir_lookup_revalidate",
                 "nfs:nfs_readdir_lookup_revalidate_failed")
TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


class KernelLacks(Exception):
    """The running kernel cannot give what is asked; the message says what it lacks."""


@dataclass(frozen=True)
class Kprobe:
    """One kprobe to add: its event (group:function) and its definitions, best form first
    (a kernel that refuses one is given the next)."""
    event: str
    spec: ProbeSpec
    definitions: tuple


@dataclass
class Plan:
    """What to record on the running kernel, and why."""
    release: str
    machine: str
    events: list                # system:event to enable, kprobe events included
    kprobes: list               # Kprobe
    sources: dict               # table -> text: where it comes from on this kernel
    warnings: list              # what the trace will lack

    def trace_cmd(self, output, command, buffer_kb=20000):
        """The `trace-cmd record` command line for this plan."""
        cmd = ["trace-cmd", "record", "-q", "-b", str(buffer_kb), "-o", output]
        for e in self.events:
            cmd += ["-e", e]
        return cmd + ["--"] + list(command)


def find_tracefs():
    """The mounted tracefs directory, or KernelLacks saying how to mount it."""
    for d in TRACEFS_DIRS:
        if os.path.exists(os.path.join(d, "available_events")):
            return d
    raise KernelLacks("no tracefs: neither /sys/kernel/tracing nor /sys/kernel/debug/tracing "
                      "is mounted (mount -t tracefs nodev /sys/kernel/tracing; the kernel needs "
                      "CONFIG_FTRACE)")


def _read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def tracefs_format(tracefs, event):
    """The format of an event of the running kernel (tracedat.EventFormat), or None."""
    from .trace.format import parse_format
    system, name = event.split(":", 1)
    text = _read(os.path.join(tracefs, "events", system, name, "format"))
    return parse_format(text, system) if text else None


def kallsyms_functions(path, wanted):
    """Which of the wanted function names /proc/kallsyms lists as code (module symbols
    included). One search of the whole text per name: a line-by-line parse of 100,000+ symbols
    takes minutes in an emulated guest."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return set()
    return {fn for fn in wanted
            if re.search(rb" [tTwW] " + re.escape(fn.encode()) + rb"(?:\t|\n|$)", text)}


def _has_fields(tracefs, event, fields):
    fmt = tracefs_format(tracefs, event)
    return fmt is not None and set(fields) <= set(fmt.user_fields())


def _arg_forms(readme, machine):
    forms = []
    if "<argname>" in readme:
        forms.append("btf")
    if "$arg<N>" in readme:
        forms.append("argn")
    if machine in ARG_REGISTERS:
        forms.append("register")
    return forms


def plan(tracefs, kallsyms="/proc/kallsyms", release=None, machine=None, dcache=False,
         slab=False, group=KPROBE_SYSTEM):
    """The events and kprobes that fill the tables on the running kernel, from its tracefs
    (available_events, the formats, kprobe_events and its README) and kallsyms. Raises
    KernelLacks when the kernel has no source of READDIRs at all."""
    release = release or os.uname().release
    machine = machine or os.uname().machine
    gen = kernel_generation(release)
    have = set(_read(os.path.join(tracefs, "available_events")).split())
    kprobes_ok = os.path.exists(os.path.join(tracefs, "kprobe_events"))
    forms = _arg_forms(_read(os.path.join(tracefs, "README")), machine) if kprobes_ok else []
    functions = kallsyms_functions(kallsyms, set(COOKIE_KPROBES) | set(OPEN_KPROBES))
    events, kprobes, sources, warnings = [], [], {}, []

    def add(ev):
        if ev not in events:
            events.append(ev)

    def probe(spec):
        defs = []
        for form in forms:
            try:
                defs.append(kprobe_definition(spec, form, machine, group))
            except KeyError:
                continue
        kprobes.append(Kprobe(f"{group}:{spec.function}", spec, tuple(defs)))
        add(f"{group}:{spec.function}")

    def usable(spec):
        return kprobes_ok and forms and spec.function in functions and spec.fits(gen)

    # READDIRs: every tracepoint that carries the cookie; else the cookie kprobes (with the
    # event that names their directory); and the RPC itself, counted on any kernel.
    cookie_events = [s.event for g in RPC_SOURCES for s in g if not s.event.startswith("*:")
                     and "cookie" in s.fields and s.event in have
                     and _has_fields(tracefs, s.event, s.fields.values())]
    for ev in cookie_events:
        add(ev)
    if cookie_events:
        sources["rpc"] = ", ".join(cookie_events)
    else:
        probes = [s for s in COOKIE_KPROBES.values() if usable(s)]
        for s in probes:
            probe(s)
        if probes:
            sources["rpc"] = "kprobes on " + ", ".join(s.function for s in probes)
            if PAIRED_DIRECTORY.event in have:
                add(PAIRED_DIRECTORY.event)
        else:
            why = ("kprobe_events is missing (CONFIG_KPROBE_EVENTS)" if not kprobes_ok else
                   "no kprobe argument form known for " + machine if not forms else
                   f"the READDIR cookie kprobes fit 5.0-5.10 and this is {release}"
                   if not any(s.fits(gen) for s in COOKIE_KPROBES.values()) else
                   "nfs{3,4}_proc_readdir are not in kallsyms (is the nfs module loaded?)")
            warnings.append(f"no READDIR cookies on this kernel ({why}): a restart cannot be "
                            "seen, only READDIR counts")
    for s in RPC_SOURCES[-1]:
        if s.event in have:
            add(s.event)
            sources.setdefault("rpc", s.event + " (counts, no cookies)")
    if "rpc" not in sources:
        nfs_loaded = any(e.startswith(("nfs:", "nfs4:")) for e in have)
        raise KernelLacks(
            "this kernel has no source of READDIRs: none of the events "
            + ", ".join(s.event for g in RPC_SOURCES for s in g if not s.event.startswith("*:"))
            + ", and no kprobe on nfs{3,4}_proc_readdir"
            + ("" if nfs_loaded else "; no nfs or nfs4 trace events at all: load the NFS "
               "client (modprobe nfs nfsv3 nfsv4) or mount an NFS share first")
            + ("" if have & {"sunrpc:rpc_request"} or not nfs_loaded else
               "; sunrpc:rpc_request is missing too"))
    for s in [s for g in INVALIDATION_SOURCES for s in g] + [RANGE_INVALIDATION]:
        if s.event in have:
            add(s.event)
    sources["invalidations"] = ", ".join(
        s.event for g in INVALIDATION_SOURCES for s in g if s.event in have) or "-"
    if sources["invalidations"] == "-":
        warnings.append("no invalidation event: restarts are counted but not explained")
    for s in REVALIDATION_SOURCES:
        if s.event in have:
            add(s.event)
    # Listings: the series' own events, else the open/position kprobes; the getdents64 system
    # calls on any kernel with syscall events.
    series = [s.event for s in CALL_SOURCES[0] if s.event in have]
    if series:
        for ev in series:
            add(ev)
        sources["calls"] = ", ".join(series)
    else:
        opens = [s for s in OPEN_KPROBES.values() if usable(s)]
        for s in opens:
            probe(s)
        sources["calls"] = ("kprobes on " + ", ".join(s.function for s in opens)) if opens \
            else ""
    sys_events = [s.event for s in SYSCALL_SOURCES if s.event in have]
    for ev in sys_events:
        add(ev)
    sources["calls"] = ", ".join(x for x in (sources["calls"], ", ".join(sys_events)) if x) \
        or "-"
    if sources["calls"] == "-":
        warnings.append("nothing tells listings apart (no open kprobes, no syscall events): "
                        "a cookie-0 READDIR after the start cannot be told from a new open")
    for ev in CONTEXT_EVENTS + (DCACHE_EVENTS if dcache else ()):
        if ev in have:
            add(ev)
    if slab:
        kmem = [ev for ev in SLAB_EVENTS if ev in have]
        if not kmem:
            raise KernelLacks("--slab: this kernel has none of the kmem events "
                              + ", ".join(SLAB_EVENTS))
        for ev in kmem:
            add(ev)
    return Plan(release, machine, events, kprobes, sources, warnings)


def main(argv=None):
    """`python3 -m nfsreaddir.events plan`: the plan for the running kernel, for the
    reproducers' shell, one item a line: `event SYSTEM:NAME`, `warning TEXT`, and
    `kprobe<TAB>TABLE<TAB>EVENT<TAB>DEFINITION...` (TABLE: rpc or calls, what it fills; the
    definitions best form first). Exit 2, saying why, when the kernel has no READDIR source."""
    import argparse
    import sys
    p = argparse.ArgumentParser(prog="python3 -m nfsreaddir.events")
    p.add_argument("what", choices=["plan"])
    p.add_argument("--dcache", action="store_true")
    args = p.parse_args(argv)
    try:
        pl = plan(find_tracefs(), dcache=args.dcache)
    except KernelLacks as e:
        print(e, file=sys.stderr)
        return 2
    for k in pl.kprobes:
        role = "rpc" if k.spec.function in COOKIE_KPROBES else "calls"
        print("\t".join(["kprobe", role, k.event, *k.definitions]))
    for ev in pl.events:
        print("event", ev)
    for w in pl.warnings:
        print("warning", w)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
