"""What the epoch loop needs of a connector: splits, how far each may go, and the rows of an
offset range, generated deterministically so that a replayed epoch reads exactly the same rows."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Column, Schema

ERROR, RAW = "_error", "_raw"  # a bad record's reason and payload, beside its (NULL) columns


class Connector:
    has_bad_records = False  # whether `read` can return rows with `ERROR` set
    status: str | None = None  # why the source is not advancing, if it is not
    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        self.table = table
        self.schema = schema
        self.options = options

    @staticmethod
    def extra_columns(options: dict[str, str]) -> list[Column]:
        """Columns the connector adds to the table's (message metadata, say)."""
        return []

    def initial_offsets(self) -> dict[str, int]:
        """Each split's first offset, decided at CREATE (default: 0 for every split)."""
        return {}

    def close(self) -> None:
        """Release what the connector holds (a client of an outside system)."""
        return None

    def in_background(self) -> Connector:
        """This connector, made for a creating job's reads, which must not slow the pipeline's
        (default: as is)."""
        return self

    def option(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)

    def int_option(self, key: str, default: int) -> int:
        raw = self.options.get(key)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise SqlError(f"table {self.table!r}: option {key} = {raw!r} is not an integer") from None

    @property
    def rows_per_second(self) -> int:
        return self.int_option(self.rate_option, 1000)

    rate_option = "rows_per_second"

    @property
    def splits(self) -> list[str]:
        return ["0"]

    def limit(self, split: str) -> int | None:
        """The offset at which a split is exhausted, if it is bounded."""
        return None

    def plan(self, committed: dict[str, int], elapsed_ms: float) -> dict[str, list[int]]:
        """The offset range `[start, end)` of each split the next epoch reads, from the committed
        offsets: a generated source produces `rows_per_second` for the time elapsed."""
        per_epoch = max(1, int(self.rows_per_second * elapsed_ms / 1000) // max(1, len(self.splits)))
        ranges: dict[str, list[int]] = {}
        for split in self.splits:
            start = committed.get(split, 0)
            end = start + per_epoch
            limit = self.limit(split)
            if limit is not None:
                end = min(end, limit)
            if end > start:
                ranges[split] = [start, end]
        return ranges

    def read(self, spark: SparkSession, ranges: dict[str, list[int]]) -> DataFrame:
        """The rows of the planned ranges as intents: `rows` plus `_op` (an upsert). A connector
        that can meet bad records adds `_error` and `_raw` (kept out of the table, listed by
        `SHOW SOURCE ERRORS`)."""
        parts = [self.rows(spark, split, start, end) for split, (start, end) in ranges.items()]
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out.withColumn("_op", F.lit(4).cast("tinyint"))

    def positions(self, seq: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """The split (as a string) and offset of each row `read` returned, from its `_seq`."""
        raise NotImplementedError

    def rows(self, spark: SparkSession, split: str, start: int, end: int) -> DataFrame:
        """The rows of offsets `[start, end)` of `split`: every column of the schema, plus `_seq`,
        which orders them within the epoch (what the default `read` unions)."""
        raise NotImplementedError
