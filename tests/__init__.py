"""The test suite. Child processes (crash, chaos and cluster scenarios) import their helpers from here."""

import os
import shutil
from pathlib import Path

# `make test-cluster` sets it to a cluster of executor JVMs (`local-cluster[2,1,1024]`): nothing may
# rely on executors sharing the driver's process or memory. The crash tests' children inherit it.
TEST_MASTER = os.environ.get("SPARKWAVE_TEST_MASTER", "local[2]")

# The JVMs of the crash, chaos and CLI children (which inherit the variable) live for seconds to a
# minute on 2 cores, where the C2 compiler's threads took CPU from the queries for code that rarely
# ran long enough to repay it: a dataflow crash child ran in 64-68 s with C1 alone against 75-85 s.
# The pytest workers' own JVMs live for the whole run and keep both tiers (`conftest.spark`): with C1
# alone their longer tests ran up to 1.8x slower.
CHILD_JVM_OPTS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", CHILD_JVM_OPTS)
# One shuffle partition per core of `local[2]` (sparkwave's default, 4, is for `local[*]`): a
# stage's tasks each cost a fixed amount, and the suite's data is small (a crash child: 67.7 -> 63.6 s).
os.environ.setdefault("SPARKWAVE_SHUFFLE_PARTITIONS", "2")


def remove_worker_dir(app_id: str) -> None:
    """A local cluster's workers keep each application's executor folders under PySpark's `work/`;
    a test removes its own application's when done."""
    import pyspark

    shutil.rmtree(Path(pyspark.__file__).parent / "work" / app_id, ignore_errors=True)
