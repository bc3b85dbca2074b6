"""A pipeline on a PostgreSQL catalog (a real server from `sparkwave.devtools.postgres_server`):
after each committed epoch every MV equals DuckDB's evaluation of its SQL (the oracle of
tests/oracle.py), with MVs created mid-stream by a snapshot and a blocking backfill, a compaction,
retention and a reopen that follows the catalog the warehouse records."""

from __future__ import annotations

import random

import pytest

import sparkwave
from sparkwave.core.catalog import location
from sparkwave.core.errors import NotRetainedError
from sparkwave.storage.warehouse import Warehouse
from tests.oracle import Model, check_views, multiset, rows_of, run_with_late_views, to_sql

TABLES = [
    ("CREATE TABLE t1 (k int, a int, b varchar, PRIMARY KEY (k))", "t1", "k INTEGER, a INTEGER, b VARCHAR",
     ["k", "a", "b"], ["k"]),
    ("CREATE TABLE t2 (a int, b varchar) APPEND ONLY", "t2", "a INTEGER, b VARCHAR", ["a", "b"], []),
]
MVS = [
    ("m1", "SELECT k, a * 2 + 1 AS a2, upper(b) AS ub FROM t1 WHERE a > 0"),
    ("agg", "SELECT b, count(*) AS n, sum(a) AS s FROM t1 GROUP BY b"),
    ("j", "SELECT t1.k, t1.a, t2.b FROM t1 JOIN t2 ON t1.a = t2.a"),
    ("top", "SELECT a, b FROM t2 WHERE a IS NOT NULL AND a <> 3"),
]


def epochs(seed: int, n: int) -> list[list[tuple]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        batch: list[tuple] = [
            ("insert", "t1", [(rnd.randint(0, 12), rnd.randint(-3, 9), rnd.choice(["x", "y", None]))
                              for _ in range(rnd.randint(1, 5))]),
            ("insert", "t2", [(rnd.randint(0, 9), rnd.choice(["p", "q", None])) for _ in range(rnd.randint(1, 3))])]
        if rnd.random() < 0.5:
            batch.append(("update", "t1", {"a": "a + 1"}, f"k < {rnd.randint(2, 10)}"))
        if rnd.random() < 0.4:
            batch.append(("delete", "t1", f"k BETWEEN {rnd.randint(0, 5)} AND {rnd.randint(5, 12)}"))
        out.append(batch)
    return out


@pytest.mark.parametrize("strategy", ["snapshot", "blocking"])
def test_mvs_on_a_postgresql_catalog_equal_duckdb_at_every_epoch(spark, tmp_path, postgres, strategy) -> None:
    dsn = postgres.create_database(f"oracle_{strategy}")
    wh = tmp_path / "wh"
    Warehouse(wh).open(dsn)  # connect() below follows the catalog the warehouse records
    run_with_late_views(spark, wh, TABLES, MVS, epochs(7, 5), late=2, strategy=strategy, compact_at=3)
    assert not (wh / "catalog.db").exists()


def test_a_reopened_warehouse_reads_its_history_and_retention_runs(spark, tmp_path, postgres, monkeypatch) -> None:
    dsn = postgres.create_database("oracle_reopen")
    wh = tmp_path / "wh"
    model = Model()
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000, catalog=dsn) as s:
        s.sql("SET retention_seconds = 0")
        for ddl, name, duck, cols, key in TABLES:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        for name, sql in MVS:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
        for batch in epochs(11, 4):
            for st in batch:
                s.sql(to_sql(st))
            model.apply_epoch(batch)
            s.flush()
        s.compact()  # compaction, then retention and history pruning, on the PostgreSQL catalog
        committed = s.committed_epoch
        assert s.catalog.retained_from("t1", -1) == committed
    monkeypatch.setattr(location, "_full", {})  # a new process: the password only in libpq's environment
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:  # follows the recorded catalog
        assert s.committed_epoch == committed and s.catalog.where.startswith("PostgreSQL catalog oracle_reopen")
        check_views(s, model, committed, [n for n, _ in MVS])
        assert multiset(rows_of(s.table("t1"))) == multiset(model.rows("t1"))
        with pytest.raises(NotRetainedError):
            s.table("t1", as_of=committed - 1).collect()
