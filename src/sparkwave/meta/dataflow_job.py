"""Snapshot backfill of a dataflow MV (joins, aggregates, windows): the creating job of
`creating_job.py` with several upstreams and state tables.

1. **snapshot**: every upstream is pinned at the one common committed epoch `S`. The operator tree
   runs as Spark DataFrames over the snapshots at `S`, and writes the MV's rows and each state
   table's rows, one table per checkpoint (a crash redoes at most the table in flight). Progress
   counts the rows of every upstream snapshot: each written table is its share of them.
2. **log store**: the upstreams' log epochs after `S`, one epoch per checkpoint, through the same
   per-epoch executors as the main graph, against the job's own state tables; each checkpoint
   commits the MV's and its state tables' logs for that epoch (replayed exactly after a crash).
3. **merge**, and the lag rule, as for any creating job."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from sparkwave.meta.catalog import JobRow, Relation
from sparkwave.meta.crash import crash_point
from sparkwave.meta.creating_job import SnapshotBackfill, Step, lag_of
from sparkwave.storage import snapshot as snap
from sparkwave.storage.compaction import write_base_files
from sparkwave.storage.state import state_relations
from sparkwave.stream.dataflow import Dataflow


class DataflowBackfill(SnapshotBackfill):
    def step(self) -> Step:
        job = self.rt.catalog.job(self.job_id)
        assert job is not None, f"BUG: creating job {self.job_id} has no row"
        rel = self.rt.relation(job.relation)
        if job.phase == "snapshot":
            return self._snapshot(job, rel)
        if job.phase == "log_store":
            return self._log_store(job, rel)
        return Step(merged=True)

    def tables(self, rel: Relation) -> list[Relation]:
        return [rel, *state_relations(self.rt, rel)]

    # --- phase 1 -------------------------------------------------------------------------------
    def _snapshot(self, job: JobRow, rel: Relation) -> Step:
        assert job.snapshot_epoch is not None
        s = job.snapshot_epoch
        if job.vnode_rows is None:  # per upstream: its snapshot's row count
            counts = [sum(snap.vnode_rows(self.rt.catalog, u, self.rt.relation(u).schema, s)) for u in rel.upstreams]
            with self.rt.catalog.transaction() as db:
                self.rt.catalog.update_job(db, self.job_id, vnode_rows=counts, rows_total=sum(counts))
            job = self.rt.catalog.creating_job(self.job_id)
        tables = self.tables(rel)
        i = job.next_vnode
        if i >= len(tables):
            return self._finish(job, tables)
        if job.rate_limit == 0:
            return Step(wait=None)
        table = tables[i]
        with self.rt.catalog.transaction() as db:
            db.execute("INSERT INTO job_chunks VALUES (?, ?, ?, ?, 'reading', 1, NULL) ON CONFLICT (job, lo) DO "
                       "UPDATE SET state = 'reading', attempts = attempts + 1", (self.job_id, i, i + 1, 0))
        df = Dataflow(self.rt, rel).build(s)[table.name]
        crash_point("backfill_mid_chunk")
        if self.chunk_hook:
            self.chunk_hook(i, i + 1)
        files, rows = write_base_files(self.rt, table, self._share(df), f"_backfill_{i}", f"s{s}-t{i}-")
        crash_point("backfill_after_chunk_rows")
        done = job.rows_total * (i + 1) // len(tables)
        lag, lag_ms = lag_of(self.rt, s)
        with self.rt.catalog.transaction() as db:
            db.execute("UPDATE job_chunks SET state = 'done', rows = ?, files = ? WHERE job = ? AND lo = ?",
                       (sum(rows), json.dumps(files), self.job_id, i))
            self.rt.catalog.update_job(db, self.job_id, next_vnode=i + 1, rows_done=done, error=None)
            self.rt.catalog.add_job_step(db, self.job_id, "snapshot", done - job.rows_done, 0, lag, lag_ms, None)
        self.limiter.spend(done - job.rows_done)
        return Step(rows=done - job.rows_done)

    def _finish(self, job: JobRow, tables: list[Relation]) -> Step:
        """Between phases: each table's files become its base as of `S`, and the log store starts."""
        assert job.snapshot_epoch is not None
        s = job.snapshot_epoch
        chunks = {lo: files for lo, _, _, _, _, files in self.rt.catalog.job_chunks(self.job_id)}
        bases = []
        for i, t in enumerate(tables):
            files = chunks.get(i, [])
            rows = [pq.ParquetFile(f).metadata.num_rows for f in files]
            bases.append((t, self.rt.stored(t).commit_base(s, files, rows), rows, files))
        crash_point("backfill_between_phases")
        with self.gate, self.rt.catalog.transaction() as db:
            lag, lag_ms = lag_of(self.rt, s)
            for t, version, rows, files in bases:
                self.rt.catalog.add_base(db, t.name, s, version, sum(rows), files)
            self.rt.catalog.update_job(db, self.job_id, phase="log_store", consumed_epoch=s, allowed_lag=lag)
            self.rt.catalog.add_job_step(db, self.job_id, "log_store", 0, 0, lag, lag_ms, lag)
        return Step()

    # --- phase 2 and 3 -------------------------------------------------------------------------
    def _log_store(self, job: JobRow, rel: Relation) -> Step:
        assert job.consumed_epoch is not None
        consumed = job.consumed_epoch
        ready = self.rt.catalog.epochs_between(consumed, self.rt.catalog.committed_epoch())
        if not ready:
            if not self.rt.catalog.epochs_between(consumed):
                return self._merge(job)
            return Step(wait=None)
        if job.rate_limit == 0:
            return Step(wait=None)
        if self.limiter.available(job.rate_limit) <= 0:
            return Step(wait=self.limiter.wait_for(job.rate_limit or 0))
        e = ready[0]
        inputs = {u: [p for _, p in self.rt.catalog.log_files(u, consumed, e)] for u in rel.upstreams}
        inputs = {u: p for u, p in inputs.items() if p}
        in_rows = sum(n for u in inputs for _, n in self.rt.catalog.log_file_rows(u, consumed, e))
        logs = []
        if inputs:
            chunk, staged = Dataflow(self.rt, rel).step(e, consumed, inputs)
            if chunk is not None and chunk.num_rows:
                self.rt.stored(rel).stage_log(e, chunk)
                staged = {rel.name: chunk, **staged}
            for name in staged:
                path, rows, version = self.rt.stored(self.rt.relation(name)).commit_log(e)
                logs.append((name, e, path, rows, version))
        crash_point("backfill_mid_log_store")
        with self.gate, self.rt.catalog.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO log_files VALUES (?, ?, ?, ?, ?)", logs)
            lag, lag_ms = lag_of(self.rt, e)
            allowed = max(0.0, min(lag + 1, (job.allowed_lag if job.allowed_lag is not None else lag) - 0.5))
            self.rt.catalog.update_job(db, self.job_id, consumed_epoch=e, allowed_lag=allowed, error=None)
            self.rt.catalog.move_pin(db, self.holder, e)
            self.rt.catalog.add_job_step(db, self.job_id, "log_store", in_rows, 1, lag, lag_ms, allowed)
        self.limiter.spend(in_rows)
        return Step(rows=in_rows)
