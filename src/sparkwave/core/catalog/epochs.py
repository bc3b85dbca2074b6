"""Epochs: each one's plan, persisted before it executes, and its commit (log files, source
offsets, bad records, in one transaction: only this commit makes the epoch visible)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import NamedTuple

from sparkwave.core.catalog.connection import CatalogBase
from sparkwave.core.catalog.watermarks import JudgedRange, NewWatermark, record_watermarks

# What `commit_epoch` records (plain tuples are welcome): an epoch's log file of one relation, and
# one bad source record it kept.
NewLogFile = tuple[str, str, int, int]  # (relation, path, rows, Delta version or NOT_IN_DELTA: the main graph's)
BadRecord = tuple[str, str, int, str, str | None]  # (relation, split, offset, error, raw payload)


class PlannedEpoch(NamedTuple):
    """An epoch planned and not committed: replayed with the same plan."""

    epoch: int
    prev: int
    plan: dict


class EpochsMixin(CatalogBase):
    def committed_epoch(self) -> int:
        row = self._one("SELECT max(epoch) FROM epochs WHERE state = 'committed'")
        return int(row[0]) if row and row[0] is not None else 0

    def uncommitted_plan(self) -> PlannedEpoch | None:
        row = self._one("SELECT epoch, prev, plan FROM epochs WHERE state = 'planned' ORDER BY epoch LIMIT 1")
        return PlannedEpoch(row[0], row[1], json.loads(row[2])) if row else None

    def persist_plan(self, epoch: int, prev: int, plan: dict, dml_ids: list[int]) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO epochs (epoch, prev, state, plan, planned_at) VALUES (?, ?, 'planned', ?, ?)",
                       (epoch, prev, json.dumps(plan), time.time()))
            db.executemany("UPDATE dml SET epoch = ? WHERE id = ?", [(epoch, i) for i in dml_ids])

    def commit_epoch(self, epoch: int, logs: Sequence[NewLogFile], offsets: dict[str, dict[str, int]], rows_in: int,
                     latency_ms: float, errors: Sequence[BadRecord] = (),
                     bad_counts: dict[str, int] | None = None, watermarks: Sequence[NewWatermark] = (),
                     late: dict[str, int] | None = None, judged: Sequence[JudgedRange] = ()) -> None:
        """Mark `epoch` committed with its log files `(relation, path, rows, version)`, offsets, the
        bad source records kept `(relation, split, offset, error, raw)` and how many there were, the
        watermarks it moved `(relation, split, value)` and the late rows it dropped per relation."""
        now = time.time()
        with self.transaction() as db:
            last = db.execute("SELECT committed_at FROM epochs WHERE state = 'committed' ORDER BY epoch DESC "
                              "LIMIT 1").fetchone()
            if last and last[0] is not None and last[0] > now:  # committed while the clock was ahead
                db.execute("UPDATE epochs SET committed_at = ? WHERE state = 'committed' AND committed_at > ?",
                           (now, now))
            db.executemany("INSERT INTO source_error_counts VALUES (?, ?) ON CONFLICT (relation) DO UPDATE "
                           "SET count = count + excluded.count", list((bad_counts or {}).items()))
            db.executemany('INSERT OR REPLACE INTO source_errors VALUES (?, ?, ?, ?, ?, ?)',
                           [(r, s, o, epoch, err, raw) for r, s, o, err, raw in errors])
            db.executemany("INSERT OR REPLACE INTO log_files VALUES (?, ?, ?, ?, ?)",
                           [(r, epoch, self._stored(p), n, v) for r, p, n, v in logs])
            for rel, splits in offsets.items():
                db.executemany('INSERT OR REPLACE INTO source_offsets VALUES (?, ?, ?)',
                               [(rel, s, o) for s, o in splits.items()])
            record_watermarks(db, epoch, watermarks, late or {}, judged)
            db.execute("UPDATE epochs SET state = 'committed', committed_at = ?, rows_in = ?, latency_ms = ? "
                       "WHERE epoch = ?", (now, rows_in, latency_ms, epoch))

    def committed_by(self, wall_time: float) -> int | None:
        """The newest epoch committed at or before `wall_time` (every older epoch was superseded by
        then), or None. Commit times are wall time as recorded, a time later than the next commit
        clamped to it (`commit_epoch`), so epochs numbered during a forward clock jump age from the
        moment the clock came back."""
        row = self._one("SELECT epoch FROM epochs WHERE state = 'committed' AND committed_at <= ? "
                        "ORDER BY epoch DESC LIMIT 1", (wall_time,))
        return int(row[0]) if row else None

    def committed_epochs(self, since: int = 0) -> list[int]:
        return [r[0] for r in self._all(
            "SELECT epoch FROM epochs WHERE state = 'committed' AND epoch >= ? ORDER BY epoch", (since,))]

    def epochs_between(self, after: int, upto: int | None = None) -> list[int]:
        """Planned or committed epochs in `(after, upto]` (upto: unbounded if None)."""
        if upto is None:
            return [r[0] for r in self._all("SELECT epoch FROM epochs WHERE epoch > ? ORDER BY epoch", (after,))]
        return [r[0] for r in self._all("SELECT epoch FROM epochs WHERE epoch > ? AND epoch <= ? ORDER BY epoch",
                                        (after, upto))]

    def epoch_now(self, epoch: int) -> int | None:
        """`NOW()` of `epoch` in microseconds (UTC): the time its plan recorded (`meta/barrier/plan.py`),
        or, for an epoch planned before plans recorded it, when it was planned; None if no such epoch."""
        row = self._one("SELECT json_extract(plan, '$.now'), planned_at FROM epochs WHERE epoch = ?", (epoch,))
        if row is None:
            return None
        return int(row[0]) if row[0] is not None else int(row[1] * 1_000_000)

    def last_planned_at(self) -> float:
        row = self._one("SELECT planned_at FROM epochs ORDER BY epoch DESC LIMIT 1")
        return float(row[0]) if row and row[0] is not None else 0.0
