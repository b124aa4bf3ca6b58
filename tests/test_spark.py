"""The Parquet exports of every fixture, read by Spark (local mode, on Debian's JRE) and by
DuckDB from the same files: the README's query gives the same rows in both, and every table
the same values. Spark has no unsigned 64-bit type: it reads the exports' UINT64 columns
(cookies, fileids, change attributes, struct file addresses) as decimal(20,0), which holds each
of them exactly, and the values above 2^63 in the fixtures (kernel addresses) are compared too.

One Spark session serves the file; it starts a JVM, so the file is `slow` (make test)."""

import collections
import decimal
import glob
import math
import os
import re

import pytest

from conftest import FIXTURES, TOP, installed, run_cli
from nfsreaddir.present import schema

pytestmark = [
    pytest.mark.slow,
    # pyspark warns on import that it does not support pandas 3 fully; no pandas crosses
    # into Spark here (rows come back through collect()).
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas"),
]

UINT64 = {
    table: {c for c, dtype in schema.TRACE_COLUMNS + cols if dtype == "UInt64"}
    for table, cols in schema.SCHEMA.items()
}


def readme_query():
    """The SQL of the README's section on many traces: the query a user copies."""
    with open(os.path.join(TOP, "README.md")) as f:
        section = f.read().split("### Many traces in one engine\n", 1)[1].split("\n### ", 1)[0]
    (sql,) = re.findall(r"```sql\n(.*?)```", section, re.S)
    return sql


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Every fixture with READDIRs or dcache phases exported into one folder, as a site
    collects them: results directories (their traces), loose traces, and the captures."""
    out = tmp_path_factory.mktemp("fleet") / "tables"
    inputs = [
        d
        for d in sorted(glob.glob(os.path.join(FIXTURES, "*", "")))
        if glob.glob(os.path.join(d, "*.dat")) and not os.path.basename(d[:-1]).startswith("kmem")
    ] + sorted(glob.glob(os.path.join(FIXTURES, "*", "*.pcap*")))
    run_cli("export", *inputs, "-o", out, "--format", "parquet", check=0)
    return out


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """A local Spark session whose scratch space is the test's own."""
    installed("java")
    from pyspark.sql import SparkSession

    tmp = tmp_path_factory.mktemp("spark")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # no lookup of the host's name
        session = (
            SparkSession.builder.master("local[1]")
            .appName("nfs-readdir-export")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            # A few thousand rows: one partition after a shuffle, not 200.
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.local.dir", str(tmp))
            .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
            # A short run: the JVM's quick compiler and collector start fastest.
            .config(
                "spark.driver.extraJavaOptions",
                f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData -Djava.io.tmpdir={tmp}",
            )
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        try:
            yield session
        finally:
            session.stop()


def views(out, tables, duck, spark):
    """Each table as a view of its name in both engines, over the same glob of its files."""
    for t in tables:
        files = os.path.join(out, t, "*.parquet")
        duck.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{files}')")
        spark.read.parquet(files).createOrReplaceTempView(t)


def plain(v):
    """A value as Python compares it across engines: Spark's decimal(20,0) as the integer it
    holds (exactly, or the test fails), NaN as a word (NaN equals nothing)."""
    if isinstance(v, decimal.Decimal):
        assert v == v.to_integral_value(), v
        return int(v)
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def test_the_readme_query_gives_the_same_rows_in_spark_and_duckdb(dataset, spark):
    import duckdb

    sql = readme_query()
    duck = duckdb.connect()
    views(dataset, ("listings", "rpc"), duck, spark)
    want = duck.execute(sql).fetchall()
    got = spark.sql(sql).collect()
    assert [tuple(map(plain, r)) for r in got] == want
    assert [d[0] for d in duck.description] == spark.sql(sql).columns
    # The figures that matter are there: restarts on 5.10, none on 6.1, and cookies past
    # 2^53 (a double in between would have rounded them).
    cols = [d[0] for d in duck.description]
    rows = [dict(zip(cols, r, strict=True)) for r in want]
    assert any(r["kernel"].startswith("5.10.") and r["restarts"] for r in rows if r["kernel"])
    assert any(r["kernel"].startswith("6.1.") for r in rows if r["kernel"])
    assert any(r["max_cookie"] and r["max_cookie"] > 2**53 for r in rows)


def test_every_table_holds_the_same_values_in_spark_and_duckdb(dataset, spark):
    import duckdb

    tables = sorted(os.listdir(dataset))
    assert {"listings", "rpc", "calls", "dcache_runs", "dcache_samples"} <= set(tables)
    duck = duckdb.connect()
    views(dataset, tables, duck, spark)
    above_signed = 0
    for t in tables:
        df = spark.table(t)
        types = dict(df.dtypes)
        assert {c for c, ty in types.items() if ty == "decimal(20,0)"} == UINT64.get(t, set()), t
        want = duck.execute(f"SELECT * FROM {t}").fetchall()
        assert [d[0] for d in duck.description] == df.columns, t
        got = [tuple(map(plain, r)) for r in df.collect()]
        assert len(got) == len(want) and collections.Counter(got) == collections.Counter(want), t
        idx = [df.columns.index(c) for c in UINT64.get(t, ())]
        above_signed += sum(1 for r in want for i in idx if r[i] is not None and r[i] >= 2**63)
    # struct file addresses (calls.file) lie above 2^63: the unsigned range itself survived.
    assert above_signed
