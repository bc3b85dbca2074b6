"""Races and limits found by review (issue "Hardening"): each test failed before its fix."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from sparkwave.core.errors import CatalogError, DataError, SparkwaveError
from sparkwave.frontend.dml import DML_SEQ_BASE


def test_flush_waits_for_dml_staged_while_an_epoch_was_being_planned(session):
    """An epoch reads the staged DML, then persists its plan: an INSERT and a flush() in between must
    not be answered by that epoch, which does not hold the insert."""
    s = session
    s.sql("CREATE TABLE t (id int, PRIMARY KEY (id))")
    s.flush()
    loop = s.loop
    read_input, resume = threading.Event(), threading.Event()
    plan = loop._plan

    def slow_plan(e):
        out = plan(e)
        if not read_input.is_set():
            read_input.set()
            assert resume.wait(120)
        return out

    loop._plan = slow_plan
    loop.request_barrier()
    assert read_input.wait(120)  # the epoch has read its input and not yet persisted its plan
    s.sql("INSERT INTO t VALUES (1)")
    answered: dict[str, int] = {}
    flusher = threading.Thread(target=lambda: answered.update(epoch=s.flush()))
    flusher.start()
    with loop._wake:  # the flush has begun once it has asked for a barrier
        assert loop._wake.wait_for(lambda: loop._flush_requests > 0, timeout=120)
    resume.set()
    flusher.join(120)
    assert s.table("t", as_of=answered["epoch"]).count() == 1


def _row_ids(s, table: str) -> list[int]:
    rel = s.rt.relation(table)
    return [r["_row_id"] for r in s.rt.snapshot(rel, s.committed_epoch).select("_row_id").collect()]


def test_dml_ids_do_not_overflow_after_millions_of_batches(session, spark):
    """The old encoding (2^62 + batch << 42) overflowed int64 after 2^20 batches. Ids now come from
    reserved ranges: past two million batches, inserts of both kinds still order and number rows;
    once the id space is used up, a batch fails with a clear error and committed rows stay."""
    s = session
    s.sql("CREATE TABLE kv (k int, v int, PRIMARY KEY (k))")
    s.sql("CREATE TABLE events (x int)")
    s.catalog.next_counter("dml_batch", 1 << 21)
    s.catalog.next_counter("dml_ids", DML_SEQ_BASE - (1 << 40))
    s.sql("INSERT INTO kv VALUES (1, 10)")
    s.sql("INSERT INTO kv VALUES (1, 11)")  # same epoch: the later batch wins
    s.insert("kv", spark.createDataFrame([(1, 12), (2, 20)], "k int, v int"))
    s.sql("INSERT INTO events VALUES (1), (2)")
    s.insert("events", spark.createDataFrame([(3,), (4,)], "x int"))
    s.insert("events", pa.table({"x": [5]}))
    s.flush()
    assert sorted(tuple(r) for r in s.table("kv").collect()) == [(1, 12), (2, 20)]
    ids = _row_ids(s, "events")
    assert len(ids) == 5 and len(set(ids)) == 5 and all(i >= DML_SEQ_BASE for i in ids)

    left = DML_SEQ_BASE - s.catalog.next_counter("dml_ids", 0)
    s.catalog.next_counter("dml_ids", left - 3)  # 3 ids left
    s.sql("INSERT INTO events VALUES (6), (7)")
    with pytest.raises(DataError, match="DML row ids"):
        s.insert("events", spark.createDataFrame([(8,)], "x int"))  # a Spark batch needs 2^33
    with pytest.raises(DataError, match="DML row ids"):
        s.sql("INSERT INTO events VALUES (9), (10)")
    s.flush()
    assert sorted(r["x"] for r in s.table("events").collect()) == [1, 2, 3, 4, 5, 6, 7]
    assert len(set(_row_ids(s, "events"))) == 7


def test_a_query_reads_catalog_relations_only_each_at_one_epoch(session, tmp_path):
    """A query named a file (`"text"."/etc/hostname"` returned the host's file) or a Spark table;
    relations were global temp views that another query could replace between epochs."""
    s = session
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    s.sql("CREATE TABLE t (id int, PRIMARY KEY (id))")
    s.sql("INSERT INTO t VALUES (1)")
    s.flush()
    for query in (f'SELECT * FROM "text"."{secret}"', f'SELECT * FROM text.`{secret}`',
                  "SELECT * FROM default.t", "SELECT * FROM range(3)"):
        with pytest.raises(SparkwaveError) as err:
            s.sql(query).collect()
        assert "not yours" not in str(err.value)
    with pytest.raises(CatalogError, match="unknown table or materialized view 'nope'"):
        s.sql("SELECT * FROM nope")
    old = s.sql("SELECT t.id FROM t")  # a query's frame stays at its epoch after later commits
    s.sql("INSERT INTO t VALUES (2)")
    s.flush()
    assert s.sql("SELECT count(*) AS n FROM t x").collect()[0]["n"] == 2
    assert [r["id"] for r in old.collect()] == [1]
    assert s.sql("WITH t AS (SELECT 5 AS id) SELECT id FROM t").collect()[0]["id"] == 5
    assert not [v for v in s.spark.catalog.listTables() if v.name.startswith("sparkwave_query_")]
