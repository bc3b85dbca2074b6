"""A long run's per-epoch cost: a warehouse carrying 100k epochs of catalog history, 100k applied
requests and a DML counter past 2^21 batches, against a fresh one, measured in the same process
(the ratio is the figure). Each epoch inserts one row through SQL into a table with two MVs (a
projection and an aggregate). Then a maintenance pass (`compact()`: compaction, retention, Delta
checkpoints, history pruning) and the same epochs again: the history no reader needs is gone."""

from __future__ import annotations

import time

import sparkwave
from bench.common import fresh_dir, median, pct, report, spark
from sparkwave.core.epoch import epoch_from_ms

EPOCHS = 40
HISTORY = 100_000


def _epochs(s: sparkwave.Session, start: int) -> tuple[float, float]:
    lat = []
    for i in range(EPOCHS):
        s.sql(f"INSERT INTO t VALUES ({start + i}, {i % 7})")
        t0 = time.perf_counter()
        s.flush()
        lat.append((time.perf_counter() - t0) * 1000)
    return median(lat), pct(lat, 99)


def _pipeline(s: sparkwave.Session) -> None:
    s.sql("SET retention_seconds = 0")
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    s.sql("CREATE MATERIALIZED VIEW p AS SELECT k, v * 2 AS v2 FROM t WHERE v > 1")
    s.sql("CREATE MATERIALIZED VIEW a AS SELECT v, count(*) AS n FROM t GROUP BY v")
    s.flush()


def _history(s: sparkwave.Session) -> None:
    """100k committed epochs before now, 100k applied requests, 2^21 DML batches."""
    now = int(time.time() * 1000) - HISTORY * 1000
    with s.catalog.transaction() as db:
        db.executemany("INSERT INTO epochs (epoch, prev, state, plan, planned_at, committed_at, rows_in, latency_ms) "
                       "VALUES (?, ?, 'committed', '{}', ?, ?, 0, 1.0)",
                       [(epoch_from_ms(now + i * 1000), epoch_from_ms(now + (i - 1) * 1000), now / 1000 + i,
                         now / 1000 + i) for i in range(HISTORY)])
        db.executemany("INSERT INTO requests (job, kind, value, requested_at, applied_at, outcome) "
                       "VALUES (1, 'rate_limit', 0, ?, ?, 'applied')", [(now / 1000, now / 1000)] * HISTORY)
    s.catalog.next_counter("dml_batch", 1 << 21)
    s.catalog.next_counter("dml_ids", 1 << 40)


def main() -> str:
    lines = [f"{EPOCHS} epochs of one SQL INSERT each + flush, a table with two MVs (median / p99 flush ms):", ""]
    with sparkwave.connect(fresh_dir("long-run-fresh"), spark=spark(), barrier_interval_ms=3_600_000) as s:
        _pipeline(s)
        _epochs(s, 0)  # warm-up
        fresh = _epochs(s, 10_000)
    with sparkwave.connect(fresh_dir("long-run-history"), spark=spark(), barrier_interval_ms=3_600_000) as s:
        _pipeline(s)
        _history(s)
        _epochs(s, 0)
        loaded = _epochs(s, 10_000)
        t0 = time.perf_counter()
        s.compact()
        maintenance_s = time.perf_counter() - t0
        rows = s.catalog._one("SELECT count(*) FROM epochs")[0]
        pruned = _epochs(s, 20_000)
    lines += [
        f"- fresh warehouse: {fresh[0]:.0f} / {fresh[1]:.0f} ms (baseline)",
        f"- with {HISTORY:,} epochs + {HISTORY:,} requests of history, counter past 2^21 batches: "
        f"{loaded[0]:.0f} / {loaded[1]:.0f} ms ({loaded[0] / fresh[0]:.2f}x median)",
        f"- after one maintenance pass ({maintenance_s:.1f} s; `epochs` left with {rows:,} rows): "
        f"{pruned[0]:.0f} / {pruned[1]:.0f} ms ({pruned[0] / fresh[0]:.2f}x median)",
    ]
    return report("Long run: per-epoch cost with 100k epochs of history", lines)


if __name__ == "__main__":
    main()
