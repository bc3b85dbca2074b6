"""Watermarked-table MVs run in a child process by the watermark crash test and killed by
`SPARKWAVE_CRASH_AT`: a window aggregate and two EMIT ON WINDOW CLOSE MVs (one created mid-stream, a
snapshot backfill) over a table whose rows arrive out of order, some below the watermark.

Usage: python -m tests.watermark_crash_child WAREHOUSE PROGRESS_FILE. It appends `i` to
PROGRESS_FILE once batch i is staged (acknowledged), and flushes after each batch."""

from __future__ import annotations

import random
import sys
from datetime import datetime, timedelta

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.oracle import values_sql

T0 = datetime(2026, 1, 1)
TABLE = "CREATE TABLE ev (k int, v int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY"
TUMBLE = ("SELECT window_start, count(*) AS n, sum(v) AS s FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) "
          "GROUP BY window_start")
MVS = {"agg": TUMBLE, "eo": TUMBLE + " EMIT ON WINDOW CLOSE"}
LATE = {"eo_late": TUMBLE + " EMIT ON WINDOW CLOSE"}
BATCHES = 9


def batch(i: int) -> list[tuple]:
    """Batch i's rows: around six seconds per batch, some before the watermark."""
    rnd = random.Random(4800 + i)
    base = T0 + timedelta(seconds=6 * i)
    return [(rnd.randint(0, 5), rnd.randint(0, 9), base + timedelta(seconds=rnd.randint(-14, 8)))
            for _ in range(rnd.randint(2, 5))]


def main(warehouse: str, progress: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(TABLE)
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        for i in range(BATCHES):
            if i == 3:
                for name, sql in LATE.items():
                    s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            s.sql(f"INSERT INTO ev VALUES {values_sql(batch(i))}")
            with open(progress, "a") as f:
                f.write(f"{i}\n")
            s.flush()
        s.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
