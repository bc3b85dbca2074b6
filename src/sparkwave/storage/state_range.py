"""Range reads of a state table: its rows as of an epoch whose timestamp column lies in some ranges
(a temporal filter's rows that the move of NOW() may flip, `stream/temporal_filter.py`). The table
is keyed by that column first, so its base is sorted by it and row-group statistics skip the groups
outside the ranges; the log is overlaid as `lookup` overlays it (the last write of a key wins)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.core.catalog import Catalog
from sparkwave.core.chunk import Op, first_last
from sparkwave.core.schema import Schema
from sparkwave.core.zset import ns_join
from sparkwave.storage.decoded import read_groups, read_logs
from sparkwave.storage.file_index import file_index
from sparkwave.storage.integrity import check_rows, reading
from sparkwave.storage.table import base_arrow_schema, log_arrow_schema

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LIVE = pa.array([int(Op.INSERT), int(Op.UPDATE_INSERT)], pa.int8())


def micros(v: object) -> int | None:
    """A timestamp statistic (a datetime, naive read as UTC, or an int of microseconds) as microseconds."""
    if isinstance(v, datetime):
        return ((v if v.tzinfo else v.replace(tzinfo=UTC)) - _EPOCH) // timedelta(microseconds=1)
    return int(v) if isinstance(v, int | np.integer) else None


def in_ranges(values: pa.ChunkedArray | pa.Array, ranges: list[tuple[int, int]]) -> pa.Array:
    """Whether each timestamp lies in one of the closed ranges (microseconds); NULL never does."""
    ts = pc.cast(values, pa.int64())
    hit = pa.array(np.zeros(len(ts), dtype=bool))
    for lo, hi in ranges:
        hit = pc.or_(hit, pc.and_(pc.greater_equal(ts, lo), pc.less_equal(ts, hi)))
    return pc.fill_null(hit, False)


def range_rows(catalog: Catalog, name: str, schema: Schema, epoch: int, column: str,
               ranges: list[tuple[int, int]]) -> pa.Table:
    """Rows `| columns |` that exist as of `epoch` and whose `column` lies in one of `ranges`."""
    key = list(schema.key)
    assert column in key, f"BUG: {name} is not keyed by {column}"
    base = catalog.base_at(name, epoch)
    logs = catalog.log_files(name, base.epoch if base else 0, epoch)
    check_rows(catalog, name, base, logs)
    target = base_arrow_schema(schema)
    parts = [_base_rows(path, target, column, ranges) for path in (base.files if base else [])]
    found = pa.concat_tables(parts) if parts else target.empty_table()
    log = read_logs([p for _, p in logs], log_arrow_schema(schema)) if logs else None
    if log is None or log.num_rows == 0:
        return found.select(schema.names)
    log = log.filter(in_ranges(log[column], ranges))  # a key's writes all carry its time: the column is in the key
    _, latest = first_last(log, key, ["_epoch", "_seq"])
    live = latest.filter(pc.is_in(latest["_op"], _LIVE))
    kept = ns_join(found, latest.select(key), key, "left anti")
    found = kept.select(schema.names)
    return pa.concat_tables([found, live.select(schema.names).cast(found.schema)])


def _base_rows(path: str, target: pa.Schema, column: str, ranges: list[tuple[int, int]]) -> pa.Table:
    with reading(path):
        index = file_index(path)
        stats = index.column(column)
        groups = None
        if stats is not None:
            groups = []
            for g, (lo, hi) in enumerate(zip(stats.mins, stats.maxs, strict=True)):
                a, b = micros(lo), micros(hi)
                if a is None or b is None or any(a <= r_hi and r_lo <= b for r_lo, r_hi in ranges):
                    groups.append(g)
        t = read_groups(index, groups, target)
    return t.filter(in_ranges(t[column], ranges)) if t.num_rows else t
