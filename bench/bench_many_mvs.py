"""Epoch latency with many MVs of mixed kinds (issue 47): person/auction/bid at 2,300 bids/s, the
barrier loop on its own at 1 s, and 0, 10, 40 (and with `SPARKWAVE_BENCH_MANY_MVS=0,10,40,100`, 100)
MVs cycling through eight kinds: filters and projections over each table, a group-by, a TUMBLE
window, a count(DISTINCT) and a join with an aggregate. Each count runs in turn in one process, so
every figure is a ratio against the tables alone measured beside it.
Targets: 40 MVs p50 <= 1.5x the tables alone; 100 MVs p99 <= 1 s; one more stateless MV <= 5 ms
and one more join + aggregate <= 15 ms per small epoch."""

from __future__ import annotations

import os
import threading

import sparkwave
from bench.common import fresh_dir, pct, report, spark
from bench.sampler import Sampler
from sparkwave.cli.nexmark_sql import tables_sql
from sparkwave.meta.barrier import EpochReport

EPOCHS = int(os.environ.get("SPARKWAVE_BENCH_MANY_EPOCHS", 20))
COUNTS = [int(n) for n in os.environ.get("SPARKWAVE_BENCH_MANY_MVS", "0,10,40").split(",")]
WARMUP = 4
PROFILE = os.environ.get("SPARKWAVE_BENCH_PROFILE") == "1"  # print where the last count's epochs spend their time

# (kind, stateless, template): `{i}` makes each MV's constants its own
KINDS: list[tuple[str, bool, str]] = [
    ("filter", True, "SELECT auction, bidder, price, date_time FROM bid WHERE price > {i}000"),
    ("projection", True, "SELECT auction, bidder, price * {i} AS scaled, upper(channel) AS channel FROM bid"),
    ("person filter", True, "SELECT id, name, city FROM person WHERE state = 'CA' AND id % 7 <> {i} % 7"),
    ("auction projection", True, "SELECT id, seller, category, initial_bid + {i} AS bid_plus FROM auction"),
    ("group-by", False, "SELECT channel, count(*) AS bids, max(price) AS top FROM bid WHERE price > {i} "
                        "GROUP BY channel"),
    ("tumble", False, "SELECT auction, window_start, count(*) AS bids FROM TUMBLE(bid, date_time, "
                      "INTERVAL '{w}' SECOND) GROUP BY auction, window_start"),
    ("count distinct", False, "SELECT auction % {m} AS g, count(DISTINCT bidder) AS bidders FROM bid "
                              "GROUP BY auction % {m}"),
    ("join + aggregate", False, "SELECT a.category, count(*) AS bids, max(b.price) AS top FROM bid b "
                                "JOIN auction a ON b.auction = a.id WHERE b.price > {i} GROUP BY a.category"),
]


def mv_sql(n: int) -> list[tuple[str, str, str]]:
    """The first `n` MVs: (name, kind, CREATE statement)."""
    out = []
    for i in range(n):
        kind, _, template = KINDS[i % len(KINDS)]
        name = f"mv{i:03d}_{kind.replace(' + ', '_').replace(' ', '_').replace('-', '_')}"
        query = template.format(i=i + 1, w=5 + i % 10, m=10 + i)
        out.append((name, kind, f"CREATE MATERIALIZED VIEW {name} AS {query}"))
    return out


def measure(n: int) -> tuple[list[float], dict[str, float]]:
    """Latencies (ms) of `EPOCHS` epochs after a warm-up with `n` MVs, and each kind's median step ms."""
    reports: list[EpochReport] = []
    done, ready = threading.Event(), threading.Event()

    def on_epoch(r: EpochReport) -> None:
        if ready.is_set() and r.rows_in:
            reports.append(r)
        if len(reports) >= WARMUP + EPOCHS:
            done.set()

    mvs = mv_sql(n)
    with sparkwave.connect(fresh_dir(f"many-mvs-{n}"), spark=spark(), barrier_interval_ms=1000,
                           on_epoch=on_epoch) as s:
        s.sql(tables_sql(2300))
        s.sql("SET background_ddl = true")
        for _, _, create in mvs:
            s.sql(create)
        s.wait()
        ready.set()
        with Sampler() as sampler:
            if not done.wait(900):
                raise TimeoutError(f"{len(reports)} of {WARMUP + EPOCHS} epochs in 15 minutes with {n} MVs")
        if PROFILE and n == COUNTS[-1]:
            print(sampler.table(60), flush=True)
    kept = reports[WARMUP:WARMUP + EPOCHS]
    kind_of = {name: kind for name, kind, _ in mvs}
    steps: dict[str, list[float]] = {}
    for r in kept:
        for name, ms in r.step_ms.items():
            steps.setdefault(kind_of.get(name, "table"), []).append(ms)
    return [r.latency_ms for r in kept], {k: pct(v, 50) for k, v in steps.items()}


def main() -> str:
    lines = ["| MVs | p50 ms | p99 ms | p50 / tables alone | median step ms by kind |", "|---|---|---|---|---|"]
    base = None
    for n in COUNTS:
        lat, steps = measure(n)
        p50 = pct(lat, 50)
        base = p50 if n == 0 else base
        ratio = f"{p50 / base:.2f}x" if base else "-"
        kinds = ", ".join(f"{k} {ms:.0f}" for k, ms in sorted(steps.items()))
        lines.append(f"| {n} | {p50:.0f} | {pct(lat, 99):.0f} | {ratio} | {kinds} |")
    return report(f"Many MVs: epoch latency, {EPOCHS} epochs per count (`bench_many_mvs`)", lines)


if __name__ == "__main__":
    main()
