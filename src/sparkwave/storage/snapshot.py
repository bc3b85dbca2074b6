"""Reading a table as of an epoch, and its change stream between two epochs, as Spark DataFrames.

State as of `e` = the newest base with compaction epoch `c <= e`, overlaid with the log rows of
`(c, e]` where the last op per key wins. Files are read by Spark's native Parquet reader; which
files hold which epoch comes from the catalog, so no Delta log is scanned on the read path. A small
snapshot can be read on the driver instead (`local_snapshot`): the same overlay in Arrow, with no
Spark job."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sparkwave.core import policy
from sparkwave.core.catalog import Catalog
from sparkwave.core.chunk import VNODES, Op
from sparkwave.core.schema import Schema
from sparkwave.core.spark import empty_frame
from sparkwave.storage.file_index import file_index
from sparkwave.storage.integrity import check_rows, parquet_file, read_table, reading
from sparkwave.storage.table import base_arrow_schema, base_spark_ddl, log_arrow_schema, log_spark_ddl

__all__ = ["changes", "local_snapshot", "read_parquet", "rereads_cheaply", "snapshot", "vnode_rows"]


def read_parquet(spark: SparkSession, ddl: str, paths: list[str]) -> DataFrame:
    if not paths:
        return empty_frame(spark, ddl)
    # A file that retention removed before the frame is evaluated fails the read, whatever the
    # session's `spark.sql.files.ignoreMissingFiles` says: a snapshot is whole or an error.
    return spark.read.schema(ddl).option("ignoreMissingFiles", "false").parquet(*paths)


def changes(spark: SparkSession, catalog: Catalog, name: str, schema: Schema, after: int, upto: int) -> DataFrame:
    """The log rows `| _epoch | _seq | _op | _vnode | columns |` of epochs in `(after, upto]`."""
    logs = catalog.log_files(name, after, upto)
    check_rows(catalog, name, None, logs)
    return read_parquet(spark, log_spark_ddl(schema), [p for _, p in logs])


def snapshot(spark: SparkSession, catalog: Catalog, name: str, schema: Schema, epoch: int,
             vnodes: tuple[int, int] | None = None, where: SparkColumn | None = None) -> DataFrame:
    """The rows `| _vnode | columns |` of `name` as of `epoch` (the caller checks retention); with
    `vnodes = (lo, hi)` only those of vnodes in `[lo, hi)`: a backfill chunk; with `where` (a
    predicate on key columns only, so that it keeps or drops every version of a key) only the rows
    it holds for. Both filters reach the Parquet scans, so base row groups outside them are skipped."""
    base = catalog.base_at(name, epoch)
    c = base.epoch if base else 0
    logs = catalog.log_files(name, c, epoch)
    check_rows(catalog, name, base, logs)
    log_files = [p for _, p in logs]
    state = _in_range(read_parquet(spark, base_spark_ddl(schema), base.files if base else []), vnodes, where) \
        if base or not log_files else None
    if not log_files:
        assert state is not None
        return state
    log = _in_range(read_parquet(spark, log_spark_ddl(schema), log_files), vnodes, where)
    cols = ["_vnode", *[f"`{n}`" for n in schema.names]]
    if schema.append_only:
        inserts = log.where(F.col("_op") == int(Op.INSERT)).select(*cols)
        return inserts if state is None else state.unionByName(inserts)
    key = [f"`{k}`" for k in schema.key]
    w = Window.partitionBy(*key).orderBy(F.col("_epoch").desc(), F.col("_seq").desc())
    latest = log.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn")
    if state is None:  # no base yet: the log alone (each planning step costs the build Py4J round trips)
        return latest.where(F.col("_op").isin(int(Op.INSERT), int(Op.UPDATE_INSERT))).select(*cols)
    # Null-safe: a key may hold NULLs (an outer join's MV is keyed by both sides' keys).
    keys = latest.select(*[F.col(k).alias(f"_k{i}") for i, k in enumerate(key)])
    cond = None
    for i, k in enumerate(schema.key):
        eq = state[f"`{k}`"].eqNullSafe(keys[f"_k{i}"])
        cond = eq if cond is None else cond & eq
    kept = state.join(keys, cond, "left_anti")
    live = latest.where(F.col("_op").isin(int(Op.INSERT), int(Op.UPDATE_INSERT))).select(*cols)
    return kept.select(*cols).unionByName(live)


def local_snapshot(catalog: Catalog, name: str, schema: Schema, epoch: int, *, build: bool = False
                   ) -> pa.Table | None:
    """`snapshot`'s rows, read with pyarrow on the driver; None when its files are too big for it
    (`policy.snapshot_in_arrow`; or decode to more than `policy.LOCAL_SNAPSHOT_MEMORY`), when it needs
    no overlay and its base is too big for a local relation (Spark's plain scan is as fast:
    `policy.plain_scan_wins`, bench/RESULTS.md; not for a driver `build`, which holds the rows
    anyway: its bounds are `policy.build_snapshot_in_arrow`'s),
    or when a key column is a float (Spark's key equality folds NaNs and -0.0, Arrow's grouping does
    not). A file that retention removed meanwhile raises `FileNotFoundError`."""
    if any(pa.types.is_floating(c.type.arrow) for c in schema.columns if c.name in schema.key):
        return None
    base = catalog.base_at(name, epoch)
    base_files = base.files if base else []
    logs = catalog.log_files(name, base.epoch if base else 0, epoch)
    log_files = [p for _, p in logs]
    file_bytes = sum(os.path.getsize(f) for f in [*base_files, *log_files])
    if not (policy.build_snapshot_in_arrow(file_bytes) if build else policy.snapshot_in_arrow(file_bytes)):
        return None
    if not build and base and policy.plain_scan_wins(base.rows, overlay=not (schema.append_only or not log_files)):
        return None  # no overlay to compute: Spark's plain scan beats a local relation of that many rows
    check_rows(catalog, name, base, logs)
    target, log_target = base_arrow_schema(schema), log_arrow_schema(schema)
    budget = [policy.BUILD_SNAPSHOT_MEMORY if build else policy.LOCAL_SNAPSHOT_MEMORY]
    state, log = _read(base_files, target, budget), _read(log_files, log_target, budget)
    if state is None or log is None:
        return None
    if not log_files:
        return state
    if schema.append_only:
        return pa.concat_tables([state, log.filter(pc.equal(log["_op"], int(Op.INSERT))).select(target.names)])
    # The last write to a key wins: the base's rows count as its first writes, the log's follow in
    # (epoch, seq) order; a key's row is the one at its greatest position, if that write is live.
    log = log.sort_by([("_epoch", "ascending"), ("_seq", "ascending")]).select(["_op", *target.names])
    writes = pa.concat_tables([state.add_column(0, "_op", pa.array(np.full(state.num_rows, int(Op.INSERT), np.int8))),
                               log])
    names = [f"k{i}" for i in range(len(schema.key))]  # not the relation's own names: any may be a user's
    positions = pa.Table.from_arrays([*[writes[k] for k in schema.key], pa.array(np.arange(writes.num_rows))],
                                     names=[*names, "at"])
    last = positions.group_by(names, use_threads=False).aggregate([("at", "max")])["at_max"]
    rows = writes.take(np.sort(last.to_numpy()))
    live = pc.is_in(rows["_op"], pa.array([int(Op.INSERT), int(Op.UPDATE_INSERT)], pa.int8()))
    return rows.filter(live).select(target.names)


def _read(files: list[str], target: pa.Schema, budget: list[int]) -> pa.Table | None:
    """The files' rows as `target`, read a row group at a time; None once they pass `budget[0]`
    bytes of Arrow (what is left of it stays in `budget`)."""
    parts = []
    for f in files:
        with reading(f):
            parquet = parquet_file(f, file_index(f).metadata)
            for g in range(parquet.num_row_groups):
                part = parquet.read_row_group(g, columns=target.names)
                budget[0] -= part.nbytes
                if budget[0] < 0:
                    return None
                parts.append(part.select(target.names).cast(target))
    return pa.concat_tables(parts) if parts else target.empty_table()


def rereads_cheaply(catalog: Catalog, name: str, schema: Schema, epoch: int) -> bool:
    """Whether reading the snapshot at `epoch` again costs less than Spark's in-memory cache of its
    rows: its files' rows as they are (append-only, or no log after the base), or a base and log of
    few rows in all to overlay (`policy.rereads`) (shuffling that few costs less than building
    the cache, which a process pays most before its code is compiled: Nexmark q4's auctions, all in
    the log, are read twice rather than cached).
    A larger overlay may shuffle its whole base: it is cached."""
    if schema.append_only:
        return True
    base = catalog.base_at(name, epoch)
    log = sum(n for _, n in catalog.log_file_rows(name, base.epoch if base else 0, epoch))
    return log == 0 or policy.rereads((base.rows if base else 0) + log)


def _in_range(df: DataFrame, vnodes: tuple[int, int] | None, where: SparkColumn | None = None) -> DataFrame:
    if where is not None:
        df = df.where(where)
    if vnodes is None:
        return df
    lo, hi = vnodes
    return df.where((F.col("_vnode") >= F.lit(lo).cast("smallint")) & (F.col("_vnode") < F.lit(hi).cast("smallint")))


def vnode_rows(catalog: Catalog, name: str, schema: Schema, epoch: int) -> list[int]:
    """The snapshot's row count per vnode, exactly, without Spark: the base's `_vnode` column plus,
    per log row of `(c, epoch]`, +1 for an insert and -1 for a delete (an update nets to zero)."""
    counts = np.zeros(VNODES, dtype=np.int64)
    base = catalog.base_at(name, epoch)
    for f in base.files if base else []:
        v = read_table(f, columns=["_vnode"])["_vnode"].to_numpy()
        counts += np.bincount(v.astype(np.int64), minlength=VNODES)
    for _, f in catalog.log_files(name, base.epoch if base else 0, epoch):
        t = read_table(f, columns=["_op", "_vnode"])
        v = t["_vnode"].to_numpy().astype(np.int64)
        op = t["_op"]
        counts += np.bincount(v[pc.equal(op, int(Op.INSERT)).to_numpy(zero_copy_only=False)], minlength=VNODES)
        if not schema.append_only:
            counts -= np.bincount(v[pc.equal(op, int(Op.DELETE)).to_numpy(zero_copy_only=False)], minlength=VNODES)
    return [int(x) for x in counts]
