"""The DAG scheduler of an epoch: every relation of the main graph executes once its upstreams of
the epoch are done, the independent ones at once on a pool of `EXECUTE_THREADS` threads, so that an
epoch's fixed costs (a Spark job, file writes) overlap rather than add up. What a relation's step
does is `stream/execute.py`'s."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from sparkwave.core.catalog import Relation
from sparkwave.core.crash import crash_point
from sparkwave.meta.barrier.failures import EpochAbandoned, relation_failed
from sparkwave.stream.epoch_work import DmlBatches, EpochWork
from sparkwave.stream.execute import Executor, Step

log = logging.getLogger("sparkwave.barrier")
EXECUTE_THREADS = 4  # relations of one epoch executed at once (those whose upstreams are done)
RECANCEL_SECONDS = 1.0  # an abandoned epoch's job group is cancelled again this often while relations still run


def topo_order(relations: list[Relation]) -> list[Relation]:
    """The relations, each after its upstreams."""
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


class Scheduler:
    """Runs an epoch's relations on its pool; each pool thread joins the running attempt's Spark job
    group (`enter_group`) so that an abandon cancels its jobs (`cancel_group`); none starts once
    `abandoned` is set."""

    def __init__(self, executor: Executor, enter_group: Callable[[], None], cancel_group: Callable[[], None],
                 abandoned: threading.Event) -> None:
        self.executor = executor
        self._enter_group = enter_group
        self._cancel_group = cancel_group
        self._abandoned = abandoned
        self._threads: ThreadPoolExecutor | None = None

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The threads an epoch's relations and commits run on (the barrier loop's own thread waits
        for them), made again after a shutdown (`run_epoch` may be driven by hand)."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=EXECUTE_THREADS, thread_name_prefix="sparkwave-epoch")
        return self._threads

    def shutdown(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None

    def execute_all(self, e: EpochWork, dml: DmlBatches) -> dict[str, float]:
        """Execute `e.relations` (upstreams first), each once its upstreams are done, into `e.chunks`;
        returns each relation's execute time (ms). The first failure stops further starts; the
        running ones finish, and it is raised (as `EpochAbandoned` if the epoch was abandoned)."""
        names = {r.name for r in e.relations}
        self.executor.keep_only(names)
        waiting = {r.name: ({u for u in r.upstreams if u in names}, r) for r in e.relations}
        done: set[str] = set()
        running: dict[Future, str] = {}
        step_ms: dict[str, float] = {}
        failed: BaseException | None = None
        while waiting or running:
            if failed is None and self._abandoned.is_set():
                failed = EpochAbandoned(f"epoch {e.epoch} was abandoned for a DROP")
            if failed is None:
                for name in [n for n, (ups, _) in waiting.items() if ups <= done]:
                    rel = waiting.pop(name)[1]
                    running[self.pool.submit(self._timed, rel, e, dml)] = name
            if not running:
                break
            finished, _ = wait(running, timeout=RECANCEL_SECONDS, return_when=FIRST_COMPLETED)
            if not finished and self._abandoned.is_set():
                self._cancel_again()
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
        if failed is not None and self._abandoned.is_set():  # read under `epoch`: no DROP has resumed yet
            raise EpochAbandoned(f"epoch {e.epoch} was abandoned for a DROP") from failed
        if failed is not None:
            raise failed
        return step_ms

    def _cancel_again(self) -> None:
        """Spark's cancel of a group's future jobs misses some submitted after it (an adaptive plan's
        stages, seen on a loaded machine: the abandoned relation ran on): cancel until they give up."""
        try:
            self._cancel_group()
        except Exception:  # Spark would not take it: the relations finish on their own, as without abandon
            log.debug("cancelling the abandoned epoch's jobs again failed", exc_info=True)

    def _timed(self, rel: Relation, e: EpochWork, dml: DmlBatches) -> tuple[Step, float]:
        self._enter_group()
        t0 = time.time()
        try:
            chunk = self.executor.execute(rel, e, dml)
        except Exception as err:
            raise relation_failed(rel, e.epoch, err) from err
        return chunk, (time.time() - t0) * 1000
