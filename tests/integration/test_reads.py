"""Reads served without Spark (`frontend/reads.py`) give exactly the Spark path's result: the same
column names and types, the same rows (as a multiset), the same errors; and a query of any other
shape is left to Spark."""

from __future__ import annotations

import os
import re
from collections import Counter

import pyarrow as pa
import pytest

from sparkwave.core.errors import CatalogError, CorruptFileError, SparkwaveError
from sparkwave.frontend.reads import FastResult, fast_read, spark_vnode
from sparkwave.frontend.statements import parse
from sparkwave.storage import key_index
from tests.integration.test_corruption import _silent_damage


def _fast(session, sql: str) -> FastResult | None:
    ast = parse(sql)[0].ast
    assert ast is not None
    return fast_read(session, ast)


def _multiset(t: pa.Table) -> Counter:
    return Counter(repr(row) for row in zip(*[c.to_pylist() for c in t.columns], strict=True)) if t.num_columns \
        else Counter()


def assert_same(session, sql: str, kind: str | None = None, limit: int | None = None) -> int:
    """`sql` read without Spark equals `session.sql(sql)`: names, Spark and Arrow types, rows. With
    `limit` (a LIMIT query), the rows are as many and a sub-multiset of the query without it."""
    df = session.sql(sql)
    result = _fast(session, sql)
    assert result is not None, f"not answered without Spark: {sql}"
    assert kind is None or result.kind == kind
    assert [(n, t) for n, t in result.fields] == [(f.name, f.dataType) for f in df.schema.fields], sql
    batches = list(result.batches)
    expected = df.toArrow()
    for b in batches:
        assert b.schema.names == expected.schema.names and b.schema.types == expected.schema.types, sql
    got = pa.Table.from_batches(batches, schema=expected.schema)
    if limit is None:
        assert _multiset(got) == _multiset(expected), sql
    else:
        whole = session.sql(sql[:sql.upper().rindex(" LIMIT ")]).toArrow()
        assert got.num_rows == expected.num_rows == min(limit, whole.num_rows), sql
        assert not _multiset(got) - _multiset(whole), sql
    return got.num_rows


def assert_falls_back(session, sql: str) -> None:
    assert _fast(session, sql) is None, sql


EVERY_TYPE = ("CREATE TABLE t (k int PRIMARY KEY, b boolean, s smallint, i int, g bigint, r real, d double precision, "
              "n decimal(12,3), v varchar, dt date, ts timestamp, tz timestamptz, by bytea)")
ROWS = [
    "(1, true, 1, 10, 100, 1.5, 2.5, 3.125, 'one', '2024-01-01', '2024-01-01 10:00:00', '2024-01-01 10:00:00+02', "
    "'\\x0102')",
    "(2, false, -2, -20, -200, -1.5, 'NaN', -3.125, 'two é', '1969-12-31', '1900-01-01 00:00:00.123456', "
    "'2262-04-11 23:47:16+00', '\\x')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(-4, true, 32767, 2147483647, 9223372036854775807, 'Infinity', '-0', 99999999.999, '', '0001-01-01', "
    "'9999-12-31 23:59:59.999999', '1970-01-01 00:00:00+00', '\\xff')",
]
QUERIES = ["SELECT * FROM {r}", "SELECT v, k FROM {r}", "SELECT K, V AS \"Value\", {r}.k AS kk, k FROM {r}",
           "SELECT x.* FROM {r} AS x", "SELECT * FROM {r} WHERE k = 1", "SELECT * FROM {r} WHERE k = -4",
           "SELECT tz, ts, k FROM {r} WHERE (K = 2)", "SELECT * FROM {r} WHERE 3 = k", "SELECT * FROM {r} WHERE k = 99"]


def _check_queries(session, names: list[str]) -> None:
    for r in names:
        for q in QUERIES:
            assert_same(session, q.format(r=r), "lookup" if "WHERE" in q else "scan")
        assert_same(session, f"SELECT * FROM {r} LIMIT 2", "scan", limit=2)
        assert_same(session, f"SELECT * FROM {r} LIMIT 0", "scan", limit=0)


def test_a_table_and_an_mv_of_every_type_read_as_spark_reads_them(session):
    """Lookups and scans of a keyed table and an MV over it, through the log (no base yet), after a
    compaction (base and key index), and with a log of updates and deletes over that base."""
    session.sql(EVERY_TYPE)
    session.sql("; ".join(f"INSERT INTO t VALUES {row}" for row in ROWS))
    session.flush()
    session.sql("CREATE MATERIALIZED VIEW m AS SELECT k, b, s, i, g, r, d, n, v, dt, ts, tz, by FROM t WHERE k <> 3")
    session.wait()
    _check_queries(session, ["t", "m"])
    session.compact("t")
    session.sql("UPDATE t SET i = 11 WHERE k = 1")  # a log row for m too, so that it compacts
    session.flush()
    session.compact("m")
    for r in ("t", "m"):
        base = session.catalog.base_at(r, session.committed_epoch)
        assert base is not None and all(key_index.index_path(f).exists() for f in base.files)
    _check_queries(session, ["t", "m"])
    session.sql("UPDATE t SET v = 'changed', g = NULL WHERE k = 1")
    session.sql("DELETE FROM t WHERE k = -4")
    session.sql("INSERT INTO t VALUES (5, true, 5, 50, 500, 5.5, 5.5, 5.5, 'five', '2025-05-05', "
                "'2025-05-05 05:05:05', '2025-05-05 05:05:05+00', '\\x05')")
    session.flush()
    session.sql("UPDATE t SET v = 'again' WHERE k = 1")
    session.flush()
    assert session.catalog.log_files("m", session.catalog.base_at("m", session.committed_epoch).epoch,
                                     session.committed_epoch)
    _check_queries(session, ["t", "m"])
    assert assert_same(session, "SELECT v FROM t WHERE k = -4") == 0
    assert assert_same(session, "SELECT v FROM m WHERE k = 1") == 1


LONG = "longer than thirty-two bytes, for the hash ✓"


def test_composite_and_text_keys_and_aggregates(session):
    """An MV keyed by a group of (text, bigint, boolean) columns and one by a text group, with NULL
    groups, through updates, deletes and compaction."""
    session.sql("CREATE TABLE e (id bigint PRIMARY KEY, name varchar, grp bigint, flag boolean, x int, "
                "s smallint)")
    session.sql("INSERT INTO e VALUES (1, 'a', 1, true, 10, 1), (2, 'a', 1, true, 20, 1), (3, 'b', 2, false, 30, -1),"
                f" (4, NULL, NULL, NULL, 40, NULL), (5, '{LONG}', 3, true, 50, 2)")
    session.flush()
    session.sql("CREATE MATERIALIZED VIEW g AS SELECT name, grp, flag, count(*) AS n, sum(x) AS total "
                "FROM e GROUP BY name, grp, flag")
    session.sql("CREATE MATERIALIZED VIEW by_name AS SELECT name, max(x) AS top FROM e GROUP BY name")
    session.sql("CREATE MATERIALIZED VIEW by_small AS SELECT s, count(*) AS n FROM e GROUP BY s")
    session.wait()
    queries = ["SELECT * FROM g WHERE name = 'a' AND grp = 1 AND flag = true",
               "SELECT total, n FROM g WHERE flag = TRUE AND grp = 1 AND name = 'a'",
               "SELECT * FROM g WHERE name = 'b' AND grp = 2 AND flag = false",
               f"SELECT * FROM g WHERE name = '{LONG}' AND grp = 3 AND flag = true",
               "SELECT * FROM g WHERE name = 'a' AND grp = 1 AND flag = false", "SELECT * FROM g",
               "SELECT * FROM by_name WHERE name = 'a'", "SELECT top FROM by_name WHERE name = ''",
               "SELECT * FROM by_name", "SELECT * FROM by_small WHERE s = -1", "SELECT * FROM by_small WHERE s = 2",
               "SELECT * FROM by_small", "SELECT * FROM e WHERE id = 5", "SELECT * FROM e"]

    def check() -> None:
        for q in queries:
            assert_same(session, q)

    check()
    session.sql("UPDATE e SET x = x + 1 WHERE id IN (1, 3)")
    session.flush()
    for r in ("e", "g", "by_name", "by_small"):
        session.compact(r)
    check()
    session.sql("DELETE FROM e WHERE id = 3")
    session.sql("INSERT INTO e VALUES (6, 'c', 4, false, 60, 3), (7, NULL, NULL, NULL, 70, NULL)")
    session.flush()
    check()
    assert assert_same(session, "SELECT * FROM g WHERE name = 'b' AND grp = 2 AND flag = false") == 0


def test_relations_keyed_by_hidden_columns_and_append_only_ones_scan(session):
    """A table without a primary key (a hidden row id), an append-only table, and MVs over them: scans
    are served, lookups by a visible column are not (the key is hidden)."""
    session.sql("CREATE TABLE plain (x int, y varchar)")
    session.sql("CREATE TABLE events (x int, y varchar) APPEND ONLY")
    session.sql("INSERT INTO plain VALUES (1, 'a'), (1, 'a'), (2, NULL)")
    session.sql("INSERT INTO events VALUES (1, 'a'), (1, 'a'), (2, NULL)")
    session.flush()
    session.sql("CREATE MATERIALIZED VIEW pm AS SELECT y FROM plain")
    session.sql("CREATE MATERIALIZED VIEW em AS SELECT x FROM events WHERE x > 1")
    session.wait()
    session.sql("INSERT INTO events VALUES (3, 'c')")
    session.sql("DELETE FROM plain WHERE x = 2")
    session.flush()
    for r in ("plain", "events"):
        session.compact(r)
    session.sql("INSERT INTO events VALUES (4, 'd'), (4, 'd')")
    session.sql("INSERT INTO plain VALUES (5, 'e')")
    session.flush()
    for q in ("SELECT * FROM plain", "SELECT y FROM plain", "SELECT * FROM events", "SELECT y, x FROM events",
              "SELECT * FROM pm", "SELECT * FROM em"):
        assert_same(session, q, "scan")
    assert_same(session, "SELECT * FROM events LIMIT 4", limit=4)
    for q in ("SELECT * FROM plain WHERE x = 1", "SELECT * FROM events WHERE x = 1", "SELECT * FROM pm WHERE y = 'a'"):
        assert_falls_back(session, q)


FALLING_BACK = [
    "SELECT * FROM t WHERE k = '1'", "SELECT * FROM t WHERE k = 1.0", "SELECT * FROM t WHERE k = NULL",
    "SELECT * FROM t WHERE k = 3000000000", "SELECT * FROM t WHERE k > 1", "SELECT * FROM t WHERE k = 1 OR k = 2",
    "SELECT * FROM t WHERE k = 1 AND k = 1", "SELECT * FROM t WHERE k = 1 AND v = 'a'",
    "SELECT * FROM t WHERE v = 'a'", "SELECT * FROM t WHERE k = CAST('1' AS int)", "SELECT * FROM t WHERE k = k",
    "SELECT * FROM c WHERE a = 1", "SELECT * FROM f WHERE x = 1", "SELECT k + 1 FROM t", "SELECT count(*) FROM t",
    "SELECT 1", "SELECT DISTINCT * FROM t", "SELECT * FROM t ORDER BY k", "SELECT * FROM t LIMIT 1 OFFSET 1",
    "SELECT * FROM t, c", "SELECT * FROM t JOIN c ON t.k = c.a", "WITH w AS (SELECT * FROM t) SELECT * FROM w",
    "SELECT y.k FROM t AS x", "SELECT * FROM t WHERE t.k IN (SELECT a FROM c)",
    "SELECT * FROM t UNION SELECT * FROM t", "SELECT nope FROM t", "SELECT *, k FROM t WHERE k = 1 GROUP BY k",
    "SELECT * FROM (SELECT * FROM t) AS s", "SELECT * FROM t WHERE x.k = 1", "SELECT t.* AS z FROM t",
    "SELECT * FROM t WHERE d = '2024-01-01'", "SELECT * FROM t WHERE n = 1",
]


def test_queries_of_other_shapes_are_left_to_spark(session):
    session.sql("CREATE TABLE t (k int PRIMARY KEY, v varchar, f double precision, n decimal(5,2), d date)")
    session.sql("CREATE TABLE c (a int, b varchar, v int, PRIMARY KEY (a, b))")
    session.sql("CREATE TABLE f (x double precision PRIMARY KEY, v int)")
    session.sql("INSERT INTO t VALUES (1, 'a', 1.0, 1.00, '2024-01-01'); INSERT INTO f VALUES (1.0, 1)")
    session.flush()
    for q in FALLING_BACK:
        try:
            assert_falls_back(session, q)
        except SparkwaveError:
            pytest.fail(f"{q}: the fast path raised instead of leaving it to Spark")
    assert_same(session, "SELECT * FROM c WHERE b = 'x' AND a = 1", "lookup")
    assert_falls_back(session, "SELECT * FROM f")  # a float key with a log to overlay: Spark's key equality
    session.compact("f")
    assert_same(session, "SELECT * FROM f", "scan")  # no log


def test_relations_the_spark_path_refuses_are_refused_the_same_way(session):
    session.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
    session.sql("INSERT INTO t VALUES (1, 1)")
    session.flush()
    session.sql("CREATE MATERIALIZED VIEW failed AS SELECT k, v FROM t")
    session.wait()
    session.loop.take_out("failed", "a reason", "taken out by the test")
    for q in ("SELECT * FROM nope WHERE k = 1", "SELECT * FROM failed", "SELECT * FROM failed WHERE k = 1"):
        with pytest.raises(CatalogError) as spark_error:
            session.sql(q)
        with pytest.raises(CatalogError) as fast_error:
            _fast(session, q)
        assert str(fast_error.value) == str(spark_error.value)


def test_a_creating_mv_is_refused_the_same_way(session):
    session.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
    session.insert("t", pa.table({"k": pa.array(range(100), pa.int32()), "v": pa.array(range(100), pa.int32())}))
    session.flush()
    session.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
    session.sql("CREATE MATERIALIZED VIEW m AS SELECT k, v FROM t")
    assert session.catalog.relation("m").state == "creating"
    with pytest.raises(CatalogError, match="still being created") as spark_error:
        session.sql("SELECT * FROM m WHERE k = 1")
    with pytest.raises(CatalogError) as fast_error:
        _fast(session, "SELECT * FROM m WHERE k = 1")
    assert str(fast_error.value) == str(spark_error.value)


def test_a_scan_is_whole_while_compaction_and_retention_remove_its_files(session):
    """The scan's files are opened before it yields a row: a compaction and a retention that removes
    the old base and log meanwhile do not cut it short, and it reads the epoch it started at."""
    session.sql("CREATE TABLE t (k int PRIMARY KEY, v int); SET retention_seconds = 0")
    session.insert("t", pa.table({"k": pa.array(range(5000), pa.int32()), "v": pa.array(range(5000), pa.int32())}))
    session.flush()
    session.compact("t")
    session.sql("UPDATE t SET v = -1 WHERE k < 10")
    session.flush()
    expected = session.sql("SELECT * FROM t").toArrow()
    result = _fast(session, "SELECT * FROM t")
    assert result is not None
    old = session.catalog.base_at("t", result.epoch)
    logs = session.catalog.log_files("t", old.epoch, result.epoch)
    session.sql("UPDATE t SET v = -2 WHERE k < 100")
    session.flush()
    session.compact("t")
    assert not any(os.path.exists(f) for f in [*old.files, *(p for _, p in logs)])
    got = pa.Table.from_batches(list(result.batches))
    assert _multiset(got.rename_columns(expected.column_names)) == _multiset(expected)


def test_a_damaged_file_is_an_error_naming_it_not_rows(session, monkeypatch):
    session.sql("CREATE TABLE t (k bigint PRIMARY KEY, v bigint)")
    session.insert("t", pa.table({"k": pa.array(range(2000), pa.int64()),
                                  "v": pa.array([k * 1_000_003 + 12_345 for k in range(2000)], pa.int64())}))
    session.flush()
    session.compact("t")
    (path,) = session.catalog.base_at("t", session.committed_epoch).files
    key_index.index_path(path).unlink()  # lookups read the Parquet file
    _silent_damage(path, "v")
    for q in ("SELECT * FROM t", "SELECT v FROM t WHERE k = 1000"):
        with pytest.raises(CorruptFileError, match=re.escape(path) + ".*'t'.*CRC"):
            result = _fast(session, q)
            assert result is not None
            list(result.batches)


@pytest.mark.parametrize("values", [
    [("int", 0)], [("int", 1)], [("int", -1)], [("int", 2**31 - 1)], [("int", -(2**31))],
    [("smallint", -32768)], [("smallint", 7)], [("bigint", 2**63 - 1)], [("bigint", -(2**63))], [("bigint", 42)],
    [("boolean", True)], [("boolean", False)], [("varchar", "")], [("varchar", "abc")], [("varchar", "abcd")],
    [("varchar", "x" * 7)], [("varchar", "y" * 8)], [("varchar", "z" * 31)], [("varchar", "é" * 16)],
    [("varchar", "w" * 33)], [("varchar", "✓ longer text with unicode " * 5)],
    [("varchar", "a"), ("bigint", 1), ("boolean", False)], [("varchar", None), ("int", 5)],
    [("int", None)], [("int", 5), ("varchar", None), ("smallint", -3)],
])
def test_the_vnode_of_a_key_is_sparks(spark, values):
    from sparkwave.core.schema import Column, SqlType, to_spark_type

    columns = [Column(f"c{i}", SqlType(t)) for i, (t, _) in enumerate(values)]
    row = [v for _, v in values]
    schema = ", ".join(f"c{i} {to_spark_type(c.type).simpleString()}" for i, c in enumerate(columns))
    df = spark.createDataFrame([tuple(row)], schema)
    (expected,) = df.selectExpr(f"CAST(pmod(xxhash64({', '.join(c.name for c in columns)}), 256) AS SMALLINT)") \
        .collect()[0]
    assert spark_vnode(columns, row) == expected


def test_fields_name_columns_as_the_query_spells_them(session):
    session.sql("CREATE TABLE t (k int PRIMARY KEY, v varchar)")
    session.sql("INSERT INTO t VALUES (1, 'a')")
    session.flush()
    result = _fast(session, "SELECT K, t.V, v AS \"Mixed\", k AS lower_alias FROM t WHERE k = 1")
    assert result is not None
    assert [n for n, _ in result.fields] == ["K", "V", "Mixed", "lower_alias"]


def test_a_log_too_large_to_keep_is_read_by_lookup_and_a_scan_of_it_left_to_spark(session, monkeypatch):
    from sparkwave.frontend import reads

    session.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
    session.insert("t", pa.table({"k": pa.array(range(300), pa.int32()), "v": pa.array(range(300), pa.int32())}))
    session.flush()
    session.compact("t")
    session.sql("UPDATE t SET v = -1 WHERE k < 20; DELETE FROM t WHERE k >= 290")
    session.flush()
    monkeypatch.setattr(reads, "CACHED_OVERLAY_ROWS", 0)  # read again at every lookup
    for k in (0, 19, 20, 295, 1000):
        assert_same(session, f"SELECT * FROM t WHERE k = {k}", "lookup")
    assert_same(session, "SELECT * FROM t", "scan")
    monkeypatch.setattr(reads, "SCAN_LOG_ROWS", 0)  # past it: `lookup` reads the log itself
    for k in (0, 19, 20, 295, 1000):
        assert_same(session, f"SELECT * FROM t WHERE k = {k}", "lookup")
    assert_falls_back(session, "SELECT * FROM t")


def test_reads_beside_commits_compactions_and_retention_are_whole_or_an_error(session):
    """Lookups and scans in another thread while every epoch rewrites every row and is compacted with
    `retention_seconds = 0` (each compaction removes the files the previous epoch's reads list): each
    read gives the rows of one committed epoch, or says its epoch is no longer retained."""
    import threading

    from sparkwave.core.errors import NotRetainedError

    session.sql("CREATE TABLE t (k int PRIMARY KEY, v int); SET retention_seconds = 0")
    session.insert("t", pa.table({"k": pa.array(range(500), pa.int32()), "v": pa.array([0] * 500, pa.int32())}))
    session.flush()
    session.compact("t")
    seen: list[tuple[str, list]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            for sql in ("SELECT v FROM t WHERE k = 7", "SELECT v FROM t"):
                try:
                    result = _fast(session, sql)
                    assert result is not None
                    seen.append((sql, [v for b in result.batches for v in b.column(0).to_pylist()]))
                except NotRetainedError:
                    pass
                except BaseException as e:
                    errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(1, 6):
            session.sql(f"UPDATE t SET v = {i}")
            session.flush()
            session.compact("t")
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert seen
    for sql, values in seen:
        assert len(values) == (1 if "WHERE" in sql else 500) and len(set(values)) == 1, (sql, values)
