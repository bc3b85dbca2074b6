"""The catalog's database back ends: SQLite inside the warehouse (the embedded default) and
PostgreSQL (`postgres.py`, shared by the hosts that may own the warehouse in turn).

The catalog's modules write one SQL, SQLite's (`?` placeholders, `INSERT OR REPLACE`,
`json_extract`), against a `CatalogDb`: a sqlite3 connection as it is, or PostgreSQL's adapter,
which translates each statement once. What differs beyond the SQL text sits here, one method per
difference: how a write transaction begins (SQLite's write lock; PostgreSQL's fence row, checked by
every write of an owner), the mark that moves with every commit (`changes`), where the schema
version is kept, and what a database that is not a catalog looks like."""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

CORE_TABLES = ("relations", "epochs", "log_files", "jobs")  # what every release's catalog has


class DbCursor(Protocol):
    """What a statement returns: sqlite3's cursor, or the PostgreSQL adapter's."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class CatalogDb(Protocol):
    """The connection the catalog's modules run their SQL on (SQLite's dialect, `?` placeholders)."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> DbCursor: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any: ...


class DbIntegrityError(Exception):
    """A constraint refused a write on PostgreSQL (`INTEGRITY_ERRORS` catches both back ends')."""


INTEGRITY_ERRORS: tuple[type[Exception], ...] = (sqlite3.IntegrityError, DbIntegrityError)


class Backend(ABC):
    """One catalog database: opened once per `Catalog`, used under its lock."""

    where: str  # the catalog as errors name it: a file, or a PostgreSQL database

    @abstractmethod
    def problem(self) -> str | None:
        """Why the database is not a readable sparkwave catalog, or None. Reads only."""

    @abstractmethod
    def exists(self) -> bool:
        """Whether there is a database (a file, tables) at all, catalog or not."""

    @abstractmethod
    def stored_version(self) -> int:
        """The schema version, read without changing anything."""

    @abstractmethod
    def connect(self, *, read_only: bool) -> CatalogDb: ...

    @abstractmethod
    def version(self, db: CatalogDb) -> int: ...

    @abstractmethod
    def set_version(self, db: CatalogDb, version: int) -> None: ...

    @abstractmethod
    def begin(self, db: CatalogDb, fence: int | None) -> None:
        """Begin a write transaction that holds the catalog's write lock (writers serialise on it);
        with `fence`, only while the owner generation is still `fence` (`OwnershipError` otherwise)."""

    def commit(self, db: CatalogDb) -> None:
        db.execute("COMMIT")

    def rollback(self, db: CatalogDb) -> None:
        db.execute("ROLLBACK")

    @abstractmethod
    def changes(self, db: CatalogDb) -> tuple[int, int]:
        """A mark that moves whenever any connection may have committed a change."""

    @abstractmethod
    def close(self, db: CatalogDb) -> None: ...


class SqliteBackend(Backend):
    """`catalog.db` in the warehouse, in WAL mode; single host (the owner's `flock`, `meta/ownership.py`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def exists(self) -> bool:
        return self.path.exists()

    def problem(self) -> str | None:
        path = self.path
        if not path.exists():
            return "is missing"
        if path.stat().st_size == 0:
            return "is empty (0 bytes)"
        try:
            with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.Error as e:
            return f"cannot be read ({e})"
        if missing := [t for t in CORE_TABLES if t not in tables]:
            return f"is not a sparkwave catalog (it has no table {', '.join(missing)})"
        return None

    def stored_version(self) -> int:
        with closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])

    def connect(self, *, read_only: bool) -> CatalogDb:
        if read_only:
            return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False,
                                   isolation_level=None, timeout=30)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
        except BaseException:
            db.close()
            raise
        return db

    def version(self, db: CatalogDb) -> int:
        return int(db.execute("PRAGMA user_version").fetchone()[0])

    def set_version(self, db: CatalogDb, version: int) -> None:
        db.execute(f"PRAGMA user_version = {int(version)}")

    def begin(self, db: CatalogDb, fence: int | None) -> None:
        db.execute("BEGIN IMMEDIATE")  # the fence on one host is the owner's flock

    def changes(self, db: CatalogDb) -> tuple[int, int]:
        assert isinstance(db, sqlite3.Connection)
        return db.total_changes, db.execute("PRAGMA data_version").fetchone()[0]

    def close(self, db: CatalogDb) -> None:
        assert isinstance(db, sqlite3.Connection)
        db.close()
