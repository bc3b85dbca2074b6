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
import shutil
import time
from pathlib import Path

from sparkwave.core.catalog import Catalog, catalog_problem
from sparkwave.core.errors import CatalogError, WarehouseError
from sparkwave.core.names import is_name

log = logging.getLogger(__name__)

MARKER = "SPARKWAVE_WAREHOUSE"
FORMAT_VERSION = 1  # of the warehouse's layout; a newer one is refused, not guessed at
_KIND = "sparkwave warehouse"


class Warehouse:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

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

    def open(self) -> None:
        """Make sure the root is a warehouse before anything else touches it: create one in a
        missing or empty folder (its catalog first, the marker last, so a crash in between leaves
        a warehouse to adopt), adopt one made before the marker, refuse anything else."""
        if self.marker_path.exists():
            self._check_marker()
        elif not self.root.exists() or (self.root.is_dir() and not any(self.root.iterdir())):
            self.root.mkdir(parents=True, exist_ok=True)
            Catalog(self.catalog_path).close()
            self._write_marker()
        elif self.root.is_dir() and self.catalog_path.exists() and catalog_problem(self.catalog_path) is None:
            log.warning("adopting %s, a warehouse of an earlier sparkwave: writing its %s marker", self.root, MARKER)
            self._write_marker()
        else:
            raise WarehouseError(
                f"{self.root} is not a sparkwave warehouse: it is not empty and has no {MARKER} file. sparkwave "
                "creates a warehouse only in a new or empty folder and touches nothing in any other; choose a new "
                "folder for the warehouse")
        (self.root / "tables").mkdir(exist_ok=True)

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
        shutil.rmtree(path, ignore_errors=True)

    def remove_file(self, path: str | Path) -> None:
        """Remove a file or a folder of files (a staged batch); a missing one is fine."""
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            return
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def tables_entries(self) -> list[str]:
        """The names in `tables/`: relations' folders and whatever else is there."""
        d = self.root / "tables"
        return sorted(os.listdir(d)) if d.exists() else []
