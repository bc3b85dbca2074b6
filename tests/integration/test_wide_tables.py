"""Wide tables: 1,000 columns through every DML statement and MV shape, each result equal to DuckDB's.
Nothing sparkwave builds may grow in depth with the column count (a left-deep OR over every column
overflowed the JVM's stack at 300)."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import sparkwave
from sparkwave import DataError, QueryCanceledError, SqlError
from sparkwave.core.limits import MAX_SHOW_ROWS
from tests.oracle import Model, multiset, rows_of, to_sql

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 1000
TYPES = [("int", "INTEGER"), ("varchar", "VARCHAR"), ("double precision", "DOUBLE"), ("bigint", "BIGINT"),
         ("decimal(10, 2)", "DECIMAL(10, 2)"), ("boolean", "BOOLEAN")]


def _columns(prefix: str) -> list[tuple[str, str, str]]:
    return [(f"{prefix}{i}", *TYPES[i % len(TYPES)]) for i in range(WIDTH)]


def _value(i: int, row: int):
    if (i + row) % 7 == 0:
        return None
    return {"int": row * 10 + i % 5, "varchar": f"v{row}-{i}", "double precision": row + 0.5,
            "bigint": row * 1_000_000_007 + i, "decimal(10, 2)": Decimal(f"{row}.{i % 100:02d}"),
            "boolean": (i + row) % 2 == 0}[TYPES[i % len(TYPES)][0]]


def _rows(rows: range) -> list[tuple]:
    return [(r, *[_value(i, r) for i in range(WIDTH)]) for r in rows]


def test_a_1000_column_table_through_dml_and_mvs_equals_duckdb(session):
    model = Model()
    for table, key, prefix in (("w", "k", "c"), ("x", "j", "d")):
        cols = _columns(prefix)
        session.sql(f"CREATE TABLE {table} ({key} int, {', '.join(f'{n} {t}' for n, t, _ in cols)}, "
                    f"PRIMARY KEY ({key}))")
        model.table(table, f"{key} INTEGER, " + ", ".join(f"{n} {d}" for n, _, d in cols),
                    [key] + [n for n, _, _ in cols], [key])
    every = ", ".join(f"c{i}" for i in range(WIDTH))
    mvs = [("m_star", "SELECT * FROM w"),
           ("m_project", f"SELECT k, {every}, c0 + 1 AS c0_next, c1 || '!' AS c1_bang FROM w"),
           ("m_filter", "SELECT * FROM w WHERE c0 > 15"),
           ("m_agg", "SELECT c5, count(*) AS n, sum(c0) AS s0, max(c3) AS m3, min(c1) AS m1 FROM w GROUP BY c5"),
           ("m_join", "SELECT * FROM w JOIN x ON w.k = x.j")]
    for name, sql in mvs:
        session.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        model.view(name, sql)

    epochs = [
        [("insert", "w", _rows(range(1, 5))), ("insert", "x", _rows(range(2, 6)))],
        [("update", "w", {"c0": "c0 + 7", "c1": "'changed'", "c999": "NULL"}, "c2 > 2"),  # by predicate
         ("update", "w", {"c6": "-1", f"c{WIDTH - 2}": "c4 * 2"}, "k = 1"),  # by key
         ("update", "x", {"d3": "d3 + 1"}, "j = 3")],
        [("delete", "w", "k = 2"), ("delete", "x", "d0 > 45"), ("insert", "w", _rows(range(6, 8)))],
    ]
    for statements in epochs:
        for statement in statements:
            session.sql(to_sql(statement))
        model.apply_epoch(statements)
        epoch = session.flush()
        for name in ["w", "x", *(n for n, _ in mvs)]:
            got, want = multiset(rows_of(session.table(name, as_of=epoch))), multiset(model.rows(name))
            assert got == want, f"{name} differs from DuckDB at epoch {epoch}: extra {got - want}, missing {want - got}"
    assert len(session.table("m_join").columns) == 2 * WIDTH + 2


def test_dml_over_a_1000_column_table_too_big_for_the_driver_runs_in_spark_and_equals_duckdb(session):
    """300 rows of 1,000 columns are more than the driver reads itself (1 MiB): UPDATE and DELETE scan
    the table with Spark and stage their rows with a Spark write."""
    model = Model()
    cols = _columns("c")
    session.sql(f"CREATE TABLE w (k int, {', '.join(f'{n} {t}' for n, t, _ in cols)}, PRIMARY KEY (k))")
    model.table("w", "k INTEGER, " + ", ".join(f"{n} {d}" for n, _, d in cols), ["k"] + [n for n, _, _ in cols], ["k"])
    rows = _rows(range(1, 301))
    arrow = {"int": pa.int32(), "varchar": pa.string(), "double precision": pa.float64(), "bigint": pa.int64(),
             "decimal(10, 2)": pa.decimal128(10, 2), "boolean": pa.bool_()}
    schema = pa.schema([("k", pa.int32()), *[(n, arrow[t]) for n, t, _ in cols]])
    session.insert("w", pa.table([pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)], schema=schema))
    model.apply_epoch([("insert", "w", rows)])
    session.flush()
    for statements in ([("update", "w", {"c0": "c0 + 1", "c1": "'u'", "c997": "c3 - 1"}, "c2 > 100")],
                       [("delete", "w", "c3 < 50000000000")]):
        for statement in statements:
            session.sql(to_sql(statement))
        model.apply_epoch(statements)
        epoch = session.flush()
        assert multiset(rows_of(session.table("w", as_of=epoch))) == multiset(model.rows("w"))
    assert session.table("w").count() == 258  # the DELETE removed the rows of k < 50 whose c3 is not NULL


MiB = 1024 * 1024


def test_a_value_over_the_limit_is_refused_at_insert_and_update_and_one_under_it_is_kept(session):
    session.sql("CREATE TABLE t (k int, v varchar, b bytea, PRIMARY KEY (k)); INSERT INTO t VALUES (1, 'a', NULL)")
    session.flush()
    big = "x" * (17 * MiB)
    limit = r"larger than the limit of 16,777,216 bytes \(16 MiB\) on one text or bytea value"
    with pytest.raises(DataError, match=rf"INSERT INTO t row 1: a value of 17,825,792 bytes for column 'v' of table "
                                        rf"'t' is {limit}"):
        session.sql(f"INSERT INTO t VALUES (2, '{big}', NULL)")
    with pytest.raises(DataError, match=f"UPDATE t: a value of 17,825,792 bytes for column 'v' .*{limit}"):
        session.sql(f"UPDATE t SET v = '{big}' WHERE k = 1")
    with pytest.raises(DataError, match=f"UPDATE t: a value of 17,825,793 bytes for column 'v' .*{limit}"):
        session.sql(f"UPDATE t SET v = '{'x' * (8 * MiB)}' || '{'x' * (9 * MiB)}' || v WHERE k = 1")  # by Spark
    grown = r"repeat\(\) would make a value of more than 16777216 bytes, the limit of one value"
    with pytest.raises(DataError, match=f"UPDATE .*: {grown}"):  # stopped before Spark builds it
        session.sql("UPDATE t SET v = repeat('x', 17 * 1024 * 1024) || v WHERE k = 1")
    with pytest.raises(DataError, match=f"INSERT .*: {grown}"):
        session.sql("INSERT INTO t VALUES (3, repeat('y', 17 * 1024 * 1024), NULL)")
    with pytest.raises(DataError, match=f"insert into t: a value of 17,825,792 bytes for column 'b' .*{limit}"):
        session.insert("t", pa.table({"k": [4], "b": [b"\0" * (17 * MiB)]}))
    session.flush()
    assert rows_of(session.table("t")) == [(1, "a", None)]  # nothing was staged

    fits = "é" * (15 * MiB // 2)  # 15 MiB of UTF-8 in half as many characters
    session.sql(f"INSERT INTO t VALUES (5, '{fits}', NULL); UPDATE t SET v = repeat('z', 15 * 1024 * 1024) WHERE k = 1")
    session.insert("t", pa.table({"k": [6], "b": [b"\xcd" * (15 * MiB)]}))
    session.flush()
    assert sorted(rows_of(session.table("t"))) == [(1, "z" * (15 * MiB), None), (5, fits, None),
                                                   (6, None, b"\xcd" * (15 * MiB))]


def test_a_statement_text_over_the_limit_is_refused_before_it_is_parsed(session):
    with pytest.raises(SqlError, match=r"the SQL text is 67,108,881 bytes, more than the limit of 67,108,864 "
                                       r"bytes \(64 MiB\)"):
        session.sql("SELECT 1 AS x -- " + "x" * (64 * MiB))


def test_statement_timeout_cancels_a_slow_query_and_the_session_goes_on(session):
    session.sql("CREATE TABLE t (k bigint, PRIMARY KEY (k))")
    session.insert("t", pa.table({"k": pa.array(range(3000), pa.int64())}))
    session.flush()
    slow = "SELECT count(*) AS n FROM t a, t b, t c WHERE a.k + b.k + c.k > 0"  # 2.7e10 rows: minutes
    with pytest.raises(SqlError, match=r"setting statement_timeout must be an integer from 0 to 2147483647 "
                                       r"\(milliseconds; 0: no timeout\)"):
        session.sql("SET statement_timeout = -1")
    session.sql("SET statement_timeout = 500")
    with pytest.raises(QueryCanceledError, match="canceling statement due to statement timeout"):
        list(session.fetch(session.sql(slow)))
    session.sql("SET statement_timeout = 600000")  # what finishes well within its timeout is untouched
    assert list(session.fetch(session.sql("SELECT count(*) AS n FROM t"))) == [[(3000,)]]
    session.sql("INSERT INTO t VALUES (-1)")  # DML and the pipeline go on
    session.flush()
    assert session.table("t").count() == 3001


def test_the_cli_streams_a_result_larger_than_the_driver_may_collect(spark, tmp_path):
    """The child's Spark may bring at most 1 MiB of results to the driver per job; the 200k rows are
    about 8 MiB in 20 files (a partition each): only a CLI that fetches a partition at a time prints them."""
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k bigint, v varchar) APPEND ONLY")
        for part in range(20):
            keys = range(part * 10_000, (part + 1) * 10_000)
            s.insert("t", pa.table({"k": pa.array(keys, pa.int64()), "v": [f"row {k:08d} of the table" for k in keys]}))
            s.flush()
    conf = " ".join(f"--conf spark.{k}" for k in ("driver.maxResultSize=1m", "sql.files.maxPartitionBytes=1m",
                                                  "sql.files.openCostInBytes=1m")) + " pyspark-shell"  # a file each
    r = subprocess.run([sys.executable, "-m", "sparkwave.cli.main", "sql", "--warehouse", str(wh), "-e",
                        "SELECT k, v FROM t WHERE k >= 0"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYSPARK_SUBMIT_ARGS": conf})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stdout.rstrip("\n").splitlines()  # psql's blank line after a result
    assert lines[0].split() == ["k", "|", "v"] and lines[-1] == "(200000 rows)"
    printed = sorted(int(line.split("|")[0]) for line in lines[2:-1])
    assert printed == list(range(200_000))


def test_show_source_errors_lists_at_most_max_show_rows(session):
    with session.catalog.transaction() as db:  # as many bad records as a few epochs of a bad topic set aside
        db.executemany("INSERT INTO source_errors VALUES (?, ?, ?, ?, ?, ?)",
                       [("t", "0", offset, 1, "not JSON", "x") for offset in range(MAX_SHOW_ROWS + 5)])
    shown = session.sql("SHOW SOURCE ERRORS").toArrow()
    assert shown.num_rows == MAX_SHOW_ROWS and shown["offset"].to_pylist() == list(range(MAX_SHOW_ROWS))
