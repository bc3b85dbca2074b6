"""A worker of a Spark standalone cluster (its JVM, its executor and their Python workers) SIGKILLed
while its executor runs a task of a big epoch or of a backfill chunk: Spark runs the lost work again
on the executor that is left (or sparkwave retries the epoch or the chunk), and every MV equals DuckDB's
answer, then and for the epochs after. The driver is a child process (tests/worker_kill_child.py)
on a cluster of the test's own (two workers of one core); the kill is synchronised on Spark's stage
state there. `make test-cluster` and `make chaos` run these."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from sparkwave.devtools.spark_cluster import StandaloneCluster
from tests.crash.test_crash import ROOT


@pytest.mark.chaos
@pytest.mark.parametrize("when", ["epoch", "backfill"])
def test_a_worker_killed_mid_task_loses_nothing(tmp_path, when):
    with StandaloneCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g") as cluster:
        victim = cluster.workers[0].proc
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_SUBMIT_ARGS": cluster.submit_args()}
        child = subprocess.run([sys.executable, "-m", "tests.worker_kill_child", str(tmp_path / "wh"), cluster.url,
                                str(victim.pid), when], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=900)
        out = child.stdout
        print(out)  # shown with a failure
        assert child.returncode == 0, out[-2000:] + child.stderr[-4000:]
        assert victim.wait(60) == -signal.SIGKILL
        survivor = cluster.workers[1].proc
        assert survivor.poll() is None
    assert re.findall(r"^executors (\d+)$", out, re.M) == ["2", "1"], out  # both, then the one left
    failed = re.search(r"^failed tasks (\d+)$", out, re.M)
    assert failed and int(failed.group(1)) >= 1, out  # the victim's task was lost mid-run, and run again
    assert "checked 4 epochs" in out, out
    groups = re.search(r"^killed in groups (.*)$", out, re.M)  # the kill fell in the work named, not in a check's read
    want = "sparkwave-epoch-" if when == "epoch" else "sparkwave-job-"
    assert groups and any(g.startswith(want) for g in groups.group(1).split()), out
