"""The catalog: SQLite (WAL) inside the warehouse.

It is the source of truth for what is committed. A Delta commit that the catalog does not know of
is uncommitted work, redone or skipped on recovery. Tables:

- `relations(name, kind, schema, definition, created_epoch)`: tables and MVs.
- `epochs(epoch, state, plan, ...)`: each epoch's plan, persisted before it executes.
- `log_files(relation, epoch, path, rows, version)`: the epoch -> log file / Delta version map.
- `base_files(relation, epoch, path, rows)` + `bases(relation, epoch, version)`: compacted bases.
- `source_offsets(relation, split, offset)`: committed offsets, written with the epoch's commit.
- `dml(id, relation, path, rows, epoch)`: staged DML batches; `epoch` is set when planned.
- `pins(id, relation, epoch, holder)`: snapshots retention must keep.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkwave.errors import CatalogError
from sparkwave.storage.schema import Schema

_DDL = """
CREATE TABLE IF NOT EXISTS relations (
    name TEXT PRIMARY KEY, kind TEXT NOT NULL, schema TEXT NOT NULL, definition TEXT NOT NULL,
    created_epoch INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS epochs (
    epoch INTEGER PRIMARY KEY, prev INTEGER NOT NULL, state TEXT NOT NULL, plan TEXT NOT NULL,
    planned_at REAL NOT NULL, committed_at REAL, rows_in INTEGER, latency_ms REAL);
CREATE TABLE IF NOT EXISTS log_files (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, path TEXT NOT NULL, rows INTEGER NOT NULL,
    version INTEGER NOT NULL, PRIMARY KEY (relation, epoch));
CREATE TABLE IF NOT EXISTS bases (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, version INTEGER NOT NULL, rows INTEGER NOT NULL,
    PRIMARY KEY (relation, epoch));
CREATE TABLE IF NOT EXISTS base_files (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, path TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS base_files_rel ON base_files (relation, epoch);
CREATE TABLE IF NOT EXISTS source_offsets (
    relation TEXT NOT NULL, split TEXT NOT NULL, "offset" INTEGER NOT NULL, PRIMARY KEY (relation, split));
CREATE TABLE IF NOT EXISTS dml (
    id INTEGER PRIMARY KEY AUTOINCREMENT, relation TEXT NOT NULL, path TEXT NOT NULL,
    rows INTEGER NOT NULL, epoch INTEGER);
CREATE TABLE IF NOT EXISTS pins (
    id INTEGER PRIMARY KEY AUTOINCREMENT, relation TEXT NOT NULL, epoch INTEGER NOT NULL, holder TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Relation:
    name: str
    kind: str  # 'table' | 'mv'
    schema: Schema
    definition: dict[str, Any]
    created_epoch: int

    @property
    def upstreams(self) -> list[str]:
        return list(self.definition.get("upstreams", []))


@dataclass(frozen=True)
class Base:
    epoch: int
    version: int
    rows: int
    files: list[str]


class Catalog:
    """Thread-safe access to the catalog database. Writers use `transaction()`."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        if read_only:
            if not path.exists():
                raise CatalogError(f"no sparkwave warehouse at {path.parent} (no catalog.db)")
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                                       isolation_level=None, timeout=30)
        else:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_DDL)
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _all(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _one(self, sql: str, args: tuple = ()) -> tuple | None:
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    # --- settings -------------------------------------------------------------------------------
    def setting(self, key: str, default: str | None = None) -> str | None:
        row = self._one("SELECT value FROM settings WHERE key = ?", (key,))
        return row[0] if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    def next_counter(self, name: str, n: int) -> int:
        """Reserve `n` consecutive values of a durable counter; returns the first."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM settings WHERE key = ?", (f"counter.{name}",)).fetchone()
            first = int(row[0]) if row else 0
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (f"counter.{name}", str(first + n)))
        return first

    # --- relations ------------------------------------------------------------------------------
    def relation(self, name: str) -> Relation | None:
        row = self._one("SELECT name, kind, schema, definition, created_epoch FROM relations WHERE name = ?",
                        (name,))
        return _relation(row) if row else None

    def relations(self) -> list[Relation]:
        rows = self._all("SELECT name, kind, schema, definition, created_epoch FROM relations "
                         "ORDER BY created_epoch, created_at")
        return [_relation(r) for r in rows]

    def add_relation(self, db: sqlite3.Connection, rel: Relation) -> None:
        try:
            db.execute("INSERT INTO relations VALUES (?, ?, ?, ?, ?, ?)",
                       (rel.name, rel.kind, json.dumps(rel.schema.to_json()), json.dumps(rel.definition),
                        rel.created_epoch, time.time()))
        except sqlite3.IntegrityError:
            raise CatalogError(f"relation {rel.name!r} already exists") from None

    def remove_relation(self, db: sqlite3.Connection, name: str) -> None:
        for table in ("relations",):
            db.execute(f"DELETE FROM {table} WHERE name = ?", (name,))
        for table in ("log_files", "bases", "base_files", "source_offsets", "dml", "pins"):
            db.execute(f"DELETE FROM {table} WHERE relation = ?", (name,))

    # --- epochs ---------------------------------------------------------------------------------
    def committed_epoch(self) -> int:
        row = self._one("SELECT max(epoch) FROM epochs WHERE state = 'committed'")
        return int(row[0]) if row and row[0] is not None else 0

    def uncommitted_plan(self) -> tuple[int, int, dict] | None:
        row = self._one("SELECT epoch, prev, plan FROM epochs WHERE state = 'planned' ORDER BY epoch LIMIT 1")
        return (row[0], row[1], json.loads(row[2])) if row else None

    def persist_plan(self, epoch: int, prev: int, plan: dict, dml_ids: list[int]) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO epochs (epoch, prev, state, plan, planned_at) VALUES (?, ?, 'planned', ?, ?)",
                       (epoch, prev, json.dumps(plan), time.time()))
            db.executemany("UPDATE dml SET epoch = ? WHERE id = ?", [(epoch, i) for i in dml_ids])

    def commit_epoch(self, epoch: int, logs: list[tuple[str, str, int, int]],
                     offsets: dict[str, dict[str, int]], rows_in: int, latency_ms: float) -> None:
        """Mark `epoch` committed with its log files `(relation, path, rows, version)` and offsets."""
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO log_files VALUES (?, ?, ?, ?, ?)",
                           [(r, epoch, p, n, v) for r, p, n, v in logs])
            for rel, splits in offsets.items():
                db.executemany('INSERT OR REPLACE INTO source_offsets VALUES (?, ?, ?)',
                               [(rel, s, o) for s, o in splits.items()])
            db.execute("UPDATE epochs SET state = 'committed', committed_at = ?, rows_in = ?, latency_ms = ? "
                       "WHERE epoch = ?", (time.time(), rows_in, latency_ms, epoch))

    def committed_planned_since(self, t: float) -> int | None:
        """The newest committed epoch that was planned at or after time `t`."""
        row = self._one("SELECT max(epoch) FROM epochs WHERE state = 'committed' AND planned_at >= ?", (t,))
        return int(row[0]) if row and row[0] is not None else None

    def committed_epochs(self, since: int = 0) -> list[int]:
        return [r[0] for r in self._all(
            "SELECT epoch FROM epochs WHERE state = 'committed' AND epoch >= ? ORDER BY epoch", (since,))]

    def last_planned_at(self) -> float:
        row = self._one("SELECT max(planned_at) FROM epochs")
        return float(row[0]) if row and row[0] is not None else 0.0

    def log_files(self, relation: str, after: int, upto: int) -> list[tuple[int, str]]:
        """The log files of epochs in `(after, upto]`, oldest first."""
        return self._all("SELECT epoch, path FROM log_files WHERE relation = ? AND epoch > ? AND epoch <= ? "
                         "ORDER BY epoch", (relation, after, upto))

    def base_at(self, relation: str, epoch: int) -> Base | None:
        """The newest base with compaction epoch <= `epoch`."""
        row = self._one("SELECT epoch, version, rows FROM bases WHERE relation = ? AND epoch <= ? "
                        "ORDER BY epoch DESC LIMIT 1", (relation, epoch))
        if not row:
            return None
        files = [r[0] for r in self._all("SELECT path FROM base_files WHERE relation = ? AND epoch = ?",
                                         (relation, row[0]))]
        return Base(row[0], row[1], row[2], files)

    def bases(self, relation: str) -> list[Base]:
        rows = self._all("SELECT epoch FROM bases WHERE relation = ? ORDER BY epoch", (relation,))
        return [b for r in rows if (b := self.base_at(relation, r[0]))]

    def add_base(self, db: sqlite3.Connection, relation: str, epoch: int, version: int, rows: int,
                 files: list[str]) -> None:
        db.execute("INSERT OR REPLACE INTO bases VALUES (?, ?, ?, ?)", (relation, epoch, version, rows))
        db.execute("DELETE FROM base_files WHERE relation = ? AND epoch = ?", (relation, epoch))
        db.executemany("INSERT INTO base_files VALUES (?, ?, ?)", [(relation, epoch, f) for f in files])

    def log_rows_since(self, relation: str, epoch: int) -> tuple[int, int]:
        row = self._one("SELECT count(*), coalesce(sum(rows), 0) FROM log_files WHERE relation = ? AND epoch > ?",
                        (relation, epoch))
        return (int(row[0]), int(row[1])) if row else (0, 0)

    # --- sources and DML ------------------------------------------------------------------------
    def source_offsets(self, relation: str) -> dict[str, int]:
        return dict(self._all('SELECT split, "offset" FROM source_offsets WHERE relation = ?', (relation,)))

    def stage_dml(self, relation: str, path: str, rows: int) -> int:
        with self.transaction() as db:
            cur = db.execute("INSERT INTO dml (relation, path, rows) VALUES (?, ?, ?)", (relation, path, rows))
            return int(cur.lastrowid or 0)

    def pending_dml(self) -> list[tuple[int, str, str, int]]:
        return self._all("SELECT id, relation, path, rows FROM dml WHERE epoch IS NULL ORDER BY id")

    def dml_batches(self, ids: list[int]) -> list[tuple[int, str, str, int]]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        return self._all(f"SELECT id, relation, path, rows FROM dml WHERE id IN ({marks}) ORDER BY id", tuple(ids))

    def staged_paths(self) -> set[str]:
        return {r[0] for r in self._all("SELECT path FROM dml")}

    def consumed_dml(self) -> list[tuple[int, str]]:
        return self._all("SELECT d.id, d.path FROM dml d JOIN epochs e ON d.epoch = e.epoch "
                         "WHERE e.state = 'committed'")

    def forget_dml(self, ids: list[int]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM dml WHERE id = ?", [(i,) for i in ids])

    # --- pins -----------------------------------------------------------------------------------
    def add_pin(self, relation: str, epoch: int, holder: str) -> int:
        with self.transaction() as db:
            return int(db.execute("INSERT INTO pins (relation, epoch, holder) VALUES (?, ?, ?)",
                                  (relation, epoch, holder)).lastrowid or 0)

    def remove_pins(self, holder: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM pins WHERE holder = ?", (holder,))

    def min_pin(self, relation: str) -> int | None:
        row = self._one("SELECT min(epoch) FROM pins WHERE relation = ?", (relation,))
        return row[0] if row and row[0] is not None else None


def _relation(row: tuple) -> Relation:
    return Relation(row[0], row[1], Schema.from_json(json.loads(row[2])), json.loads(row[3]), row[4])
