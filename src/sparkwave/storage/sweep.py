"""Recovery's sweep of the warehouse folder: what a crash left behind is deleted only if the
catalog recorded it as sparkwave's; anything else found where sparkwave keeps its files is moved
to `lost+found/<time>/`, never deleted.

- `tables/<name>`: kept if the catalog has the relation; deleted if the catalog recorded the
  folder as being made or dropped (`pending_folders`, a CREATE or DROP a crash interrupted) and
  it is a folder, not a link; anything else is moved.
- `staging/<entry>`: kept if a staged DML batch names it; deleted if it is a batch folder whose
  number the catalog handed out (`dml-<n>` or `dml-<n>-<part>` with `n` below the `dml_batch`
  counter, frontend/dml.py: a statement that crashed before it was staged); anything else is moved.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

from sparkwave.core.catalog import Catalog
from sparkwave.storage.warehouse import Warehouse

log = logging.getLogger(__name__)

_DML_BATCH = re.compile(r"dml-(\d+)(?:-\d{6,})?")


def sweep(warehouse: Warehouse, catalog: Catalog) -> list[Path]:
    """Delete what the catalog recorded as sparkwave's and forgot; move the rest it cannot place.
    Returns where each moved entry went."""
    lost = _LostAndFound(warehouse)
    known = {r.name for r in catalog.relations(creating=True)}
    pending = catalog.pending_folders()
    tables = warehouse.root / "tables"
    for name in warehouse.tables_entries():
        if name in known:
            continue
        if name in pending and not warehouse.fs.is_link(tables / name):  # a CREATE or DROP a crash interrupted
            warehouse.remove_tree(tables / name)
        else:
            lost.move(tables / name)
    for name in pending:
        catalog.folder_removed(name)  # deleted above, or held by a relation (its CREATE committed)
    staged = catalog.staged_paths()
    batches = int(catalog.setting("counter.dml_batch") or 0)
    staging = warehouse.staging_dir()
    for entry in warehouse.fs.list(staging):
        if str(staging / entry) in staged:
            continue
        m = _DML_BATCH.fullmatch(entry)
        if m and int(m[1]) < batches:  # a statement that crashed before its batches were staged
            warehouse.remove_tree(staging / entry)
        else:
            lost.move(staging / entry)
    return lost.moved


class _LostAndFound:
    """One sweep's folder `lost+found/<UTC time>/`, made on the first move; an entry keeps its
    path relative to the warehouse under it."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.warehouse = warehouse
        self.folder: Path | None = None
        self.moved: list[Path] = []

    def move(self, path: Path) -> None:
        if self.folder is None:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            folder, n = self.warehouse.lost_and_found / stamp, 0
            while self.warehouse.fs.exists(folder):
                n += 1
                folder = self.warehouse.lost_and_found / f"{stamp}-{n}"
            self.folder = folder
        dest = self.folder / path.relative_to(self.warehouse.root)
        self.warehouse.fs.make_dirs(dest.parent)
        self.warehouse.fs.rename(path, dest)
        self.moved.append(dest)
        log.warning("sparkwave did not make %s: moved it to %s (nothing was deleted)", path, dest)
