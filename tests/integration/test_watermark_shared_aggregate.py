"""A grouped CTE joined twice: one inner join with a watermarked stream on the group key, one with
a table without a watermark. The aggregate's state both joins read is not cleaned by the first
join's watermarks, so a table row that arrives later still finds its group (review of issue 48;
`tests/unit/test_watermark_shared_aggregate.py` checks the plan)."""

from __future__ import annotations

import sparkwave
from tests.oracle import Model, multiset, rows_of, values_sql

DDL = [
    ("CREATE TABLE ev (k bigint, v int, WATERMARK FOR k AS k - 5) APPEND ONLY", "ev", "k BIGINT, v INTEGER",
     ["k", "v"], []),
    ("CREATE TABLE s (k bigint, w int, WATERMARK FOR k AS k - 5) APPEND ONLY", "s", "k BIGINT, w INTEGER",
     ["k", "w"], []),
    ("CREATE TABLE t (k bigint PRIMARY KEY, x int)", "t", "k BIGINT PRIMARY KEY, x INTEGER", ["k", "x"], ["k"]),
]
MV = ("WITH g AS (SELECT k, count(*) AS c FROM ev GROUP BY k) "
      "SELECT a.k, a.c, a.w, b.x FROM (SELECT g.k, g.c, s.w FROM g JOIN s ON g.k = s.k) a "
      "JOIN (SELECT g.k, t.x, g.c AS c2 FROM t JOIN g ON t.k = g.k) b ON a.k = b.k")
EPOCHS = [
    [("insert", "ev", [(1, 1), (2, 1)]), ("insert", "s", [(1, 10), (2, 20)])],
    [("insert", "ev", [(100, 1)]), ("insert", "s", [(100, 30)])],  # both watermarks move to 95
    [("insert", "t", [(1, 7), (100, 8)])],  # finds group 1, below the watermarks
]


def test_a_table_row_finds_a_group_below_the_watermarks_of_the_other_join(spark, tmp_path):
    model = Model()
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        for ddl, name, duck, cols, key in DDL:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        s.sql(f"CREATE MATERIALIZED VIEW m AS {MV}")
        model.view("m", MV)
        for i, statements in enumerate(EPOCHS):
            for _, table, rows in statements:
                s.sql(f"INSERT INTO {table} VALUES {values_sql(rows)}")
            model.apply_epoch(statements)
            epoch = s.flush()
            got, want = multiset(rows_of(s.table("m", as_of=epoch))), multiset(model.rows("m"))
            assert got == want, f"epoch {i}: extra {got - want}, missing {want - got}"
