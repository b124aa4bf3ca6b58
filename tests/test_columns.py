"""The readdir tables as numpy columns (model/columns) hold what pandas' frames held: joined
tables get the column types pd.concat gives (a missing value makes integers float, a nullable
integer joined with floats is Float64), so that the frames made of them for tables, plots and
exports, and every answer read from them, stay what they were. pandas is the oracle here."""

import numpy as np
import pandas as pd
import pytest

from nfsreaddir.model.columns import Columns, concat, fill, groups, isna, known


def ints(*v, dtype=np.int64):
    return np.array(v, dtype=dtype)


def nullable(kind, *v):
    """A column of pandas' nullable type `kind`, as Columns holds one: ints, None missing."""
    out = np.empty(len(v), dtype=object)
    out[:] = list(v)
    return out, kind


def table(**cols):
    types = {c: v[1] for c, v in cols.items() if isinstance(v, tuple)}
    return Columns({c: v[0] if isinstance(v, tuple) else v for c, v in cols.items()}, types)


CASES = {
    "an integer column some part lacks is float": [
        table(ts=ints(1, 2), x=ints(5, 6)),
        table(ts=ints(3)),
    ],
    "int64 joined with uint64 is float": [
        table(x=ints(-1)),
        table(x=ints(2**63 + 5, dtype=np.uint64)),
    ],
    "a string column some part lacks": [
        table(ts=ints(1), s=np.array(["a"], dtype=object)),
        table(ts=ints(2)),
    ],
    "a nullable integer some part lacks stays exact": [
        table(ts=ints(1), f=nullable("UInt64", 2**64 - 1)),
        table(ts=ints(2)),
    ],
    "a nullable integer joined with floats is Float64": [
        table(ts=ints(1, 2), pos=nullable("Int64", 7, None)),
        table(ts=ints(3), pos=np.array([np.nan])),
    ],
    "a nullable integer joined with a plain one stays nullable": [
        table(x=nullable("UInt64", 3)),
        table(x=ints(4, dtype=np.uint64)),
    ],
    "Float64 joined again": [
        concat([table(ts=ints(1), c=nullable("UInt64", 1)), table(ts=ints(2), c=np.array([0.5]))]),
        table(ts=ints(3)),
    ],
    "a number column joined with text is objects": [
        table(r=np.array([1, "x"], dtype=object)),
        table(r=np.array(["y"], dtype=object)),
    ],
}


@pytest.mark.parametrize("name", CASES)
def test_joined_tables_are_what_pandas_concat_makes(name):
    parts = CASES[name]
    want = pd.concat([p.to_frame() for p in parts], ignore_index=True)
    pd.testing.assert_frame_equal(concat(parts).to_frame(), want, check_exact=True)


def test_a_string_set_on_no_row_is_a_string_column():
    """pandas makes a scalar string set on an empty frame a string column; the tables of an
    event that never fired must give the same frame."""
    t = Columns({"ts": np.zeros(0, dtype=np.int64)})
    fill(t, "source", "nfs:nfs_readdir_enter")
    want = pd.DataFrame({"ts": np.zeros(0, dtype=np.int64)})
    want["source"] = "nfs:nfs_readdir_enter"
    pd.testing.assert_frame_equal(t.to_frame(), want)


def test_missing_values_and_groups_as_pandas_sees_them():
    col = np.array([3, np.nan, None, 3, "a", pd.NA, 5], dtype=object)
    assert isna(col).tolist() == pd.isna(pd.Series(col)).tolist()
    assert known(col).tolist() == pd.Series(col).dropna().tolist()
    pid = np.array([7, 5, 7, 9, 5])
    got = [(k, rows.tolist()) for k, rows in groups(pid)]
    want = [(k, list(g.index)) for k, g in pd.Series(pid).groupby(pid, sort=False)]
    assert got == want


def test_rows_sorted_by_keys_keep_their_order_at_ties():
    t = Columns({"ts": ints(2, 1, 2, 1), "after": np.array([True, False, False, False])})
    t["n"] = ints(0, 1, 2, 3)
    want = t.to_frame().sort_values(["ts", "after"], kind="stable")["n"].tolist()
    assert t.sorted_by("ts", "after")["n"].tolist() == want == [1, 3, 2, 0]
