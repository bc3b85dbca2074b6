"""A watermarked table's or source's step: the rows of the epoch below the watermark before it are
dropped (and counted: `late_rows`, DESCRIBE, `/metrics`), never stored or handed to an MV; the
accepted rows move each split's watermark (the max of `column - delay`) and the relation's (the
least over the splits that have seen a row), never back. RisingWave's WatermarkFilter keeps
`column >= watermark` the same way; here the watermark a row is judged by is the one committed
before its epoch, so an epoch's outcome does not depend on the order of its rows and a replay
drops the same rows."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.connectors import Connector
from sparkwave.connectors.kafka import SEQ_PARTITION_SHIFT
from sparkwave.core.catalog import Catalog, Relation
from sparkwave.stream.epoch_work import EpochWork
from sparkwave.stream.watermark import Declared, as_ints

ONE_SPLIT = "dml"  # the split of rows that come from no connector (INSERT)


@dataclass
class Admitted:
    """An epoch's outcome for one relation: the rows kept, how many were late, the splits'
    watermarks the epoch moved and the relation's watermark after it."""

    rows: pa.Table
    late: int
    splits: dict[str, int] = field(default_factory=dict)
    watermark: int | None = None


def split_names(conn: Connector | None, rows: pa.Table) -> np.ndarray:
    """Each row's split (the connector's, from its `_seq`), or `ONE_SPLIT` for rows of no connector."""
    if conn is None or "_seq" not in rows.column_names:
        return np.full(rows.num_rows, ONE_SPLIT, dtype=object)
    try:
        names, _ = conn.positions(rows["_seq"])
    except NotImplementedError:  # a connector of one split
        return np.full(rows.num_rows, conn.splits[0] if conn.splits else ONE_SPLIT, dtype=object)
    return np.asarray(names.to_pylist(), dtype=object)


def admit(decl: Declared, rows: pa.Table, conn: Connector | None, before: int | None,
          splits_before: dict[str, int]) -> Admitted:
    """Drop `rows` whose watermarked column is below `before` (the relation's watermark before the
    epoch; NULL is never late) and compute the watermarks after the epoch from the rest."""
    values = as_ints(rows[decl.column])
    late_mask = pc.fill_null(pc.less(values, before), False) if before is not None else None
    late = int(pc.sum(late_mask).as_py() or 0) if late_mask is not None else 0
    if late:
        keep = pc.invert(late_mask)
        rows, values = rows.filter(keep), values.filter(keep)
    moved: dict[str, int] = {}
    if rows.num_rows:
        names = split_names(conn, rows)
        marks = pc.subtract(values, decl.delay).to_numpy(zero_copy_only=False)
        valid = ~pc.is_null(values).to_numpy(zero_copy_only=False)
        for split in np.unique(names[valid]) if valid.any() else ():
            top = int(marks[valid & (names == split)].max())
            if top > splits_before.get(split, top - 1):
                moved[str(split)] = top
    merged = {**splits_before, **moved}
    watermark = before
    if merged:
        least = min(merged.values())
        watermark = least if before is None else max(before, least)
    return Admitted(rows, late, moved, watermark)


def watermark_step(catalog: Catalog, rel: Relation, e: EpochWork, rows: pa.Table, conn: Connector | None) -> pa.Table:
    """The table's or source's rows of epoch `e` on time; what the epoch moved and dropped goes into
    `e` for its commit, and the relation's watermark after it into `e.watermarks` for the MVs over it."""
    decl = Declared.of(rel.definition)
    assert decl is not None, f"BUG: {rel.name} declares no watermark"
    before = catalog.watermark(rel.name, e.prev)
    out = admit(decl, rows, conn, before, catalog.split_watermarks(rel.name, e.prev))
    with e.lock:
        if rel.kind == "source" and before is not None:  # what a backfill reading it again must drop
            e.judged.extend((rel.name, s, lo, hi, before) for s, (lo, hi) in e.source_ranges(rel.name).items()
                            if hi > lo)
        e.late[rel.name] = out.late
        e.moved_watermarks.extend((rel.name, s, v) for s, v in out.splits.items())
        if out.watermark is not None:
            e.watermarks[rel.name] = out.watermark
            if out.watermark != before:
                e.moved_watermarks.append((rel.name, "", out.watermark))
    return out.rows


# --- a source's history read again (a backfill of an MV over it) ---------------------------------
def _before(catalog: Catalog, rel: Relation, epoch: int) -> int | None:
    return catalog.watermark(rel.name, epoch - 1)


def on_time_history(catalog: Catalog, rel: Relation, rows: DataFrame) -> DataFrame:
    """A Kafka source's rows read again from Kafka (`_seq` = partition and offset) without those
    its epochs dropped as late: each row is judged by the watermark before the epoch that read it,
    as the main graph judged it. A relation without a watermark: `rows` as they are."""
    decl = Declared.of(rel.definition)
    if decl is None:
        return rows
    bounds = [((int(s) << SEQ_PARTITION_SHIFT) + lo, (int(s) << SEQ_PARTITION_SHIFT) + hi, w)
              for s, lo, hi, w in catalog.judged_ranges(rel.name)]
    if not bounds:
        return rows
    spark = rows.sparkSession
    judged = spark.createDataFrame(bounds, "_wm_lo bigint, _wm_hi bigint, _wm_w bigint")
    seq = F.col("_seq")
    joined = rows.join(F.broadcast(judged), (seq >= F.col("_wm_lo")) & (seq < F.col("_wm_hi")), "left")
    column = F.col(f"`{decl.column}`")
    declared_column = rel.schema.column(decl.column)
    timed = declared_column is not None and declared_column.type.name in ("timestamp", "timestamptz", "date")
    value = F.unix_micros(column.cast("timestamp")) if timed else column.cast("bigint")
    keep = F.col("_wm_w").isNull() | column.isNull() | (value >= F.col("_wm_w"))
    return joined.where(keep).drop("_wm_lo", "_wm_hi", "_wm_w")


def on_time_epoch(catalog: Catalog, rel: Relation, epoch: int, rows: pa.Table) -> pa.Table:
    """A source's rows of one epoch read again, without those the epoch dropped as late."""
    decl = Declared.of(rel.definition)
    before = None if decl is None else _before(catalog, rel, epoch)
    if decl is None or before is None or rows.num_rows == 0:
        return rows
    return rows.filter(pc.fill_null(pc.greater_equal(as_ints(rows[decl.column]), before), True))
