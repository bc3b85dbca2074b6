"""Latency of UPDATE and DELETE by predicate on small tables: read and computed on the driver and
staged from Arrow (a small snapshot), against the same statements with the table read by Spark and
the batch written by a Spark job (`LOCAL_SNAPSHOT_BYTES = 0`), alternating in one process so both
see the same machine. Each statement touches a tenth of the table; the epoch after each round
commits what they staged."""

from __future__ import annotations

import os

import pyarrow as pa

import sparkwave
from bench.common import fresh_dir, median, report, spark, timed
from sparkwave.core import policy

ROUNDS = int(os.environ.get("SPARKWAVE_BENCH_DML_ROUNDS", 4))
STATEMENTS = 8  # of each kind per round
SIZES = (1_000, 5_000)


def _round(s: sparkwave.Session, rows: int, r: int) -> tuple[list[float], list[float]]:
    updates = [timed(lambda i=i: s.sql(f"UPDATE t SET v = v + 1 WHERE k % 10 = {i}")) for i in range(STATEMENTS)]
    deletes = []
    for i in range(STATEMENTS):
        lo = (r * STATEMENTS + i) * rows // 10 % rows
        deletes.append(timed(lambda lo=lo: s.sql(f"DELETE FROM t WHERE k >= {lo} AND k < {lo + rows // 10}")))
    s.flush()
    s.insert("t", pa.table({"k": list(range(rows)), "v": [0] * rows, "s": ["x"] * rows}))  # back to full
    s.flush()
    return updates, deletes


def main() -> str:
    lines = ["| table rows | statement | driver: median ms | Spark: median ms | driver / Spark |",
             "|---|---|---|---|---|"]
    default = policy.LOCAL_SNAPSHOT_BYTES
    for rows in SIZES:
        times: dict[tuple[str, bool], list[float]] = {}
        with sparkwave.connect(fresh_dir(f"dml-{rows}"), spark=spark(), barrier_interval_ms=3_600_000) as s:
            s.sql("CREATE TABLE t (k int, v int, s text, PRIMARY KEY (k))")
            s.insert("t", pa.table({"k": list(range(rows)), "v": [0] * rows, "s": ["x"] * rows}))
            s.flush()
            for r in range(2 * ROUNDS + 1):
                local = r % 2 == 1
                policy.LOCAL_SNAPSHOT_BYTES = default if local else 0
                try:
                    updates, deletes = _round(s, rows, r)
                finally:
                    policy.LOCAL_SNAPSHOT_BYTES = default
                if r:  # round 0 warms both paths up
                    times.setdefault(("UPDATE", local), []).extend(updates)
                    times.setdefault(("DELETE", local), []).extend(deletes)
        for kind in ("UPDATE", "DELETE"):
            d, k = median(times[(kind, True)]) * 1000, median(times[(kind, False)]) * 1000
            lines.append(f"| {rows:,} | {kind} (a tenth of the rows) | {d:.0f} | {k:.0f} | {d / k:.2f}x |")
    return report("Small UPDATE and DELETE: on the driver vs by Spark (median of "
                  f"{ROUNDS * STATEMENTS} statements each)", lines)


if __name__ == "__main__":
    main()
