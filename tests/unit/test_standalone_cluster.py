"""`devtools/spark_cluster.py` without Java: a daemon that cannot start is an error naming it and
where its log is, and the wrapper refuses a missing command (the cluster itself runs in
tests/integration/test_standalone.py and tests/crash/test_worker_kill.py)."""

from __future__ import annotations

import pytest

from sparkwave.core.errors import SparkwaveError
from sparkwave.devtools import spark_cluster
from sparkwave.devtools.spark_cluster import StandaloneCluster


def test_a_master_that_exits_at_start_is_named_with_its_log_folder(tmp_path, monkeypatch):
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-class").write_text("#!/bin/sh\necho \"no JVM here: $*\"\nexit 3\n")
    (home / "bin" / "spark-class").chmod(0o755)
    monkeypatch.setattr(spark_cluster, "spark_home", lambda: home)
    cluster = StandaloneCluster(tmp_path / "cluster")
    with pytest.raises(SparkwaveError, match=r"the master of the Spark cluster exited \(code 3\)") as e:
        cluster.start()
    assert str(tmp_path / "cluster") in str(e.value)
    log = (tmp_path / "cluster" / "master" / "master.log").read_text()
    assert "org.apache.spark.deploy.master.Master --host 127.0.0.1" in log  # bound to loopback only
    assert cluster.master is None and cluster.workers == []  # what was started is stopped


def test_an_application_on_the_cluster_binds_its_driver_to_loopback(tmp_path):
    conf = StandaloneCluster(tmp_path, workers=2).app_conf()
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert (conf["spark.cores.max"], conf["spark.executor.cores"]) == ("2", "1")  # one executor on each worker


def test_the_wrapper_needs_a_command():
    with pytest.raises(SystemExit) as e:
        spark_cluster.main(["--workers", "2"])
    assert e.value.code == 2
