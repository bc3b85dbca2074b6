"""How the posix_fs and Delta connectors plan epochs and decode records, without Spark: whole files
in name order within the row budget and the rate limit, a version at a time, bad records named by
file and line, nothing outside the root."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkwave.connectors.delta_source import VERSION_SHIFT, DeltaSource
from sparkwave.connectors.file_reader import read_task
from sparkwave.connectors.files import PosixFs, split_name
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Column, Schema, parse_type


def schema(*cols: str, key: tuple[str, ...] = ()) -> Schema:
    columns = [Column(c.split()[0], parse_type(c.split()[1])) for c in cols]
    if not key:
        columns.append(Column("_row_id", parse_type("bigint"), hidden=True))
    return Schema(tuple(columns), key or ("_row_id",), not key)


def files(root: Path, **extra: str) -> PosixFs:
    options = {"connector": "posix_fs", "posix_fs.root": str(root), "match_pattern": "*.csv", "encode": "csv",
               **extra}
    return PosixFs("fs", schema("id int", "name varchar"), options)


def rows_of(conn, ranges) -> list[dict]:
    return [r for t in conn.tasks(ranges) for b in read_task(conn.spec, t) for r in b.to_pylist()]


def test_files_are_taken_whole_in_name_order_within_the_budget(tmp_path):
    for name, n in (("b.csv", 3), ("a.csv", 5), ("c.csv", 4), ("z.txt", 9)):
        (tmp_path / name).write_text("id,name\n" + "".join(f"{i},x{i}\n" for i in range(n)))
    conn = files(tmp_path, **{"max.rows.per.epoch": "8"})
    first = conn.plan({}, 1000)
    assert first == {split_name(0, "a.csv"): [0, 6]}, "the next file would pass 8 records"
    committed = {s: hi for s, (_, hi) in first.items()}
    second = conn.plan(committed, 1000)
    assert second == {split_name(1, "b.csv"): [0, 4]}, "4 + 5 records would pass 8"
    assert files(tmp_path, **{"max.rows.per.epoch": "9"}).plan(committed, 1000) == {
        split_name(1, "b.csv"): [0, 4], split_name(2, "c.csv"): [0, 5]}
    rated = files(tmp_path, source_rate_limit="1")
    assert list(rated.plan(committed, 1000)) == [split_name(1, "b.csv")], "at least one file, however low the rate"
    assert files(tmp_path, source_rate_limit="0").plan(committed, 1000) == {}


def test_a_malformed_line_is_a_bad_record_named_by_file_and_line(tmp_path):
    (tmp_path / "a.csv").write_text('id,name\n1,a\nx,b\n2,"c\n\n3,d,extra\n4,d\n')
    conn = files(tmp_path)
    rows = rows_of(conn, conn.plan({}, 1000))
    good = [(r["id"], r["name"]) for r in rows if r["_error"] is None]
    bad = [(r["_seq"], r["_error"].split(": ", 1)[1], r["_raw"]) for r in rows if r["_error"] is not None]
    assert good == [(1, "a"), (4, "d")]
    assert bad == [(2, "column id: expected a number, got 'x'", "x,b"),
                   (3, "not a CSV record: unexpected end of data", '2,"c'),
                   (5, "expected 2 fields, got 3", "3,d,extra")]
    assert all(r["_error"].startswith(f"file 'a.csv' under '{tmp_path}', record ") for r in rows if r["_error"])
    splits, offsets = conn.positions(pa.chunked_array([[2, 5]]))
    assert splits.to_pylist() == [split_name(0, "a.csv")] * 2 and offsets.to_pylist() == [2, 5]


def test_a_pattern_or_a_symlink_never_reaches_outside_the_root(tmp_path):
    root, out = tmp_path / "root", tmp_path / "out"
    root.mkdir()
    out.mkdir()
    (out / "s.csv").write_text("id,name\n1,secret\n")
    for pattern in ("../out/*.csv", "/tmp/*.csv", "a/../../out/s.csv"):
        with pytest.raises(SqlError, match="match_pattern"):
            files(root, match_pattern=pattern)
    with pytest.raises(SqlError, match="absolute"):
        files(Path("relative"))
    os.symlink(out / "s.csv", root / "link.csv")
    os.symlink(out, root / "dir")
    conn = files(root, match_pattern="*")
    assert conn.plan({}, 1000) == {} and "link.csv" in (conn.status or "")
    (root / "a.csv").write_text("id,name\n1,a\n")
    ranges = conn.plan({}, 1000)
    assert list(ranges) == [split_name(0, "a.csv")]
    os.replace(root / "link.csv", root / "a.csv")  # swapped for a symlink leading out after the plan
    with pytest.raises(OSError, match="outside"):
        rows_of(conn, ranges)


def test_delta_versions_are_planned_one_offset_each_within_the_budget(tmp_path):
    path = str(tmp_path / "t")
    for lo in (0, 10, 20):
        write_deltalake(path, pa.table({"id": pa.array(range(lo, lo + 10), pa.int64())}),
                        mode="append", configuration={"delta.enableChangeDataFeed": "true"})
    DeltaTable(path).optimize.compact()
    conn = DeltaSource("dl", schema("id bigint"), {"connector": "deltalake", "location": path,
                                                   "max.rows.per.epoch": "25"})
    assert conn.initial_offsets() == {"0": 0}
    assert conn.plan({"0": 0}, 1000) == {"0": [0, 2]}
    assert conn.plan({"0": 2}, 1000) == {"0": [2, 4]}, "a compaction adds no rows"
    assert conn.plan({"0": 4}, 1000) == {}
    rows = rows_of(conn, {"0": [1, 4]})
    assert [r["id"] for r in rows] == list(range(10, 30))
    assert {r["_seq"] >> VERSION_SHIFT for r in rows} == {1, 2}
    assert conn.positions(pa.chunked_array([[rows[0]["_seq"]]]))[1].to_pylist() == [1]
    latest = DeltaSource("dl", schema("id bigint"), {"connector": "deltalake", "location": path,
                                                     "scan.startup.mode": "latest"})
    assert latest.initial_offsets() == {"0": 4}


def test_a_keyed_relation_takes_a_change_feed_and_an_append_only_one_names_the_version(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    DeltaTable(path).update(updates={"v": "'B'"}, predicate="k = 2")
    DeltaTable(path).delete("k = 3")
    conn = DeltaSource("dl", schema("k bigint", "v varchar", key=("k",)), {"connector": "deltalake",
                                                                          "location": path})
    rows = sorted(rows_of(conn, {"0": [0, 3]}), key=lambda r: r["_seq"])
    assert [(r["k"], r["v"], r["_op"]) for r in rows] == [(1, "a", 4), (2, "b", 4), (3, "c", 4), (2, "B", 4),
                                                         (3, "c", 5)]
    append_only = DeltaSource("dl", schema("k bigint", "v varchar"), {"connector": "deltalake", "location": path})
    assert append_only.plan({"0": 0}, 1000) == {"0": [0, 1]}
    assert append_only.plan({"0": 1}, 1000) == {}
    assert "version 1 of Delta table" in (append_only.status or "") and "(UPDATE)" in (append_only.status or "")
    assert [c.name for c in DeltaSource.table_columns({"location": path})] == ["k", "v"]


def test_an_overwrite_with_the_feed_on_and_no_change_files_deletes_the_removed_rows_first(tmp_path):
    """delta-rs writes no change files for an overwrite: with the feed on, the protocol's changes are
    the removed files' rows deleted, then the added files' rows; a key in both ends as added."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(path, pa.table({"k": pa.array([2, 3], pa.int64()), "v": ["B", "c"]}), mode="overwrite")
    conn = DeltaSource("dl", schema("k bigint", "v varchar", key=("k",)), {"connector": "deltalake",
                                                                          "location": path})
    assert conn.plan({"0": 1}, 1000) == {"0": [1, 2]}
    rows = sorted(rows_of(conn, {"0": [1, 2]}), key=lambda r: r["_seq"])
    assert [(r["k"], r["_op"]) for r in rows] == [(1, 5), (2, 5), (2, 4), (3, 4)]
    plain = str(tmp_path / "plain")
    write_deltalake(plain, pa.table({"k": pa.array([1], pa.int64()), "v": ["a"]}))
    write_deltalake(plain, pa.table({"k": pa.array([2], pa.int64()), "v": ["b"]}), mode="overwrite")
    off = DeltaSource("dl", schema("k bigint", "v varchar", key=("k",)), {"connector": "deltalake",
                                                                         "location": plain})
    assert off.plan({"0": 1}, 1000) == {}
    assert "version 1 of Delta table" in (off.status or "") and "without a change data feed" in (off.status or "")


def test_a_partitioned_delta_table_gives_its_partition_values_as_columns(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([1, 2, 3], pa.int64()), "day": ["2024-01-01", "2024-01-02", None]}),
                    partition_by=["day"])
    conn = DeltaSource("dl", schema("id bigint", "day date"), {"connector": "deltalake", "location": path})
    rows = rows_of(conn, conn.plan({"0": 0}, 1000))
    assert sorted((r["id"], str(r["day"])) for r in rows) == [(1, "2024-01-01"), (2, "2024-01-02"), (3, "None")]
    assert all(r["_error"] is None for r in rows)


def test_a_row_without_its_primary_key_is_a_bad_record(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": 1, "name": "a"}\n{"name": "no id"}\n')
    conn = PosixFs("fs", schema("id int", "name varchar", key=("id",)),
                   {"connector": "posix_fs", "posix_fs.root": str(tmp_path), "encode": "json"})
    rows = rows_of(conn, conn.plan({}, 1000))
    assert [(r["id"], r["_error"]) for r in rows] == [
        (1, None), (None, f"file 'a.jsonl' under '{tmp_path}', record 2: column id: the primary key is NULL")]
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"k": pa.array([1, None], pa.int64()), "v": ["a", "b"]}))
    delta = DeltaSource("dl", schema("k bigint", "v varchar", key=("k",)), {"connector": "deltalake",
                                                                           "location": path})
    rows = rows_of(delta, delta.plan({"0": 0}, 1000))
    assert [r["k"] for r in rows] == [1, None] and rows[1]["_error"].endswith("column k: the primary key is NULL")
    assert rows[1]["_raw"] == '{"k": null, "v": "b"}'


def test_counting_a_big_file_when_planning_does_not_hold_it_in_the_drivers_memory(tmp_path):
    """The planner counts a new file's lines on the driver: a file far bigger than memory (here 48 MiB
    of long lines) must be counted a block at a time, not read whole."""
    import tracemalloc

    from sparkwave.connectors.file_reader import record_count

    line = b"1," + b"x" * (4 << 20) + b"\n"  # 4 MiB lines
    with open(tmp_path / "big.csv", "wb") as f:
        f.write(b"id,name\n")
        for _ in range(12):
            f.write(line)
        f.write(b"2,last line without a newline")
    conn = files(tmp_path)
    tracemalloc.start()
    try:
        n = record_count(conn.spec, str(tmp_path / "big.csv"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 14
    assert peak < 16 << 20, f"counting held {peak >> 20} MiB of a 48 MiB file"


def test_a_few_long_lines_are_decoded_by_a_spark_task_not_by_the_driver(tmp_path):
    """An epoch of few records is decoded on the driver, unless its files are big (a task reads its
    whole file): a 3-line file of 80 MiB must not be read into the driver's memory."""
    from sparkwave.connectors.files import LOCAL_BYTES, on_driver

    (tmp_path / "small.csv").write_text("id,name\n1,a\n2,b\n")
    with open(tmp_path / "long.csv", "wb") as f:
        f.write(b"id,name\n1," + b"x" * (LOCAL_BYTES + 1) + b"\n2,b\n")
    conn = files(tmp_path)
    ranges = conn.plan({}, 1000)
    small = {k: v for k, v in ranges.items() if k.endswith("small.csv")}
    assert on_driver(conn.tasks(small))
    assert not on_driver(conn.tasks(ranges))


def test_a_file_whose_name_is_not_utf8_is_skipped_and_named_not_planned(tmp_path):
    """A split's name is stored in the catalog (SQLite, UTF-8) with the epoch's commit: a file whose
    name is not UTF-8 would fail every commit of the pipeline. It is skipped, and the status says so."""
    import sqlite3

    (tmp_path / "a.csv").write_text("id,name\n1,a\n")
    bad = os.path.join(os.fsencode(tmp_path), b"b\xff.csv")
    with open(bad, "wb") as f:
        f.write(b"id,name\n2,b\n")
    conn = files(tmp_path)
    ranges = conn.plan({}, 1000)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE source_offsets (relation text, split text, offset int)")
    db.executemany("INSERT INTO source_offsets VALUES ('fs', ?, ?)", [(s, r[1]) for s, r in ranges.items()])
    assert list(ranges) == [split_name(0, "a.csv")]
    assert "not UTF-8" in (conn.status or "") and "b\\xff.csv" in (conn.status or "")


@pytest.mark.parametrize("named", ["../out/x.parquet", "%2E%2E/out/x.parquet", "ABS", "file://ABS", "link.parquet"])
def test_a_delta_log_naming_a_file_outside_the_table_stops_the_source_naming_it(tmp_path, named):
    """A data file the log names by `../`, an absolute path, a file:// URL or a symlink leading out
    of the table's folder is never read: the source stops at that version and says why."""
    import json

    import pyarrow.parquet as pq

    path, out = tmp_path / "t", tmp_path / "out"
    out.mkdir()
    pq.write_table(pa.table({"id": pa.array([666], pa.int64())}), out / "x.parquet")
    write_deltalake(str(path), pa.table({"id": pa.array([1], pa.int64())}))
    os.symlink(out / "x.parquet", path / "link.parquet")
    named = named.replace("ABS", str(out / "x.parquet"))
    add = {"add": {"path": named, "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True}}
    (path / "_delta_log" / f"{1:020d}.json").write_text(
        json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps(add) + "\n")
    conn = DeltaSource("dl", schema("id bigint"), {"connector": "deltalake", "location": str(path)})
    assert conn.plan({"0": 0}, 1000) == {"0": [0, 1]}  # version 0; version 1 is not planned
    assert conn.plan({"0": 1}, 1000) == {}
    assert "version 1" in (conn.status or "") and "outside the table's folder" in (conn.status or "")
    with pytest.raises(SqlError, match="outside the table's folder"):
        rows_of(conn, {"0": [1, 2]})


def test_a_file_that_is_not_parquet_stops_only_its_source_and_says_why(tmp_path):
    """Planning runs for every source of the pipeline at each barrier: a file that cannot be counted
    (not Parquet, say a README in the folder) must leave this source waiting with its status, not
    raise out of the plan (which fails every epoch of every relation)."""
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": pa.array([1], pa.int32()), "name": ["a"]}), tmp_path / "a.parquet")
    (tmp_path / "b.parquet").write_text("this is not a Parquet file\n")
    conn = PosixFs("fs", schema("id int", "name varchar"), {"connector": "posix_fs", "posix_fs.root": str(tmp_path),
                                                            "encode": "parquet", "max.rows.per.epoch": "1"})
    assert conn.plan({}, 1000) == {split_name(0, "a.parquet"): [0, 1]}
    assert conn.plan({split_name(0, "a.parquet"): 1}, 1000) == {}
    assert "b.parquet" in (conn.status or "") and "Parquet" in (conn.status or "")


@pytest.mark.parametrize("damage", ["log", "file"])
def test_a_damaged_delta_version_stops_only_its_source_and_says_why(tmp_path, damage):
    """A commit file that is not JSON lines, or a data file without statistics that is not Parquet:
    the source stops at that version with its status; the plan does not raise (which would fail
    every epoch of the pipeline)."""
    import json

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": pa.array([1], pa.int64())}))
    (path / "junk.parquet").write_text("not Parquet")
    add = {"add": {"path": "junk.parquet", "partitionValues": {}, "size": 1, "modificationTime": 0,
                   "dataChange": True}}
    text = "{not json\n" if damage == "log" else json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + \
        json.dumps(add) + "\n"
    (path / "_delta_log" / f"{1:020d}.json").write_text(text)
    conn = DeltaSource("dl", schema("id bigint"), {"connector": "deltalake", "location": str(path)})
    assert conn.plan({"0": 0}, 1000) == {"0": [0, 1]}
    assert conn.plan({"0": 1}, 1000) == {}
    assert "version 1" in (conn.status or "")


def test_a_task_decodes_a_big_file_a_line_at_a_time(tmp_path):
    """A Spark task decodes one whole file: it must hold about a batch of rows, not the file and a
    list of all its lines (a file of GBs would take the worker, and the machine, down)."""
    import tracemalloc

    n = 60_000
    with open(tmp_path / "big.csv", "w") as f:
        f.write("id,name\n")
        for i in range(n):
            f.write(f"{i},{'y' * 500}\n")  # ~29 MiB
    conn = files(tmp_path)
    ranges = conn.plan({}, 10 * n)
    tracemalloc.start()
    try:
        count = 0
        for t in conn.tasks(ranges):
            for b in read_task(conn.spec, t):
                count += b.num_rows
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    assert peak < 16 << 20, f"decoding held {peak >> 20} MiB of a 29 MiB file"


def test_a_line_longer_than_the_bound_is_a_bad_record_and_the_lines_after_it_are_read(tmp_path, monkeypatch):
    """A task holds one line at a time: a line longer than MAX_LINE_BYTES is not read whole, it is a
    bad record saying so, and the lines after it keep their numbers (the plan counted them)."""
    from sparkwave.connectors import file_reader

    monkeypatch.setattr(file_reader, "MAX_LINE_BYTES", 1000)
    (tmp_path / "a.csv").write_text("id,name\n1,a\n2," + "z" * 5000 + "\n3,c\n4," + "w" * 1500)
    conn = files(tmp_path)
    ranges = conn.plan({}, 1000)
    assert ranges == {split_name(0, "a.csv"): [0, 5]}
    rows = rows_of(conn, ranges)
    assert [(r["id"], r["name"]) for r in rows if r["_error"] is None] == [(1, "a"), (3, "c")]
    bad = [r for r in rows if r["_error"] is not None]
    assert [r["_error"] for r in bad] == [f"file 'a.csv' under {str(tmp_path)!r}, record {n}: the line is longer "
                                          "than 1000 bytes" for n in (3, 5)]
    assert all(r["_raw"].startswith(("2,zzz", "4,www")) and len(r["_raw"]) < 1100 for r in bad)
