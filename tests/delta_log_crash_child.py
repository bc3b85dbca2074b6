"""A pipeline run in a child process by the Delta log crash tests (tests/crash/test_delta_log_crash.py),
killed by `SPARKWAVE_CRASH_AT` around the Delta follower and retention. The tables, MVs and batches
are `crash_child`'s; retention keeps nothing past the newest base and the Delta logs trail by at most
4 epochs, so the follower commits every 2 epochs and every compaction retires log files.

Usage: python -m tests.delta_log_crash_child WAREHOUSE PROGRESS_FILE. It appends `i` to PROGRESS_FILE
once every statement of batch i is staged (acknowledged), then flushes."""

from __future__ import annotations

import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER, crash_child
from tests.oracle import to_sql

BATCHES = 6


def main(warehouse: str, progress: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(";".join(crash_child.SETUP))
        s.sql("SET retention_seconds = 0; SET delta_lag_epochs = 4")
        s.flush()
        for i in range(BATCHES):
            for st in crash_child.batch(i):
                s.sql(to_sql(st))
            with open(progress, "a") as f:
                f.write(f"{i}\n")
            s.flush()
            if i in (2, 4):
                s.compact()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
