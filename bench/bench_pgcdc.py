"""The CDC backfill of a PostgreSQL table (issue 49): rows per second of the whole path (CREATE TABLE
... WITH (connector = 'postgres-cdc') until the backfill is done, chunks of `snapshot.batch_size`
rows, each an epoch) and of the connector's own part (chunks read as text and turned into Arrow,
no Spark), each as a ratio of a plain `COPY t TO STDOUT` of the same table timed right before it;
the whole path with the chunks read by one connection and by `snapshot.parallelism` connections at
one snapshot, alternately, RUNS times each (medians). Then the pipeline's latency: the epochs of an
unrelated table and its MV alone and while a backfill (chunks of the default 10,000 rows) shares
them, in alternating blocks (the backfill paused by SOURCE_RATE_LIMIT = 0 between), p50 and p99.
With SPARKWAVE_BENCH_KEY=text the key is text, which PostgreSQL orders (read by one connection): the md5
of the number, so key order is unrelated to the heap's; `text-sorted`: the number zero-padded, in heap order;
`uuid`: the md5 as a uuid (ordered by sparkwave, in random order too).

Usage: python -m bench.bench_pgcdc [ROWS [CHUNK_ROWS [RUNS]]]"""

from __future__ import annotations

import os
import statistics
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
from sparkwave.connectors.postgres_cdc_position import Key
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.devtools.postgres_server import PostgresServer

KEYS = {"bigint": ("bigint", "bigint", "i"), "text": ("text", "varchar", "md5(i::text)"),
        "text-sorted": ("text", "varchar", "lpad(i::text, 12, '0')"), "uuid": ("uuid", "varchar", "md5(i::text)::uuid")}
KEY = os.environ.get("SPARKWAVE_BENCH_KEY", "bigint")
KEY_TYPE, KEY_DECLARED, KEY_VALUE = KEYS[KEY]
TEXT_KEY = KEY_TYPE != "bigint"  # read by one connection
DDL = f"id {KEY_TYPE} PRIMARY KEY, name text, v bigint, price numeric(10,2), ts timestamptz"
DECLARED = f"id {KEY_DECLARED} PRIMARY KEY, name varchar, v bigint, price decimal(10,2), ts timestamptz"
BATCH = 500_000
P99_CHUNK = 10_000  # snapshot.batch_size's default
# The unrelated table's epochs: BLOCKS blocks (alone, during, alone, ...) of BLOCK_EPOCHS epochs of U_ROWS rows.
BLOCKS, BLOCK_EPOCHS, U_ROWS, WARMUP = int(os.environ.get("SPARKWAVE_BENCH_BLOCKS", "6")), 20, 200, 10
PROFILE = os.environ.get("SPARKWAVE_BENCH_PROFILE") == "1"  # where the backfill's time goes (`bench/sampler.py`)


def options(pg: PostgresServer, slot: str, parallelism: int = 4) -> dict[str, str]:
    return {"connector": "postgres-cdc", "hostname": pg.host, "port": str(pg.port), "username": pg.user,
            "password": pg.password, "database.name": pg.dbname, "table.name": "t", "slot.name": slot,
            "snapshot.batch_size": str(BATCH), "max.rows.per.epoch": str(BATCH),
            "snapshot.parallelism": str(parallelism)}


def _with(opts: dict[str, str]) -> str:
    return ", ".join(f"{k} = {v!r}" for k, v in opts.items())


def copy_seconds(conn: psycopg.Connection) -> float:
    t0 = time.perf_counter()
    with conn.cursor().copy("COPY t TO STDOUT") as copy:
        for _ in copy:
            pass
    return time.perf_counter() - t0


def connector_seconds(pg: PostgresServer, conn: psycopg.Connection) -> float:
    """The connector's chunks alone (no Spark, no table): read, parsed, converted."""
    schema = Schema(tuple(Column(n, parse_type(t)) for n, t in
                          [("id", KEY_DECLARED), ("name", "varchar"), ("v", "bigint"), ("price", "decimal(10,2)"),
                           ("ts", "timestamptz")]), ("id",))
    conn.execute("SELECT pg_create_logical_replication_slot('bench_raw', 'pgoutput')")
    conn.execute("CREATE PUBLICATION sparkwave_t FOR TABLE t")
    cdc = PostgresCdc("t", schema, options(pg, "bench_raw"))
    pos: Key = cdc.reader.first_key(conn)
    t0, done = time.perf_counter(), False
    while not done:
        chunk = cdc._read_chunk(pos, None, BATCH)
        assert chunk is not None
        cdc._batch(chunk, [], chunk.next)
        pos, done = chunk.next, chunk.done
    seconds = time.perf_counter() - t0
    cdc.close()
    conn.execute("SELECT pg_drop_replication_slot('bench_raw')")
    conn.execute("DROP PUBLICATION sparkwave_t")
    return seconds


def backfill_seconds(s: sparkwave.Session, pg: PostgresServer, rows: int, parallelism: int) -> float:
    t0 = time.perf_counter()
    with Sampler() if PROFILE else nullcontext() as sampler:
        s.sql(f"CREATE TABLE t ({DECLARED}) WITH ({_with(options(pg, f'bench_e2e_{parallelism}', parallelism))})")
        while BACKFILLED not in s.catalog.source_offsets("t"):
            s.flush()
    seconds = time.perf_counter() - t0
    if sampler is not None:
        print(sampler.table(50))
    assert s.table("t").count() == rows
    s.sql("DROP TABLE t")
    return seconds


def main(rows: int, runs: int) -> None:
    root = fresh_dir("pgcdc")
    ratios: dict[str, list[float]] = {"connector": [], "whole, 1 connection": [], "whole, 4 connections": []}
    rates: dict[str, list[float]] = {k: [] for k in ["COPY", *ratios]}
    with PostgresServer(root / "pg") as pg, psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE t ({DDL})")
        conn.execute(f"INSERT INTO t SELECT {KEY_VALUE}, 'n' || (i %% 7), i * 3, (i %% 1000) / 10.0, "
                     "timestamptz '2026-01-01' + i * interval '1 second' FROM generate_series(1, %s) i", (rows,))
        conn.execute("VACUUM ANALYZE t")
        copy_seconds(conn)  # warm
        with sparkwave.connect(root / "wh", spark=spark(), barrier_interval_ms=3_600_000) as s:
            for run in range(runs):
                for name, measure in [("connector", lambda: connector_seconds(pg, conn)),
                                      ("whole, 1 connection", lambda: backfill_seconds(s, pg, rows, 1)),
                                      ("whole, 4 connections", lambda: backfill_seconds(s, pg, rows, 4))
                                      ][:2 if TEXT_KEY else 3]:
                    base = copy_seconds(conn)
                    took = measure()
                    ratios[name].append(base / took)
                    rates["COPY"].append(rows / base)
                    rates[name].append(rows / took)
                    print(f"run {run + 1}: {name}: {rows / took:,.0f} rows/s = {base / took:.2f}x COPY "
                          f"({rows / base:,.0f} rows/s)", flush=True)
            quiet, busy = pipeline_epochs(s, pg) if BLOCKS else ([], [])
    print(f"{rows} rows, key {KEY} ({KEY_VALUE}), chunks of {BATCH}, {runs} runs (medians; min-max of the ratio):")
    print(f"  COPY t TO STDOUT: {statistics.median(rates['COPY']):,.0f} rows/s")
    for name, values in ratios.items():
        if not values:
            continue
        print(f"  {name}: {statistics.median(rates[name]):,.0f} rows/s = {statistics.median(values):.2f}x COPY "
              f"({min(values):.2f}-{max(values):.2f})")
    if not quiet or not busy:
        return
    print(f"an unrelated table + MV, epochs of {U_ROWS} rows, {len(quiet)} epochs alone and {len(busy)} during a "
          f"backfill (chunks of {P99_CHUNK} rows), alternating blocks of {BLOCK_EPOCHS}: p50 {_p(quiet, 50):.3f} -> "
          f"{_p(busy, 50):.3f} s ({_p(busy, 50) / _p(quiet, 50):.2f}x), p99 {_p(quiet, 99):.3f} -> "
          f"{_p(busy, 99):.3f} s ({_p(busy, 99) / _p(quiet, 99):.2f}x)")


def pipeline_epochs(s: sparkwave.Session, pg: PostgresServer) -> tuple[list[float], list[float]]:
    """The epoch times (flush to commit) of an unrelated table and its MV alone and while a CDC
    backfill of `t` (chunks of P99_CHUNK rows) shares the epochs, in alternating blocks so that the
    machine's load drifts into both alike: the pipeline's latency the issue bounds (p99 <= 1.25x)."""
    s.sql("CREATE TABLE u (id bigint PRIMARY KEY, g int, v bigint)")
    s.sql("CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS total FROM u GROUP BY g")
    opts = {**options(pg, "bench_p99"), "snapshot.batch_size": str(P99_CHUNK), "max.rows.per.epoch": str(P99_CHUNK),
            "source_rate_limit": "0"}
    s.sql(f"CREATE TABLE t ({DECLARED}) WITH ({_with(opts)})")
    first = -WARMUP
    _epochs(s, first, lambda: False, WARMUP)  # the MV's first epochs compile its tree
    quiet: list[float] = []
    busy: list[float] = []
    for block in range(BLOCKS):
        first += BLOCK_EPOCHS
        during = block % 2 == 1
        s.sql(f"ALTER TABLE t SET SOURCE_RATE_LIMIT = {'DEFAULT' if during else '0'}")
        (busy if during else quiet).extend(_epochs(s, first, lambda: BACKFILLED in s.catalog.source_offsets("t")))
    s.sql("DROP TABLE t")
    return quiet, busy


def _epochs(s: sparkwave.Session, first: int, done: Callable[[], bool], n: int = BLOCK_EPOCHS) -> list[float]:
    times = []
    for i in range(first, first + n):
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
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
