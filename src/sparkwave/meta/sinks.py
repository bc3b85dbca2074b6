"""Sinks: one worker thread each, delivering its MV's change stream to the target at its own pace.

A sink is a job (strategy `sink`) with two phases:
1. **snapshot** (sink backfill, unless `snapshot = 'false'`): the MV as of the epoch `S` of the
   CREATE, read a vnode range at a time (Spark, the `backfill` pool), each chunk one delivery
   moving the sink's position to `(S, hi)`; a crash resumes at the position the target holds.
2. **log**: the MV's change of the epochs after its position, from the log store
   (`log_store.py`: memory while it keeps up, the MV's log files otherwise), netted per key over
   the epochs of one delivery, each delivery moving the position to `(through, VNODES)`.

A delivery goes to the target first, with the position where the target can keep it (PostgreSQL,
Delta: exactly once), and then to the catalog; on restart the further of the two positions wins.
The main graph never waits for a sink, unless it was created with `sink_decouple = 'false'`
(then `on_commit` waits until the sink has committed the epoch). A failing sink retries with
backoff, its error in `SHOW SINKS` and `SHOW JOBS`; `SINK_RATE_LIMIT` (rows/s, 0 pauses) paces it
through the job's rate limit, set from this or another process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.connectors import make_sink
from sparkwave.connectors.sink import Position, SinkSpec, SinkTarget
from sparkwave.core.catalog import JobRow, Phase, Relation, SinkRow
from sparkwave.core.chunk import VNODES, Op, consolidate
from sparkwave.core.crash import crash_point
from sparkwave.core.errors import CatalogError, PipelineError
from sparkwave.core.schema import Column, Schema
from sparkwave.meta.creating_job import RateLimiter
from sparkwave.meta.jobs import BACKFILL_POOL
from sparkwave.meta.lag_rule import LagRule
from sparkwave.meta.log_store import BUFFER_ROWS, LogStore
from sparkwave.meta.pipeline import Commit
from sparkwave.meta.progress import NOTE
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.service import Backoff, ServiceStatus, SparkGroupService, error_text
from sparkwave.storage.snapshot import vnode_rows

log = logging.getLogger("sparkwave.sinks")
BATCH_ROWS = 500_000  # at most this many change rows per delivery (more when one epoch alone has more)
SNAPSHOT_CHUNK_ROWS = 1_000_000  # MV rows per sink-backfill delivery
# after a failed delivery: 1 s, doubling, at most 30 s; commits do not end it (a target that is down
# is not retried at every barrier), an ALTER does
BACKOFF = Backoff(0.5, 30.0)
IDLE_S = 1.0  # a worker with nothing new looks again at least this often, unless woken sooner


def sink_spec(row: SinkRow) -> SinkSpec:
    s = row.spec
    return SinkSpec(row.name, row.sink_id, tuple(Column.from_json(c) for c in s["columns"]), tuple(s["key"]),
                    s["mode"], dict(s["options"]))


def net_change(rows: pa.Table, schema: Schema, columns: list[str]) -> pa.Table:
    """Log rows of one or more epochs as one change `| _op | columns |`, net per key (a log file
    is already net per key: one epoch needs no work)."""
    bounds = pc.min_max(rows["_epoch"]) if rows.num_rows else None
    if bounds is not None and not schema.append_only and bounds["min"] != bounds["max"]:
        ordered = rows.sort_by([("_epoch", "ascending"), ("_seq", "ascending")])
        ordered = ordered.set_column(ordered.schema.get_field_index("_seq"), "_seq",
                                     pa.array(range(ordered.num_rows), pa.int64()))
        rows = consolidate(ordered, list(schema.key), schema.values)
    return rows.select(["_op", *columns])


class SinkWorker(SparkGroupService):
    """A sink's worker: each round one delivery (a snapshot chunk, or the next epochs' change)."""

    def __init__(self, manager: Sinks, row: SinkRow) -> None:
        super().__init__(f"sparkwave-sink-{manager.rt.group_token}-{row.name}", manager.rt.spark, BACKFILL_POOL,
                         f"sparkwave sink {row.name}", backoff=BACKOFF)
        self.manager = manager
        self.rt = manager.rt
        self.row = row
        self.spec = sink_spec(row)
        self.mv: Relation = self.rt.relation(row.mv)
        self.store = LogStore(self.rt.catalog, row.mv, self.mv.schema, manager.buffer_rows)
        self.limiter = RateLimiter()
        self.note: str | None = None  # the first value a target changed or left out, shown as the sink's error
        self.target: SinkTarget | None = None
        self.delivered = threading.Condition()  # notified as the position moves (a coupled sink's epoch waits)

    def _interrupt(self) -> None:
        super()._interrupt()
        if (target := self.target) is not None:
            target.cancel()
        with self.delivered:
            self.delivered.notify_all()

    def _round(self) -> float | None:
        wait = self.step()
        return IDLE_S if wait is None else wait

    def _on_failure(self, e: Exception) -> None:  # retried from the committed position, the pipeline unaffected
        log.warning("sink %s: delivery failed (attempt %d): %s", self.row.name, self.failures, e)
        self._close_target()  # first: the next attempt reconnects even if recording the error fails
        self.rt.catalog.set_job_error(self.row.job, error_text(e))

    def _end(self) -> None:
        self._close_target()

    def _close_target(self) -> None:
        if self.target is not None:
            try:
                self.target.close()
            except Exception:
                log.debug("sink %s: closing the target failed", self.row.name, exc_info=True)
            self.target = None

    def _job(self) -> JobRow:
        job = self.rt.catalog.job(self.row.job)
        if job is None:
            self.finish()
            raise CatalogError(f"sink {self.row.name!r} was dropped")
        return job

    def _open(self, job: JobRow) -> tuple[SinkTarget, JobRow]:
        """Connect, check the target, and adopt its position if it is further than the catalog's (a
        crash after the target's commit and before the catalog's)."""
        target = make_sink(self.spec)
        target.check()
        held = target.progress()
        mine = Position(job.consumed_epoch or 0, job.next_vnode)
        if held is not None and held > mine:
            log.info("sink %s: the target holds %s, the catalog %s: resuming from the target's", self.row.name,
                     held, mine)
            counts = (job.vnode_rows or {}).get(self.mv.name) or []
            rows = sum(counts[mine.vnode:held.vnode]) if held.epoch == mine.epoch else 0  # snapshot chunks
            self._record(held, rows, 0)
            job = self._job()
        self.target = target
        return target, job

    def step(self) -> float | None:
        """One delivery; returns how long to wait before the next (0: at once; None: until woken, at
        most a second)."""
        job = self._job()
        target, job = (self.target, job) if self.target is not None else self._open(job)
        limit = job.rate_limit
        budget = self.limiter.available(limit)
        if limit == 0:
            return None  # paused: an ALTER wakes the worker
        if budget <= 0 and limit is not None:
            return self.limiter.wait_for(limit)
        if job.phase is Phase.SNAPSHOT:
            rows: int | None = self._snapshot_chunk(target, job, min(budget, SNAPSHOT_CHUNK_ROWS))
        else:
            rows = self._deliver(target, job, min(budget, BATCH_ROWS))
        if rows is None:
            return None
        self.limiter.spend(rows)
        return 0

    def _snapshot_chunk(self, target: SinkTarget, job: JobRow, budget: float) -> int:
        """Sink backfill: the MV's rows as of `S` of the next vnodes, up to `budget` rows."""
        assert job.snapshot_epoch is not None
        counts = (job.vnode_rows or {}).get(self.mv.name)
        if counts is None:
            self.rt.check_retained(self.mv, job.snapshot_epoch)
            counts = vnode_rows(self.rt.catalog, self.mv.name, self.mv.schema, job.snapshot_epoch)
            self.rt.catalog.set_job_counts(job.id, {self.mv.name: counts})
        lo = hi = job.next_vnode
        rows = 0
        while hi < VNODES and (hi == lo or rows + counts[hi] <= budget):
            rows += counts[hi]
            hi += 1
        names = [c.name for c in self.spec.columns]
        frame = self.rt.snapshot(self.mv, job.snapshot_epoch, (lo, hi)).select(*[f"`{n}`" for n in names])
        table = frame.toArrow() if rows else pa.schema([pa.field(c.name, c.type.arrow)
                                                        for c in self.spec.columns]).empty_table()
        table = table.cast(pa.schema([pa.field(c.name, c.type.arrow) for c in self.spec.columns]))
        change = table.add_column(0, "_op", pa.array([int(Op.INSERT)] * table.num_rows, pa.int8()))
        target.write(change, Position(job.snapshot_epoch, hi))
        self._crash_after_commit()
        self._record(Position(job.snapshot_epoch, hi), change.num_rows, 0)
        return change.num_rows

    def _deliver(self, target: SinkTarget, job: JobRow, budget: float) -> int | None:
        """The next epochs' change after the sink's position; None when there is nothing new."""
        mv = self.rt.catalog.relation(self.mv.name)
        if mv is not None and mv.state == "failed":  # its log ends: delivering nothing would look healthy
            stopped = (f"stopped: materialized view {mv.name!r} is out of the pipeline (SHOW JOBS says why); "
                       f"DROP SINK {self.row.name}, then create both again")
            if job.error != stopped:
                self.rt.catalog.set_job_error(job.id, stopped)
            return None
        after = job.consumed_epoch or 0
        committed = self.rt.catalog.committed_epoch()
        if committed <= after:
            return None
        batch = self.store.read(after, committed, max(1.0, budget))
        change = net_change(batch.rows, self.mv.schema, [c.name for c in self.spec.columns])
        to = Position(batch.through, VNODES)
        if change.num_rows:
            target.write(change, to)
            self._crash_after_commit()
        self._record(to, change.num_rows, batch.epochs)
        self.store.truncate(batch.through)
        return change.num_rows

    def _crash_after_commit(self) -> None:
        crash_point("sink_after_target_commit")
        crash_point(f"sink_after_{self.spec.options.get('connector')}_commit")

    def _record(self, to: Position, rows: int, epochs: int) -> None:
        if self.note is None and self.target is not None and self.target.note is not None:
            self.note = NOTE + self.target.note
            log.warning("sink %s: %s", self.row.name, self.note)
        lag = LagRule.lag(self.rt.catalog, to.epoch)
        self.rt.catalog.sink_delivered(self.row.job, self.row.name, to.epoch, to.vnode, rows, epochs, lag,
                                       self.note)
        if self.manager.delivered_hook is not None:
            self.manager.delivered_hook(self.row.name, to)
        with self.delivered:
            self.delivered.notify_all()
        self.manager.moved()

    def wait_delivered(self, epoch: int) -> None:
        """Until the sink's position reaches `epoch` (a coupled sink's epoch waits here; not while it
        backfills, which would hold every epoch for the whole snapshot)."""
        with self.delivered:
            while not self.stopping and self.alive():
                job = self.rt.catalog.job(self.row.job)
                if job is None or job.phase is Phase.SNAPSHOT or (job.consumed_epoch or 0) >= epoch:
                    return
                self.wake()
                self.delivered.wait(1.0)


class Sinks:
    """The sinks of a warehouse: their workers, the handoff of committed epochs, control."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._workers: dict[str, SinkWorker] = {}
        self._lock = threading.Lock()
        self._moved = threading.Condition()
        self.on_dropped: Callable[[SinkRow], None] | None = None  # the frontend drops a sink's own MV
        self.delivered_hook: Callable[[str, Position], None] | None = None  # tests: the target as of each delivery
        self.buffer_rows = BUFFER_ROWS

    def start(self, name: str) -> None:
        row = self.rt.catalog.sink(name)
        if row is None:
            return
        worker = SinkWorker(self, row)
        with self._lock:
            self._workers[name] = worker
        worker.start()

    def resume_all(self) -> None:
        """After a restart; a sink that cannot start says why in its job row, the rest go on."""
        for row in self.rt.catalog.sinks():
            try:
                self.start(row.name)
            except Exception as e:
                log.exception("sink %s cannot start", row.name)
                self.rt.catalog.set_job_error(row.job, error_text(e))

    def stop(self) -> None:
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for w in workers:
            w.request_stop()
        for w in workers:
            w.join()

    def worker(self, name: str) -> SinkWorker | None:
        with self._lock:
            return self._workers.get(name)

    def on_commit(self, commit: Commit) -> None:
        """The barrier loop committed an epoch: each sink's log store gets its MV's change in memory
        (a big epoch's, which only the executors held, is read back from its file); a coupled sink
        (`sink_decouple = false`) is waited for."""
        epoch = commit.epoch
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            chunk = commit.chunks.get(w.row.mv)
            if isinstance(chunk, pa.Table) and chunk.num_rows:
                try:
                    w.store.offer(epoch, chunk)
                except Exception:  # the epoch is committed: its change is read back from the log file
                    log.exception("sink %s: epoch %d could not be buffered; it is read from the log", w.row.name,
                                  epoch)
            w.wake()
        for w in workers:
            if not w.row.decouple:
                w.wait_delivered(epoch)

    def drop(self, name: str) -> None:
        """Stop the sink's worker and forget the sink (its pin goes: retention frees its log). The
        target keeps what it received, as in RisingWave."""
        row = self.rt.catalog.sink(name)
        with self._lock:
            worker = self._workers.pop(name, None)
        if worker is not None:
            worker.stop()
        with self.rt.catalog.transaction() as db:
            self.rt.catalog.remove_sink(db, name)
        if row is not None and self.on_dropped is not None:
            self.on_dropped(row)
        self.moved()

    def moved(self) -> None:
        with self._moved:
            self._moved.notify_all()

    def wait_moved(self, timeout: float) -> None:
        """Until a sink moved (or `timeout`): a foreground CREATE SINK's progress."""
        with self._moved:
            self._moved.wait(timeout)

    def wait_until(self, name: str, epoch: int, timeout: float | None = None) -> None:
        """Until sink `name` has delivered `epoch` (its backfill done); SparkwaveError if it does not
        within `timeout` seconds, saying where it is and why."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            row = self.rt.catalog.sink(name)
            job = self.rt.catalog.job(row.job) if row else None
            if row is None or job is None:
                raise CatalogError(f"no sink {name!r}")
            if job.phase is Phase.CREATED and (job.consumed_epoch or 0) >= epoch:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise PipelineError(f"sink {name!r} has not delivered epoch {epoch} within {timeout:.0f} s: it is "
                                    f"at {job.consumed_epoch} ({job.phase}), last error: {job.error}")
            self.wait_moved(0.5)

    def set_rate_limit(self, name: str, limit: int | None) -> None:
        row = self.rt.catalog.sink(name)
        if row is None:
            raise CatalogError(f"no sink {name!r}")
        self.rt.catalog.set_job_fields(row.job, rate_limit=limit)
        if (w := self.worker(name)) is not None:
            w.wake(retry=True)  # paused, resumed or slowed: a backoff ends too

    def failures(self, name: str) -> int:
        w = self.worker(name)
        return w.failures if w else 0

    def statuses(self) -> dict[str, ServiceStatus]:
        """Each sink's worker: running, failures in a row, its last error and when."""
        with self._lock:
            workers = dict(self._workers)
        return {name: w.status for name, w in workers.items()}

