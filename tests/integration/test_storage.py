"""Storage: per-epoch logs, the change stream between epochs, compaction, retention, time travel."""

from __future__ import annotations

import os
import shutil
import sqlite3

from deltalake import DeltaTable

import sparkwave
from sparkwave.core.chunk import Op
from sparkwave.core.epoch import EPOCH_ORIGIN_MS, epoch_ms, next_epoch
from sparkwave.meta import delta_follower
from sparkwave.storage.snapshot import changes
from sparkwave.storage.table import APP_ID
from tests.oracle import rows_of


def test_epochs_are_strictly_increasing_and_carry_physical_time():
    e1 = next_epoch(0, now_ms=EPOCH_ORIGIN_MS + 5000)
    assert epoch_ms(e1) == EPOCH_ORIGIN_MS + 5000 and e1 & 0xFFFF == 0
    assert next_epoch(e1, now_ms=EPOCH_ORIGIN_MS + 4000) == e1 + 1  # the clock stepped back


def test_a_group_of_epochs_is_one_delta_version_tagged_with_its_newest_epoch(session, monkeypatch):
    monkeypatch.setattr(delta_follower, "MAX_DELAY_SECONDS", 3600.0)  # groups by count alone
    session.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    epochs = []
    for i in range(3):
        session.sql(f"INSERT INTO t VALUES ({i}, {i})")
        epochs.append(session.flush())
    idle = session.flush()
    session.loop.committer.delta.drain()  # fewer than a group (delta_lag_epochs / 2) waited
    log = DeltaTable(str(session.warehouse.relation_dir("t") / "log"))
    assert log.version() == 1  # create + one version for the three epochs; the idle epoch wrote nothing
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

    from sparkwave.storage.decoded import read_groups
    from sparkwave.storage.file_index import candidate_groups, file_index

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


def _sorted_base(path, rows: list[tuple]) -> None:
    """A base file as compaction writes it: `| _vnode | k1 | k2 | v |` sorted by (vnode, key)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sorted(rows, key=lambda r: (r[0], r[1], r[2]))
    pq.write_table(pa.table({"_vnode": pa.array([r[0] for r in rows], pa.int16()),
                             "k1": pa.array([r[1] for r in rows], pa.string()),
                             "k2": pa.array([r[2] for r in rows], pa.int64()),
                             "v": pa.array([r[3] for r in rows], pa.int64())}), path, row_group_size=3_000)


def test_key_index_finds_the_rows_of_wanted_keys_and_yields_to_a_changed_file(tmp_path):
    """The index of a sorted base file returns exactly the rows whose key is wanted, in every
    vnode, absent keys and multi-row batches included (a two-column key whose first column repeats
    across many rows); an index whose file changed, or that is missing, is not used."""
    import random

    import pyarrow as pa

    from sparkwave.core.schema import Column, Schema, parse_type
    from sparkwave.core.zset import ns_join
    from sparkwave.storage import key_index

    base = tmp_path / "t" / "base"
    base.mkdir(parents=True)
    path = str(base / "c7-0.parquet")
    rnd = random.Random(3)
    rows = [(rnd.randrange(16), f"g{i % 40}", i, i * 10) for i in range(10_000)]
    _sorted_base(path, rows)
    schema = Schema((Column("k1", parse_type("varchar")), Column("k2", parse_type("bigint")),
                     Column("v", parse_type("bigint"))), ("k1", "k2"))
    assert key_index.indexable(schema)
    arrow = pa.schema([("_vnode", pa.int16()), ("k1", pa.string()), ("k2", pa.int64()), ("v", pa.int64())])
    assert key_index.rows(path, pa.table({"_vnode": pa.array([1], pa.int16()), "k1": ["g1"], "k2": [1]}),
                          ["k1", "k2"], arrow) is None  # not built yet
    key_index.build(path)
    assert key_index.index_path(path) == tmp_path / "t" / "index" / "c7-0.arrow"

    wanted = [rows[i] for i in rnd.sample(range(len(rows)), 300)]
    absent = [(rnd.randrange(16), f"g{rnd.randrange(40)}", 20_000 + i, 0) for i in range(50)] + [(15, "zz", 1, 0)]
    keys = pa.table({"_vnode": pa.array([r[0] for r in wanted + absent], pa.int16()),
                     "k1": [r[1] for r in wanted + absent], "k2": [r[2] for r in wanted + absent]})
    found = key_index.rows(path, keys, ["k1", "k2"], arrow)
    assert found is not None
    exact = ns_join(found, keys.select(["k1", "k2"]), ["k1", "k2"], "left semi")
    assert sorted(zip(*exact.to_pydict().values(), strict=True)) == sorted(wanted)
    nothing = key_index.rows(path, keys.slice(0, 0), ["k1", "k2"], arrow)
    assert nothing is not None and nothing.num_rows == 0

    _sorted_base(path, rows[:-1])  # the file is written again (a retried compaction): the index is stale
    assert key_index.rows(path, keys, ["k1", "k2"], arrow) is None
    assert not key_index.indexable(Schema((Column("k", parse_type("double precision")),), ("k",)))


def test_upserts_after_compaction_look_up_old_rows_through_the_key_index(session, monkeypatch):
    """A keyed table's compacted base gets a key index per file; the next epochs' updates and
    deletes find their old rows through it alone (no Parquet base file is read) and emit the right
    retractions, which an aggregate MV over the table shows; retention removes a replaced base's
    indexes with its files."""
    from sparkwave.storage import lookup

    session.sql("CREATE TABLE t (k varchar, v int, PRIMARY KEY (k)); "
                "CREATE MATERIALIZED VIEW m AS SELECT v % 3 AS g, count(*) AS n, sum(v) AS s FROM t GROUP BY v % 3")
    session.sql("INSERT INTO t VALUES " + ", ".join(f"('k{i}', {i})" for i in range(500)))
    session.flush()
    session.compact()
    index_dir = session.warehouse.relation_dir("t") / "index"
    base_files = session.catalog.base_at("t", session.committed_epoch).files
    assert sorted(os.listdir(index_dir)) == sorted(os.path.basename(f)[:-8] + ".arrow" for f in base_files)

    table_dir = str(session.warehouse.relation_dir("t"))
    of_state = lookup.file_index

    def no_parquet(path):
        assert not path.startswith(table_dir), f"a lookup read the Parquet base file {path}"
        return of_state(path)  # the MV's state tables are looked up in their own files

    monkeypatch.setattr(lookup, "file_index", no_parquet)
    session.sql("UPDATE t SET v = v + 1 WHERE k IN ('k1', 'k2', 'k300')")
    session.sql("DELETE FROM t WHERE k IN ('k4', 'k499', 'nothing')")
    session.sql("INSERT INTO t VALUES ('k5', 1000), ('new', 7)")
    session.flush()
    monkeypatch.undo()
    expected = {f"k{i}": i for i in range(500)} | {"k1": 2, "k2": 3, "k300": 301, "k5": 1000, "new": 7}
    del expected["k4"], expected["k499"]
    assert sorted(rows_of(session.table("t"))) == sorted(expected.items())
    groups: dict[int, list[int]] = {}
    for v in expected.values():
        groups.setdefault(v % 3, []).append(v)
    assert sorted(rows_of(session.table("m"))) == sorted((g, len(vs), sum(vs)) for g, vs in groups.items())

    session.sql("SET retention_seconds = 0")
    session.compact()
    base_files = session.catalog.base_at("t", session.committed_epoch).files
    assert sorted(os.listdir(index_dir)) == sorted(os.path.basename(f)[:-8] + ".arrow" for f in base_files)


def test_key_index_of_a_spark_or_arrow_written_base_agrees_with_its_parquet_file(session, monkeypatch):
    """Spark (a big base) or pyarrow (a small one, compacted on the driver) sorts the base, Arrow
    searches the index: for negative integers and non-ASCII text the lookup through the index returns
    exactly what the Parquet files hold (read once the indexes are gone)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sparkwave.core import policy
    from sparkwave.core.chunk import vnode
    from sparkwave.storage.lookup import lookup

    words = ["a", "Z", "é", "日本", "ß", "", "zz", "ñandú", "Ω"]
    session.sql("CREATE TABLE i (k bigint, v int, PRIMARY KEY (k)); CREATE TABLE s (k varchar, v int, PRIMARY KEY (k))")
    session.insert("i", pa.table({"k": pa.array([(-1) ** n * n * 7919 for n in range(3000)], pa.int64()),
                                  "v": list(range(3000))}))
    session.insert("s", pa.table({"k": [f"{w}{n}" for n in range(300) for w in words],
                                  "v": list(range(300 * len(words)))}))
    for writer in ("pyarrow", "spark"):
        if writer == "spark":
            monkeypatch.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)
            session.sql("INSERT INTO i VALUES (3, 3); INSERT INTO s VALUES ('new', 3)")
        session.flush()
        session.compact()
        epoch = session.committed_epoch
        for name, wanted in (("i", pa.array([(-1) ** n * n * 7919 for n in range(0, 3000, 7)] + [1, -2, 10**12],
                                            pa.int64())),
                             ("s", pa.array([f"{w}{n}" for n in range(0, 300, 3) for w in words] + ["日", "é-1"]))):
            rel = session.catalog.relation(name)
            keys = session.spark.createDataFrame(pa.table({"k": wanted})).select(vnode(["k"]).alias("_vnode"), "k") \
                .toArrow().cast(pa.schema([("_vnode", pa.int16()), ("k", wanted.type)]))
            index_dir = session.warehouse.relation_dir(name) / "index"
            assert len(os.listdir(index_dir)) >= 1, writer
            made_by = {pq.read_metadata(f).created_by.split()[0] for f in session.catalog.base_at(name, epoch).files}
            assert made_by == ({"parquet-cpp-arrow"} if writer == "pyarrow" else {"parquet-mr"}), made_by
            through_index = lookup(session.catalog, name, rel.schema, epoch, keys)
            shutil.rmtree(index_dir)
            from_parquet = lookup(session.catalog, name, rel.schema, epoch, keys)
            rows = sorted(zip(*through_index.to_pydict().values(), strict=True))
            assert rows == sorted(zip(*from_parquet.to_pydict().values(), strict=True)), writer
            assert len(rows) == len(wanted) - 3 + (name == "s"), writer  # all but the absent keys ("é-1" exists)


def test_a_small_snapshot_read_on_the_driver_equals_sparks_read(session, monkeypatch):
    """A user's read of a small snapshot is evaluated on the driver in Arrow; at every epoch it equals
    Spark's read of the same files: base and log overlaid (updates, deletes, a key inserted and
    updated in one epoch), NULL keys (an outer join's MV), an append-only table, each type's
    extremes, columns named like the overlay's own, logs written by the executors (a big epoch) and
    by the driver, bases written by Spark and by pyarrow. Float keys, and files that decode to more
    than the driver should hold, are read by Spark."""
    import pyarrow as pa

    from sparkwave.core import policy

    session.sql("CREATE TABLE t (k int, b boolean, s smallint, i bigint, r real, d double precision, "
                "n decimal(38, 10), v text, dt date, ts timestamp, tz timestamptz, by bytea, _at int, "
                "PRIMARY KEY (k))")
    session.sql("CREATE TABLE a (x int, y text)")  # append-only
    session.sql("CREATE MATERIALIZED VIEW j AS SELECT t.k, t.v, a.x, a.y FROM t FULL JOIN a ON t.k = a.x")
    session.sql("CREATE MATERIALIZED VIEW g AS SELECT v, count(*) AS c, sum(n) AS sn, max(tz) AS mt FROM t GROUP BY v")
    extremes = ("true, -32768, -9223372036854775808, -1.5, 2.25, -9999999999999999999999999999.9999999999, "
                "'z\u00e9\u4e2d', DATE '0001-01-01', TIMESTAMP '0001-01-01 00:00:00', "
                "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00', '\\x00ff'::bytea, 7")
    plain = "false, 1, 2, 0.5, 0.25, 0.0000000001, 'a', DATE '2026-11-26', TIMESTAMP '2026-11-26 12:00:00', " \
            "TIMESTAMPTZ '2026-11-26 12:00:00+00', NULL, NULL"
    epochs = []
    for i in range(4):
        if i == 1:
            session.sql("SET big_epoch_rows = 0")
        if i == 2:
            session.sql("SET big_epoch_rows = 1000000")
            monkeypatch.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)  # bases written by Spark
            session.compact()
            monkeypatch.undo()
        session.sql(f"INSERT INTO t VALUES ({i}, {extremes}), ({i + 10}, {plain})")
        session.sql(f"INSERT INTO t VALUES ({i + 10}, {extremes})")  # the same key again, the same epoch
        session.sql(f"UPDATE t SET v = 'u{i}' WHERE k = {i - 1}")
        session.sql(f"DELETE FROM t WHERE k = {i + 8}")
        session.sql(f"INSERT INTO a VALUES ({i}, 'y'), ({i + 20}, NULL), ({i + 20}, 'again')")
        epochs.append(session.flush())
    session.compact()  # bases written by pyarrow, read with the last epoch's logs
    session.sql("INSERT INTO t VALUES (20, " + plain + "); DELETE FROM t WHERE k = 1")
    epochs.append(session.flush())
    names = ["t", "a", "j", "g"]
    local = {(n, e): sorted(rows_of(session.table(n, as_of=e)), key=repr) for n in names for e in epochs}
    assert all(session.rt.local_snapshot(session.catalog.relation(n), e) is not None for n in names for e in epochs)
    monkeypatch.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)
    assert session.rt.local_snapshot(session.catalog.relation("t"), epochs[-1]) is None
    for (n, e), rows in local.items():
        assert rows == sorted(rows_of(session.table(n, as_of=e)), key=repr), (n, e)
    assert any(r[2] is None for r in local[("j", epochs[-1])]) and len(local[("t", epochs[-1])]) == 6
    monkeypatch.undo()

    session.sql("CREATE TABLE f (k double precision, v int, PRIMARY KEY (k)); CREATE TABLE w (k int, s text, "
                "PRIMARY KEY (k))")
    session.sql("INSERT INTO f VALUES (1.5, 1)")
    session.insert("w", pa.table({"k": list(range(20_000)), "s": ["x" * 2_000] * 20_000}))
    e = session.flush()
    assert os.path.getsize(session.catalog.log_files("w", 0, e)[0][1]) < policy.LOCAL_SNAPSHOT_BYTES  # 40 MB decoded
    assert session.rt.local_snapshot(session.catalog.relation("w"), e) is None
    assert session.rt.local_snapshot(session.catalog.relation("f"), e) is None
    assert session.table("w").count() == 20_000 and rows_of(session.table("f")) == [(1.5, 1)]
