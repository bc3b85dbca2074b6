"""The barrier loop: the main graph advances one epoch at a time, each in this order (a crash
between any two steps is recovered by replaying the plan):

1. **Plan** (`plan.py`): the source offset ranges and staged DML batches the epoch takes, the
   creating jobs' admission; persisted before anything executes.
2. **Execute** (`schedule.py`, each relation's step in `stream/execute.py`) every relation in
   dependency order on Spark. A table turns its intents into log rows; an MV runs its operator tree
   over its upstreams' log rows of the epoch.
3. **Commit** (`commit.py`) the epoch in the catalog: each changed relation's log file and the
   source offsets. Only the catalog commit makes the epoch visible; the relations' Delta logs
   follow a few epochs behind (`meta/delta_follower.py`).

A failed attempt is retried with backoff (`failures.py` takes out an MV that keeps failing); a
DROP may abandon the running epoch and resume the loop once it is done."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from sparkwave.core import spark_features
from sparkwave.core.crash import crash_point
from sparkwave.core.errors import PipelineError
from sparkwave.meta.barrier import failures
from sparkwave.meta.barrier.commit import Committer, EpochReport
from sparkwave.meta.barrier.failures import EpochAbandoned, Isolation
from sparkwave.meta.barrier.flush import FlushTickets
from sparkwave.meta.barrier.plan import Planner
from sparkwave.meta.barrier.schedule import Scheduler
from sparkwave.meta.locks import Locks
from sparkwave.meta.pipeline import Barriers, CommitListener, FailureListener, JobControl
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.service import Backoff, Bell, Service
from sparkwave.stream.epoch_work import EpochWork
from sparkwave.stream.execute import Executor

log = logging.getLogger("sparkwave.barrier")
MAIN_POOL = "main"  # the Spark scheduler pool of the main graph; creating jobs run in "backfill"


class BarrierLoop(Service):
    """Runs epochs, on demand (`run_epoch`) or every `interval_ms` in a background thread.

    `locks.epoch` is held for a whole epoch; DDL takes it to act between two epochs. The loop sleeps
    on `barriers` (`meta/pipeline.py`), which flushes and creating jobs ring; it plans with `jobs`
    and tells `listeners` of each commit, in their order."""

    def __init__(self, rt: Runtime, locks: Locks, barriers: Barriers, *, jobs: JobControl | None = None,
                 listeners: Sequence[CommitListener] = (), failure_listeners: Sequence[FailureListener] = (),
                 on_epoch: Callable[[EpochReport], None] | None = None) -> None:
        super().__init__("sparkwave-barrier-loop", Bell(barriers.cond), backoff=Backoff(0.2, 5.0))
        self.rt = rt
        self.locks = locks
        self.barriers = barriers
        self.interval_ms = barriers.interval_ms
        self.on_epoch = on_epoch
        self.failure_listeners = tuple(failure_listeners)
        self.tickets = FlushTickets()
        self.isolation = Isolation(rt, locks, jobs)
        self.planner = Planner(rt, locks, barriers.interval_ms, jobs)
        self._abandon = threading.Event()  # set by `abandon` until `resume`: no epoch runs meanwhile
        self.scheduler = Scheduler(Executor(rt, rt.connector), self._in_epoch_group, self._cancel_group, self._abandon)
        self.committer = Committer(rt, listeners)
        self._attempts = 0
        self._group = f"sparkwave-epoch-{rt.group_token}-0"  # the Spark job group of the running attempt's jobs
        self._joined = threading.local()  # the group each thread last joined (`_in_epoch_group`)

    # --- thread --------------------------------------------------------------------------------
    def start(self) -> None:
        self.committer.start()  # the Delta follower, which catches the Delta logs up first thing
        super().start()

    def stop(self) -> None:
        super().stop()
        self.scheduler.shutdown()
        self.committer.close()  # after the last epoch: the Delta logs get every committed one

    @property
    def _flush_requests(self) -> int:
        return self.barriers.flush_requests

    def request_barrier(self) -> None:
        self.barriers.request_barrier()

    def abandon(self) -> None:
        """Give up the running epoch, if any: its Spark jobs are cancelled and none of its relations
        is started after, so a DROP waiting for `locks.epoch` does not wait for an epoch that may
        never finish (the relation it drops may be why). The plan stays persisted and is replayed
        at once, without what was dropped."""
        self._abandon.set()
        self._cancel_group()

    def _cancel_group(self) -> None:
        # its future jobs too: a relation busy on the driver now starts its next job cancelled
        spark_features.cancel_group(self.rt.spark, self._group, future=True)

    def resume(self) -> None:
        """Epochs may run again: the DROP that abandoned one is done."""
        self._abandon.clear()
        self.wake()

    def _in_epoch_group(self) -> None:
        """Put this thread's Spark jobs in the running attempt's group, once per thread and attempt:
        a pool thread runs many relations of an attempt, and each join is a few Py4J calls (nothing
        else sets a group on the loop's threads)."""
        joined = getattr(self._joined, "group", None)
        if joined == self._group:
            return
        spark_features.join_group(self.rt.spark, self._group, pool=MAIN_POOL, description="sparkwave epoch",
                                  leave=joined)
        self._joined.group = self._group

    def _run(self) -> None:
        # A plan a crash left uncommitted is replayed here at once, not in `connect()`: however big
        # it is, opening the warehouse does not wait for it. After a replay, the epoch a flush()
        # waits for is still to come.
        again = self.rt.catalog.uncommitted_plan() is not None
        held = False  # the last barrier was held back by a creating job's lag rule
        started = time.time()
        while True:
            # Barriers are paced start to start, so a slow epoch does not stretch the interval.
            wait = 0.0 if again else (1.0 if held else max(0.0, started + self.interval_ms / 1000 - time.time())
                                      if self.failures == 0 else self.backoff())
            if not self.barriers.wait(held, wait, lambda: self.stopping):
                return
            if not held:
                started = time.time()
            try:
                # each attempt's jobs in a group of their own (the pool's threads join it per relation):
                # `abandon` cancels that group's jobs, present and future
                self._attempts += 1
                self._group = f"sparkwave-epoch-{self.rt.group_token}-{self._attempts}"
                self._in_epoch_group()
                report = self.run_epoch()
                held = report is None
                again = report is not None and report.replayed
                self.record_success()
                self.isolation.clear()
            except EpochAbandoned:
                log.warning("epoch abandoned for a DROP; its plan is replayed without the dropped relation")
                self.sleep(None, lambda: not self._abandon.is_set())
                again = True
            except Exception as e:  # the loop survives; an epoch that keeps failing is reported to waiters
                log.exception("epoch failed (attempt %d)", self.failures + 1)
                again = self._failed(e)

    def _failed(self, e: Exception) -> bool:
        """Count a failed attempt. An MV that failed `MAX_ATTEMPTS` in a row is isolated and the
        epoch retried at once without it (True); otherwise the loop backs off, and `flush()`
        reports the error once it persists."""
        for listener in self.failure_listeners:
            try:
                listener.on_failure(e)
            except Exception:  # a record of the failure must not end the loop that retries it
                log.exception("a failure listener failed")
        if self.isolation.isolated(e):
            self.record_success()
            return True
        self.record_failure(e)
        self.tickets.failed()
        return False

    def take_out(self, name: str, reason: str, upstream_reason: str) -> set[str]:
        """Take MV `name` and what is downstream of it out of the main graph (`Isolation.take_out`)."""
        return self.isolation.take_out(name, reason, upstream_reason)

    def flush(self) -> int:
        """Return once an epoch that read its input after this call began has committed (so it holds
        every DML statement staged before the call); returns the committed epoch then."""
        t0 = time.time()
        ticket = self.tickets.take()
        self.barriers.request_barrier()

        def failing() -> None:
            if self.error is not None and self.failures >= failures.MAX_ATTEMPTS and self.error_at >= t0:
                raise PipelineError(f"the pipeline's barrier loop failed: {self.error}") from self.error

        def closed() -> None:
            if not self.alive():
                raise PipelineError("the pipeline is closed")

        self.tickets.wait(ticket, failing, closed)
        return self.rt.catalog.committed_epoch()

    # --- one epoch -----------------------------------------------------------------------------
    def run_epoch(self) -> EpochReport | None:
        """Run the next epoch; an epoch that was planned but not committed (a crash, a failed
        attempt) is replayed first, with the same plan. None: held back by a creating job."""
        with self.locks.epoch:
            t0 = time.time()
            pending = self.planner.pending()
            if pending is not None:
                report = self._execute_and_commit(pending, t0)
                report.replayed = True
                return report
            e = self.planner.next()
            ticket = self.tickets.newest()  # taken before the plan reads the staged DML
            dml_ids = self._plan(e)
            if not self.planner.admit_and_persist(e, dml_ids):
                return None
            if e.more:  # a flush waits for an epoch that leaves none of its DML behind
                ticket = self.tickets.done()
                self.request_barrier()
            self.tickets.planned(e.epoch, ticket)
            crash_point("after_plan")
            return self._execute_and_commit(e, t0)

    def _plan(self, e: EpochWork) -> list[int]:
        return self.planner.read_inputs(e)

    def _execute_and_commit(self, e: EpochWork, t0: float) -> EpochReport:
        dml, rows_in = self.planner.prepare(e)
        step_ms = self.scheduler.execute_all(e, dml)
        if rows_in:
            self.barriers.carried_input()
        report = self.committer.commit(e, self.scheduler.pool, rows_in, t0, step_ms)
        self.tickets.committed(e.epoch)
        if self.on_epoch:
            self.on_epoch(report)
        return report
