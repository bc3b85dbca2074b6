"""Epoch latency of the demo pipeline: person/auction/bid at 2,300 bids/s with the demo's four MVs
and Nexmark q4, against the same three tables with no MV, in one process (runs alternate, so both
see the same machine). The barrier loop runs on its own at a 1 s interval, as in the demo.
Targets: p50 <= 500 ms, p99 <= 1 s, and p50 at most 1.5x that of the tables alone."""

from __future__ import annotations

import os
import threading

import sparkwave
from bench.common import fresh_dir, pct, report, spark
from sparkwave.cli.demo import FIRST_MVS
from sparkwave.cli.nexmark_sql import QUERIES, tables_sql
from sparkwave.meta.barrier import EpochReport

EPOCHS = int(os.environ.get("SPARKWAVE_BENCH_DEMO_EPOCHS", 30))
WARMUP = 4


def measure(with_mvs: bool) -> tuple[list[float], dict[str, float]]:
    """Latencies (ms) of `EPOCHS` epochs after a warm-up, and each relation's median step ms."""
    reports: list[EpochReport] = []
    done, ready = threading.Event(), threading.Event()

    def on_epoch(r: EpochReport) -> None:
        if ready.is_set() and r.rows_in:
            reports.append(r)
        if len(reports) >= WARMUP + EPOCHS:
            done.set()

    wh = fresh_dir(f"demo-latency-{with_mvs}")
    with sparkwave.connect(wh, spark=spark(), barrier_interval_ms=1000, on_epoch=on_epoch) as s:
        s.sql(tables_sql(2300))
        if with_mvs:
            s.sql(FIRST_MVS)
            s.sql(f"CREATE MATERIALIZED VIEW q4 AS {QUERIES['q4']}")
        s.wait()
        ready.set()  # epochs from here on run the whole pipeline (the first few are skipped as warm-up)
        if not done.wait(600):
            raise TimeoutError(f"{len(reports)} of {WARMUP + EPOCHS} epochs in 10 minutes")
    kept = reports[WARMUP:WARMUP + EPOCHS]
    steps: dict[str, list[float]] = {}
    for r in kept:
        for name, ms in r.step_ms.items():
            steps.setdefault(name, []).append(ms)
    return [r.latency_ms for r in kept], {n: pct(v, 50) for n, v in steps.items()}


def main() -> str:
    lines = ["| run | pipeline | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|"]
    p50s: dict[bool, list[float]] = {False: [], True: []}
    steps: dict[str, float] = {}
    for run, with_mvs in enumerate((False, True, False, True)):
        lat, steps_of = measure(with_mvs)
        p50s[with_mvs].append(pct(lat, 50))
        if with_mvs:
            steps = steps_of
        lines.append(f"| {run + 1} | {'4 demo MVs + q4' if with_mvs else 'tables only'} | {pct(lat, 50):.0f} | "
                     f"{pct(lat, 99):.0f} | {max(lat):.0f} |")
    lines += ["", "p50 with MVs vs tables only, per pair of runs: " + ", ".join(
        f"{m / t:.2f}x" for t, m in zip(p50s[False], p50s[True], strict=True)), "",
        "| relation | median step ms (last run with MVs) |", "|---|---|",
        *[f"| {n} | {ms:.0f} |" for n, ms in sorted(steps.items(), key=lambda kv: -kv[1])]]
    return report(f"Demo pipeline: epoch latency at 2,300 bids/s, 1 s interval, {EPOCHS} epochs per run", lines)


if __name__ == "__main__":
    main()
