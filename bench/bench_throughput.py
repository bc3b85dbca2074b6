"""Throughput: rows/s end to end, table -> 3 MVs, at 100k rows per epoch, against a plain Spark job
that reads the same rows and writes the same three projections to three Delta tables (Spark
computes, delta-rs commits, as no Delta writer for Spark is installable here).
Target: >= 0.5x the plain job."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

import sparkwave
from bench.common import fresh_dir, median, report, spark, timed

ROWS = 100_000
EPOCHS = 6
MVS = [
    ("m_filter", "SELECT id, v, c FROM t WHERE v > 500"),
    ("m_expr", "SELECT id, v * 2 + 1 AS w, upper(c) AS uc FROM t"),
    ("m_case", "SELECT id, CASE WHEN v % 2 = 0 THEN 'even' ELSE 'odd' END AS parity FROM t"),
]


def batch(i: int) -> pa.Table:
    ids = pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())
    return pa.table({"id": ids, "v": pa.array([(x * 7919) % 1000 for x in range(ROWS)], pa.int32()),
                     "c": pa.array([f"c{x % 97}" for x in range(ROWS)])})


def sparkwave_run() -> float:
    with sparkwave.connect(fresh_dir("tp-sparkwave"), spark=spark(), barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (id bigint, v int, c varchar) APPEND ONLY")
        for name, sql in MVS:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        times = []
        for i in range(EPOCHS):
            data = batch(i)
            times.append(timed(lambda d=data: (s.insert("t", d), s.flush())))
    return median(times[1:])


def plain_run() -> float:
    root = fresh_dir("tp-plain")
    times = []
    for i in range(EPOCHS):
        data = batch(i)

        def job(d: pa.Table = data) -> None:
            spark().createDataFrame(d).createOrReplaceTempView("t")
            for name, sql in MVS:
                write_deltalake(str(root / name), spark().sql(sql).toArrow(), mode="append")

        times.append(timed(job))
    return median(times[1:])


def main() -> str:
    sw, plain = sparkwave_run(), plain_run()
    lines = ["| run | s per 100k-row epoch | rows/s | vs plain |", "|---|---|---|---|",
             f"| plain Spark job, 3 Delta tables | {plain:.2f} | {ROWS / plain:,.0f} | 1.00x |",
             f"| sparkwave table -> 3 MVs | {sw:.2f} | {ROWS / sw:,.0f} | {plain / sw:.2f}x |"]
    return report("Throughput: table -> 3 MVs at 100k rows per epoch", lines)


if __name__ == "__main__":
    main()
