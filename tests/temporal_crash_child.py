"""Temporal-filter MVs run in a child process by the temporal crash test and killed by
`SPARKWAVE_CRASH_AT`. NOW() comes from a test clock that advances ten minutes per batch (set before
each flush), so every epoch's recorded NOW() differs; one MV is created mid-stream (snapshot
backfill). The parent restarts the warehouse with a clock a day later: only a replay of the
recorded NOW() gives the rows the oracle expects. A table's `p TIMESTAMPTZ AS PROCTIME()` column
(`pt`, read by the MV `ptimes`) takes the NOW() of the epoch that applies each row, replayed alike.

Usage: python -m tests.temporal_crash_child WAREHOUSE PROGRESS_FILE. It appends `i` to
PROGRESS_FILE once batch i is staged (acknowledged), and flushes after each batch."""

from __future__ import annotations

import random
import sys
from datetime import datetime, timedelta

import sparkwave
from sparkwave.core import clock
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.oracle import values_sql

T0 = datetime(2026, 1, 1)
T0_US = int((T0 - datetime(1970, 1, 1)).total_seconds()) * 1_000_000
STEP_US = 10 * 60 * 1_000_000  # the clock's advance per batch
MVS = {
    "recent": "SELECT id, ts FROM ev WHERE ts > NOW() - INTERVAL '30 minutes'",
    "delayed": "SELECT id, ts FROM ev WHERE ts <= NOW() + INTERVAL '5 minutes'",
}
LATE = {"late": "SELECT id, ts FROM ev WHERE ts > NOW() - INTERVAL '15 minutes' AND ts <= NOW()"}
BATCHES = 8
WINDOWS = {"recent": (-30 * 60, None), "delayed": (None, 5 * 60), "late": (-15 * 60, 0)}  # (after, up to) NOW, seconds


def batch(i: int) -> list[str]:
    """Batch i's statements, at the clock's time for it: rows around NOW(), some deleted or moved."""
    rnd = random.Random(480 + i)
    now = T0 + timedelta(microseconds=i * STEP_US)
    rows = [(rnd.randint(0, 30), now + timedelta(minutes=rnd.randint(-40, 20))) for _ in range(rnd.randint(2, 6))]
    return [f"INSERT INTO ev VALUES {values_sql(rows)}", f"DELETE FROM ev WHERE id % 7 = {rnd.randrange(7)}",
            f"UPDATE ev SET ts = ts + INTERVAL '{rnd.randint(1, 9)}' MINUTE WHERE id % 5 = {rnd.randrange(5)}",
            f"INSERT INTO pt (id, n) VALUES ({i * 10}, {i}), ({i * 10 + 1}, {i})",
            f"UPDATE pt SET n = n + 1 WHERE id % 3 = {rnd.randrange(3)}"]


def main(warehouse: str, progress: str) -> None:
    now = [T0_US]
    clock.use(lambda: now[0])
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE ev (id int, ts timestamptz, PRIMARY KEY (id))")
        s.sql("CREATE TABLE pt (id int PRIMARY KEY, n int, p TIMESTAMPTZ AS PROCTIME())")
        s.sql("CREATE MATERIALIZED VIEW ptimes AS SELECT id, n, p FROM pt")
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        for i in range(BATCHES):
            now[0] = T0_US + i * STEP_US
            if i == 3:
                for name, sql in LATE.items():
                    s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            for statement in batch(i):
                s.sql(statement)
            with open(progress, "a") as f:
                f.write(f"{i}\n")
            s.flush()
        s.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
