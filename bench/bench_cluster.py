"""sparkwave on a Spark standalone cluster against `local[2]`, in the same run: a big epoch (N changed
bids through a join + aggregate MV, `big_epoch_rows = 0`: every step on the executors) and a snapshot
backfill (a filter/project MV over an M-row table), in rows per second. The cluster is a master and two
workers of one core and 1 GiB each on this machine (`sparkwave.devtools.spark_cluster`), so both sides
have two cores; what differs is that the cluster's tasks run in executor JVMs of their own, reached
over the network stack, with the warehouse the folder both see. Each measurement runs in a child
process (a process holds one SparkContext), the two masters alternating, `REPEATS` times each; the
figures are medians.

Usage: python -m bench.bench_cluster (sizes: SPARKWAVE_BENCH_CLUSTER_EPOCH_ROWS, ..._BACKFILL_ROWS,
..._REPEATS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sparkwave
from bench.common import median, report
from sparkwave.devtools.spark_cluster import StandaloneCluster

EPOCH_ROWS = int(os.environ.get("SPARKWAVE_BENCH_CLUSTER_EPOCH_ROWS", 500_000))
BACKFILL_ROWS = int(os.environ.get("SPARKWAVE_BENCH_CLUSTER_BACKFILL_ROWS", 2_000_000))
REPEATS = int(os.environ.get("SPARKWAVE_BENCH_CLUSTER_REPEATS", 2))
AUCTIONS, SELLERS = 10_000, 500
JOIN_MV = ("SELECT a.seller, count(*) AS n, sum(b.price) AS s, max(b.price) AS mx "
           "FROM bids b JOIN auctions a ON b.auction = a.id GROUP BY a.seller")
SCAN_MV = "SELECT k, v * 2 AS v2, p FROM big WHERE v >= 100"


def child(master: str, folder: str) -> None:
    """One measurement of each on `master`; prints `RESULT {json}`."""
    from sparkwave.core.spark import create_spark

    spark = create_spark(master)
    out: dict[str, float] = {}
    with sparkwave.connect(Path(folder) / "epoch", spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE auctions (id bigint, seller bigint, PRIMARY KEY (id)); "
              "CREATE TABLE bids (id bigint, auction bigint, price bigint, PRIMARY KEY (id)); "
              "SET compaction_epochs = 1000000")
        s.insert("auctions", spark.range(AUCTIONS).selectExpr("id", f"id % {SELLERS} AS seller"))
        s.flush()
        s.sql(f"CREATE MATERIALIZED VIEW sellers AS {JOIN_MV}")
        s.sql(f"SET big_epoch_rows = 0; SET dml_rows_per_epoch = {EPOCH_ROWS}")
        for i in range(2):  # the first warms the JVMs (JIT, the executors' Python workers); the second is timed
            s.insert("bids", spark.range(EPOCH_ROWS).selectExpr(
                f"id + {i * EPOCH_ROWS} AS id", f"(id * 13) % {AUCTIONS} AS auction", "(id * 7919) % 100000 AS price"))
            t0 = time.perf_counter()
            s.flush()
            out["epoch_s"] = time.perf_counter() - t0
    with sparkwave.connect(Path(folder) / "backfill", spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE big (k bigint, v bigint, p varchar, PRIMARY KEY (k)); SET compaction_epochs = 1000000")
        s.insert("big", spark.range(BACKFILL_ROWS).selectExpr("id AS k", "id % 1000 AS v",
                                                              "concat('p', id % 100) AS p"))
        s.flush()
        s.compact()
        for i in range(2):
            t0 = time.perf_counter()
            s.sql(f"CREATE MATERIALIZED VIEW m{i} AS {SCAN_MV}")
            out["backfill_s"] = time.perf_counter() - t0
        out["backfill_mv_rows"] = float(s.table("m1").count())
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


def measure(master: str, env: dict[str, str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="sparkwave-bench-cluster-") as folder:
        proc = subprocess.run([sys.executable, "-m", "bench.bench_cluster", "--child", master, folder],
                              env=env, capture_output=True, text=True, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"the {master} child failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-4000:]}")
    return dict(json.loads(line[len("RESULT "):]))


def main() -> str:
    runs: dict[str, list[dict[str, float]]] = {"local[2]": [], "standalone": []}
    with tempfile.TemporaryDirectory(prefix="sparkwave-cluster-") as folder, \
            StandaloneCluster(folder, workers=2, cores=1, memory="1g") as cluster:
        cluster_env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_SUBMIT_ARGS": cluster.submit_args()}
        for _ in range(REPEATS):
            runs["local[2]"].append(measure("local[2]", dict(os.environ)))
            runs["standalone"].append(measure(cluster.url, cluster_env))
    epoch = {k: median([r["epoch_s"] for r in v]) for k, v in runs.items()}
    backfill = {k: median([r["backfill_s"] for r in v]) for k, v in runs.items()}
    lines = ["| | local[2] | standalone (2 workers x 1 core) | standalone / local[2] |", "|---|---|---|---|"]
    lines.append(f"| big epoch, {EPOCH_ROWS:,} changed bids, join + aggregate MV (rows/s) | "
                 f"{EPOCH_ROWS / epoch['local[2]']:,.0f} | {EPOCH_ROWS / epoch['standalone']:,.0f} | "
                 f"**{epoch['local[2]'] / epoch['standalone']:.2f}x** |")
    lines.append(f"| snapshot backfill, {BACKFILL_ROWS:,}-row table, filter/project MV (rows/s) | "
                 f"{BACKFILL_ROWS / backfill['local[2]']:,.0f} | {BACKFILL_ROWS / backfill['standalone']:,.0f} | "
                 f"**{backfill['local[2]'] / backfill['standalone']:.2f}x** |")
    lines.append("")
    lines.append(f"Medians of {REPEATS} runs each, alternating; every run: {json.dumps(runs)}")
    return report("A Spark standalone cluster against local[2] (same run, same machine)", lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3])
    else:
        main()
