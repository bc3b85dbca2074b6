"""The Delta source's ingest (connectors/delta_source.py) vs Spark's own read of the same versions.

An external writer (delta-rs) commits `VERSIONS` appends of `ROWS_PER_VERSION` rows each. Measured:

1. sparkwave: `CREATE SOURCE dl ... WITH (connector = 'deltalake')` and an MV grouping it, then the
   epochs that read every version (flushed back to back, `max.rows.per.epoch` = `PER_EPOCH`), wall
   time from the first flush to the epoch holding the last version.
2. Spark: its Parquet reader over the data files of the same versions (what Spark's Delta reader
   does after replaying the log; this Spark has no delta-spark, sparkwave writes Delta with delta-rs)
   with the same aggregate: one batch job, the same rows, no epochs, no exactly-once bookkeeping.

The ratio is Spark's time over ours: ours as a fraction of Spark's own read (higher is better).
Environment: SPARKWAVE_BENCH_DELTA_VERSIONS, SPARKWAVE_BENCH_DELTA_ROWS (per version),
SPARKWAVE_BENCH_DELTA_PER_EPOCH (max.rows.per.epoch)."""

from __future__ import annotations

import os
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

import sparkwave
from bench.common import fresh_dir, median, report, spark

VERSIONS = int(os.environ.get("SPARKWAVE_BENCH_DELTA_VERSIONS", 20))
ROWS_PER_VERSION = int(os.environ.get("SPARKWAVE_BENCH_DELTA_ROWS", 50_000))
PER_EPOCH = int(os.environ.get("SPARKWAVE_BENCH_DELTA_PER_EPOCH", 200_000))
RUNS = 3
MV = "SELECT k, count(*) AS n, sum(price) AS total FROM dl GROUP BY k"


def write_table(path: str) -> None:
    for v in range(VERSIONS):
        ids = range(v * ROWS_PER_VERSION, (v + 1) * ROWS_PER_VERSION)
        rows = pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array([i % 97 for i in ids], pa.int32()),
                         "name": [f"name-{i}" for i in ids],
                         "price": pa.array([(i * 37) % 1000 / 10 for i in ids], pa.float64())})
        write_deltalake(path, rows, mode="append")


def ours(path: str, run: int) -> tuple[float, int]:
    wh = fresh_dir(f"delta-source-{run}")
    with sparkwave.connect(wh, spark=spark(), barrier_interval_ms=3_600_000) as s:
        s.sql(f"CREATE SOURCE dl (id bigint, k int, name varchar, price double) WITH (connector = 'deltalake', "
              f"location = '{path}', max.rows.per.epoch = '{PER_EPOCH}')")
        s.sql(f"CREATE MATERIALIZED VIEW m AS {MV}")
        t0 = time.perf_counter()
        while s.catalog.source_offsets("dl").get("0", 0) < VERSIONS:
            s.flush()
        took = time.perf_counter() - t0
        rows = sum(r.n for r in s.sql("SELECT n FROM m").collect())
    return took, rows


def sparks(path: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    files = DeltaTable(path).file_uris()  # the log replay, as Spark's Delta reader's first step
    out = spark().read.parquet(*files).groupBy("k").agg({"*": "count", "price": "sum"}).collect()
    return time.perf_counter() - t0, sum(r["count(1)"] for r in out)


def main() -> str:
    path = str(fresh_dir("delta-source-table"))
    write_table(path)
    total = VERSIONS * ROWS_PER_VERSION
    sparks(path)  # warm: the JVM's classes and Delta's log cache, as our first run's
    mine, theirs = [], []
    for run in range(RUNS):
        took, rows = ours(path, run)
        assert rows == total, f"sparkwave's MV counted {rows} rows of {total}"
        mine.append(took)
        took, rows = sparks(path)
        assert rows == total, f"Spark counted {rows} rows of {total}"
        theirs.append(took)
    m, t = median(mine), median(theirs)
    return report("Delta source ingest vs Spark's read of the same versions", [
        "| measure | result | ratio |", "|---|---|---|",
        f"| Spark: read the table ({VERSIONS} versions, {total:,} rows) + aggregate, median of {RUNS} | "
        f"{t:.2f} s ({total / t:,.0f} rows/s) | 1.00x |",
        f"| sparkwave: Delta source + MV over every version, {PER_EPOCH:,} rows/epoch, median of {RUNS} | "
        f"{m:.2f} s ({total / m:,.0f} rows/s) | **{t / m:.2f}x** |",
    ])


if __name__ == "__main__":
    main()
