"""Helpers of the sink tests: the PostgreSQL target read back, the oracle of a sink at an epoch
(DuckDB over the inputs as of that epoch), and waiting for a sink to reach an epoch."""

from __future__ import annotations

import threading
from collections import Counter

import psycopg

from tests.oracle import connect, duckdb_sql, multiset, rows_of, values_sql

T_DDL = "k int PRIMARY KEY, g int, v int, s varchar"
MV_QUERIES = {
    "agg": "SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g",
    "flt": "SELECT k, v, s FROM t WHERE v % 3 <> 0",
}


def pg_rows(dsn: str, table: str, columns: list[str]) -> Counter:
    with psycopg.connect(dsn) as conn:
        return multiset(conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall())


def oracle(session, query: str, epoch: int, tables: dict[str, list[str]]) -> Counter:
    """The query from scratch by DuckDB over the tables as of `epoch`."""
    db = connect()
    for name, cols in tables.items():
        rows = rows_of(session.table(name, as_of=epoch).select(*cols))
        types = {"k": "INTEGER", "g": "INTEGER", "v": "INTEGER", "s": "VARCHAR"}
        columns = ", ".join(f"{c} {types.get(c, 'VARCHAR')}" for c in cols)
        db.execute(f"CREATE TABLE {name} ({columns})")
        if rows:
            db.execute(f"INSERT INTO {name} VALUES {values_sql(rows)}")
    return multiset(db.execute(duckdb_sql(query, db)).fetchall())


class Deliveries:
    """What a PostgreSQL target held right after each delivery of each sink (the sink's worker calls
    the hook before it moves on, so the rows read are those of exactly that position)."""

    def __init__(self, session, dsn: str, targets: dict[str, tuple[str, list[str]]]) -> None:
        self.dsn = dsn
        self.targets = targets  # sink -> (table, columns)
        self.seen: list[tuple[str, int, int, Counter]] = []
        self._cond = threading.Condition()
        session.sinks.delivered_hook = self._hook

    def _hook(self, sink: str, position) -> None:
        if sink not in self.targets:
            return
        table, cols = self.targets[sink]
        rows = pg_rows(self.dsn, table, cols)
        with self._cond:
            self.seen.append((sink, position.epoch, position.vnode, rows))
            self._cond.notify_all()


def wait_sink(session, name: str, epoch: int, timeout: float = 120.0) -> None:
    """Until the sink has delivered `epoch` (woken by every delivery; the timeout only bounds a failure)."""
    session.sinks.wait_until(name, epoch, timeout)
