"""A creating job under snapshot backfill: isolated from the main graph, with its own checkpoints.

After RisingWave's `snapshot_backfill_executor` (snapshot backfill in ARCHITECTURE.md). Each `step()` is one of the
job's checkpoints and commits the MV's (and its state tables') rows together with the job's
progress in one catalog transaction; the main graph never waits for it, except by the lag rule
(`lag_rule.py`).

1. **snapshot**: every upstream is pinned at one common committed epoch `S`. The MV's operator
   tree runs as Spark DataFrames over the snapshots, in chunks of consecutive vnodes, up to
   `backfill_chunk_rows` rows per chunk, each evaluating every subtree once for all the tables it
   writes (the MV and each state table). A stateless tree (scans and projections) reads its
   upstream's snapshot a vnode range at a time (each base file is sorted by vnode with small row
   groups, so a chunk's scan reads only its row groups). A stateful tree reads its driving
   upstream so (`stream/chunking.py`), the others whole in the first chunk, which hands their join
   sides on to the later chunks through its state files; an aggregate above the driving scan
   writes partials per chunk, added up by a last merge chunk (`VNODES`, `VNODES + 1`) that also
   evaluates what is above the aggregate. A stateful snapshot that fits in one chunk, or a tree
   that no scan can drive (a FULL join on every path), is one chunk. A chunk is recorded as in
   flight before it is read; its rows are written as files, then the chunk is marked done with
   them. A crash re-reads only the chunk that was in flight. The last checkpoint commits every
   table's chunk files as its base as of `S`.
2. **log store**: the upstreams' log epochs after `S`: a stateless tree's in batches of up to
   `MAX_LOG_EPOCHS` epochs (one Spark job each), a stateful tree's one epoch per checkpoint
   through the same per-epoch executors as the main graph, against the job's own state tables.
   Each epoch gets its own log file, so the MV can be read as of any of them.
3. **merge**: once no main-graph epoch is pending, between two main epochs, the MV joins the main
   graph at the exact epoch `M` it has consumed up to; from `M + 1` the main graph maintains it.

The strategies (`Strategy`) differ in how the job is paced, not in its phases:
- **snapshot**: checkpoints back to back at full speed (or its rate limit); the lag rule holds the
  main graph back just enough to guarantee the merge. Once an unthrottled job's unconsumed log is a
  few small epochs (`policy.catches_up_in_band`: a small snapshot's, right after it), it consumes
  them and merges in band (`catch_up_and_merge`), so a small CREATE joins in about a barrier interval.
- **rearranged** (RisingWave's rearranged chain): one budgeted step per main-graph epoch, at most
  `backfill_chunk_rows` rows (a snapshot chunk, or log rows), taken after each epoch commits; it
  never holds the main graph back while it reads. Once the log left to consume fits in one
  epoch's budget, it consumes it and merges in band, between two epochs (`catch_up_and_merge`),
  so it merges only once its budget outpaces the upstream.
- **blocking**: no creating job: the MV is built under the epoch lock at CREATE.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.util import inheritable_thread_target

from sparkwave.core import policy, spark_features
from sparkwave.core.catalog import Chunk, JobRow, Phase, Relation
from sparkwave.core.chunk import VNODES
from sparkwave.core.crash import crash_point
from sparkwave.core.errors import PipelineError
from sparkwave.meta.lag_rule import LagRule
from sparkwave.meta.locks import Locks
from sparkwave.meta.runtime import Runtime
from sparkwave.storage.compaction import write_base_files
from sparkwave.storage.integrity import footer_rows, read_table
from sparkwave.storage.links import Linked, link_base_files
from sparkwave.storage.state import state_name, state_relations
from sparkwave.stream.chunking import PARTIAL, ChunkPlan, chunk_plan
from sparkwave.stream.dataflow import Built, Dataflow, resolved
from sparkwave.stream.operator import HeldRows, held_log

MAX_LOG_EPOCHS = 500  # upstream epochs per log-store checkpoint of a stateless tree
MAX_WRITERS = 4  # a chunk's tables written at once


class Strategy(StrEnum):
    """How a new MV is filled (see the module docstring). Any strategy backfills from a source: the
    source's history and its epochs after `S` are read from Kafka (`Runtime.snapshot`,
    `Runtime.source_log`), not from storage. A sink's backfill is a job of its own
    (`meta/sinks.py`), not a strategy."""

    BLOCKING = "blocking"
    SNAPSHOT = "snapshot"
    REARRANGED = "rearranged"


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


class CreatingJob:
    """The checkpoints of one creating job (see the module docstring)."""

    def __init__(self, rt: Runtime, job_id: int, locks: Locks, chunk_rows: int, stopped: Callable[[], bool],
                 pipeline: Pipeline | None = None) -> None:
        self.rt = rt
        self.job_id = job_id
        self.locks = locks
        self.chunk_rows = chunk_rows
        self.stopped = stopped  # true once the job is cancelled or the session closes: it must not merge then
        self.chunk_hook: Callable[[int, int], None] | None = None  # tests: stands in for a slow chunk read
        self.pipeline = pipeline
        self.limiter = RateLimiter()

    @property
    def holder(self) -> str:
        return f"job:{self.job_id}"

    def step(self, budget: float = math.inf) -> Step:
        """One checkpoint, reading at most `budget` rows (beyond the rate limit's)."""
        job = self.rt.catalog.job(self.job_id)
        assert job is not None, f"BUG: creating job {self.job_id} has no row"
        rel = self.rt.relation(job.relation)
        flow = Dataflow(self.rt, rel)
        if job.phase is Phase.SNAPSHOT:
            return self._snapshot_step(job, rel, flow, budget)
        if job.phase is Phase.LOG_STORE:
            return self._log_store_step(job, rel, flow, budget)
        return Step(merged=True)

    def tables(self, rel: Relation) -> list[Relation]:
        return [rel, *state_relations(self.rt, rel)]

    # --- phase 1: the snapshot at S ------------------------------------------------------------
    def count_upstreams(self) -> dict[str, list[int]]:
        """Each upstream snapshot's rows per vnode (the progress total, and the chunks' sizes),
        counted once: when the job starts, so that SHOW JOBS knows the total from the CREATE on."""
        job = self.rt.catalog.job(self.job_id)
        assert job is not None and job.snapshot_epoch is not None, f"BUG: job {self.job_id} has no snapshot"
        if job.vnode_rows is not None:
            return job.vnode_rows
        rel = self.rt.relation(job.relation)
        counts = {u: self.rt.vnode_rows(self.rt.relation(u), job.snapshot_epoch) for u in rel.upstreams}
        self.rt.catalog.set_job_counts(self.job_id, counts)
        return counts

    def _snapshot_step(self, job: JobRow, rel: Relation, flow: Dataflow, limit: float) -> Step:
        assert job.snapshot_epoch is not None
        s = job.snapshot_epoch
        per_upstream = job.vnode_rows or self.count_upstreams()
        chunks = {c.lo: c for c in self.rt.catalog.job_chunks(self.job_id)}
        plan = None if flow.root.stateless else chunk_plan(flow.root, {u: sum(c) for u, c in per_upstream.items()})
        if job.next_vnode >= VNODES and (job.next_vnode > VNODES or not self._merges(plan, chunks)):
            return self._finish_snapshot(job, rel, flow, chunks)
        if job.rate_limit == 0:
            return Step(wait=None)
        budget = min(limit, self.limiter.available(job.rate_limit))
        if budget <= 0:
            return Step(wait=self.limiter.wait_for(job.rate_limit or 0))
        big = self._epoch_rows()  # what the driver may hold: one big epoch's rows (`big_epoch_rows`)
        if job.next_vnode >= VNODES:
            merging = plan
            assert merging is not None
            return self._chunk(job, rel, flow, VNODES, VNODES + 1, 0,
                               lambda: flow.build_merge(s, merging, self._partials(chunks), big_epoch_rows=big))
        driving = plan.driving.relation if plan else None
        counts = [sum(c[v] for u, c in per_upstream.items() if driving in (None, u)) for v in range(VNODES)]
        lo = hi = job.next_vnode
        rows = 0
        if flow.root.stateless or plan is not None:
            cap = min(self.chunk_rows, budget)
            while hi < VNODES and (hi == lo or rows + counts[hi] <= cap):
                rows += counts[hi]
                hi += 1
        if plan is not None and lo == 0 and hi == VNODES:
            plan = None  # fits in one chunk: the single pass, with no merge
        if plan is None and not flow.root.stateless:
            hi, rows = VNODES, sum(sum(c[lo:]) for c in per_upstream.values())
        if plan is None and flow.builds_locally and self._on_driver(flow, lo, hi, rows, big):
            return self._chunk(job, rel, flow, lo, hi, rows, lambda: flow.build_local(s),  # no bigger than an epoch
                               skip=flow.root.stateless and not rows)
        if plan is None:
            vnodes = (lo, hi) if flow.root.stateless else None
            return self._chunk(job, rel, flow, lo, hi, rows, lambda: flow.build(s, vnodes, big_epoch_rows=big),
                               skip=flow.root.stateless and not rows and flow.builds_locally)  # VALUES: rows
        chunked = plan
        if lo == 0:  # the first chunk reads the other upstreams whole, and hands their sides on
            rows += sum(sum(c) for u, c in per_upstream.items() if u != driving)
        sides = {} if lo == 0 else {x: chunks[0].files[state_name(rel.name, x)] for x in chunked.handed}
        return self._chunk(job, rel, flow, lo, hi, rows, lambda: flow.build_chunk(s, chunked, (lo, hi), sides))

    @staticmethod
    def _on_driver(flow: Dataflow, lo: int, hi: int, rows: int, big: int) -> bool:
        """Whether the chunk `[lo, hi)` of `rows` rows is built on the driver (`build_local`): a
        stateful tree's whole snapshot no bigger than an epoch, a stateless tree's whole small one."""
        if flow.root.stateless:
            return (lo, hi) == (0, VNODES) and policy.builds_stateless_on_driver(rows, big)
        return policy.builds_on_driver(rows, big)

    def _epoch_rows(self) -> int:
        """`big_epoch_rows`: a stateful snapshot no bigger is built on the driver, as one epoch would be."""
        from sparkwave.meta.settings import Settings  # which imports `Strategy` from here

        return Settings(self.rt.catalog).big_epoch_rows

    @staticmethod
    def _merges(plan: ChunkPlan | None, chunks: dict[int, Chunk]) -> bool:
        """Whether the snapshot ends with a merge chunk: the tree was chunked (its first chunk did not
        cover every vnode) under a plan whose chunks wrote an aggregate's partials."""
        first = chunks.get(0)
        return plan is not None and plan.merges and first is not None and first.hi < VNODES

    def _chunk(self, job: JobRow, rel: Relation, flow: Dataflow, lo: int, hi: int, rows: int,
               build: Callable[[], Mapping[str, Built | pa.Table]], *, skip: bool = False) -> Step:
        """One chunk: recorded in flight, its tables built and written as files (concurrently), then
        recorded done with them (a crash in between re-reads only this chunk)."""
        s = job.snapshot_epoch
        assert s is not None
        self.rt.catalog.start_chunk(self.job_id, lo, hi, rows)  # in flight: a crash from here re-reads it
        files: dict[str, list[str]] = {}
        if not skip:  # a scalar aggregate over nothing still has its row
            @inheritable_thread_target(self.rt.spark)  # the job's pool and job group: a cancel stops the writes
            def write(i: int, name: str, table: Built | pa.Table) -> list[str]:
                t = self.rt.relation(name.removesuffix(PARTIAL))
                staging, prefix = f"_backfill_{lo}_t{i}", f"s{s}-v{lo:03d}-t{i}-"
                df = resolved(table)
                if isinstance(df, Linked):
                    return link_base_files(self.rt, t, df, staging, prefix)[0]
                whole = name.endswith(PARTIAL)  # read whole by the merge: neither sorted nor indexed
                rows = df if isinstance(df, pa.Table) else self._share(df)
                return write_base_files(self.rt, t, rows, staging, prefix,
                                        sort=not (flow.root.stateless or whole), cluster=False, lookups=not whole)[0]

            try:  # (a build computes the frames it sizes first: what it persisted is freed however it ends)
                built = build()
                crash_point("backfill_mid_chunk")
                if self.chunk_hook:
                    self.chunk_hook(lo, hi)
                # the tables are written concurrently, so that their Spark jobs' fixed costs overlap
                with ThreadPoolExecutor(max_workers=min(MAX_WRITERS, len(built))) as pool:
                    pending = {name: pool.submit(write, i, name, df) for i, (name, df) in enumerate(built.items())}
                files = {name: f.result() for name, f in pending.items()}
            finally:
                flow.release()
            crash_point("backfill_after_chunk_rows" if lo < VNODES else "backfill_after_merge_chunk")
        self.rt.catalog.finish_chunk(self.job_id, lo, hi, rows, files, LagRule.lag(self.rt.catalog, s))
        self.limiter.spend(rows)
        return Step(rows=rows)

    @staticmethod
    def _partials(chunks: dict[int, Chunk]) -> dict[str, list[str]]:
        """The aggregate's partial files of every vnode chunk, by table."""
        out: dict[str, list[str]] = {}
        for lo, c in chunks.items():
            for name, fs in c.files.items():
                if lo < VNODES and name.endswith(PARTIAL):
                    out.setdefault(name.removesuffix(PARTIAL), []).extend(fs)
        return out

    def _finish_snapshot(self, job: JobRow, rel: Relation, flow: Dataflow, chunks: dict[int, Chunk]) -> Step:
        """Between phases: the partials the merge added up go; each table's chunk files become its
        base as of `S`; the log store starts."""
        assert job.snapshot_epoch is not None
        s = job.snapshot_epoch
        for files in self._partials(chunks).values():  # added up by the merge chunk: no longer needed
            for f in files:
                self.rt.warehouse.remove_file(f)
        bases = []
        for t in self.tables(rel):
            if not flow.root.stateless:  # (a stateless chunk of no rows writes nothing)
                assert any(t.name in c.files for c in chunks.values()), f"BUG: no chunk wrote {t.name}"
            files = [f for c in chunks.values() for f in c.files.get(t.name, [])]
            rows = [pq.ParquetFile(f).metadata.num_rows for f in files]
            version, files, rows = self.rt.stored(t).commit_base(s, files, rows)
            bases.append((t.name, version, sum(rows), files))
        crash_point("backfill_between_phases")
        with self.locks.gate:
            lag = LagRule.lag(self.rt.catalog, s)
            self.rt.catalog.start_log_store(self.job_id, s, bases, lag, LagRule.start(lag))
        return Step()

    def _share(self, df: DataFrame) -> DataFrame:
        """While the main graph has input, a backfill runs on all cores but one, left to the pipeline."""
        cores = spark_features.default_parallelism(self.rt.spark)
        return df.coalesce(cores - 1) if cores > 1 and self.pipeline is not None and self.pipeline.busy() else df

    # --- phase 2 and 3: the log store, then the merge ------------------------------------------
    def _log_store_step(self, job: JobRow, rel: Relation, flow: Dataflow, limit: float) -> Step:
        assert job.consumed_epoch is not None
        consumed = job.consumed_epoch
        ready = self.rt.catalog.epochs_between(consumed, self.rt.catalog.committed_epoch())
        if not ready:
            if not self.rt.catalog.epochs_between(consumed):
                return self._merge()
            return Step(wait=None)  # the main graph is executing the next epoch: woken at its commit
        if job.rate_limit == 0:
            return Step(wait=None)
        budget = min(limit, self.limiter.available(job.rate_limit))
        if budget <= 0:
            return Step(wait=self.limiter.wait_for(job.rate_limit or 0))
        if flow.root.stateless:
            take, logs = self._log_slice(rel, flow, consumed, ready, budget)
        else:
            take, logs = self._log_epoch(rel, flow, consumed, ready[0])
        through = take[-1]
        in_rows = sum(n for u in rel.upstreams for _, n in self.rt.log_file_rows(u, consumed, through))
        crash_point("backfill_mid_log_store")
        with self.locks.gate:
            lag = LagRule.lag(self.rt.catalog, through)
            allowed = LagRule.after_checkpoint(job.allowed_lag, lag, len(take))
            self.rt.catalog.log_store_checkpoint(self.job_id, self.holder, logs, through, len(take), in_rows,
                                                 lag, allowed)
        self.limiter.spend(in_rows)
        return Step(rows=in_rows)

    def _inputs(self, rel: Relation, after: int, upto: int) -> dict[str, list[str]]:
        """The upstreams' log files of `(after, upto]`; a source's are read again from its connector
        into the job's folder (the previous checkpoint's files there are done with)."""
        inputs = {}
        for u in rel.upstreams:
            up = self.rt.relation(u)
            if up.kind == "source":
                folder = self._source_folder(rel, u)
                self.rt.warehouse.remove_tree(folder)
                inputs[u] = [p for _, p in self.rt.source_log(up, after, upto, folder)]
            else:
                inputs[u] = [p for _, p in self.rt.catalog.log_files(u, after, upto)]
        return {u: p for u, p in inputs.items() if p}

    def _source_folder(self, rel: Relation, source: str) -> Path:
        return self.rt.warehouse.relation_dir(rel.name) / "_sources" / source

    def _log_slice(self, rel: Relation, flow: Dataflow, consumed: int, ready: list[int],
                   budget: float) -> tuple[list[int], list[tuple[str, int, str, int, int]]]:
        """A stateless tree's log rows for a batch of epochs, committed as one Delta version."""
        stored = self.rt.stored(rel)
        replay = stored.log_txn()
        if replay is not None and replay > consumed:
            # A checkpoint whose Delta commit landed but whose catalog commit did not: take it as it is.
            take = [e for e in ready if e <= replay]
            done, version = stored.commit_log_batch(take, take[-1])
        else:
            sizes: dict[int, int] = {}  # a union reads several upstreams: their rows per epoch added up
            for u in rel.upstreams:
                for e, n in self.rt.log_file_rows(u, consumed, ready[-1]):
                    sizes[e] = sizes.get(e, 0) + n
            up = rel.upstreams[0]
            take, rows = [], 0
            for e in ready[:MAX_LOG_EPOCHS]:
                if take and rows + sizes.get(e, 0) > budget:
                    break
                take.append(e)
                rows += sizes.get(e, 0)
            if len(rel.upstreams) == 1 and self.rt.relation(up).kind != "source" and policy.runs_locally(rows):
                changes = self._slice_on_driver(up, flow, consumed, take[-1])
            else:
                inputs = self._inputs(rel, consumed, take[-1])
                changes = flow.log_slice(inputs, take) if inputs else {}
            for e, rows_e in changes.items():
                stored.stage_log(e, rows_e)
            done, version = stored.commit_log_batch(sorted(changes), take[-1])
        return take, [(rel.name, e, p, n, version) for e, p, n in done]

    def _log_epoch(self, rel: Relation, flow: Dataflow, consumed: int,
                   e: int) -> tuple[list[int], list[tuple[str, int, str, int, int]]]:
        """A stateful tree's log rows for one epoch, with its state tables' (replayed exactly: the
        step is deterministic and a table's commit is skipped if Delta already holds it)."""
        inputs = self._inputs(rel, consumed, e)
        logs = []
        if inputs or flow.ticks:  # a tree reading NOW() steps every epoch
            chunk, staged = flow.step(e, consumed, inputs, changes=self._held(inputs))
            if chunk is not None and chunk.num_rows:
                self.rt.stored(rel).stage_log(e, chunk)
                staged = {rel.name: chunk, **staged}
            for name in staged:
                path, rows, version = self.rt.stored(self.rt.relation(name)).commit_log(e)
                logs.append((name, e, path, rows, version))
        return [e], logs

    def _slice_on_driver(self, up: str, flow: Dataflow, consumed: int, through: int) -> dict[int, pa.Table]:
        """`Dataflow.log_slice` for a slice of few rows: each epoch's log rows read on the driver and
        run through the tree's per-epoch step (its chains in Arrow), with no Spark job."""
        by_epoch: dict[int, list[str]] = {}
        for e, path in self.rt.catalog.log_files(up, consumed, through):
            by_epoch.setdefault(e, []).append(path)
        out = {}
        for e, paths in by_epoch.items():
            chunk, _ = flow.step(e, consumed, {up: paths}, changes=self._held({up: paths}))
            if chunk is not None and chunk.num_rows:
                out[e] = chunk
        return out

    def _held(self, inputs: dict[str, list[str]]) -> dict[str, HeldRows]:
        """The upstreams' log rows of one epoch that are few (`held_log`), read on the driver, as
        the main graph's table step hands them to the MVs: the chains over them run in Arrow."""
        out = {}
        for u, paths in inputs.items():
            if policy.runs_locally(sum(footer_rows(p) for p in paths)):
                rows = pa.concat_tables([read_table(p) for p in paths])
                if (held := held_log(self.rt.spark, self.rt.relation(u).schema, rows)) is not None:
                    out[u] = held
        return out

    def pending_log_rows(self) -> int | None:
        """Upstream log rows committed and not yet consumed, in the log-store phase (else None)."""
        job = self.rt.catalog.job(self.job_id)
        if job is None or job.phase is not Phase.LOG_STORE or job.consumed_epoch is None:
            return None
        rel = self.rt.relation(job.relation)
        committed = self.rt.catalog.committed_epoch()
        return sum(n for u in rel.upstreams for _, n in self.rt.log_file_rows(u, job.consumed_epoch, committed))

    def catches_up_in_band(self) -> bool:
        """Whether an unthrottled job in its log-store phase has little enough left of the log
        (`policy.catches_up_in_band`) to consume it and merge in band (`catch_up_and_merge`): out of
        band, the main graph plans the next epoch as soon as the job has caught up, and the merge
        waits for that epoch to commit and be consumed, an epoch at a time. A throttled job never
        holds the main graph, as under the lag rule."""
        job = self.rt.catalog.job(self.job_id)
        if job is None or job.phase is not Phase.LOG_STORE or job.consumed_epoch is None or job.rate_limit is not None:
            return False
        committed = self.rt.catalog.committed_epoch()
        epochs = len(self.rt.catalog.epochs_between(job.consumed_epoch, committed))
        if not policy.catches_up_in_band(epochs, 0, self._epoch_rows()):
            return False
        rows = sum(n for u in self.rt.relation(job.relation).upstreams
                   for _, n in self.rt.log_file_rows(u, job.consumed_epoch, committed))
        return policy.catches_up_in_band(epochs, rows, self._epoch_rows())

    def catch_up_and_merge(self) -> Step:
        """The rearranged strategy's switch, in band: holding the epoch lock (between two main epochs,
        so no epoch is in flight), consume what is left of the upstreams' log, then merge. It holds
        the main graph for at most this last step, which the caller keeps within one epoch's budget."""
        rows = 0
        with self.locks.epoch:
            while True:
                step = self.step()
                rows += step.rows
                if step.merged or step.wait != 0 or self.stopped():
                    return Step(rows=rows, merged=step.merged, wait=step.wait)

    def _merge(self) -> Step:
        """The merge mutation: between two main epochs, with nothing pending, the MV joins the main
        graph at `M` = the epoch it has consumed up to (= the main graph's committed epoch)."""
        with self.locks.epoch, self.locks.gate:
            current = self.rt.catalog.job(self.job_id)
            assert current is not None and current.consumed_epoch is not None
            if self.stopped():
                return Step()
            if self.rt.catalog.epochs_between(current.consumed_epoch):
                return Step()  # an epoch slipped in before the lock: consume it first
            stopped = [u for u in self.rt.relation(current.relation).upstreams if self.rt.relation(u).state == "failed"]
            if stopped:  # the main graph stopped it after the CREATE registered (`Ddl._register_mv`)
                raise PipelineError(f"cannot merge {current.relation!r}: its upstream {stopped[0]!r} is stopped, out "
                                    "of the pipeline; DROP it and create it again")
            crash_point("backfill_mid_merge")
            self.rt.catalog.merge_job(self.job_id, self.holder, current.relation, current.consumed_epoch)
        self.rt.warehouse.remove_tree(self.rt.warehouse.relation_dir(current.relation) / "_sources")
        return Step(merged=True)
