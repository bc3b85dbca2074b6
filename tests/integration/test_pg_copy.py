"""`pg_copy.copy_out`, the CDC backfill's COPY loop on libpq's own calls: the same bytes as
psycopg's `Copy` for values that CSV must quote, across many socket reads; a server error before
and during the output raises psycopg's exception for it and leaves the connection usable."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from sparkwave.connectors.pg_copy import copy_out


@pytest.fixture()
def conn(postgres):
    postgres.create_database("pg_copy")
    with psycopg.connect(postgres.dsn("pg_copy"), autocommit=True) as c:
        yield c


def _psycopg_copy(conn: psycopg.Connection, statement: sql.Composable) -> bytes:
    data = bytearray()
    with conn.cursor().copy(statement) as copy:
        for block in copy:
            data += block
    return bytes(data)


def test_copy_out_equals_psycopgs_copy(conn) -> None:
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, s text, b bytea)")
    conn.execute("INSERT INTO t VALUES (1, 'a,\"b\"', '\\x00ff'), (2, E'two\\nlines', NULL), (3, '', ''), "
                 "(4, NULL, NULL), (5, 'ünï €', '\\x')")
    conn.execute("INSERT INTO t SELECT i, repeat('x', i % 300), NULL FROM generate_series(6, 200000) i")
    statement = sql.SQL("COPY (SELECT * FROM t ORDER BY id) TO STDOUT (FORMAT csv)")
    out = copy_out(conn, statement)
    assert out == _psycopg_copy(conn, statement) and len(out) > 10_000_000
    assert out.startswith(b'1,"a,""b""",\\x00ff\n2,"two\nlines",\n3,"",\\x\n4,,\n'
                          b'5,\xc3\xbcn\xc3\xaf \xe2\x82\xac,\\x\n')


def test_an_error_raises_and_leaves_the_connection_usable(conn) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable):
        copy_out(conn, sql.SQL("COPY (SELECT * FROM absent) TO STDOUT (FORMAT csv)"))
    assert conn.execute("SELECT 1").fetchone() == (1,)
    with pytest.raises(psycopg.errors.DivisionByZero):  # after rows were sent
        copy_out(conn, sql.SQL("COPY (SELECT 1 / (100000 - i) FROM generate_series(1, 100000) i) TO STDOUT"))
    assert conn.execute("SELECT 2").fetchone() == (2,)
    with conn.transaction():
        assert copy_out(conn, sql.SQL("COPY (SELECT 7) TO STDOUT")) == b"7\n"
