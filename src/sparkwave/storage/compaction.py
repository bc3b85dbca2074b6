"""Compaction: fold a relation's log into a new base as of a committed epoch `c`.

It reads the snapshot at `c` (immutable once committed), so it runs beside the barrier loop and is
never on an epoch's critical path. Steps, each safe to crash after:
1. Spark writes the snapshot, sorted by (vnode, key), into `base/_staging_c<c>/` (a small one, read
   on the driver by `snapshot.local_snapshot`, is sorted and written there by pyarrow: no job).
2. The files move into `base/` as `c<c>-<attempt>-<i>.parquet`: no attempt replaces another's files.
3. One Delta overwrite commit carrying `Transaction(BASE_APP_ID, c)`, unless an earlier attempt at
   `c` made it: its files are then the base (`StoredTable.commit_base`).
4. The catalog records the base; only now do reads use it. Files of a crashed attempt are
   unreferenced and removed by retention."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core import spark_features
from sparkwave.core.catalog import Relation
from sparkwave.core.crash import crash_point
from sparkwave.storage import key_index
from sparkwave.storage.integrity import write_table
from sparkwave.storage.links import Linked, is_linked, link_base_files
from sparkwave.storage.store import Store
from sparkwave.storage.table import attempt_names

log = logging.getLogger("sparkwave.compaction")


@dataclass(frozen=True)
class BaseFiles:
    version: int
    files: list[str]
    rows: list[int]


ROW_GROUP_BYTES = 8 * 1024 * 1024  # small row groups: a backfill chunk's vnode range skips the others
# State tables are read by point lookups (see file_index.py): a row group bounds the rows a key
# reads. Against smaller groups, a many-key lookup is as fast, a few-key one barely slower, and the
# footer parses and Spark writes the files several times faster.
STATE_ROW_GROUP_ROWS = 4096


def leading_column(rel: Relation) -> str:
    """The column a base file's lookups prune its row groups by: a state table's first key column
    (its rows all carry vnode 0), any other relation's `_vnode`."""
    return rel.schema.key[0] if rel.kind == "state" else "_vnode"


def write_base_files(rt: Store, rel: Relation, df: DataFrame | pa.Table, staging_name: str, prefix: str, *,
                     sort: bool = True, cluster: bool = True, lookups: bool = True) -> tuple[list[str], list[int]]:
    """Write `df` (`| _vnode | columns |`) into `base/` as `<prefix><attempt>-<i>.parquet`, through a
    staging folder, so that a crash leaves either no file or whole files. The files are not part of any
    base until committed. With `sort` and `cluster` (compaction), the files cover disjoint vnode
    ranges (a range partitioning: a sampling job and a shuffle), each sorted by (vnode, key). A
    stateless backfill chunk does neither: its rows span a few vnodes only, and arrive almost in
    (vnode, key) order from the sorted upstream. A stateful one (`sort` alone) sorts each file by
    its leading lookup column only (`leading_column`): lookups prune row groups by that column's
    ranges, the files may overlap, and a single sort column lets Spark radix-sort on its prefix
    (1.7M rows: 0.25 s against 0.67 s by the whole key); compaction later sorts by the whole key.
    A state table's files have small row groups for point lookups, unless `lookups` is off (files
    only ever scanned whole: a chunked backfill's partials). A keyed table's or MV's sorted and clustered
    files get a key index each (`key_index.py`), built on the executors. Rows the driver holds (an
    Arrow table) are sorted the same way and written by pyarrow, into one file, with no Spark job."""
    stored = rt.stored(rel)
    stored.create()
    staging_name, prefix = attempt_names(staging_name, prefix)
    staging = stored.base_path / staging_name
    indexed = sort and cluster and rel.kind in ("table", "mv") and key_index.indexable(rel.schema)
    order = ["_vnode", *rel.schema.key] if sort and cluster else [leading_column(rel)] if sort else []
    # No dictionaries in a state's small row groups: within a few thousand rows they rarely pay for
    # themselves, and they slow the write.
    lookup_groups = rel.kind == "state" and lookups
    try:  # a failed attempt leaves no staging folder (its name is its own: no later attempt reuses it)
        if isinstance(df, pa.Table):
            _write_local(df.select(["_vnode", *rel.schema.names]), staging, order, lookup_groups)
        else:
            out = df.select("_vnode", *[f"`{n}`" for n in rel.schema.names])
            if sort and cluster:
                out = out.repartitionByRange(spark_features.default_parallelism(rt.spark), "_vnode")
            if order:
                out = out.sortWithinPartitions(*[f"`{k}`" for k in order])
            writer = out.write.mode("overwrite").option("parquet.block.size", ROW_GROUP_BYTES)
            if lookup_groups:
                writer = writer.option("parquet.block.row.count.limit", STATE_ROW_GROUP_ROWS) \
                    .option("parquet.enable.dictionary", "false")
            writer.parquet(str(staging))
        files, rows = [], []
        for i, name in enumerate(sorted(f for f in os.listdir(staging) if f.endswith(".parquet"))):
            n = pq.ParquetFile(staging / name).metadata.num_rows
            if n == 0:
                continue
            dest = stored.base_path / f"{prefix}{i}.parquet"
            os.replace(staging / name, dest)
            files.append(str(dest))
            rows.append(n)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if indexed and files:
        try:
            if isinstance(df, pa.Table):
                key_index.build(files[0])
            else:
                spark_features.run_each(rt.spark, files, key_index.build)
        except Exception:  # an index is a cache: lookups read the Parquet files without it
            log.exception("key indexes of %s's base were not built; its lookups read the base files", rel.name)
    return files, rows


def _write_local(rows: pa.Table, staging: os.PathLike[str], order: list[str], lookup_groups: bool) -> None:
    """Spark's sort (NULLs first, strings by their bytes) and file layout, by pyarrow."""
    os.makedirs(staging)
    if rows.num_rows == 0:
        return
    if order:
        rows = rows.sort_by([(k, "ascending", "at_start") for k in order])
    write_table(rows, os.path.join(staging, "part-00000.parquet"), use_dictionary=not lookup_groups,
                   row_group_size=STATE_ROW_GROUP_ROWS if lookup_groups else None)


def write_base(rt: Store, rel: Relation, df: DataFrame | pa.Table | Linked, epoch: int, *,
               crash_name: str = "mid_compaction", record: bool = True) -> BaseFiles:
    """Write `df` (`| _vnode | columns |`, or another relation's files to link) as `rel`'s base as
    of `epoch`. With `record`, the catalog records it; otherwise the caller records it in its own
    transaction (a new MV's)."""
    stored = rt.stored(rel)
    staging, prefix = f"_staging_c{epoch}", stored.base_file_prefix(epoch)
    files, rows = link_base_files(rt, rel, df, staging, prefix) if isinstance(df, Linked) else \
        write_base_files(rt, rel, df, staging, prefix)
    crash_point(crash_name)
    version, files, rows = stored.commit_base(epoch, files, rows)
    crash_point(crash_name + "_after_delta")
    if record:
        with rt.catalog.transaction() as db:
            rt.catalog.add_base(db, rel.name, epoch, version, sum(rows), files)
    return BaseFiles(version, files, rows)


def compact(rt: Store, rel: Relation, epoch: int) -> bool:
    """Compact `rel` at committed `epoch` if its log has anything past the current base."""
    base = rt.catalog.base_at(rel.name, (1 << 63) - 1)  # the newest: below `epoch`, it is the base at `epoch`
    if base is not None and base.epoch >= epoch:  # done already, or a newer one (a COMPACT beside maintenance)
        return False
    since = base.epoch if base else 0
    n_epochs = rt.catalog.log_rows_since(rel.name, since).files
    linked = base is not None and is_linked(base.files)  # due without a log: `links.py`
    if n_epochs == 0 and not linked:
        return False
    local = rt.local_snapshot(rel, epoch)
    rows = rt.snapshot(rel, epoch) if local is None else local
    if linked:  # a state's rows all go to vnode 0; a linked base's carry their table's
        rows = rows.withColumn("_vnode", F.lit(0).cast("smallint")) if isinstance(rows, DataFrame) else \
            rows.set_column(0, "_vnode", pa.array([0] * rows.num_rows, pa.int16()))
    write_base(rt, rel, rows, epoch)
    return True
