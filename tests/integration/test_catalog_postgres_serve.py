"""`sparkwave serve --catalog postgresql://...` reached with psycopg, and a standby on the same
warehouse (`--standby`, as a second host would run it) that takes over when the owner is killed:
the MV it serves holds every row the first owner acknowledged, and it goes on committing; an owner
cut off from its lock stops serving once the standby took over. The catalog's password comes from
$PGPASSWORD and is written nowhere."""

from __future__ import annotations

import signal
from pathlib import Path

import psycopg

from sparkwave.core.catalog.postgres import LOCK_CLASS
from tests.oracle import multiset
from tests.serve_process import ServeProcess


def Serve(warehouse: Path, catalog: str, password: str, *extra: str) -> ServeProcess:
    """`sparkwave serve --catalog postgresql://...`, the password from the environment."""
    return ServeProcess(warehouse, "--catalog", catalog, "--barrier-interval-ms", "200", *extra,
                        env={"SPARKWAVE_SPARK_MASTER": "local[2]", "PGPASSWORD": password})


def test_a_standby_server_takes_over_a_killed_one(tmp_path, postgres) -> None:
    postgres.create_database("served")
    catalog = f"postgresql://{postgres.user}@{postgres.host}:{postgres.port}/served"  # no password in it
    wh = tmp_path / "wh"
    first = Serve(wh, catalog, postgres.password)
    second = None
    try:
        with first.connect() as client:
            client.execute("CREATE TABLE t (k int PRIMARY KEY, g int)")
            client.execute("CREATE MATERIALIZED VIEW agg AS SELECT g, count(*) AS n FROM t GROUP BY g")
            client.execute("INSERT INTO t VALUES (1, 1), (2, 1), (3, 2)")
            client.execute("FLUSH")
            assert multiset(client.execute("SELECT g, n FROM agg").fetchall()) == multiset([(1, 2), (2, 1)])
        second = Serve(wh, catalog, postgres.password, "--standby")
        second.wait_for("standby: waiting")
        first.proc.send_signal(signal.SIGKILL)
        first.kill()
        with second.connect() as client:  # it took over: the lock's session ended with the first server
            assert multiset(client.execute("SELECT g, n FROM agg").fetchall()) == multiset([(1, 2), (2, 1)])
            client.execute("INSERT INTO t VALUES (4, 2), (5, 3)")
            client.execute("FLUSH")
            assert multiset(client.execute("SELECT g, n FROM agg").fetchall()) == multiset([(1, 2), (2, 2), (3, 1)])
        written = "".join(p.read_text(errors="replace") for p in wh.rglob("*") if p.is_file() and p.stat().st_size
                          < 1 << 20 and p.suffix not in (".parquet", ".arrow", ".crc"))
        assert "password" not in written
    finally:
        first.kill()
        if second is not None:
            second.kill()


def test_a_server_cut_off_from_its_lock_stops_once_a_standby_took_over(tmp_path, postgres) -> None:
    """The first server lives on but its lock's session ends (its host cut off from the database):
    the standby takes over, and the first finds it is no longer the owner and stops serving."""
    postgres.create_database("deposed")
    catalog = f"postgresql://{postgres.user}@{postgres.host}:{postgres.port}/deposed"
    wh = tmp_path / "wh"
    first = Serve(wh, catalog, postgres.password)
    second = None
    try:
        with first.connect() as client:
            client.execute("CREATE TABLE t (k int PRIMARY KEY, g int)")
            client.execute("INSERT INTO t VALUES (1, 1)")
            client.execute("FLUSH")
        second = Serve(wh, catalog, postgres.password, "--standby")
        second.wait_for("standby: waiting")
        with psycopg.connect(postgres.dsn("deposed"), autocommit=True) as admin:
            (pid,), = admin.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                                    "AND granted AND database = (SELECT oid FROM pg_database WHERE datname = "
                                    "'deposed')", (LOCK_CLASS,)).fetchall()
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with second.connect() as client:
            assert client.execute("SELECT k, g FROM t").fetchall() == [(1, 1)]
        assert "no longer owns the warehouse" in first.wait_for("stopping:")
        assert first.proc.wait(timeout=120) == 0, "".join(first.output)  # it stopped in order
    finally:
        first.kill()
        if second is not None:
            second.kill()
