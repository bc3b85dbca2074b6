"""Small changes without a Spark job.

A frame over a *local relation* (rows the driver handed Spark, `spark.createDataFrame` of an Arrow
table) whose operators are projections and filters is evaluated by Spark's optimizer itself
(`ConvertToLocalRelation`), on the driver: collecting it runs no job. Reading a small change that
way instead of from its file saves the file scan's planning and the job (`bench/RESULTS.md`, "Small
epochs without Spark jobs"). Spark's own expressions compute the values; only their way back to
Arrow differs (`collect()`'s Python values), and `to_arrow` takes that way only for types whose
values come back exactly, falling back to Arrow transfer otherwise. The optimizer evaluates on one
thread and the rows come back to Python one by one: past `policy.LOCAL_ROWS` rows (measured crossover
of a project-filter frame: about 10k) the file and the executors win (`policy.runs_locally`). A
union (a generated source of several splits) is not folded: it runs a job, over the same local rows."""

from __future__ import annotations

import functools
from datetime import UTC

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType, TimestampType, _parse_datatype_string

from sparkwave.core import policy, spark_features

__all__ = ["local_batches", "local_frame", "local_rows", "offsets", "to_arrow"]


@functools.lru_cache(maxsize=1024)
def _struct(ddl: str) -> StructType:
    parsed = _parse_datatype_string(ddl)
    assert isinstance(parsed, StructType), f"BUG: {ddl!r} is not a row type"
    return parsed


def local_frame(spark: SparkSession, rows: pa.Table, ddl: str) -> DataFrame:
    """`rows` (with the names, in the order, of `ddl`'s columns; cast to their types) as a frame over a
    local relation."""
    return spark.createDataFrame(rows, schema=_struct(ddl))


def local_batches(spark: SparkSession, batches: list[pa.RecordBatch], ddl: str) -> DataFrame:
    """Record batches with `ddl`'s columns (by name; none at all is an empty frame) as a local frame."""
    struct = _struct(ddl)
    rows = pa.Table.from_batches([b.select(struct.fieldNames()) for b in batches]) if batches else \
        to_arrow_schema(struct, timezone="UTC").empty_table()
    return local_frame(spark, rows, ddl)


def offsets(spark: SparkSession, start: int, end: int) -> DataFrame:
    """`| id |` for `[start, end)`, as `spark.range`: local when small, so a generated source's
    expressions over it are evaluated without a job."""
    if not policy.runs_locally(end - start):
        return spark.range(start, end)
    return local_frame(spark, pa.table({"id": pa.array(range(start, end), pa.int64())}), "id bigint")


# What `collect()` returns as Python values that Arrow takes back exactly.
_PLAIN = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
          pa.types.is_large_string, pa.types.is_decimal, pa.types.is_date32, pa.types.is_timestamp)


def to_arrow(df: DataFrame, schema: pa.Schema | None = None) -> pa.Table:
    """`df`'s rows (in `schema`, by name; else in the frame's own types). Without a Spark job when
    the optimizer folded the frame into a local relation it evaluates (`policy.runs_locally`)."""
    if schema is None:
        schema = to_arrow_schema(df.schema, timezone="UTC", error_on_duplicated_field_names_in_struct=True)
    # (on Spark Connect, `toArrow()` of a local relation runs no job already: no plan check first)
    rows = None if spark_features.is_connect(df.sparkSession) else local_rows(df, schema)
    return rows if rows is not None else df.toArrow().select(schema.names).cast(schema)


def local_rows(df: DataFrame, schema: pa.Schema) -> pa.Table | None:
    """`df`'s rows in `schema` (by name) if the optimizer folded the frame into a local relation of
    rows it evaluates (`policy.runs_locally`) whose values come back exactly: no Spark job. Else None."""
    if not all(any(is_(f.type) for is_ in _PLAIN) for f in schema):
        return None
    size = spark_features.local_relation_size(df)
    if size is None or (size >= 0 and not policy.runs_locally(size)):
        return None
    if size < 0:  # Spark Connect: the server returns a local relation's rows without a job
        rows = df.toArrow()
        return rows.select(schema.names).cast(schema) if policy.runs_locally(rows.num_rows) else None
    try:
        return _from_rows(df.schema, df.collect(), schema)
    except (ValueError, OverflowError):  # a TIMESTAMP near year 1 or 9999 in local time: Arrow's way
        return None


def _from_rows(struct: StructType, rows: list, schema: pa.Schema) -> pa.Table:
    at = {n: i for i, n in enumerate(struct.fieldNames())}
    zoned = {f.name for f in struct.fields if isinstance(f.dataType, TimestampType)}
    arrays = []
    for f in schema:
        values = [r[at[f.name]] for r in rows]
        if pa.types.is_timestamp(f.type):
            if (f.name in zoned) != (f.type.tz is not None):  # Arrow's cast decides, as with toArrow()
                raise ValueError(f"column {f.name} is read as {f.type}")
            if f.name in zoned:  # PySpark returns a TIMESTAMP as a naive datetime in local time
                values = [None if v is None else v.astimezone(UTC) for v in values]
        arrays.append(pa.array(values, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)
