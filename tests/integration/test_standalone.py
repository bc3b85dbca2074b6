"""sparkwave on a Spark standalone cluster (a master and two workers started from the pip-installed
PySpark, all on 127.0.0.1: `sparkwave.devtools.spark_cluster`): the cluster scenario of `make test`
(tests/cluster_child.py: MVs and a snapshot backfill against DuckDB, the driver a child process with
two executors on the workers), and `sparkwave serve --spark-master spark://...` answering psycopg.
Under `make test-cluster` both run on that target's cluster (`SPARKWAVE_TEST_MASTER`); otherwise the
module starts its own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkwave.devtools.spark_cluster import StandaloneCluster
from tests import TEST_MASTER
from tests.oracle import Model, multiset, values_sql
from tests.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
APP = "sparkwave-standalone-serve"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """The cluster's master URL and the settings of an application on it (two one-core executors)."""
    probe = StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2, cores=1, memory="1g")
    if TEST_MASTER.startswith("spark://"):
        yield TEST_MASTER, probe.app_conf()
        return
    with probe:
        yield probe.url, probe.app_conf()


def child_env(conf: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_SUBMIT_ARGS": " ".join(f"--conf {k}={v}" for k, v in conf.items()) + " pyspark-shell"}


def test_mvs_and_a_backfill_equal_duckdb_on_a_standalone_cluster(cluster, tmp_path):
    url, conf = cluster
    child = subprocess.run([sys.executable, "-m", "tests.cluster_child", str(tmp_path / "wh"), url], cwd=ROOT,
                           env=child_env(conf), capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-4000:]
    assert "executors 2" in child.stdout, child.stdout  # the workers' executors, not the driver's threads
    assert "checked 2 epochs" in child.stdout, child.stdout


def Serve(warehouse: Path, url: str, conf: dict[str, str]) -> ServeProcess:
    """`sparkwave serve --spark-master URL`, every address of it on 127.0.0.1."""
    confs = [a for k, v in {**conf, "spark.app.name": APP}.items() for a in ("--conf", f"{k}={v}")]
    return ServeProcess(warehouse, "--spark-master", url, *confs, env={"SPARK_LOCAL_IP": "127.0.0.1"})


def test_serve_with_spark_master_runs_on_the_cluster_and_answers_psycopg(cluster, tmp_path):
    url, conf = cluster
    rows = [(k, k % 4, k * 3) for k in range(40)]
    mv = "SELECT g, count(*) AS n, sum(v) AS s FROM t WHERE v % 2 = 0 GROUP BY g"
    serve = Serve(tmp_path / "wh", url, conf)
    try:
        assert url in serve.wait_for("spark started", 300), serve.output
        with serve.connect() as c:
            c.execute("CREATE TABLE t (k int, g int, v int, PRIMARY KEY (k))")
            c.execute(f"INSERT INTO t VALUES {values_sql(rows[:25])}")
            c.execute("FLUSH")
            c.execute(f"CREATE MATERIALIZED VIEW m AS {mv}")  # a snapshot backfill on the executors
            c.execute(f"INSERT INTO t VALUES {values_sql(rows[25:])}")
            c.execute("DELETE FROM t WHERE k < 5")
            c.execute("FLUSH")
            got = multiset(c.execute("SELECT g, n, s FROM m").fetchall())
            model = Model()
            model.table("t", "k INTEGER, g INTEGER, v INTEGER", ["k", "g", "v"], ["k"])
            model.view("m", mv)
            model.apply_epoch([("insert", "t", rows)])
            model.apply_epoch([("delete", "t", "k < 5")])
            assert got == multiset(model.rows("m"))
        assert serve.stop() == 0, serve.output
    finally:
        serve.stop()
