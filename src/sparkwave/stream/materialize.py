"""Materialize: turn an epoch's chunk into the relation's log rows.

- A table receives *intents* (inserts, upserts and key deletes from DML and sources). Its
  materialize step looks up the old rows of the touched keys as of the previous epoch, applies the
  table's ON CONFLICT rule to the inserts (`core/conflict.py`), so that the change it logs is
  consistent: +I for a new key, -U/+U for a changed row, -D for a deleted one, and nothing for
  an upsert that changes nothing.
- An MV's root step (`Materialize`) turns its operator tree's Z-set into log rows: the root's
  columns renamed to the MV's, netted per MV key into one change per key.
- Append-only relations log their inserts as they are.

A big epoch (`meta/barrier.py` decides) runs the same rules as Spark frames on the executors
(`materialize_table_frame`, `Materialize.log_frame`), which write the log file themselves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sparkwave.core.chunk import Op, consolidate, vnode
from sparkwave.core.conflict import OnConflict, resolve
from sparkwave.core.schema import Schema
from sparkwave.core.zset import W, to_ops
from sparkwave.core.zset_frames import inserts, log_ops, net_frame, q, semi, weighted
from sparkwave.storage.table import log_rows


def materialize_table(intents: pa.Table, schema: Schema, epoch: int, lookup: Callable[[pa.Table], pa.Table],
                      on_conflict: OnConflict = "overwrite", new_keys: bool = False) -> pa.Table:
    """Log rows for a table, from intents `| _op (+I, +U or KEY_DELETE) | _seq | _vnode | columns |`;
    `lookup(keys)` returns the rows `| _vnode | columns |` of those keys as of the previous epoch.
    An INSERT of a key the table holds replaces its row, or follows the table's `on_conflict`.
    `new_keys`: the caller expects the keys new (a CDC backfill's chunk), so the rows are checked for
    the case consolidation can skip (`_all_inserts`)."""
    if schema.append_only:
        ops = pa.array([int(Op.INSERT)] * intents.num_rows, pa.int8())
        return log_rows(intents.set_column(intents.schema.get_field_index("_op"), "_op", ops), schema, epoch)
    old = lookup(intents.select(["_vnode", *schema.key]))  # the vnode narrows the row groups read
    if new_keys and old.num_rows == 0 and on_conflict == "overwrite" and _all_inserts(intents, list(schema.key)):
        n = intents.num_rows
        ops, seqs = pa.array([int(Op.INSERT)] * n, pa.int8()), pa.array([1] * n, pa.int64())
        return log_rows(intents.set_column(intents.schema.get_field_index("_op"), "_op", ops)
                        .set_column(intents.schema.get_field_index("_seq"), "_seq", seqs), schema, epoch)
    old = old.append_column("_op", pa.array([int(Op.UPDATE_DELETE)] * old.num_rows, pa.int8())) \
             .append_column("_seq", pa.array([-1] * old.num_rows, pa.int64()))
    names = ["_op", "_seq", "_vnode", *schema.names]
    intents = resolve(intents.select(names).cast(old.select(names).schema), old, list(schema.key), schema.values,
                      on_conflict)
    if on_conflict != "overwrite":  # a key whose every INSERT was ignored keeps its row: no change
        old = old.join(intents.select(list(schema.key)), keys=list(schema.key), join_type="left semi")
    merged = pa.concat_tables([old.select(names), intents])
    return log_rows(consolidate(merged, list(schema.key), schema.values), schema, epoch)


def _all_inserts(intents: pa.Table, key: list[str]) -> bool:
    """Whether every intent is an insert or upsert of a key no other intent has: with no old row,
    `consolidate` would make each a +I of its own values (with `_seq` 1), so it can be skipped."""
    if len(key) != 1 or intents.num_rows == 0:
        return False
    upserts = pa.array([int(Op.INSERT), int(Op.UPDATE_INSERT)], intents["_op"].type)
    if not pc.all(pc.is_in(intents["_op"], upserts)).as_py():
        return False
    k = intents[key[0]]
    if pa.types.is_integer(k.type) and k.null_count == 0:  # a chunk comes in key order: a cheap proof
        values = k.to_numpy()
        if bool(np.all(values[1:] > values[:-1])):
            return True
    return pc.count_distinct(k, mode="all").as_py() == intents.num_rows


def materialize_table_frame(intents: DataFrame, current: DataFrame | None, schema: Schema) -> DataFrame:
    """`materialize_table` on the executors, for a big epoch under the default ON CONFLICT rule (the
    last intent of a key wins): `current` is the table as of the previous epoch `| _vnode | columns |`
    (None for an append-only one), joined with the intents' keys instead of looked up. Returns
    `| _seq | _op | _vnode | columns |`."""
    cols = [q(c) for c in ["_vnode", *schema.names]]
    if schema.append_only:
        return intents.select("_seq", F.lit(int(Op.INSERT)).cast("tinyint").alias("_op"), *cols)
    assert current is not None, "BUG: a keyed table's big epoch without the table's snapshot"
    key = list(schema.key)
    newest = Window.partitionBy(*[q(k) for k in key]).orderBy(F.col("_seq").desc())
    last = intents.withColumn("_rn", F.row_number().over(newest)).where("_rn = 1")
    new = last.where(F.col("_op").isin(int(Op.INSERT), int(Op.UPDATE_INSERT))).select(*cols)
    old = semi(current.select(*cols), last.select(*[q(k) for k in key]), key)
    return log_ops(net_frame(weighted(old, -1).unionByName(weighted(new, 1))), key)


@dataclass
class Materialize:
    """An MV's root step: the root operator's output (internal columns, keyed by `key`) as the MV's
    rows, through `outputs` (MV column, root column), visible columns then hidden keys."""

    key: list[str]
    outputs: list[tuple[str, str]]
    schema: Schema

    def log_rows(self, d: pa.Table, epoch: int) -> pa.Table:
        """The root's Z-set `| _vnode | root columns | _w |` of one epoch as the MV's log rows."""
        names = {i: m for m, i in self.outputs}
        rows = d.rename_columns([names.get(c, c) for c in d.column_names])
        rows = to_ops(rows.select(["_vnode", *self.schema.names, W]))
        if self.schema.append_only:
            return log_rows(rows, self.schema, epoch)
        return log_rows(consolidate(rows, list(self.schema.key), self.schema.values), self.schema, epoch)

    def log_frame(self, d: DataFrame) -> DataFrame:
        """`log_rows` on the executors: the root's Z-set frame as `| _seq | _op | _vnode | columns |`."""
        names = {i: m for m, i in self.outputs}
        rows = d.select(*[q(c).alias(names.get(c, c)) for c in d.columns])
        rows = rows.select("_vnode", *[q(n) for n in self.schema.names], W)
        return inserts(rows) if self.schema.append_only else log_ops(net_frame(rows), list(self.schema.key))

    def rows(self, root: DataFrame) -> DataFrame:
        """The root's snapshot frame as the MV's stored rows `| _vnode | columns |`."""
        internal = dict(self.outputs)
        return root.select(vnode(self.key).alias("_vnode"), *[
            F.col(f"`{internal[c.name]}`").cast(c.type.spark).alias(c.name) for c in self.schema.columns])
