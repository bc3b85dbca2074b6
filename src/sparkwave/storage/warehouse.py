"""The warehouse folder: the one seam all file IO goes through, so that it can later be an
object-store URI as well as a local folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sparkwave.core.errors import CatalogError
from sparkwave.core.names import is_name


class Warehouse:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.db"

    @property
    def owner_path(self) -> Path:
        return self.root / "OWNER"

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

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "tables").mkdir(exist_ok=True)

    def remove_tree(self, path: Path) -> None:
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

    def relation_dirs(self) -> list[str]:
        d = self.root / "tables"
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.exists() else []
