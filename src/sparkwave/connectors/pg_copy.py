"""`COPY ... TO STDOUT` into one buffer, through libpq's own calls (psycopg's `pq` layer).

PostgreSQL sends a COPY's output as one message per row. psycopg's `Copy` fetches each through a
generator and its waiting machinery: about 0.45 us of client CPU a row, as much as the CSV parse and
the casts of a CDC backfill chunk together. This loop asks libpq for the next message directly and
waits on the socket only when none is buffered: about 0.17 us a row (bench/RESULTS.md)."""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg import errors, pq, sql

_COPY_OUT, _COMMAND_OK = pq.ExecStatus.COPY_OUT, pq.ExecStatus.COMMAND_OK


def copy_out(conn: psycopg.Connection[Any], statement: sql.Composable) -> bytes:
    """The whole output of `statement` (a `COPY ... TO STDOUT`) on `conn`, in its transaction. A
    server error raises psycopg's exception for it, with the connection ready for the next command;
    anything else stopping the read mid-output closes the connection."""
    query = statement.as_bytes(conn)
    with conn.lock:
        pgconn = conn.pgconn
        poll = select.poll()
        poll.register(pgconn.socket, select.POLLIN)
        pgconn.send_query(query)
        _flush(pgconn)
        _wait_result(pgconn, poll)
        first = pgconn.get_result()
        if first is None or first.status != _COPY_OUT:
            _drain(pgconn, poll)
            raise errors.error_from_result(first, encoding=conn.info.encoding) if first is not None else \
                errors.ProgrammingError("COPY returned no result")
        data = bytearray()
        get = pgconn.get_copy_data
        try:
            while True:
                n, block = get(1)
                if n > 0:
                    data += block
                elif n == 0:  # nothing buffered: wait for the socket
                    poll.poll()
                    pgconn.consume_input()
                else:
                    break
        except BaseException:  # (an interrupt, memory): libpq is left inside the COPY, which no one can resume
            conn.close()
            raise
        failed = _drain(pgconn, poll)
        if failed is not None:
            raise errors.error_from_result(failed, encoding=conn.info.encoding)
        return bytes(data)


def _flush(pgconn: pq.abc.PGconn) -> None:
    """Sends what libpq holds (the connection is non-blocking: one call may not send it all)."""
    out = select.poll()
    out.register(pgconn.socket, select.POLLOUT | select.POLLIN)
    while pgconn.flush():
        for _, event in out.poll():
            if event & select.POLLIN:
                pgconn.consume_input()


def _wait_result(pgconn: pq.abc.PGconn, poll: select.poll) -> None:
    pgconn.consume_input()
    while pgconn.is_busy():
        poll.poll()
        pgconn.consume_input()


def _drain(pgconn: pq.abc.PGconn, poll: select.poll) -> pq.abc.PGresult | None:
    """Reads the remaining results; returns the first that is not a success."""
    failed = None
    while True:
        _wait_result(pgconn, poll)
        result = pgconn.get_result()
        if result is None:
            return failed
        if result.status != _COMMAND_OK and failed is None:
            failed = result
