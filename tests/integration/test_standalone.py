"""sparkwave on a Spark standalone cluster (a master and two workers started from the pip-installed
PySpark, all on 127.0.0.1: `sparkwave.devtools.spark_cluster`): the cluster scenario of `make test`
(tests/cluster_child.py: MVs and a snapshot backfill against DuckDB, the driver a child process with
two executors on the workers), and `sparkwave serve --spark-master spark://...` answering psycopg.
Under `make test-cluster` both run on that target's cluster (`SPARKWAVE_TEST_MASTER`); otherwise the
module starts its own."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sparkwave.devtools.spark_cluster import StandaloneCluster
from tests import TEST_MASTER
from tests.oracle import Model, multiset, values_sql

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


class Serve:
    """`sparkwave serve --spark-master URL` as a process, its console lines read by a thread."""

    def __init__(self, warehouse: Path, url: str, conf: dict[str, str]) -> None:
        confs = [a for k, v in {**conf, "spark.app.name": APP}.items() for a in ("--conf", f"{k}={v}")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparkwave.cli.main", "serve", "--warehouse", str(warehouse), "--port", "0",
             "--http-port", "0", "--spark-master", url, *confs], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} from sparkwave serve in {timeout} s:\n{''.join(self.output)}") \
                    from None
            if text in line:
                return line

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"sparkwave serve did not stop within 120 s:\n{''.join(self.output)}") from None


def test_serve_with_spark_master_runs_on_the_cluster_and_answers_psycopg(cluster, tmp_path):
    url, conf = cluster
    rows = [(k, k % 4, k * 3) for k in range(40)]
    mv = "SELECT g, count(*) AS n, sum(v) AS s FROM t WHERE v % 2 = 0 GROUP BY g"
    serve = Serve(tmp_path / "wh", url, conf)
    try:
        assert url in serve.wait_for("spark started"), serve.output
        line = serve.wait_for("listening on")
        port = int(re.search(r"listening on \S+:(\d+)", line).group(1))
        with psycopg.connect(f"host=127.0.0.1 port={port} user=tester dbname=dev", autocommit=True) as c:
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
