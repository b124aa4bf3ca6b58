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
from .payload import int_of

_BAREHEX_RE = re.compile(r"^[0-9a-fA-F]+$")


def typed_column(values, name, bad=None):
    """Typed column from a list of str values (None = missing). A field is an integer field
    when most of its values are integers; then a value that is not one, or does not fit in 64
    bits, is damage: it becomes missing and its index goes to `bad` (a list), never turning
    the whole column into text."""
    present = [v for v in values if v is not None]
    ints = [int_of(v) for v in present]
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
    full: list[int | None] = []
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


# The last value of a line cut short, followed by the start of the next field's name
# ("301930967826919994 page_in"): the value is whole.
_CUT_NAME_RE = re.compile(r"^(\S+)\s+[A-Za-z_]\w*$")


def cut_short(r):
    """{row: its last field} of one event's rows ``r`` whose line was cut short (cut at a
    column, or garbled): a row with fewer fields than the event's longest line, the ones it has
    the same, in the same order. Its last field's value may be cut too (damage where it is
    read), unless something followed it after a space (``r["whole"]``: "0xa (INVALID_D"); where
    that is the start of the next field's name, it is kept without it (in ``r``)."""
    fields = r["f"]
    if not fields:
        return {}
    longest = max(fields, key=len)
    names = list(longest)
    out = {}
    for k, d in enumerate(fields):
        if not d:
            continue
        last = next(reversed(d))
        m = _CUT_NAME_RE.match(d[last])
        if m and int_of(m.group(1)) is not None:
            d[last] = m.group(1)  # (every line of the event may be cut there)
        elif len(d) < len(names) and names[len(d) - 1] == last and not r["whole"][k]:
            out[k] = last  # (a shorter line of another form is no cut)
    return out


def event_frame(name, r, flist, typed, damaged, cut=None):
    """The frame of event ``name``'s rows ``r`` with fields ``flist``, in time order (ties in
    the text's order); a field missing or not a 64-bit integer in a row, or the last field of
    a line cut short (``cut``, of :func:`cut_short`), goes onto ``damaged``."""
    cols = {
        "ts": np.array(r["ts"], dtype=np.int64),
        "cpu": np.array(r["cpu"], dtype=np.int64),
        "pid": np.array(r["pid"], dtype=np.int64),
        "comm": pd.array(r["comm"], dtype="str"),
    }
    for f in flist:
        vals = [d.get(f) for d in r["f"]]
        bad = [k for k, v in enumerate(vals) if v is None]
        short = [k for k, last in (cut or {}).items() if last == f]
        cols[field_column(f)] = (
            typed_column(vals, f, bad) if typed else pd.array(vals, dtype=object)
        )
        for k in sorted(set(bad) | set(short)):
            v = vals[k]
            if v is None:
                what = f"has no {f}="
            elif k in short:
                what = f"is cut short: its {f}={v!r} may be cut too"
            else:
                what = f"{f}={v!r} is not a 64-bit integer"
            damaged.append(
                {
                    "line": r["line"][k],
                    "from": r["ts"][k],
                    "to": r["ts"][k],
                    "pid": r["pid"][k],
                    "event": name,
                    "field": f,
                    "what": f"line {r['line'][k]}: {name} {what}",
                }
            )
    df = pd.DataFrame(cols)
    if len(df):
        # Ties by line: trace-cmd prints the events in the order of their nanoseconds (a
        # tie: the lower CPU first; on one CPU, as its buffer holds them), the order the
        # trace.dat reader gives, which the microseconds the text shows may tie.
        order = np.lexsort((np.asarray(r["line"]), df["ts"].to_numpy()))
        df = df.iloc[order].reset_index(drop=True)
    return df
