"""`nfs-readdir export`: a trace's listings and canonical events as tables made for many traces.

The tables of any number of traces go into one dataset, one folder per table and one file per
trace, named by the trace's content hash:

    OUT/listings/<trace_id>.csv    one row per listing (the summary `analyze --json` gives)
    OUT/rpc/<trace_id>.csv         one row per READDIR, with the listing it belongs to
    OUT/restarts/, invalidations/  per listing, as the analysis found them
    OUT/calls/, revalidations/, markers/, samples/   the other canonical events
    OUT/clients/, client_dirs/   a capture of several clients: each client ranked by the
                                 READDIRs it spent fetching again, and per client and directory

Every row carries trace_id, trace (the path given), kernel and nfs (the NFS version, where the
trace says), and listing (the listing's number within its trace, null outside any listing), so
`listing` joins every table to `listings` on (trace_id, listing). Every table has the same
columns in the same order with the same types for every kernel; a value a trace does not have is
null. The same trace exported again is left as it is; nothing is ever overwritten. An engine
reads the whole dataset at once, e.g. DuckDB: `read_parquet('OUT/rpc/*.parquet')`.

A dcache reproducer's run (reproducers/dcache-*) has phases, not listings, and its own tables,
whose rows carry reproducer in place of listing:

    OUT/dcache_runs/       one row per run: its verdict and why
    OUT/dcache_figures/    one row per figure of the run (the figures of results.json)
    OUT/dcache_phases/     one row per phase and sampled counter: before, after, delta, peak
    OUT/dcache_samples/    one row per sample and counter: the dcache over time

They are long (a row per figure or counter, not a column) because each reproducer samples and
figures different things and one schema has to hold them all.
"""

import errno
import hashlib
import os

import pandas as pd

from . import fleet

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
    # A server's capture of several clients: its triage tables.
    **fleet.EXPORT_SCHEMA,
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
FORMATS = ("csv", "parquet")


class ExportError(Exception):
    """The tables cannot be written; the message says why and what to do."""


def trace_id(path):
    """A short hash of the trace's bytes: the same trace has the same id wherever it lies."""
    h = hashlib.blake2b(digest_size=8)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _typed(df, columns):
    """The columns in their order and types; a missing column is all null."""
    out = {}
    n = len(df)
    for col, dtype in columns:
        v = df[col] if col in df else pd.Series([None] * n, index=df.index, dtype="object")
        if dtype in ("Int64", "UInt64"):
            v = pd.to_numeric(v, errors="coerce")
            v = (
                v.astype("Float64").round().astype(dtype)
                if v.dtype.kind == "f"
                else v.astype(dtype)
            )
        elif dtype == "Float64":
            v = pd.to_numeric(v, errors="coerce").astype(dtype)
        elif dtype == "boolean":
            v = v.astype("boolean")
        else:
            v = (
                v.astype("object")
                .where(v.notna(), None)
                .map(lambda x: x if x is None else str(x))
                .astype("string")
            )
        out[col] = v.reset_index(drop=True)
    return pd.DataFrame(out)


def _in_listing(df, listings):
    """The listing of each row of a per-process table: the first listing of the row's process
    whose time span holds it."""
    ids = pd.Series([pd.NA] * len(df), dtype="Int64", index=df.index)
    for i, lst in enumerate(listings):
        hit = ids.isna() & (df["pid"] == lst.pid) & (df["ts"] >= lst.start) & (df["ts"] <= lst.end)
        ids[hit] = i
    return ids


def frames(analysis, findings=None):
    """{table: DataFrame} of one analysed trace (findings: listing -> verdict.Finding)."""
    t = analysis.tables
    lsts = analysis.listings
    out = {}
    rows = []
    for i, lst in enumerate(lsts):
        s = lst.summary()
        f = (findings or {}).get(id(lst))
        rows.append(
            dict(
                s,
                listing=i,
                start_ns=lst.start,
                end_ns=lst.end,
                dentries_added=s["dentries"].get("nr_dentry", {}).get("added"),
                finding=f.word if f else None,
                why=f.why if f else None,
            )
        )
    out["listings"] = pd.DataFrame(rows)
    rpc = t["rpc"].copy()
    rpc["listing"] = pd.Series([pd.NA] * len(rpc), dtype="Int64")
    rpc["restart"] = False
    for i, lst in enumerate(lsts):
        rpc.loc[lst.rpc_rows, "listing"] = i
        rpc.loc[[lst.rpc_rows[r.rpc_index] for r in lst.restarts], "restart"] = True
    out["rpc"] = rpc
    out["restarts"] = pd.DataFrame(
        [dict(vars(r), listing=i) for i, lst in enumerate(lsts) for r in lst.restarts]
    )
    out["invalidations"] = pd.DataFrame(
        [
            dict(vars(v), chain=" -> ".join(v.chain), listing=i)
            for i, lst in enumerate(lsts)
            for v in lst.invalidations
        ]
    )
    for name in ("calls", "revalidations", "markers"):
        df = t.get(name)
        if df is not None and len(df):
            out[name] = df.assign(listing=_in_listing(df, lsts))
    if analysis.samples is not None and len(analysis.samples):
        out["samples"] = analysis.samples
    # A server's capture: its clients ranked, and their listings per directory (model/fleet.py).
    for name in ("clients", "client_dirs"):
        if name in t:
            out[name] = t[name]
    return out


def _check_format(fmt):
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: csv or parquet")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ExportError(
                "Parquet needs pyarrow: pip install 'nfs-readdir-trace[parquet]' "
                "(or export --format csv)"
            ) from None


def _write_tables(tables, columns, path, outdir, fmt):
    """Write {table: DataFrame} (typed by columns(table)) into the dataset at outdir, one file
    per table named by the trace's hash; return (written, kept)."""
    tid = trace_id(path)
    written, kept = [], []
    for table, df in tables.items():
        if df is None or not len(df):
            continue
        df = _typed(df.assign(trace_id=tid), columns(table))
        d = os.path.join(outdir, table)
        out = os.path.join(d, f"{tid}.{fmt}")
        if os.path.exists(out):
            kept.append(out)
            continue
        tmp = os.path.join(d, f".{tid}.{fmt}.partial")
        try:
            os.makedirs(d, exist_ok=True)
            # Through a file Python opened: pyarrow given the path would encode it as UTF-8,
            # which a name that is not UTF-8 (surrogate escapes) cannot be.
            with open(tmp, "wb") as f:
                if fmt == "csv":
                    df.to_csv(f, index=False)
                else:
                    df.to_parquet(f, index=False)
            os.rename(tmp, out)  # ours, in our own dataset folder: never a user's file
        except OSError as e:
            raise ExportError(
                f"cannot write {_shown(out)}: {e.strerror or e} ("
                + (
                    "free space there or export to another -o DIR; "
                    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
                    else ""
                )
                + f"the {len(written)} tables written before it are whole, and "
                "exporting again adds the rest)"
            ) from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        written.append(out)
    return written, kept


def _shown(path):
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def write(analysis, path, outdir, fmt, findings=None):
    """Write one file per table into the dataset at outdir; return (written, kept): the paths
    written and those left as they were (the same trace exported before)."""
    _check_format(fmt)
    common = {
        "trace": _shown(analysis.info.get("path", path)),
        "kernel": analysis.kernel,
        "nfs": analysis.run.get("nfs"),
    }
    tables = {
        t: df.assign(**common) for t, df in frames(analysis, findings).items() if df is not None
    }
    return _write_tables(tables, lambda t: TRACE_COLUMNS + SCHEMA[t], path, outdir, fmt)


def _flat(x, key=""):
    """(dotted key, leaf) of every leaf of nested dicts and lists."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _flat(v, f"{key}.{k}" if key else str(k))
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _flat(v, f"{key}.{i}")
    else:
        yield key, x


def dcache_frames(results, markers):
    """{table: DataFrame} of one dcache run: results as dcache_judge.build_results gives it,
    markers (markers.Markers) of its trace for the phases' spans and the samples."""

    def number(v):
        # A figure the run could not measure stays null: unknown is never 0.
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def text(v):
        if v is None or number(v) is not None:
            return None
        return str(v).lower() if isinstance(v, bool) else str(v)

    out = {
        "dcache_runs": pd.DataFrame(
            [
                {
                    "verdict": results.get("verdict"),
                    "reasons": "; ".join(results.get("reasons") or []),
                    "phases": " ".join(results.get("phase_order") or []),
                }
            ]
        )
    }
    out["dcache_figures"] = pd.DataFrame(
        [
            {"figure": k, "value": number(v), "text": text(v)}
            for k, v in _flat(results.get("figures") or {})
        ],
        columns=["figure", "value", "text"],
    )
    # results' phases are the markers' phases in order, a phase run twice named NAME#2.
    spans = dict(zip(results.get("phase_order") or [], markers.phases))
    rows = []
    for seq, (name, ph) in enumerate((results.get("phases") or {}).items()):
        span = spans.get(name)
        base = {
            "phase": name,
            "seq": seq,
            "seconds": number(ph.get("seconds")),
            "start_ns": span.start if span else None,
            "end_ns": span.end if span else None,
        }
        for counter in ph.get("delta") or {}:
            rows.append(
                dict(
                    base,
                    counter=counter,
                    before=(ph.get("before") or {}).get(counter),
                    after=(ph.get("after") or {}).get(counter),
                    delta=ph["delta"][counter],
                    peak=(ph.get("peak") or {}).get(counter),
                    rate_per_s=(ph.get("rate_per_s") or {}).get(counter),
                )
            )
        for event, n in (ph.get("events") or {}).items():
            rows.append(dict(base, counter=f"event:{event}", delta=n))
    out["dcache_phases"] = pd.DataFrame(rows)
    out["dcache_samples"] = _long_samples(markers)
    return out


def _long_samples(markers):
    """One row per sample and counter, each sample in the phase whose span holds it."""
    s = markers.samples
    if s is None or not len(s):
        return None
    phase = pd.Series([None] * len(s), index=s.index, dtype="object")
    for p in reversed(markers.phases):  # the first phase holding a sample names it
        end = p.end if p.end is not None else s["ts"].max()
        phase[(s["ts"] >= p.start) & (s["ts"] <= end)] = p.name
    counters = [c for c in s.columns if c not in ("ts", "label")]
    wide = s.assign(phase=phase, label=s["label"] if "label" in s else None)
    return wide.melt(
        id_vars=["ts", "phase", "label"],
        value_vars=counters,
        var_name="counter",
        value_name="value",
    ).dropna(subset=["value"])


def write_dcache(results, markers, trace, shown, outdir, fmt):
    """Write a dcache run's tables (dcache_frames) into the dataset at outdir; trace is its
    trace file (named by its hash), shown the path the user gave. Returns (written, kept)."""
    _check_format(fmt)
    common = {
        "trace": _shown(shown),
        "kernel": results.get("kernel"),
        "nfs": results.get("nfs"),
        "reproducer": results.get("name"),
    }
    tables = {
        t: df.assign(**common)
        for t, df in dcache_frames(results, markers).items()
        if df is not None
    }
    return _write_tables(tables, lambda t: RUN_COLUMNS + DCACHE_SCHEMA[t], trace, outdir, fmt)
