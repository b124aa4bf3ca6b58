"""Typed columns and frames of ``trace-cmd report`` text: which fields are integers, and the
time-ordered frame of an event's rows, with the values that are not what their column holds
marked as damage.

Integers are decimal, ``0x`` hex, or (a whole column of) bare hex digits that
contain a-f or a leading zero, as ``-R`` prints fields whose print format uses
``%x``.
"""

import re

import numpy as np
import pandas as pd

from .base import field_column

_INT_RE = re.compile(r"^-?\d+$")
_HEX_RE = re.compile(r"^-?0[xX][0-9a-fA-F]+$")
_BAREHEX_RE = re.compile(r"^[0-9a-fA-F]+$")


def _int_of(v):
    """The integer a report value stands for, or None."""
    if v == "(nil)":  # printk's %p of a NULL pointer (kfree's ptr=(nil)), a 0 in the record
        return 0
    if _INT_RE.match(v):
        return int(v)
    if _HEX_RE.match(v):
        return int(v, 0)
    return None


def typed_column(values, name, bad=None):
    """Typed column from a list of str values (None = missing). A field is an integer field
    when most of its values are integers; then a value that is not one, or does not fit in 64
    bits, is damage: it becomes missing and its index goes to `bad` (a list), never turning
    the whole column into text."""
    present = [v for v in values if v is not None]
    ints = [_int_of(v) for v in present]
    n_int = sum(i is not None for i in ints)
    if (
        present
        and n_int < len(present)
        and all(_BAREHEX_RE.match(v) for v in present)
        and any(re.search(r"[a-fA-F]", v) or (len(v) > 1 and v[0] == "0") for v in present)
    ):
        ints = [int(v, 16) for v in present]  # -R prints %x fields as bare hex
        n_int = len(ints)
    if not present or n_int * 2 < len(present) or (n_int < len(present) and n_int < 2):
        return pd.array(values, dtype="str") if len(values) else pd.array([], dtype="str")
    ok = [i for i in ints if i is not None and -(1 << 63) <= i < (1 << 64)]
    signed = not ok or min(ok) < 0 or max(ok) < (1 << 63)
    lo, hi = (-(1 << 63), 1 << 63) if signed else (0, 1 << 64)
    it = iter(ints)
    full = []
    for k, v in enumerate(values):
        if v is None:
            full.append(None)
            continue
        i = next(it)
        if i is None or not lo <= i < hi:
            if bad is not None:
                bad.append(k)
            i = None
        full.append(i)
    if all(x is not None for x in full):
        return np.array(full, dtype=np.int64 if signed else np.uint64)
    return pd.array(full, dtype="Int64" if signed else "UInt64")


def event_frame(name, r, flist, typed, damaged):
    """The frame of event ``name``'s rows ``r`` with fields ``flist``, in time order (ties by
    cpu); a field missing or not a 64-bit integer in a row goes onto ``damaged``."""
    cols = {
        "ts": np.array(r["ts"], dtype=np.int64),
        "cpu": np.array(r["cpu"], dtype=np.int64),
        "pid": np.array(r["pid"], dtype=np.int64),
        "comm": pd.array(r["comm"], dtype="str"),
    }
    for f in flist:
        vals = [d.get(f) for d in r["f"]]
        bad = [k for k, v in enumerate(vals) if v is None]
        cols[field_column(f)] = (
            typed_column(vals, f, bad) if typed else pd.array(vals, dtype=object)
        )
        for k in sorted(set(bad)):
            v = vals[k]
            damaged.append(
                {
                    "line": r["line"][k],
                    "from": r["ts"][k],
                    "to": r["ts"][k],
                    "pid": r["pid"][k],
                    "event": name,
                    "field": f,
                    "what": f"line {r['line'][k]}: {name} "
                    + (f"has no {f}=" if v is None else f"{f}={v!r} is not a 64-bit integer"),
                }
            )
    df = pd.DataFrame(cols)
    if len(df):
        order = np.lexsort((df["cpu"].to_numpy(), df["ts"].to_numpy()))
        df = df.iloc[order].reset_index(drop=True)
    return df
