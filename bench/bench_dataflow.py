"""Dataflow MVs (aggregates, joins, windows).

1. Incrementality: the per-epoch cost of 1k changed input rows for a group-by MV and for a two-way
   join MV, over inputs of 1M and of 10M rows, measured in one run; the figure is the 10M/1M ratio
   of each MV's own step time (target <= 1.5).
2. Nexmark: rows/s of q0-q5, q7-q9 (`SPARKWAVE_BENCH_NEXMARK_QUERIES`, default all) at steady
   state (the barrier loop at 1 s, source rows per epoch over the epoch's wall time) and during a
   snapshot backfill (upstream snapshot rows over the time to created), each against a baseline
   from the same run: steady against the same pipeline with no MV (ingest only), backfill against
   Spark evaluating the same query over the same snapshot as a batch job."""

from __future__ import annotations

import os
import random
import time

import pyarrow as pa
import sqlglot
from sqlglot import exp

import sparkwave
from bench.common import fresh_dir, median, report, spark, timed
from sparkwave.cli.nexmark_sql import QUERIES, tables_sql
from sparkwave.meta.barrier import EpochReport

SIZES = [int(x) for x in os.environ.get("SPARKWAVE_BENCH_DATAFLOW_SIZES", "1000000,10000000").split(",")]
CHANGED = 1000
EPOCHS = 6
AGG = "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS mx FROM f GROUP BY g"
JOIN = "SELECT f.id, f.v, d.name FROM f JOIN d ON f.g = d.g"
STEADY_S = float(os.environ.get("SPARKWAVE_BENCH_NEXMARK_S", 20))
NEXMARK_QUERIES = [q.strip() for q in os.environ.get("SPARKWAVE_BENCH_NEXMARK_QUERIES", ",".join(QUERIES)).split(",")
                   if q.strip()]
assert set(NEXMARK_QUERIES) <= set(QUERIES), f"no such query: {set(NEXMARK_QUERIES) - set(QUERIES)}"
BIDS_PER_S = int(os.environ.get("SPARKWAVE_BENCH_NEXMARK_RATE", 100_000))

# Published Nexmark throughput per core, rows/s (thousands); RisingWave's page has no q9.
RISINGWAVE = {"q0": 118.41, "q1": 119.37, "q2": 127.36, "q3": 97.358, "q4": 13.923, "q5": 5.2249, "q7": 20.348,
              "q8": 60.732}
FLINK = {"q0": 155.02, "q1": 157.94, "q2": 175.21, "q3": 152.12, "q4": 34.33, "q5": 22.14, "q7": 12.33, "q8": 146.14,
         "q9": 14.24}
SOURCES = ("RisingWave: docs.risingwave.com/get-started/rw-benchmarks-stream-processing (nightly-20230309, "
           "8 vCPU, Kafka source, blackhole sink, 'Throughput/core'); Flink: github.com/nexmark/nexmark README "
           "'Benchmark Results' (Flink 1.13, 8 TaskManagers x 1 slot, datagen source, 'Throughput/Cores')")


def _one_size(n: int) -> tuple[dict[str, float], str]:
    """Step ms per relation (median) and the table row for inputs of `n` rows."""
    reports: list[EpochReport] = []
    s = sparkwave.connect(fresh_dir(f"dataflow-{n}"), spark=spark(), barrier_interval_ms=3_600_000,
                          on_epoch=reports.append)
    groups = n // 10
    s.sql("CREATE TABLE f (id bigint, g bigint, v bigint, PRIMARY KEY (id)); "
          "CREATE TABLE d (g bigint, name varchar, PRIMARY KEY (g)); SET compaction_epochs = 1000000")
    t0 = time.perf_counter()
    s.insert("f", spark().range(n).selectExpr("id", f"id % {groups} AS g", "id % 1000 AS v"))
    s.insert("d", spark().range(groups).selectExpr("id AS g", "concat('n', id % 97) AS name"))
    s.flush()
    s.compact()
    t1 = time.perf_counter()
    s.sql(f"CREATE MATERIALIZED VIEW agg WITH (backfill_strategy = 'blocking') AS {AGG}")
    t2 = time.perf_counter()
    s.sql(f"CREATE MATERIALIZED VIEW jn WITH (backfill_strategy = 'blocking') AS {JOIN}")
    t3 = time.perf_counter()
    rnd = random.Random(n)
    reports.clear()
    for _ in range(EPOCHS + 1):
        ids = rnd.sample(range(n), CHANGED)
        s.insert("f", pa.table({"id": pa.array(ids, pa.int64()),
                                "g": pa.array([rnd.randrange(groups) for _ in ids], pa.int64()),
                                "v": pa.array([rnd.randrange(2000) for _ in ids], pa.int64())}))
        s.flush()
    s.close()
    measured = [r for r in reports if r.rows_in][1:]  # the first is a warm-up
    steps = {name: median([r.step_ms.get(name, 0.0) for r in measured]) for name in ("f", "agg", "jn")}
    epoch_ms = median([r.latency_ms for r in measured])
    return steps, (f"| {n:,} | {t1 - t0:.0f} s | {t2 - t1:.0f} s | {t3 - t2:.0f} s | {steps['f']:.0f} | "
                   f"{steps['agg']:.0f} | {steps['jn']:.0f} | {epoch_ms:.0f} |")


def incrementality() -> list[str]:
    results = [_one_size(n) for n in SIZES]
    (lo, _), (hi, _) = results[0], results[-1]
    ratio = {name: hi[name] / lo[name] for name in lo}
    return [
        f"`agg`: `{AGG}`; `jn`: `{JOIN}`; f has N rows, d N/10; each epoch upserts {CHANGED:,} random rows of f "
        f"(new g and v). Median of {EPOCHS} epochs after a warm-up; step = the relation's own execute time.",
        "",
        "| N | load + compact | create agg (blocking) | create jn (blocking) | f step ms | agg step ms | jn step ms "
        "| epoch ms |",
        "|---|---|---|---|---|---|---|---|",
        *[row for _, row in results],
        "",
        f"- {SIZES[-1]:,}/{SIZES[0]:,} step ratio: group-by MV **{ratio['agg']:.2f}x**, join MV "
        f"**{ratio['jn']:.2f}x** (target <= 1.5); the table's own upsert step {ratio['f']:.2f}x",
    ]


def _run_steady(query: str | None) -> tuple[float, int, float]:
    """(rows/s, rows, p50 epoch ms) of the loop at 1 s with the Nexmark tables and `query` as an MV."""
    reports: list[EpochReport] = []
    name = "steady_" + (query or "none")
    with sparkwave.connect(fresh_dir(name), spark=spark(), barrier_interval_ms=1000, on_epoch=reports.append) as s:
        s.sql(tables_sql(BIDS_PER_S, event_gap_ns=1_000_000))
        if query:
            s.sql(f"CREATE MATERIALIZED VIEW {query} AS {QUERIES[query]}")
        time.sleep(STEADY_S)
    measured = [r for r in reports if r.rows_in][2:]  # warm-up epochs out
    rows = sum(r.rows_in for r in measured)
    secs = sum(r.latency_ms for r in measured) / 1000
    return rows / secs, rows, median([r.latency_ms for r in measured])


def nexmark() -> list[str]:
    base_rate, _, base_p50 = _run_steady(None)
    lines = []
    # the backfill runs over one shared history, built once at the loop's pace
    where = fresh_dir("nexmark-history")
    with sparkwave.connect(where, spark=spark(), barrier_interval_ms=1000) as history:
        history.sql(tables_sql(BIDS_PER_S, event_gap_ns=1_000_000))
        time.sleep(STEADY_S)
    history = sparkwave.connect(where, spark=spark(), barrier_interval_ms=3_600_000)  # no more epochs
    snapshot_rows = sum(history.table(t).count() for t in ("person", "auction", "bid"))
    for q in NEXMARK_QUERIES:
        sql = QUERIES[q]
        rate, rows, p50 = _run_steady(q)
        epoch = history.committed_epoch
        for t in ("person", "auction", "bid"):
            history.table(t, as_of=epoch).createOrReplaceTempView(t)
        plain = timed(lambda sql=sql: spark().sql(_spark_sql(sql)).write.format("noop").mode("overwrite").save())
        t0 = time.perf_counter()
        history.sql(f"CREATE MATERIALIZED VIEW {q} AS {sql}")
        t_bf = time.perf_counter() - t0
        job = next(j for j in history.jobs() if j.name == q)
        bf_rate = job.rows_total / t_bf
        lines.append(f"| {q} | {rate:,.0f} | {rate / 2 / 1000:.1f} | {rate / base_rate:.2f}x | {p50:.0f} | "
                     f"{bf_rate:,.0f} | {bf_rate / 2 / 1000:.1f} | {bf_rate * plain / job.rows_total:.2f}x | "
                     f"{_published(RISINGWAVE, q)} | {_published(FLINK, q)} |")
        history.sql(f"DROP MATERIALIZED VIEW {q}")
    history.close()
    return [
        f"Tables person/auction/bid at {BIDS_PER_S:,} bids/s of wall time (1:3:46), loop at 1 s for {STEADY_S:.0f} s "
        f"per query; ingest-only baseline {base_rate:,.0f} rows/s (p50 epoch {base_p50:.0f} ms). Backfill over "
        f"{snapshot_rows:,} snapshot rows. Per-core = rows/s / 2 cores.",
        "",
        "| query | steady rows/s | k rows/s/core | vs ingest only | p50 epoch ms | backfill rows/s | "
        "k rows/s/core | vs Spark batch | RisingWave k/s/core | Flink k/s/core |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *lines,
        "",
        f"Published figures: {SOURCES}.",
    ]


def _published(figures: dict[str, float], q: str) -> str:
    return f"{figures[q]:.1f}" if q in figures else "n/a"


def _spark_sql(sql: str) -> str:
    """The query as Spark SQL over temp views, for the batch baseline: TUMBLE / HOP become Spark's
    own `window()`."""
    tree = sqlglot.parse_one(sql, read="postgres")
    for t in list(tree.find_all(exp.Table)):
        fn = t.this
        if isinstance(fn, exp.Anonymous) and fn.name.lower() in ("tumble", "hop"):
            table, col = fn.expressions[0].name, fn.expressions[1].name
            sizes = [f"'{a.this.name} {a.args['unit'].name.lower()}'" for a in fn.expressions[2:]]
            spec = sizes[0] if len(sizes) == 1 else f"{sizes[1]}, {sizes[0]}"
            sub = (f"(SELECT w.*, w._w.start AS window_start, w._w.end AS window_end FROM "
                   f"(SELECT *, window({col}, {spec}) AS _w FROM {table}) w) AS {t.alias or table}")
            t.replace(sqlglot.parse_one(f"SELECT * FROM {sub}", read="spark").args["from_"].this)
    return tree.sql(dialect="spark")


def main() -> None:
    report("Dataflow MVs: incrementality (`bench/bench_dataflow.py`)", incrementality())
    report(f"Nexmark {', '.join(NEXMARK_QUERIES)} (`bench/bench_dataflow.py`)", nexmark())


if __name__ == "__main__":
    main()
