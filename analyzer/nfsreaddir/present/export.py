"""`nfs-readdir export`: a trace's listings and canonical events as tables made for many traces.

The tables of any number of traces go into one dataset, one folder per table and one file per
trace, named by the trace's id (pipeline.trace_id: a hash of its bytes, the `trace_id` of
`analyze --json` and results.json too):

    OUT/listings/<trace_id>.csv    one row per listing (the summary `analyze --json` gives)
    OUT/rpc/<trace_id>.csv         one row per READDIR, with the listing it belongs to
    OUT/restarts/, invalidations/  per listing, as the analysis found them
    OUT/calls/, revalidations/, markers/, samples/   the other canonical events
    OUT/round_trips/               per listing and operation, the RPCs its reader sent
                                   (model/roundtrips), in its window or outside it
    OUT/clients/, client_dirs/   a capture of several clients: each client ranked by the
                                 READDIRs it spent fetching again, and per client and directory

Every row carries trace_id, trace (the path given), kernel and nfs (the NFS version, where the
trace says), and listing (the listing's number within its trace, null outside any listing), so
`listing` joins every table to `listings` on (trace_id, listing). Every table has the same
columns in the same order with the same types for every kernel; a value a trace does not have is
null. A table already exported, byte for byte as this export writes it, is left as it is; one
that differs (another version's, or cut short) is replaced, and export says which it did. Only
the dataset's own files are written, each whole or not at all. An engine reads a table of
thousands of traces through one glob of its folder, e.g. DuckDB's
`read_parquet('OUT/rpc/*.parquet')` or Spark's `spark.read.parquet('OUT/rpc/*.parquet')`; a
file being written is hidden from both (.<trace_id>.<format>.partial until whole). Ids, cookies
and change attributes are unsigned 64-bit (UINT64), which Spark reads as decimal(20,0): the same
values as DuckDB's UBIGINT (tests/test_spark.py).

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
import io
import os

import pandas as pd

from ..model.columns import frame
from .schema import DCACHE_SCHEMA, RUN_COLUMNS, SCHEMA, TRACE_COLUMNS

FORMATS = ("csv", "parquet", "chrome-trace")


class ExportError(Exception):
    """The tables cannot be written; the message says why and what to do."""


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


def frames(analysis, finding=None):
    """{table: DataFrame} of one analysed trace (finding(listing): its verdict.Finding)."""
    t = analysis.tables
    lsts = analysis.listings
    out = {}
    rows = []
    for i, lst in enumerate(lsts):
        s = lst.summary()
        f = finding(lst) if finding is not None else None
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
    rpc = frame(t["rpc"]).copy()
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
        df = frame(t.get(name))
        if df is not None and len(df):
            out[name] = df.assign(listing=_in_listing(df, lsts))
    if analysis.samples is not None and len(analysis.samples):
        out["samples"] = frame(analysis.samples)
    out["round_trips"] = _round_trips(analysis)
    # A server's capture: its clients ranked, and their listings per directory (model/fleet.py).
    for name in ("clients", "client_dirs"):
        if name in t:
            out[name] = t[name]
    return out


def _round_trips(analysis):
    """One row per listing and operation of its round trips (analysis.round_trips)."""
    rows = []
    for i, rt in sorted((getattr(analysis, "round_trips", None) or {}).items()):
        names = {"listing": i, "names": rt.names, "names_from": rt.names_from}
        for o in rt.ops:
            rows.append(dict(vars(o), window=True, **names))
        for key, calls in rt.outside.items():
            program, _, op = key.partition(".")
            rows.append(dict(program=program, op=op, calls=calls, window=False, **names))
    return pd.DataFrame(rows)


def _check_format(fmt):
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: {', '.join(FORMATS)}")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ExportError(
                "Parquet needs pyarrow: pip install 'nfs-readdir-trace[parquet]' "
                "(or export --format csv)"
            ) from None


class Written:
    """What an export did with each file: written new, replaced (a file was there that is not
    what this export makes of the trace: written by another version, cut short, or damaged), or
    kept (the file there is already, byte for byte, what it would write)."""

    def __init__(self):
        self.new, self.replaced, self.kept = [], [], []
        self.backups = []  # where the files replaced of those the user named are kept

    def __len__(self):
        return len(self.new) + len(self.replaced)


def _encoded(df, fmt):
    """The bytes of the file a table makes."""
    buf = io.BytesIO()
    if fmt == "csv":
        df.to_csv(buf, index=False)
    else:
        df.to_parquet(buf, index=False)
    return buf.getvalue()


def _same(path, data):
    try:
        with open(path, "rb") as f:
            return f.read(len(data) + 1) == data
    except OSError:
        return False


def _write_tables(tables, columns, tid, outdir, fmt, done=None):
    """Write {table: DataFrame} (typed by columns(table)) into the dataset at outdir, one file
    per table named by the trace's id; return (or add to) the Written."""
    done = Written() if done is None else done
    for table, df in tables.items():
        if df is None or not len(df):
            continue
        data = _encoded(_typed(df.assign(trace_id=tid), columns(table)), fmt)
        put(os.path.join(outdir, table, f"{tid}.{fmt}"), data, done)
    return done


def put(out, data, done, keep=False):
    """Write data to out whole (through a .partial file renamed when whole) unless out already
    holds exactly it; note in done (a Written) which of the three it was. keep: a file the user
    named, the one that was there moved to NAME~ first (a dataset's own files are replaced)."""
    there = os.path.lexists(out)
    if there and _same(out, data):
        done.kept.append(out)
        return
    if there and keep:
        from ..commandio import keep_old

        done.backups.append(keep_old(out))
        there = False
    d = os.path.dirname(out) or "."
    tmp = os.path.join(d, f".{os.path.basename(out)}.partial")
    try:
        os.makedirs(d, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        # ours, in our own dataset folder, named by the trace's id: what was there is this
        # trace's file as another version or a cut-short run wrote it, never a user's file
        os.replace(tmp, out)
    except OSError as e:
        raise ExportError(
            f"cannot write {_shown(out)}: {e.strerror or e} ("
            + (
                "free space there or export to another -o DIR; "
                if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
                else ""
            )
            + f"the {len(done)} files written before it are whole, and "
            "exporting again adds the rest)"
        ) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    (done.replaced if there else done.new).append(out)


def _shown(path):
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def write(analysis, outdir, fmt, finding=None):
    """Write one file per table into the dataset at outdir, named by the trace's id
    (pipeline.trace_id, in analysis.info); return the Written: which files are new, which
    replaced and which were already what this export writes."""
    _check_format(fmt)
    tid = analysis.info["trace_id"]
    if fmt == "chrome-trace":  # one Trace Event JSON file per trace, not tables
        from . import chrometrace

        done = Written()
        put(
            os.path.join(outdir, "chrome-trace", f"{tid}.json"),
            chrometrace.document(analysis),
            done,
        )
        return done
    common = {
        "trace": _shown(analysis.info["path"]),
        "kernel": analysis.kernel,
        "nfs": analysis.run.get("nfs"),
    }
    tables = {
        t: df.assign(**common) for t, df in frames(analysis, finding).items() if df is not None
    }
    return _write_tables(tables, lambda t: TRACE_COLUMNS + SCHEMA[t], tid, outdir, fmt)


def one_file(output, fmt, count):
    """Whether export writes one file at output (or standard output for -) rather than a
    dataset folder: chrome-trace of one trace, where output names no directory (an existing
    one, or a name ending in /). csv and parquet tables are a file per table, always in a
    folder; an ExportError where output cannot hold what fmt makes."""
    folder = output.endswith("/") or os.path.isdir(output)
    if fmt == "chrome-trace" and not folder and count == 1:
        return True
    if output == "-":
        raise ExportError(
            f"-o - (standard output) holds one chrome-trace document; {fmt} "
            + (
                f"of {count} traces is {count} files"
                if fmt == "chrome-trace"
                else "is a file per table"
            )
            + ": name a directory"
        )
    if folder:
        return False
    if os.path.lexists(output):
        raise ExportError(
            f"{_shown(output)} is a file, and {fmt} tables go into a directory: name one"
        )
    if fmt == "chrome-trace":
        raise ExportError(
            f"chrome-trace of {count} traces is a file per trace: name a directory "
            f"(-o {_shown(output)}/), or export one trace to one file"
        )
    return False


def write_one(analysis, output):
    """chrome-trace of one trace into the file output (- : standard output), written whole (a
    file there that differs goes to NAME~ first, commandio.keep_old); the Written, or None for
    standard output."""
    from . import chrometrace

    data = chrometrace.document(analysis)
    if output == "-":
        import sys

        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        return None
    done = Written()
    put(output, data, done, keep=True)
    return done


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


def write_dcache(results, markers, tid, shown, outdir, fmt):
    """Write a dcache run's tables (dcache_frames) into the dataset at outdir; tid is its trace
    file's id (pipeline.trace_id), shown the path the user gave. Returns the Written."""
    _check_format(fmt)
    if fmt == "chrome-trace":
        raise ExportError(
            f"{_shown(shown)} is a dcache run: chrome-trace shows listings; use csv or parquet"
        )
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
    return _write_tables(tables, lambda t: RUN_COLUMNS + DCACHE_SCHEMA[t], tid, outdir, fmt)
