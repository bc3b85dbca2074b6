"""Races and limits found by review (issue "Hardening"): each test failed before its fix."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pyarrow as pa
import pytest

import sparkwave
from sparkwave.core.errors import CatalogError, DataError, NotRetainedError, SparkwaveError
from sparkwave.frontend.dml import DML_SEQ_BASE
from tests.oracle import rows_of


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
    with loop.barriers.cond:  # the flush has begun once it has asked for a barrier
        assert loop.barriers.cond.wait_for(lambda: loop._flush_requests > 0, timeout=120)
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


# --- item 8: a rate limit slows the job, not the pipeline ----------------------------------------
def _job(s, name: str):
    return next(j for j in s.jobs() if j.name == name)


def _until(s, condition) -> None:
    """Until `condition()` holds, woken by every job checkpoint, commit and control change."""
    for _ in range(240):
        generation = s.creating.generation
        if condition():
            return
        s.creating.wait(generation, 0.5)
    raise AssertionError("condition never held")


def _paused_job_behind(s, epochs: int) -> None:
    """An MV `m` over `t` created paused, `epochs` epochs of 100 inserts behind."""
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    s.flush()
    s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
    s.sql("CREATE MATERIALIZED VIEW m AS SELECT k, v + 1 AS v1 FROM t")
    for i in range(epochs):
        s.sql("INSERT INTO t VALUES " + ", ".join(f"({k}, {k})" for k in range(i * 100, i * 100 + 100)))
        s.flush()


def test_a_rate_limited_job_in_its_log_store_never_holds_the_pipeline_back(session):
    """The lag rule admitted new epochs only as fast as a job limited to 10 rows/s consumed them."""
    s = session
    _paused_job_behind(s, 3)
    s.sql("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = 10")
    _until(s, lambda: _job(s, "m").phase == "log store")
    for i in range(3, 6):  # 100 rows per epoch against a job that reads 10 rows/s
        s.sql("INSERT INTO t VALUES " + ", ".join(f"({k}, {k})" for k in range(i * 100, i * 100 + 100)))
        s.flush()
    info = _job(s, "m")
    assert info.creating and info.held_back == 0 and info.lag_epochs >= 3
    assert s.table("t").count() == 600
    s.sql("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
    s.sql("WAIT")
    assert sorted(tuple(r) for r in s.table("m").collect()) == [(k, k + 1) for k in range(600)]


def test_an_unthrottled_job_holds_an_epoch_back_for_a_bounded_time(session, monkeypatch):
    """A job whose checkpoint is stuck held the main graph back for as long as it stayed stuck."""
    from sparkwave.meta.creating_job import CreatingJob
    from sparkwave.meta.lag_rule import MAX_HOLD_SECONDS

    s = session
    _paused_job_behind(s, 2)
    entered, release = threading.Event(), threading.Event()
    log_slice = CreatingJob._log_slice

    def stuck(self, *args):
        entered.set()
        assert release.wait(120)
        return log_slice(self, *args)

    monkeypatch.setattr(CreatingJob, "_log_slice", stuck)
    now = [1000.0]
    s.creating.clock = lambda: now[0]
    s.sql("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
    assert entered.wait(120)  # in its log-store phase, 2 epochs behind, its first checkpoint stuck
    with s.locks.gate:
        assert not s.creating.admit()
    now[0] += MAX_HOLD_SECONDS - 1
    with s.locks.gate:
        assert not s.creating.admit()
    now[0] += 1
    with s.locks.gate:
        assert s.creating.admit()
    release.set()
    s.sql("WAIT")
    assert sorted(tuple(r) for r in s.table("m").collect()) == [(k, k + 1) for k in range(200)]


# --- item 9: cancel, connect and close ------------------------------------------------------------
def test_a_cancel_that_loses_the_race_to_a_merge_keeps_the_merged_mv(session):
    """CANCEL checked that the job was creating, then acted: a merge in between was deleted."""
    s = session
    _paused_job_behind(s, 1)
    job_id = _job(s, "m").id
    check = s.creating.creating_job
    calls: list[int] = []

    def check_then_merge(i):
        job = check(i)
        calls.append(i)
        if len(calls) == 2:  # the cancel itself has checked: the job merges now
            s.sql("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
            s.wait()
        return job

    s.creating.creating_job = check_then_merge
    with pytest.raises(CatalogError, match="finished before it could be cancelled"):
        s.sql(f"CANCEL JOBS {job_id}")
    s.sql("INSERT INTO t VALUES (100, 100)")
    s.flush()
    assert sorted(tuple(r) for r in s.table("m").collect()) == [(k, k + 1) for k in range(101)]


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("sparkwave-")}


def test_a_failed_connect_stops_what_it_started_and_releases_the_warehouse(spark, tmp_path, monkeypatch):
    """A connect() that failed after starting the barrier loop left it running, unowned."""
    from sparkwave.meta.jobs import CreatingJobs

    before = _threads()

    def broken(self):
        raise RuntimeError("cannot resume")

    monkeypatch.setattr(CreatingJobs, "resume_all", broken)
    with pytest.raises(RuntimeError, match="cannot resume"):
        sparkwave.connect(tmp_path / "wh", spark=spark)
    assert _threads() - before == set()
    monkeypatch.undo()
    with sparkwave.connect(tmp_path / "wh", spark=spark) as s:
        s.sql("CREATE TABLE t (id int)")


def test_close_releases_the_warehouse_even_when_stopping_the_jobs_fails(spark, tmp_path, monkeypatch):
    from sparkwave.meta.jobs import CreatingJobs

    before = _threads()
    stop = CreatingJobs.stop

    def broken(self):
        stop(self)
        raise RuntimeError("cannot stop")

    monkeypatch.setattr(CreatingJobs, "stop", broken)
    s = sparkwave.connect(tmp_path / "wh", spark=spark)
    with pytest.raises(RuntimeError, match="cannot stop"):
        s.close()
    assert _threads() - before == set()
    monkeypatch.undo()
    with sparkwave.connect(tmp_path / "wh", spark=spark) as s:
        s.sql("CREATE TABLE t (id int)")


def test_close_stops_the_spark_it_started_and_only_that(spark, tmp_path):
    """close() left the Spark session it had started running; one it did not start must run on."""
    code = (f"import sparkwave\nfrom pyspark import SparkContext\n"
            f"with sparkwave.connect({str(tmp_path / 'a')!r}) as s:\n"
            f"    s.sql('CREATE TABLE t (id int)')\n"
            f"print('running after close:', SparkContext._active_spark_context is not None)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "SPARKWAVE_SPARK_MASTER": "local[1]"})
    assert "running after close: False" in out.stdout, out.stderr[-2000:]
    with sparkwave.connect(tmp_path / "b") as s:  # Spark is running here: the session uses it
        assert s.spark.sparkContext is spark.sparkContext
    assert spark.range(3).count() == 3


# --- item 5: reads racing retention ---------------------------------------------------------------
def test_a_read_racing_retention_is_whole_or_fails(session, spark, monkeypatch):
    """A read checked retention, then listed its files: retention in between (catalog rows first)
    left it a partial listing, silently. A frame whose files retention removed before it was
    evaluated returned the rest under `ignoreMissingFiles`. A small read (on the driver) that finds
    a listed file removed because a newer base covers its epoch lists the files again; once read,
    it is whole."""
    from sparkwave.core import policy

    s = session
    s.sql("SET retention_seconds = 0")
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    s.sql("INSERT INTO t VALUES (1, 1), (2, 2)")
    s.flush()
    s.compact()
    s.sql("INSERT INTO t VALUES (3, 3)")
    e2 = s.flush()
    s.sql("INSERT INTO t VALUES (4, 4)")
    s.flush()
    base_at = s.catalog.base_at

    def retention_lands(name, epoch):  # between the read's retention check and its listing
        s.catalog.base_at = base_at
        s.compact("t")
        return base_at(name, epoch)

    s.catalog.base_at = retention_lands
    with pytest.raises(NotRetainedError, match="no longer retained"):
        s.table("t", as_of=e2).collect()
    assert s.catalog.base_at is base_at

    s.sql("INSERT INTO t VALUES (4, 40)")
    e3 = s.flush()

    def replaced_after_listing(name, epoch):  # the listed base is compacted over and removed
        s.catalog.base_at = base_at
        listed = base_at(name, epoch)
        s.compact("t")  # at e3: the epoch stays retained, its rows now in a newer base
        return listed

    s.catalog.base_at = replaced_after_listing
    assert sorted(rows_of(s.table("t", as_of=e3))) == [(1, 1), (2, 2), (3, 3), (4, 40)]  # listed again
    assert s.catalog.base_at is base_at and s.catalog.base_at("t", e3).epoch == e3

    small = s.table("t")
    monkeypatch.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)
    frame = s.table("t")  # read by Spark when evaluated
    s.sql("INSERT INTO t VALUES (5, 5)")
    s.flush()
    s.compact()  # a newer base: retention removes the files `frame` lists
    assert sorted(tuple(r) for r in small.collect()) == [(1, 1), (2, 2), (3, 3), (4, 40)]
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    try:
        with pytest.raises(Exception, match="FILE_NOT_EXIST"):
            frame.collect()
    finally:
        spark.conf.unset("spark.sql.files.ignoreMissingFiles")
    assert sorted(tuple(r) for r in s.table("t").collect()) == [(1, 1), (2, 2), (3, 3), (4, 40), (5, 5)]


# --- item 7: bounded epochs, and a warehouse whose next epoch keeps failing ------------------------
def test_a_huge_statement_spans_epochs_and_flush_waits_for_all_of_it(session, spark):
    """An epoch took every staged batch whatever its size: one huge UPDATE or bulk load made an
    epoch that could not fit the driver, replayed forever."""
    s = session
    s.sql("SET dml_rows_per_epoch = 100")
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    s.sql("CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n, sum(v) AS sv FROM t")
    s.flush()
    reports = []
    s.loop.on_epoch = reports.append
    s.insert("t", pa.table({"k": pa.array(range(250), pa.int32()), "v": pa.array(range(250), pa.int32())}))
    s.insert("t", spark.range(0, 350, numPartitions=2).selectExpr("CAST(id AS int) AS k", "CAST(id * 2 AS int) AS v"))
    s.flush()
    assert s.table("c").collect()[0].asDict() == {"n": 350, "sv": sum(2 * k for k in range(350))}
    s.sql("UPDATE t SET v = v + 1 WHERE k < 150")
    s.flush()
    assert s.table("c").collect()[0].asDict() == {"n": 350, "sv": sum(2 * k for k in range(350)) + 150}
    assert max(r.rows_in for r in reports) <= 100
    assert sum(r.rows_in for r in reports) == 250 + 350 + 150 and len(reports) >= 8


def test_a_warehouse_whose_next_epoch_keeps_failing_opens_says_why_and_recovers_on_drop(spark, tmp_path,
                                                                                       monkeypatch):
    """connect() replayed the failing epoch and failed with it: the user could not even DROP."""
    from sparkwave.core.errors import PipelineError
    from sparkwave.stream.dataflow import Dataflow

    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
        s.sql("CREATE MATERIALIZED VIEW good AS SELECT k, v FROM t WHERE v > 0")
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT k, v * 2 AS v2 FROM t")
        s.sql("INSERT INTO t VALUES (1, 1)")
        s.flush()
        step = Dataflow.step

        def poisoned(self, *args, **kwargs):
            if self.rel.name == "bad":
                raise RuntimeError("out of driver memory")
            return step(self, *args, **kwargs)

        monkeypatch.setattr(Dataflow, "step", poisoned)
        s.sql("INSERT INTO t VALUES (2, 2)")
        with pytest.raises(PipelineError, match="out of driver memory") as failed:
            s.flush()
        assert "materialized view 'bad'" in str(failed.value)
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        # the replay runs in the loop's thread, so connect() returned before it failed
        with pytest.raises(PipelineError, match="out of driver memory"):
            s.flush()
        assert "materialized view 'bad'" in (s.pipeline_error or "")
        s.sql("DROP MATERIALIZED VIEW bad")
        s.flush()
        assert s.pipeline_error is None
        assert sorted(tuple(r) for r in s.table("good").collect()) == [(1, 1), (2, 2)]


# --- item 13: a long run stays flat -------------------------------------------------------------------
def test_a_long_run_keeps_the_catalog_history_and_the_delta_logs_bounded(spark, tmp_path, monkeypatch):
    """`epochs` and `requests` grew by a row per epoch and per request forever, and every Delta
    commit stayed a JSON file that opening the table replays."""
    from sparkwave.core.catalog import history as catalog_module
    from sparkwave.storage import table as table_module

    monkeypatch.setattr(catalog_module, "KEPT_EPOCHS", 4)
    monkeypatch.setattr(catalog_module, "KEPT_REQUESTS", 3)
    monkeypatch.setattr(table_module, "CHECKPOINT_EVERY", 5)
    monkeypatch.setattr(table_module, "LOG_RETENTION", {"delta.logRetentionDuration": "interval 0 seconds"})
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("SET retention_seconds = 0")
        s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n FROM t GROUP BY v")
        for i in range(12):
            s.sql(f"INSERT INTO t VALUES ({i}, {i % 3})")
            s.flush()
        for i in range(6):
            s.catalog.finish_request(s.catalog.add_request(1, "rate_limit", i), "applied")
        s.compact()
        assert s.catalog._one("SELECT count(*) FROM epochs")[0] <= 5
        assert s.catalog._one("SELECT count(*) FROM requests")[0] == 3
        delta_log = s.warehouse.relation_dir("t") / "log" / "_delta_log"
        assert (delta_log / "_last_checkpoint").exists()
        assert len(list(delta_log.glob("*.json"))) < 5
        s.sql("INSERT INTO t VALUES (100, 1)")
        s.flush()
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("INSERT INTO t VALUES (101, 2)")
        s.flush()
        assert sorted(tuple(r) for r in s.table("m").collect()) == [(0, 4), (1, 5), (2, 5)]
        assert s.table("t").count() == 14


@pytest.mark.parametrize("strategy", ["snapshot", "blocking"])
def test_a_stateful_mv_dropped_and_created_again_under_its_name_starts_afresh(session, strategy):
    """A DROP closes the MV's state tables too: the same name created again builds new ones (it
    used to reuse the dropped ones' open Delta logs, and its backfill failed on a missing version)."""
    session.sql("CREATE TABLE t (k int, g int, PRIMARY KEY (k))")
    session.sql("INSERT INTO t VALUES (1, 1), (2, 1), (3, 2)")
    session.flush()
    mv = f"CREATE MATERIALIZED VIEW m WITH (backfill_strategy = '{strategy}') AS " \
         "SELECT t.g, count(*) AS n FROM t JOIN t AS u ON t.g = u.g GROUP BY t.g"
    session.sql(mv)
    session.sql("INSERT INTO t VALUES (4, 2)")
    session.flush()  # the state tables gain a log version past the new ones' first
    session.sql("DROP MATERIALIZED VIEW m")
    session.sql(mv)
    session.sql("INSERT INTO t VALUES (5, 1)")
    session.flush()
    assert sorted(rows_of(session.table("m"))) == [(1, 9), (2, 4)]
