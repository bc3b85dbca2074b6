"""The warehouse folder: the one seam all file IO goes through, so that it can later be an
object-store URI as well as a local folder.

A warehouse is recognised by its marker file (`MARKER`, JSON with a format version), written when
sparkwave creates it. sparkwave creates a warehouse only in a missing or empty folder, adopts one
of a release before the marker (a valid `catalog.db`, no marker), and refuses any other folder
before touching anything in it. It removes only paths inside its root."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from sparkwave.core.catalog import Catalog, catalog_problem, location
from sparkwave.core.errors import CatalogError, WarehouseError
from sparkwave.core.names import is_name
from sparkwave.storage.filesystem import LOCAL, FileSystem

log = logging.getLogger(__name__)

MARKER = "SPARKWAVE_WAREHOUSE"
FORMAT_VERSION = 1  # of the warehouse's layout; a newer one is refused, not guessed at
_KIND = "sparkwave warehouse"
# A folder holding only these is still being created: a crash while `CATALOG` was written leaves its .tmp
_CREATING = {location.CATALOG_FILE, f"{location.CATALOG_FILE}.tmp"}


class Warehouse:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.fs: FileSystem = LOCAL  # every delete, listing and move of the warehouse's files (`filesystem.py`)

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.db"

    @property
    def owner_path(self) -> Path:
        return self.root / "OWNER"

    @property
    def marker_path(self) -> Path:
        return self.root / MARKER

    @property
    def lost_and_found(self) -> Path:
        """Where recovery moves what it finds in the warehouse and cannot place (`storage/sweep.py`)."""
        return self.root / "lost+found"

    def relation_dir(self, name: str) -> Path:
        """A table's or MV's folder; an MV's state table `<mv>.<suffix>` lives inside its MV's."""
        owner, _, suffix = name.partition(".")
        if not is_name(owner) or (suffix and not is_name(suffix)):
            raise CatalogError(f"BUG: {name!r} is not a relation name; it must not become a path")
        return self.root / "tables" / owner / "state" / suffix if suffix else self.root / "tables" / name

    def staging_dir(self) -> Path:
        d = self.root / "staging"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def open(self, catalog: str | None = None) -> None:
        """Make sure the root is a warehouse before anything else touches it: create one in a
        missing or empty folder (its catalog first, the marker last, so a crash in between leaves
        a warehouse to adopt), adopt one made before the marker, refuse anything else. `catalog`:
        a PostgreSQL connection string for a new warehouse's catalog, or the one an existing
        warehouse records (`core/catalog/location.py`; None: whatever it records)."""
        if catalog is not None and not location.is_postgres(catalog):
            raise WarehouseError("the catalog given is not a PostgreSQL connection string (postgresql://user@host/db "
                                 "or libpq's key=value form); without one the catalog is catalog.db in the warehouse")
        if catalog is not None:
            location.remember(catalog)  # (a recorded catalog is read with the password given)
        if self.marker_path.exists():
            self._check_marker()
            self._check_catalog(catalog)
        elif not self.root.exists() or (self.root.is_dir() and set(os.listdir(self.root)) <= _CREATING):
            self.root.mkdir(parents=True, exist_ok=True)
            if catalog is not None:
                self._new_postgres_catalog(catalog)
            Catalog(self.catalog_path).close()
            self._write_marker()
        elif (self.root.is_dir() and (self.catalog_path.exists() or location.recorded(self.root) is not None)
              and catalog_problem(self.catalog_path) is None):  # (PostgreSQL: a crash before the marker's rename)
            log.warning("adopting %s, a warehouse of an earlier sparkwave: writing its %s marker", self.root, MARKER)
            self._check_catalog(catalog)
            self._write_marker()
        else:
            raise WarehouseError(
                f"{self.root} is not a sparkwave warehouse: it is not empty and has no {MARKER} file. sparkwave "
                "creates a warehouse only in a new or empty folder and touches nothing in any other; choose a new "
                "folder for the warehouse")
        (self.root / "tables").mkdir(exist_ok=True)

    def _check_catalog(self, catalog: str | None) -> None:
        """An existing warehouse opens with the catalog it records: a different one is refused."""
        recorded = location.recorded(self.root)
        if catalog is None:
            return
        if recorded is None:
            raise WarehouseError(f"warehouse {self.root} keeps its catalog in {self.catalog_path}; it cannot be "
                                 "opened with a PostgreSQL catalog (moving a catalog is not supported): open it "
                                 "without one")
        if (given := location.remember(catalog)) != recorded:
            raise WarehouseError(f"warehouse {self.root} keeps its catalog in PostgreSQL at {recorded!r}, not "
                                 f"{given!r}; open it with that one, or with none (it is followed)")

    def _new_postgres_catalog(self, catalog: str) -> None:
        """Record a new warehouse's PostgreSQL catalog; its database must hold nothing yet."""
        from sparkwave.core.catalog.postgres import PostgresBackend
        location.remember(catalog)
        backend = PostgresBackend(catalog)
        if backend.exists() and (location.recorded(self.root) is None or backend.problem() is not None):
            raise WarehouseError(f"the {backend.where} already holds tables; a new warehouse's catalog needs an "
                                 "empty database (or a schema of its own, named by the connection's search_path)")
        location.record(self.root, catalog)

    def _check_marker(self) -> None:
        try:
            marker = json.loads(self.marker_path.read_text())
            version = marker["version"] if isinstance(marker, dict) and marker.get("kind") == _KIND else None
        except (OSError, ValueError, KeyError) as e:
            raise WarehouseError(f"the warehouse marker {self.marker_path} cannot be read ({e}); sparkwave opens "
                                 "nothing it cannot recognise") from None
        if not isinstance(version, int) or isinstance(version, bool):
            raise WarehouseError(f"{self.marker_path} is not a sparkwave warehouse marker (no kind {_KIND!r} and "
                                 "integer version); sparkwave opens nothing it cannot recognise")
        if version > FORMAT_VERSION:
            raise WarehouseError(f"warehouse {self.root} has format version {version} (its {MARKER} file), newer "
                                 f"than this sparkwave reads ({FORMAT_VERSION}); open it with a newer sparkwave")

    def _write_marker(self) -> None:
        tmp = self.marker_path.with_name(f"{MARKER}.tmp")
        tmp.write_text(json.dumps({"kind": _KIND, "version": FORMAT_VERSION,
                                   "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
        with open(tmp) as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.marker_path)

    def inside(self, path: str | Path) -> Path:
        """`path` resolved (symlinks followed), which must lie strictly inside the root."""
        resolved = Path(path).resolve()
        if resolved == self.root or not resolved.is_relative_to(self.root):
            raise CatalogError(f"BUG: {path} (resolved: {resolved}) is not inside the warehouse {self.root}; "
                               "sparkwave removes nothing outside it")
        return resolved

    def remove_tree(self, path: Path) -> None:
        self.inside(path)
        self.fs.delete(path)

    def remove_file(self, path: str | Path) -> None:
        """Remove a file or a folder of files (a staged batch); a missing one is fine."""
        self.fs.delete(path)

    def tables_entries(self) -> list[str]:
        """The names in `tables/`: relations' folders and whatever else is there."""
        return self.fs.list(self.root / "tables")
