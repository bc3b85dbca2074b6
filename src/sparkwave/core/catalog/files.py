"""The epoch -> file map: each relation's log files (one per epoch that changed it, with its Delta
version) and compacted bases, and retention's forgetting of both."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import NamedTuple

from sparkwave.core.catalog.connection import CatalogBase


@dataclass(frozen=True)
class Base:
    epoch: int
    version: int
    rows: int
    files: list[str]


class LogFile(NamedTuple):
    epoch: int
    path: str


class EpochRows(NamedTuple):
    """The rows an epoch added to a relation's log (or read from a source)."""

    epoch: int
    rows: int


class LogTotal(NamedTuple):
    files: int
    rows: int


class FilesMixin(CatalogBase):
    def log_files(self, relation: str, after: int, upto: int) -> list[LogFile]:
        """The log files of epochs in `(after, upto]`, oldest first."""
        return [LogFile(e, self._file(p)) for e, p in self._all(
            "SELECT epoch, path FROM log_files WHERE relation = ? AND epoch > ? AND epoch <= ? ORDER BY epoch",
            (relation, after, upto))]

    def log_file_rows(self, relation: str, after: int, upto: int) -> list[EpochRows]:
        """The rows of the log files of epochs in `(after, upto]`, oldest first."""
        return [EpochRows(*r) for r in self._all(
            "SELECT epoch, rows FROM log_files WHERE relation = ? AND epoch > ? AND epoch <= ? ORDER BY epoch",
            (relation, after, upto))]

    def log_rows_since(self, relation: str, epoch: int) -> LogTotal:
        row = self._one("SELECT count(*), coalesce(sum(rows), 0) FROM log_files WHERE relation = ? AND epoch > ?",
                        (relation, epoch))
        return LogTotal(int(row[0]), int(row[1])) if row else LogTotal(0, 0)

    def base_at(self, relation: str, epoch: int) -> Base | None:
        """The newest base with compaction epoch <= `epoch`."""
        row = self._one("SELECT epoch, version, rows FROM bases WHERE relation = ? AND epoch <= ? "
                        "ORDER BY epoch DESC LIMIT 1", (relation, epoch))
        if not row:
            return None
        files = [self._file(r[0]) for r in self._all("SELECT path FROM base_files WHERE relation = ? AND epoch = ?",
                                                     (relation, row[0]))]
        return Base(row[0], row[1], row[2], files)

    def bases(self, relation: str) -> list[Base]:
        rows = self._all("SELECT epoch FROM bases WHERE relation = ? ORDER BY epoch", (relation,))
        return [b for r in rows if (b := self.base_at(relation, r[0]))]

    def add_base(self, db: sqlite3.Connection, relation: str, epoch: int, version: int, rows: int,
                 files: list[str]) -> None:
        db.execute("INSERT OR REPLACE INTO bases VALUES (?, ?, ?, ?)", (relation, epoch, version, rows))
        db.execute("DELETE FROM base_files WHERE relation = ? AND epoch = ?", (relation, epoch))
        db.executemany("INSERT INTO base_files VALUES (?, ?, ?)", [(relation, epoch, self._stored(f)) for f in files])

    def retained_from(self, relation: str, default: int) -> int:
        """The oldest epoch retention keeps readable for `relation` (`default` until it first runs)."""
        row = self._one("SELECT value FROM settings WHERE key = ?", (f"retained_from.{relation}",))
        return int(row[0]) if row else default

    def retire(self, relation: str, keep: int, retained_from: int) -> None:
        """Retention: bases older than the base at `keep` and log files of epochs `<= keep` are
        forgotten; time travel works from `retained_from` on."""
        with self.transaction() as db:
            db.execute("DELETE FROM log_files WHERE relation = ? AND epoch <= ?", (relation, keep))
            db.execute("DELETE FROM bases WHERE relation = ? AND epoch < ?", (relation, keep))
            db.execute("DELETE FROM base_files WHERE relation = ? AND epoch < ?", (relation, keep))
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)",
                       (f"retained_from.{relation}", str(retained_from)))
