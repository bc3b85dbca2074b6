"""A pipeline with PostgreSQL sinks, run in a child process by the sink crash test and killed by
`SPARKWAVE_CRASH_AT` at a named point (in the sink backfill, mid-COPY, before or after the
target's commit).

Usage: python -m tests.sink_crash_child WAREHOUSE PG_OPTIONS FINAL_FILE BOOTSTRAP TOPIC. Each run
creates what is missing (two PostgreSQL sinks and a Kafka one), writes a few epochs of changes,
waits until every sink has delivered the last committed epoch and writes that epoch to FINAL_FILE."""

from __future__ import annotations

import sys
from pathlib import Path

import sparkwave
import sparkwave.meta.sinks as sinks
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.sink_util import MV_QUERIES, T_DDL, wait_sink

sinks.SNAPSHOT_CHUNK_ROWS = 3  # the sink backfill takes several deliveries


SINKS = ("s_agg", "s_log", "s_kafka")


def main(warehouse: str, pg: str, final_file: str, bootstrap: str, topic: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        first = s.catalog.relation("t") is None
        if first:
            s.sql(f"CREATE TABLE t ({T_DDL}); CREATE TABLE log (x int, y varchar) APPEND ONLY; "
                  f"CREATE MATERIALIZED VIEW agg AS {MV_QUERIES['agg']}")
            rows(s, 0)
        if s.catalog.sink("s_agg") is None:
            s.sql(f"CREATE SINK s_agg FROM agg WITH ({pg}, table = 'agg_out', auto.create = 'true')")
        if s.catalog.sink("s_log") is None:
            s.sql(f"CREATE SINK s_log FROM log WITH ({pg}, table = 'log_out', auto.create = 'true')")
        if s.catalog.sink("s_kafka") is None:
            s.sql(f"CREATE SINK s_kafka FROM agg WITH (connector = 'kafka', topic = '{topic}', "
                  f"properties.bootstrap.server = '{bootstrap}') FORMAT UPSERT ENCODE JSON")
        for r in range(1, 6) if first else range(6, 8):
            rows(s, r)
        epoch = s.flush()
        for name in SINKS:
            wait_sink(s, name, epoch)
        Path(final_file).write_text(str(epoch))


def rows(s, r: int) -> None:
    base = r * 10
    s.sql("INSERT INTO t VALUES " + ", ".join(f"({base + i}, {i % 3}, {base + i}, 'x')" for i in range(6)))
    s.sql(f"UPDATE t SET v = v + 1 WHERE k % 4 = {r % 4}")
    s.sql(f"DELETE FROM t WHERE k % 5 = {r % 5}")
    s.sql("INSERT INTO log VALUES " + ", ".join(f"({r}, 'r{i}')" for i in range(4)))
    s.flush()


if __name__ == "__main__":
    main(*sys.argv[1:6])
