"""A creating job under snapshot backfill: isolated from the main graph, with its own checkpoints.

After RisingWave's `snapshot_backfill_executor` (DESIGN.md section 4). Each `step()` is one of the
job's checkpoints and commits the MV's rows together with the job's progress in one catalog
transaction; the main graph never waits for it, except by the lag rule below.

1. **snapshot**: the upstream's snapshot at the pinned committed epoch `S`, in chunks of
   consecutive vnodes (each base file is sorted by vnode with small row groups, so a chunk's
   Spark scan reads only its row groups, in parallel). A chunk is recorded as in flight before it
   is read; its rows are written as files, then the chunk is marked done with them. A crash
   re-reads only the chunk that was in flight. The last chunk's checkpoint commits all chunk files
   as the MV's base as of `S`.
2. **log store**: the upstream's log epochs after `S`, in batches of committed epochs, each
   netted into the MV's own log file for that epoch, so the MV can be read as of any of them.
3. **merge**: once no main-graph epoch is pending, between two main epochs, the MV joins the main
   graph at the exact epoch `M` it has consumed up to; from `M + 1` the main graph maintains it.

**The lag rule** (convergence while the upstream keeps writing), after the seed's
`max_pending_epoch_lag`. `lag` counts the main graph's epochs (planned or committed) after the
job's consumed epoch. The main graph may plan a new epoch only while `lag < allowed`. `allowed`
starts at the lag when the log-store phase begins; each checkpoint that consumes `k` epochs sets

    allowed := max(0, min(lag + 1, allowed - k / 2))

with `lag` as of that commit. So `allowed` falls by at least half an epoch per checkpoint and
reaches 0 after at most `2 * allowed` checkpoints: then the main graph waits until the job has
consumed everything and merges. Meanwhile the upstream advances at most one epoch per checkpoint
and at most half as many epochs as the job consumes, so the lag recorded at each checkpoint never
increases. A job that reads faster than the upstream writes catches up in a few checkpoints, and
holds the main graph back for at most the last of them; `held_back` counts the epochs it delayed.
A paused job (rate limit 0) or one whose checkpoints are failing never holds it back.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from sparkwave.meta.catalog import JobRow, Relation
from sparkwave.meta.crash import crash_point
from sparkwave.meta.epoch import epoch_ms
from sparkwave.meta.runtime import Runtime
from sparkwave.storage import snapshot as snap
from sparkwave.storage.compaction import write_base_files
from sparkwave.storage.table import VNODES, log_spark_ddl
from sparkwave.stream.backfill import log_changes, snapshot_rows
from sparkwave.stream.project_filter import ProjectFilter

MAX_LOG_EPOCHS = 500  # upstream epochs per log-store checkpoint


class Pipeline(Protocol):
    """The main graph as a creating job sees it (the barrier loop): whether it has input now."""

    def busy(self) -> bool: ...


@dataclass(frozen=True)
class Step:
    """What a checkpoint did: `wait` seconds until there may be work (None: until woken)."""

    rows: int = 0
    merged: bool = False
    wait: float | None = 0.0


class RateLimiter:
    """A token bucket of rows per second. It may go into debt by one chunk, so that a chunk larger
    than a second's budget still moves, and the average rate stays at the limit."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.at = time.monotonic()

    def available(self, limit: int | None) -> float:
        now = time.monotonic()
        if limit is None:
            self.tokens, self.at = 0.0, now
            return math.inf
        self.tokens = min(float(limit), self.tokens + limit * (now - self.at))
        self.at = now
        return self.tokens

    def spend(self, rows: int) -> None:
        self.tokens -= rows

    def wait_for(self, limit: int) -> float:
        return max(0.01, -self.tokens / limit) if limit > 0 else 0.0


def lag_of(rt: Runtime, consumed: int) -> tuple[int, int]:
    """(epochs, milliseconds) the main graph is ahead of a job that consumed up to `consumed`."""
    pending = rt.catalog.epochs_between(consumed)
    if not pending:
        return 0, 0
    return len(pending), max(0, epoch_ms(pending[-1]) - epoch_ms(consumed)) if consumed else 0


class SnapshotBackfill:
    """The steps of one creating job. `gate` serialises its checkpoints with the main graph's
    planning (the lag rule); `loop_lock` is held between two main epochs to merge."""

    def __init__(self, rt: Runtime, job_id: int, gate: threading.Lock, loop_lock: threading.RLock,
                 chunk_rows: int, stop: threading.Event, pipeline: Pipeline | None = None) -> None:
        self.rt = rt
        self.job_id = job_id
        self.gate = gate
        self.loop_lock = loop_lock
        self.chunk_rows = chunk_rows
        self.stop = stop  # set when the job is cancelled or the session closes: it must not merge then
        self.chunk_hook: Callable[[int, int], None] | None = None  # tests: stands in for a slow chunk read
        self.pipeline = pipeline
        self.limiter = RateLimiter()

    @property
    def holder(self) -> str:
        return f"job:{self.job_id}"

    def _job(self) -> tuple[JobRow, Relation, Relation]:
        job = self.rt.catalog.job(self.job_id)
        assert job is not None and job.upstream is not None, f"BUG: creating job {self.job_id} has no row"
        return job, self.rt.relation(job.relation), self.rt.relation(job.upstream)

    def step(self) -> Step:
        job, rel, up = self._job()
        if job.phase == "snapshot":
            return self._snapshot_step(job, rel, up)
        if job.phase == "log_store":
            return self._log_store_step(job, rel, up)
        return Step(merged=True)

    # --- phase 1 -------------------------------------------------------------------------------
    def _snapshot_step(self, job: JobRow, rel: Relation, up: Relation) -> Step:
        assert job.snapshot_epoch is not None
        s = job.snapshot_epoch
        counts = job.vnode_rows
        if counts is None:
            counts = snap.vnode_rows(self.rt.catalog, up.name, up.schema, s)
            with self.rt.catalog.transaction() as db:
                self.rt.catalog.update_job(db, self.job_id, vnode_rows=counts, rows_total=sum(counts))
        if job.next_vnode >= VNODES:
            return self._finish_snapshot(job, rel)
        budget = self.limiter.available(job.rate_limit)
        if job.rate_limit == 0:
            return Step(wait=None)
        if budget <= 0:
            return Step(wait=self.limiter.wait_for(job.rate_limit or 0))
        lo = hi = job.next_vnode
        rows = 0
        while hi < VNODES and (hi == lo or rows + counts[hi] <= min(self.chunk_rows, budget)):
            rows += counts[hi]
            hi += 1
        with self.rt.catalog.transaction() as db:  # in flight: a crash from here re-reads this chunk
            db.execute("INSERT INTO job_chunks VALUES (?, ?, ?, ?, 'reading', 1, NULL) ON CONFLICT (job, lo) DO "
                       "UPDATE SET hi = excluded.hi, rows = excluded.rows, state = 'reading', "
                       "attempts = attempts + 1", (self.job_id, lo, hi, rows))
        files: list[str] = []
        if rows:
            pf = ProjectFilter.from_json(rel.definition["project_filter"])
            chunk = snap.snapshot(self.rt.spark, self.rt.catalog, up.name, up.schema, s, (lo, hi))
            crash_point("backfill_mid_chunk")
            if self.chunk_hook:
                self.chunk_hook(lo, hi)
            files, _ = write_base_files(self.rt, rel, self._share(snapshot_rows(pf, chunk, rel.schema)),
                                        f"_backfill_{lo}", f"s{s}-v{lo:03d}-", sort=False)
            crash_point("backfill_after_chunk_rows")
        lag, lag_ms = lag_of(self.rt, s)
        with self.rt.catalog.transaction() as db:
            db.execute("UPDATE job_chunks SET state = 'done', files = ? WHERE job = ? AND lo = ?",
                       (json.dumps(files), self.job_id, lo))
            self.rt.catalog.update_job(db, self.job_id, next_vnode=hi, rows_done=job.rows_done + rows, error=None)
            self.rt.catalog.add_job_step(db, self.job_id, "snapshot", rows, 0, lag, lag_ms, None)
        self.limiter.spend(rows)
        return Step(rows=rows)

    def _finish_snapshot(self, job: JobRow, rel: Relation) -> Step:
        """Between phases: the chunks' files become the MV's base as of `S`, and the log store starts."""
        assert job.snapshot_epoch is not None
        s = job.snapshot_epoch
        files = [f for *_, chunk_files in self.rt.catalog.job_chunks(self.job_id) for f in chunk_files]
        rows = [pq.ParquetFile(f).metadata.num_rows for f in files]
        version = self.rt.stored(rel).commit_base(s, files, rows)
        crash_point("backfill_between_phases")
        with self.gate, self.rt.catalog.transaction() as db:
            lag, lag_ms = lag_of(self.rt, s)
            self.rt.catalog.add_base(db, rel.name, s, version, sum(rows), files)
            self.rt.catalog.update_job(db, self.job_id, phase="log_store", consumed_epoch=s, allowed_lag=lag)
            self.rt.catalog.add_job_step(db, self.job_id, "log_store", 0, 0, lag, lag_ms, lag)
        return Step()

    def _share(self, df: DataFrame) -> DataFrame:
        """While the main graph has input, a backfill runs on all cores but one, left to the pipeline."""
        cores = self.rt.spark.sparkContext.defaultParallelism
        return df.coalesce(cores - 1) if cores > 1 and self.pipeline is not None and self.pipeline.busy() else df

    # --- phase 2 and 3 -------------------------------------------------------------------------
    def _log_store_step(self, job: JobRow, rel: Relation, up: Relation) -> Step:
        assert job.consumed_epoch is not None
        consumed = job.consumed_epoch
        committed = self.rt.catalog.committed_epoch()
        ready = self.rt.catalog.epochs_between(consumed, committed)
        if not ready:
            if not self.rt.catalog.epochs_between(consumed):
                return self._merge(job)
            return Step(wait=None)  # the main graph is executing the next epoch: woken at its commit
        if job.rate_limit == 0:
            return Step(wait=None)
        stored = self.rt.stored(rel)
        replay = stored.log_txn()
        if replay is not None and replay > consumed:
            # A checkpoint whose Delta commit landed but whose catalog commit did not: take it as it is.
            take = [e for e in ready if e <= replay]
            through = take[-1]
            done, version = stored.staged_logs(take), stored.log.version()
        else:
            budget = self.limiter.available(job.rate_limit)
            if budget <= 0:
                return Step(wait=self.limiter.wait_for(job.rate_limit or 0))
            sizes = dict(self.rt.catalog.log_file_rows(up.name, consumed, ready[-1]))
            take, rows = [], 0
            for e in ready[:MAX_LOG_EPOCHS]:
                if take and rows + sizes.get(e, 0) > budget:
                    break
                take.append(e)
                rows += sizes.get(e, 0)
            through = take[-1]
            done, version = [], 0
            files = [p for _, p in self.rt.catalog.log_files(up.name, consumed, through)]
            if files:
                pf = ProjectFilter.from_json(rel.definition["project_filter"])
                log = snap.read_parquet(self.rt.spark, log_spark_ddl(up.schema), files)
                changes = log_changes(pf, log, rel.schema, take)
                for e, rows_e in changes.items():
                    stored.stage_log(e, rows_e)
                done, version = stored.commit_log_batch(sorted(changes), through)
        in_rows = sum(n for _, n in self.rt.catalog.log_file_rows(up.name, consumed, through))
        logs = [(rel.name, e, p, n, version) for e, p, n in done]
        crash_point("backfill_mid_log_store")
        with self.gate, self.rt.catalog.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO log_files VALUES (?, ?, ?, ?, ?)", logs)
            lag, lag_ms = lag_of(self.rt, through)
            allowed = max(0.0, min(lag + 1, (job.allowed_lag if job.allowed_lag is not None else lag)
                                   - len(take) / 2))
            self.rt.catalog.update_job(db, self.job_id, consumed_epoch=through, allowed_lag=allowed, error=None)
            self.rt.catalog.move_pin(db, self.holder, through)
            self.rt.catalog.add_job_step(db, self.job_id, "log_store", in_rows, len(take), lag, lag_ms, allowed)
        self.limiter.spend(in_rows)
        return Step(rows=in_rows)

    def _merge(self, job: JobRow) -> Step:
        """The merge mutation: between two main epochs, with nothing pending, the MV joins the main
        graph at `M` = the epoch it has consumed up to (= the main graph's committed epoch)."""
        with self.loop_lock, self.gate:
            current = self.rt.catalog.job(self.job_id)
            assert current is not None and current.consumed_epoch is not None
            if self.stop.is_set():
                return Step()
            if self.rt.catalog.epochs_between(current.consumed_epoch):
                return Step()  # an epoch slipped in before the lock: consume it first
            m = current.consumed_epoch
            crash_point("backfill_mid_merge")
            with self.rt.catalog.transaction() as db:
                db.execute("UPDATE relations SET state = 'created' WHERE name = ? OR (kind = 'state' AND "
                           "json_extract(definition, '$.owner') = ?)", (current.relation, current.relation))
                self.rt.catalog.update_job(db, self.job_id, phase="created", merged_epoch=m, finished_at=time.time(),
                                           allowed_lag=None, error=None)
                db.execute("DELETE FROM pins WHERE holder = ?", (self.holder,))
                self.rt.catalog.add_job_step(db, self.job_id, "created", 0, 0, 0, 0, 0)
        return Step(merged=True)
