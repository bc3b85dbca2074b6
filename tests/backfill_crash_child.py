"""A pipeline with a snapshot backfill, run in a child process by the backfill crash tests and
killed by `SPARKWAVE_CRASH_AT` at a named point of the creating job.

Usage: python -m tests.backfill_crash_child WAREHOUSE PROGRESS_FILE. It appends `i j` to
PROGRESS_FILE once statement j of batch i is staged (acknowledged), and flushes after each batch.
The kill comes from the job's thread, so it may fall between two statements of a batch. The job
starts paused, so that the log store holds a few epochs when it resumes; batches keep coming
while it backfills."""

from __future__ import annotations

import random
import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.oracle import to_sql, values_sql

SEED = [(k, (k * 7) % 23, ["p", "q", None][k % 3]) for k in range(240)]
SETUP = [
    "CREATE TABLE t (k int, a int, b varchar, PRIMARY KEY (k))",
    f"INSERT INTO t VALUES {values_sql(SEED)}",
    "FLUSH",
    "CREATE MATERIALIZED VIEW live WITH (backfill_strategy = 'blocking') AS SELECT k, a + 1 AS a1 FROM t WHERE a > 3",
    "SET backfill_chunk_rows = 40",
    "SET background_ddl = true",
]
MVS = {"live": "SELECT k, a + 1 AS a1 FROM t WHERE a > 3"}
JOB = ("bf", "SELECT k, a * 2 AS a2, b FROM t WHERE a % 4 <> 1")
BATCHES = 7


def batch(i: int) -> list[tuple]:
    rnd = random.Random(100 + i)
    out: list[tuple] = [("insert", "t", [(rnd.randint(0, 260), rnd.randint(0, 22), rnd.choice(["p", "q", None]))
                                         for _ in range(rnd.randint(3, 8))])]
    out.append(("update", "t", {"a": "a + 1"}, f"k % 5 = {rnd.randrange(5)}"))
    lo = rnd.randint(0, 220)
    out.append(("delete", "t", f"k BETWEEN {lo} AND {lo + rnd.randint(0, 10)}"))
    return out


def main(warehouse: str, progress: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        for st in SETUP:
            s.sql(st)
        s.sql("SET backfill_rate_limit = 0")
        s.sql(f"CREATE MATERIALIZED VIEW {JOB[0]} AS {JOB[1]}")
        s.sql("SET backfill_rate_limit = default")
        run_batches(s, progress, BATCHES, batch, resume_at=3, jobs=[JOB[0]])


def run_batches(s: sparkwave.Session, progress: str, batches: int, batch, resume_at: int,  # type: ignore[no-untyped-def]
                jobs: list[str]) -> None:
    """Apply each batch's statements, acknowledging each in `progress` as `i j`, flush after each
    batch, resume the paused `jobs` before batch `resume_at`, then wait for them."""
    for i in range(batches):
        if i == resume_at:
            for name in jobs:
                s.sql(f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = DEFAULT")
        for j, st in enumerate(batch(i)):
            s.sql(to_sql(st))
            with open(progress, "a") as f:
                f.write(f"{i} {j}\n")
        s.flush()
    s.sql("WAIT")
    s.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
