"""A table as numpy columns: what the readdir tables are (model/tables) and what the model walks,
without pandas (about 0.5 s and 140 MB to import: most of what `check` of a small trace cost).
A pandas DataFrame is made from one (to_frame) only where a table, a plot or an export is made.

A column's values are those the DataFrame holds: integers and floats as numpy arrays (a value
missing from an integer column makes it float, NaN where missing, as pandas makes it), strings
as object arrays (NaN where missing), and the integer columns that must stay exact where values
are missing (typed "Int64" or "UInt64", pandas' nullable types; "Float64" where one is joined
with floats) as object arrays of numbers, None where missing. A column typed "str" is pandas'
string column even where it has no row.
"""

import numpy as np


class Columns:
    """{name: numpy column} of one length, in order; types: {name: "Int64", "UInt64",
    "Float64" or "str"}
    of the columns that are of that pandas type in the DataFrame. table[name] is a column,
    table[rows] (a mask or positions) the table of those rows."""

    __slots__ = ("cols", "types")

    def __init__(self, cols=None, types=None):
        self.cols = dict(cols or {})
        self.types = dict(types or {})

    def __len__(self):
        return len(next(iter(self.cols.values()))) if self.cols else 0

    def __contains__(self, name):
        return name in self.cols

    @property
    def columns(self):
        return list(self.cols)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.cols[key]
        return Columns({c: v[key] for c, v in self.cols.items()}, self.types)

    def __setitem__(self, name, values):
        self.cols[name] = values

    def sorted_by(self, *keys):
        """The rows in the order of the keys (the first the most significant), stable."""
        return self[np.lexsort([self.cols[k] for k in reversed(keys)])]

    def to_frame(self):
        """The pandas DataFrame of the table (its index 0..n-1)."""
        import pandas as pd

        return pd.DataFrame(
            {
                c: pd.array(list(v), dtype=self.types[c]) if c in self.types else v
                for c, v in self.cols.items()
            },
            index=pd.RangeIndex(len(self)),
        )


def isna(col):
    """Per value, whether it is missing (NaN or None)."""
    col = np.asarray(col)
    if col.dtype.kind == "f":
        return np.isnan(col)
    if col.dtype.kind == "O":
        return np.fromiter((_missing(v) for v in col), dtype=bool, count=len(col))
    return np.zeros(len(col), dtype=bool)


def _missing(v):
    """Whether a value of an object column is missing: None, NaN, or pandas' NA (which is of
    no number type and is not itself)."""
    if v is None or isinstance(v, str):
        return v is None
    if isinstance(v, (int, np.integer)):
        return False
    return bool(v != v) if isinstance(v, (float, np.floating)) else type(v).__name__ == "NAType"


def inferred(values):
    """A column of a list of values, of the type pandas infers for it: integers int64, strings
    (NaN where missing) object, a mix of the two object."""
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.int64)
    return objects(values)


def objects(values):
    """An object column of the values as they are."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def fill(table, name, value):
    """Set a column of the table to one value, as pandas broadcasts a scalar (a string: a
    string column, even of no row)."""
    if isinstance(value, str):
        table[name] = np.full(len(table), value, dtype=object)
        table.types[name] = "str"
    else:
        table[name] = np.full(len(table), value)


def _joined(parts):
    """One column from parts' (values or None where the part lacks it, length), as pandas'
    concat joins them: a part that lacks it gives missing values, which make integers float."""
    have = [v for v, _ in parts if v is not None]
    lacking = len(have) < len(parts)
    if any(v.dtype.kind == "O" for v in have):
        dtype = np.dtype(object)
    else:
        dtype = have[0].dtype
        for v in have[1:]:
            if v.dtype != dtype:
                # pandas: int64 with uint64 is float64, as numpy has it
                dtype = np.result_type(dtype, v.dtype)
        if lacking and dtype.kind in "iub":
            dtype = np.dtype(np.float64)
    return np.concatenate(
        [v.astype(dtype) if v is not None else np.full(n, np.nan, dtype=dtype) for v, n in parts]
    )


def concat(tables):
    """The tables one after the other, their columns joined in the order they first come, as
    pandas' concat (ignore_index) makes them."""
    names = list(dict.fromkeys(c for t in tables for c in t.cols))
    cols, types = {}, {}
    for c in names:
        have = [t for t in tables if c in t.cols]
        kinds = {t.types.get(c) for t in have}
        nullable = kinds & {"Int64", "UInt64", "Float64"}
        if kinds == {"str"}:
            types[c] = "str"
        if not nullable:
            cols[c] = _joined([(t.cols.get(c), len(t)) for t in tables])
            continue
        values = np.concatenate(
            [t.cols[c].astype(object) if c in t.cols else np.full(len(t), None) for t in tables]
        )
        plain = {t.cols[c].dtype.kind for t in have if t.types.get(c) not in nullable}
        if "O" in plain or "str" in kinds:
            cols[c] = values  # (a number column joined with text: objects)
        elif len(nullable) > 1 or "f" in plain or "Float64" in nullable:
            # pandas: a nullable integer joined with floats, or a signed with an unsigned
            cols[c] = objects([None if _missing(v) else float(v) for v in values.tolist()])
            types[c] = "Float64"
        else:
            cols[c], types[c] = values, nullable.pop()
    return Columns(cols, types)


def isin(col, allowed):
    """Per value, whether it is one of the allowed ones."""
    allowed = set(allowed)
    return np.fromiter((v in allowed for v in col.tolist()), dtype=bool, count=len(col))


def groups(col):
    """(value, its rows in order) of each value of the column, in the order each first comes
    (pandas' groupby(sort=False)); missing values make no group."""
    keys = col.tolist()
    out: dict = {}
    for i, k in enumerate(keys):
        if k is not None and k == k:
            out.setdefault(k, []).append(i)
    return [(k, np.asarray(rows, dtype=np.int64)) for k, rows in out.items()]


def known(col):
    """The column's values that are not missing, in order."""
    return col[~isna(col)]


def frame(table):
    """A table as a pandas DataFrame, for what shows or exports it: Columns made one; a
    DataFrame (a capture's tables are frames) or None as it is."""
    return table.to_frame() if isinstance(table, Columns) else table
