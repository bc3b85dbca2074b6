"""An epoch's relations executed at once (`EXECUTE_THREADS`) vs one after another, in one process:
`bench_barrier`'s 20 project-filter MVs over a datagen table at 100 rows/s, p50/p99 epoch latency.
Runs alternate (1 thread, the default, twice), so both see the same machine; the first run also
warms Spark up, which is why each setting runs twice."""

from __future__ import annotations

import sparkwave.meta.barrier.schedule as barrier
from bench.bench_barrier import measure
from bench.common import report

MVS = 20


def main() -> str:
    default = barrier.EXECUTE_THREADS
    rows = ["| run | threads | p50 ms | p99 ms |", "|---|---|---|---|"]
    try:
        for run, threads in enumerate((1, default, 1, default)):
            barrier.EXECUTE_THREADS = threads
            p50, p99 = measure(MVS, ingest=True)
            rows.append(f"| {run + 1} | {threads} | {p50:.0f} | {p99:.0f} |")
    finally:
        barrier.EXECUTE_THREADS = default
    return report(f"Concurrent execution within an epoch: {MVS} project-filter MVs, 100 rows/s", rows)


if __name__ == "__main__":
    main()
