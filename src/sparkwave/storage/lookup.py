"""Point lookups: the rows of some keys as of a committed epoch, read on the driver with pyarrow.

This is the state-store read a table's materialize step needs (the old rows of the keys an epoch
touches), and the one stateful executors need (a join side's rows of some join keys, an
aggregate's groups). Parquet statistics prune files and row groups; only matching rows are
materialised."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.core.catalog import Catalog
from sparkwave.core.chunk import Op, first_last
from sparkwave.core.schema import Schema
from sparkwave.core.zset import ns_join
from sparkwave.storage import key_index
from sparkwave.storage.decoded import read_groups, read_logs
from sparkwave.storage.file_index import candidate_groups, file_index
from sparkwave.storage.integrity import check_rows, reading
from sparkwave.storage.table import base_arrow_schema, log_arrow_schema


def lookup(catalog: Catalog, name: str, schema: Schema, epoch: int, keys: pa.Table,
           by: list[str] | None = None) -> pa.Table:
    """Rows `| _vnode | columns |` that exist as of `epoch` and whose `by` columns (default: the
    key) equal a row of `keys`; NULL matches NULL. `keys` may carry the keys' `_vnode`: a table's
    base is sorted by vnode first, so it selects row groups."""
    key = list(schema.key)
    by = by or key
    index_by = ["_vnode", *by] if "_vnode" in keys.column_names else by
    index_keys = keys.select(index_by)
    keys = keys.select(by).group_by(by, use_threads=False).aggregate([])
    cols = ["_vnode", *schema.names]
    base = catalog.base_at(name, epoch)
    c = base.epoch if base else 0
    expr = None
    for k in by:
        values = keys[k].combine_chunks()
        term = pc.field(k).isin(values.drop_null())
        if values.null_count:
            term = term | pc.field(k).is_null()
        expr = term if expr is None else expr & term
    indexed = by == key and index_by[0] == "_vnode" and key_index.indexable(schema)
    logs = catalog.log_files(name, c, epoch)
    check_rows(catalog, name, base, logs)
    found = ns_join(_read_base(base.files if base else [], base_arrow_schema(schema), expr, index_keys, index_by,
                               key if indexed else None), keys, by, "left semi")
    log = _read([p for _, p in logs], log_arrow_schema(schema), expr)
    if log.num_rows == 0:
        return found.select(cols)
    _, latest = first_last(ns_join(log, keys, by, "left semi"), key, ["_epoch", "_seq"])
    live = latest.filter(pc.is_in(latest["_op"], pa.array([int(Op.INSERT), int(Op.UPDATE_INSERT)], pa.int8())))
    kept = ns_join(found, latest.select(key), key, "left anti")
    return pa.concat_tables([kept.select(cols), live.select(cols).cast(kept.select(cols).schema)])


def _read_base(files: list[str], schema: pa.Schema, expr: pc.Expression | None, keys: pa.Table,
               by: list[str], key: list[str] | None) -> pa.Table:
    """The rows of `files` that may match `keys`: through each file's key index when `key` is
    given and the file has one, else the row groups whose statistics may hold a key."""
    parts = []
    for path in files:
        rows = key_index.rows(path, keys, key, schema) if key else None
        if rows is not None:
            parts.append(rows)
            continue
        with reading(path):
            index = file_index(path)
            t = read_groups(index, candidate_groups(index, keys, by), schema)
        parts.append(t.filter(expr) if expr is not None and t.num_rows else t)
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _read(files: list[str], schema: pa.Schema, expr: pc.Expression | None) -> pa.Table:
    if not files:
        return schema.empty_table()
    rows = read_logs(files, schema)
    return rows.filter(expr) if expr is not None and rows.num_rows else rows
