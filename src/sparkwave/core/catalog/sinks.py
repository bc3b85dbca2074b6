"""Sinks: each has a job (strategy `sink`) whose row holds its position (`snapshot_epoch`,
`next_vnode`, `consumed_epoch`), rate limit and error, and a pin (`sink:<name>`) on the MV at that
position. Sinks share the relations' namespace."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sparkwave.core.catalog.backend import CatalogDb
from sparkwave.core.catalog.jobs import JobsMixin, Phase
from sparkwave.core.chunk import VNODES
from sparkwave.core.epoch import Lag
from sparkwave.core.errors import CatalogError


@dataclass(frozen=True)
class SinkRow:
    """A sink: the MV it delivers, what its target is told (`spec`: columns, key, mode, options)."""

    name: str
    mv: str
    sink_id: str  # unique per CREATE SINK: its progress's key in the target
    spec: dict[str, Any]
    decouple: bool  # False: each epoch waits for the sink to commit it
    job: int


_SINK_COLS = "name, mv, sink_id, spec, decouple, job"


def _sink(row: tuple) -> SinkRow:
    return SinkRow(row[0], row[1], row[2], json.loads(row[3]), bool(row[4]), row[5])


class SinksMixin(JobsMixin):
    def add_sink(self, db: CatalogDb, sink: SinkRow, epoch: int, snapshot: bool,
                 rate_limit: int | None) -> int:
        """Add a sink and its job, pinning its MV at `epoch`: with `snapshot`, its backfill delivers
        the MV as of `epoch` first; without, it starts from the epochs after. Returns the job id."""
        if db.execute("SELECT 1 FROM relations WHERE name = ?", (sink.name,)).fetchone():
            raise CatalogError(f"{sink.name!r} already exists: it is a table, source or materialized view")
        if db.execute("SELECT 1 FROM sinks WHERE name = ?", (sink.name,)).fetchone():
            raise CatalogError(f"sink {sink.name!r} already exists")
        phase = Phase.SNAPSHOT if snapshot else Phase.CREATED
        now = time.time()
        cur = db.execute("INSERT INTO jobs (relation, strategy, phase, upstream, snapshot_epoch, consumed_epoch, "
                         "next_vnode, rate_limit, started_at, finished_at, merged_epoch) "
                         "VALUES (?, 'sink', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (sink.name, phase, sink.mv, epoch, epoch, 0 if snapshot else VNODES, rate_limit, now,
                          None if snapshot else now, None if snapshot else epoch))
        job = int(cur.lastrowid or 0)
        db.execute("INSERT INTO sinks VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (sink.name, sink.mv, sink.sink_id, json.dumps(sink.spec), int(sink.decouple), job, now))
        self.add_pin(sink.mv, epoch, f"sink:{sink.name}", db)
        return job

    def sinks(self) -> list[SinkRow]:
        return [_sink(r) for r in self._all(f"SELECT {_SINK_COLS} FROM sinks ORDER BY created_at")]

    def sink(self, name: str) -> SinkRow | None:
        row = self._one(f"SELECT {_SINK_COLS} FROM sinks WHERE name = ?", (name,))
        return _sink(row) if row else None

    def remove_sink(self, db: CatalogDb, name: str) -> None:
        job = db.execute("SELECT job FROM sinks WHERE name = ?", (name,)).fetchone()
        if job:
            for table in ("job_chunks", "job_steps"):
                db.execute(f"DELETE FROM {table} WHERE job = ?", (job[0],))
            db.execute("DELETE FROM jobs WHERE id = ?", (job[0],))
        db.execute("DELETE FROM pins WHERE holder = ?", (f"sink:{name}",))
        db.execute("DELETE FROM sinks WHERE name = ?", (name,))

    def sink_delivered(self, job_id: int, name: str, epoch: int, vnode: int, rows: int, epochs: int,
                       lag: Lag, note: str | None = None) -> None:
        """A sink's delivery is in its target: its position moves to `(epoch, vnode)` and its pin with
        it (the log store's truncation); a snapshot that reaches the last vnode is done. The job's
        error becomes `note` (what the target changed of a delivery), or none."""
        with self.transaction() as db:
            done = vnode >= VNODES
            row = db.execute("SELECT phase FROM jobs WHERE id = ?", (job_id,)).fetchone()
            snapshot = row is not None and row[0] == Phase.SNAPSHOT
            fields: dict[str, Any] = {"consumed_epoch": epoch, "next_vnode": vnode, "error": note}
            if snapshot and done:
                fields.update(phase=Phase.CREATED, finished_at=time.time(), merged_epoch=epoch)
            self.update_job(db, job_id, **fields)
            if snapshot:
                db.execute("UPDATE jobs SET rows_done = rows_done + ? WHERE id = ?", (rows, job_id))
            self.move_pin(db, f"sink:{name}", epoch)
            self.add_job_step(db, job_id, Phase.SNAPSHOT if snapshot else Phase.CREATED, rows, epochs,
                              lag.epochs, lag.ms, None)
