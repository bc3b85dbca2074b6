"""The epoch -> file map: each relation's log files (one per epoch that changed it, with the Delta
version that holds it, `NOT_IN_DELTA` until the Delta follower has committed it) and compacted
bases, and retention's forgetting of both."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sparkwave.core.catalog.backend import CatalogDb
from sparkwave.core.catalog.connection import CatalogBase


@dataclass(frozen=True)
class Base:
    epoch: int
    version: int
    rows: int
    files: list[str]


NOT_IN_DELTA = -1  # `log_files.version` of a file the relation's Delta log does not hold yet (`meta/delta_follower.py`)
DELTA_RETIRE = "delta_retire."  # settings key prefix: a retention's cut its relation's Delta log has still to apply


class LogFile(NamedTuple):
    epoch: int
    path: str


class EpochRows(NamedTuple):
    """The rows an epoch added to a relation's log (or read from a source)."""

    epoch: int
    rows: int


class PendingLogFile(NamedTuple):
    """A committed epoch's log file that the relation's Delta log does not hold yet."""

    epoch: int
    path: str
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

    # --- the relations' Delta logs, which follow the catalog (`meta/delta_follower.py`) ----------
    def delta_pending(self, relation: str, since: int, upto: int) -> list[PendingLogFile]:
        """The log files of epochs in `[since, upto]` that the relation's Delta log does not hold yet."""
        return [PendingLogFile(e, self._file(p), n) for e, p, n in self._all(
            "SELECT epoch, path, rows FROM log_files WHERE relation = ? AND epoch >= ? AND epoch <= ? AND version = ? "
            "ORDER BY epoch", (relation, since, upto, NOT_IN_DELTA))]

    def delta_backlog(self) -> list[tuple[str, int]]:
        """Every `(relation, epoch)` whose log file no Delta log holds yet (read once at open: a scan)."""
        return [(r, e) for r, e in self._all("SELECT relation, epoch FROM log_files WHERE version = ? ORDER BY epoch",
                                             (NOT_IN_DELTA,))]

    def delta_recorded(self, done: list[tuple[str, list[int], int]]) -> None:
        """Each `(relation, epochs, version)`: the relation's Delta log holds the files of `epochs`
        from `version` on (one transaction for a round of the follower: one disk sync)."""
        with self.transaction() as db:
            db.executemany("UPDATE log_files SET version = ? WHERE relation = ? AND epoch = ? AND version = ?",
                           [(v, r, e, NOT_IN_DELTA) for r, epochs, v in done for e in epochs])

    def delta_retires(self) -> dict[str, int]:
        """Retention's cuts that a relation's Delta log has still to apply (a crash came between): by relation."""
        return {k.removeprefix(DELTA_RETIRE): int(v) for k, v in self._all(
            "SELECT key, value FROM settings WHERE key LIKE ? ESCAPE '!'", (DELTA_RETIRE.replace("_", "!_") + "%",))}

    def delta_retired(self, relation: str, keep: int) -> None:
        """The relation's Delta log no longer holds the files of epochs `<= keep`."""
        with self.transaction() as db:
            db.execute("DELETE FROM settings WHERE key = ? AND CAST(value AS INTEGER) <= ?",
                       (DELTA_RETIRE + relation, keep))

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

    def add_base(self, db: CatalogDb, relation: str, epoch: int, version: int, rows: int,
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
        forgotten; time travel works from `retained_from` on. The relation's Delta log has still to
        drop those files (`delta_retires`, until `delta_retired`)."""
        with self.transaction() as db:
            db.execute("DELETE FROM log_files WHERE relation = ? AND epoch <= ?", (relation, keep))
            db.execute("DELETE FROM bases WHERE relation = ? AND epoch < ?", (relation, keep))
            db.execute("DELETE FROM base_files WHERE relation = ? AND epoch < ?", (relation, keep))
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)",
                       (f"retained_from.{relation}", str(retained_from)))
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (DELTA_RETIRE + relation, str(keep)))
