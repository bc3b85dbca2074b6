"""Recovery does not hold `connect()`: a plan a crash left uncommitted is replayed by the barrier
loop's thread, so a warehouse opens (and can be inspected, or its culprit dropped) however long the
replay takes."""

from __future__ import annotations

import threading

import pytest

import sparkwave
from sparkwave.core.errors import PipelineError
from sparkwave.frontend import ddl
from sparkwave.stream.dataflow import Dataflow


def test_connect_returns_while_the_pending_epoch_is_still_replaying(spark, tmp_path, monkeypatch):
    wh = tmp_path / "wh"
    step = Dataflow.step
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT k, v * 2 AS v2 FROM t")
        s.sql("INSERT INTO t VALUES (1, 1)")
        s.flush()

        def failing(self, *args, **kwargs):
            raise RuntimeError("the machine went away")

        monkeypatch.setattr(Dataflow, "step", failing)
        s.sql("INSERT INTO t VALUES (2, 2)")
        with pytest.raises(PipelineError):
            s.flush()
        planned = s.catalog.uncommitted_plan()
        assert planned is not None  # the epoch holding the insert is planned, not committed

    replaying, release = threading.Event(), threading.Event()

    def slow(self, *args, **kwargs):
        replaying.set()
        assert release.wait(300), "the test never released the replay"
        return step(self, *args, **kwargs)

    monkeypatch.setattr(Dataflow, "step", slow)
    opened: list[sparkwave.Session] = []
    opener = threading.Thread(target=lambda: opened.append(
        sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000)))
    opener.start()
    try:
        assert replaying.wait(300), "the pending epoch was not replayed"
        opener.join(120)  # a bound for a failing run, not synchronisation: the replay is held
        assert opened, "connect() waited for the replay"
        s = opened[0]
        assert s.catalog.uncommitted_plan() == planned  # still replaying while the session is usable
        assert sorted(tuple(r) for r in s.sql("SHOW TABLES").collect()) == [("t",)]
    finally:
        release.set()
        opener.join()
    with opened[0] as s:
        s.flush()
        assert s.catalog.uncommitted_plan() is None
        assert sorted(tuple(r) for r in s.table("m").collect()) == [(1, 2), (2, 4)]


def test_drop_abandons_an_epoch_that_does_not_finish(session, spark, monkeypatch):
    """An epoch stuck in a Spark job (here: one that would run for days) held DROP, which needs the
    epoch lock, forever: now DROP cancels the epoch's jobs, and the plan is replayed without the MV."""
    s = session
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    s.sql("CREATE MATERIALIZED VIEW stuck AS SELECT k, v FROM t")
    s.sql("CREATE MATERIALIZED VIEW fine AS SELECT k, v + 1 AS w FROM t")
    s.flush()
    step = Dataflow.step
    started = threading.Event()

    def endless(self, *args, **kwargs):
        if self.rel.name == "stuck":
            started.set()
            spark.range(10**13).selectExpr("sum(id)").collect()  # in the epoch's job group
        return step(self, *args, **kwargs)

    monkeypatch.setattr(Dataflow, "step", endless)
    monkeypatch.setattr(ddl, "ABANDON_AFTER_SECONDS", 0.5)
    s.sql("INSERT INTO t VALUES (1, 10)")
    s.loop.request_barrier()
    assert started.wait(300), "the epoch did not reach the stuck MV"
    s.sql("DROP MATERIALIZED VIEW stuck")
    assert s.catalog.relation("stuck") is None
    s.flush()  # the abandoned plan, replayed without the dropped MV
    assert sorted(tuple(r) for r in s.table("fine").collect()) == [(1, 11)]
    assert sorted(tuple(r) for r in s.table("t").collect()) == [(1, 10)]


def test_a_failed_create_leaves_no_folder_for_the_next_create_of_its_name(session, monkeypatch):
    """A blocking CREATE that failed in its build left `tables/<name>` (its Delta tables) until the
    next open: a CREATE TABLE of the same name in between found the MV's Delta log."""
    s = session
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    s.sql("INSERT INTO t VALUES (1, 1)")
    s.flush()

    def broken(self, *args, **kwargs):
        raise RuntimeError("the build ran out of memory")

    monkeypatch.setattr(Dataflow, "build", broken)
    s.sql("SET backfill_strategy = 'blocking'")
    with pytest.raises(Exception, match="ran out of memory"):
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT k, count(*) AS n FROM t GROUP BY k")
    monkeypatch.undo()
    assert not (s.warehouse.root / "tables" / "m").exists()
    assert s.catalog.pending_folders() == set()
    s.sql("CREATE TABLE m (a text, b double precision, PRIMARY KEY (a))")
    s.sql("INSERT INTO m VALUES ('x', 1.5)")
    s.flush()
    assert sorted(tuple(r) for r in s.table("m").collect()) == [("x", 1.5)]
