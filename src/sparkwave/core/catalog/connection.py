"""The catalog's database: opening it (refusing what is not a catalog, or one of a newer release;
migrating an older one), its lock, transactions, and file paths stored relative to the warehouse."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from sparkwave.core.catalog import migrations
from sparkwave.core.errors import CatalogError, WarehouseError

CORE_TABLES = ("relations", "epochs", "log_files", "jobs")  # what every release's catalog has


def catalog_problem(path: Path) -> str | None:
    """Why `path` is not a readable sparkwave catalog (to follow its name), or None. Reads only."""
    if not path.exists():
        return "is missing"
    if path.stat().st_size == 0:
        return "is empty (0 bytes)"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            db.close()
    except sqlite3.Error as e:
        return f"cannot be read ({e})"
    if missing := [t for t in CORE_TABLES if t not in tables]:
        return f"is not a sparkwave catalog (it has no table {', '.join(missing)})"
    return None


def _stored_version(path: Path) -> int:
    """The version of the catalog at `path`, read without changing the file."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return migrations.version_of(db)


def _newer(path: Path, version: int) -> WarehouseError:
    return WarehouseError(f"the catalog {path} of warehouse {path.parent} has version {version}, newer than this "
                          f"sparkwave knows (version {migrations.latest()}); open it with a newer sparkwave (it was "
                          "not changed)")


class CatalogBase:
    """Thread-safe access to the catalog database. Writers use `transaction()`. A catalog is
    created only where there is none and `create` says so; an existing file that is not a readable
    catalog (empty, damaged, another database) is an error, never overwritten. Opened for writing,
    a catalog of an earlier release is migrated (`migrations.py`); read only, it must be current."""

    def __init__(self, path: Path, *, read_only: bool = False, create: bool = True) -> None:
        self.path = path
        self.root = str(path.resolve().parent)  # file paths are stored relative to the warehouse
        if read_only and not path.exists():
            raise CatalogError(f"no sparkwave warehouse at {path.parent} (no catalog.db)")
        if path.exists() or not create:
            if (problem := catalog_problem(path)) is not None:
                raise WarehouseError(f"the catalog {path} of warehouse {path.parent} {problem}; sparkwave opens "
                                     "nothing and deletes nothing without it: restore catalog.db from a backup")
            if (version := _stored_version(path)) > migrations.latest():
                raise _newer(path, version)
            if read_only and version < migrations.latest():
                raise CatalogError(f"the catalog {path} has version {version}, older than this sparkwave's "
                                   f"({migrations.latest()}); open the warehouse once for writing (sparkwave "
                                   "migrates it) before reading it read-only")
        if read_only:
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                                       isolation_level=None, timeout=30)
        else:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                if (found := migrations.migrate(self._db, self.root)) > migrations.latest():
                    raise _newer(path, found)
            except BaseException:
                self._db.close()
                raise
        self._lock = threading.RLock()

    @property
    def version(self) -> int:
        """The catalog's schema version (`migrations.py`)."""
        with self._lock:
            return migrations.version_of(self._db)

    def _stored(self, path: str) -> str:
        """A file's path as stored: relative to the warehouse, so a copied or moved warehouse reads
        (and its retention deletes) its own files."""
        rel = os.path.relpath(os.path.abspath(path), self.root)
        if rel.startswith(os.pardir):
            raise CatalogError(f"BUG: {path} is outside the warehouse {self.root}")
        return rel

    def _file(self, stored: str) -> str:
        """A stored path as a file (an absolute one, recorded outside the warehouse by an earlier
        release, as recorded: `join` keeps it)."""
        return os.path.join(self.root, stored)

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

    def changes(self) -> tuple[int, int]:
        """A mark that differs whenever the catalog's content may have changed since it was taken:
        the rows this connection changed, and SQLite's count of the other connections' commits. A
        reader may keep what it read under an unchanged mark (`frontend/reads.py`)."""
        with self._lock:
            return self._db.total_changes, self._db.execute("PRAGMA data_version").fetchone()[0]

    def _all(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _one(self, sql: str, args: tuple = ()) -> tuple | None:
        with self._lock:
            return self._db.execute(sql, args).fetchone()
