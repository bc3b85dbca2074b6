"""Sources: each split's committed offset, the offset ranges each epoch read (in its plan), a
source's history as of an epoch a backfill reads it at, and its bad records."""

from __future__ import annotations

import json
from typing import NamedTuple

from sparkwave.core.catalog.backend import CatalogDb
from sparkwave.core.catalog.connection import CatalogBase

Ranges = dict[str, list[int]]  # {split: [start, end)}


class EpochRanges(NamedTuple):
    epoch: int
    ranges: Ranges


class SourceError(NamedTuple):
    """A bad source record, kept with the epoch that read it."""

    relation: str
    split: str
    offset: int
    epoch: int
    error: str
    raw: str | None


class SourcesMixin(CatalogBase):
    def source_offsets(self, relation: str) -> dict[str, int]:
        return dict(self._all('SELECT split, "offset" FROM source_offsets WHERE relation = ?', (relation,)))

    def set_source_offsets(self, db: CatalogDb, relation: str, offsets: dict[str, int]) -> None:
        """A source's starting offsets, decided at CREATE."""
        db.executemany('INSERT OR REPLACE INTO source_offsets VALUES (?, ?, ?)',
                       [(relation, s, o) for s, o in offsets.items()])

    def source_ranges(self, relation: str, after: int = 0) -> list[EpochRanges]:
        """The offset ranges `{split: [start, end)}` each committed epoch after `after` read from
        `relation`'s source, in epoch order (epochs that read nothing from it left out)."""
        out = []
        for epoch, plan in self._all("SELECT epoch, plan FROM epochs WHERE state = 'committed' AND epoch > ? "
                                     "ORDER BY epoch", (after,)):
            ranges = json.loads(plan).get("sources", {}).get(relation)
            if ranges:
                out.append(EpochRanges(epoch, ranges))
        return out

    def record_source_snapshot(self, db: CatalogDb, relation: str, epoch: int, ranges: Ranges) -> None:
        db.execute("INSERT OR REPLACE INTO source_snapshots VALUES (?, ?, ?)", (relation, epoch, json.dumps(ranges)))

    def source_snapshot(self, relation: str, epoch: int) -> Ranges | None:
        row = self._one("SELECT ranges FROM source_snapshots WHERE relation = ? AND epoch = ?", (relation, epoch))
        return json.loads(row[0]) if row else None

    def source_error_counts(self) -> dict[str, int]:
        """Bad records per relation, kept or not."""
        return dict(self._all("SELECT relation, count FROM source_error_counts"))

    def source_errors(self, relation: str | None = None, limit: int = -1) -> list[SourceError]:
        """Bad source records in offset order, the first `limit` of them (-1: all)."""
        where, args = ("WHERE relation = ? ", (relation,)) if relation is not None else ("", ())
        bound = " LIMIT ?" if limit >= 0 else ""  # PostgreSQL has no LIMIT -1
        return [SourceError(*r) for r in self._all(
            f'SELECT relation, split, "offset", epoch, error, raw FROM source_errors {where}'
            f'ORDER BY relation, CAST(split AS INTEGER), "offset"{bound}', args + ((limit,) if limit >= 0 else ()))]
