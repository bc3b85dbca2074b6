"""Damaged files: a key index that fails its checksum is built again, never served; a damaged or
truncated base or log file is an error naming it, in users' reads and in the epoch that reads it
(which then commits nothing), never rows served wrong or short."""

from __future__ import annotations

import os
import random
import re
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sparkwave.core.errors import CorruptFileError, PipelineError
from sparkwave.storage import key_index
from sparkwave.storage.integrity import spark_read_error, write_table
from sparkwave.storage.snapshot import changes
from tests.oracle import rows_of

ROWS = 2000


def _value(k: int) -> int:
    return k * 1_000_003 + 12_345  # distinct, and no other bytes of a file spell one


def _silent_damage(path: str, column: str) -> None:
    """Overwrite 8 bytes inside `column`'s pages of the Parquet file `path`, at the first place from
    the middle of its column chunk where a reader that verifies no checksum reads the file as well
    as before, only with a different sum of `column`: the damage only page checksums catch."""
    original = Path(path).read_bytes()
    meta = pq.read_metadata(path)
    before = pc.sum(pq.read_table(path, columns=[column])[column]).as_py()
    at = meta.schema.names.index(column)
    chunks = [meta.row_group(g).column(at) for g in range(meta.num_row_groups)]
    chunk = max(chunks, key=lambda c: c.total_compressed_size)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    end = start + chunk.total_compressed_size
    for offset in range(start + (end - start) // 2, end - 8):
        damaged = bytearray(original)
        damaged[offset:offset + 8] = b"\x5a" * 8
        try:
            t = pq.read_table(pa.BufferReader(bytes(damaged)))
        except (OSError, pa.ArrowException):
            continue
        if t.num_rows == meta.num_rows and pc.sum(t[column]).as_py() != before:
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(b"\x5a" * 8)
            return
    raise AssertionError(f"no 8 bytes of {column} in {path} that a reader without checksums misreads")


def _table_with_sum(session, n: int = ROWS) -> int:
    session.sql("CREATE TABLE t (k bigint, v bigint, PRIMARY KEY (k)); "
                "CREATE MATERIALIZED VIEW m AS SELECT sum(v) AS s, count(*) AS n FROM t")
    session.insert("t", pa.table({"k": pa.array(range(n), pa.int64()), "v": [_value(k) for k in range(n)]}))
    session.flush()
    return sum(_value(k) for k in range(n))


def _upsert_all(session, n: int = ROWS) -> None:
    """New values for every key: the table's next epoch looks up every old row."""
    session.insert("t", pa.table({"k": pa.array(range(n), pa.int64()), "v": [_value(k) + 1 for k in range(n)]}))


def _epoch_fails_naming(session, path: str, total: int) -> None:
    """The epoch that reads the damaged file fails naming it, and the MV keeps its committed sum."""
    committed = session.committed_epoch
    with pytest.raises(PipelineError, match=re.escape(path)):
        session.flush()
    assert session.committed_epoch == committed
    assert rows_of(session.table("m")) == [(total, ROWS)]


def test_a_key_index_damaged_anywhere_is_built_again_not_served(tmp_path):
    """4 bytes overwritten anywhere in an index (its schema and vnode bounds, its key and value
    columns, its footer, its checksum) fail the checksum when it is opened: the lookup finds the
    right rows through an index built again from the Parquet file."""
    base = tmp_path / "t" / "base"
    base.mkdir(parents=True)
    path = str(base / "c1-0.parquet")
    rnd = random.Random(5)
    keys = sorted((k % 16, k) for k in range(3000))
    write_table(pa.table({"_vnode": pa.array([v for v, _ in keys], pa.int16()),
                          "k": pa.array([k for _, k in keys], pa.int64()),
                          "v": pa.array([_value(k) for _, k in keys], pa.int64())}), path, row_group_size=1000)
    schema = pa.schema([("_vnode", pa.int16()), ("k", pa.int64()), ("v", pa.int64())])
    wanted = rnd.sample(keys, 200)
    lookup = pa.table({"_vnode": pa.array([v for v, _ in wanted], pa.int16()), "k": [k for _, k in wanted]})
    expected = sorted((v, k, _value(k)) for v, k in wanted)
    key_index.build(path)
    index = key_index.index_path(path)
    good = index.read_bytes()
    size = len(good)
    for offset in sorted({0, 8, 40, 200, size // 3, size // 2, size - 400, size - 40, size - 12, size - 4,
                          *rnd.sample(range(size - 4), 40)}):
        damaged = bytearray(good)
        damaged[offset:offset + 4] = bytes(b ^ 0xA5 for b in damaged[offset:offset + 4])
        index.write_bytes(bytes(damaged))
        key_index.forget(index)  # as a process opening it for the first time
        found = key_index.rows(path, lookup, ["k"], schema)
        assert found is not None, f"damage at byte {offset}: the index was not built again"
        assert sorted(zip(*found.to_pydict().values(), strict=True)) == expected, f"damage at byte {offset}"
        assert index.read_bytes() == good, f"damage at byte {offset}: the damaged index was kept"


def test_a_damaged_key_index_of_a_table_is_rebuilt_and_upserts_stay_right(session):
    """A compacted keyed table's index with 4 bytes of a value overwritten: the next upserts find
    the old rows right (the MV over the table keeps the right sum) and the index is built again."""
    total = _table_with_sum(session)
    session.compact("t")
    (base_file,) = session.catalog.base_at("t", session.committed_epoch).files
    index = key_index.index_path(base_file)
    data = bytearray(index.read_bytes())
    at = data.find(struct.pack("<q", _value(7)))
    assert at > 0 and data.count(struct.pack("<q", _value(7))) == 1
    data[at:at + 4] = b"\xff\xff\xff\x7f"
    index.write_bytes(bytes(data))
    key_index.forget(index)

    session.insert("t", pa.table({"k": pa.array([7, 8], pa.int64()), "v": pa.array([1, 2], pa.int64())}))
    session.flush()
    total += 1 + 2 - _value(7) - _value(8)
    assert rows_of(session.table("m")) == [(total, ROWS)]
    assert index.read_bytes().count(struct.pack("<q", _value(7))) == 1  # built again from the base file


@pytest.mark.parametrize("writer", ["pyarrow", "spark"])
def test_a_damaged_base_file_is_an_error_naming_it(session, monkeypatch, writer):
    """8 bytes of a base file's values overwritten (where they still decode): reading the table on
    the driver or in Spark fails naming the file, as does the epoch whose upserts look up old rows
    in it; the MV over the table keeps its committed sum. The base is written by pyarrow (a small
    compaction on the driver) or by Spark (parquet-mr), and read by the other too."""
    from sparkwave.core import policy

    total = _table_with_sum(session)
    if writer == "spark":
        monkeypatch.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)  # compact with Spark
    session.compact("t")
    monkeypatch.undo()
    files = session.catalog.base_at("t", session.committed_epoch).files
    path = max(files, key=lambda f: pq.read_metadata(f).num_rows)
    assert pq.read_metadata(path).created_by.startswith("parquet-mr" if writer == "spark" else "parquet-cpp")
    for f in files:  # a cache: without it, lookups read the base files
        key_index.index_path(f).unlink()
    _silent_damage(path, "v")

    with pytest.raises(CorruptFileError, match=re.escape(path) + ".*'t'.*CRC"):
        session.table("t")
    rel = session.catalog.relation("t")
    with pytest.raises(Exception, match=re.escape(path)) as spark_error:
        session.rt.snapshot(rel, session.committed_epoch).agg({"v": "sum"}).collect()
    assert re.search(re.escape(path) + ".*'t'.*CRC", spark_read_error(spark_error.value) or "")
    _upsert_all(session)
    _epoch_fails_naming(session, path, total)


def test_a_damaged_log_file_is_an_error_naming_it(session):
    """The same for a log file that no compaction has folded yet."""
    total = _table_with_sum(session)
    ((epoch, path),) = session.catalog.log_files("t", 0, session.committed_epoch)
    _silent_damage(path, "v")

    with pytest.raises(CorruptFileError, match=re.escape(path) + ".*'t'.*CRC"):
        session.table("t")
    rel = session.catalog.relation("t")
    with pytest.raises(Exception, match=re.escape(path)):
        changes(session.spark, session.catalog, "t", rel.schema, 0, epoch).agg({"v": "sum"}).collect()
    _upsert_all(session)
    _epoch_fails_naming(session, path, total)


def test_a_truncated_base_file_is_an_error_naming_it(session):
    total = _table_with_sum(session)
    session.compact("t")
    (path,) = session.catalog.base_at("t", session.committed_epoch).files
    os.truncate(path, os.path.getsize(path) // 2)

    with pytest.raises(CorruptFileError, match=re.escape(path) + ".*'t'"):
        session.table("t")
    _upsert_all(session)
    _epoch_fails_naming(session, path, total)


def test_a_base_file_short_of_the_rows_the_catalog_recorded_is_an_error_naming_it(session):
    """A whole, checksummed file that holds 5 rows fewer than when it was committed (a footer
    damaged to count fewer, a file replaced) is refused, not read short."""
    total = _table_with_sum(session)
    session.compact("t")
    (path,) = session.catalog.base_at("t", session.committed_epoch).files
    rows = pq.read_table(path)
    write_table(rows.slice(5), path)

    with pytest.raises(CorruptFileError, match=re.escape(path) + f".*hold {ROWS - 5} rows.*recorded {ROWS}"):
        session.table("t")
    rel = session.catalog.relation("t")
    with pytest.raises(CorruptFileError, match=re.escape(path)):
        session.rt.snapshot(rel, session.committed_epoch)
    _upsert_all(session)
    _epoch_fails_naming(session, path, total)


def test_a_damaged_file_that_a_join_state_links_is_an_error_naming_it(session):
    """A join state's base hard-linked from an append-only table's files (`storage/links.py`) is
    verified like the table's own: 8 bytes of the table's log file overwritten, the epoch whose
    join looks its rows up in Spark fails naming the state's file, and the MV keeps its sums."""
    session.sql("CREATE TABLE e (g bigint, v bigint) APPEND ONLY; "
                "CREATE TABLE dim (g bigint, name varchar, PRIMARY KEY (g))")
    session.insert("e", pa.table({"g": pa.array([k % 50 for k in range(ROWS)], pa.int64()),
                                  "v": pa.array([_value(k) for k in range(ROWS)], pa.int64())}))
    session.insert("dim", pa.table({"g": pa.array(range(50), pa.int64()), "name": [f"n{g}" for g in range(50)]}))
    session.flush()
    session.sql("SET big_epoch_rows = 0")  # the build in Spark frames, which links the table's files
    session.sql("CREATE MATERIALIZED VIEW j AS SELECT dim.g, sum(e.v) AS s FROM e JOIN dim ON e.g = dim.g "
                "GROUP BY dim.g")
    session.wait()
    sums = sorted(rows_of(session.table("j")))
    bases = [session.catalog.base_at(r.name, session.committed_epoch)
             for r in session.catalog.relations(internal=True) if r.kind == "state"]
    linked = [f for b in bases if b for f in b.files if os.path.basename(f).startswith("linked-")]
    assert len(linked) == 1 and os.path.samefile(linked[0], session.catalog.log_files("e", 0, 10**18)[0][1])
    _silent_damage(linked[0], "v")

    session.sql("UPDATE dim SET name = name || '!'")  # every group's rows of e are looked up
    committed = session.committed_epoch
    with pytest.raises(PipelineError, match=re.escape(linked[0]) + ".*'j[.].*CRC"):
        session.flush()
    assert session.committed_epoch == committed
    assert sorted(rows_of(session.table("j"))) == sums
