"""`nfs-readdir export`: the canonical tables of a trace as CSV or Parquet files."""

import os

from . import events, markers


def write(trace, path, outdir, fmt):
    """Write one file per non-empty canonical table; return the paths written."""
    tables = events.load(trace)
    marks = markers.parse(tables["markers"])
    tables["samples"] = marks.samples
    stem = os.path.splitext(os.path.basename(path))[0]
    os.makedirs(outdir, exist_ok=True)
    written = []
    for name in ("rpc", "invalidations", "revalidations", "ranges", "markers", "samples"):
        df = tables.get(name)
        if df is None or df.empty:
            continue
        out = os.path.join(outdir, f"{stem}.{name}.{fmt}")
        if fmt == "csv":
            df.to_csv(out, index=False)
        else:
            # Parquet has no unsigned-64 trouble, but object columns must be strings.
            df.astype({c: str for c in df.columns if df[c].dtype == object}).to_parquet(
                out, index=False)
        written.append(out)
    return written
