"""A pipeline on a Spark standalone cluster whose worker is SIGKILLed while the executors run a big
epoch or a backfill chunk (tests/crash/test_worker_kill.py), then checked against DuckDB.

Usage: python -m tests.worker_kill_child WAREHOUSE MASTER VICTIM_PGID epoch|backfill. VICTIM_PGID is
a worker's process group (the worker, its executor and their Python workers: a machine gone). The
kill is synchronised on Spark's own state, not on time: once the task scheduler has a task running
on each of the two executors (for a few polls in a row: a stage of long tasks), the victim is stopped
(SIGSTOP: its task can no longer finish), the scheduler is read again, and if both executors still
run a task the victim is SIGKILLed. Prints `executors N` (at start), `killed in stages [...]`, `failed
tasks N` (in those stages and after, once the epoch or the job is done: the victim's tasks, lost and
run again), `executors N` (after) and `checked E epochs`."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

import sparkwave
from sparkwave.core.spark import create_spark
from tests import dataflow_crash_child as flow
from tests.oracle import Model, check_views, to_sql

BIG_ROWS = 60_000  # one big epoch's (or the backfilled table's) inserted rows: tasks of a second or more
VIEWS = flow.MVS | {"pf": "SELECT id, v * 2 AS v2, g FROM f WHERE v > 10"}
LATE = "bjoin"  # an aggregate over a join, created by a chunked snapshot backfill in `backfill` mode
POLL_S = 0.005


class WorkerKiller(threading.Thread):
    """Kills the victim's process group once the task scheduler has had a task running on each of
    the two executors for `STREAK` polls in a row (long tasks, not the short listing stages). The
    scheduler's own state, not the status tracker's (which a listener updates behind it)."""

    STREAK = 10

    def __init__(self, spark: Any, pgid: int) -> None:
        super().__init__(name="worker-killer", daemon=True)
        self.spark, self.pgid = spark, pgid
        sc = spark.sparkContext
        self.scheduler = sc._jsc.sc().taskScheduler()
        self.to_java = sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava
        self.stages: list[int] = []
        self.groups: list[str] = []
        self.done = threading.Event()

    def _both_busy(self) -> bool:
        running = self.to_java(self.scheduler.runningTasksByExecutors())
        return sum(1 for n in running.values() if n > 0) >= 2

    def run(self) -> None:
        streak = 0
        while not self.done.wait(POLL_S):
            streak = streak + 1 if self._both_busy() else 0
            if streak < self.STREAK:
                continue
            os.killpg(self.pgid, signal.SIGSTOP)  # from here on the victim's task cannot finish
            if all(self._both_busy() for _ in range(3)):
                self.stages = list(self.spark.sparkContext.statusTracker().getActiveStageIds())
                self.groups = sorted({self._group(stage) for stage in self.stages})
                os.killpg(self.pgid, signal.SIGKILL)
                return
            os.killpg(self.pgid, signal.SIGCONT)
            streak = 0

    def _group(self, stage: int) -> str:
        """The Spark job group of a running stage: whose work the kill fell in (an epoch's, a creating job's)."""
        try:  # never in the way of the kill: the victim is stopped meanwhile
            info = self.spark.sparkContext.statusTracker().getStageInfo(stage)
            manager = self.scheduler.taskSetManagerForAttempt(stage, info.currentAttemptId if info else 0)
            return str(manager.get().taskSet().properties().getProperty("spark.jobGroup.id")) \
                if manager.isDefined() else "?"
        except Exception as e:
            return f"?({type(e).__name__})"

    def report(self) -> None:
        """The stages killed in, and the tasks that failed in them and after (the victim's, run again)."""
        self.done.set()
        self.join()
        assert self.stages, "the two executors never both ran a task: the worker was not killed"
        sc = self.spark.sparkContext
        sc._jsc.sc().listenerBus().waitUntilEmpty()  # the status store has every task's end
        tracker = sc.statusTracker()
        failed, stage, missing = 0, min(self.stages), 0
        while missing < 100:  # stage ids grow by one; the retried ones and those after the kill follow
            info = tracker.getStageInfo(stage)
            missing = 0 if info else missing + 1
            failed += info.numFailedTasks if info else 0
            stage += 1
        print(f"killed in stages {sorted(self.stages)}", flush=True)
        print(f"killed in groups {' '.join(self.groups)}", flush=True)
        print(f"failed tasks {failed}", flush=True)


def executors(spark: Any) -> int:
    return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1  # minus the driver's


def big_insert(spark: Any, first: int) -> tuple[Any, tuple]:
    """BIG_ROWS rows as a Spark DataFrame (the executors write its staged rows) and as the model's."""
    last = first + BIG_ROWS - 1
    frame = spark.range(first, last + 1, numPartitions=2).selectExpr(
        "CAST(id AS INT) AS id", "CAST(id % 7 AS INT) AS g", "CAST(id * 13 % 50 AS INT) AS v")
    return frame, ("insert", "f", [(k, k % 7, (k * 13) % 50) for k in range(first, last + 1)])


def main(warehouse: str, master: str, victim: int, when: str) -> None:
    spark = create_spark(master)
    print(f"executors {executors(spark)}", flush=True)
    model = Model()
    for t in flow.TABLES:
        model.table(*t)
    names = ["f", "dim", *VIEWS]
    epochs = 2  # the seed's and the one the kill fell in
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE f (id int, g int, v int, PRIMARY KEY (id)); "
              "CREATE TABLE dim (g int, name varchar, PRIMARY KEY (g))")
        for name, sql in VIEWS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
        seed = [("insert", "f", flow.F_SEED), ("insert", "dim", flow.DIM_SEED)]
        for st in seed:
            s.sql(to_sql(st))
        frame, big = big_insert(spark, 1_000)
        if when == "backfill":
            s.insert("f", frame)
            seed.append(big)
        model.apply_epoch(seed)
        check_views(s, model, s.flush(), names)
        killer = WorkerKiller(spark, victim)
        if when == "epoch":
            s.sql("SET big_epoch_rows = 0")  # every step of the epoch on the executors
            s.insert("f", frame)
            for st in flow.batch(0):
                s.sql(to_sql(st))
            model.apply_epoch([big, *flow.batch(0)])
            killer.start()
            check_views(s, model, s.flush(), names)
        else:
            s.sql(f"SET backfill_chunk_rows = {BIG_ROWS // 4}")
            killer.start()
            s.sql(f"CREATE MATERIALIZED VIEW {LATE} AS {flow.JOBS[LATE]}")  # waits for the job to be created
            model.view(LATE, flow.JOBS[LATE])
            names.append(LATE)
            check_views(s, model, s.committed_epoch, names)
        killer.report()
        print(f"executors {executors(spark)}", flush=True)
        for i in range(1, 3):  # the pipeline goes on with the executor that is left
            statements = flow.batch(i)
            for st in statements:
                s.sql(to_sql(st))
            model.apply_epoch(statements)
            check_views(s, model, s.flush(), names)
            epochs += 1
    print(f"checked {epochs} epochs", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
