"""A Delta source run in a child process by the Delta crash test, killed by `SPARKWAVE_CRASH_AT`.

Usage: python -m tests.delta_crash_child WAREHOUSE TABLE. The Delta table holds the versions `land`
wrote (appends, an update and a delete under a change data feed); the child reads them a few per
epoch into a keyed table and an MV until it is killed."""

from __future__ import annotations

import sys

from deltalake import DeltaTable, write_deltalake

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.integration.test_delta_source import CDF, MVS, batch


def land(path: str) -> int:
    """Writes the table's versions; returns the last one."""
    write_deltalake(path, batch(30, 0), configuration=CDF)
    for lo in range(30, 150, 30):
        write_deltalake(path, batch(30, lo), mode="append")
    DeltaTable(path).update(updates={"price": "price + 1000"}, predicate="id % 4 = 0")
    DeltaTable(path).delete("id % 5 = 0")
    write_deltalake(path, batch(30, 150), mode="append")
    return DeltaTable(path).version()


def main(warehouse: str, path: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(f"CREATE TABLE dl (id bigint PRIMARY KEY, name varchar, price double) WITH (connector = 'deltalake', "
              f"location = '{path}', max.rows.per.epoch = '40')")
        s.sql(f"CREATE MATERIALIZED VIEW by_name AS {MVS['by_name']}")
        for _ in range(12):
            s.flush()


if __name__ == "__main__":
    main(*sys.argv[1:3])
