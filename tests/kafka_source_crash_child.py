"""A source backfill run in a child process by the source-backfill crash test, killed by
`SPARKWAVE_CRASH_AT`.

Usage: python -m tests.kafka_source_crash_child WAREHOUSE BOOTSTRAP TOPIC. The topic holds
`MESSAGES` messages before it starts; it reads some of them, then creates a late MV in the
background (chunked) and goes on reading while the MV backfills."""

from __future__ import annotations

import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.integration.test_kafka_source import MVS, source_sql
from tests.kafka_util import Topic

MESSAGES = 800


def main(warehouse: str, bootstrap: str, topic: str) -> None:
    spark = create_spark(TEST_MASTER)
    t = Topic.__new__(Topic)  # the existing topic: only its name and broker
    t.bootstrap, t.name = bootstrap, topic
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(source_sql(t, 100))
        s.sql(f"CREATE MATERIALIZED VIEW cheap WITH (backfill_strategy = 'blocking') AS {MVS['cheap']}")
        for _ in range(4):
            s.flush()
        # Paused at first, so that epochs commit after its snapshot: its log-store phase has work.
        s.sql("SET backfill_chunk_rows = 100; SET background_ddl = true; SET backfill_rate_limit = 0")
        s.sql(f"CREATE MATERIALIZED VIEW per_partition AS {MVS['per_partition']}")
        for _ in range(4):
            s.flush()
        s.sql("ALTER MATERIALIZED VIEW per_partition SET BACKFILL_RATE_LIMIT = DEFAULT")
        s.wait()
        for _ in range(3):
            s.flush()


if __name__ == "__main__":
    main(*sys.argv[1:4])
