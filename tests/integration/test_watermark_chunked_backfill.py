"""A windowed aggregate over a watermarked table, created mid-stream with a chunked backfill (its
partials written per chunk and added up by a merge chunk): the MV holds every window, the closed
ones too; only the state below the watermark goes (review of issue 48)."""

from __future__ import annotations

from datetime import datetime, timedelta

import sparkwave
from tests.oracle import Model, multiset, rows_of, values_sql

T0 = datetime(2026, 1, 1)
MV = ("SELECT window_start, count(*) AS n, sum(v) AS s FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) "
      "GROUP BY window_start")
ROWS = [(i, T0 + timedelta(seconds=i), i) for i in range(400)]


def test_a_chunked_backfill_keeps_the_closed_windows_in_the_mv(spark, tmp_path):
    model = Model()
    model.table("ev", "id INTEGER, ts TIMESTAMP, v INTEGER", ["id", "ts", "v"], [])
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE ev (id int, ts timestamp, v int, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
              "APPEND ONLY")
        s.sql(f"INSERT INTO ev VALUES {values_sql(ROWS)}")
        model.apply_epoch([("insert", "ev", ROWS)])
        s.flush()
        s.sql("SET background_ddl = true; SET backfill_chunk_rows = 50")
        s.sql(f"CREATE MATERIALIZED VIEW m AS {MV}")
        model.view("m", MV.replace("FROM TUMBLE(ev, ts, INTERVAL '10' SECOND)",
                                   "FROM (SELECT *, time_bucket(INTERVAL '10 seconds', ts) AS window_start FROM ev)"))
        s.wait()
        s.flush()
        job = next(j for j in s.jobs() if j.name == "m")
        chunks = s.catalog.job_chunks(job.id)
        got, want = multiset(rows_of(s.table("m"))), multiset(model.rows("m"))
        assert got == want, f"{len(chunks)} chunks: extra {got - want}, missing {want - got}"
        assert len(chunks) > 2, chunks  # chunked, and merged
        later = [(i, T0 + timedelta(seconds=i), i) for i in range(398, 420)]  # the open window, then new ones
        s.sql(f"INSERT INTO ev VALUES {values_sql(later)}")
        model.apply_epoch([("insert", "ev", later)])
        s.flush()
        got, want = multiset(rows_of(s.table("m"))), multiset(model.rows("m"))
        assert got == want, f"after the backfill: extra {got - want}, missing {want - got}"


IJ = ("SELECT a.id AS aid, b.id AS bid FROM a JOIN b ON a.k = b.k "
      "AND a.t BETWEEN b.t - INTERVAL '10' SECOND AND b.t + INTERVAL '10' SECOND")


def test_a_chunked_backfill_of_an_interval_join_keeps_the_old_matches(spark, tmp_path):
    """The driving side's later chunks join the side the first chunk handed on: all of its rows,
    not only those the watermark keeps in the state."""
    model = Model()
    a_rows = [(i, i % 5, T0 + timedelta(seconds=i)) for i in range(400)]
    b_rows = [(i, i % 5, T0 + timedelta(seconds=4 * i)) for i in range(100)]
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        for name, rows in (("a", a_rows), ("b", b_rows)):
            s.sql(f"CREATE TABLE {name} (id int, k int, t timestamp, WATERMARK FOR t AS t - INTERVAL '5' SECOND) "
                  "APPEND ONLY")
            model.table(name, "id INTEGER, k INTEGER, t TIMESTAMP", ["id", "k", "t"], [])
            s.sql(f"INSERT INTO {name} VALUES {values_sql(rows)}")
        model.apply_epoch([("insert", "a", a_rows), ("insert", "b", b_rows)])
        s.flush()
        s.sql("SET background_ddl = true; SET backfill_chunk_rows = 50")
        s.sql(f"CREATE MATERIALIZED VIEW ij AS {IJ}")
        model.view("ij", IJ)
        s.wait()
        s.flush()
        job = next(j for j in s.jobs() if j.name == "ij")
        chunks = s.catalog.job_chunks(job.id)
        got, want = multiset(rows_of(s.table("ij"))), multiset(model.rows("ij"))
        assert got == want, f"{len(chunks)} chunks: {len(got)} rows, {len(want)} wanted; missing {want - got}"
        assert len(chunks) > 2, chunks
        later = [("insert", "a", [(500 + i, i % 5, T0 + timedelta(seconds=396 + i)) for i in range(10)]),
                 ("insert", "b", [(500 + i, i % 5, T0 + timedelta(seconds=398 + i)) for i in range(10)])]
        for _, name, rows in later:
            s.sql(f"INSERT INTO {name} VALUES {values_sql(rows)}")
        model.apply_epoch(later)
        s.flush()
        got, want = multiset(rows_of(s.table("ij"))), multiset(model.rows("ij"))
        assert got == want, f"after the backfill: extra {got - want}, missing {want - got}"


AGG_JOIN = "SELECT s.id, g.c FROM s JOIN (SELECT k, count(*) AS c FROM ev GROUP BY k) g ON s.k = g.k"


def test_a_chunked_backfill_joins_later_chunks_with_every_group_of_a_borrowed_aggregate(spark, tmp_path):
    """The join reads the aggregate's partials as its side (cleaned below both keys' watermarks at
    the next step): the first chunk hands them on whole."""
    model = Model()
    tables = {"ev": [(k, k) for k in range(40)], "s": [(i, i // 10) for i in range(400)]}
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        for name, rows in tables.items():
            s.sql(f"CREATE TABLE {name} (id int, k bigint, WATERMARK FOR k AS k - 5) APPEND ONLY")
            model.table(name, "id INTEGER, k BIGINT", ["id", "k"], [])
            s.sql(f"INSERT INTO {name} VALUES {values_sql(rows)}")
        model.apply_epoch([("insert", n, r) for n, r in tables.items()])
        s.flush()
        s.sql("SET background_ddl = true; SET backfill_chunk_rows = 50")
        s.sql(f"CREATE MATERIALIZED VIEW aj AS {AGG_JOIN}")
        model.view("aj", AGG_JOIN)
        s.wait()
        s.flush()
        chunks = s.catalog.job_chunks(next(j for j in s.jobs() if j.name == "aj").id)
        got, want = multiset(rows_of(s.table("aj"))), multiset(model.rows("aj"))
        assert len(chunks) > 2 and got == want, f"{len(chunks)} chunks: {len(got)} rows of {len(want)}"
