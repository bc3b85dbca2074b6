"""Review of the fenced takeover (issue 50 item 3): two owners may write the same epoch at once (an
owner cut off from the catalog still runs its in-flight epoch while the new owner replays it). Each
big epoch's Spark write goes through a staging folder; a folder named by the epoch alone was shared
by both writers, so one's cleanup removed the other's rows before it listed them (an error, or an
empty listing: the epoch committed without the relation's rows). Two compactions of one epoch wrote
the same base file names, so the later one replaced the files the other had committed."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from sparkwave.core.schema import Schema
from sparkwave.storage import retention, table
from sparkwave.storage.table import StoredTable
from tests.unit.test_catalog_migrations import T_SCHEMA

SCHEMA = Schema.from_json(T_SCHEMA)


def test_two_writers_of_one_epoch_do_not_share_a_staging_folder(spark, tmp_path, monkeypatch) -> None:
    stored = StoredTable(tmp_path / "t", "t", SCHEMA)
    stored.create()
    rows = spark.createDataFrame([(i, 1, i % 256, i, f"v{i}") for i in range(100)],
                                 "_seq bigint, _op int, _vnode int, k int, v string")
    listdir = os.listdir
    other: list = []
    started: list = []

    def listing(path):  # the other owner's whole write of the same epoch comes between this one's write and listing
        if "_staging_e" in str(path) and not started:
            started.append(path)
            other.append(stored.stage_log_frame(7, rows))
        return listdir(path)

    monkeypatch.setattr(table.os, "listdir", listing)
    staged = stored.stage_log_frame(7, rows)
    assert other and other[0].num_rows == 100
    assert staged.num_rows == 100 and pq.ParquetFile(staged.path).metadata.num_rows == 100
    assert not [n for n in listdir(stored.log_path) if n.startswith("_staging_")]  # each writer removed its own


def test_retention_still_knows_a_crashed_big_epochs_staging_folder() -> None:
    assert retention._staging_epoch("_staging_e12") == 12
    assert retention._staging_epoch("_staging_e12-0123456789ab") == 12
    assert retention._staging_epoch("_staging_c12") == float("inf")


def _compaction_rig(spark, tmp_path):
    from sparkwave.core.catalog import Relation

    stored = StoredTable(tmp_path / "t", "t", SCHEMA)
    rel = Relation("t", "table", SCHEMA, {}, 0, "created")
    rt = SimpleNamespace(spark=spark, stored=lambda r: stored)
    rows = spark.createDataFrame([(i % 256, i, f"v{i}") for i in range(2000)], "_vnode smallint, k int, v string")
    return stored, rel, rt, rows


def _delta_rows(stored: StoredTable) -> list[tuple]:
    from deltalake import DeltaTable

    t = DeltaTable(str(stored.base_path)).to_pyarrow_table()
    return sorted(zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True))


def test_a_fenced_owners_compaction_does_not_replace_the_new_owners_base_files(spark, tmp_path, monkeypatch) -> None:
    """Two owners compacting one relation at one epoch (a fenced owner's compaction in flight at the
    takeover), on clusters of different sizes: the later write leaves the files the other one
    committed as they were."""
    from sparkwave.core import spark_features
    from sparkwave.storage import compaction

    stored, rel, rt, rows = _compaction_rig(spark, tmp_path)
    prefix = stored.base_file_prefix(5)
    monkeypatch.setattr(spark_features, "default_parallelism", lambda s: 2)  # the new owner's cluster
    files, counts = compaction.write_base_files(rt, rel, rows, "_staging_c5", prefix)  # committed by the new owner
    monkeypatch.setattr(spark_features, "default_parallelism", lambda s: 4)  # the old owner's, still running
    others, _ = compaction.write_base_files(rt, rel, rows, "_staging_c5", prefix)
    assert not set(files) & set(others)
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == sum(counts) == 2000
    assert not [n for n in os.listdir(stored.base_path) if n.startswith("_staging_")]


def test_a_second_attempt_at_one_epoch_adopts_the_base_the_first_committed(spark, tmp_path, monkeypatch) -> None:
    """A compaction retried at an epoch whose base Delta already committed (a crash after that
    commit, or the other owner's attempt) makes the committed files the base, not its own: the
    catalog and the Delta table name the same files. If a sweep removed one of them, the retry
    commits its own; a base older than the committed one is refused."""
    from sparkwave.core import spark_features
    from sparkwave.storage import compaction

    stored, rel, rt, rows = _compaction_rig(spark, tmp_path)
    expected = sorted((i, f"v{i}") for i in range(2000))
    monkeypatch.setattr(spark_features, "default_parallelism", lambda s: 2)
    first = compaction.write_base(rt, rel, rows, 5, record=False)
    monkeypatch.setattr(spark_features, "default_parallelism", lambda s: 4)
    second = compaction.write_base(rt, rel, rows, 5, record=False)
    assert (second.version, second.files, second.rows) == (first.version, first.files, first.rows)
    assert len(first.files) == 2 and _delta_rows(stored) == expected
    assert stored.base_file_names() == {os.path.basename(f) for f in first.files}

    os.remove(first.files[0])  # swept after a crash (before retention kept the Delta table's files)
    third = compaction.write_base(rt, rel, rows, 5, record=False)
    assert third.version == first.version + 1 and len(third.files) == 4 and not set(third.files) & set(first.files)
    assert _delta_rows(stored) == expected and sum(third.rows) == 2000

    with pytest.raises(RuntimeError, match="base of t at epoch 4 is superseded: .* epoch 5"):
        compaction.write_base(rt, rel, rows, 4, record=False)
    assert _delta_rows(stored) == expected


def test_a_base_committed_to_delta_before_a_crash_is_kept_by_retention_and_adopted(session, monkeypatch) -> None:
    """A compaction that crashed after its Delta commit and before the catalog recorded it: retention
    keeps the files the base Delta table holds (a Delta reader never meets a missing file), and the
    next compaction at that epoch makes them the catalog's base."""
    from deltalake import DeltaTable

    from sparkwave.storage import compaction

    session.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); SET retention_seconds = 0")
    session.sql("INSERT INTO t VALUES " + ", ".join(f"({i}, {i})" for i in range(50)))
    first = session.flush()
    session.compact("t")
    session.sql("UPDATE t SET v = v + 1 WHERE k < 10")
    second = session.flush()
    crash = compaction.crash_point

    def crash_after_delta(name: str) -> None:
        if name == "mid_compaction_after_delta":
            raise RuntimeError("crashed")
        crash(name)

    rel = session.catalog.relation("t")
    monkeypatch.setattr(compaction, "crash_point", crash_after_delta)
    with session.locks.ddl, pytest.raises(RuntimeError, match="crashed"):
        compaction.compact(session.rt, rel, second)
    monkeypatch.setattr(compaction, "crash_point", crash)
    stored = session.rt.stored(rel)
    in_delta = stored.base_file_names()
    assert session.catalog.base_at("t", second).epoch == first and in_delta
    assert not in_delta & {os.path.basename(f) for f in session.catalog.base_at("t", first).files}

    with session.locks.ddl, session.locks.epoch:  # as the maintenance thread runs it
        retention.apply_retention(session.rt, rel, 0)
    assert all((stored.base_path / n).exists() for n in in_delta)
    with session.locks.ddl:
        assert compaction.compact(session.rt, rel, second)
    base = session.catalog.base_at("t", second)
    assert base.epoch == second and {os.path.basename(f) for f in base.files} == in_delta
    with session.locks.ddl:  # a COMPACT that read an older committed epoch than the maintenance's: nothing to do
        assert not compaction.compact(session.rt, rel, first)
    expected = sorted((i, i + 1 if i < 10 else i) for i in range(50))
    assert sorted(map(tuple, session.table("t").collect())) == expected
    delta = DeltaTable(str(stored.base_path)).to_pyarrow_table()
    assert sorted(zip(delta.column("k").to_pylist(), delta.column("v").to_pylist(), strict=True)) == expected
