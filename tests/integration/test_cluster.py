"""sparkwave on a Spark cluster, in `make test`: a scenario of its own (tests/cluster_child.py) on
`local-cluster[2,1,1024]`. `make test-cluster` runs the oracle, backfill, Kafka and Nexmark tests
whole on the same kind of cluster."""

from __future__ import annotations

import re
import subprocess
import sys

from tests import remove_worker_dir
from tests.crash.test_crash import ROOT


def test_mvs_and_backfills_equal_duckdb_on_a_cluster_of_executor_jvms(tmp_path):
    child = subprocess.run([sys.executable, "-m", "tests.cluster_child", str(tmp_path / "wh")], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    app = re.search(r"^app (\S+)$", child.stdout, re.M)
    if app:
        remove_worker_dir(app.group(1))
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-4000:]
    assert "executors 2" in child.stdout, child.stdout  # two executor JVMs, not the driver's threads
    assert "checked 2 epochs" in child.stdout, child.stdout
