"""The data plane of a backfill: an MV's rows from its upstream's snapshot, and its changes per
upstream epoch from a slice of the upstream's log store."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.storage.schema import Schema
from sparkwave.stream.chunk import vnode, with_vnode
from sparkwave.stream.materialize import materialize_mv
from sparkwave.stream.project_filter import ProjectFilter


def snapshot_rows(pf: ProjectFilter, snapshot: DataFrame, schema: Schema) -> DataFrame:
    """The MV's rows `| _vnode | columns |` for upstream snapshot rows `| _vnode | columns |`."""
    rows = snapshot.drop("_vnode").select(F.lit(1).cast("tinyint").alias("_op"),
                                          F.lit(0).cast("bigint").alias("_seq"), "*")
    out = pf.apply(rows)
    return out.select(vnode(list(schema.key)).alias("_vnode"),
                      *[F.col(f"`{c.name}`").cast(c.type.spark).alias(c.name) for c in schema.columns])


def log_changes(pf: ProjectFilter, log: DataFrame, schema: Schema, epochs: list[int]) -> dict[int, pa.Table]:
    """The MV's log rows per upstream epoch, from the upstream's log rows of those epochs: one
    Spark job for the whole slice, netted per epoch on the driver."""
    chunk = with_vnode(pf.apply(log, keep=("_epoch",)), schema, keep=("_epoch",)).toArrow()
    out: dict[int, pa.Table] = {}
    for e in epochs:
        rows = chunk.filter(pc.equal(chunk["_epoch"], e)).drop_columns(["_epoch"])
        if rows.num_rows:
            changes = materialize_mv(rows, schema, e)
            if changes.num_rows:
                out[e] = changes
    return out
