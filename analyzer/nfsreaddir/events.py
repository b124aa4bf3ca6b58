"""Each kernel's trace events: their names, fields and kprobes, the one place that knows them.

Per kernel generation, which trace events fill each canonical table (tables.py builds them) and
how their fields map; the kprobes that stand in where no tracepoint carries what a table needs,
with their arguments per architecture; the events recorded beside them; and the advice that
names what to record when a trace lacks a table.

Sources of a table come in groups, best group first; a trace uses the first group it recorded,
so a READDIR is never counted twice from two events describing the same RPC. A kprobe is
recognised by its function name under any group name (`*:nfs4_proc_readdir`), since users name
their own kprobe groups.
"""

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

# The declarations below are named tuples, not dataclasses: the dataclasses' generated methods
# are compiled at every start, which was a tenth of a check of a small trace.

_NO_CONSTANTS: Mapping = MappingProxyType({})


class Source(NamedTuple):
    event: str  # system:name; "*:name" matches a kprobe of any group
    fields: dict  # canonical column -> raw field name
    constants: Mapping = _NO_CONSTANTS  # canonical column -> fixed value
    where: tuple = ()  # (raw field, allowed values): rows to keep
    kernels: str = ""  # which kernels have it, for messages
    optional: tuple = ()  # canonical columns filled only when the event has them


# The group the reproducers and `nfs-readdir record` give their kprobes; any other is read too.
KPROBE_SYSTEM = "nfsprobe"


class Arg(NamedTuple):
    """One value a kprobe fetches: the function's argument `argno` (1-based, C order), or the
    `type` value at `offset` bytes into what that argument points to; `btf` is the same by the
    parameter's name, for kernels whose probes read BTF (`ctx->pos`)."""

    name: str
    argno: int
    type: str
    offset: int | None = None
    btf: str = ""


class ProbeSpec(NamedTuple):
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
        return (self.since is None or gen >= self.since) and (
            self.until is None or gen <= self.until
        )


# The READDIR cookie of stock 5.0-5.10: nfs{4,3}_proc_readdir(struct dentry *dentry,
# const struct cred *cred, u64 cookie, struct page **pages, unsigned int count, bool plus).
# 5.11 passes a struct nfs_readdir_arg instead, and 5.18 adds tracepoints with the cookie.
_PROC_READDIR_ARGS = (Arg("cookie", 3, "u64"), Arg("count", 5, "u32"), Arg("plus", 6, "u8"))
COOKIE_KPROBES = {
    fn: ProbeSpec(fn, _PROC_READDIR_ARGS, since=(5, 0), until=(5, 10))
    for fn in ("nfs4_proc_readdir", "nfs3_proc_readdir")
}
# What the reader did, on kernels without the series' events: the open file and its position.
# nfs_opendir/nfs_closedir(struct inode *inode, struct file *filp) and nfs_readdir(struct file
# *file, struct dir_context *ctx), whose ctx->pos follows the actor pointer (offset 8 on 64-bit)
# from 3.11 to 7.3.
OPEN_KPROBES = {
    "nfs_opendir": ProbeSpec("nfs_opendir", (Arg("file", 2, "x64", btf="filp"),)),
    "nfs_closedir": ProbeSpec("nfs_closedir", (Arg("file", 2, "x64", btf="filp"),)),
    "nfs_readdir": ProbeSpec(
        "nfs_readdir",
        (Arg("file", 1, "x64", btf="file"), Arg("pos", 2, "s64", offset=8, btf="ctx->pos")),
    ),
}
# The kernel's calling convention: the registers of the first arguments, per `uname -m`.
ARG_REGISTERS = {
    "x86_64": ("di", "si", "dx", "cx", "r8", "r9"),
    "aarch64": ("x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"),
}


# How a kprobe names an argument (form), best first: by BTF name ("btf": tracefs README shows
# "<argname>", 6.5+ with CONFIG_PROBE_EVENTS_BTF_ARGS), as $argN ("argn": README shows
# "$arg<N>": CONFIG_HAVE_FUNCTION_ARG_ACCESS_API, x86-64 since 4.20, arm64 since 5.0), or by
# register ("register").
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


# The readdir cache's own events (upstream's since 5.18, the series' on 5.10), and the kernels
# that have them. With an "index" field, the page a READDIR filled, which its cookie names
# (model/tables: cookie_is_position).
_READDIR_CACHE_KERNELS = (
    ("nfs:nfs_readdir_cache_fill", "5.18+ (6.1, 6.12), 5.10 with the series v1-v2"),
    ("nfs:nfs_readdir_uncached", "5.18+ (6.1, 6.12), 5.10 with the series v1-v2"),
    ("nfs:nfs_readdir_cache_page_filled", "5.10 with kernel-patches/v5.10"),
    ("nfs:nfs_readdir_uncached_page_filled", "5.10 with kernel-patches/v5.10"),
)
NFS_READDIR_CACHE_EVENTS = tuple(ev for ev, _ in _READDIR_CACHE_KERNELS)
RPC_SOURCES = [
    # This project's 5.10 series: one event per READDIR reply with the cookie asked for.
    (
        Source(
            "nfs4:nfs4_readdir",
            {
                "dev": "dev",
                "fileid": "fileid",
                "cookie": "cookie",
                "dtsize": "count",
                "plus": "plus",
            },
            optional=("error",),
            kernels="5.10 with kernel-patches/v5.10",
        ),
    ),
    # The page cache fill and the uncached read, each one READDIR: 5.18 and later, and 5.10
    # with this project's series over NFSv3. Upstream's names fire before the RPC (fields
    # verifier char[8], index); the series' v1-v2 used the same names for events that fire
    # after it (a u64 verifier, page_index, last_cookie, entries, eof, error), and the series
    # since v3 gives those its own names. Each name here has one layout per kernel, and the
    # fields read from them are common to all: traces of every version read the same.
    tuple(
        Source(
            ev,
            {"dev": "dev", "fileid": "fileid", "cookie": "cookie", "dtsize": "dtsize"},
            optional=("version", "error", "index"),
            kernels=kernels,
        )
        for ev, kernels in _READDIR_CACHE_KERNELS
    ),
    # Stock 5.0-5.10: the kprobe on nfs{4,3}_proc_readdir, with the cookie but not the
    # directory (NFSv4 gets it from nfs4:nfs4_readdir, see PAIRED_DIRECTORY).
    tuple(
        Source(
            f"*:{fn}",
            {"cookie": "cookie"},
            optional=("dtsize", "plus"),
            kernels="5.0-5.10 (kprobe)",
        )
        for fn in COOKIE_KPROBES
    ),
    # Any kernel: the RPC itself, counted but with no cookie and no directory.
    (
        Source(
            "sunrpc:rpc_request", {}, where=("procname", ("READDIR", "READDIRPLUS")), kernels="any"
        ),
    ),
]
# The READDIRs of the uncached mode: upstream's uncached_readdir() (5.18+: the reader's cookie
# is not in the directory's page cache, so the client reads from it into a buffer of its own
# and throws the entries away once returned) and the series' event of the same path on 5.10.
# A trace whose READDIRs were read from a group holding one of them tells the two
# modes apart (0 uncached READDIRs is evidence); any other cannot.
UNCACHED_READDIR = ("nfs:nfs_readdir_uncached", "nfs:nfs_readdir_uncached_page_filled")
# The READDIR events that fire at the reply (nfs4:nfs4_readdir, stock and the series', and the
# series' page-filled events since v3): the RPC's own sunrpc:rpc_request comes before them, and
# a listing's window begins at that call (model/windows). The others fire in the call path
# (the cookie kprobes, upstream's cache_fill and uncached).
REPLY_TIME_READDIR = (
    "nfs4:nfs4_readdir",
    "nfs:nfs_readdir_cache_page_filled",
    "nfs:nfs_readdir_uncached_page_filled",
)
# Optional columns and the raw fields they come from, where the name differs.
OPTIONAL_FIELDS = {
    "dtsize": ("count", "dtsize"),
    "plus": ("plus",),
    "version": ("version",),
    "error": ("error",),
    "index": ("index",),
}

# Upstream's cache fill (5.18+) fills the page of the readdir cache that its cookie hashes to,
# and the hash of cookie 0 is page 0 (fs/nfs/dir.c, nfs_readdir_page_cookie_hash): a fill
# event at cookie 0 with another index is a row no kernel writes (an edited or damaged field).
# (The uncached read logs no page: -1. The series' v1-v2 events of that name have no index.)
COOKIE_ZERO_FILLS_PAGE_ZERO = ("nfs:nfs_readdir_cache_fill",)

# Stock 5.10's nfs4:nfs4_readdir (no cookie) follows each NFSv4 READDIR of the same task: it
# names the directory and the error of the RPC the cookie kprobe saw.
PAIRED_DIRECTORY = Source(
    "nfs4:nfs4_readdir", {"dev": "dev", "fileid": "fileid", "error": "error"}, kernels="any"
)

# A READDIR error that means the reader was interrupted by a signal (ERESTARTSYS): killed.
ERESTARTSYS = 512
KILLED_ERRORS = {ERESTARTSYS, 4}  # ERESTARTSYS, EINTR

INVALIDATION_SOURCES = [
    (
        Source(
            "nfs:nfs_readdir_invalidate_cache",
            {"dev": "dev", "fileid": "fileid", "reason": "reason"},
            kernels="5.10 with kernel-patches/v5.10",
        ),
    ),
    (
        Source(
            "nfs:nfs_invalidate_mapping_enter",
            {"dev": "dev", "fileid": "fileid"},
            constants={"reason": "invalidate_mapping"},
            kernels="any",
        ),
    ),
]

# The names an event's print format gives a field's numbers (its __print_symbolic), for input
# that prints the number and has no print format (`trace-cmd report -R`): the series'
# invalidation reasons (kernel-patches/v5.10, 0003's NFS_READDIR_INVALIDATE_*).
PRINTED_NAMES = {
    ("nfs:nfs_readdir_invalidate_cache", "reason"): {0: "REVALIDATE", 1: "REFILL", 2: "READDIRPLUS"}
}

# 5.18+ trims the readdir page cache instead of dropping it; recorded beside the drops.
RANGE_INVALIDATION = Source(
    "nfs:nfs_readdir_invalidate_cache_range",
    {"dev": "dev", "fileid": "fileid", "start": "range_start", "end": "range_end"},
    kernels="5.18+",
)

REVALIDATION_SOURCES = [
    Source(
        "nfs:nfs_revalidate_inode_enter",
        {"dev": "dev", "fileid": "fileid"},
        constants={"step": "revalidate"},
    ),
    Source(
        "nfs:nfs_revalidate_inode_exit",
        {"dev": "dev", "fileid": "fileid", "cache_validity": "cache_validity"},
        optional=("version",),
        constants={"step": "revalidate_done"},
    ),
    Source(
        "nfs:nfs_getattr_enter", {"dev": "dev", "fileid": "fileid"}, constants={"step": "getattr"}
    ),
    Source(
        "nfs:nfs_set_cache_invalid",
        {"dev": "dev", "fileid": "fileid", "cache_validity": "cache_validity"},
        constants={"step": "set_cache_invalid"},
    ),
    Source(
        "sunrpc:rpc_request", {}, constants={"step": "GETATTR"}, where=("procname", ("GETATTR",))
    ),
]

# What the reader asked for, best group first: this project's 5.10 series, or the kprobes of
# OPEN_KPROBES on any other kernel. They delimit listings (one per open) and give the reader's
# position, which tells a rewind or a new listing from a restart.
CALL_SOURCES = [
    tuple(
        Source(
            f"nfs:nfs_{event}",
            {"dev": "dev", "fileid": "fileid", **extra},
            constants={"call": call},
            kernels="5.10 with kernel-patches/v5.10",
        )
        for event, call, extra in (
            ("readdir_enter", "getdents", {"pos": "pos", "cookie": "cookie"}),
            ("readdir_exit", "getdents_done", {"pos": "pos", "eof": "eof", "error": "error"}),
            ("opendir", "opendir", {}),
            ("closedir", "closedir", {"pos": "pos", "cookie": "cookie"}),
            ("llseek_dir", "llseek", {"pos": "pos", "cookie": "cookie", "old_pos": "old_pos"}),
        )
    ),
    (
        Source(
            "*:nfs_opendir", {"file": "file"}, constants={"call": "opendir"}, kernels="any (kprobe)"
        ),
        Source(
            "*:nfs_closedir",
            {"file": "file"},
            constants={"call": "closedir"},
            kernels="any (kprobe)",
        ),
        Source(
            "*:nfs_readdir",
            {"file": "file", "pos": "pos"},
            constants={"call": "getdents"},
            kernels="any (kprobe)",
        ),
    ),
]
# The reader's system calls, on any kernel with syscall events: how each getdents64 returned
# (0 at the end of the directory) and the seeks that rewind it.
SYSCALL_SOURCES = [
    Source(
        "syscalls:sys_enter_getdents64",
        {"fd": "fd"},
        constants={"call": "sys_getdents"},
        kernels="any",
    ),
    Source(
        "syscalls:sys_exit_getdents64",
        {"ret": "ret"},
        constants={"call": "sys_getdents_ret"},
        kernels="any",
    ),
    Source(
        "syscalls:sys_enter_lseek",
        {"fd": "fd", "pos": "offset", "whence": "whence"},
        constants={"call": "sys_lseek"},
        kernels="any",
    ),
]

MARKER_SOURCE = Source("ftrace:print", {"text": "buf"})

# Every RPC the client sends, on any kernel: what a listing's time went to besides its READDIRs
# (model/roundtrips counts them per listing, by program and procedure: nfs v3 GETATTR, nfsacl
# v3 GETACL, nfs v4 READDIR...). The task and client ids pair a call with its latency event.
REQUEST_SOURCE = Source(
    "sunrpc:rpc_request",
    {
        "task_id": "task_id",
        "client_id": "client_id",
        "program": "progname",
        "version": "version",
        "op": "procname",
    },
    kernels="any",
)
# Each call's reply (4.18+): the round trip to the server (rtt) and the whole call (execute),
# in microseconds; without it a trace counts calls but gives no server time.
LATENCY_SOURCE = Source(
    "sunrpc:rpc_stats_latency",
    {"task_id": "task_id", "client_id": "client_id", "rtt": "rtt", "execute": "execute"},
    kernels="4.18+",
)

# NFS_INO_INVALID_DATA in nfs_inode cache_validity (include/linux/nfs_fs.h, 5.10 to 6.12).
NFS_INO_INVALID_DATA = 1 << 1

# The slab analysis (slab.py): allocations and frees, and per event the fields it reads.
SLAB_ALLOC = (
    "kmem:kmem_cache_alloc",
    "kmem:kmem_cache_alloc_node",
    "kmem:kmalloc",
    "kmem:kmalloc_node",
)
SLAB_FREE = ("kmem:kmem_cache_free", "kmem:kfree")
# Of the allocations, those of a named cache (the dentry cache among them), and kmalloc's, whose
# cache is known by its size alone.
SLAB_NAMED_ALLOC, SLAB_KMALLOC = SLAB_ALLOC[:2], SLAB_ALLOC[2:]
SLAB_EVENTS = {
    "kmem:kmem_cache_alloc": ["ptr", "bytes_alloc", "name"],
    "kmem:kmem_cache_alloc_node": ["ptr", "bytes_alloc", "name"],
    "kmem:kmalloc": ["ptr", "bytes_alloc"],
    "kmem:kmalloc_node": ["ptr", "bytes_alloc"],
    "kmem:kmem_cache_free": ["ptr", "name"],
    "kmem:kfree": ["ptr"],
}

# Recorded beside the tables' events, read by no table: they end the steps the tables start
# (a READDIR's reply, the end of an invalidation or a GETATTR) or show the steps between (the
# series' page-cache search and buffer fill), for a person reading `trace-cmd report`; they are
# what the reproducers have always recorded.
CONTEXT_EVENTS = (
    "nfs:nfs_readdir_cache_fill_done",
    "nfs:nfs_readdir_uncached_done",
    "nfs:nfs_readdir_force_readdirplus",
    "nfs:nfs_readdir_search_cookie",
    "nfs:nfs_readdir_search_pos",
    "nfs:nfs_readdir_filldir",
    "nfs:nfs_invalidate_mapping_exit",
    "nfs:nfs_getattr_exit",
    "nfs:nfs_fsync_dir",
    "nfs4:nfs4_getattr",
)
# --dcache: the names 5.18+ puts into the dcache from READDIR replies (one event per name: only
# on request, a big listing logs one per entry).
DCACHE_EVENTS = (
    "nfs:nfs_readdir_lookup",
    "nfs:nfs_readdir_lookup_revalidate",
    "nfs:nfs_readdir_lookup_revalidate_failed",
)


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


def keeps_whole_readdir_reply(kernel):
    """Whether the client puts every entry of a READDIR reply into its cache: True from 5.18
    (nfs_readdir_folio_filler goes on into the next cache pages, so one reply fills as many
    as it carries), False up to 5.10 (nfs_readdir_xdr_to_array fills one page, about 100
    entries, and asks the server again from the last of them: the rest of the reply is thrown
    away), None between them or where the trace does not say which kernel."""
    gen = kernel_generation(kernel)
    if gen is None or (5, 10) < gen < (5, 18):
        return None
    return gen >= (5, 18)


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
        probes = [s for s in COOKIE_KPROBES.values() if old] + [
            s for s in OPEN_KPROBES.values() if old or "calls" in missing
        ]
        if probes:
            defs = "; ".join(kprobe_definition(s, "register", "x86_64") for s in probes)
            out.append(
                f"kprobes ({defs}) with -e '{KPROBE_SYSTEM}:*'"
                + (
                    " (x86-64 registers; the cookie probes fit 5.0-5.10)"
                    if gen is None
                    else " (x86-64 registers)"
                )
            )
        out.append("-e syscalls:sys_enter_getdents64 -e syscalls:sys_exit_getdents64")
    if "invalidations" in missing:
        out.append("-e nfs:nfs_invalidate_mapping_enter -e 'nfs:nfs_revalidate_inode_*'")
    if "slab" in missing:
        out.append(
            " ".join(
                f"-e {ev}"
                for ev in (
                    "kmem:kmem_cache_alloc",
                    "kmem:kmem_cache_free",
                    "kmem:kmalloc",
                    "kmem:kfree",
                )
            )
        )
    only_slab = missing == {"slab"}
    return (
        f"nfs-readdir record{' --slab' if 'slab' in missing else ''} -o trace.dat -- "
        "COMMAND"
        + ("" if only_slab else " (it picks the events and kprobes of the running kernel)")
        + ", or trace-cmd record "
        + " ".join(out)
    )
