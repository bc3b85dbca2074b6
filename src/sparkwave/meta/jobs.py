"""Creating jobs: one worker thread each, their control (rate limit, cancel, wait) and the main
graph's side of the lag rule (`admit`).

A worker runs its job's checkpoints back to back (or paced by its rate limit), in the Spark
scheduler pool `backfill` under its own job group, so that cancelling interrupts its Spark work.
Requests from another process (ALTER ... SET BACKFILL_RATE_LIMIT, CANCEL JOBS) arrive through
the catalog and are applied by the barrier loop before its next barrier."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sparkwave.core.catalog import CatalogDb, JobRow, Phase, Relation
from sparkwave.core.errors import CatalogError, PipelineError
from sparkwave.meta.creating_job import CreatingJob, Pipeline, Step, Strategy
from sparkwave.meta.lag_rule import MAX_HOLD_SECONDS, LagRule
from sparkwave.meta.locks import Locks
from sparkwave.meta.pipeline import Barriers, Commit, SinkControl
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.service import Backoff, Bell, ServiceStatus, SparkGroupService, error_text
from sparkwave.storage.state import state_relations

log = logging.getLogger("sparkwave.jobs")
FOREGROUND_FAILURES = 3  # a foreground CREATE gives up (and cancels its job) after this many failed checkpoints
BACKFILL_POOL = "backfill"
SINK_STRATEGY = "sink"  # the job of a sink (meta/sinks.py): its backfill, then its delivery
BACKOFF = Backoff(0.5, 30.0)  # after a failed checkpoint: 1 s, doubling, at most 30 s
IDLE_S = 5.0  # a worker with nothing to do looks again at least this often, unless woken sooner


class _Worker(SparkGroupService):
    """A creating job's worker: each round one checkpoint (or a rearranged job's budget of them)."""

    def __init__(self, manager: CreatingJobs, job_id: int, chunk_rows: int) -> None:
        super().__init__(f"sparkwave-job-{manager.rt.group_token}-{job_id}", manager.rt.spark, BACKFILL_POOL,
                         f"sparkwave creating job {job_id}", manager.bell, backoff=BACKOFF)
        self.manager = manager
        self.job_id = job_id
        self.cancelled = False
        # stopped when the job is cancelled or the session closes: it must not merge then
        self.backfill = CreatingJob(manager.rt, job_id, manager.locks, chunk_rows, lambda: self.stopping,
                                    manager.pipeline)
        job = manager.rt.catalog.job(job_id)
        self.strategy = Strategy(job.strategy) if job is not None else Strategy.SNAPSHOT
        self.paced_at: int | None = None  # rearranged: the main-graph epoch of the last budgeted step

    def _interrupt(self) -> None:
        super()._interrupt()
        self.manager.notify()

    def _round(self) -> float | None:
        if self.strategy is Strategy.REARRANGED:
            step = self._epoch_budget()
            if step is None:  # until the next commit
                return IDLE_S
        elif self.backfill.catches_up_in_band():
            step = self.backfill.catch_up_and_merge()
        else:
            step = self.backfill.step()
        if step.merged:
            self.finish()
            self.manager.notify()
            return 0.0
        if step.wait is None or step.wait > 0:  # nothing to do now: sleep until woken or due
            return IDLE_S if step.wait is None else step.wait
        self.manager.notify()  # progress: waiters, and a barrier held back by the lag rule
        return 0.0

    def _on_failure(self, e: Exception) -> None:  # a failed checkpoint is redone from committed progress
        log.exception("creating job %d: checkpoint failed (attempt %d)", self.job_id, self.failures)
        self.manager.record_error(self.job_id, e)

    def _end(self) -> None:
        if self.cancelled:
            self.manager.remove(self.job_id)

    def _epoch_budget(self) -> Step | None:
        """Rearranged: after each main-graph commit, a budget of one chunk of rows: one snapshot
        chunk, or log-store steps until the budget is spent (a stateful job's step consumes one
        upstream epoch, so one step per commit would never gain on the upstream), switching in band
        once what is left fits in the rest of it. Steps that read nothing (the switch between
        phases) do not count. None while waiting for the next commit."""
        committed = self.manager.rt.catalog.committed_epoch()
        if committed == self.paced_at:
            return None
        self.paced_at = committed
        budget = self.backfill.chunk_rows
        spent = 0
        while True:
            pending = self.backfill.pending_log_rows()
            if pending is not None and pending <= budget - spent:
                step = self.backfill.catch_up_and_merge()
                return Step(rows=spent + step.rows, merged=step.merged, wait=step.wait)
            step = self.backfill.step(budget=budget - spent)
            if step.merged or step.wait != 0 or self.stopping:
                return Step(rows=spent + step.rows, merged=step.merged, wait=step.wait)
            spent += step.rows
            if step.rows and (pending is None or spent >= budget):
                return Step(rows=spent, wait=None)


class CreatingJobs:
    """The creating jobs of a warehouse. They ring the barrier loop's doorbell (`barriers`) and the
    loop plans with them (`JobControl`) and tells them of commits (`on_commit`): neither holds the
    other (`meta/pipeline.py`)."""

    def __init__(self, rt: Runtime, locks: Locks, barriers: Barriers, sinks: SinkControl | None = None,
                 chunk_rows: int = 10_000_000) -> None:
        self.rt = rt
        self.locks = locks
        self.pipeline: Pipeline = barriers
        self._nudge = barriers.nudge
        self._request_barrier = barriers.request_barrier  # a rearranged job moves only as main-graph epochs commit
        self.bell = Bell()  # shared by the workers: a commit, a checkpoint or a control change wakes them all
        self._workers: dict[int, _Worker] = {}
        self._held: dict[int, tuple[int, float]] = {}  # job -> (committed epoch, since when) it holds the main graph at
        self.clock: Callable[[], float] = time.monotonic  # tests: a clock they move
        self.chunk_rows = chunk_rows  # `SET backfill_chunk_rows` changes it for jobs started after
        self.chunk_hook: Callable[[int, int], None] | None = None  # tests: a slow snapshot read
        self.sinks = sinks  # a sink's job (strategy 'sink') is controlled through it

    # --- signalling ----------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """How many times the jobs were notified: `wait` returns once it changes."""
        return self.bell.rings

    def notify(self) -> None:
        self.bell.ring()
        self._nudge()

    def on_commit(self, commit: Commit) -> None:
        """The main graph committed an epoch: a worker waiting for one (the log-store phase, a
        rearranged job's budget) looks again."""
        self.notify()

    def wait(self, generation: int, timeout: float | None) -> None:
        """Until something happened since `generation` (a checkpoint, a commit, a control change)."""
        self.bell.wait(generation, IDLE_S if timeout is None else timeout)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self, job_id: int) -> None:
        worker = _Worker(self, job_id, self.chunk_rows)
        worker.backfill.chunk_hook = self.chunk_hook
        job = self.rt.catalog.job(job_id)
        if job is not None and job.phase is Phase.SNAPSHOT:
            worker.backfill.count_upstreams()
        self._workers[job_id] = worker
        worker.start()

    def resume_all(self) -> None:
        """After a restart: drop what in-flight checkpoints left behind, then carry on."""
        for job in self.rt.catalog.jobs():
            if not job.creating:
                continue
            rel = self.rt.catalog.relation(job.relation)
            if rel is None:
                continue
            kept = {f for c in self.rt.catalog.job_chunks(job.id) for fs in c.files.values() for f in fs}
            for t in [rel, *state_relations(self.rt, rel)]:
                stored = self.rt.stored(t)
                stored.create()
                if job.phase is Phase.SNAPSHOT:
                    for p in stored.base_path.iterdir():
                        if p.name.startswith("_backfill_") or (p.suffix == ".parquet" and str(p) not in kept):
                            self.rt.warehouse.remove_file(p)
            self.start(job.id)

    def stop(self) -> None:
        workers = list(self._workers.values())
        for w in workers:
            w.request_stop()
        for w in workers:
            w.join()
        self._workers.clear()

    def register(self, db: CatalogDb, rel: Relation, upstreams: list[str], strategy: Strategy) -> int:
        """Add a creating MV and its job in the caller's transaction, pinning every upstream's
        snapshot at the one common epoch `S` (= `rel.created_epoch`)."""
        job_id = self.rt.catalog.add_relation(db, rel, strategy, upstreams[0])
        for u in upstreams:
            self.rt.catalog.add_pin(u, rel.created_epoch, f"job:{job_id}", db)
        return job_id

    def remove(self, job_id: int) -> bool:
        """A cancelled job's partial table, progress and pins go; the main graph never saw it.
        Nothing goes if the job merged meanwhile (a cancel that lost the race): returns False."""
        with self.rt.catalog.transaction() as db:
            job = self.rt.catalog.job(job_id)
            if job is None or not job.creating:
                return False
            self.rt.catalog.remove_relation(db, job.relation)
        self.rt.forget(job.relation)
        self.rt.warehouse.remove_tree(self.rt.warehouse.relation_dir(job.relation))
        self.rt.catalog.folder_removed(job.relation)
        self._workers.pop(job_id, None)
        self.notify()
        return True

    # --- control -------------------------------------------------------------------------------
    def creating_job(self, job_id: int) -> JobRow:
        return self.rt.catalog.creating_job(job_id)

    def set_rate_limit(self, job_id: int, limit: int | None) -> None:
        sink = self._sink_of(job_id)
        if sink is not None and self.sinks is not None:  # SINK_RATE_LIMIT, from another process
            self.sinks.set_rate_limit(sink, limit)
            return
        job = self.creating_job(job_id)
        fields: dict = {"rate_limit": limit}
        with self.locks.gate:
            if (job.rate_limit is not None and limit is None and job.phase is Phase.LOG_STORE
                    and job.consumed_epoch is not None):  # unthrottled from now on: the rule restarts
                fields["allowed_lag"] = LagRule.start(LagRule.lag(self.rt.catalog, job.consumed_epoch))
            self.rt.catalog.set_job_fields(job_id, **fields)
        if (worker := self._workers.get(job_id)) is not None:
            worker.wake(retry=True)  # its settings changed: a backoff after a failure ends too
        self.notify()

    def cancel(self, job_id: int, *, wait: bool = True) -> None:
        """Stop a creating job and remove what it built. A job that merges before the cancel takes
        effect stays (its worker checks the stop flag under the gate before merging): then, when
        waiting, CatalogError says so."""
        job = self.creating_job(job_id)
        if job.strategy == SINK_STRATEGY and self.sinks is not None:  # a sink backfill: the sink goes
            if wait:
                self.sinks.drop(job.relation)
            else:  # a request, on the barrier loop's thread, which holds `epoch`: the drop takes `ddl` first
                threading.Thread(target=self.sinks.drop, args=(job.relation,), name=f"sparkwave-drop-{job.relation}",
                                 daemon=True).start()
            return
        worker = self._workers.get(job_id)
        if worker is not None and worker.alive():
            worker.cancelled = True
            worker.request_stop()
            if not wait:
                return
            worker.join()
        elif self.remove(job_id):
            return
        if self.rt.catalog.job(job_id) is not None:
            raise CatalogError(f"job {job_id} ({job.relation}) finished before it could be cancelled; "
                               f"DROP MATERIALIZED VIEW {job.relation} removes it")

    def apply_requests(self) -> None:
        """Requests from other processes, applied before a barrier."""
        for r in self.rt.catalog.pending_requests():
            try:
                if r.kind == "rate_limit":
                    self.set_rate_limit(r.job, r.value)
                    outcome = "applied"
                else:
                    self.cancel(r.job, wait=False)
                    outcome = "cancelling"
            except CatalogError as e:
                outcome = f"error: {e}"
            self.rt.catalog.finish_request(r.id, outcome)

    def _sink_of(self, job_id: int) -> str | None:
        job = self.rt.catalog.job(job_id)
        return job.relation if job is not None and job.strategy == SINK_STRATEGY else None

    def record_error(self, job_id: int, e: Exception) -> None:
        self.rt.catalog.set_job_error(job_id, error_text(e))

    def failures(self, job_id: int) -> int:
        w = self._workers.get(job_id)
        return w.failures if w else 0

    def statuses(self) -> dict[int, ServiceStatus]:
        """Each running job's worker: running, failures in a row, its last error and when."""
        return {job_id: w.status for job_id, w in list(self._workers.items())}

    def wait_created(self, job_ids: list[int] | None = None, on_progress: Callable[[], None] | None = None,
                     give_up_after: int | None = None) -> None:
        """Until the jobs (default: every creating job) have merged."""
        while True:
            generation = self.generation
            jobs = {j.id: j for j in self.rt.catalog.jobs()}
            ids = [j.id for j in jobs.values() if j.creating] if job_ids is None else job_ids
            for i in ids:
                if i not in jobs:
                    raise PipelineError(f"creating job {i} was cancelled")
                if give_up_after and self.failures(i) >= give_up_after:
                    error = jobs[i].error
                    self.cancel(i)
                    raise PipelineError(f"creating job {i} ({jobs[i].relation}) failed {give_up_after} times and "
                                        f"was cancelled: {error}")
            if on_progress:
                on_progress()
            if all(not jobs[i].creating for i in ids):
                return
            waiting = [jobs[i] for i in ids if jobs[i].creating]
            if any(j.strategy == Strategy.REARRANGED for j in waiting):
                self._request_barrier()  # waiting for a rearranged job drives the barriers it steps on
            if all(j.rate_limit == 0 for j in waiting) and not self.rt.catalog.pending_requests():
                names = ", ".join(f"{j.id} ({j.relation})" for j in waiting)
                raise PipelineError(f"creating job(s) {names} are paused (BACKFILL_RATE_LIMIT = 0), so this wait "
                                    f"would never end; resume with ALTER MATERIALIZED VIEW {waiting[0].relation} "
                                    "SET BACKFILL_RATE_LIMIT = DEFAULT")
            self.wait(generation, 0.5)

    # --- the main graph's side of the lag rule -----------------------------------------------------
    def admit(self) -> bool:
        """May the main graph plan another epoch? Called with `locks.gate` held (see lag_rule: only
        an unthrottled job may hold it back, and for at most `MAX_HOLD_SECONDS` per epoch)."""
        committed = self.rt.catalog.committed_epoch()
        for job in self.rt.catalog.jobs():
            if (job.phase is not Phase.LOG_STORE or job.strategy == Strategy.REARRANGED or job.rate_limit is not None
                    or job.allowed_lag is None
                    or job.consumed_epoch is None or self.failures(job.id) > 0 or job.id not in self._workers):
                continue
            lag = LagRule.lag(self.rt.catalog, job.consumed_epoch)
            if not LagRule.holds(job.allowed_lag, lag):
                continue
            held = self._held.get(job.id)
            if held is None or held[0] != committed:
                held = self._held[job.id] = (committed, self.clock())
                log.info("creating job %d (%s) holds the main graph back: lag %d epochs, allowed %.1f",
                         job.id, job.relation, lag.epochs, job.allowed_lag)
                self.rt.catalog.count_held_back(job.id)
            if LagRule.holds(job.allowed_lag, lag, self.clock() - held[1]):
                return False
            log.info("creating job %d (%s) held the main graph back for %.0f s: admitted anyway",
                     job.id, job.relation, MAX_HOLD_SECONDS)
        return True
