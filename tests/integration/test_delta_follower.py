"""The relations' Delta logs follow the catalog (`meta/delta_follower.py`): an epoch commits without
waiting for Delta; a reader of a Delta log sees every committed epoch within `delta_lag_epochs`
epochs while the pipeline runs and all of them after close(); a Delta log that cannot be written
stops the pipeline at that bound, not before, and catches up once it can; retention and DROP never
meet a file the Delta log was not given."""

from __future__ import annotations

import pytest

import sparkwave
from sparkwave import PipelineError
from sparkwave.meta import delta_follower
from sparkwave.storage.table import StoredTable
from tests.delta_log_util import assert_delta_follows_catalog, delta_commits, delta_epochs, removed_unadded
from tests.oracle import rows_of


@pytest.fixture
def by_count(monkeypatch):
    """The follower groups by the number of waiting epochs alone (no 5 s clock in a test)."""
    monkeypatch.setattr(delta_follower, "MAX_DELAY_SECONDS", 3600.0)


def test_an_external_reader_sees_every_epoch_within_the_bound_and_all_after_close(spark, tmp_path, by_count):
    wh = tmp_path / "wh"
    committed = []
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("SET delta_lag_epochs = 4")
        s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); "
              "CREATE MATERIALIZED VIEW m AS SELECT k, v * 2 AS v2 FROM t WHERE v > 0")
        logs = {name: s.warehouse.relation_dir(name) / "log" for name in ("t", "m")}
        for i in range(12):
            s.sql(f"INSERT INTO t VALUES ({i}, {i + 1})")
            committed.append(s.flush())
            for name, log in logs.items():
                behind = [e for e in committed if e not in delta_epochs(log)]
                assert len(behind) <= 4, f"{name}'s Delta log is {len(behind)} epochs behind: {behind}"
        assert rows_of(s.table("m")) and len(rows_of(s.table("m"))) == 12
    for name, log in logs.items():
        assert delta_epochs(log) == set(committed), name  # close() drained the follower
        assert delta_commits(log) < len(committed), f"{name}: one Delta version per epoch, not per group"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        assert_delta_follows_catalog(s.catalog, s.warehouse)


def test_a_delta_log_that_cannot_be_written_stops_the_pipeline_at_the_bound(session, monkeypatch):
    s = session
    s.sql("SET delta_lag_epochs = 3; CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    failing = {"on": True, "failed": 0}
    original = StoredTable.commit_logs

    def commit_logs(self, files):
        if failing["on"] and self.name == "t":
            failing["failed"] += 1
            raise OSError("injected: no space left writing t's Delta log")
        return original(self, files)

    monkeypatch.setattr(StoredTable, "commit_logs", commit_logs)
    for i in range(3):  # within the bound: the epochs commit while Delta trails
        s.sql(f"INSERT INTO t VALUES ({i}, {i})")
        s.flush()
    assert len(rows_of(s.table("t"))) == 3
    s.sql("INSERT INTO t VALUES (3, 3)")
    with pytest.raises(PipelineError, match="Delta logs are 3 epochs behind.*no space left"):
        s.flush()
    assert failing["failed"] >= 1 and len(rows_of(s.table("t"))) == 3
    failing["on"] = False  # the disk is fixed
    s.flush()
    assert sorted(rows_of(s.table("t"))) == [(i, i) for i in range(4)]
    s.loop.committer.delta.drain()
    assert_delta_follows_catalog(s.catalog, s.warehouse)


def test_retention_gives_the_delta_log_its_files_before_it_removes_them(session, by_count):
    s = session
    s.sql("SET delta_lag_epochs = 40; CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    log = s.warehouse.relation_dir("t") / "log"
    for i in range(3):
        s.sql(f"INSERT INTO t VALUES ({i}, {i})")
        s.flush()
    assert delta_epochs(log) == set(), "the test needs epochs the Delta log does not hold yet"
    s.sql("SET retention_seconds = 0")
    s.sql("INSERT INTO t VALUES (9, 9)")
    s.flush()
    assert s.compact() == ["t"]
    assert s.catalog.log_files("t", -1, s.committed_epoch) == []
    assert removed_unadded(log) == [], "a RemoveAction for a file the Delta log was never given"
    s.loop.committer.delta.drain()
    assert_delta_follows_catalog(s.catalog, s.warehouse)
    assert sorted(rows_of(s.table("t"))) == [(0, 0), (1, 1), (2, 2), (9, 9)]


def test_a_dropped_relation_with_epochs_waiting_for_delta_leaves_nothing(session, by_count):
    s = session
    s.sql("SET delta_lag_epochs = 40; CREATE TABLE t (k int, v int, PRIMARY KEY (k)); "
          "CREATE TABLE u (k int, PRIMARY KEY (k))")
    s.sql("INSERT INTO t VALUES (1, 1); INSERT INTO u VALUES (1)")
    s.flush()
    assert s.loop.committer.delta.lag == 1
    s.sql("DROP TABLE t")
    s.loop.committer.delta.drain()
    assert not s.warehouse.relation_dir("t").exists(), "a Delta commit made the dropped table's folder again"
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    s.sql("INSERT INTO t VALUES (2, 2)")
    e = s.flush()
    s.loop.committer.delta.drain()
    assert delta_epochs(s.warehouse.relation_dir("t") / "log") == {e}
    assert_delta_follows_catalog(s.catalog, s.warehouse)
