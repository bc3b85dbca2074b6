"""The dataflow crash child's pipeline (`tests/dataflow_crash_child.py`: its tables, seed and
batches) with ASOF joins instead: one in the main graph from the start, two created mid-stream
(chunked snapshot backfill, started paused) while batches keep coming. A self-join of `f` on its
group, `v` the time: many ties, so the least right key decides (`stream/asof_join.py`).

Usage: python -m tests.asof_crash_child WAREHOUSE PROGRESS_FILE (as the dataflow crash child)."""

from __future__ import annotations

import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.backfill_crash_child import run_batches
from tests.dataflow_crash_child import BATCHES, DIM_SEED, F_SEED, TABLES, batch
from tests.oracle import values_sql

__all__ = ["BATCHES", "DIM_SEED", "F_SEED", "JOBS", "MVS", "ORACLE", "TABLES", "batch"]

MVS = {  # in the main graph from the start
    "masof": "SELECT a.id, a.v, b.id AS bid, b.v AS bv FROM f a ASOF LEFT JOIN f b ON a.g = b.g AND a.v > b.v",
}
JOBS = {  # created mid-stream with snapshot backfill, the left side's scan driving the chunks
    "basof": "SELECT a.id, b.id AS bid FROM f a ASOF JOIN f b ON a.g = b.g AND a.v <= b.v",
    "basof_agg": "SELECT b.id AS bid, count(*) AS n FROM f a ASOF JOIN f b ON a.g = b.g AND a.v < b.v GROUP BY b.id",
}


def _ranked(side: str, ineq: str, closest: str) -> str:
    return (f"SELECT a.id, a.v, b.id AS bid, b.v AS bv, row_number() OVER (PARTITION BY a.id ORDER BY {closest}, "
            f"b.id) AS _rn FROM f a {side} JOIN f b ON a.g = b.g AND {ineq}")


ORACLE = {  # each MV in plain SQL (DuckDB's ASOF JOIN picks among tied rows as it likes)
    "masof": f"SELECT id, v, bid, bv FROM ({_ranked('LEFT', 'a.v > b.v', 'b.v DESC')}) j WHERE _rn = 1",
    "basof": f"SELECT id, bid FROM ({_ranked('', 'a.v <= b.v', 'b.v')}) j WHERE _rn = 1",
    "basof_agg": f"SELECT bid, count(*) AS n FROM ({_ranked('', 'a.v < b.v', 'b.v')}) j WHERE _rn = 1 GROUP BY bid",
}


def main(warehouse: str, progress: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE f (id int, g int, v int, PRIMARY KEY (id)); "
              "CREATE TABLE dim (g int, name varchar, PRIMARY KEY (g))")
        s.sql(f"INSERT INTO f VALUES {values_sql(F_SEED)}; INSERT INTO dim VALUES {values_sql(DIM_SEED)}")
        s.flush()
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = 'blocking') AS {sql}")
        s.sql("SET background_ddl = true; SET backfill_rate_limit = 0; SET backfill_chunk_rows = 40")
        for name, sql in JOBS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        s.sql("SET backfill_rate_limit = default")
        run_batches(s, progress, BATCHES, batch, resume_at=2, jobs=list(JOBS))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
