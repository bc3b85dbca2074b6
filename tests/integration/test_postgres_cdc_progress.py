"""The CDC backfill's progress (issue 49: "progress in SHOW JOBS and the dashboard"): rows read of the
upstream's estimated rows and the key read from next, chunk by chunk, while the table's own status
stays 'running' without an error; once the last chunk is read the table's job row is as any table's."""

from __future__ import annotations

import psycopg

from sparkwave.connectors.postgres_cdc import BACKFILLED
from sparkwave.frontend import overview
from tests.pgcdc_util import options


def _job(session, name: str):
    rows = [r for r in session.sql("SHOW JOBS").collect() if r.name == name]
    assert len(rows) <= 1
    return rows[0] if rows else None


def test_the_cdc_backfill_shows_rows_read_of_the_estimate_and_the_next_key(session, postgres):
    postgres.create_database("cdc_progress")
    conn = psycopg.connect(postgres.dsn("cdc_progress"), autocommit=True)
    conn.execute("CREATE TABLE p (id bigint PRIMARY KEY, name text)")
    conn.execute("INSERT INTO p SELECT i, 'n' || i FROM generate_series(1, 100) i")
    conn.execute("ANALYZE p")  # reltuples: the estimate SHOW JOBS divides by
    session.sql(f"CREATE TABLE p (id bigint PRIMARY KEY, name varchar) WITH "
                f"({options(postgres, 'cdc_progress', 'p', **{'snapshot.batch_size': '30'})})")
    try:
        job = _job(session, "p")
        assert job is not None and (job.kind, job.strategy, job.phase) == ("table", "cdc backfill", "snapshot")
        assert (job.snapshot_rows_done, job.snapshot_rows_total, job.percent) == (0, 100, 0.0)
        assert job.upstreams == "public.p from id 1 0/100" and job.error is None
        seen = []
        for _ in range(3):
            session.flush()
            job = _job(session, "p")
            seen.append((job.snapshot_rows_done, job.percent, job.upstreams))
            dash = [j for j in overview.jobs(session) if j.name == "p"]
            assert len(dash) == 1 and dash[0].rows_done == job.snapshot_rows_done and dash[0].error is None
            node = next(n for n in overview.graph(session) if n.name == "p")
            assert (node.status, node.error) == ("running", None), "progress is not an error"
        assert seen == [(30, 30.0, "public.p from id 31 30/100"), (60, 60.0, "public.p from id 61 60/100"),
                        (90, 90.0, "public.p from id 91 90/100")]
        session.flush()
        assert BACKFILLED in session.catalog.source_offsets("p")
        assert _job(session, "p").phase == "created"  # the table's own job row, as any table's
        assert not [j for j in overview.jobs(session) if j.name == "p"]
        assert session.sql("SELECT count(*) AS n FROM p").collect()[0].n == 100
    finally:
        session.sql("DROP TABLE p")  # the slot is the shared server's
        conn.close()
