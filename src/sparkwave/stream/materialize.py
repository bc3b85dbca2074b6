"""Materialize: turn an epoch's chunk into the relation's log rows.

- A table receives *intents* (upserts and key deletes from DML and sources). Its materialize step
  looks up the old rows of the touched keys as of the previous epoch, so that the change it logs
  is consistent: +I for a new key, -U/+U for a changed row, -D for a deleted one, and nothing for
  an upsert that changes nothing.
- Append-only relations log their inserts as they are."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from sparkwave.core.chunk import Op, consolidate
from sparkwave.core.schema import Schema
from sparkwave.storage.table import log_rows


def materialize_table(intents: pa.Table, schema: Schema, epoch: int,
                      lookup: Callable[[pa.Table], pa.Table]) -> pa.Table:
    """Log rows for a table, from intents `| _op (+U or KEY_DELETE) | _seq | _vnode | columns |`;
    `lookup(keys)` returns the rows `| _vnode | columns |` of those keys as of the previous epoch."""
    if schema.append_only:
        ops = pa.array([int(Op.INSERT)] * intents.num_rows, pa.int8())
        return log_rows(intents.set_column(intents.schema.get_field_index("_op"), "_op", ops), schema, epoch)
    old = lookup(intents.select(["_vnode", *schema.key]))  # the vnode narrows the row groups read
    old = old.append_column("_op", pa.array([int(Op.UPDATE_DELETE)] * old.num_rows, pa.int8())) \
             .append_column("_seq", pa.array([-1] * old.num_rows, pa.int64()))
    names = ["_op", "_seq", "_vnode", *schema.names]
    merged = pa.concat_tables([old.select(names), intents.select(names).cast(old.select(names).schema)])
    return log_rows(consolidate(merged, list(schema.key), schema.values), schema, epoch)
