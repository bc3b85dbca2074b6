"""The catalog's database: opening it (refusing what is not a catalog, or one of a newer release;
migrating an older one), its lock, transactions (fenced on a shared back end), and file paths
stored relative to the warehouse. The database is SQLite's `catalog.db` in the warehouse or the
PostgreSQL one its `CATALOG` file names (`location.py`, `backend.py`, `postgres.py`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sparkwave.core.catalog import migrations
from sparkwave.core.catalog.backend import CORE_TABLES, Backend, CatalogDb
from sparkwave.core.catalog.location import backend_for
from sparkwave.core.errors import CatalogError, OwnershipError, WarehouseError

__all__ = ["CORE_TABLES", "CatalogBase", "catalog_problem"]


def catalog_problem(path: Path) -> str | None:
    """Why the catalog of the warehouse `path.parent` is not a readable sparkwave catalog (to follow
    its name), or None. Reads only."""
    return backend_for(path).problem()


def _newer(backend: Backend, root: Path, version: int) -> WarehouseError:
    return WarehouseError(f"the catalog {backend.where} of warehouse {root} has version {version}, newer than this "
                          f"sparkwave knows (version {migrations.latest()}); open it with a newer sparkwave (it was "
                          "not changed)")


class CatalogBase:
    """Thread-safe access to the catalog database. Writers use `transaction()`. A catalog is
    created only where there is none and `create` says so; an existing database that is not a
    readable catalog (empty, damaged, another database) is an error, never overwritten. Opened for
    writing, a catalog of an earlier release is migrated (`migrations.py`); read only, it must be current."""

    def __init__(self, path: Path, *, read_only: bool = False, create: bool = True) -> None:
        self.path = path
        self.root = str(path.resolve().parent)  # file paths are stored relative to the warehouse
        self._backend = backend = backend_for(path)
        where = backend.where
        if read_only and not backend.exists():
            raise CatalogError(f"no sparkwave warehouse at {path.parent} (no catalog: {where})")
        if backend.exists() or not create:
            if (problem := backend.problem()) is not None:
                raise WarehouseError(f"the catalog {where} of warehouse {path.parent} {problem}; sparkwave opens "
                                     "nothing and deletes nothing without it: restore it from a backup")
            if (version := backend.stored_version()) > migrations.latest():
                raise _newer(backend, path.parent, version)
            if read_only and version < migrations.latest():
                raise CatalogError(f"the catalog {where} has version {version}, older than this sparkwave's "
                                   f"({migrations.latest()}); open the warehouse once for writing (sparkwave "
                                   "migrates it) before reading it read-only")
        self._db: CatalogDb = backend.connect(read_only=read_only)
        if not read_only:
            try:
                if (found := migrations.migrate(self._db, self.root, backend)) > migrations.latest():
                    raise _newer(backend, path.parent, found)
            except BaseException:
                backend.close(self._db)
                raise
        self._fence: int | None = None
        self._fenced_out: str | None = None  # why this owner was fenced out: it reads nothing more either
        self._lock = threading.RLock()

    @property
    def where(self) -> str:
        """The catalog's database as errors name it."""
        return self._backend.where

    @property
    def version(self) -> int:
        """The catalog's schema version (`migrations.py`)."""
        with self._lock:
            return self._backend.version(self._db)

    def fenced_by(self, generation: int | None) -> None:
        """From now on every write transaction commits only while the warehouse's owner generation
        is `generation` (the owner's, `meta/ownership.py`; None on SQLite, whose `flock` suffices)."""
        self._fence = generation

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
            self._backend.close(self._db)

    def fence_out(self, reason: str) -> None:
        """Another owner took over (found by `Ownership.check`): refuse everything from now on."""
        self._fenced_out = reason

    def _check_fence(self) -> None:
        """An owner fenced out by a takeover stops reading too: it plans, replays, follows Delta,
        compacts and deletes nothing more, all of which start from the catalog."""
        if self._fenced_out is not None:
            raise OwnershipError(self._fenced_out)

    @contextmanager
    def transaction(self) -> Iterator[CatalogDb]:
        with self._lock:
            self._check_fence()
            try:
                self._backend.begin(self._db, self._fence)
            except OwnershipError as e:
                self._fenced_out = str(e)
                raise
            try:
                yield self._db
            except BaseException:
                self._backend.rollback(self._db)
                raise
            self._backend.commit(self._db)

    def changes(self) -> tuple[int, int]:
        """A mark that differs whenever the catalog's content may have changed since it was taken
        (SQLite: the rows this connection changed and its count of the other connections' commits;
        PostgreSQL: the count of write transactions). A reader may keep what it read under an
        unchanged mark (`frontend/reads.py`)."""
        with self._lock:
            self._check_fence()
            return self._backend.changes(self._db)

    def _all(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            self._check_fence()
            return self._db.execute(sql, args).fetchall()

    def _one(self, sql: str, args: tuple = ()) -> tuple | None:
        with self._lock:
            self._check_fence()
            row = self._db.execute(sql, args).fetchone()
            return tuple(row) if row is not None else None
