"""The CDC backfill's table step without Spark (`stream/direct_intents.py`) and without consolidation
(`materialize_table(new_keys=True)`): the same log rows as the general path, and a chunk's absent
keys not looked up. (The vnode it computes in numpy is Spark's: tests/integration/test_arrow_parity.py.)"""

from __future__ import annotations

import pyarrow as pa

from sparkwave.core.chunk import Op
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.storage.table import base_arrow_schema
from sparkwave.stream.direct_intents import old_rows
from sparkwave.stream.materialize import materialize_table

SCHEMA = Schema((Column("id", parse_type("bigint")), Column("name", parse_type("varchar"))), ("id",))


def _intents(ids: list[int], ops: list[int] | None = None) -> pa.Table:
    n = len(ids)
    return pa.table({"_op": pa.array(ops or [4] * n, pa.int8()), "_seq": pa.array(range(n), pa.int64()),
                     "_vnode": pa.array([i % 7 for i in ids], pa.int16()), "id": pa.array(ids, pa.int64()),
                     "name": pa.array([f"n{i}" for i in ids], pa.string())})


def _both(intents: pa.Table) -> tuple[pa.Table, pa.Table]:
    def nothing(keys: pa.Table) -> pa.Table:
        return base_arrow_schema(SCHEMA).empty_table()

    def rows(t: pa.Table) -> list[dict]:
        return sorted(t.to_pylist(), key=lambda r: (r["id"], r["_op"]))

    return (rows(materialize_table(intents, SCHEMA, 3, nothing, new_keys=True)),
            rows(materialize_table(intents, SCHEMA, 3, nothing)))


def test_new_keys_give_the_same_log_rows_as_consolidation():
    for ids, ops in [([1, 2, 3, 10], None), ([5, 1, 9], None), ([1, 2, 2, 3], None),
                     ([1, 2, 3], [4, int(Op.KEY_DELETE), 4])]:
        fast, general = _both(_intents(ids, ops))
        assert fast == general, (ids, ops)
    fast, _ = _both(_intents([4, 8]))
    assert [(r["_op"], r["_seq"], r["_epoch"]) for r in fast] == [(int(Op.INSERT), 1, 3)] * 2


def test_a_chunks_absent_keys_are_not_looked_up():
    asked: list[list[int]] = []

    def find(keys: pa.Table) -> pa.Table:
        asked.append(keys["id"].to_pylist())
        return base_arrow_schema(SCHEMA).empty_table()

    keys = pa.table({"_vnode": pa.array([0, 0, 0], pa.int16()), "id": pa.array([3, 10, 19], pa.int64())})
    assert old_rows(find, keys, SCHEMA, (10, 20)).num_rows == 0 and asked == [[3]]
    assert old_rows(find, keys.slice(1), SCHEMA, (10, 20)).num_rows == 0 and asked == [[3]], "nothing to look up"
    old_rows(find, keys, SCHEMA, None)
    assert asked[-1] == [3, 10, 19]


def test_a_chunks_absent_key_values_are_not_looked_up():
    """A key PostgreSQL orders (or a uuid): the chunk's key values, not a range."""
    schema = Schema((Column("k", parse_type("varchar")), Column("v", parse_type("int"))), ("k",))
    asked: list[list[str]] = []

    def find(keys: pa.Table) -> pa.Table:
        asked.append(keys["k"].to_pylist())
        return base_arrow_schema(schema).empty_table()

    keys = pa.table({"_vnode": pa.array([0, 0, 0], pa.int16()), "k": pa.array(["a", "B", "zoë"], pa.string())})
    assert old_rows(find, keys, schema, pa.array(["zoë", "a"], pa.large_string())).num_rows == 0 and asked == [["B"]]
    old_rows(find, keys, schema, pa.array(["a", "B", "zoë"]))
    assert asked == [["B"]], "every key absent: nothing looked up"
