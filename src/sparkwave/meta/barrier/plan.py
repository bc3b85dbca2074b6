"""Planning an epoch: what it reads (each source's offset ranges, bounded by its rate; the staged
DML batches, whole, up to `dml_rows_per_epoch` rows), the control requests of other processes, the
creating jobs' admission (the lag rule), and the plan persisted before anything executes, so that
a crash or a failed attempt replays exactly it."""

from __future__ import annotations

import time

from sparkwave.core import clock
from sparkwave.core.epoch import next_epoch
from sparkwave.core.errors import SparkwaveError
from sparkwave.meta.barrier.schedule import topo_order
from sparkwave.meta.locks import Locks
from sparkwave.meta.pipeline import JobControl
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.settings import Settings
from sparkwave.stream.epoch_work import DmlBatches, EpochWork


class Planner:
    def __init__(self, rt: Runtime, locks: Locks, interval_ms: int, jobs: JobControl | None) -> None:
        self.rt = rt
        self.locks = locks
        self.interval_ms = interval_ms
        self.jobs = jobs
        self.started_at = time.time()  # a source's first epoch covers the time since

    def pending(self) -> EpochWork | None:
        """The first epoch planned but not committed (a crash, a failed attempt), to replay."""
        pending = self.rt.catalog.uncommitted_plan()
        return EpochWork(*pending) if pending is not None else None

    def next(self) -> EpochWork:
        """The epoch after the committed one, its plan still empty."""
        prev = self.rt.catalog.committed_epoch()
        return EpochWork(next_epoch(prev), prev, {})

    def read_inputs(self, e: EpochWork) -> list[int]:
        """Fill `e.plan` with the source ranges and the staged DML batches the epoch takes; returns
        the batches' ids."""
        e.plan = {"sources": self._source_ranges()}
        # The epoch's NOW(), the same for every row and recorded with the plan, so a replay after a
        # crash sees the same time; never behind the previous epoch's, which temporal filters rely on.
        e.plan["now"] = max(clock.now_micros(), self.rt.catalog.epoch_now(e.prev) or 0)
        # Staged DML in statement order, whole batches up to `dml_rows_per_epoch` rows (at least one):
        # an epoch's input stays bounded, and what is left goes to the next epoch at once.
        budget = Settings(self.rt.catalog).dml_rows_per_epoch
        taken: list[int] = []
        pending = self.rt.catalog.pending_dml()
        for i, _, _, rows in pending:
            if taken and rows > budget:
                break
            taken.append(i)
            budget -= rows
        e.plan["dml"] = taken
        e.more = len(taken) < len(pending)
        return taken

    def _source_ranges(self) -> dict[str, dict[str, list[int]]]:
        sources: dict[str, dict[str, list[int]]] = {}
        # A generated source's rate is per second of wall time since the previous epoch (or since
        # the loop started; at most one barrier interval's worth); the offsets become part of the
        # persisted plan, so a replay reads the same rows.
        since = self.rt.catalog.last_planned_at() or self.started_at
        elapsed_ms = min(self.interval_ms, max(0, (time.time() - since) * 1000))
        for rel in self.rt.catalog.relations():
            try:
                conn = self.rt.connector(rel)
            except SparkwaveError as err:  # options stored before they were checked as now: it alone waits
                if (job := self.rt.catalog.job_of(rel.name)) is not None and job.error != str(err):
                    self.rt.catalog.set_job_error(job.id, str(err))
                continue
            if conn is None:
                continue
            if ranges := conn.plan(self.rt.catalog.source_offsets(rel.name), elapsed_ms):
                sources[rel.name] = ranges
            if (job := self.rt.catalog.job_of(rel.name)) is not None and job.error != conn.status:
                self.rt.catalog.set_job_error(job.id, conn.status)  # why it waits, in SHOW JOBS too
        return sources

    def admit_and_persist(self, e: EpochWork, dml_ids: list[int]) -> bool:
        """Apply other processes' control requests, then, under `locks.gate`, ask the creating jobs
        whether the lag rule admits the epoch and persist its plan. False: held back."""
        if self.jobs is not None:
            self.jobs.apply_requests()
        with self.locks.gate:
            if self.jobs is not None and not self.jobs.admit():
                return False
            self.rt.catalog.persist_plan(e.epoch, e.prev, e.plan, dml_ids)
        return True

    def prepare(self, e: EpochWork) -> tuple[DmlBatches, int]:
        """What executing the planned epoch needs: the relations in dependency order (into `e`), the
        DML batches it takes, and its rows in."""
        e.relations = topo_order(self.rt.catalog.relations())
        e.big_rows = Settings(self.rt.catalog).big_epoch_rows
        dml = self.rt.catalog.dml_batches(e.plan.get("dml", []))
        return dml, sum(r for *_, r in dml) + self._source_rows(e.plan.get("sources", {}))

    def _source_rows(self, sources: dict[str, dict[str, list[int]]]) -> int:
        """The rows the sources' ranges hold, by their connectors (a CDC table's offsets are WAL
        positions and keys, not rows)."""
        n = 0
        for name, splits in sources.items():
            rel = self.rt.catalog.relation(name)
            if rel is None:  # dropped since the plan (a replay after a DROP): it reads nothing
                continue
            try:
                conn = self.rt.connector(rel)
            except SparkwaveError:  # options stored before they were checked as now: it reads nothing
                continue
            n += conn.planned_rows(splits) if conn is not None else sum(b - a for a, b in splits.values())
        return n
