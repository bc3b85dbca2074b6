"""A pipeline with a small snapshot backfill (built on the driver in one chunk, its log caught up in
band), run in a child process by tests/crash/test_small_create_crash.py and killed by
`SPARKWAVE_CRASH_AT` at a named point of the creating job. `SPARKWAVE_SMALL_JOB` picks the job's
tree: "stateless" or "stateful".

Usage: python -m tests.small_create_crash_child WAREHOUSE PROGRESS_FILE. As
`tests.backfill_crash_child`: statements acknowledged in PROGRESS_FILE, a flush after each batch;
the job starts paused, so that the log store holds a few epochs when it resumes."""

from __future__ import annotations

import os
import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.backfill_crash_child import BATCHES, SEED, batch, run_batches
from tests.oracle import values_sql

SETUP = [
    "CREATE TABLE t (k int, a int, b varchar, PRIMARY KEY (k))",
    f"INSERT INTO t VALUES {values_sql(SEED)}",
    "FLUSH",
    "SET background_ddl = true",
]
JOBS = {
    "stateless": ("bf", "SELECT k, a * 2 AS a2, b FROM t WHERE a % 4 <> 1"),
    "stateful": ("bf", "SELECT b, count(*) AS n, sum(a) AS sa, max(a) AS mx FROM t GROUP BY b"),
}
__all__ = ["BATCHES", "JOBS", "SEED", "batch", "job"]


def job() -> tuple[str, str]:
    return JOBS[os.environ.get("SPARKWAVE_SMALL_JOB", "stateless")]


def main(warehouse: str, progress: str) -> None:
    spark = create_spark(TEST_MASTER)
    name, sql = job()
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        for st in SETUP:
            s.sql(st)
        s.sql("SET backfill_rate_limit = 0")
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        s.sql("SET backfill_rate_limit = default")
        run_batches(s, progress, BATCHES, batch, resume_at=3, jobs=[name])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
