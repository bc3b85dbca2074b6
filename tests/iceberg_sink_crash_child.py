"""A pipeline with Iceberg sinks, run in a child process by the Iceberg sink crash test and killed
by `SPARKWAVE_CRASH_AT` at a named point (in the sink backfill, before the commit, inside it: the
new metadata file written and the catalog not yet pointing at it, or after it).

Usage: python -m tests.iceberg_sink_crash_child WAREHOUSE LAKE FINAL_FILE. Each run creates what is
missing (an upsert sink of an aggregate and an append-only sink of a log table, both to Iceberg
tables in LAKE, their SQL catalog a SQLite file there), writes a few epochs of changes, waits until
both sinks have delivered the last committed epoch and writes that epoch to FINAL_FILE."""

from __future__ import annotations

import sys
from pathlib import Path

import sparkwave
import sparkwave.meta.sinks as sinks
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.sink_crash_child import rows
from tests.sink_util import MV_QUERIES, T_DDL, wait_sink

sinks.SNAPSHOT_CHUNK_ROWS = 3  # the sink backfill takes several deliveries
SINKS = {"i_agg": ("agg", "agg_out", "upsert"), "i_log": ("log", "log_out", "append-only")}


def options(lake: str, table: str) -> str:
    return (f"connector = 'iceberg', warehouse.path = '{lake}', database.name = 'db', table.name = '{table}', "
            f"catalog.type = 'sql', catalog.uri = 'sqlite:///{lake}/catalog.db', create_table_if_not_exists = 'true'")


def main(warehouse: str, lake: str, final_file: str) -> None:
    Path(lake).mkdir(parents=True, exist_ok=True)
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        first = s.catalog.relation("t") is None
        if first:
            s.sql(f"CREATE TABLE t ({T_DDL}); CREATE TABLE log (x int, y varchar) APPEND ONLY; "
                  f"CREATE MATERIALIZED VIEW agg AS {MV_QUERIES['agg']}")
            for r in range(3):
                rows(s, r)
        for name, (mv, table, mode) in SINKS.items():
            if s.catalog.sink(name) is None:
                s.sql(f"CREATE SINK {name} FROM {mv} WITH ({options(lake, table)}, type = '{mode}')")
        for r in range(3, 6) if first else range(6, 8):
            rows(s, r)
        epoch = s.flush()
        for name in SINKS:
            wait_sink(s, name, epoch)
        Path(final_file).write_text(str(epoch))


if __name__ == "__main__":
    main(*sys.argv[1:4])
