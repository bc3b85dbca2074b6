"""Committed log files decoded once and kept (`storage/decoded.py`): a file read again gives the
same rows from memory; a file rewritten under its name is read anew; the budget bounds what is kept."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from sparkwave.core.errors import CorruptFileError
from sparkwave.storage import decoded
from sparkwave.storage.integrity import write_table

SCHEMA = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string())])


def _write(path: str, keys: range, tag: str) -> None:
    write_table(pa.table({"k": pa.array(list(keys), pa.int64()), "v": [f"{tag}{k}" for k in keys]}), path)


def test_a_file_read_twice_is_decoded_once_and_gives_the_same_rows(tmp_path) -> None:
    a, b = str(tmp_path / "e1.parquet"), str(tmp_path / "e2.parquet")
    _write(a, range(3), "a")
    _write(b, range(3, 5), "b")
    first = decoded.read_logs([a, b], SCHEMA)
    with open(a, "r+b") as f:  # damage the file's pages in place, keeping its size and time
        st = os.stat(a)
        f.seek(8)
        f.write(b"\xff" * 16)
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = decoded.read_logs([a, b], SCHEMA)
    assert again.equals(first)  # from memory: the verified rows, not the damaged bytes
    assert again.to_pydict() == {"k": [0, 1, 2, 3, 4], "v": ["a0", "a1", "a2", "b3", "b4"]}


def test_a_file_rewritten_under_its_name_is_read_again(tmp_path) -> None:
    a = str(tmp_path / "e1.parquet")
    _write(a, range(3), "a")
    assert decoded.read_logs([a], SCHEMA)["v"].to_pylist() == ["a0", "a1", "a2"]
    _write(a, range(4), "z")
    assert decoded.read_logs([a], SCHEMA)["v"].to_pylist() == ["z0", "z1", "z2", "z3"]


def test_a_damaged_file_not_yet_kept_is_an_error(tmp_path) -> None:
    a = str(tmp_path / "e1.parquet")
    _write(a, range(100), "a")
    data = bytearray(open(a, "rb").read())
    data[20:40] = b"\x00" * 20
    open(a, "wb").write(bytes(data))
    with pytest.raises((CorruptFileError, OSError, pa.ArrowException)):
        decoded.read_logs([a], SCHEMA)


def test_the_budget_bounds_what_is_kept(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(decoded, "BUDGET_BYTES", 1000)
    monkeypatch.setattr(decoded, "_kept", type(decoded._kept)())
    monkeypatch.setattr(decoded, "_size", 0)
    paths = []
    for i in range(20):
        p = str(tmp_path / f"e{i}.parquet")
        _write(p, range(i * 10, i * 10 + 10), "x")
        paths.append(p)
        assert decoded.read_logs([p], SCHEMA).num_rows == 10
    assert 0 < decoded._size <= decoded.BUDGET_BYTES
    assert sum(t.nbytes for t in decoded._kept.values()) == decoded._size
    assert len(decoded._kept) < 20


def test_row_groups_are_decoded_once_each_and_come_back_in_the_order_asked(tmp_path) -> None:
    import pyarrow.parquet as pq

    from sparkwave.storage.file_index import file_index

    path = str(tmp_path / "base.parquet")
    pq.write_table(pa.table({"k": pa.array(range(100), pa.int64()), "v": [f"v{k}" for k in range(100)]}), path,
                   row_group_size=10, write_page_checksum=True)
    index = file_index(path)
    assert decoded.read_groups(index, [7, 2], SCHEMA)["k"].to_pylist() == [*range(70, 80), *range(20, 30)]
    assert decoded.read_groups(index, [2, 3], SCHEMA)["k"].to_pylist() == list(range(20, 40))
    assert decoded.read_groups(index, None, SCHEMA)["k"].to_pylist() == list(range(100))
    assert decoded.read_groups(index, [], SCHEMA).num_rows == 0
    kept = [k for k in decoded._kept if k[0] == path]
    assert sorted(k[3] for k in kept) == list(range(10))  # each group once


def test_a_log_file_written_here_is_kept_as_written(tmp_path) -> None:
    a = str(tmp_path / "e7.parquet")
    rows = pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["x", "y"]})
    write_table(rows, a)
    decoded.remember(a, rows)
    st = os.stat(a)
    with open(a, "r+b") as f:  # whatever the bytes on disk now, the rows written are what is read
        f.seek(4)
        f.write(b"\x00" * 8)
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert decoded.read_logs([a], SCHEMA).to_pydict() == {"k": [1, 2], "v": ["x", "y"]}
