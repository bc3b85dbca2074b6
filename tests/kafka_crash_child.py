"""A Kafka pipeline run in a child process by the Kafka crash test, killed by `SPARKWAVE_CRASH_AT`.

Usage: python -m tests.kafka_crash_child WAREHOUSE BOOTSTRAP TOPIC. The topic is full before it
starts; it reads it a few messages per epoch until killed."""

from __future__ import annotations

import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER

PER_EPOCH = 30
MV = "SELECT p, count(*) AS n, sum(price) AS total, max(o) AS last FROM ev GROUP BY p"


def setup_sql(bootstrap: str, topic: str) -> str:
    return (f"CREATE TABLE ev (id int, name varchar, price double) INCLUDE partition AS p INCLUDE offset AS o "
            f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{bootstrap}', "
            f"max.rows.per.epoch = '{PER_EPOCH}') FORMAT PLAIN ENCODE JSON; "
            f"CREATE MATERIALIZED VIEW per_partition AS {MV}")


def main(warehouse: str, bootstrap: str, topic: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(setup_sql(bootstrap, topic))
        while True:
            s.flush()


if __name__ == "__main__":
    main(*sys.argv[1:4])
