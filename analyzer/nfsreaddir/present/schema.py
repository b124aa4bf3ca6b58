"""The export dataset's tables: each one's columns, in order, with the pandas type every
kernel's rows get (export.py writes them; UInt64 is Parquet's UINT64, which DuckDB reads as
UBIGINT and Spark as decimal(20,0))."""

from ..model import fleet

# The triage tables take their columns, in order, from model/fleet.py: counts unless named here.
TRIAGE_TYPES = {
    "client": "string",
    "fh": "string",
    "dir_fileid": "UInt64",
    "refetched_share": "Float64",
}


def _triage(columns):
    return [(c, TRIAGE_TYPES.get(c, "Int64")) for c in columns]


TRACE_COLUMNS = [
    ("trace_id", "string"),
    ("trace", "string"),
    ("kernel", "string"),
    ("nfs", "string"),
    ("listing", "Int64"),
]
EVENT_COLUMNS = [
    ("ts", "Int64"),
    ("cpu", "Int64"),
    ("pid", "Int64"),
    ("comm", "string"),
    ("source", "string"),
]
SCHEMA = {
    "listings": [
        ("phase", "string"),
        ("pid", "Int64"),
        ("comm", "string"),
        ("dev", "Int64"),
        ("dir_fileid", "UInt64"),
        ("delimited_by", "string"),
        ("start_ns", "Int64"),
        ("end_ns", "Int64"),
        ("seconds", "Float64"),
        ("ending", "string"),
        ("complete", "boolean"),
        ("error", "Int64"),
        ("began_before_trace", "boolean"),
        ("entries", "Int64"),
        ("status", "Int64"),
        ("getdents", "Int64"),
        ("readdirs", "Int64"),
        ("cookie_zero_readdirs", "Int64"),
        ("restarts", "Int64"),
        ("restarts_min", "Int64"),
        ("restarts_max", "Int64"),
        ("ambiguous_cookie_zero_readdirs", "Int64"),
        ("rewinds", "Int64"),
        ("refetched_readdirs", "Int64"),
        ("refetched_readdirs_min", "Int64"),
        ("refetched_readdirs_max", "Int64"),
        ("restart_cost_seconds", "Float64"),
        ("restart_cost_seconds_max", "Float64"),
        ("invalidations", "Int64"),
        ("invalidations_followed_by_restart", "Int64"),
        ("invalidations_followed_by_restart_min", "Int64"),
        ("invalidations_followed_by_restart_max", "Int64"),
        ("survived_changes", "Int64"),
        ("start_refills", "Int64"),
        ("version_changes", "Int64"),
        ("cache_range_trims", "Int64"),
        ("exercised", "boolean"),
        ("damaged_events", "Int64"),
        ("max_dtsize", "Int64"),
        ("dentries_added", "Int64"),
        ("finding", "string"),
        ("why", "string"),
    ],
    "rpc": EVENT_COLUMNS
    + [
        ("dev", "Int64"),
        ("fileid", "UInt64"),
        ("cookie", "UInt64"),
        ("dtsize", "Int64"),
        ("plus", "Int64"),
        ("version", "UInt64"),
        ("error", "Int64"),
        ("restart", "boolean"),
    ],
    "restarts": [
        ("ts", "Int64"),
        ("rpc_index", "Int64"),
        ("cookie", "UInt64"),
        ("refetched", "Int64"),
        ("cost_ns", "Int64"),
        ("after_invalidation", "boolean"),
    ],
    "invalidations": [
        ("ts", "Int64"),
        ("reason", "string"),
        ("chain", "string"),
        ("followed_by_restart", "boolean"),
        ("followed_by_ambiguous", "boolean"),
        ("refilled_start", "boolean"),
    ],
    "calls": EVENT_COLUMNS
    + [
        ("call", "string"),
        ("dev", "Int64"),
        ("fileid", "UInt64"),
        ("file", "UInt64"),
        ("fd", "Int64"),
        ("pos", "Int64"),
        ("cookie", "UInt64"),
        ("old_pos", "Int64"),
        ("ret", "Int64"),
        ("eof", "Int64"),
        ("error", "Int64"),
    ],
    "revalidations": EVENT_COLUMNS
    + [
        ("dev", "Int64"),
        ("fileid", "UInt64"),
        ("step", "string"),
        ("cache_validity", "Int64"),
        ("version", "UInt64"),
    ],
    "markers": EVENT_COLUMNS + [("text", "string")],
    "samples": [
        ("ts", "Int64"),
        ("nr_dentry", "Int64"),
        ("nr_unused", "Int64"),
        ("nr_negative", "Int64"),
        ("slab_active", "Int64"),
        ("slab_total", "Int64"),
        ("slab_objsize", "Int64"),
        ("readdir", "Int64"),
        ("readdirplus", "Int64"),
    ],
    # Where each listing's time went (model/roundtrips): one row per listing and operation,
    # in its window (window true) or by the same process or client outside it (false).
    "round_trips": [
        ("program", "string"),
        ("op", "string"),
        ("window", "boolean"),
        ("calls", "Int64"),
        ("replied", "Int64"),
        ("server_seconds", "Float64"),
        ("per_name", "Float64"),
        ("share", "Float64"),
        ("names", "Int64"),
        ("names_from", "string"),
    ],
    # A server's capture of several clients: each client ranked by the READDIRs its restarts
    # spent fetching again, and one row per client and directory (model/fleet.py).
    "clients": _triage(fleet.CLIENT_COLUMNS),
    "client_dirs": _triage(fleet.DIR_COLUMNS),
}

RUN_COLUMNS = TRACE_COLUMNS[:4] + [("reproducer", "string")]
DCACHE_SCHEMA = {
    "dcache_runs": [("verdict", "string"), ("reasons", "string"), ("phases", "string")],
    "dcache_figures": [("figure", "string"), ("value", "Float64"), ("text", "string")],
    "dcache_phases": [
        ("phase", "string"),
        ("seq", "Int64"),
        ("start_ns", "Int64"),
        ("end_ns", "Int64"),
        ("seconds", "Float64"),
        ("counter", "string"),
        ("before", "Int64"),
        ("after", "Int64"),
        ("delta", "Int64"),
        ("peak", "Int64"),
        ("rate_per_s", "Float64"),
    ],
    "dcache_samples": [
        ("ts", "Int64"),
        ("phase", "string"),
        ("label", "string"),
        ("counter", "string"),
        ("value", "Int64"),
    ],
}
