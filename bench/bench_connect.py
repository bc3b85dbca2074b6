"""Spark Connect against a classic session in the same run: epoch latency (p50/p99 of a small DML epoch
through 5 MVs: projections and aggregates) and backfill rows/s (a snapshot-strategy CREATE over a table
of `ROWS` rows: an aggregate and a filter/project MV), each as a ratio of the classic figure. Both on
`local[2]`: classic in this process's child, Connect on a local server (`devtools/spark_connect.py`)
reached by another child. A process holds one kind of session (`core/spark_features.py`), hence the children.

python -m bench.bench_connect [ROWS]"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

import sparkwave
from bench.common import fresh_dir, pct, report

ROWS = int(os.environ.get("SPARKWAVE_BENCH_CONNECT_ROWS", 1_000_000))
EPOCHS = 40
MVS = [
    "SELECT k, v * 2 AS v2, upper(p) AS up FROM t WHERE v > 10",
    "SELECT p, count(*) AS n, sum(v) AS s FROM t GROUP BY p",
    "SELECT v % 10 AS d, max(k) AS top FROM t GROUP BY v % 10",
    "SELECT k, v FROM t WHERE p = 'p3'",
    "SELECT p, min(v) AS lo FROM t WHERE v > 500 GROUP BY p",
]
BACKFILLS = {"agg": "SELECT p, count(*) AS n, sum(v) AS s FROM big GROUP BY p",
             "flt": "SELECT k, v * 2 AS v2, p FROM big WHERE v >= 100"}


def _rows(start: int, n: int) -> pa.Table:
    ks = pa.array(range(start, start + n), pa.int64())
    return pa.table({"k": ks, "v": pa.array([k % 1000 for k in range(start, start + n)], pa.int64()),
                     "p": pa.array([f"p{k % 100}" for k in range(start, start + n)], pa.string())})


def epoch_latency(spark: object, wh: Path) -> list[float]:
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.loop.stop()  # epochs driven here, one after another
        s.sql("CREATE TABLE t (k bigint, v bigint, p varchar, PRIMARY KEY (k))")
        for i, sql in enumerate(MVS):
            s.sql(f"CREATE MATERIALIZED VIEW m{i} AS {sql}")
        lat = []
        for e in range(EPOCHS + 3):
            s.insert("t", _rows((e % 10) * 50, 100))  # inserts and updates of 100 keys
            report_ = s.loop.run_epoch()
            assert report_ is not None
            if e >= 3:  # warm-up
                lat.append(report_.latency_ms)
        s.loop.start()
    return lat


def backfill_rate(spark: object, wh: Path, rows: int) -> dict[str, float]:
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE big (k bigint, v bigint, p varchar, PRIMARY KEY (k)); SET compaction_epochs = 1000000")
        step = 200_000
        for start in range(0, rows, step):
            s.insert("big", _rows(start, min(step, rows - start)))
        s.flush()
        s.compact()
        out = {}
        for name, sql in BACKFILLS.items():
            t0 = time.perf_counter()
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")  # snapshot strategy; returns once merged
            out[name] = rows / (time.perf_counter() - t0)
    return out


def child(kind: str, url: str | None, rows: int, out: str) -> None:
    from sparkwave.core.spark import connect_spark, create_spark

    spark = connect_spark(url) if url else create_spark("local[2]")
    lat = epoch_latency(spark, fresh_dir(f"connect-bench-{kind}-epochs"))
    rates = backfill_rate(spark, fresh_dir(f"connect-bench-{kind}-backfill"), rows)
    Path(out).write_text(json.dumps({"p50": pct(lat, 50), "p99": pct(lat, 99), "rates": rates}))


def _run_child(kind: str, url: str | None, rows: int) -> dict:
    out = fresh_dir(f"connect-bench-{kind}.json")
    cmd = [sys.executable, "-m", "bench.bench_connect", "--child", kind, url or "", str(rows), str(out)]
    subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parents[1],
                   env={**os.environ, "SPARKWAVE_SHUFFLE_PARTITIONS": "2"})
    return json.loads(out.read_text())


def main(rows: int = ROWS) -> str:
    """Two rounds, classic then Connect and Connect then classic (the machine's load and caches drift),
    each figure the mean of its two; the server idles while a classic child runs."""
    from sparkwave.devtools.spark_connect import ConnectServer

    runs: dict[str, list[dict]] = {"classic": [], "connect": []}
    with ConnectServer(fresh_dir("connect-bench-server"), master="local[2]") as server:
        for order in (("classic", "connect"), ("connect", "classic")):
            for kind in order:
                runs[kind].append(_run_child(kind, server.url if kind == "connect" else None, rows))

    def mean(kind: str, get) -> float:  # type: ignore[no-untyped-def]
        return sum(get(r) for r in runs[kind]) / len(runs[kind])

    def ratios(get) -> str:  # type: ignore[no-untyped-def]
        return ", ".join(f"{get(b) / get(a):.2f}x" for a, b in zip(runs["classic"], runs["connect"], strict=True))

    lines = ["| | classic local[2] | Spark Connect (local[2] server) | Connect / classic (mean; per round) |",
             "|---|---|---|---|"]
    for p in ("p50", "p99"):
        a, b = mean("classic", lambda r, p=p: r[p]), mean("connect", lambda r, p=p: r[p])
        lines.append(f"| epoch latency {p} (5 MVs, 100-row DML epoch) | {a:.0f} ms | {b:.0f} ms | "
                     f"{b / a:.2f}x; {ratios(lambda r, p=p: r[p])} |")
    for name, sql in BACKFILLS.items():
        a, b = mean("classic", lambda r, n=name: r["rates"][n]), mean("connect", lambda r, n=name: r["rates"][n])
        lines.append(f"| backfill `{sql}` over {rows:,} rows | {a:,.0f} rows/s | {b:,.0f} rows/s | "
                     f"{b / a:.2f}x; {ratios(lambda r, n=name: r['rates'][n])} |")
    return report("Spark Connect against a classic session", lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, url, n, out = sys.argv[2:6]
        child(kind, url or None, int(n), out)
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else ROWS)
