"""Online backfill: throughput of a filter/project MV's backfill over a 10M-row table (snapshot
strategy, blocking strategy, and a plain Spark copy of the same snapshot into a Delta table);
the running pipeline's epoch latency during a backfill of either strategy against none; and the
log-store lag over time while the upstream writes at half the job's log-consumption rate."""

from __future__ import annotations

import os
import threading
import time

import pyarrow as pa
from deltalake import convert_to_deltalake

import sparkwave
from bench.common import fresh_dir, pct, report, spark, timed

ROWS = int(os.environ.get("SPARKWAVE_BENCH_LARGE", 10_000_000))
MV = "SELECT k, v * 2 AS v2, p FROM big WHERE v >= 100"
LIMITED = 1_000_000
JOB_LIMIT = 100_000  # the catch-up job's rate limit
REARRANGED_BUDGET = int(os.environ.get("SPARKWAVE_BENCH_REARRANGED_BUDGET", 1_000_000))  # rows per main epoch
PIPELINE_S = float(os.environ.get("SPARKWAVE_BENCH_PIPELINE_S", 20))


def with_big(name: str, **kw) -> sparkwave.Session:  # type: ignore[no-untyped-def]
    s = sparkwave.connect(fresh_dir(name), spark=spark(), **kw)
    s.sql("CREATE TABLE big (k bigint, v bigint, p varchar, PRIMARY KEY (k)); SET compaction_epochs = 1000000")
    s.insert("big", spark().range(ROWS).selectExpr("id AS k", "id % 1000 AS v", "concat('p', id % 100) AS p"))
    s.flush()
    s.compact()
    return s


def throughput(s: sparkwave.Session) -> list[str]:
    files = s.catalog.base_at("big", s.committed_epoch).files

    def plain_copy() -> None:
        out = fresh_dir("plain-copy")
        (spark().read.parquet(*files).where("v >= 100").selectExpr("k", "v * 2 AS v2", "p")
         .write.parquet(str(out)))
        convert_to_deltalake(str(out))

    plain_copy()  # warm-up: JIT and file cache, for all three alike
    t_plain = timed(plain_copy)
    # each strategy twice, the second timed, as the plain copy
    t_snapshot = [timed(lambda i=i: s.sql(f"CREATE MATERIALIZED VIEW m_snap{i} AS {MV}")) for i in range(2)][1]
    t_blocking = [timed(lambda i=i: s.sql(f"CREATE MATERIALIZED VIEW m_block{i} WITH (backfill_strategy = "
                                          f"'blocking') AS {MV}")) for i in range(2)][1]
    assert s.table("m_snap1").count() == s.table("m_block1").count()
    steps = s.catalog.job_steps(s.catalog.job_of("m_snap1").id)
    rate = lambda t: ROWS / t  # noqa: E731
    return [
        f"- {ROWS:,}-row table, MV `{MV}` ({s.table('m_snap1').count():,} rows):",
        f"  - plain Spark copy (read the base's Parquet, filter/project, write, Delta log): {t_plain:.1f} s, "
        f"{rate(t_plain):,.0f} rows/s",
        f"  - snapshot strategy (foreground CREATE until merged, {sum(1 for x in steps if x.phase == 'snapshot')} "
        f"chunk checkpoints): {t_snapshot:.1f} s, {rate(t_snapshot):,.0f} rows/s = "
        f"**{t_plain / t_snapshot:.2f}x** the plain copy (target >= 0.8x)",
        f"  - blocking strategy: {t_blocking:.1f} s, {rate(t_blocking):,.0f} rows/s = "
        f"{t_plain / t_blocking:.2f}x the plain copy",
    ]


def pipeline_impact() -> list[str]:
    """A main graph ingesting steadily (1 s barriers) while a big MV is backfilled beside it."""
    lines = []
    epochs: list[tuple[float, float]] = []  # (commit time, latency ms)
    s = with_big("impact", barrier_interval_ms=1000,
                 on_epoch=lambda r: epochs.append((time.time(), r.latency_ms)) if r.rows_in else None)
    s.sql("CREATE TABLE g (id bigint, v int, w varchar) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
          "fields.v.min = '0', fields.v.max = '999', fields.w.length = '8', datagen.rows.per.second = '2000')")
    s.sql("CREATE MATERIALIZED VIEW g1 AS SELECT id, v + 1 AS v1 FROM g WHERE v > 100")
    s.sql("CREATE MATERIALIZED VIEW g2 AS SELECT id, upper(w) AS w FROM g WHERE v % 2 = 0")

    def window(label: str, work: threading.Thread | None) -> None:
        start = len(epochs)
        t0 = time.time()
        took = 0.0
        if work:
            work.start()
            work.join()
            took = time.time() - t0
            assert not failed, f"{label}: {failed}"
        while time.time() - t0 < PIPELINE_S:
            time.sleep(0.5)  # a benchmark's clock, not synchronisation
        got = epochs[start:]
        lat = [x for _, x in got]
        with_prev = epochs[max(0, start - 1):]  # a stall may begin right at the window's start
        gaps = [b[0] - a[0] for a, b in zip(with_prev, with_prev[1:], strict=False)]
        stats.append((label, pct(lat, 50), pct(lat, 99), max(gaps) if gaps else 0.0, len(got), took))

    stats: list[tuple[str, float, float, float, int, float]] = []
    failed: list[BaseException] = []

    def create(sql: str) -> threading.Thread:
        def run() -> None:
            try:
                s.sql(sql)
            except BaseException as e:  # reported by the window
                failed.append(e)
        return threading.Thread(target=run)

    window("warm-up", None)
    stats.clear()
    window("no backfill", None)
    window("snapshot backfill", create(f"CREATE MATERIALIZED VIEW i1 AS {MV}"))
    s.sql(f"SET backfill_rate_limit = {LIMITED}")
    window(f"snapshot backfill, rate limit {LIMITED:,} rows/s", create(f"CREATE MATERIALIZED VIEW i3 AS {MV}"))
    s.sql("SET backfill_rate_limit = default")
    s.sql(f"SET backfill_chunk_rows = {REARRANGED_BUDGET}")
    window(f"rearranged backfill, {REARRANGED_BUDGET:,} rows per epoch",
           create(f"CREATE MATERIALIZED VIEW i4 WITH (backfill_strategy = 'rearranged') AS {MV}"))
    s.sql("SET backfill_chunk_rows = 10000000")
    window("blocking backfill", create(f"CREATE MATERIALIZED VIEW i2 WITH (backfill_strategy = 'blocking') AS {MV}"))
    held = sum(j.held_back for j in s.jobs())
    s.close()
    base = stats[0]
    lines.append(f"- main graph: datagen 2,000 rows/s into two MVs, 1 s barriers; beside it an MV over the "
                 f"{ROWS:,}-row table is created (each window >= {PIPELINE_S:.0f} s, and as long as the backfill)")
    lines.append("")
    lines.append("| window | CREATE took s | epochs | p50 latency ms | p99 latency ms | p99 vs none | "
                 "longest gap between commits s |")
    lines.append("|---|---|---|---|---|---|---|")
    for label, p50, p99, gap, n, took in stats:
        lines.append(f"| {label} | {took:.1f} | {n} | {p50:.0f} | {p99:.0f} | {p99 / base[2]:.2f}x | {gap:.1f} |")
    lines.append("")
    lines.append(f"- main-graph epochs held back by the lag rule: {held}")
    return lines


def catch_up() -> list[str]:
    """Lag during the log-store phase with the upstream writing at half the job's consumption rate."""
    state: dict = {}

    def session(name: str) -> sparkwave.Session:
        s = sparkwave.connect(fresh_dir(name), spark=spark(), barrier_interval_ms=3_600_000)
        s.sql("CREATE TABLE u (k bigint, v bigint) APPEND ONLY")
        state.update(s=s, next=0)
        return s

    def write_epoch(rows: int) -> None:
        k = state["next"]
        state["s"].insert("u", pa.table({"k": pa.array(range(k, k + rows), pa.int64()),
                                         "v": pa.array(range(rows), pa.int64())}))
        state["next"] = k + rows
        state["s"].flush()

    def behind(s: sparkwave.Session, name: str, epochs: int, rows: int) -> int:
        write_epoch(rows)
        s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS SELECT k, v FROM u WHERE v % 3 = 0")
        for _ in range(epochs):
            write_epoch(rows)
        s.sql(f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = {JOB_LIMIT}")
        return s.catalog.job_of(name).id

    # calibrate: the job's log-consumption rate on a 10-epoch backlog
    s = session("catch-up-calibration")
    job = behind(s, "cal", 10, 2 * JOB_LIMIT)
    s.sql("WAIT")
    steps = [x for x in s.catalog.job_steps(job) if x.phase == "log_store"]
    log_rows = sum(x.rows for x in steps)
    log_time = max(1e-3, steps[-1].at - steps[0].at)
    rate = log_rows / log_time
    s.close()

    # the run: an epoch every second at half that rate, the job starting 10 epochs behind
    per_epoch = int(rate / 2)
    s = session("catch-up")
    job = behind(s, "mv", 10, per_epoch)
    t0 = time.time()
    i = 0
    while s.catalog.job(job).creating and i < 120:
        i += 1
        time.sleep(max(0.0, t0 + i - time.time()))  # the upstream's pace: one epoch per second
        write_epoch(per_epoch)
    s.sql("WAIT")
    series = [(round(st.at - t0, 1), st.lag_epochs, st.allowed_lag) for st in s.catalog.job_steps(job)
              if st.phase == "log_store"]
    merged = s.catalog.job(job).merged_epoch
    held = s.catalog.job(job).held_back
    s.close()
    return [
        f"- the job runs with BACKFILL_RATE_LIMIT = {JOB_LIMIT:,} rows/s, so that catching up takes long enough "
        f"to watch (unlimited, it consumes a 10-epoch backlog of 1M rows in well under a second)",
        f"- calibration: it consumed a 10-epoch backlog of {log_rows:,} upstream log rows in {log_time:.2f} s "
        f"({rate:,.0f} rows/s)",
        f"- run: the upstream appends {per_epoch:,} rows per 1 s epoch ({per_epoch / rate:.2f}x the job's rate); "
        f"the job starts 10 epochs behind",
        f"- lag per log-store checkpoint (seconds since resume, lag epochs, allowed lag): {series}",
        f"- merged at epoch {merged} after {len(series)} log-store checkpoints and {i} upstream epochs; "
        f"main-graph epochs held back: {held}",
    ]


def main() -> str:
    if os.environ.get("SPARKWAVE_BENCH_ONLY") == "impact":
        return report("Impact on the running pipeline", pipeline_impact())
    s = with_big("throughput", barrier_interval_ms=3_600_000)
    try:
        text = report("Backfill throughput", throughput(s))
    finally:
        s.close()
    text += report("Impact on the running pipeline", pipeline_impact())
    text += report("Catch-up", catch_up())
    return text


if __name__ == "__main__":
    main()
