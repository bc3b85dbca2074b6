"""Stateful snapshot backfills: Nexmark q3, q4, q5, q7 and q8 created (snapshot strategy,
foreground) over a history of the three Nexmark tables, against Spark evaluating the same query
over the same snapshot as one batch job to a no-op sink, measured in the same process.
Target (issue "One engine"): >= 0.5x the batch job. Each query is created twice: in one chunk
(the default `backfill_chunk_rows` holds these snapshots whole) and chunked
(`SPARKWAVE_BENCH_CHUNK_ROWS`, default 200,000 rows per chunk of the driving upstream).

Run it against another checkout's code with `PYTHONPATH=<checkout>/src` (the figures of two
versions are comparable when run one after the other on the same machine)."""

from __future__ import annotations

import os
import time

import sparkwave
from bench.bench_dataflow import _spark_sql
from bench.common import fresh_dir, report, spark, timed
from sparkwave.cli.nexmark_sql import QUERIES, tables_sql

HISTORY_S = float(os.environ.get("SPARKWAVE_BENCH_HISTORY_S", 20))
BIDS_PER_S = int(os.environ.get("SPARKWAVE_BENCH_NEXMARK_RATE", 100_000))
CHUNK_ROWS = int(os.environ.get("SPARKWAVE_BENCH_CHUNK_ROWS", 200_000))
STATEFUL = ("q3", "q4", "q5", "q7", "q8")


def main() -> str:
    where = fresh_dir("stateful-backfill-history")
    with sparkwave.connect(where, spark=spark(), barrier_interval_ms=1000) as s:
        s.sql(tables_sql(BIDS_PER_S, event_gap_ns=1_000_000))
        time.sleep(HISTORY_S)
    lines = ["| query | upstream snapshot rows | Spark batch s | CREATE s (one chunk) | vs Spark batch | "
             f"CREATE s ({CHUNK_ROWS:,}-row chunks) | chunks | vs Spark batch |", "|---|---|---|---|---|---|---|---|"]
    with sparkwave.connect(where, spark=spark(), barrier_interval_ms=3_600_000) as s:  # no more epochs
        epoch = s.committed_epoch
        for t in ("person", "auction", "bid"):
            s.table(t, as_of=epoch).createOrReplaceTempView(t)
        for q in STATEFUL:
            sql = QUERIES[q]
            batch = lambda sql=sql: spark().sql(_spark_sql(sql)).write.format("noop").mode("overwrite").save()  # noqa: E731
            batch()  # warm-up, as the CREATE below runs after this one
            t_batch = timed(batch)
            s.sql("SET backfill_chunk_rows = 10000000")
            t_create = timed(lambda q=q, sql=sql: s.sql(f"CREATE MATERIALIZED VIEW {q} AS {sql}"))
            rows = next(j for j in s.jobs() if j.name == q).rows_total
            s.sql(f"DROP MATERIALIZED VIEW {q}")
            s.sql(f"SET backfill_chunk_rows = {CHUNK_ROWS}")
            t_chunked = timed(lambda q=q, sql=sql: s.sql(f"CREATE MATERIALIZED VIEW {q} AS {sql}"))
            chunks = len(s.catalog.job_chunks(next(j for j in s.jobs() if j.name == q).id))
            s.sql(f"DROP MATERIALIZED VIEW {q}")
            lines.append(f"| {q} | {rows:,} | {t_batch:.1f} | {t_create:.1f} | **{t_batch / t_create:.2f}x** | "
                         f"{t_chunked:.1f} | {chunks} | **{t_batch / t_chunked:.2f}x** |")
    import sparkwave.meta.creating_job as cj

    return report(f"Stateful snapshot backfill ({os.path.dirname(cj.__file__)})", lines)


if __name__ == "__main__":
    main()
