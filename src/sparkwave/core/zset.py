"""Z-sets in Arrow: tables whose rows carry a weight `_w` (+1 inserted, -1 retracted).

Helpers shared by the stateful executors: null-safe joins on group keys (SQL's GROUP BY puts NULLs
in one group, Arrow's hash join never matches them), netting, and the conversion of a Z-set into
the change ops a stored table's log takes."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.core.chunk import Op

W = "_w"


def weight(n: int, w: int) -> pa.Array:
    return pa.array([w] * n, pa.int64())


def with_weight(t: pa.Table, w: int) -> pa.Table:
    return t.append_column(W, weight(t.num_rows, w))


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def _fill_value(t: pa.DataType) -> pa.Scalar:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.scalar(b"", t)
    if pa.types.is_boolean(t):
        return pa.scalar(False)
    if pa.types.is_date32(t):
        return pa.scalar(0, pa.int32()).cast(t)
    if pa.types.is_timestamp(t):
        return pa.scalar(0, pa.int64()).cast(t)
    if pa.types.is_decimal(t):
        return pa.scalar(Decimal(0), t)
    return pa.scalar(0, pa.int64()).cast(t)


def _null_safe(t: pa.Table, keys: list[str], tag: str) -> tuple[pa.Table, list[str]]:
    names = []
    for k in keys:
        col = t[k]
        t = t.append_column(f"__{tag}n_{k}", pc.is_null(col)) \
             .append_column(f"__{tag}v_{k}", pc.fill_null(col, _fill_value(col.type)))
        names += [f"__{tag}n_{k}", f"__{tag}v_{k}"]
    return t, names


def ns_join(left: pa.Table, right: pa.Table, keys: list[str], how: str) -> pa.Table:
    """Join on `keys` (same names on both sides) where NULL equals NULL; the right side's key
    columns are dropped. `how` is a pyarrow join type ('left outer', 'inner', 'left semi', ...)."""
    lt, lk = _null_safe(left, keys, "l")
    rt, rk = _null_safe(right, keys, "r")
    out = lt.join(rt.drop_columns(keys), lk, right_keys=rk, join_type=how, use_threads=False)
    return out.drop_columns([c for c in out.column_names if c.startswith(("__l", "__r"))])


def net(t: pa.Table) -> pa.Table:
    """Sum the weights of equal rows and drop those that cancel."""
    if t.num_rows == 0:
        return t
    cols = [c for c in t.column_names if c != W]
    g = t.group_by(cols, use_threads=False).aggregate([(W, "sum")]).rename_columns([*cols, W])
    return g.filter(pc.not_equal(g[W], 0))


def apply_zset(old: pa.Table, delta: pa.Table) -> pa.Table:
    """Rows after a change: the rows `old` plus the Z-set `delta` (columns of `old` and `_w`)."""
    both = net(pa.concat_tables([with_weight(old, 1), delta.select(old.column_names + [W]).cast(
        with_weight(old, 1).schema)]))
    return both.filter(pc.greater(both[W], 0)).drop_columns([W])


def distinct(t: pa.Table, cols: list[str]) -> pa.Table:
    return t.select(cols).group_by(cols, use_threads=False).aggregate([])


def to_ops(t: pa.Table) -> pa.Table:
    """A consistent Z-set (per key at most one -1 row, the old one, and one +1 row, the new one) as
    change rows that `consolidate` nets: -1 becomes a delete ordered first, +1 an insert after."""
    pos = pc.greater(t[W], 0)
    ops = pc.if_else(pos, int(Op.INSERT), int(Op.DELETE)).cast(pa.int8())
    seq = pc.if_else(pos, 1, 0).cast(pa.int64())
    return t.drop_columns([W]).append_column("_op", ops).append_column("_seq", seq)
