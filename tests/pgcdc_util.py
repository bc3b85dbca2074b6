"""Helpers of the postgres-cdc tests: the upstream table and its history (the state after each
transaction, with the WAL insert position before it), so that the table an epoch committed can be
compared with the upstream table as of the epoch's stream position, restricted to the keys the CDC
backfill had passed."""

from __future__ import annotations

import random
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg

from sparkwave.connectors.postgres_cdc import BACKFILL, BACKFILLED, LSN

UPSTREAM_DDL = ("CREATE TABLE {name} (id int PRIMARY KEY, name text, v bigint, price numeric(10,2), "
                "ts timestamptz, ok boolean)")
DECLARED = "id int PRIMARY KEY, name varchar, v bigint, price decimal(10,2), ts timestamptz, ok boolean"
DUCK_DDL = "id INTEGER, name VARCHAR, v BIGINT, price DECIMAL(10,2), ts TIMESTAMPTZ, ok BOOLEAN"
MVS = {
    "even": "SELECT id, name, v FROM {t} WHERE v % 2 = 0",
    "per_name": "SELECT name, count(*) AS n, sum(v) AS total, sum(price) AS spent FROM {t} GROUP BY name",
    "late_ok": "SELECT ok, count(*) AS n, min(ts) AS first, max(v) AS top FROM {t} GROUP BY ok",
}


def options(pg, db: str, table: str, **extra: str) -> str:
    opts = {"connector": "postgres-cdc", "hostname": pg.host, "port": str(pg.port), "username": pg.user,
            "password": pg.password, "database.name": db, "schema.name": "public", "table.name": table, **extra}
    return ", ".join(f"{k} = '{v}'" for k, v in opts.items())


class Upstream:
    """One upstream table, changed a transaction at a time, with its history."""

    def __init__(self, dsn: str, name: str = "t", ddl: str | None = UPSTREAM_DDL, seed: int = 49,
                 columns: str = "id, name, v, price, ts, ok", key_width: int = 1) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.name, self.columns, self.key_width = name, columns, key_width
        if ddl is not None:
            self.conn.execute(ddl.format(name=name))
        self.history: list[tuple[int, dict]] = [(-1, self.state())]
        self.rnd = random.Random(seed)
        self.next_id = max(self.state(), default=0) + 1 if key_width == 1 else 0

    def lsn(self) -> int:
        return int(self.conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").fetchone()[0])

    def state(self) -> dict:
        rows = self.conn.execute(f"SELECT {self.columns} FROM {self.name}").fetchall()
        return {(r[0] if self.key_width == 1 else tuple(r[:self.key_width])): tuple(r) for r in rows}

    def txn(self, *statements: tuple[str, tuple]) -> None:
        before = self.lsn()
        with self.conn.transaction():
            for sql, params in statements:
                self.conn.execute(sql.format(t=self.name), params)
        self.history.append((before, self.state()))

    def state_at(self, lsn: int) -> dict:
        """The table after every transaction whose commit lies before `lsn` (each began after the
        position recorded before it, and epochs are never planned while one runs)."""
        out: dict = {}
        for before, state in self.history:
            if before < lsn:
                out = state
        return out

    def row(self, i: int) -> tuple:
        r = self.rnd
        return (i, f"n{r.randint(0, 4)}", r.randint(-50, 50), Decimal(r.randint(0, 99999)) / 100,
                f"2026-01-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:00:00+0{r.randint(0, 5)}",
                r.random() < 0.5)

    def insert(self, n: int) -> None:
        rows = [self.row(self.next_id + i) for i in range(n)]
        self.next_id += n
        self.txn(*[("INSERT INTO {t} VALUES (%s, %s, %s, %s, %s, %s)", r) for r in rows])

    def churn(self, n: int) -> None:
        """`n` transactions of random inserts, updates (a key changed now and then) and deletes."""
        for _ in range(n):
            keys = sorted(self.state())
            r, statements = self.rnd, []
            for _ in range(r.randint(1, 4)):
                what = r.random()
                if what < 0.3 or not keys:
                    row = self.row(self.next_id)
                    self.next_id += 1
                    statements.append(("INSERT INTO {t} VALUES (%s, %s, %s, %s, %s, %s)", row))
                elif what < 0.75:
                    statements.append(("UPDATE {t} SET v = v + %s, name = %s WHERE id = %s",
                                       (r.randint(1, 9), f"n{r.randint(0, 4)}", r.choice(keys))))
                elif what < 0.8:
                    k = r.choice(keys)
                    statements.append(("UPDATE {t} SET id = %s WHERE id = %s", (self.next_id + 1000, k)))
                    self.next_id += 1
                    keys.remove(k)
                else:
                    k = r.choice(keys)
                    statements.append(("DELETE FROM {t} WHERE id = %s", (k,)))
                    keys.remove(k)
            self.txn(*statements)


def offsets_by_epoch(session, table: str) -> dict[int, dict[str, int]]:
    """The table's committed offsets after each committed epoch since it was created."""
    rel = session.catalog.relation(table)
    offsets = dict(rel.definition["startup_offsets"])
    ranges = dict(session.catalog.source_ranges(table))
    out = {}
    for epoch in session.catalog.committed_epochs(rel.created_epoch):
        for split, (_, end) in ranges.get(epoch, {}).items():
            offsets[split] = end
        out[epoch] = dict(offsets)
    return out


def expected(up: Upstream, offsets: dict[str, int], parts: Callable[[Any], tuple[int, ...]] | None = None
             ) -> list[tuple]:
    """The upstream rows at the epoch's LSN whose keys the backfill had passed (a composite key's
    position is one split a column: `backfill`, `backfill.1`, ...; `parts`: a key's position, for a
    key that is not integers)."""
    done = BACKFILLED in offsets
    width = up.key_width if parts is None else 1 + sum(s.startswith(f"{BACKFILL}.") for s in offsets)
    pos = tuple(offsets.get(BACKFILL if i == 0 else f"{BACKFILL}.{i}", 0) for i in range(width))
    position = parts or (lambda k: k if up.key_width > 1 else (k,))
    return [r for k, r in up.state_at(offsets[LSN]).items() if done or position(k) < pos]
