"""Change ops and the rules that turn a chunk of them into one net change per key.

A chunk is a Spark DataFrame `| _op | _seq | columns... |`; `_seq` orders rows within the epoch.
Op codes follow RisingWave: +I = 1, -D = 2, -U = 3, +U = 4. Code 5 (key delete) exists only
inside a table's materialize step: a DELETE intent that carries the key but not the old values."""

from __future__ import annotations

from enum import IntEnum

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.storage.table import VNODES


class Op(IntEnum):
    INSERT = 1
    DELETE = 2
    UPDATE_DELETE = 3
    UPDATE_INSERT = 4
    KEY_DELETE = 5


OP_SYMBOLS = {Op.INSERT: "+I", Op.DELETE: "-D", Op.UPDATE_DELETE: "-U", Op.UPDATE_INSERT: "+U"}


def vnode(key: list[str]) -> SparkColumn:
    """The key's vnode: a stable hash bucket in [0, VNODES)."""
    return F.pmod(F.xxhash64(*[F.col(f"`{k}`") for k in key]), F.lit(VNODES)).cast("smallint")


def consolidate(chunk: DataFrame, key: list[str], values: list[str]) -> DataFrame:
    """The net change per key of a chunk, as log rows `| _op | _seq | key... | values... |`.

    The first row of a key (by `_seq`) tells whether the key existed before the epoch: it did if
    that row is -D or -U, which then carries the old values. The last row tells whether it exists
    after: it does if that row is +I or +U, carrying the new values. Then:
    old and new and equal -> nothing (an unchanged upsert); old and new -> -U old, +U new;
    old only -> -D old; new only -> +I new; neither -> nothing."""
    q = lambda c: F.col(f"`{c}`")  # noqa: E731
    row = F.struct(F.col("_op"), F.struct(*[q(v) for v in values]).alias("r"))
    g = chunk.groupBy(*[q(k) for k in key]).agg(F.min_by(row, "_seq").alias("_f"), F.max_by(row, "_seq").alias("_l"))
    had = F.col("_f._op").isin(int(Op.DELETE), int(Op.UPDATE_DELETE))
    has = F.col("_l._op").isin(int(Op.INSERT), int(Op.UPDATE_INSERT))
    same = had & has & F.col("_f.r").eqNullSafe(F.col("_l.r"))
    g = g.where(~same & (had | has))
    old = g.where(had).select(
        F.when(has, F.lit(int(Op.UPDATE_DELETE))).otherwise(F.lit(int(Op.DELETE))).cast("tinyint").alias("_op"),
        F.lit(0).cast("bigint").alias("_seq"), *[q(k) for k in key], *[F.col(f"_f.r.`{v}`").alias(v) for v in values])
    new = g.where(has).select(
        F.when(had, F.lit(int(Op.UPDATE_INSERT))).otherwise(F.lit(int(Op.INSERT))).cast("tinyint").alias("_op"),
        F.lit(1).cast("bigint").alias("_seq"), *[q(k) for k in key], *[F.col(f"_l.r.`{v}`").alias(v) for v in values])
    return old.unionByName(new)
