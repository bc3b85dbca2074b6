"""Staged DML: a statement's batches (folders under `staging/`) recorded together, taken into an
epoch's plan (`epoch` set when planned) and forgotten once that epoch committed and the files went."""

from __future__ import annotations

from typing import NamedTuple

from sparkwave.core.catalog.connection import CatalogBase


class DmlBatch(NamedTuple):
    id: int
    relation: str
    path: str
    rows: int


class ConsumedBatch(NamedTuple):
    """A batch whose epoch committed: its files can go."""

    id: int
    path: str


class DmlMixin(CatalogBase):
    def stage_dml(self, relation: str, batches: list[tuple[str, int]]) -> None:
        """Record a statement's batches `(folder, rows)` together: a crash stages all or none."""
        with self.transaction() as db:
            db.executemany("INSERT INTO dml (relation, path, rows) VALUES (?, ?, ?)",
                           [(relation, self._stored(p), n) for p, n in batches])

    def pending_dml(self) -> list[DmlBatch]:
        """Batches no epoch has planned yet, in statement order."""
        return [DmlBatch(i, r, self._file(p), n) for i, r, p, n in self._all(
            "SELECT id, relation, path, rows FROM dml WHERE epoch IS NULL ORDER BY id")]

    def dml_batches(self, ids: list[int]) -> list[DmlBatch]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        return [DmlBatch(i, r, self._file(p), n) for i, r, p, n in self._all(
            f"SELECT id, relation, path, rows FROM dml WHERE id IN ({marks}) ORDER BY id", tuple(ids))]

    def staged_paths(self) -> set[str]:
        return {self._file(r[0]) for r in self._all("SELECT path FROM dml")}

    def consumed_dml(self) -> list[ConsumedBatch]:
        return [ConsumedBatch(i, self._file(p)) for i, p in self._all(
            "SELECT d.id, d.path FROM dml d JOIN epochs e ON d.epoch = e.epoch WHERE e.state = 'committed'")]

    def forget_dml(self, ids: list[int]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM dml WHERE id = ?", [(i,) for i in ids])
