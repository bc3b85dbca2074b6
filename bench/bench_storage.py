"""Storage: the cost of an epoch of 1k changed random keys into a 10M-row table and MV against the same
into 100k-row ones (target ratio <= 1.5 for the table's upsert step and the MV's step) and against a
copy-on-write delta-rs MERGE of the same change; the snapshot read of the 10M-row MV with 100
uncompacted epochs against right after compaction; and compaction's own cost. `--small`: reads and
compactions of small snapshots on the driver against the same through Spark."""

from __future__ import annotations

import os
import random
import sys

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

import sparkwave
from bench.common import fresh_dir, median, report, spark, timed
from sparkwave.core import policy

CHANGED = 1000
SMALL, LARGE = 100_000, int(os.environ.get("SPARKWAVE_BENCH_LARGE", 10_000_000))
LOG_EPOCHS = int(os.environ.get("SPARKWAVE_BENCH_LOG_EPOCHS", 100))
MV = "SELECT k, v * 2 AS v2, p FROM t WHERE v >= 0"


def changes(n: int, rnd: random.Random, i: int) -> pa.Table:
    keys = rnd.sample(range(n), CHANGED)
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([i * 10 + 1] * CHANGED, pa.int64()),
                     "p": pa.array([f"u{i}"] * CHANGED)})


def loaded(n: int, steps: list) -> sparkwave.Session:
    s = sparkwave.connect(fresh_dir(f"storage-{n}"), spark=spark(), barrier_interval_ms=3_600_000,
                          on_epoch=steps.append)
    s.sql("CREATE TABLE t (k bigint, v bigint, p varchar, PRIMARY KEY (k)); SET compaction_epochs = 1000000")
    s.insert("t", spark().range(n).selectExpr("id AS k", "id % 1000 AS v", "concat('p', id % 100) AS p"))
    s.flush()
    s.compact()
    s.sql(f"CREATE MATERIALIZED VIEW m AS {MV}")
    return s


def epoch_cost(s: sparkwave.Session, n: int, steps: list, epochs: int = 5) -> tuple[float, float, float]:
    """Median (whole epoch ms, table step ms, MV step ms) of epochs that each change 1k random keys."""
    rnd = random.Random(n)
    start = len(steps)
    for i in range(epochs):
        s.insert("t", changes(n, rnd, i))
        s.flush()
    recent = steps[start:]
    changed = [r for r in recent if r.rows_in]
    return (median([r.latency_ms for r in changed]), median([r.step_ms["t"] for r in changed]),
            median([r.step_ms["m"] for r in changed]))


def merge_cost(n: int) -> float:
    path = str(fresh_dir(f"merge-{n}"))
    for lo in range(0, n, 2_000_000):
        hi = min(n, lo + 2_000_000)
        write_deltalake(path, pa.table({"k": pa.array(range(lo, hi), pa.int64()),
                                        "v2": pa.array([x % 1000 * 2 for x in range(lo, hi)], pa.int64()),
                                        "p": pa.array([f"p{x % 100}" for x in range(lo, hi)])}), mode="append")
    dt = DeltaTable(path)
    src = changes(n, random.Random(7), 1).rename_columns(["k", "v2", "p"])
    return timed(lambda: dt.merge(src, "t.k = s.k", source_alias="s", target_alias="t")
                 .when_matched_update_all().when_not_matched_insert_all().execute()) * 1000


def scan(s: sparkwave.Session) -> float:
    return timed(lambda: s.table("m").write.format("noop").mode("overwrite").save())


def main() -> str:
    lines = []
    steps_small: list = []
    with loaded(SMALL, steps_small) as s:
        small_epoch, small_table, small_mv = epoch_cost(s, SMALL, steps_small)
    steps: list = []
    with loaded(LARGE, steps) as s:
        large_epoch, large_table, large_mv = epoch_cost(s, LARGE, steps)
        for i in range(LOG_EPOCHS - 5):
            s.insert("t", changes(LARGE, random.Random(1000 + i), 100 + i))
            s.flush()
        uncompacted = median([scan(s) for _ in range(3)])
        compaction = timed(lambda: s.compact("m"))
        compacted = median([scan(s) for _ in range(3)])
    merge_ms = merge_cost(LARGE)
    lines += [
        f"1k changed random keys per epoch; MV `{MV}`; sizes {SMALL:,} and {LARGE:,} rows.", "",
        "| measure | 100k-row MV | 10M-row MV | ratio 10M/100k |", "|---|---|---|---|",
        f"| table step of the epoch: upsert with old-row lookup (ms) | {small_table:.0f} | {large_table:.0f} | "
        f"{large_table / small_table:.2f}x |",
        f"| MV step of the epoch (ms) | {small_mv:.0f} | {large_mv:.0f} | {large_mv / small_mv:.2f}x |",
        f"| whole epoch, table + MV (ms) | {small_epoch:.0f} | {large_epoch:.0f} | "
        f"{large_epoch / small_epoch:.2f}x |", "",
        "| measure | ms | vs sparkwave MV step at 10M |", "|---|---|---|",
        f"| sparkwave MV step, 10M rows | {large_mv:.0f} | 1.00x |",
        f"| delta-rs copy-on-write MERGE of the same 1k keys into 10M rows | {merge_ms:.0f} | "
        f"{merge_ms / large_mv:.1f}x |", "",
        "| snapshot read of the 10M-row MV (full scan) | s | vs after compaction |", "|---|---|---|",
        f"| with {LOG_EPOCHS} uncompacted log epochs | {uncompacted:.2f} | {uncompacted / compacted:.2f}x |",
        f"| right after compaction | {compacted:.2f} | 1.00x |",
        f"| compaction itself | {compaction:.2f} | {compaction / compacted:.2f}x |",
    ]
    return report("Storage: epoch cost by table size, MERGE, snapshot reads, compaction", lines)


def small_reads(rows: tuple[int, ...] = (100, 2_000, 20_000), rounds: int = 5) -> str:
    """A user's read of a small keyed table (`s.table(...)` to Arrow, with 10 uncompacted epochs of
    updates over its base, and right after compaction), and its compaction (of one more epoch), on
    the driver (pyarrow) and through Spark (`LOCAL_SNAPSHOT_BYTES = 0`), alternating in one process;
    medians."""
    lines = ["| rows | read with overlay: driver (ms) | Spark (ms) | Spark / driver | read of a base alone: driver "
             "(ms) | Spark (ms) | Spark / driver | compaction: driver (ms) | Spark (ms) | Spark / driver |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    limit = policy.LOCAL_SNAPSHOT_BYTES
    for n in rows:
        with sparkwave.connect(fresh_dir(f"storage-small-{n}"), spark=spark(), barrier_interval_ms=3_600_000) as s:
            s.sql("CREATE TABLE t (k bigint, v bigint, p varchar, PRIMARY KEY (k)); SET compaction_epochs = 1000000")
            s.insert("t", pa.table({"k": list(range(n)), "v": list(range(n)), "p": [f"p{i % 100}" for i in range(n)]}))
            s.flush()
            s.compact()
            rnd = random.Random(n)
            for i in range(10):
                keys = rnd.sample(range(n), n // 10)
                s.insert("t", pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([i] * len(keys), pa.int64()),
                                        "p": pa.array([f"u{i}"] * len(keys))}))
                s.flush()
            times: dict[str, list[float]] = {}

            def reads(label: str, times: dict[str, list[float]] = times) -> None:
                for r in range(rounds + 1):  # the first round warms both ways up
                    for way, cap in (("driver", limit), ("spark", 0)):
                        policy.LOCAL_SNAPSHOT_BYTES = cap
                        t = timed(lambda: s.table("t").toArrow())
                        if r:
                            times.setdefault(f"{label}{way}", []).append(t * 1000)
            reads("")
            for r in range(rounds + 1):
                for way, cap in (("driver", limit), ("spark", 0)):
                    policy.LOCAL_SNAPSHOT_BYTES = cap
                    s.sql(f"INSERT INTO t VALUES (0, {r}, '{way}')")
                    s.flush()
                    c = timed(lambda: s.compact("t"))
                    if r:
                        times.setdefault(f"c_{way}", []).append(c * 1000)
            reads("p_")  # right after compaction: the base alone, no overlay
            policy.LOCAL_SNAPSHOT_BYTES = limit
            d, k, pd, pk, cd, ck = (median(times[w]) for w in ("driver", "spark", "p_driver", "p_spark", "c_driver",
                                                                  "c_spark"))
            lines.append(f"| {n:,} | {d:.0f} | {k:.0f} | **{k / d:.1f}x** | {pd:.0f} | {pk:.0f} | **{pk / pd:.1f}x** | "
                         f"{cd:.0f} | {ck:.0f} | **{ck / cd:.1f}x** |")
    return report("Small snapshots on the driver: reads and compaction", lines)


if __name__ == "__main__":
    small_reads() if "--small" in sys.argv else main()
