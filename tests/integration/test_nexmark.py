"""Nexmark q0–q5 and q7–q9 in RisingWave's SQL form, as MVs over the Nexmark tables: each created
once before the data and once mid-stream (snapshot backfill while the pipeline keeps committing);
both equal DuckDB's evaluation of the query over the tables as of every checked epoch."""

from __future__ import annotations

import sparkwave
from sparkwave.cli.nexmark_sql import QUERIES, tables_sql
from sparkwave.stream.plan import from_json
from tests.oracle import connect, duckdb_sql, multiset, rows_of

# 10 ms of event time per event: a few 10-second windows per run, many auctions with bids
TABLES = tables_sql(bids_per_second=460, event_gap_ns=10_000_000)


def expected(session: sparkwave.Session, epoch: int) -> dict[str, list[tuple]]:
    db = connect()
    for t in ("person", "auction", "bid"):
        db.register(f"{t}_arrow", session.table(t, as_of=epoch).toArrow())
        db.execute(f"CREATE TABLE {t} AS SELECT * FROM {t}_arrow")
    return {q: db.execute(duckdb_sql(sql, db)).fetchall() for q, sql in QUERIES.items()}


def check(session: sparkwave.Session, epoch: int, names: dict[str, str]) -> None:
    want = expected(session, epoch)
    for mv, q in names.items():
        got = multiset(rows_of(session.table(mv, as_of=epoch)))
        assert got == multiset(want[q]), (f"{mv} differs from DuckDB's {q} at epoch {epoch}: "
                                          f"extra {got - multiset(want[q])}, missing {multiset(want[q]) - got}")


def test_nexmark_queries_equal_duckdb_created_before_and_mid_stream(spark, tmp_path):
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(TABLES)
        for q, sql in QUERIES.items():
            s.sql(f"CREATE MATERIALIZED VIEW {q} AS {sql}")
        early = {q: q for q in QUERIES}
        for _ in range(2):
            check(s, s.flush(), early)
        assert all(s.table(q).count() > 0 for q in ("q0", "q3", "q4", "q5", "q7", "q8", "q9"))
        # q5 spells its count per (auction, window) twice: planned once, shared by both join sides
        ops = from_json(s.catalog.relation("q5").definition["dataflow"]).walk()
        assert [o.op for o in ops].count("share") == 1 and [o.op for o in ops].count("agg") == 2
        # and both its join's sides are aggregates' outputs: the join reads their partials, keeps no copy
        assert not [t for t in s.catalog.relation("q5").definition["states"] if t.startswith("j")]

        s.sql("SET background_ddl = true; SET backfill_chunk_rows = 2000")  # a few chunks each
        for q, sql in QUERIES.items():
            s.sql(f"CREATE MATERIALIZED VIEW {q}_late AS {sql}")
        during = [s.flush() for _ in range(2)]  # the pipeline commits while the late MVs backfill
        s.wait()
        late = {f"{q}_late": q for q in QUERIES}
        created = {j.name: j.created_epoch for j in s.jobs()}
        for epoch in [*during, s.flush()]:
            check(s, epoch, early | {mv: q for mv, q in late.items() if created[mv] <= epoch})
        assert all(created[mv] <= s.committed_epoch for mv in late)
        # a job over several upstreams pinned them at one epoch and counted every snapshot's rows
        for job in (j for j in s.jobs() if j.name in late):
            ups = s.catalog.relation(job.name).upstreams
            rows = sum(s.table(u, as_of=job.created_epoch).count() for u in ups)
            assert job.rows_total == job.rows_done == rows, (job.name, ups, job.rows_total, rows)
        assert sorted(s.catalog.relation("q3_late").upstreams) == ["auction", "person"]
