"""An epoch's relations executed at once (`EXECUTE_THREADS`) vs one after another, in one process:
20 project-filter MVs over a datagen table at 100 rows/s, a 1 s interval, p50/p99 epoch latency.
Runs alternate (1 thread, 4 threads, twice), so both see the same machine; the first run also warms
Spark up, which is why each setting runs twice."""

from __future__ import annotations

import time

import sparkwave
import sparkwave.meta.barrier as barrier
from bench.common import fresh_dir, pct, report, spark

EPOCHS = 20
MVS = 20


def measure(threads: int) -> tuple[float, float]:
    barrier.EXECUTE_THREADS = threads
    wh = fresh_dir(f"concurrent-{threads}")
    with sparkwave.connect(wh, spark=spark(), barrier_interval_ms=1000) as s:
        s.loop.stop()  # epochs are driven here, one after another, with the same 1 s interval semantics
        s.sql("CREATE TABLE t (id bigint, v int, c varchar, PRIMARY KEY (id)) WITH (connector = 'datagen', "
              "fields.id.kind = 'sequence', fields.v.max = '1000', datagen.rows.per.second = '100')")
        for i in range(MVS):
            s.sql(f"CREATE MATERIALIZED VIEW m{i} AS SELECT id, v * {i + 1} AS w, upper(c) AS c FROM t "
                  f"WHERE v > {i * 10}")
        for _ in range(3):  # warm-up
            s.loop.run_epoch()
        lat = []
        for _ in range(EPOCHS):
            report_ = s.loop.run_epoch()
            assert report_ is not None
            lat.append(report_.latency_ms)
            time.sleep(max(0.0, 1.0 - lat[-1] / 1000))  # the source's rate is per wall-clock second
        s.loop.start()
    return pct(lat, 50), pct(lat, 99)


def main() -> str:
    default = barrier.EXECUTE_THREADS
    rows = ["| run | threads | p50 ms | p99 ms |", "|---|---|---|---|"]
    try:
        for run, threads in enumerate((1, default, 1, default)):
            p50, p99 = measure(threads)
            rows.append(f"| {run + 1} | {threads} | {p50:.0f} | {p99:.0f} |")
    finally:
        barrier.EXECUTE_THREADS = default
    return report(f"Concurrent execution within an epoch: {MVS} project-filter MVs, 100 rows/s", rows)


if __name__ == "__main__":
    main()
