"""`sparkwave serve` as a process: its console, its address file, a SIGTERM while epochs, a backfill
and sink deliveries run (exit 0, nothing half-done), and a restart that recovers everything exactly
(the MVs and the sink's target against DuckDB over the table's rows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable

from tests.oracle import connect, duckdb_sql, multiset, values_sql
from tests.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
STATEMENT_ROWS = 5
MVS = {
    "agg": "SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g",
    "flt": "SELECT k, v FROM t WHERE v % 3 <> 0",
}
SLOW = "SELECT g, max(v) AS top FROM t GROUP BY g"  # created while the server runs: a backfill in flight


def Serve(warehouse: Path, *extra: str) -> ServeProcess:
    """`sparkwave serve` on local Spark, once it listens."""
    serve = ServeProcess(warehouse, *extra, env={"SPARKWAVE_SPARK_MASTER": "local[2]"})
    serve.listening()
    return serve


class Writer(threading.Thread):
    """INSERTs of `STATEMENT_ROWS` rows with keys of its own until stopped: each acknowledged
    statement must be in the table after the restart, each other one in whole or not at all."""

    def __init__(self, dsn: str, first: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.next = dsn, first
        self.acked: list[int] = []  # first keys of acknowledged statements
        self.tried: list[int] = []
        self.halt = threading.Event()
        self.error: psycopg.Error | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as c:
                while not self.halt.is_set():
                    k = self.next
                    self.next += STATEMENT_ROWS
                    self.tried.append(k)
                    rows = ", ".join(f"({k + i}, {(k + i) % 7}, {(k * 31 + i) % 101})" for i in range(STATEMENT_ROWS))
                    c.execute(f"INSERT INTO t VALUES {rows}")
                    self.acked.append(k)
        except psycopg.Error as e:
            self.error = e  # the server stopped under it, or (before the stop) a failure `_acked` reports


def _acked(writers: list[Writer], n: int, timeout: float = 300) -> None:
    """Until the writers together have `n` statements acknowledged; a writer that failed fails the test."""
    deadline = time.time() + timeout
    while sum(len(w.acked) for w in writers) < n:
        failed = [w.error for w in writers if w.error is not None]
        assert not failed, f"a writer failed: {failed[0]}"
        assert time.time() < deadline, f"the writers have {sum(len(w.acked) for w in writers)} of {n} acknowledged"
        time.sleep(0.05)


def test_serve_refuses_a_public_address_without_a_password(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sparkwave.cli.main", "serve", "--warehouse", str(tmp_path / "wh"),
                        "--host", "0.0.0.0"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != "SPARKWAVE_PASSWORD"})
    assert r.returncode == 2 and "password" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "wh").exists()


def test_sigterm_mid_pipeline_then_restart_recovers_exactly(tmp_path):
    wh, delta = tmp_path / "wh", tmp_path / "delta_agg"
    server = Serve(wh)
    info = json.loads((wh / "server.json").read_text())
    assert (info["host"], info["port"], info["pid"]) == ("127.0.0.1", server.port, server.proc.pid)
    with server.connect() as c:
        c.execute("CREATE TABLE t (k int PRIMARY KEY, g int, v int)")
        for name, sql in MVS.items():
            c.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        c.execute(f"CREATE SINK s FROM agg WITH (connector = 'deltalake', location = '{delta}')")
        server.wait_for("CREATE_SINK s done")
        writers = [Writer(server.dsn, 1 + i * 1_000_000) for i in range(4)]
        for w in writers:
            w.start()
        _acked(writers, 40)
        c.execute("SET background_ddl = true")
        c.execute("SET backfill_rate_limit = 0")  # paused: the backfill is in flight at the stop, however fast
        c.execute(f"CREATE MATERIALIZED VIEW slow AS {SLOW}")
        server.wait_for("view slow")  # its phase, printed by the watcher
        _acked(writers, 80)
        jobs = c.execute("SHOW JOBS")
        phases = {r[1]: r[4] for r in jobs.fetchall()}  # name -> phase
        assert phases["slow"] in ("snapshot", "log store"), phases  # the stop comes mid-backfill
    assert server.stop() == 0, "".join(server.output)
    for w in writers:
        w.halt.set()
        w.join(timeout=30)
    out = "".join(server.output)
    assert "stopped" in out and not (wh / "server.json").exists(), out
    assert "WARN" not in out and "log4j" not in out, out  # Spark's chatter goes to the log file
    assert (wh / "logs" / "spark.log").stat().st_size > 0

    server = Serve(wh)
    try:
        with server.connect() as c:
            c.execute("ALTER MATERIALIZED VIEW slow SET BACKFILL_RATE_LIMIT = DEFAULT")
            c.execute("WAIT")
            c.execute("FLUSH")
            rows = c.execute("SELECT k, g, v FROM t").fetchall()
            keys = {r[0] for r in rows}
            for w in writers:
                for k in w.tried:
                    present = [k + i in keys for i in range(STATEMENT_ROWS)]
                    assert all(present) or (not any(present) and k not in w.acked), (k, present)
            assert len(keys) == len(rows) >= sum(len(w.acked) for w in writers) * STATEMENT_ROWS
            db = connect()
            db.execute("CREATE TABLE t (k INTEGER, g INTEGER, v INTEGER)")
            db.execute(f"INSERT INTO t VALUES {values_sql(rows)}")
            for name, sql in {**MVS, "slow": SLOW}.items():
                want = multiset(db.execute(duckdb_sql(sql, db)).fetchall())
                assert multiset(c.execute(f"SELECT * FROM {name}").fetchall()) == want, name
            _wait_sink(c, "s")
            got = multiset((r["g"], r["n"], r["total"]) for r in DeltaTable(str(delta)).to_pyarrow_table().to_pylist())
            assert got == multiset(db.execute(duckdb_sql(MVS["agg"], db)).fetchall())
    finally:
        assert server.stop() == 0, "".join(server.output)
    assert not (wh / "server.json").exists()


def _wait_sink(c: psycopg.Connection, name: str, timeout: float = 120) -> None:
    """Until the sink has delivered the committed epoch (no input arrives any more)."""
    deadline = time.time() + timeout
    while True:
        cur = c.execute("SHOW SINKS")
        names = [d.name for d in cur.description]
        row = next(r for r in cur.fetchall() if r[names.index("name")] == name)
        if row[names.index("lag_epochs")] == 0 and row[names.index("phase")] == "running":
            return
        assert time.time() < deadline, f"sink {name} did not catch up: {dict(zip(names, row, strict=True))}"
        time.sleep(0.2)


@pytest.fixture(autouse=True)
def _no_password(monkeypatch):
    monkeypatch.delenv("SPARKWAVE_PASSWORD", raising=False)

