"""A pipeline of dataflow MVs (aggregates and joins) run in a child process by the dataflow crash
tests and killed by `SPARKWAVE_CRASH_AT`: two MVs run in the main graph from the start, two more
are created (chunked snapshot backfill, started paused) while batches keep coming.

Usage: python -m tests.dataflow_crash_child WAREHOUSE PROGRESS_FILE. It appends `i j` to
PROGRESS_FILE once statement j of batch i is staged (acknowledged), and flushes after each batch."""

from __future__ import annotations

import random
import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.backfill_crash_child import run_batches
from tests.oracle import values_sql

F_SEED = [(k, k % 7, (k * 13) % 50) for k in range(150)]
DIM_SEED = [(g, f"n{g % 4}") for g in range(6)]
TABLES = [("f", "id INTEGER, g INTEGER, v INTEGER", ["id", "g", "v"], ["id"]),
          ("dim", "g INTEGER, name VARCHAR", ["g", "name"], ["g"])]
MVS = {  # in the main graph from the start
    "agg": "SELECT g, count(*) AS n, sum(v) AS s, min(v) AS mn, max(v) AS mx FROM f GROUP BY g",
    "jn": "SELECT f.id, f.v, dim.name FROM f LEFT JOIN dim ON f.g = dim.g",
}
JOBS = {  # created mid-stream with snapshot backfill
    "bagg": "SELECT g % 3 AS g3, count(DISTINCT v) AS dv, max(v) AS mx, avg(v) AS av FROM f GROUP BY g % 3",
    "bjoin": "SELECT dim.name, count(*) AS n, min(f.v) AS mn FROM f JOIN dim ON f.g = dim.g GROUP BY dim.name",
}
BATCHES = 7


def batch(i: int) -> list[tuple]:
    rnd = random.Random(300 + i)
    out: list[tuple] = [("insert", "f", [(rnd.randint(0, 170), rnd.randint(0, 7), rnd.randint(0, 60))
                                         for _ in range(rnd.randint(3, 8))])]
    out.append(("update", "f", {"v": "v + 3"}, f"id % 6 = {rnd.randrange(6)}"))
    out.append(("delete", "f", f"v >= {rnd.randint(50, 62)}"))  # the current max goes
    out.append(("delete", "f", f"g = {rnd.randrange(8)} AND id % 2 = 0"))
    if i % 2:
        out.append(("insert", "dim", [(rnd.randint(0, 7), f"n{rnd.randrange(4)}")]))
    else:
        out.append(("delete", "dim", f"g = {rnd.randrange(7)}"))
    return out


def main(warehouse: str, progress: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE f (id int, g int, v int, PRIMARY KEY (id)); "
              "CREATE TABLE dim (g int, name varchar, PRIMARY KEY (g))")
        s.sql(f"INSERT INTO f VALUES {values_sql(F_SEED)}; INSERT INTO dim VALUES {values_sql(DIM_SEED)}")
        s.flush()
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = 'blocking') AS {sql}")
        # chunked: each job reads f in several vnode ranges, then (both aggregate) merges the partials
        s.sql("SET background_ddl = true; SET backfill_rate_limit = 0; SET backfill_chunk_rows = 40")
        for name, sql in JOBS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        s.sql("SET backfill_rate_limit = default")
        run_batches(s, progress, BATCHES, batch, resume_at=2, jobs=list(JOBS))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
