"""A pipeline run in a child process by the crash tests, killed by `SPARKWAVE_CRASH_AT`.

Usage: python -m tests.crash_child WAREHOUSE PROGRESS_FILE. It appends `i` to PROGRESS_FILE once
every statement of batch i is staged (acknowledged), then flushes."""

from __future__ import annotations

import random
import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.oracle import to_sql

SETUP = [
    "CREATE TABLE t (k int, a int, b varchar, PRIMARY KEY (k))",
    "CREATE TABLE g (id bigint, v int) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
    "fields.id.start = '0', fields.v.min = '0', fields.v.max = '100', fields.v.seed = '7', "
    "datagen.rows.per.second = '40')",
    "CREATE MATERIALIZED VIEW m1 AS SELECT k, a * 3 AS a3, b FROM t WHERE a > 2",
    "CREATE MATERIALIZED VIEW m2 AS SELECT a3 + 1 AS a4, upper(b) AS ub FROM m1 WHERE a3 < 40",
    "CREATE MATERIALIZED VIEW mg AS SELECT id, v FROM g WHERE v > 50",
]
MVS = {
    "m1": "SELECT k, a * 3 AS a3, b FROM t WHERE a > 2",
    "m2": "SELECT a3 + 1 AS a4, upper(b) AS ub FROM m1 WHERE a3 < 40",
}
LATE_MV = ("m3", "SELECT k, a - 1 AS am FROM t WHERE a IS NOT NULL")
BATCHES = 6


def batch(i: int) -> list[tuple]:
    """Batch i's statements, as the oracle model's tuples. One DML epoch per batch."""
    rnd = random.Random(i)
    out: list[tuple] = [("insert", "t", [(rnd.randint(0, 15), rnd.randint(-2, 20), rnd.choice(["p", "q", None]))
                                         for _ in range(rnd.randint(2, 6))])]
    if i % 2 == 1:
        out.append(("update", "t", {"a": "a + 1"}, f"k < {rnd.randint(3, 12)}"))
    if i % 3 == 2:
        out.append(("delete", "t", f"k BETWEEN {rnd.randint(0, 6)} AND {rnd.randint(6, 12)}"))
    return out


def run(s: sparkwave.Session, progress: str, *, maintenance: bool = True) -> None:
    """The scenario on `s`: each batch noted in `progress` before its flush; with `maintenance`, a
    compaction after the third and the late MV after the fourth."""
    s.sql(";".join(SETUP))
    s.flush()
    for i in range(BATCHES):
        for st in batch(i):
            s.sql(to_sql(st))
        with open(progress, "a") as f:
            f.write(f"{i}\n")
        s.flush()
        if maintenance and i == 2:
            s.compact()
        if maintenance and i == 3:
            s.sql(f"CREATE MATERIALIZED VIEW {LATE_MV[0]} WITH (backfill_strategy = 'blocking') AS {LATE_MV[1]}")


def main(warehouse: str, progress: str) -> None:
    with sparkwave.connect(warehouse, spark=create_spark(TEST_MASTER), barrier_interval_ms=3_600_000) as s:
        run(s, progress)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
