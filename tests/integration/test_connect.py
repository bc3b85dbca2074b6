"""sparkwave on a Spark Connect session (`SparkSession.builder.remote("sc://...")`): a local Connect
server started from PySpark's own jar (`sparkwave.devtools.spark_connect`), the warehouse a folder
both see. Every MV equals DuckDB's evaluation at every epoch, a snapshot backfill included; a
statement's timeout cancels its operation through a job tag. `make test` runs the small scenario;
`make test-cluster` (SPARKWAVE_TEST_CONNECT_FULL=1) the hypothesis-driven one over the oracle's MVs."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkwave
from sparkwave.core import spark_features
from sparkwave.core.errors import QueryCanceledError
from sparkwave.core.spark import connect_spark
from sparkwave.devtools.spark_connect import ConnectServer
from tests.integration.test_oracle import FAST_PHASES, MVS, T1, T2, T3, check, stmt
from tests.oracle import Model, multiset, rows_of, to_sql

FULL = os.environ.get("SPARKWAVE_TEST_CONNECT_FULL") == "1"
MODE = "SPARK_CONNECT_MODE_ENABLED"  # PySpark's functions build Connect columns while it is set


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    with ConnectServer(tmp_path_factory.mktemp("connect")) as server:
        yield server


@pytest.fixture(scope="module")
def remote_session(connect_server):
    """One Connect session for the module. The process's classic session (other tests') stays usable:
    the environment PySpark reads the mode from is as it was outside this module's tests."""
    before = os.environ.get(MODE)
    try:
        spark = connect_spark(connect_server.url)  # sets the mode: as it was until a test asks (`remote`)
    finally:
        _restore(before)
    yield spark
    os.environ[MODE] = "1"
    try:
        spark.stop()
    finally:
        _restore(before)


def _restore(before: str | None) -> None:
    if before is None:
        os.environ.pop(MODE, None)
    else:
        os.environ[MODE] = before


@pytest.fixture
def remote(remote_session):
    before = os.environ.get(MODE)
    os.environ[MODE] = "1"
    try:
        yield remote_session
    finally:
        _restore(before)


def _model() -> Model:
    model = Model()
    model.table("t1", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
    model.table("t2", "a INTEGER, b VARCHAR", ["a", "b"], [])
    model.table("t3", "id INTEGER, d DOUBLE, c DECIMAL(10, 2)", ["id", "d", "c"], [], row_id=True)
    return model


def _run(s: sparkwave.Session, model: Model, epochs: list[list[tuple]], late: int, strategy: str) -> None:
    """The oracle's tables and MVs (`test_oracle.py`), one MV created at epoch `late` by a backfill."""
    late_mv = MVS[2]
    s.sql(";".join([T1, T2, T3]))
    created = []
    for name, sql in MVS:
        if (name, sql) != late_mv:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
            created.append(name)
    for i, batch in enumerate(epochs):
        if i == late:
            s.sql(f"CREATE MATERIALIZED VIEW {late_mv[0]} WITH (backfill_strategy = '{strategy}') AS {late_mv[1]}")
            model.view(*late_mv)
            created.append(late_mv[0])
            check(s, model, s.committed_epoch, created)
        for statement in batch:
            s.sql(to_sql(statement))
        model.apply_epoch(batch)
        check(s, model, s.flush(), created)
        if i == 1:
            s.compact()
            check(s, model, s.committed_epoch, created)


SMALL = [
    [("insert", "t1", [(1, 2, "x"), (2, 5, None), (3, -1, "yy")]), ("insert", "t2", [(1, "x"), (3, "zzz")]),
     ("insert", "t3", [(1, 0.25, "1.25"), (2, 3.75, None)])],
    [("update", "t1", {"a": "a + 3"}, "k BETWEEN 1 AND 2"), ("insert", "t2", [(None, "Ab"), (7, "x")]),
     ("update", "t3", {"d": "d + 1"}, "id < 2")],
    [("delete", "t1", "k BETWEEN 2 AND 3"), ("insert", "t1", [(4, 9, "zzz"), (1, 0, "x")]),
     ("delete", "t3", "id = 2")],
]


def test_session_is_connect_and_mvs_equal_duckdb_at_every_epoch(remote, tmp_path):
    assert spark_features.is_connect(remote)
    model = _model()
    with sparkwave.connect(tmp_path / "wh", spark=remote, barrier_interval_ms=3_600_000) as s:
        _run(s, model, SMALL, late=1, strategy="snapshot")
        got = multiset(rows_of(s.sql("SELECT parity, count(*) FROM m3 GROUP BY parity")))
        assert got == multiset(model.db.execute("SELECT parity, count(*) FROM m3 GROUP BY parity").fetchall())
        # a query's views are bound to its plan (Connect analyses at each action, after the query returned)
        series = "SELECT g.x, t1.a FROM generate_series(0, 5) AS g(x) JOIN t1 ON t1.k = g.x"
        want = multiset(model.db.execute(series).fetchall())
        assert want and multiset(rows_of(s.sql(series))) == want


def test_snapshot_backfill_of_a_join_and_aggregate_equals_duckdb(remote, tmp_path):
    model = Model()
    model.table("o", "id INTEGER, c INTEGER, amount INTEGER", ["id", "c", "amount"], ["id"])
    model.table("c", "c INTEGER, region VARCHAR", ["c", "region"], ["c"])
    orders = [(i, i % 37, (i * 7) % 101) for i in range(3000)]
    customers = [(c, ["n", "s", "e", None][c % 4]) for c in range(40)]
    mv = ("rev", "SELECT region, count(*) AS n, sum(amount) AS total FROM o JOIN c ON o.c = c.c GROUP BY region")
    with sparkwave.connect(tmp_path / "wh", spark=remote, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE o (id int, c int, amount int, PRIMARY KEY (id));"
              "CREATE TABLE c (c int, region varchar, PRIMARY KEY (c))")
        batches = [("insert", "o", orders[:2000]), ("insert", "c", customers)]
        for statement in batches:
            s.sql(to_sql(statement))
        model.apply_epoch(batches)
        s.flush()
        s.sql(f"CREATE MATERIALIZED VIEW {mv[0]} WITH (backfill_strategy = 'snapshot') AS {mv[1]}")
        model.view(*mv)
        after = [("insert", "o", orders[2000:]), ("update", "c", {"region": "'w'"}, "c < 5"),
                 ("delete", "o", "id < 100")]
        for statement in after:
            s.sql(to_sql(statement))
        model.apply_epoch(after)
        s.wait()  # the snapshot backfill merged
        epoch = s.flush()
        assert multiset(rows_of(s.table("rev", as_of=epoch))) == multiset(model.rows("rev"))


def test_statement_timeout_interrupts_the_operation_by_its_tag(remote, tmp_path):
    from sparkwave.frontend.timeout import statement_deadline

    slow = remote.range(0, 1 << 40, numPartitions=2).selectExpr("sum(id * 2) AS s")
    with pytest.raises(QueryCanceledError, match="statement timeout"), statement_deadline(remote, 300):
        slow.collect()
    assert remote.range(3).count() == 3  # the session goes on


@pytest.mark.skipif(not FULL, reason="make test-cluster (SPARKWAVE_TEST_CONNECT_FULL=1)")
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(st.lists(stmt, min_size=1, max_size=4), min_size=2, max_size=5),
       late=st.integers(0, 4), strategy=st.sampled_from(["snapshot", "blocking"]))
def test_generated_dml_mvs_equal_duckdb_on_connect(remote, tmp_path_factory, epochs, late, strategy):
    with sparkwave.connect(tmp_path_factory.mktemp("wh"), spark=remote, barrier_interval_ms=3_600_000) as s:
        _run(s, _model(), epochs, late, strategy)


def test_serve_with_spark_remote_answers_postgres_clients(connect_server, tmp_path):
    """`sparkwave serve --spark-remote sc://...`: no Spark of its own; psycopg creates, writes and reads."""
    from tests.integration.test_serve_lifecycle import Serve

    serve = Serve(tmp_path / "wh", "--spark-remote", connect_server.url)
    assert any(f"Spark Connect at {connect_server.url}" in line for line in serve.output), serve.output
    with serve.connect() as c:
        c.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
        c.execute("CREATE MATERIALIZED VIEW m AS SELECT v % 2 AS p, count(*) AS n, sum(v) AS s FROM t GROUP BY 1")
        c.execute("INSERT INTO t VALUES (1, 1), (2, 2), (3, 3), (4, 5)")
        c.execute("FLUSH")
        assert c.execute("SELECT p, n, s FROM m ORDER BY p").fetchall() == [(0, 1, 2), (1, 3, 9)]
        c.execute("DELETE FROM t WHERE k = 3")
        c.execute("FLUSH")
        assert c.execute("SELECT p, n, s FROM m ORDER BY p").fetchall() == [(0, 1, 2), (1, 2, 6)]
    assert serve.stop() == 0


def test_serve_refuses_both_a_master_and_a_remote(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "sparkwave.cli.main", "serve", "--warehouse", str(tmp_path / "wh"),
                           "--spark-master", "local[1]", "--spark-remote", "sc://127.0.0.1:1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "exclude each other" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_kafka_table_read_by_the_servers_python_workers_equals_duckdb(remote, kafka, tmp_path):
    """Past `policy.KAFKA_DRIVER_ROWS` an epoch's Kafka range is read by the Python data source on the
    server's executors (registered through the Connect session), not by this process."""
    from sparkwave.core import policy
    from tests.kafka_util import (
        EV_COLS,
        EV_DDL,
        Topic,
        check_epoch,
        ev_sql,
        good,
        offsets_at,
        plain_rows,
        produce_events,
        read_by,
    )

    topic = Topic(kafka.bootstrap, 2)
    n = policy.KAFKA_DRIVER_ROWS * 2 + 500
    produce_events(topic, 0, n)
    mvs = {"per_name": "SELECT name, count(*) AS n, sum(price) AS total FROM ev GROUP BY name",
           "cheap": "SELECT id, p, o FROM ev WHERE price < 10"}
    with sparkwave.connect(tmp_path / "wh", spark=remote, barrier_interval_ms=3_600_000) as s:
        s.sql(ev_sql(topic, **{"max.rows.per.epoch": str(n)}))
        for name, sql in mvs.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        epoch = s.flush()
        while sum(offsets_at(s, "ev", epoch).values()) < n:
            epoch = s.flush()
        rows = plain_rows(read_by(topic, offsets_at(s, "ev", epoch)), EV_COLS, good)
        assert len(rows) == n
        check_epoch(s, epoch, {"ev": (EV_DDL, rows)}, mvs)


def _busy(marker: str):  # type: ignore[no-untyped-def]
    def run(batches):  # type: ignore[no-untyped-def]
        import pathlib
        import time

        pathlib.Path(marker).touch()
        while True:  # until interrupted
            time.sleep(0.05)
        yield from batches
    return run


def test_a_new_owner_interrupts_the_operations_its_dead_predecessors_session_left_running(
        remote, connect_server, tmp_path):
    """A SIGKILLed client's operations run on in its server session; the next owner stops them before
    it recovers (`spark_features.take_over_session`)."""
    import threading

    from pyspark.sql import SparkSession

    wh, marker = tmp_path / "wh", tmp_path / "started"
    old = SparkSession.builder.remote(connect_server.url).create()  # the predecessor's own server session
    try:
        with sparkwave.connect(wh, spark=old, barrier_interval_ms=3_600_000):
            pass  # its session is recorded as the owner's
        errors: list[BaseException] = []

        def left_running() -> None:
            try:
                old.range(1, numPartitions=1).mapInArrow(_busy(str(marker)), "id bigint").collect()
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=left_running, daemon=True)
        t.start()
        while not marker.exists() and t.is_alive():  # the operation's task has started on the server
            t.join(0.05)
        assert marker.exists(), errors
        with sparkwave.connect(wh, spark=remote, barrier_interval_ms=3_600_000) as s:
            assert s.catalog.setting(spark_features.SESSION_SETTING) == str(remote.client._session_id)
        t.join(120)
        assert not t.is_alive(), "the predecessor's operation still runs"
        assert errors and "cancel" in str(errors[0]).lower(), errors
    finally:
        old.client.close()
