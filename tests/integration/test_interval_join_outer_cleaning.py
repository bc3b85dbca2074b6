"""An outer interval join cleans only the state whose rows can never change another row's NULL
padding: the preserved side's (a left row no future right row can match is final). A right row of
a LEFT join decides whether its left rows are padded, so it stays while any of them may still meet
a new right row, however far the left watermark runs ahead (review of issue 48)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import sparkwave
from tests.oracle import Model, multiset, rows_of, values_sql

T0 = datetime(2026, 1, 1)
DDL = [
    ("CREATE TABLE a (id int, k int, t timestamp, WATERMARK FOR t AS t - INTERVAL '5' SECOND) APPEND ONLY",
     "a", "id INTEGER, k INTEGER, t TIMESTAMP", ["id", "k", "t"]),
    ("CREATE TABLE b (id int, k int, t timestamp, WATERMARK FOR t AS t - INTERVAL '5' SECOND) APPEND ONLY",
     "b", "id INTEGER, k INTEGER, t TIMESTAMP", ["id", "k", "t"]),
]
MVS = {
    "ol": "SELECT a.id AS aid, b.id AS bid FROM a LEFT JOIN b ON a.k = b.k "
          "AND a.t BETWEEN b.t AND b.t + INTERVAL '10' SECOND",
    "of": "SELECT a.id AS aid, b.id AS bid FROM a FULL JOIN b ON a.k = b.k "
          "AND a.t BETWEEN b.t AND b.t + INTERVAL '10' SECOND",
    # an aggregate over the join counts a retracted padding row that was never there
    "ol_n": "SELECT a.id AS aid, count(*) AS n FROM a LEFT JOIN b ON a.k = b.k "
            "AND a.t BETWEEN b.t AND b.t + INTERVAL '10' SECOND GROUP BY a.id",
    "of_n": "SELECT b.id AS bid, count(*) AS n FROM a FULL JOIN b ON a.k = b.k "
            "AND a.t BETWEEN b.t AND b.t + INTERVAL '10' SECOND GROUP BY b.id",
}


def _t(s: int) -> datetime:
    return T0 + timedelta(seconds=s)


# a's watermark runs far ahead of b's; then a late-but-on-time b row meets an old a row
EPOCHS = [
    [("insert", "a", [(1, 1, _t(50))]), ("insert", "b", [(1, 1, _t(45))])],
    [("insert", "a", [(2, 2, _t(200))])],
    [("insert", "b", [(2, 1, _t(42))])],
    [("insert", "a", [(3, 1, _t(300))]), ("insert", "b", [(3, 1, _t(298))])],
]


@pytest.mark.parametrize("big", [False, True], ids=["driver", "executors"])
def test_an_outer_interval_join_keeps_the_rows_that_decide_padding(spark, tmp_path, big):
    model = Model()
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        if big:
            s.sql("SET big_epoch_rows = 0")
        for ddl, name, duck, cols in DDL:
            s.sql(ddl)
            model.table(name, duck, cols, [])
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
        for i, statements in enumerate(EPOCHS):
            for _, table, rows in statements:
                s.sql(f"INSERT INTO {table} VALUES {values_sql(rows)}")
            model.apply_epoch(statements)
            epoch = s.flush()
            for name in MVS:
                got, want = multiset(rows_of(s.table(name, as_of=epoch))), multiset(model.rows(name))
                assert got == want, f"{name} at epoch {i}: extra {got - want}, missing {want - got}"
