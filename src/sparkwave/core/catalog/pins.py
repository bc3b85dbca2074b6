"""Pins: snapshots retention must keep, each held by a creating job (`job:<id>`) or a sink
(`sink:<name>`) at the epoch it reads from."""

from __future__ import annotations

from sparkwave.core.catalog.backend import CatalogDb
from sparkwave.core.catalog.connection import CatalogBase


class PinsMixin(CatalogBase):
    def add_pin(self, relation: str, epoch: int, holder: str, db: CatalogDb | None = None) -> None:
        if db is None:
            with self.transaction() as db:
                self.add_pin(relation, epoch, holder, db)
            return
        db.execute("INSERT INTO pins (relation, epoch, holder) VALUES (?, ?, ?)", (relation, epoch, holder))

    def remove_pins(self, holder: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM pins WHERE holder = ?", (holder,))

    def move_pin(self, db: CatalogDb, holder: str, epoch: int) -> None:
        db.execute("UPDATE pins SET epoch = ? WHERE holder = ?", (epoch, holder))

    def min_pin(self, relation: str) -> int | None:
        row = self._one("SELECT min(epoch) FROM pins WHERE relation = ?", (relation,))
        return row[0] if row and row[0] is not None else None
