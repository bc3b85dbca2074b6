"""The relations' Delta logs following the catalog, without Spark: a real SQLite catalog and real
delta-rs tables. A group of epochs is one Delta version; a commit whose catalog record was lost is
found by its transaction and never made twice; retention's removal is idempotent and only of files
the log holds; the follower groups by count, honours its bound (and fails it loudly), and drains."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from sparkwave.core.catalog import NOT_IN_DELTA, Catalog, Relation
from sparkwave.core.errors import PipelineError
from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.meta import delta_follower
from sparkwave.meta.delta_follower import DeltaFollower
from sparkwave.storage.delta_log import commit_pending, retire_delta, sync_log
from sparkwave.storage.store import Store
from sparkwave.storage.table import StoredTable
from sparkwave.storage.warehouse import Warehouse
from tests.delta_log_util import added_twice, delta_commits, delta_epochs, delta_files, removed_unadded

SCHEMA = Schema((Column("k", SqlType("int")),), ("k",))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    catalog = Catalog(tmp_path / "catalog.db")
    st = Store(None, Warehouse(tmp_path), catalog)  # type: ignore[arg-type]  # no Spark: nothing here reads with it
    for name in ("a", "b"):
        rel = Relation(name, "table", SCHEMA, {}, 0)
        with catalog.transaction() as db:
            catalog.add_relation(db, rel)
        st.stored(rel).create()
    return st


def commit(store: Store, epoch: int, names: tuple[str, ...] = ("a", "b")) -> None:
    """An epoch as the barrier loop commits it: each relation's log file staged, then the catalog's
    commit records them as not in Delta."""
    store.catalog.persist_plan(epoch, epoch - 1, {}, [])
    logs = []
    for name in names:
        stored = store.stored(store.relation(name))
        rows = pa.table({"_seq": pa.array([0], pa.int64()), "_op": pa.array([0], pa.int8()),
                         "_vnode": pa.array([0], pa.int16()), "k": pa.array([epoch], pa.int32()),
                         "_epoch": pa.array([epoch], pa.int64())})
        logs.append((name, stored.stage_log(epoch, rows), 1, NOT_IN_DELTA))
    store.catalog.commit_epoch(epoch, logs, {}, 1, 1.0)


def log_dir(store: Store, name: str) -> Path:
    return store.warehouse.relation_dir(name) / "log"


def test_a_group_of_epochs_is_one_version_and_a_lost_record_is_not_committed_twice(store):
    for e in (1, 2, 3):
        commit(store, e)
    done = commit_pending(store, "a", -1, 3)  # the Delta commit made, its catalog record lost (a crash)
    assert done is not None and done[1] == [1, 2, 3]
    assert delta_epochs(log_dir(store, "a")) == {1, 2, 3} and delta_commits(log_dir(store, "a")) == 1
    assert store.catalog.delta_backlog() == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3)]
    assert sync_log(store, "a", -1, 3) == done[2]  # found by its transaction: recorded, not added again
    assert delta_commits(log_dir(store, "a")) == 1 and added_twice(log_dir(store, "a")) == []
    assert store.catalog.delta_backlog() == [("b", 1), ("b", 2), ("b", 3)]


def test_retention_removes_only_what_the_log_holds_and_a_repeat_finds_it_gone(store):
    for e in (1, 2, 3):
        commit(store, e)
    sync_log(store, "a", -1, 3)
    store.catalog.retire("a", 2, 2)
    assert store.catalog.delta_retires() == {"a": 2}
    retire_delta(store, "a", 2)
    retire_delta(store, "a", 2)  # a repeat after a crash: nothing left to remove
    assert delta_files(log_dir(store, "a")) == ["e3.parquet"] and removed_unadded(log_dir(store, "a")) == []
    assert store.catalog.delta_retires() == {}


def test_a_dropped_relation_is_never_committed_again(store):
    commit(store, 1)
    rel = store.relation("a")
    stored = store.stored(rel)
    with store.catalog.transaction() as db:
        store.catalog.remove_relation(db, "a")
    store.forget("a")
    assert stored.closed and commit_pending(store, "a", -1, 1) is None


def test_the_follower_groups_by_count_and_drains(store, monkeypatch):
    monkeypatch.setattr(delta_follower, "MAX_DELAY_SECONDS", 3600.0)
    follower = DeltaFollower(store, lambda: 4)  # groups of 2
    follower.start()
    try:
        commit(store, 1)
        follower.committed(1, ["a", "b"])
        assert follower.lag == 1  # a group is not full: it waits
        commit(store, 2)
        follower.committed(2, ["a", "b"])
        follower.hold(0)  # returns once the round committed both epochs
        assert follower.lag == 0 and delta_epochs(log_dir(store, "b")) == {1, 2}
        assert delta_commits(log_dir(store, "b")) == 1
        commit(store, 3, ("a",))
        follower.committed(3, ["a"])
    finally:
        follower.stop()
    follower.drain()
    assert delta_epochs(log_dir(store, "a")) == {1, 2, 3} and store.catalog.delta_backlog() == []


def test_the_bound_stops_the_pipeline_with_the_error_when_commits_fail(store, monkeypatch):
    monkeypatch.setattr(delta_follower, "MAX_DELAY_SECONDS", 3600.0)
    failing = threading.Event()
    failing.set()
    original = StoredTable.commit_logs

    def commit_logs(self, files):
        if failing.is_set():
            raise OSError("injected: no space left on device")
        return original(self, files)

    monkeypatch.setattr(StoredTable, "commit_logs", commit_logs)
    follower = DeltaFollower(store, lambda: 2)
    follower.start()
    try:
        for e in (1, 2):
            commit(store, e)
            follower.committed(e, ["a", "b"])
        with pytest.raises(PipelineError, match="2 epochs behind.*no space left on device"):
            follower.hold(1)
        failing.clear()
        deadline = time.time() + 60
        while follower.lag and time.time() < deadline:  # its backoff ends; the next round succeeds
            with contextlib.suppress(PipelineError):  # (a round that began before the disk was fixed)
                follower.hold(0)
        assert follower.lag == 0 and delta_epochs(log_dir(store, "a")) == {1, 2}
    finally:
        follower.stop()


def test_a_new_follower_catches_up_what_a_crash_left(store):
    for e in (1, 2):
        commit(store, e)
    sync_log(store, "b", -1, 2)
    store.catalog.retire("b", 1, 1)  # retention forgot b's epoch 1; a crash came before the Delta log did
    follower = DeltaFollower(store, lambda: 10)
    follower.drain()
    assert delta_epochs(log_dir(store, "a")) == {1, 2} and delta_files(log_dir(store, "b")) == ["e2.parquet"]
    assert store.catalog.delta_backlog() == [] and store.catalog.delta_retires() == {}
    assert removed_unadded(log_dir(store, "b")) == []
