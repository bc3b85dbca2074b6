"""The CDC backfill of a PostgreSQL table (issue 49): rows per second of the whole path (CREATE TABLE
... WITH (connector = 'postgres-cdc') until the backfill is done, chunks of `snapshot.batch_size`
rows, each an epoch) and of the connector's own part (chunks read as text and turned into Arrow,
no Spark), each as a ratio of a plain `COPY t TO STDOUT` of the same table.

Usage: python -m bench.bench_pgcdc [ROWS [CHUNK_ROWS]]"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

import sparkwave
from bench.common import fresh_dir, spark
from bench.sampler import Sampler
from sparkwave.connectors.postgres_cdc import BACKFILLED, PostgresCdc
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.devtools.postgres_server import PostgresServer

DDL = "id bigint PRIMARY KEY, name text, v bigint, price numeric(10,2), ts timestamptz"
DECLARED = "id bigint PRIMARY KEY, name varchar, v bigint, price decimal(10,2), ts timestamptz"
BATCH = 50_000
P99_CHUNK = 10_000  # snapshot.batch_size's default
EPOCHS, U_ROWS, WARMUP = 60, 200, 10  # the unrelated table's epochs (each run) and rows per epoch
PROFILE = os.environ.get("SPARKWAVE_BENCH_PROFILE") == "1"  # where the backfill's time goes (`bench/sampler.py`)


def options(pg: PostgresServer, slot: str) -> dict[str, str]:
    return {"connector": "postgres-cdc", "hostname": pg.host, "port": str(pg.port), "username": pg.user,
            "password": pg.password, "database.name": pg.dbname, "table.name": "t", "slot.name": slot,
            "snapshot.batch_size": str(BATCH), "max.rows.per.epoch": str(BATCH)}


def main(rows: int) -> None:
    root = fresh_dir("pgcdc")
    with PostgresServer(root / "pg") as pg, psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE t ({DDL})")
        conn.execute("INSERT INTO t SELECT i, 'n' || (i %% 7), i * 3, (i %% 1000) / 10.0, "
                     "timestamptz '2026-01-01' + i * interval '1 second' FROM generate_series(1, %s) i", (rows,))
        conn.execute("VACUUM ANALYZE t")
        t0 = time.perf_counter()
        with conn.cursor().copy("COPY t TO STDOUT") as copy:
            for _ in copy:
                pass
        copy_s = time.perf_counter() - t0

        schema = Schema(tuple(Column(n, parse_type(t)) for n, t in
                              [("id", "bigint"), ("name", "varchar"), ("v", "bigint"), ("price", "decimal(10,2)"),
                               ("ts", "timestamptz")]), ("id",))
        conn.execute("SELECT pg_create_logical_replication_slot('bench_raw', 'pgoutput')")
        conn.execute("CREATE PUBLICATION sparkwave_t FOR TABLE t")
        cdc = PostgresCdc("t", schema, options(pg, "bench_raw"))
        t0, pos, done = time.perf_counter(), 1, False
        while not done:
            chunk = cdc._read_chunk(pos, None, BATCH)
            cdc._batch(chunk.rows, [], chunk.next)
            pos, done = chunk.next, chunk.done
        raw_s = time.perf_counter() - t0
        cdc.close()
        conn.execute("SELECT pg_drop_replication_slot('bench_raw')")
        conn.execute("DROP PUBLICATION sparkwave_t")

        with sparkwave.connect(root / "wh", spark=spark(), barrier_interval_ms=3_600_000) as s:
            opts = ", ".join(f"{k} = '{v}'" for k, v in options(pg, "bench_e2e").items())
            t0 = time.perf_counter()
            with Sampler() if PROFILE else nullcontext() as sampler:
                s.sql(f"CREATE TABLE t ({DECLARED}) WITH ({opts})")
                while BACKFILLED not in s.catalog.source_offsets("t"):
                    s.flush()
            e2e_s = time.perf_counter() - t0
            if sampler is not None:
                print(sampler.table(50))
            assert s.sql("SELECT count(*) AS n FROM t").collect()[0].n == rows
            s.sql("DROP TABLE t")
            quiet, busy = pipeline_epochs(s, pg)
    print(f"{rows} rows: COPY TO STDOUT {rows / copy_s:,.0f} rows/s; connector chunks (text -> Arrow) "
          f"{rows / raw_s:,.0f} rows/s = {copy_s / raw_s:.2f}x COPY; whole backfill (epochs of {BATCH} rows into "
          f"the table) {rows / e2e_s:,.0f} rows/s = {copy_s / e2e_s:.2f}x COPY")
    print(f"an unrelated table + MV, epochs of {U_ROWS} rows: p50/p99 {_p(quiet, 50):.3f}/{_p(quiet, 99):.3f} s alone, "
          f"{_p(busy, 50):.3f}/{_p(busy, 99):.3f} s during a backfill of chunks of {P99_CHUNK} rows: p99 "
          f"{_p(busy, 99) / _p(quiet, 99):.2f}x ({len(quiet)} and {len(busy)} epochs)")


def pipeline_epochs(s: sparkwave.Session, pg: PostgresServer) -> tuple[list[float], list[float]]:
    """The epoch times (flush to commit) of an unrelated table and its MV, alone and while a CDC
    backfill of `t` (chunks of P99_CHUNK rows) shares the epochs: the pipeline's latency the issue
    bounds (p99 <= 1.25x)."""
    s.sql("CREATE TABLE u (id bigint PRIMARY KEY, g int, v bigint)")
    s.sql("CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS total FROM u GROUP BY g")
    _epochs(s, -WARMUP, lambda: False, WARMUP)  # the MV's first epochs compile its tree
    quiet = _epochs(s, 0, lambda: False)
    opts = {**options(pg, "bench_p99"), "snapshot.batch_size": str(P99_CHUNK), "max.rows.per.epoch": str(P99_CHUNK)}
    s.sql(f"CREATE TABLE t ({DECLARED}) WITH ({', '.join(f'{k} = {v!r}' for k, v in opts.items())})")
    busy = _epochs(s, EPOCHS, lambda: BACKFILLED in s.catalog.source_offsets("t"))
    s.sql("DROP TABLE t")
    return quiet, busy


def _epochs(s: sparkwave.Session, first: int, done: Callable[[], bool], n: int = 0) -> list[float]:
    times = []
    for i in range(first, first + (n or EPOCHS)):
        if done():
            break
        ids = pa.array(range(i * U_ROWS, (i + 1) * U_ROWS), pa.int64())
        s.insert("u", pa.table({"id": ids, "g": pc.cast(pc.bit_wise_and(ids, 15), pa.int32()), "v": ids}))
        t0 = time.perf_counter()
        s.flush()
        times.append(time.perf_counter() - t0)
    return times


def _p(times: list[float], q: int) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


if __name__ == "__main__":
    if len(sys.argv) > 2:
        BATCH = int(sys.argv[2])
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
