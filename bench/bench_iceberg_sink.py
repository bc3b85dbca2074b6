"""The Iceberg sink's throughput as a ratio of pyiceberg's own writes of the same rows, in one
process, on a local SQLite catalog:

1. Append-only: `ROWS` new rows of a table delivered by the sink (paused while the epochs commit,
   then released: the log-store path) vs one `Table.append` of the same Arrow rows.
2. Upsert: `UPSERT_ROWS` rows of a keyed MV, every one updated (-U/+U: the sink deletes the keys
   by filter, copy-on-write, and appends the new rows) vs pyiceberg's own `Table.upsert` of the
   same new rows into a table holding the old ones."""

from __future__ import annotations

import os
import time

import pyarrow as pa

import sparkwave
from bench.common import fresh_dir, report, spark, timed

ROWS = int(os.environ.get("SPARKWAVE_BENCH_ICEBERG_ROWS", 1_000_000))
UPSERT_ROWS = int(os.environ.get("SPARKWAVE_BENCH_ICEBERG_UPSERT_ROWS", 100_000))


def options(lake, table: str, mode: str) -> str:
    return (f"connector = 'iceberg', warehouse.path = '{lake}', database.name = 'db', table.name = '{table}', "
            f"catalog.uri = 'sqlite:///{lake}/catalog.db', create_table_if_not_exists = 'true', type = '{mode}', "
            "snapshot = 'false', sink_rate_limit = 0")


def rows(lo: int, n: int, suffix: str = "") -> pa.Table:
    return pa.table({"id": pa.array(range(lo, lo + n), pa.int64()),
                     "k": pa.array([i % 97 for i in range(lo, lo + n)], pa.int32()),
                     "name": pa.array([f"name-{i}{suffix}" for i in range(lo, lo + n)], pa.string())})


def released(s, sink: str) -> float:
    """Seconds from releasing the paused sink to its delivery of the last committed epoch."""
    last = s.flush()
    t0 = time.perf_counter()
    s.sql(f"ALTER SINK {sink} SET SINK_RATE_LIMIT = DEFAULT")
    s.sinks.wait_until(sink, last, timeout=1800)
    return time.perf_counter() - t0


def main() -> str:
    import pyiceberg.io.pyarrow  # noqa: F401  (pyiceberg's write path, imported on first use: warm for both)
    from pyiceberg.catalog.sql import SqlCatalog
    lake = fresh_dir("iceberg-lake")
    lake.mkdir(parents=True)
    with sparkwave.connect(fresh_dir("iceberg-wh"), spark=spark(), barrier_interval_ms=3_600_000) as s:
        s.sql("SET dml_rows_per_epoch = 200000")
        s.sql("CREATE TABLE log (id bigint, k int, name varchar) APPEND ONLY")
        s.sql(f"CREATE SINK a FROM log WITH ({options(lake, 'a_out', 'append-only')})")
        s.insert("log", rows(0, ROWS))
        appended = released(s, "a")
        s.sql("CREATE TABLE t (id bigint PRIMARY KEY, k int, name varchar)")
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT id, k, name FROM t WHERE k >= 0")
        s.sql(f"CREATE SINK u FROM m WITH ({options(lake, 'u_out', 'upsert')})")
        s.insert("t", rows(0, UPSERT_ROWS))
        released(s, "u")
        s.sql("ALTER SINK u SET SINK_RATE_LIMIT = 0")
        s.sql("UPDATE t SET name = name || '!'")  # every row: -U/+U
        upserted = released(s, "u")
    catalog = SqlCatalog("default", uri=f"sqlite:///{lake}/catalog.db", warehouse=lake.as_uri())
    own = catalog.create_table(("db", "own_append"), schema=rows(0, 0).schema)
    data = rows(0, ROWS)
    plain = timed(lambda: own.append(data))
    target = catalog.create_table(("db", "own_upsert"), schema=rows(0, 0).schema)
    target.append(rows(0, UPSERT_ROWS))
    new = rows(0, UPSERT_ROWS, "!")
    plain_upsert = timed(lambda: target.upsert(new, join_cols=["id"]))
    lines = ["| measure | result | ratio |", "|---|---|---|",
             f"| sink, append-only: {ROWS:,} rows, paused then released | {appended:.1f} s "
             f"({ROWS / appended:,.0f} rows/s) | **{plain / appended:.2f}x** pyiceberg append |",
             f"| pyiceberg `Table.append` of the same rows | {plain:.1f} s ({ROWS / plain:,.0f} rows/s) | 1.00x |",
             f"| sink, upsert: {UPSERT_ROWS:,} rows updated (delete by key filter + append, one commit) | "
             f"{upserted:.1f} s ({UPSERT_ROWS / upserted:,.0f} rows/s) | **{plain_upsert / upserted:.2f}x** "
             "pyiceberg upsert |",
             f"| pyiceberg `Table.upsert` of the same new rows | {plain_upsert:.1f} s "
             f"({UPSERT_ROWS / plain_upsert:,.0f} rows/s) | 1.00x |"]
    return report("Iceberg sink: throughput vs pyiceberg's own writes", lines)


if __name__ == "__main__":
    main()
