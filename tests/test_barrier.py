"""The barrier loop under failures: a failed epoch is replayed with its persisted plan, and an
epoch that keeps failing is reported by flush() without losing what was written."""

from __future__ import annotations

import pytest

from sparkwave import PipelineError
from sparkwave.storage.table import StoredTable
from tests.oracle import rows_of


@pytest.fixture
def pipeline(session):
    session.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); CREATE MATERIALIZED VIEW m AS SELECT k, v FROM t")
    return session


def failing_commits(monkeypatch, relation: str, times: int) -> dict:
    """Make committing `relation`'s log fail `times` times (an injected IO failure, e.g. a full disk)."""
    state = {"left": times, "failed": 0}
    original = StoredTable.commit_log

    def commit_log(self, epoch):
        if self.name == relation and state["left"] != 0:
            state["left"] -= 1
            state["failed"] += 1
            raise OSError(f"injected failure committing {relation}")
        return original(self, epoch)

    monkeypatch.setattr(StoredTable, "commit_log", commit_log)
    return state


def test_a_failed_epoch_is_replayed_with_its_plan(pipeline, monkeypatch):
    state = failing_commits(monkeypatch, "m", 1)  # t's commit succeeds, m's fails: a half-committed epoch
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
