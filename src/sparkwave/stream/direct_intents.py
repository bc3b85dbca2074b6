"""A table's intents handed over in Arrow by its connector (`Connector.read_arrow`), for a table step
that needs nothing of Spark: rows the driver already holds (a CDC backfill's chunk) would otherwise
go through a Spark local relation and back (`local_batches`, then `to_arrow`), which cost a CDC
backfill most of its time. The vnode is Spark's, computed in numpy (`core/xxhash64.py`)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.connectors.base import ERROR, RAW, Connector
from sparkwave.core.catalog import Relation
from sparkwave.core.chunk import VNODES
from sparkwave.core.schema import Schema
from sparkwave.core.xxhash64 import vnodes
from sparkwave.storage.table import base_arrow_schema


def takes_direct(rel: Relation, has_dml: bool) -> bool:
    """Whether the table's intents of an epoch may skip Spark: source rows only, stored as they come
    (no column computed from the row or the epoch, no ON CONFLICT rewrite, no watermark)."""
    d = rel.definition
    return rel.kind == "table" and not has_dml and not any(
        k in d for k in ("proctime", "generated", "on_conflict", "watermark"))


def arrow_intents(conn: Connector, rel: Relation, ranges: dict[str, list[int]]) -> pa.Table | None:
    """`with_vnode(read(...))` without Spark: `| _op | _seq | [_error | _raw] | _vnode | columns |` in
    stored types; None when the connector holds no Arrow batch."""
    batch = conn.read_arrow(ranges)
    if batch is None:
        return None
    cols = {c.name: batch.column(c.name).cast(c.type.arrow) for c in rel.schema.columns}
    keep = [k for k in (ERROR, RAW) if k in batch.schema.names]
    arrays = [batch.column("_op").cast(pa.int8()), batch.column("_seq").cast(pa.int64()),
              *[batch.column(k) for k in keep],
              vnodes([cols[k] for k in rel.schema.key], batch.num_rows, VNODES), *cols.values()]
    return pa.Table.from_arrays(arrays, names=["_op", "_seq", *keep, "_vnode", *cols])


def old_rows(find: Callable[[pa.Table], pa.Table], keys: pa.Table, schema: Schema,
             absent: tuple[int, int] | pa.Array | None) -> pa.Table:
    """`find(keys)` (the table's rows of `keys` before the epoch) for the keys outside the connector's
    `absent` range (or values), whose rows it knows the table does not hold: a backfill chunk's keys,
    all of them new, are not looked up in the table's files."""
    if absent is None or len(schema.key) != 1:
        return find(keys)
    k = keys[schema.key[0]]
    inside = pc.and_(pc.greater_equal(k, absent[0]), pc.less(k, absent[1])) if isinstance(absent, tuple) else \
        pc.is_in(k, value_set=absent.cast(k.type))
    keys = keys.filter(pc.invert(pc.fill_null(inside, False)))
    return find(keys) if keys.num_rows else base_arrow_schema(schema).empty_table()
