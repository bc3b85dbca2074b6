"""Jobs: one per table's ingestion, MV or sink; a creating job's phase, its checkpoints (each one
transaction) and its progress: the snapshot's chunks (vnode ranges) and its steps (rows, lag)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from sparkwave.core.catalog.backend import CatalogDb
from sparkwave.core.catalog.files import FilesMixin
from sparkwave.core.catalog.pins import PinsMixin
from sparkwave.core.epoch import Lag
from sparkwave.core.errors import CatalogError

KEPT_JOB_STEPS = 5000  # a job's most recent checkpoints kept for progress and inspection


class Phase(StrEnum):
    """A job's phase. A creating job goes snapshot -> log store -> created (merged into the main
    graph); a job created in the main graph (a table, a blocking backfill) starts as created."""

    SNAPSHOT = "snapshot"
    LOG_STORE = "log_store"
    CREATED = "created"


@dataclass(frozen=True)
class JobRow:
    """A job's row: its phase and the progress of a creating job."""

    id: int
    relation: str
    strategy: str
    phase: Phase
    upstream: str | None
    snapshot_epoch: int | None
    consumed_epoch: int | None
    allowed_lag: float | None  # the lag rule (lag_rule.py)
    next_vnode: int  # the snapshot's vnodes below this one are read (VNODES + 1: a chunked backfill's merge too)
    vnode_rows: dict[str, list[int]] | None  # rows per vnode of each upstream's snapshot at S
    rows_total: int
    rows_done: int
    rate_limit: int | None  # rows per second; None = unlimited, 0 = paused
    started_at: float
    finished_at: float | None
    merged_epoch: int | None
    held_back: int
    error: str | None

    @property
    def creating(self) -> bool:
        return self.phase is not Phase.CREATED


_JOB_COLS = ("id, relation, strategy, phase, upstream, snapshot_epoch, consumed_epoch, allowed_lag, next_vnode, "
             "vnode_rows, rows_total, rows_done, rate_limit, started_at, finished_at, merged_epoch, held_back, error")


def _job(row: tuple) -> JobRow:
    vals = list(row)
    vals[3] = Phase(vals[3])
    vals[9] = json.loads(vals[9]) if vals[9] else None
    return JobRow(*vals)


@dataclass(frozen=True)
class Chunk:
    """One checkpoint of a job's snapshot phase: the upstream rows of vnodes `[lo, hi)` (of the
    driving upstream, for a chunked stateful backfill, whose merge chunk is `[VNODES, VNODES + 1)`)."""

    lo: int
    hi: int
    rows: int
    state: str  # 'reading' (in flight: a crash re-reads it) | 'done'
    attempts: int
    files: dict[str, list[str]]  # the files it wrote, by table (the MV, its state tables, `<table>#partial`)


class JobStep(NamedTuple):
    """One checkpoint of a job, for its progress and rates."""

    step: int
    phase: str
    at: float  # wall time
    rows: int
    epochs: int
    lag_epochs: int
    lag_ms: int
    allowed_lag: float | None


class JobsMixin(FilesMixin, PinsMixin):
    def job(self, job_id: int) -> JobRow | None:
        row = self._one(f"SELECT {_JOB_COLS} FROM jobs WHERE id = ?", (job_id,))
        return _job(row) if row else None

    def job_of(self, relation: str) -> JobRow | None:
        row = self._one(f"SELECT {_JOB_COLS} FROM jobs WHERE relation = ?", (relation,))
        return _job(row) if row else None

    def creating_job(self, job_id: int) -> JobRow:
        """The job `job_id`, which must still be creating (for ALTER / CANCEL)."""
        job = self.job(job_id)
        if job is None or not job.creating:
            known = ", ".join(str(j.id) for j in self.jobs() if j.creating) or "none"
            state = (f"no job with id {job_id}" if job is None else
                     f"job {job_id} ({job.relation}) is not creating: it finished at epoch {job.merged_epoch}")
            raise CatalogError(f"{state} (creating jobs: {known})")
        return job

    def jobs(self) -> list[JobRow]:
        return [_job(r) for r in self._all(f"SELECT {_JOB_COLS} FROM jobs ORDER BY id")]

    def update_job(self, db: CatalogDb, job_id: int, **fields: Any) -> None:
        if "vnode_rows" in fields and fields["vnode_rows"] is not None:
            fields["vnode_rows"] = json.dumps(fields["vnode_rows"])
        sets = ", ".join(f"{k} = ?" for k in fields)
        db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def set_job_error(self, job_id: int, error: str | None) -> None:
        with self.transaction() as db:
            self.update_job(db, job_id, error=error)

    def set_job_fields(self, job_id: int, **fields: Any) -> None:
        with self.transaction() as db:
            self.update_job(db, job_id, **fields)

    def count_held_back(self, job_id: int) -> None:
        with self.transaction() as db:
            db.execute("UPDATE jobs SET held_back = held_back + 1 WHERE id = ?", (job_id,))

    def job_steps(self, job_id: int, since: float = 0.0) -> list[JobStep]:
        """A job's checkpoints at or after wall time `since`, oldest first."""
        return [JobStep(*r) for r in self._all(
            "SELECT step, phase, at, rows, epochs, lag_epochs, lag_ms, allowed_lag FROM job_steps "
            "WHERE job = ? AND at >= ? ORDER BY step", (job_id, since))]

    def add_job_step(self, db: CatalogDb, job_id: int, phase: str, rows: int, epochs: int,
                     lag_epochs: int, lag_ms: int, allowed_lag: float | None) -> None:
        row = db.execute("SELECT coalesce(max(step), 0) FROM job_steps WHERE job = ?", (job_id,)).fetchone()
        db.execute("INSERT INTO job_steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (job_id, row[0] + 1, phase, time.time(), rows, epochs, lag_epochs, lag_ms, allowed_lag))
        db.execute("DELETE FROM job_steps WHERE job = ? AND step <= ?", (job_id, row[0] + 1 - KEPT_JOB_STEPS))

    # --- a creating job's checkpoints (each one transaction) -------------------------------------
    def set_job_counts(self, job_id: int, vnode_rows: dict[str, list[int]]) -> None:
        """Each upstream snapshot's rows per vnode, counted once when the job starts reading them."""
        with self.transaction() as db:
            self.update_job(db, job_id, vnode_rows=vnode_rows, rows_total=sum(map(sum, vnode_rows.values())))

    def start_chunk(self, job_id: int, lo: int, hi: int, rows: int) -> None:
        """A chunk is in flight: a crash from here on re-reads it (and counts the attempt)."""
        with self.transaction() as db:
            db.execute("INSERT INTO job_chunks VALUES (?, ?, ?, ?, 'reading', 1, NULL) ON CONFLICT (job, lo) DO "
                       "UPDATE SET hi = excluded.hi, rows = excluded.rows, state = 'reading', "
                       "attempts = attempts + 1", (job_id, lo, hi, rows))

    def finish_chunk(self, job_id: int, lo: int, hi: int, rows: int, files: dict[str, list[str]], lag: Lag) -> None:
        with self.transaction() as db:
            db.execute("UPDATE job_chunks SET state = 'done', files = ? WHERE job = ? AND lo = ?",
                       (json.dumps({t: [self._stored(f) for f in fs] for t, fs in files.items()}), job_id, lo))
            db.execute("UPDATE jobs SET next_vnode = ?, rows_done = rows_done + ?, error = NULL WHERE id = ?",
                       (hi, rows, job_id))
            self.add_job_step(db, job_id, Phase.SNAPSHOT, rows, 0, lag.epochs, lag.ms, None)

    def job_chunks(self, job_id: int) -> list[Chunk]:
        """The snapshot phase's chunks by vnode."""
        return [Chunk(lo, hi, n, st, a, {t: [self._file(f) for f in fs] for t, fs in json.loads(f or "{}").items()})
                for lo, hi, n, st, a, f in self._all(
                    "SELECT lo, hi, rows, state, attempts, files FROM job_chunks WHERE job = ? ORDER BY lo", (job_id,))]

    def start_log_store(self, job_id: int, epoch: int, bases: list[tuple[str, int, int, list[str]]],
                        lag: Lag, allowed: float) -> None:
        """The snapshot phase's end: each table's base `(relation, version, rows, files)` as of `epoch`."""
        with self.transaction() as db:
            for name, version, rows, files in bases:
                self.add_base(db, name, epoch, version, rows, files)
            self.update_job(db, job_id, phase=Phase.LOG_STORE, consumed_epoch=epoch, allowed_lag=allowed)
            self.add_job_step(db, job_id, Phase.LOG_STORE, 0, 0, lag.epochs, lag.ms, allowed)

    def log_store_checkpoint(self, job_id: int, holder: str, logs: list[tuple[str, int, str, int, int]],
                             through: int, epochs: int, rows: int, lag: Lag, allowed: float) -> None:
        """Log files `(relation, epoch, path, rows, version)` consumed up to `through`; the job's pin
        follows it, with the lag rule's new allowed lag."""
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO log_files VALUES (?, ?, ?, ?, ?)",
                           [(r, e, self._stored(p), n, v) for r, e, p, n, v in logs])
            self.update_job(db, job_id, consumed_epoch=through, allowed_lag=allowed, error=None)
            self.move_pin(db, holder, through)
            self.add_job_step(db, job_id, Phase.LOG_STORE, rows, epochs, lag.epochs, lag.ms, allowed)

    def merge_job(self, job_id: int, holder: str, relation: str, epoch: int) -> None:
        """The MV and its state tables join the main graph at `epoch`; the job's pins go."""
        with self.transaction() as db:
            db.execute("UPDATE relations SET state = 'created' WHERE name = ? OR (kind = 'state' AND "
                       "json_extract(definition, '$.owner') = ?)", (relation, relation))
            self.update_job(db, job_id, phase=Phase.CREATED, merged_epoch=epoch, finished_at=time.time(),
                            allowed_lag=None, error=None)
            db.execute("DELETE FROM pins WHERE holder = ?", (holder,))
            self.add_job_step(db, job_id, Phase.CREATED, 0, 0, 0, 0, 0)
