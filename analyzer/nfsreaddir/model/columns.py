"""A table as numpy columns: what the readdir tables are (model/tables) and what the model walks,
without pandas (about 0.5 s and 140 MB to import: most of what `check` of a small trace cost).
A pandas DataFrame is made from one (to_frame) only where a table, a plot or an export is made.

A column's values are those the DataFrame holds: integers and floats as numpy arrays (a value
missing from an integer column makes it float, NaN where missing, as pandas makes it), strings
as object arrays (NaN where missing), and the integer columns that must stay exact where values
are missing (typed "Int64" or "UInt64", pandas' nullable types) as object arrays of ints, None
where missing. A column typed "str" is pandas' string column even where it has no row.
"""

import numpy as np


class Columns:
    """{name: numpy column} of one length, in order; types: {name: "Int64", "UInt64" or "str"}
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
        return np.fromiter((v is None or v != v for v in col), dtype=bool, count=len(col))
    return np.zeros(len(col), dtype=bool)


def inferred(values):
    """A column of a list of values, of the type pandas infers for it: integers int64, strings
    (NaN where missing) object, a mix of the two object."""
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.int64)
    return np.array(values + [None], dtype=object)[:-1]


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
        kinds = {t.types.get(c) for t in tables if c in t.cols}
        if kinds == {"str"}:
            types[c] = "str"
        kinds.discard("str")
        kinds.discard(None)
        if kinds:
            (types[c],) = kinds
            cols[c] = np.concatenate(
                [
                    t.cols[c].astype(object) if c in t.cols else np.full(len(t), None, object)
                    for t in tables
                ]
            )
        else:
            cols[c] = _joined([(t.cols.get(c), len(t)) for t in tables])
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
