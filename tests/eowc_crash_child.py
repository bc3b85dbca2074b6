"""EMIT ON WINDOW CLOSE MVs beyond GROUP BY run in a child process by the EOWC crash test and killed
by `SPARKWAVE_CRASH_AT`: window functions ordered by the watermarked column (their state retired as
rows are emitted), a group top-n (its window state cleaned), a SELECT (its buffer), one created
mid-stream (a snapshot backfill), over a table whose rows arrive out of order, some below the
watermark, every time distinct.

Usage: python -m tests.eowc_crash_child WAREHOUSE PROGRESS_FILE. It appends `i` to PROGRESS_FILE
once batch i is staged (acknowledged), and flushes after each batch."""

from __future__ import annotations

import random
import sys
from datetime import timedelta

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.oracle import values_sql
from tests.oracle_eowc import EOWC, MVS, T0, TABLE

FIRST = ["o_lead", "o_top", "o_sel"]
LATE = ["o_all"]
BATCHES = 9


def batch(i: int) -> list[tuple]:
    """Batch i's rows: around six seconds per batch, some before the watermark."""
    rnd = random.Random(4900 + i)
    base = T0 + timedelta(seconds=6 * i)
    return [(rnd.randint(0, 2), rnd.randint(0, 9), base + timedelta(seconds=rnd.randint(-14, 8),
                                                                      microseconds=100 * i + j))
            for j in range(rnd.randint(2, 5))]


def main(warehouse: str, progress: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(TABLE)
        for name in FIRST:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name][0]}{EOWC}")
        for i in range(BATCHES):
            if i == 3:
                for name in LATE:
                    s.sql(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name][0]}{EOWC}")
            s.sql(f"INSERT INTO ev VALUES {values_sql(batch(i))}")
            with open(progress, "a") as f:
                f.write(f"{i}\n")
            s.flush()
        s.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
