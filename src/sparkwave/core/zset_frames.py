"""Z-sets as Spark DataFrames: the executors' side of `core/zset.py`, for an epoch too big for the
driver (`stream/operator.py: FrameIO`). Same rules as in Arrow: a row's weight `_w` is +1 inserted,
-1 retracted; equal rows net; a consistent Z-set (per key at most one -1 row, the old one, and one
+1 row, the new one) becomes one change per key."""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sparkwave.core.chunk import Op
from sparkwave.core.schema import SqlType
from sparkwave.core.zset import W


def q(name: str) -> SparkColumn:
    return F.col(f"`{name}`")


def weighted(df: DataFrame, w: int) -> DataFrame:
    return df.withColumn(W, F.lit(w).cast("bigint"))


def net_frame(df: DataFrame) -> DataFrame:
    """Sum the weights of equal rows and drop those that cancel (NULLs equal NULLs, as GROUP BY)."""
    cols = [q(c) for c in df.columns if c != W]
    return df.groupBy(*cols).agg(F.sum(W).cast("bigint").alias(W)).where(F.col(W) != 0)


def union_all(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def apply_frame(old: DataFrame, delta: DataFrame) -> DataFrame:
    """Rows after a change: the rows `old` plus the Z-set `delta` (columns of `old` and `_w`)."""
    both = net_frame(weighted(old, 1).unionByName(delta.select(*[q(c) for c in old.columns], W)))
    return both.where(F.col(W) > 0).drop(W)


def null_safe_on(left: DataFrame, right: DataFrame, left_keys: list[str], right_keys: list[str]) -> SparkColumn:
    """A join condition where NULL equals NULL (a GROUP BY's NULL group)."""
    cond: SparkColumn | None = None
    for a, b in zip(left_keys, right_keys, strict=True):
        c = left[f"`{a}`"].eqNullSafe(right[f"`{b}`"])
        cond = c if cond is None else cond & c
    assert cond is not None, "BUG: a join without keys"
    return cond


def semi(rows: DataFrame, keys: DataFrame, by: list[str]) -> DataFrame:
    """`rows` whose `by` columns equal (NULL-safe) a row of `keys` (which has exactly `by`)."""
    renamed = keys.select(*[q(k).alias(f"_k{i}") for i, k in enumerate(by)])
    return rows.join(renamed, null_safe_on(rows, renamed, by, [f"_k{i}" for i in range(len(by))]), "left_semi")


def log_ops(zset: DataFrame, key: list[str]) -> DataFrame:
    """A netted consistent Z-set as change rows `| _seq | _op | columns |`, one change per key:
    -U old and +U new for a key with both rows, -D for an old row alone, +I for a new one alone (the
    ops and `_seq` order that `core/chunk.py: consolidate` gives)."""
    rows = F.count(F.lit(1)).over(Window.partitionBy(*[q(k) for k in key]))
    pos = F.col(W) > 0
    op = F.when(pos & (rows > 1), int(Op.UPDATE_INSERT)).when(pos, int(Op.INSERT)) \
        .when(rows > 1, int(Op.UPDATE_DELETE)).otherwise(int(Op.DELETE))
    return zset.select(F.when(pos, 1).otherwise(0).cast("bigint").alias("_seq"), op.cast("tinyint").alias("_op"),
                       *[q(c) for c in zset.columns if c != W])


def inserts(rows: DataFrame) -> DataFrame:
    """An append-only relation's Z-set (every row inserted) as change rows `| _seq | _op | columns |`."""
    return rows.select(F.lit(1).cast("bigint").alias("_seq"), F.lit(int(Op.INSERT)).cast("tinyint").alias("_op"),
                       *[q(c) for c in rows.columns if c != W])


_RANGED = ("smallint", "int", "bigint", "date", "varchar", "timestamp")  # their text round-trips exactly


def key_range(rows: DataFrame, column: str, target: str, sql_type: SqlType) -> SparkColumn | None:
    """A predicate on `target` that holds for every value of `rows[column]`, NULL included: the
    range of those values as literals, which Spark pushes into Parquet scans, so a table sorted by
    `target` reads only the row groups whose statistics overlap the range (one job computes it).
    None for types whose order statistics may not follow (floats: NaN and -0.0) or that are not
    worth a range (boolean, bytes), when the two columns' types differ, and when a bound's text
    does not read back as the same value (checked in the same job: a bound that failed to
    round-trip would drop rows)."""
    name = sql_type.name
    if rows.schema[column].dataType.simpleString() != sql_type.spark:
        return None
    col = q(column)
    if name == "timestamptz":  # its text depends on the session's time zone; its microseconds do not
        lo, hi = F.min(F.unix_micros(col)), F.max(F.unix_micros(col))

        def literal(v: SparkColumn) -> SparkColumn:
            return F.timestamp_micros(v.cast("bigint"))
    elif name in _RANGED or name.startswith("decimal"):
        lo, hi = F.min(col).cast("string"), F.max(col).cast("string")

        def literal(v: SparkColumn) -> SparkColumn:
            return v.cast(sql_type.spark)
    else:
        return None
    exact = literal(lo).eqNullSafe(F.min(col)) & literal(hi).eqNullSafe(F.max(col))
    bounds = rows.agg(lo, hi, exact).first()
    assert bounds is not None, "BUG: an aggregate without a row"
    low, high, ok = bounds
    if not ok:
        return None
    where = q(target)
    if low is None:
        return where.isNull()
    return where.isNull() | ((where >= literal(F.lit(low))) & (where <= literal(F.lit(high))))
