"""Storage: per-epoch logs, the change stream between epochs, compaction, retention, time travel."""

from __future__ import annotations

import os
import shutil
import sqlite3

from deltalake import DeltaTable

import sparkwave
from sparkwave.core.chunk import Op
from sparkwave.core.epoch import EPOCH_ORIGIN_MS, epoch_ms, next_epoch
from sparkwave.storage.snapshot import changes
from sparkwave.storage.table import APP_ID
from tests.oracle import rows_of


def test_epochs_are_strictly_increasing_and_carry_physical_time():
    e1 = next_epoch(0, now_ms=EPOCH_ORIGIN_MS + 5000)
    assert epoch_ms(e1) == EPOCH_ORIGIN_MS + 5000 and e1 & 0xFFFF == 0
    assert next_epoch(e1, now_ms=EPOCH_ORIGIN_MS + 4000) == e1 + 1  # the clock stepped back


def test_each_epoch_is_one_delta_version_tagged_with_the_epoch(session):
    session.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    epochs = []
    for i in range(3):
        session.sql(f"INSERT INTO t VALUES ({i}, {i})")
        epochs.append(session.flush())
    idle = session.flush()
    log = DeltaTable(str(session.warehouse.relation_dir("t") / "log"))
    assert log.version() == 3  # create + one version per epoch with changes; the idle epoch wrote nothing
    assert log.transaction_version(APP_ID) == epochs[-1]
    assert idle > epochs[-1]
    assert sorted(set(log.to_pyarrow_table(columns=["_epoch"])["_epoch"].to_pylist())) == epochs


def test_change_stream_between_two_epochs(session):
    session.sql("CREATE TABLE t (k int, v varchar, PRIMARY KEY (k))")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    e1 = session.flush()
    session.sql("INSERT INTO t VALUES (1, 'z'), (3, 'c')")
    session.sql("DELETE FROM t WHERE k = 2")
    e2 = session.flush()
    rel = session.catalog.relation("t")
    rows = rows_of(changes(session.spark, session.catalog, "t", rel.schema, e1, e2).select("_op", "k", "v"))
    assert sorted(rows) == sorted([(Op.UPDATE_DELETE, 1, "a"), (Op.UPDATE_INSERT, 1, "z"),
                                   (Op.DELETE, 2, "b"), (Op.INSERT, 3, "c")])


def test_compaction_keeps_every_retained_snapshot_and_retention_truncates(session):
    session.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); CREATE MATERIALIZED VIEW m AS SELECT k, v FROM t")
    history = []
    for i in range(4):
        session.sql(f"INSERT INTO t VALUES ({i % 2}, {i}), ({10 + i}, {i})")
        e = session.flush()
        history.append((e, sorted(rows_of(session.table("m")))))
    assert session.compact() == ["t", "m"]
    for e, rows in history:  # retention (default 1 h) keeps them all readable
        assert sorted(rows_of(session.table("m", as_of=e))) == rows
    log_dir = session.warehouse.relation_dir("t") / "log"
    before = len([f for f in os.listdir(log_dir) if f.endswith(".parquet")])
    session.sql("SET retention_seconds = 0")
    session.sql("INSERT INTO t VALUES (99, 99)")
    session.flush()
    session.compact()
    after = len([f for f in os.listdir(log_dir) if f.endswith(".parquet")])
    assert before == 4 and after == 0
    assert sorted(rows_of(session.table("m"))) == sorted(history[-1][1] + [(99, 99)])
    # the Delta log's current version no longer references the removed files
    assert DeltaTable(str(log_dir)).file_uris() == []


def test_pins_hold_retention(session):
    session.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    session.sql("INSERT INTO t VALUES (1, 1)")
    e1 = session.flush()
    session.compact()
    session.catalog.add_pin("t", e1, holder="test")
    session.sql("SET retention_seconds = 0")
    for i in range(2):
        session.sql(f"INSERT INTO t VALUES (1, {i + 2})")
        session.flush()
        session.compact()
    assert rows_of(session.table("t", as_of=e1)) == [(1, 1)]
    session.catalog.remove_pins("test")
    session.compact()
    assert rows_of(session.table("t")) == [(1, 3)]


def test_bulk_insert_from_arrow_pandas_and_spark(session):
    import pandas as pd
    import pyarrow as pa

    session.sql("CREATE TABLE t (k bigint, v double precision, PRIMARY KEY (k))")
    session.insert("t", pa.table({"k": [1, 2], "v": [1.0, 2.0]}))
    session.insert("t", pd.DataFrame({"k": [3], "v": [3.0]}))
    session.insert("t", session.spark.range(4, 6).selectExpr("id AS k", "id * 1.0 AS v"))
    session.flush()
    assert sorted(rows_of(session.table("t"))) == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0)]


def test_all_types_round_trip(session):
    session.sql("CREATE TABLE t (k int, b boolean, s smallint, i bigint, r real, d double precision, "
                "n decimal(10, 3), v text, dt date, ts timestamp, tz timestamptz, PRIMARY KEY (k))")
    session.sql("INSERT INTO t VALUES (1, true, 2, 3, 1.5, 2.25, 3.125, 'x', DATE '2025-03-01', "
                "TIMESTAMP '2025-03-01 10:00:00', TIMESTAMP '2025-03-01 10:00:00')")
    session.sql("CREATE MATERIALIZED VIEW m AS SELECT k, n * 2 AS n2, ts, tz, dt FROM t")
    session.flush()
    row = rows_of(session.table("t"))[0]
    assert row[:8] == (1, True, 2, 3, 1.5, 2.25, __import__("decimal").Decimal("3.125"), "x")
    assert str(row[8]) == "2025-03-01" and str(row[9]) == "2025-03-01 10:00:00"
    assert rows_of(session.table("m"))[0][1] == __import__("decimal").Decimal("6.250")
    described = {r[0]: r[1] for r in rows_of(session.sql("DESCRIBE t"))}
    assert described["n"] == "decimal(10,3)" and described["tz"] == "timestamptz"


def test_point_lookups_read_only_the_row_groups_of_wanted_keys(tmp_path):
    """A sorted base in small row groups: a lookup of a few keys reads a few groups, whatever the
    file's size; NULL keys and (vnode, key) ordering are honoured."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sparkwave.storage.file_index import candidate_groups, file_index, read_groups

    n = 50_000
    vnodes = [i * 8 // n for i in range(n)]  # sorted by vnode, then key within a vnode
    keys = [(i * 7919) % n for i in range(n)]
    order = sorted(range(n), key=lambda i: (vnodes[i], keys[i]))
    t = pa.table({"_vnode": pa.array([vnodes[i] for i in order], pa.int16()),
                  "k": pa.array([keys[i] for i in order] [:-1] + [None], pa.int64()),
                  "v": pa.array([f"v{keys[i]}" for i in order])})
    path = str(tmp_path / "base.parquet")
    pq.write_table(t, path, row_group_size=512)
    index = file_index(path)
    assert index.metadata.num_row_groups == 98

    wanted = t.take([5, 20_000, 49_000])
    by_key = candidate_groups(index, wanted.select(["k"]), ["k"])
    assert by_key is not None and len(by_key) > 20  # within each vnode keys span the range: no pruning
    by_vnode = candidate_groups(index, wanted.select(["_vnode", "k"]), ["_vnode", "k"])
    # the group of each key, plus at most the two groups straddling its vnode's boundaries
    assert by_vnode is not None and len(by_vnode) <= 3 * 3
    got = read_groups(index, by_vnode, t.schema)
    assert set(wanted["k"].to_pylist()) <= set(got["k"].to_pylist())

    nulls = candidate_groups(index, pa.table({"_vnode": pa.array([7], pa.int16()), "k": pa.array([None], pa.int64())}),
                             ["_vnode", "k"])
    assert nulls is not None and 97 in nulls and len(nulls) <= 2  # the NULL key's group (+ a boundary one)


def _files(root) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file() and p.name != "OWNER"}


def test_a_copied_or_moved_warehouse_reads_and_retains_its_own_files(spark, tmp_path):
    """The catalog stores file paths relative to the warehouse: a copy reads, compacts and retains
    its own files and leaves the original's alone; a moved warehouse opens."""
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); "
              "CREATE MATERIALIZED VIEW m AS SELECT v % 2 AS p, count(*) AS n FROM t GROUP BY v % 2")
        s.sql("INSERT INTO t VALUES (1, 1), (2, 2)")
        s.flush()
        s.compact()
        s.sql("INSERT INTO t VALUES (3, 3)")
        s.flush()
        s.sql("INSERT INTO t VALUES (4, 4)")  # staged, not yet in an epoch
        paths = [p for _, p in s.catalog.log_files("t", 0, s.committed_epoch)]
        assert paths and all(p.startswith(str(wh.resolve())) for p in paths)
    with sqlite3.connect(wh / "catalog.db") as db:  # the stored form
        for table in ("log_files", "base_files", "dml"):
            assert all(not os.path.isabs(p) for (p,) in db.execute(f"SELECT path FROM {table}")), table
    original = _files(wh)

    copy = tmp_path / "copy"
    shutil.copytree(wh, copy)
    with sparkwave.connect(copy, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.flush()  # the staged batch lands in the copy
        assert sorted(rows_of(s.table("t"))) == [(1, 1), (2, 2), (3, 3), (4, 4)]
        assert sorted(rows_of(s.table("m"))) == [(0, 2), (1, 2)]
        s.sql("SET retention_seconds = 0")
        s.sql("INSERT INTO t VALUES (5, 5)")
        s.flush()
        s.compact()
        assert sorted(rows_of(s.table("m"))) == [(0, 2), (1, 3)]
    assert _files(wh) == original, "the copy read or removed files of the original"

    moved = tmp_path / "moved"
    wh.rename(moved)
    with sparkwave.connect(moved, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.flush()
        assert sorted(rows_of(s.table("t"))) == [(1, 1), (2, 2), (3, 3), (4, 4)]
        assert sorted(rows_of(s.table("m"))) == [(0, 2), (1, 2)]
