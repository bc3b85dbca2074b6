"""Spark-free tests of a keyed table's `ON CONFLICT` rule (`core/conflict.py`): an epoch's intents
against the table's rows, in statement order, compared with the rule applied one intent at a time."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparkwave.core.chunk import Op
from sparkwave.core.conflict import resolve

OLD = [(1, 10, "x"), (2, 20, "y")]
# (op, key, a, b) in `_seq` order: an INSERT of a held key, a key inserted twice, a delete then an
# insert of the same key, an UPDATE (+U) after an ignored INSERT, a new key
INTENTS = [(Op.INSERT, 1, None, "n"), (Op.INSERT, 3, 30, None), (Op.INSERT, 3, 31, "z"), (Op.KEY_DELETE, 2, None, None),
           (Op.INSERT, 2, 21, None), (Op.UPDATE_INSERT, 1, 11, None), (Op.INSERT, 4, None, "w"),
           (Op.INSERT, 1, 12, None)]


def one_at_a_time(rule: str) -> dict[int, tuple]:
    rows = {k: (a, b) for k, a, b in OLD}
    for op, k, a, b in INTENTS:
        if op == Op.KEY_DELETE:
            rows.pop(k, None)
        elif op == Op.INSERT and k in rows and rule == "ignore":
            continue
        elif op == Op.INSERT and k in rows and rule == "update_if_not_null":
            rows[k] = (rows[k][0] if a is None else a, rows[k][1] if b is None else b)
        else:
            rows[k] = (a, b)
    return rows


@pytest.mark.parametrize("rule", ["ignore", "update_if_not_null", "overwrite"])
def test_intents_follow_the_rule_in_statement_order(rule):
    old = pa.table({"_vnode": pa.array([0] * len(OLD), pa.int16()), "k": pa.array([k for k, _, _ in OLD], pa.int64()),
                    "a": pa.array([a for _, a, _ in OLD], pa.int64()), "b": pa.array([b for _, _, b in OLD])})
    intents = pa.table({"_op": pa.array([int(i[0]) for i in INTENTS], pa.int8()),
                        "_seq": pa.array(range(1, len(INTENTS) + 1), pa.int64()),
                        "_vnode": pa.array([0] * len(INTENTS), pa.int16()),
                        "k": pa.array([i[1] for i in INTENTS], pa.int64()),
                        "a": pa.array([i[2] for i in INTENTS], pa.int64()), "b": pa.array([i[3] for i in INTENTS])})
    out = resolve(intents, old, ["k"], ["a", "b"], rule)  # type: ignore[arg-type]
    rows = {k: (a, b) for k, a, b in OLD}
    for r in out.sort_by("_seq").to_pylist():  # the resolved intents, applied as they are, give the rule's rows
        if r["_op"] == Op.KEY_DELETE:
            rows.pop(r["k"], None)
        else:
            rows[r["k"]] = (r["a"], r["b"])
    assert rows == one_at_a_time(rule)
    if rule == "ignore":
        assert {(r["k"], r["a"]) for r in out.to_pylist() if r["_op"] == Op.INSERT} == {(3, 30), (2, 21), (4, None)}


def test_a_key_written_many_times_in_an_epoch():
    """Many writes of one key in an epoch (an upsert topic's hot key): each INSERT meets the row as
    the writes before it left it."""
    n = 200_000
    old = pa.table({"_vnode": pa.array([0], pa.int16()), "k": pa.array([1], pa.int64()),
                    "a": pa.array([0], pa.int64())})
    intents = pa.table({"_op": pa.array([int(Op.INSERT)] * n, pa.int8()), "_seq": pa.array(range(n), pa.int64()),
                        "_vnode": pa.array([0] * n, pa.int16()), "k": pa.array([1, 2] * (n // 2), pa.int64()),
                        "a": pa.array([None if i % 3 else i for i in range(n)], pa.int64())})
    out = resolve(intents, old, ["k"], ["a"], "update_if_not_null")
    last = {r["k"]: r["a"] for r in out.sort_by("_seq").to_pylist()}
    assert last == {1: max(i for i in range(0, n, 2) if i % 3 == 0), 2: max(i for i in range(1, n, 2) if i % 3 == 0)}
    assert resolve(intents, old, ["k"], ["a"], "ignore").num_rows == 1  # key 2's first INSERT only
