"""Read-only inspection of a warehouse from another process (no Spark, no ownership)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from sparkwave.meta.catalog import Catalog
from sparkwave.meta.epoch import epoch_datetime
from sparkwave.meta.ownership import describe_owner, is_owned
from sparkwave.storage.warehouse import Warehouse


def jobs_table(warehouse: str | Path) -> Table:
    wh = Warehouse(warehouse)
    catalog = Catalog(wh.catalog_path, read_only=True)
    try:
        committed = catalog.committed_epoch()
        owner = describe_owner(wh.owner_path) if is_owned(wh.owner_path) else "none"
        when = epoch_datetime(committed).strftime("%H:%M:%S") if committed else "-"
        table = Table(title=f"sparkwave jobs · committed epoch {committed} ({when}) · owner: {owner}")
        for c in ("id", "name", "kind", "strategy", "phase", "rows", "created epoch"):
            table.add_column(c)
        for i, rel in enumerate(catalog.relations(), 1):
            base = catalog.base_at(rel.name, committed)
            _, log_rows = catalog.log_rows_since(rel.name, base.epoch if base else 0)
            table.add_row(str(i), rel.name, "table" if rel.kind == "table" else "materialized view",
                          rel.definition.get("backfill_strategy", "-"), "created",
                          f"{(base.rows if base else 0) + log_rows:,} changes", str(rel.created_epoch))
        return table
    finally:
        catalog.close()
