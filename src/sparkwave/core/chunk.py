"""Change ops and the rule that turns a chunk of them into one net change per key.

A chunk is an Arrow table `| _op | _seq | _vnode | columns... |`; `_seq` orders rows within the
epoch. Op codes follow RisingWave: +I = 1, -D = 2, -U = 3, +U = 4. Code 5 (key delete) exists
only inside a table's materialize step: a DELETE intent that carries the key, not the old values.

Chunks are computed by Spark (expressions, sources, DML) and collected once, because the log
write happens on the driver anyway; netting them there costs no extra Spark job or shuffle."""

from __future__ import annotations

from enum import IntEnum

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.schema import Schema

VNODES = 256  # hash buckets of keys: the unit of backfill chunks and of base-file clustering


class Op(IntEnum):
    INSERT = 1
    DELETE = 2
    UPDATE_DELETE = 3
    UPDATE_INSERT = 4
    KEY_DELETE = 5


def vnode(key: list[str]) -> SparkColumn:
    """The key's vnode: a stable hash bucket in [0, VNODES)."""
    return F.pmod(F.xxhash64(*[F.col(f"`{k}`") for k in key]), F.lit(VNODES)).cast("smallint")


def vnode_sql(key_exprs: list[str]) -> str:
    """`vnode` as a Spark SQL select item `_vnode` over the expressions that compute the key, so that
    the select computing a key also computes its vnode (no extra projection per epoch)."""
    return f"{vnode_expr(key_exprs)} AS _vnode"


def vnode_expr(key_exprs: list[str]) -> str:
    """`vnode` as a Spark SQL expression over the expressions that compute the key."""
    return f"CAST(pmod(xxhash64({', '.join(key_exprs)}), {VNODES}) AS SMALLINT)"


def with_vnode(chunk: DataFrame, schema: Schema, keep: tuple[str, ...] = ()) -> DataFrame:
    """The chunk's columns in stored order and types, with each row's vnode (and `keep`)."""
    return chunk.select(F.col("_op").cast("tinyint").alias("_op"), F.col("_seq").cast("bigint").alias("_seq"),
                        *keep, vnode(list(schema.key)).alias("_vnode"),
                        *[F.col(f"`{c.name}`").cast(c.type.spark).alias(c.name) for c in schema.columns])


def first_last(chunk: pa.Table, key: list[str], order: list[str]) -> tuple[pa.Table, pa.Table]:
    """The first and the last row of each key by `order`, as two tables aligned key by key.
    (Index-based, since Arrow's first/last aggregations lack kernels for some types, e.g. decimal.)"""
    ordered = chunk.sort_by([(c, "ascending") for c in order])
    ordered = ordered.append_column("_i", pa.array(range(ordered.num_rows), pa.int64()))
    g = ordered.group_by(key, use_threads=False).aggregate([("_i", "min"), ("_i", "max")])
    return ordered.take(g["_i_min"]), ordered.take(g["_i_max"])


def _null_safe_equal(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.or_(pc.fill_null(pc.equal(a, b), False), both_null)


def consolidate(chunk: pa.Table, key: list[str], values: list[str]) -> pa.Table:
    """The net change per key, as rows `| _op | _seq | _vnode | key... | values... |`.

    The first row of a key (by `_seq`) tells whether the key existed before the epoch: it did if
    that row is -D or -U, which then carries the old values. The last row tells whether it exists
    after: it does if that row is +I or +U, carrying the new values. Then:
    old and new and equal -> nothing (an unchanged upsert); old and new -> -U old, +U new;
    old only -> -D old; new only -> +I new; neither -> nothing."""
    first, last = first_last(chunk, key, ["_seq"])
    had = pc.is_in(first["_op"], pa.array([int(Op.DELETE), int(Op.UPDATE_DELETE)], first["_op"].type))
    has = pc.is_in(last["_op"], pa.array([int(Op.INSERT), int(Op.UPDATE_INSERT)], last["_op"].type))
    same = pc.and_(had, has)
    for v in values:
        same = pc.and_(same, _null_safe_equal(first[v], last[v]))
    keep = pc.and_(pc.invert(same), pc.or_(had, has))

    def side(rows: pa.Table, mask: pa.ChunkedArray, other: pa.ChunkedArray, op_if: int, op_else: int,
             seq: int) -> pa.Table:
        sel = pc.and_(keep, mask)
        picked = rows.filter(sel)
        op = pc.if_else(other.filter(sel), op_if, op_else).cast(pa.int8())
        return pa.table({"_op": op, "_seq": pa.array([seq] * picked.num_rows, pa.int64()),
                         "_vnode": picked["_vnode"], **{c: picked[c] for c in [*key, *values]}})

    old = side(first, had, has, int(Op.UPDATE_DELETE), int(Op.DELETE), 0)
    new = side(last, has, had, int(Op.UPDATE_INSERT), int(Op.INSERT), 1)
    return pa.concat_tables([old, new])
