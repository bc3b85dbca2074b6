"""The barrier loop: the main graph advances one epoch at a time.

Each epoch, in this order (a crash between any two steps is recovered by replaying the plan):
1. **Plan**: the source offset ranges and the staged DML batches the epoch takes; persisted
   before anything executes.
2. **Execute** every job in dependency order on Spark. A table's job turns its intents into log
   rows; an MV's job runs its operator tree over its upstreams' log rows of the epoch.
3. **Commit** each changed relation's log as one Delta version tagged with the epoch (skipped if
   `transaction_version` shows it is already there), then mark the epoch committed in the catalog
   together with the source offsets. Only the catalog commit makes the epoch visible.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException, PythonException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from sparkwave.connectors.base import ERROR, RAW
from sparkwave.core.catalog import Relation
from sparkwave.core.chunk import Op, with_vnode
from sparkwave.core.crash import crash_point
from sparkwave.core.epoch import next_epoch
from sparkwave.core.errors import CatalogError, PipelineError, SparkwaveError
from sparkwave.core.local_frames import to_arrow
from sparkwave.meta.locks import Locks
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.settings import Settings
from sparkwave.storage import snapshot as snap
from sparkwave.storage.integrity import spark_read_error
from sparkwave.storage.lookup import lookup
from sparkwave.storage.table import StagedLog
from sparkwave.stream import fusion
from sparkwave.stream.dataflow import Dataflow
from sparkwave.stream.materialize import materialize_table, materialize_table_frame
from sparkwave.stream.operator import held_log

if TYPE_CHECKING:
    from sparkwave.meta.jobs import CreatingJobs
    from sparkwave.meta.sinks import Sinks

log = logging.getLogger("sparkwave.barrier")
MAIN_POOL = "main"  # the Spark scheduler pool of the main graph; creating jobs run in "backfill"
MAX_ATTEMPTS = 3  # flush() reports a failure once an epoch has failed this many times in a row; an
# MV that failed it this many times in a row is taken out of the main graph (`_isolate`)
# Bad records kept (with their payload) per relation per epoch; all are counted. A schema that fits
# no message must not pour a whole epoch's payloads into the catalog's commit.
MAX_BAD_RECORDS_KEPT = 1000
EXECUTE_THREADS = 4  # relations of one epoch executed at once (those whose upstreams are done)


class EpochAbandoned(PipelineError):
    """The running epoch was given up for a DROP; its plan is replayed without what was dropped."""


class RelationFailed(PipelineError):
    """An epoch failed at one relation's execution (not at a commit)."""

    def __init__(self, message: str, relation: str, kind: str, epoch: int, cause: str) -> None:
        super().__init__(message)
        self.relation, self.kind, self.epoch, self.cause = relation, kind, epoch, cause


def _deterministic(err: BaseException | None) -> bool:
    """An error that evaluating the MV's query raises on this data, and will again: Spark's errors
    in the query (a `raise_error`, a failed analysis), Arrow's and Python's value errors. Not one of
    the machine's (memory, disk, network, a stopped Spark): those stop the pipeline until fixed
    rather than take MVs out of it for good."""
    if isinstance(err, (MemoryError, OSError, Py4JError)):
        return False
    if isinstance(err, pa.ArrowException):
        return not isinstance(err, (pa.ArrowMemoryError, pa.ArrowIOError))
    if isinstance(err, CapturedException):
        text = str(err)
        return not any(m in text for m in ("OutOfMemory", "SparkContext", "shut down", "Connection", "CANCELLED",
                                           "cancelled"))
    return isinstance(err, (SparkwaveError, ArithmeticError, ValueError, TypeError, KeyError, IndexError))


@dataclass
class EpochReport:
    epoch: int
    rows_in: int
    rows_out: dict[str, int]
    latency_ms: float
    step_ms: dict[str, float] = field(default_factory=dict)  # execute time per relation
    replayed: bool = False  # a persisted plan run again after a crash or a failed attempt


@dataclass
class _Epoch:
    epoch: int
    prev: int
    plan: dict
    chunks: dict[str, pa.Table | StagedLog | None] = field(default_factory=dict)
    big_rows: int = 0  # a step with a change of more rows than this runs on the executors
    more: bool = False  # staged DML is left for the next epoch
    errors: list[tuple[str, str, int, str, str]] = field(default_factory=list)  # bad source records kept
    bad_counts: dict[str, int] = field(default_factory=dict)  # bad source records per relation, all
    held: dict[str, DataFrame | None] = field(default_factory=dict)  # log rows as local frames, shared by MVs
    relations: list[Relation] = field(default_factory=list)  # executed this epoch, upstreams first
    fused: dict[str, dict[int, pa.Table]] = field(default_factory=dict)  # chains read with a source, by MV
    unwritten: dict[str, pa.Table] = field(default_factory=dict)  # a source's rows whose file no MV needed yet
    file_locks: dict[str, threading.Lock] = field(default_factory=dict)  # one per source in `unwritten`
    lock: threading.Lock = field(default_factory=threading.Lock)


def _raised_by_python(err: BaseException) -> bool:
    """Whether a Spark job failed in a Python worker (a data source's reader), not in the JVM."""
    if isinstance(err, PythonException):
        return True
    if isinstance(err, Py4JJavaError):
        cause = err.java_exception
        while cause is not None:
            if cause.getClass().getName() == "org.apache.spark.api.python.PythonException":
                return True
            cause = cause.getCause()
    return False


def topo_order(relations: list[Relation]) -> list[Relation]:
    by_name = {r.name: r for r in relations}
    done: set[str] = set()
    out: list[Relation] = []

    def visit(r: Relation) -> None:
        if r.name in done:
            return
        done.add(r.name)
        for u in r.upstreams:
            if u in by_name:
                visit(by_name[u])
        out.append(r)

    for r in relations:
        visit(r)
    return out


class BarrierLoop:
    """Runs epochs, on demand (`run_epoch`) or every `interval_ms` in a background thread.

    `locks.epoch` is held for a whole epoch; DDL takes it to act between two epochs."""

    def __init__(self, rt: Runtime, locks: Locks, interval_ms: int,
                 on_epoch: Callable[[EpochReport], None] | None = None):
        self.rt = rt
        self.locks = locks
        self.interval_ms = interval_ms
        self.on_epoch = on_epoch
        self.error: BaseException | None = None
        self.failures = 0  # consecutive failed attempts; retried with backoff
        self._failing: dict[str, int] = {}  # MV -> consecutive attempts that failed at it
        self.error_at = 0.0
        self._wake = threading.Condition()
        self._committed = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._flush_requests = 0
        # Flush tickets: a flush takes the next ticket; an epoch is planned under the newest ticket
        # taken before it read its input, so an epoch planned under ticket k holds every DML
        # statement staged before flush k (a sequence, not a clock: see `flush`).
        self._ticket = 0
        self._planned_under: dict[int, int] = {}  # epoch -> ticket it was planned under
        self._done_ticket = 0  # the newest ticket whose epoch has committed
        self._nudged = False
        self.busy_at = 0.0  # when an epoch last carried input
        self.started_at = time.time()  # a source's first epoch covers the time since
        self.jobs: CreatingJobs | None = None  # set by the session: mutations and the lag rule ride on barriers
        self.sinks: Sinks | None = None  # set by the session: committed epochs go to the sinks' log stores
        self._threads: ThreadPoolExecutor | None = None  # an epoch's relations and commits run on these
        self._abandon = threading.Event()  # set by `abandon` until `resume`: no epoch runs meanwhile
        self._attempts = 0
        self._group = "sparkwave-epoch-0"  # the Spark job group of the running attempt's jobs

    # --- thread --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sparkwave-barrier-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        if self._thread:
            self._thread.join()
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None

    @property
    def _pool(self) -> ThreadPoolExecutor:
        """The threads an epoch's relations run on (the barrier loop's own thread waits for them),
        made again after a stop (`run_epoch` may be driven by hand)."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=EXECUTE_THREADS, thread_name_prefix="sparkwave-epoch")
        return self._threads

    def busy(self) -> bool:
        """Whether the main graph has had input lately (within two barrier intervals, 1 to 5 s)."""
        return time.time() - self.busy_at < min(5.0, max(1.0, 2 * self.interval_ms / 1000))

    def request_barrier(self) -> None:
        """Run the next epoch now rather than at the interval, without waiting for it."""
        with self._wake:
            self._flush_requests += 1
            self._wake.notify_all()

    def nudge(self) -> None:
        """A creating job moved: a barrier held back by the lag rule may be admitted now."""
        with self._wake:
            self._nudged = True
            self._wake.notify_all()

    def _woken(self, held: bool) -> bool:
        """The barrier loop's wait is over (called under `_wake`): a stop, a flush, or, while the last
        barrier was held back, a creating job's move."""
        return self._stop or self._flush_requests > 0 or (held and self._nudged)

    def abandon(self) -> None:
        """Give up the running epoch, if any: its Spark jobs are cancelled and none of its relations
        is started after, so a DROP waiting for `locks.epoch` does not wait for an epoch that may
        never finish (the relation it drops may be why). The plan stays persisted and is replayed
        at once, without what was dropped."""
        self._abandon.set()
        # its future jobs too: a relation busy on the driver now starts its next job cancelled
        self.rt.spark.sparkContext._jsc.sc().cancelJobGroupAndFutureJobs(self._group)

    def resume(self) -> None:
        """Epochs may run again: the DROP that abandoned one is done."""
        with self._wake:
            self._abandon.clear()
            self._wake.notify_all()

    def _in_epoch_group(self) -> None:
        sc = self.rt.spark.sparkContext
        sc.setLocalProperty("spark.scheduler.pool", MAIN_POOL)
        sc.setJobGroup(self._group, "sparkwave epoch", interruptOnCancel=True)

    def _run(self) -> None:
        # A plan a crash left uncommitted is replayed here at once, not in `connect()`: however big
        # it is, opening the warehouse does not wait for it. After a replay, the epoch a flush()
        # waits for is still to come.
        again = self.rt.catalog.uncommitted_plan() is not None
        held = False  # the last barrier was held back by a creating job's lag rule
        started = time.time()
        while True:
            with self._wake:
                if not again:
                    # Barriers are paced start to start, so a slow epoch does not stretch the interval.
                    wait = (1.0 if held else max(0.0, started + self.interval_ms / 1000 - time.time())
                            if self.failures == 0 else min(5.0, 0.2 * 2 ** self.failures))
                    self._wake.wait_for(functools.partial(self._woken, held), timeout=wait)
                if self._stop:
                    return
                self._flush_requests = 0
                self._nudged = False
            if not held:
                started = time.time()
            try:
                # each attempt's jobs in a group of their own (the pool's threads join it per relation):
                # `abandon` cancels that group's jobs, present and future
                self._attempts += 1
                self._group = f"sparkwave-epoch-{self._attempts}"
                self._in_epoch_group()
                report = self.run_epoch()
                held = report is None
                again = report is not None and report.replayed
                self.failures, self.error = 0, None
                self._failing.clear()
            except EpochAbandoned:
                log.warning("epoch abandoned for a DROP; its plan is replayed without the dropped relation")
                with self._wake:
                    self._wake.wait_for(lambda: self._stop or not self._abandon.is_set())
                again = True
            except Exception as e:  # the loop survives; an epoch that keeps failing is reported to waiters
                log.exception("epoch failed (attempt %d)", self.failures + 1)
                again = self._failed(e)

    def _failed(self, e: Exception) -> bool:
        """Count a failed attempt. An MV that failed `MAX_ATTEMPTS` in a row is isolated and the
        epoch retried at once without it (True); otherwise the loop backs off, and `flush()`
        reports the error once it persists."""
        if isinstance(e, RelationFailed) and e.kind == "mv" and _deterministic(e.__cause__):
            self._failing[e.relation] = self._failing.get(e.relation, 0) + 1
            if self._failing[e.relation] >= MAX_ATTEMPTS:
                try:
                    self._isolate(e)
                    self._failing.clear()
                    self.failures, self.error = 0, None
                    return True
                except Exception:  # the loop goes on: the epoch is retried and fails again
                    log.exception("could not take materialized view %r out of the pipeline", e.relation)
        self.failures += 1
        self.error, self.error_at = e, time.time()
        with self._committed:
            self._committed.notify_all()
        return False

    def _isolate(self, e: RelationFailed) -> None:
        """Take the failing MV and every relation downstream of it out of the main graph, so that
        the others go on committing (RisingWave stops the world; a user here drops or replaces
        one MV)."""
        stopped = self.take_out(e.relation, f"failed {MAX_ATTEMPTS} times at epoch {e.epoch}: {e.cause}",
                                f"which failed at epoch {e.epoch}: {e.cause}")
        log.error("materialized view %r failed %d times at epoch %d and is taken out of the pipeline (with %s): %s; "
                  "DROP it, then create it again", e.relation, MAX_ATTEMPTS, e.epoch,
                  ", ".join(sorted(stopped - {e.relation})) or "nothing downstream", e.cause)

    def take_out(self, name: str, reason: str, upstream_reason: str) -> set[str]:
        """Take MV `name` and every relation downstream of it out of the main graph; returns their
        names. Each keeps its rows as of its last committed epoch and says why it stopped (`reason`;
        downstream: its upstream `name`, `upstream_reason`); reads refuse it until it is dropped. A
        creating job over one of them is cancelled: its upstream's log ends."""
        rels = self.rt.catalog.relations(creating=True)
        stopped, grew = {name}, True
        while grew:
            more = {r.name for r in rels if r.name not in stopped and stopped & set(r.upstreams)}
            stopped |= more
            grew = bool(more)
        created = [r.name for r in rels if r.name in stopped and r.state == "created"]
        with self.locks.epoch:
            self.rt.catalog.fail_relations(
                {n: reason if n == name else f"stopped with its upstream {name!r}, {upstream_reason}" for n in created})
        for r in rels:
            if r.name in stopped and r.state == "creating" and self.jobs is not None \
                    and (job := self.rt.catalog.job_of(r.name)) is not None:
                try:
                    self.jobs.cancel(job.id, wait=False)
                except CatalogError:  # it finished or went meanwhile
                    pass
        return stopped

    def flush(self) -> int:
        """Return once an epoch that read its input after this call began has committed (so it holds
        every DML statement staged before the call); returns the committed epoch then."""
        t0 = time.time()
        with self._wake:
            self._ticket += 1
            ticket = self._ticket
            self._flush_requests += 1
            self._wake.notify_all()
        with self._committed:
            while True:
                if self.error is not None and self.failures >= MAX_ATTEMPTS and self.error_at >= t0:
                    raise PipelineError(f"the pipeline's barrier loop failed: {self.error}") from self.error
                if self._done_ticket >= ticket:
                    return self.rt.catalog.committed_epoch()
                self._committed.wait(1.0)
                if self._thread is None or not self._thread.is_alive():
                    raise PipelineError("the pipeline is closed")

    # --- one epoch -----------------------------------------------------------------------------
    def run_epoch(self) -> EpochReport | None:
        """Run the next epoch; an epoch that was planned but not committed (a crash, a failed
        attempt) is replayed first, with the same plan. None: held back by a creating job."""
        with self.locks.epoch:
            t0 = time.time()
            pending = self.rt.catalog.uncommitted_plan()
            if pending is not None:
                report = self._execute_and_commit(_Epoch(*pending), t0)
                report.replayed = True
                return report
            prev = self.rt.catalog.committed_epoch()
            e = _Epoch(next_epoch(prev), prev, {})
            with self._wake:
                ticket = self._ticket  # taken before the plan reads the staged DML
            dml_ids = self._plan(e)
            jobs = self.jobs
            if jobs is not None:
                jobs.apply_requests()
            with self.locks.gate:
                if jobs is not None and not jobs.admit():
                    return None
                self.rt.catalog.persist_plan(e.epoch, e.prev, e.plan, dml_ids)
            if e.more:  # a flush waits for an epoch that leaves none of its DML behind
                ticket = self._done_ticket
                self.request_barrier()
            self._planned_under[e.epoch] = ticket
            crash_point("after_plan")
            return self._execute_and_commit(e, t0)

    def _plan(self, e: _Epoch) -> list[int]:
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
        e.plan = {"sources": sources, "dml": taken}
        e.more = len(taken) < len(pending)
        return taken

    def _execute_and_commit(self, e: _Epoch, t0: float) -> EpochReport:
        relations = e.relations = topo_order(self.rt.catalog.relations())
        e.big_rows = Settings(self.rt.catalog).big_epoch_rows
        dml = self.rt.catalog.dml_batches(e.plan.get("dml", []))
        rows_in = sum(r for *_, r in dml) + sum(
            end - start for splits in e.plan.get("sources", {}).values() for start, end in splits.values())
        step_ms = self._execute_all(relations, e, dml)
        sources = {r.name for r in relations if r.kind == "source"}
        changed = [name for name, chunk in e.chunks.items()  # a source's rows are not kept
                   if chunk is not None and chunk.num_rows > 0 and name not in sources]
        logs = list(self._pool.map(lambda name: (name, *self._commit_log(name, e.epoch)), changed))
        crash_point("before_catalog_commit")
        names = {r.name for r in relations}  # a source dropped since the plan keeps no offsets
        offsets = {rel: {s: end for s, (_, end) in splits.items()}
                   for rel, splits in e.plan.get("sources", {}).items() if rel in names}
        latency = (time.time() - t0) * 1000
        if rows_in:
            self.busy_at = time.time()
        self.rt.catalog.commit_epoch(e.epoch, logs, offsets, rows_in, latency, e.errors, e.bad_counts)
        for name in sources:
            self.rt.warehouse.remove_file(self.rt.stored(self.rt.relation(name)).log_file_path(e.epoch))
        self._forget_consumed_dml()  # before waking flush(): what it waited for is committed and tidied
        if self.sinks is not None:  # before waking flush(): a coupled sink has the epoch when it returns
            self.sinks.on_commit(e.epoch, e.chunks)
        with self._committed:
            self._done_ticket = max(self._done_ticket, self._planned_under.pop(e.epoch, 0))
            self._committed.notify_all()
        if self.jobs is not None:
            self.jobs.notify()
        report = EpochReport(e.epoch, rows_in, {r: n for r, _, n, _ in logs}, latency, step_ms)
        if self.on_epoch:
            self.on_epoch(report)
        return report

    def _execute_all(self, relations: list[Relation], e: _Epoch,
                     dml: list[tuple[int, str, str, int]]) -> dict[str, float]:
        """Execute every relation once its upstreams of this epoch are done, the independent ones at
        once (`EXECUTE_THREADS`): an epoch's fixed costs (a Spark job, file writes) overlap rather
        than add up. Returns each relation's execute time (ms)."""
        names = {r.name for r in relations}
        waiting = {r.name: ({u for u in r.upstreams if u in names}, r) for r in relations}
        done: set[str] = set()
        running: dict[Future, str] = {}
        step_ms: dict[str, float] = {}
        failed: BaseException | None = None
        while waiting or running:
            if failed is None and self._abandon.is_set():
                failed = EpochAbandoned(f"epoch {e.epoch} was abandoned for a DROP")
            if failed is None:
                for name in [n for n, (ups, _) in waiting.items() if ups <= done]:
                    rel = waiting.pop(name)[1]
                    running[self._pool.submit(self._timed_execute, rel, e, dml)] = name
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                name = running.pop(f)
                try:
                    e.chunks[name], step_ms[name] = f.result()
                except Exception as err:  # the others running finish; none is started after
                    failed = failed or err
                    continue
                if not done:
                    crash_point("mid_execute")
                done.add(name)
        if failed is not None and self._abandon.is_set():  # read under `epoch`: no DROP has resumed yet
            raise EpochAbandoned(f"epoch {e.epoch} was abandoned for a DROP") from failed
        if failed is not None:
            raise failed
        return step_ms

    def _timed_execute(self, rel: Relation, e: _Epoch, dml: list[tuple[int, str, str, int]]
                       ) -> tuple[pa.Table | StagedLog | None, float]:
        self._in_epoch_group()
        t0 = time.time()
        try:
            chunk = self._execute(rel, e, dml)
        except Exception as err:
            what = {"mv": "materialized view", "source": "source"}.get(rel.kind, "table")
            cause = spark_read_error(err) or (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
            hint = (f"after {MAX_ATTEMPTS} failed attempts it is taken out of the pipeline, which goes on"
                    if rel.kind == "mv" else f"if it keeps failing, DROP {what.upper()} {rel.name} lets the "
                    "pipeline go on")
            raise RelationFailed(f"epoch {e.epoch} failed at {what} {rel.name!r}: {cause}; {hint}",
                                 rel.name, rel.kind, e.epoch, cause) from err
        return chunk, (time.time() - t0) * 1000

    def _commit_log(self, name: str, epoch: int) -> tuple[str, int, int]:
        out = self.rt.stored(self.rt.relation(name)).commit_log(epoch)
        crash_point("mid_commit")
        return out

    def _execute(self, rel: Relation, e: _Epoch, dml: list[tuple[int, str, str, int]]
                 ) -> pa.Table | StagedLog | None:
        """The relation's log rows for the epoch, staged as its log file (committed later): in
        memory, or only a file the executors wrote when the change is big (over `big_epoch_rows`).
        A source's file (it commits none) is written only if an MV reads it (`_source_file`)."""
        if rel.kind == "mv":
            # Recomputed even on a replay (it is deterministic: state as of the previous epoch), so
            # that its state tables' staged files exist whichever of its commits had happened.
            return self._mv_step(rel, e)
        stored = self.rt.stored(rel)
        if rel.kind != "source" and stored.log_committed(e.epoch):  # a source is read again: it keeps nothing
            self._reread_bad_records(rel, e)
            return stored.staged(e.epoch)
        if self._rows_in(rel, e, dml) > e.big_rows and rel.definition.get("on_conflict", "overwrite") == "overwrite":
            staged = self._table_step_frame(rel, e, dml)
            return staged if staged is not None and staged.num_rows else None
        chunk = self._table_step(rel, e, dml)
        if chunk is not None and chunk.num_rows > 0:
            if rel.kind == "source":  # its file only for an MV that reads it (`_source_file`)
                with e.lock:
                    e.file_locks[rel.name] = threading.Lock()
                    e.unwritten[rel.name] = chunk
            else:
                stored.stage_log(e.epoch, chunk)
        return chunk

    @staticmethod
    def _rows_in(rel: Relation, e: _Epoch, dml: list[tuple[int, str, str, int]]) -> int:
        """The rows of a table's intents this epoch: its DML batches and source ranges."""
        ranges = e.plan.get("sources", {}).get(rel.name, {})
        return sum(n for _, r, _, n in dml if r == rel.name) + sum(end - start for start, end in ranges.values())

    def _intents(self, rel: Relation, e: _Epoch, dml: list[tuple[int, str, str, int]]) -> DataFrame | None:
        """A table's intents of the epoch (source rows and DML batches) with their vnodes."""
        spark = self.rt.spark
        parts: list[DataFrame] = []
        ranges = e.plan.get("sources", {}).get(rel.name)
        if ranges:
            conn = self.rt.connector(rel)
            assert conn is not None, f"BUG: plan has source offsets for {rel.name!r}, which has no connector"
            rows = conn.read(spark, ranges)
            if "on_conflict" in rel.definition:  # a connector's rows are inserts, which the rule applies to
                rows = rows.withColumn("_op", F.when(F.col("_op") == int(Op.UPDATE_INSERT), F.lit(int(Op.INSERT)))
                                       .otherwise(F.col("_op")).cast("tinyint"))
            parts.append(rows)
        files = [path for _, r, path, _ in dml if r == rel.name]
        if files:
            parts.append(snap.read_parquet(spark, "_op tinyint, _seq bigint, " + rel.schema.spark_ddl(), files))
        if not parts:
            return None
        intents = parts[0]
        for p in parts[1:]:
            intents = intents.unionByName(p, allowMissingColumns=True)
        keep = (ERROR, RAW) if ERROR in intents.columns else ()
        return with_vnode(intents, rel.schema, keep)

    def _table_step(self, rel: Relation, e: _Epoch, dml: list[tuple[int, str, str, int]]) -> pa.Table | None:
        """A table's intents of the epoch as consistent log rows, on the driver."""
        intents = self._intents(rel, e, dml)
        if intents is None:
            return None
        chunk = self._set_aside_bad_records(rel, e, self._read_fused(rel, e, intents) if rel.kind == "source"
                                            else to_arrow(intents))
        return materialize_table(chunk, rel.schema, e.epoch,
                                 lambda keys: lookup(self.rt.catalog, rel.name, rel.schema, e.prev, keys),
                                 rel.definition.get("on_conflict", "overwrite"))

    def _read_fused(self, rel: Relation, e: _Epoch, rows: DataFrame) -> pa.Table:
        """A source's rows of the epoch, read by one job that also computes the scan-and-projection
        chains of the MVs over it (`stream/fusion.py`), handed to them in `e.fused`. If that fails
        other than in the reader (an MV's expression on a row, say), the source is read alone and
        each MV computes its chain itself, failing as itself: one MV's fault never stops the source."""
        assert rel.schema.append_only, f"BUG: source {rel.name} is not append-only"
        try:
            roots = {mv.name: Dataflow(self.rt, mv).root for mv in e.relations
                     if mv.kind == "mv" and rel.name in mv.upstreams}
            chains = [c for name, root in roots.items() for c in fusion.branches(name, root, rel.name)]
            fused = fusion.fused_read(rows, chains, f"`{ERROR}` IS NULL" if ERROR in rows.columns else "true")
            if fused is not None:
                wide = to_arrow(fused[0])
                good = pc.is_null(wide[ERROR]) if ERROR in wide.column_names else None
                chunk, by_mv = fusion.split(wide, rows.columns, chains, fused[1], good)
                with e.lock:  # sources run at once; an MV may read two
                    for name, ops in by_mv.items():
                        e.fused.setdefault(name, {}).update(ops)
                return chunk
        except Exception as err:
            if _raised_by_python(err):  # the reader's own: reading alone fails the same way
                raise
            log.warning("source %s: the read with its MVs' projections failed (%s); reading it alone",
                        rel.name, (str(err).strip().splitlines() or [type(err).__name__])[0][:300])
        return to_arrow(rows)

    def _table_step_frame(self, rel: Relation, e: _Epoch, dml: list[tuple[int, str, str, int]]) -> StagedLog | None:
        """`_table_step` for a big epoch: the executors join the intents with the table as of the
        previous epoch and write the log file; the driver sees only bad records."""
        intents = self._intents(rel, e, dml)
        if intents is None:
            return None
        if ERROR in intents.columns:  # read once: counted, sampled and written
            intents = intents.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if ERROR in intents.columns:
                bad = intents.where(F.col(ERROR).isNotNull())
                found = bad.count()
                if found:
                    first = bad.select("_seq", ERROR, RAW).orderBy("_seq").limit(MAX_BAD_RECORDS_KEPT)
                    self._keep_bad_records(rel, e, first.toArrow(), found)
                good = intents.where(F.col(ERROR).isNull()).drop(ERROR, RAW)
            else:
                good = intents
            current = None if rel.schema.append_only else self.rt.snapshot(rel, e.prev)
            return self.rt.stored(rel).stage_log_frame(e.epoch, materialize_table_frame(good, current, rel.schema))
        finally:
            intents.unpersist()

    def _reread_bad_records(self, rel: Relation, e: _Epoch) -> None:
        """A replayed epoch whose log Delta already holds: its bad records, not yet in the catalog,
        are read again (a crash between the two commits is rare; the range is read once more)."""
        conn, ranges = self.rt.connector(rel), e.plan.get("sources", {}).get(rel.name)
        if conn is not None and ranges and conn.has_bad_records:
            bad = conn.read(self.rt.spark, ranges).where(f"{ERROR} IS NOT NULL").select("_seq", ERROR, RAW)
            self._set_aside_bad_records(rel, e, bad.toArrow())

    def _set_aside_bad_records(self, rel: Relation, e: _Epoch, chunk: pa.Table) -> pa.Table:
        """The chunk without its bad records (`_error` set by the connector), which are kept in
        `e.errors` and committed to the catalog with the epoch."""
        if ERROR not in chunk.column_names:
            return chunk
        bad = pc.is_valid(chunk[ERROR])
        if pc.any(bad).as_py():
            found = chunk.filter(bad)
            self._keep_bad_records(rel, e, found, found.num_rows)
            chunk = chunk.filter(pc.invert(bad))
        return chunk.drop_columns([ERROR, RAW])

    def _keep_bad_records(self, rel: Relation, e: _Epoch, found: pa.Table, count: int) -> None:
        """Keep the first of `found` (`| _seq | _error | _raw |`) up to `MAX_BAD_RECORDS_KEPT` per
        relation and epoch; count all `count`."""
        room = MAX_BAD_RECORDS_KEPT - sum(1 for r in e.errors if r[0] == rel.name)
        kept = found.slice(0, max(0, room))
        conn = self.rt.connector(rel)
        assert conn is not None, f"BUG: bad records in {rel.name!r}, which has no connector"
        splits, offsets = conn.positions(kept["_seq"])
        e.errors.extend(zip([rel.name] * kept.num_rows, splits.to_pylist(), offsets.to_pylist(),
                            kept[ERROR].to_pylist(), kept[RAW].to_pylist(), strict=True))
        e.bad_counts[rel.name] = e.bad_counts.get(rel.name, 0) + count

    def _mv_step(self, rel: Relation, e: _Epoch) -> pa.Table | StagedLog | None:
        changed = {u: c.num_rows for u in rel.upstreams if (c := e.chunks.get(u)) is not None and c.num_rows > 0}
        if not changed:
            return None
        inputs = {u: [self.rt.stored(self.rt.relation(u)).log_file_path(e.epoch)] for u in changed}
        flow = Dataflow(self.rt, rel)
        big = sum(changed.values()) > e.big_rows and flow.on_spark
        fused = {u for u in changed if fusion.covers(flow.root, u, e.fused.get(rel.name, {}))}
        chunk: pa.Table | StagedLog | None
        if big:
            for u in changed:
                self._source_file(e, u)
            chunk, staged = flow.step_frame(e.epoch, e.prev, inputs)
            e.chunks.update(staged)
        else:
            held = {u: f for u in changed if u not in fused and (f := self._held(e, u)) is not None}
            for u in changed:
                if u not in fused and u not in held:
                    self._source_file(e, u)
            chunk, tables = flow.step(e.epoch, e.prev, inputs, held, e.fused.get(rel.name))
            if chunk is not None and chunk.num_rows > 0:
                self.rt.stored(rel).stage_log(e.epoch, chunk)
            e.chunks.update(tables)
        e.chunks[rel.name] = chunk
        return chunk

    def _source_file(self, e: _Epoch, name: str) -> None:
        """Write a source's rows of the epoch as its (transient) log file, once, for an MV that reads
        the file: one whose scans of it its read did not all compute (`_read_fused`) and that the
        driver does not hand them as a local frame, or a big epoch's. A no-op for any other relation."""
        lock = e.file_locks.get(name)
        if lock is None:
            return
        with lock:
            if (rows := e.unwritten.get(name)) is not None:
                self.rt.stored(self.rt.relation(name)).stage_log(e.epoch, rows, transient=True)
                del e.unwritten[name]

    def _held(self, e: _Epoch, name: str) -> DataFrame | None:
        """The relation's log rows of the epoch as one local frame for every MV reading them, if the
        driver holds them and they are few (`held_log`)."""
        with e.lock:
            if name in e.held:
                return e.held[name]
        rows = e.chunks.get(name)  # built outside the lock: two MVs may both build it; one is kept
        frame = held_log(self.rt.spark, self.rt.relation(name).schema, rows) if isinstance(rows, pa.Table) else None
        with e.lock:
            return e.held.setdefault(name, frame)

    def _forget_consumed_dml(self) -> None:
        consumed = self.rt.catalog.consumed_dml()
        for _, path in consumed:
            self.rt.warehouse.remove_file(path)
        if consumed:
            self.rt.catalog.forget_dml([i for i, _ in consumed])
