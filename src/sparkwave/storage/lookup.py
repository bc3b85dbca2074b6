"""Point lookups: the rows of some keys as of a committed epoch, read on the driver with pyarrow.

This is the state-store read a table's materialize step needs (the old rows of the keys an epoch
touches). Parquet statistics prune files and row groups; only matching rows are materialised."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from sparkwave.meta.catalog import Catalog
from sparkwave.storage.schema import Schema
from sparkwave.storage.table import base_arrow_schema, log_arrow_schema
from sparkwave.stream.chunk import Op, first_last


def lookup(catalog: Catalog, name: str, schema: Schema, epoch: int, keys: pa.Table) -> pa.Table:
    """Rows `| _vnode | columns |` of the keys in `keys` that exist as of `epoch`."""
    key = list(schema.key)
    keys = keys.select(key).group_by(key).aggregate([])
    cols = ["_vnode", *schema.names]
    base = catalog.base_at(name, epoch)
    c = base.epoch if base else 0
    expr = None
    for k in key:
        term = pc.field(k).isin(keys[k].combine_chunks())
        expr = term if expr is None else expr & term
    found = _read(base.files if base else [], base_arrow_schema(schema), expr).join(keys, key, join_type="left semi")
    log_files = [p for _, p in catalog.log_files(name, c, epoch)]
    log = _read(log_files, log_arrow_schema(schema), expr)
    if log.num_rows == 0:
        return found.select(cols)
    _, latest = first_last(log.join(keys, key, join_type="left semi"), key, ["_epoch", "_seq"])
    live = latest.filter(pc.is_in(latest["_op"], pa.array([int(Op.INSERT), int(Op.UPDATE_INSERT)], pa.int8())))
    kept = found.join(latest.select(key), key, join_type="left anti")
    return pa.concat_tables([kept.select(cols), live.select(cols).cast(kept.select(cols).schema)])


def _read(files: list[str], schema: pa.Schema, expr: pc.Expression | None) -> pa.Table:
    if not files:
        return schema.empty_table()
    return ds.dataset(files, schema=schema, format="parquet").to_table(filter=expr)
