"""Materialize: turn an epoch's chunk into the relation's log rows.

- A table receives *intents* (upserts and key deletes from DML and sources). Its materialize step
  looks up the old rows of the touched keys as of the previous epoch, so that the change it logs
  is consistent: +I for a new key, -U/+U for a changed row, -D for a deleted one, and nothing for
  an upsert that changes nothing.
- An MV receives a chunk that is already consistent (its upstream's log, projected and filtered);
  it only nets each key's rows within the epoch.
- Append-only relations log their inserts as they are."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.storage.schema import Schema
from sparkwave.stream.chunk import Op, consolidate, vnode


def to_log_rows(chunk: DataFrame, schema: Schema, epoch: int) -> DataFrame:
    return chunk.select(F.lit(epoch).cast("bigint").alias("_epoch"), F.col("_seq").cast("bigint").alias("_seq"),
                        F.col("_op").cast("tinyint").alias("_op"), vnode(list(schema.key)).alias("_vnode"),
                        *[F.col(f"`{c.name}`").cast(c.type.spark).alias(c.name) for c in schema.columns])


def materialize_table(intents: DataFrame, state: DataFrame, schema: Schema, epoch: int) -> DataFrame:
    """Log rows for a keyed table, from intents `| _op (+U or KEY_DELETE) | _seq | columns |` and
    the table's state (`| columns |`) as of the previous epoch."""
    if schema.append_only:
        return to_log_rows(intents.withColumn("_op", F.lit(int(Op.INSERT))), schema, epoch)
    key = list(schema.key)
    touched = intents.select(*[F.col(f"`{k}`") for k in key]).distinct()
    old = (state.join(F.broadcast(touched), key, "left_semi")
           .select(F.lit(int(Op.UPDATE_DELETE)).alias("_op"), F.lit(-1).cast("bigint").alias("_seq"),
                   *[F.col(f"`{c}`") for c in schema.names]))
    merged = old.unionByName(intents.select("_op", "_seq", *[F.col(f"`{c}`") for c in schema.names]))
    return to_log_rows(consolidate(merged, key, schema.values), schema, epoch)


def materialize_mv(chunk: DataFrame, schema: Schema, epoch: int) -> DataFrame:
    if schema.append_only:
        return to_log_rows(chunk.where(F.col("_op") == int(Op.INSERT)), schema, epoch)
    return to_log_rows(consolidate(chunk, list(schema.key), schema.values), schema, epoch)
