"""`key_index.rows` of one key (a point query: one run of the index, sliced) against the same key
looked up by the path of many keys: the same rows, for keys present and absent, in every vnode,
in the first and the last vnode, across record batches, with a first key column that repeats.
No Spark session."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

from sparkwave.storage import key_index

ARROW = pa.schema([("_vnode", pa.int16()), ("k1", pa.string()), ("k2", pa.int64()), ("v", pa.int64())])


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*table.to_pydict().values(), strict=True))


def test_one_key_finds_the_rows_many_keys_find(tmp_path) -> None:
    base = tmp_path / "t" / "base"
    base.mkdir(parents=True)
    path = str(base / "c1-0.parquet")
    rnd = random.Random(44)
    rows = sorted([(rnd.choice([0, 1, 7, 255]), f"g{i % 30}", i, i * 10) for i in range(9_000)],
                  key=lambda r: (r[0], r[1], r[2]))
    pq.write_table(pa.table({"_vnode": pa.array([r[0] for r in rows], pa.int16()),
                             "k1": pa.array([r[1] for r in rows], pa.string()),
                             "k2": pa.array([r[2] for r in rows], pa.int64()),
                             "v": pa.array([r[3] for r in rows], pa.int64())}), path, row_group_size=1_000)
    key_index.build(path)
    keys = [(r[0], r[1], r[2]) for r in rnd.sample(rows, 60)] + [(3, "g1", 1), (0, "zz", 1), (255, "a", 1),
                                                                  (255, "zz", 1), (0, "", 1)]
    for vnode, k1, k2 in keys:
        one = pa.table({"_vnode": pa.array([vnode], pa.int16()), "k1": [k1], "k2": [k2]})
        found = key_index.rows(path, one, ["k1", "k2"], ARROW)
        many = key_index.rows(path, pa.concat_tables([one, one]), ["k1", "k2"], ARROW)
        assert found is not None and many is not None
        assert found.schema == ARROW
        assert _rows(found) == _rows(many)
        assert _rows(found) == [r for r in rows if r[0] == vnode and r[1] == k1]
