"""The barrier loop under failures: a failed epoch is replayed with its persisted plan, and an
epoch that keeps failing is reported by flush() without losing what was written."""

from __future__ import annotations

import pytest

from sparkwave import PipelineError
from sparkwave.core.errors import CatalogError
from sparkwave.storage.table import StoredTable
from tests.oracle import rows_of


@pytest.fixture
def pipeline(session):
    session.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); CREATE MATERIALIZED VIEW m AS SELECT k, v FROM t")
    return session


def failing_commits(monkeypatch, relation: str, times: int) -> dict:
    """Make committing `relation`'s log file fail `times` times (an injected IO failure reading the
    staged file for the catalog's commit, e.g. a disk gone)."""
    state = {"left": times, "failed": 0}
    original = StoredTable.staged

    def staged(self, epoch, rows=None):
        if self.name == relation and state["left"] != 0:
            state["left"] -= 1
            state["failed"] += 1
            raise OSError(f"injected failure committing {relation}")
        return original(self, epoch, rows)

    monkeypatch.setattr(StoredTable, "staged", staged)
    return state


def test_a_failed_epoch_is_replayed_with_its_plan(pipeline, monkeypatch):
    state = failing_commits(monkeypatch, "m", 1)  # t's file is gathered, m's fails: the catalog commits nothing
    pipeline.sql("INSERT INTO t VALUES (1, 10), (2, 20)")
    pipeline.flush()
    assert state["failed"] == 1
    # the failed attempt's epoch is the first committed one, replayed with its plan (its DML batch)
    first = pipeline.catalog.committed_epochs()[0]
    assert sorted(rows_of(pipeline.table("m", as_of=first))) == [(1, 10), (2, 20)]
    assert sorted(rows_of(pipeline.table("t"))) == [(1, 10), (2, 20)]
    assert sorted(rows_of(pipeline.table("m"))) == [(1, 10), (2, 20)]


def test_an_epoch_that_keeps_failing_is_reported_and_nothing_is_lost(pipeline, monkeypatch):
    state = failing_commits(monkeypatch, "t", -1)
    pipeline.sql("INSERT INTO t VALUES (1, 10)")
    with pytest.raises(PipelineError, match="injected failure committing t"):
        pipeline.flush()
    assert state["failed"] >= 3
    state["left"] = 0  # the disk is fixed
    pipeline.sql("INSERT INTO t VALUES (2, 20)")
    pipeline.flush()
    assert sorted(rows_of(pipeline.table("m"))) == [(1, 10), (2, 20)]


def test_a_materialized_view_that_keeps_failing_is_taken_out_and_the_others_go_on(session, tmp_path):
    """An MV whose epoch fails `MAX_ATTEMPTS` times in a row leaves the main graph with what depends
    on it; the other relations commit that epoch and the next ones, and the stopped MVs say why."""
    s = session
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); "
          "CREATE MATERIALIZED VIEW good AS SELECT k, v FROM t; "
          "CREATE MATERIALIZED VIEW bad AS SELECT k, CASE WHEN v < 100 THEN v ELSE raise_error('v too large') END "
          "AS v FROM t; "
          "CREATE MATERIALIZED VIEW below AS SELECT count(*) AS n FROM bad; "
          "CREATE MATERIALIZED VIEW total AS SELECT sum(v) AS s FROM good")
    s.sql(f"CREATE SINK out FROM bad WITH (connector = 'deltalake', location = '{tmp_path / 'out'}')")
    s.sql("INSERT INTO t VALUES (1, 10)")
    s.flush()
    assert rows_of(s.table("bad")) == [(1, 10)] and rows_of(s.table("below")) == [(1,)]
    s.sql("INSERT INTO t VALUES (2, 500)")  # fails `bad` on every attempt
    s.flush()  # returns: the epoch committed without `bad` and `below`
    assert sorted(rows_of(s.table("good"))) == [(1, 10), (2, 500)] and rows_of(s.table("total")) == [(510,)]
    with pytest.raises(CatalogError, match=r"'bad' is stopped.*failed 3 times at epoch \d+: .*v too large"):
        s.table("bad")
    with pytest.raises(CatalogError, match=r"'below' is stopped.*with its upstream 'bad'"):
        s.sql("SELECT n FROM below")
    jobs = {r.name: r for r in s.sql("SHOW JOBS").collect()}
    assert (jobs["bad"].phase, jobs["below"].phase, jobs["good"].phase) == ("failed", "failed", "created")
    assert sorted(r[0] for r in rows_of(s.sql("SHOW MATERIALIZED VIEWS"))) == ["bad", "below", "good", "total"]
    with pytest.raises(CatalogError, match="'bad' is stopped"):
        s.sql("CREATE MATERIALIZED VIEW over_bad AS SELECT k FROM bad")
    s.sql("INSERT INTO t VALUES (3, 5)")
    assert s.flush() > 0 and rows_of(s.table("total")) == [(515,)]
    while (sink := s.sql("SHOW SINKS").collect()[0])["last_error"] is None:  # says so, not silently idle
        s.sinks.wait_moved(0.5)
    assert "'bad' is out of the pipeline" in sink["last_error"]
    s.sql("DROP SINK out; DROP MATERIALIZED VIEW below; DROP MATERIALIZED VIEW bad; "
          "CREATE MATERIALIZED VIEW bad AS SELECT k, v < 100 AS small FROM t")
    s.sql("INSERT INTO t VALUES (4, 1)")
    s.flush()
    assert sorted(rows_of(s.table("bad"))) == [(1, True), (2, False), (3, True), (4, True)]
