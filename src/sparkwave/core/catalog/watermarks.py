"""Watermarks: each watermarked relation's value per split and its own (split ''), a row per epoch
that moved it, committed with that epoch (`EpochsMixin.commit_epoch`), so the main graph, a
recovery and a creating job read the same value as of an epoch; and the rows dropped as late."""

from __future__ import annotations

from collections.abc import Sequence

from sparkwave.core.catalog.backend import CatalogDb
from sparkwave.core.catalog.connection import CatalogBase

# What `commit_epoch` records: (relation, split, value); split '' is the relation's watermark.
NewWatermark = tuple[str, str, int]

# What a source's epoch judged: (relation, split, lo, hi, watermark) for offsets [lo, hi).
JudgedRange = tuple[str, str, int, int, int]


def record_watermarks(db: CatalogDb, epoch: int, watermarks: Sequence[NewWatermark],
                      late: dict[str, int], judged: Sequence[JudgedRange] = ()) -> None:
    """Inside the epoch's commit transaction: the values the epoch moved, the late rows it dropped
    and, for a source, the watermark its offsets were judged by (a backfill reads them again)."""
    db.executemany("INSERT OR REPLACE INTO watermarks VALUES (?, ?, ?, ?)",
                   [(r, s, epoch, v) for r, s, v in watermarks])
    db.executemany("INSERT OR REPLACE INTO judged_ranges VALUES (?, ?, ?, ?, ?)", list(judged))
    db.executemany("INSERT INTO late_rows VALUES (?, ?) ON CONFLICT (relation) DO UPDATE "
                   "SET count = count + excluded.count", [(r, n) for r, n in late.items() if n])


def prune_watermarks(db: CatalogDb, cut: int) -> None:
    """Forget the watermarks of epochs before `cut` (history pruning) but the last each split had by
    then, which every epoch from `cut` on reads."""
    db.execute("DELETE FROM watermarks WHERE epoch < ? AND epoch < (SELECT max(x.epoch) FROM watermarks x "
               "WHERE x.relation = watermarks.relation AND x.split = watermarks.split AND x.epoch <= ?)", (cut, cut))


class WatermarksMixin(CatalogBase):
    def watermark(self, relation: str, epoch: int) -> int | None:
        """The relation's watermark as of `epoch` (the value the newest epoch at or before it set), or None."""
        row = self._one("SELECT value FROM watermarks WHERE relation = ? AND split = '' AND epoch <= ? "
                        "ORDER BY epoch DESC LIMIT 1", (relation, epoch))
        return int(row[0]) if row else None

    def split_watermarks(self, relation: str, epoch: int) -> dict[str, int]:
        """Each split's watermark as of `epoch` (splits that have seen no row left out)."""
        rows = self._all("SELECT w.split, w.value FROM watermarks w WHERE w.relation = ? AND w.split <> '' "
                         "AND w.epoch = (SELECT max(epoch) FROM watermarks x WHERE x.relation = w.relation "
                         "AND x.split = w.split AND x.epoch <= ?)", (relation, epoch))
        return {s: int(v) for s, v in rows}

    def judged_ranges(self, relation: str) -> list[tuple[str, int, int, int]]:
        """A watermarked source's offset ranges `(split, lo, hi, watermark)` and the watermark each was
        judged by (ranges read before the source had one are not listed). Kept as long as the source:
        an MV created on it reads its whole history again."""
        return [(s, int(lo), int(hi), int(w)) for s, lo, hi, w in self._all(
            "SELECT split, lo, hi, watermark FROM judged_ranges WHERE relation = ? ORDER BY split, lo", (relation,))]

    def late_rows(self) -> dict[str, int]:
        """Rows dropped because they arrived below their relation's watermark, per relation."""
        return {r: int(n) for r, n in self._all("SELECT relation, count FROM late_rows")}

    def forget_watermarks(self, db: CatalogDb, relation: str) -> None:
        """A dropped relation's watermarks and late-row count (in the DROP's transaction)."""
        db.execute("DELETE FROM watermarks WHERE relation = ?", (relation,))
        db.execute("DELETE FROM late_rows WHERE relation = ?", (relation,))
