"""The datagen connector, with RisingWave's per-field options:

    fields.<col>.kind = 'sequence' | 'random'
    fields.<col>.start / fields.<col>.end      (sequence; numbers, or timestamps stepping 1 s)
    fields.<col>.min / fields.<col>.max        (random)
    fields.<col>.seed, fields.<col>.length     (random; length of varchar values)
    datagen.rows.per.second, datagen.split.num, source_rate_limit, max.rows.per.epoch

A sequence field with an end bounds the source: it stops once the sequence is exhausted. Values are
functions of (seed, split, offset), so replaying an offset range generates the same rows."""

from __future__ import annotations

import math
import re
from datetime import datetime

import pyarrow as pa
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkwave.connectors.base import Connector
from sparkwave.connectors.options import (
    MAX_GENERATOR_RATE,
    Options,
    choice,
    integer,
    max_rows_per_epoch,
    rate_limit,
    text,
)
from sparkwave.core.errors import SqlError
from sparkwave.core.local_frames import offsets
from sparkwave.core.schema import Column, Schema

ROW_ID_SPLIT_SHIFT = 48


_INTEGERS = ("smallint", "int", "bigint")
_TIMES = ("timestamp", "timestamptz", "date")
MAX_VALUE = 2**62  # a bound of an integer field, so that `max - min + 1` fits a bigint
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # Spark's unix_timestamp() default


class Datagen(Connector):
    rate_option = "datagen.rows.per.second"
    OPTIONS = Options(
        "datagen",
        choice("connector", "datagen"),
        integer("datagen.rows.per.second", 1, MAX_GENERATOR_RATE, 1000),
        integer("datagen.split.num", 1, 1024, 1),
        rate_limit("source_rate_limit"),
        max_rows_per_epoch(),
        choice("fields.*.kind", "sequence", "random", default="random"),
        text("fields.*.start"),
        text("fields.*.end"),
        text("fields.*.min"),
        text("fields.*.max"),
        integer("fields.*.seed", -(2**63), 2**63 - 1, 0),
        integer("fields.*.length", 1, 64, 10),  # characters of a hex digest
    )

    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        super().__init__(table, schema, options)
        known = {c.name for c in schema.columns if not c.hidden}
        for key in options:
            if key.startswith("fields."):
                col = key.split(".")[1]
                if col not in known:
                    raise SqlError(f"table {table!r}: option {key} names unknown column {col!r}")
        self._selects: dict[int, list[SparkColumn]] = {}
        self.num_splits = self.int_option("datagen.split.num")
        for c in schema.columns:
            if c.hidden:
                continue
            kind = self.value(f"fields.{c.name}.kind")
            if kind == "sequence" and not (c.type.is_numeric or c.type.name in ("timestamp", "timestamptz")):
                raise SqlError(f"table {table!r}: column {c.name!r} of type {c.type} cannot be a sequence")
            for bound in ("start", "end", "min", "max"):
                self._check_bound(c, kind, bound)
            if kind == "random" and c.type.name in _INTEGERS and \
                    int(self._field(c.name, "max", "32767") or 0) < int(self._field(c.name, "min", "0") or 0):
                raise SqlError(f"table {table!r}: fields.{c.name}.max is below fields.{c.name}.min")

    def _check_bound(self, c: Column, kind: str, bound: str) -> None:
        """A field's start / end (sequence) or min / max (random): an integer within +-2^62 for a
        sequence and an integer column, a number for another numeric column, a timestamp
        'YYYY-MM-DD HH:MM:SS' for a time column."""
        key = f"fields.{c.name}.{bound}"
        raw = self.options.get(key)
        if raw is None:
            return
        if (bound in ("start", "end")) != (kind == "sequence") or not (c.type.is_numeric or c.type.name in _TIMES):
            raise SqlError(f"table {self.table!r}: option {key} does not apply to {kind} column {c.name!r} of type "
                           f"{c.type} (sequence: start, end; random: min, max; numeric and time columns)")
        try:
            if c.type.name in _TIMES:
                expects = "a timestamp 'YYYY-MM-DD HH:MM:SS'"
                datetime.strptime(raw, TIME_FORMAT)
            elif kind == "sequence" or c.type.name in _INTEGERS:
                expects = f"an integer from {-MAX_VALUE} to {MAX_VALUE}"
                if not re.fullmatch(r"[-+]?[0-9]{1,20}", raw) or abs(int(raw)) > MAX_VALUE:
                    raise ValueError
            else:
                expects = "a finite number"
                if not math.isfinite(float(raw)):
                    raise ValueError
        except ValueError:
            raise SqlError(f"table {self.table!r}: option {key} must be {expects}, got {raw!r}") from None

    def _field(self, col: str, opt: str, default: str | None = None) -> str | None:
        return self.options.get(f"fields.{col}.{opt}", default)

    @property
    def splits(self) -> list[str]:
        return [str(i) for i in range(self.num_splits)]

    def positions(self, seq: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """The split and offset of each row from its `_seq` (`_select`): a watermark is kept per split."""
        s = seq.to_numpy()
        return pa.array((s >> ROW_ID_SPLIT_SHIFT).astype(str)), pa.array(s & ((1 << ROW_ID_SPLIT_SHIFT) - 1))

    def limit(self, split: str) -> int | None:
        ends = []
        for c in self.schema.columns:
            if self._field(c.name, "kind") == "sequence" and self._field(c.name, "end") is not None \
                    and c.type.is_numeric:
                start, end = int(self._field(c.name, "start", "0") or 0), int(self._field(c.name, "end") or 0)
                total = max(0, end - start + 1)
                i = int(split)
                ends.append(total // self.num_splits + (1 if i < total % self.num_splits else 0))
        return min(ends) if ends else None

    def rows(self, spark: SparkSession, split: str, start: int, end: int) -> DataFrame:
        i = int(split)
        if i not in self._selects:  # built once per split: each column is several Py4J calls
            self._selects[i] = self._select(i)
        return offsets(spark, start, end).withColumnRenamed("id", "_offset").select(*self._selects[i])

    def _select(self, i: int) -> list[SparkColumn]:
        """Split `i`'s columns from `_offset`."""
        cols = []
        for c in self.schema.columns:
            if c.name == "_row_id":
                cols.append((F.lit(i << ROW_ID_SPLIT_SHIFT) + F.col("_offset")).alias(c.name))
            else:
                cols.append(self._value(c.name, c.type.name, i).cast(c.type.spark).alias(c.name))
        return [*cols, (F.lit(i << ROW_ID_SPLIT_SHIFT) + F.col("_offset")).alias("_seq")]

    def _value(self, col: str, type_name: str, split: int) -> SparkColumn:
        n = F.col("_offset") * self.num_splits + split  # the row's position in the whole sequence
        if self._field(col, "kind", "random") == "sequence":
            start = self._field(col, "start", "0") or "0"
            if type_name in ("timestamp", "timestamptz"):
                return F.timestamp_seconds(F.unix_timestamp(F.lit(start)) + n)
            return F.lit(start).cast("decimal(38,10)") + n
        seed = self.int_option(f"fields.{col}.seed")
        h = F.abs(F.xxhash64(F.lit(seed), F.lit(col), n))
        if type_name == "varchar":
            length = self.int_option(f"fields.{col}.length")
            return F.substring(F.sha2(F.concat_ws(":", F.lit(seed), F.lit(col), n.cast("string")), 256), 1, length)
        if type_name == "boolean":
            return F.pmod(h, F.lit(2)) == 0
        if type_name in ("timestamp", "timestamptz", "date"):
            lo_t = self._field(col, "min", "2025-01-01 00:00:00")
            hi_t = self._field(col, "max", "2025-12-31 00:00:00")
            span = F.unix_timestamp(F.lit(hi_t)) - F.unix_timestamp(F.lit(lo_t)) + 1
            return F.timestamp_seconds(F.unix_timestamp(F.lit(lo_t)) + F.pmod(h, span))
        lo_s, hi_s = self._field(col, "min", "0"), self._field(col, "max", "32767")
        if type_name in ("real", "double") or type_name.startswith("decimal"):
            frac = F.pmod(h, F.lit(1_000_000)) / F.lit(1_000_000.0)
            return F.lit(float(lo_s or 0)) + frac * (float(hi_s or 0) - float(lo_s or 0))
        lo, hi = int(lo_s or 0), int(hi_s or 0)
        return F.lit(lo) + F.pmod(h, F.lit(hi - lo + 1))
