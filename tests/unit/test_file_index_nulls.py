"""`file_index.candidate_groups` with a two-column key whose first column is NULL in some rows of a
row group that otherwise holds one value: the group must stay a candidate for a NULL first value.
(A state table sorted by `(g, v)` keeps `(1, NULL)` and `(NULL, 0)` in one group when small; a
backfilled aggregate then missed its NULL group on the next update and never retracted it.)
No Spark session."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

from sparkwave.storage.decoded import read_groups
from sparkwave.storage.file_index import candidate_groups, file_index


def _matches(table: pa.Table, key: tuple) -> list[dict]:
    return [r for r in table.to_pylist() if (r["g"], r["v"]) == key]


def test_a_null_first_key_beside_one_value_keeps_its_group(tmp_path) -> None:
    path = str(tmp_path / "base.parquet")
    t = pa.table({"g": pa.array([1, None], pa.int32()), "v": pa.array([None, 0], pa.int32()),
                  "n": pa.array([2, 1], pa.int64())})
    pq.write_table(t, path)
    index = file_index(path)
    keys = pa.table({"g": pa.array([None], pa.int32()), "v": pa.array([0], pa.int32())})
    groups = candidate_groups(index, keys, ["g", "v"])
    assert groups is None or groups == [0]
    assert _matches(read_groups(index, groups, t.schema), (None, 0)) == [{"g": None, "v": 0, "n": 1}]


def test_every_key_is_found_in_the_groups_chosen_for_it(tmp_path) -> None:
    """Random small groups of a sorted `(g, v)` table with NULLs in both columns: each key's rows are
    in the groups `candidate_groups` picks for it, alone and among others."""
    rnd = random.Random(48)
    values = [None, 0, 1, 2, 3]
    rows = sorted({(rnd.choice(values), rnd.choice(values)) for _ in range(60)},
                  key=lambda r: (r[0] is not None, r[0] or 0, r[1] is not None, r[1] or 0))
    t = pa.table({"g": pa.array([r[0] for r in rows], pa.int32()), "v": pa.array([r[1] for r in rows], pa.int32())})
    path = str(tmp_path / "base.parquet")
    pq.write_table(t, path, row_group_size=3)
    index = file_index(path)
    for key in rows:
        keys = pa.table({"g": pa.array([key[0], 9], pa.int32()), "v": pa.array([key[1], 9], pa.int32())})
        got = read_groups(index, candidate_groups(index, keys, ["g", "v"]), t.schema)
        assert _matches(got, key), key
