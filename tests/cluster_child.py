"""The cluster scenario of `make test` (`make test-cluster` runs the oracle tests whole), in a
child process because a process holds one SparkContext: on `local-cluster[2,1,1024]` (two executor
JVMs with Python workers of their own), project/filter, aggregate and join MVs in the main graph,
then an aggregate over a join created mid-stream by a snapshot backfill, each equal to DuckDB's
evaluation at the committed epochs.

Usage: python -m tests.cluster_child WAREHOUSE [MASTER]. Prints `app ID`, `executors N` and `checked E
epochs`; an inequality raises (exit status 1)."""

from __future__ import annotations

import os
import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import dataflow_crash_child as flow
from tests.oracle import Model, multiset, rows_of, to_sql, values_sql

MASTER = "local-cluster[2,1,1024]"
VIEWS = flow.MVS | {"pf": "SELECT id, v * 2 AS v2, g FROM f WHERE v > 10"}
LATE = "bjoin"  # flow.JOBS's aggregate over a join


def check(s: sparkwave.Session, model: Model, epoch: int, names: list[str]) -> None:
    for name in names:
        got, want = multiset(rows_of(s.table(name, as_of=epoch))), multiset(model.rows(name))
        assert got == want, f"{name} differs from DuckDB at epoch {epoch}: extra {got - want}, missing {want - got}"


def main(warehouse: str, master: str = MASTER) -> None:
    # The SparkContext starts once both executors have registered (or gives up after 5 minutes, and
    # the count below tells), so every job of the scenario may run on either.
    # (the ratio is of `spark.cores.max`: the cluster's two one-core executors)
    os.environ["PYSPARK_SUBMIT_ARGS"] = ("--conf spark.cores.max=2 "
                                         "--conf spark.scheduler.minRegisteredResourcesRatio=1.0 "
                                         "--conf spark.scheduler.maxRegisteredResourcesWaitingTime=300s pyspark-shell")
    spark = create_spark(master)
    print(f"app {spark.sparkContext.applicationId}", flush=True)
    # the memory status lists the driver's block manager too
    print(f"executors {spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1}", flush=True)
    model = Model()
    for t in flow.TABLES:
        model.table(*t)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE f (id int, g int, v int, PRIMARY KEY (id)); "
              "CREATE TABLE dim (g int, name varchar, PRIMARY KEY (g))")
        for name, sql in VIEWS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
        names = list(VIEWS)
        s.sql(f"INSERT INTO f VALUES {values_sql(flow.F_SEED)}; INSERT INTO dim VALUES {values_sql(flow.DIM_SEED)}")
        model.apply_epoch([("insert", "f", flow.F_SEED), ("insert", "dim", flow.DIM_SEED)])
        s.flush()  # DML reads the committed state: the batches' updates and deletes find the seed
        for i in range(2):
            if i == 1:
                s.sql(f"CREATE MATERIALIZED VIEW {LATE} AS {flow.JOBS[LATE]}")
                model.view(LATE, flow.JOBS[LATE])
                names.append(LATE)
            statements = flow.batch(i)
            for st in statements:
                s.sql(to_sql(st))
            model.apply_epoch(statements)
            check(s, model, s.flush(), ["f", "dim", *names])
    print(f"checked {i + 1} epochs", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])  # WAREHOUSE [MASTER]: a standalone cluster (tests/integration/test_standalone.py)
