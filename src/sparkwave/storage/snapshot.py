"""Reading a table as of an epoch, and its change stream between two epochs, as Spark DataFrames.

State as of `e` = the newest base with compaction epoch `c <= e`, overlaid with the log rows of
`(c, e]` where the last op per key wins. Files are read by Spark's native Parquet reader; which
files hold which epoch comes from the catalog, so no Delta log is scanned on the read path."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sparkwave.meta.catalog import Catalog
from sparkwave.storage.schema import Schema
from sparkwave.storage.table import base_spark_ddl, log_spark_ddl
from sparkwave.stream.chunk import Op


def read_parquet(spark: SparkSession, ddl: str, paths: list[str]) -> DataFrame:
    if not paths:
        return spark.createDataFrame([], ddl)
    return spark.read.schema(ddl).parquet(*paths)


def changes(spark: SparkSession, catalog: Catalog, name: str, schema: Schema, after: int, upto: int) -> DataFrame:
    """The log rows `| _epoch | _seq | _op | _vnode | columns |` of epochs in `(after, upto]`."""
    files = [p for _, p in catalog.log_files(name, after, upto)]
    return read_parquet(spark, log_spark_ddl(schema), files)


def snapshot(spark: SparkSession, catalog: Catalog, name: str, schema: Schema, epoch: int) -> DataFrame:
    """The rows `| _vnode | columns |` of `name` as of `epoch` (the caller checks retention)."""
    base = catalog.base_at(name, epoch)
    c = base.epoch if base else 0
    state = read_parquet(spark, base_spark_ddl(schema), base.files if base else [])
    log_files = [p for _, p in catalog.log_files(name, c, epoch)]
    if not log_files:
        return state
    log = read_parquet(spark, log_spark_ddl(schema), log_files)
    cols = ["_vnode", *[f"`{n}`" for n in schema.names]]
    if schema.append_only:
        return state.unionByName(log.where(F.col("_op") == int(Op.INSERT)).select(*cols))
    key = [f"`{k}`" for k in schema.key]
    w = Window.partitionBy(*key).orderBy(F.col("_epoch").desc(), F.col("_seq").desc())
    latest = log.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn")
    kept = state.join(latest.select(*key), list(schema.key), "left_anti")
    live = latest.where(F.col("_op").isin(int(Op.INSERT), int(Op.UPDATE_INSERT))).select(*cols)
    return kept.select(*cols).unionByName(live)
