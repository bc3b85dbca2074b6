"""The datagen connector, with RisingWave's per-field options:

    fields.<col>.kind = 'sequence' | 'random'
    fields.<col>.start / fields.<col>.end      (sequence; numbers, or timestamps stepping 1 s)
    fields.<col>.min / fields.<col>.max        (random)
    fields.<col>.seed, fields.<col>.length     (random; length of varchar values)
    datagen.rows.per.second, datagen.split.num

A sequence field with an end bounds the source: it stops once the sequence is exhausted. Values are
functions of (seed, split, offset), so replaying an offset range generates the same rows."""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkwave.connectors.base import Connector
from sparkwave.core.errors import SqlError
from sparkwave.core.local_frames import offsets
from sparkwave.core.schema import Schema

ROW_ID_SPLIT_SHIFT = 48


class Datagen(Connector):
    rate_option = "datagen.rows.per.second"

    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        super().__init__(table, schema, options)
        known = {c.name for c in schema.columns}
        for key in options:
            if key.startswith("fields."):
                col = key.split(".")[1]
                if col not in known:
                    raise SqlError(f"table {table!r}: option {key} names unknown column {col!r}")
        self._selects: dict[int, list[SparkColumn]] = {}
        self.num_splits = self.int_option("datagen.split.num", 1)
        if self.num_splits < 1:
            raise SqlError(f"table {table!r}: datagen.split.num must be at least 1")
        for c in schema.columns:
            if c.hidden:
                continue
            kind = self._field(c.name, "kind", "random")
            if kind not in ("sequence", "random"):
                raise SqlError(f"table {table!r}: fields.{c.name}.kind must be 'sequence' or 'random', not {kind!r}")
            if kind == "sequence" and not (c.type.is_numeric or c.type.name in ("timestamp", "timestamptz")):
                raise SqlError(f"table {table!r}: column {c.name!r} of type {c.type} cannot be a sequence")

    def _field(self, col: str, opt: str, default: str | None = None) -> str | None:
        return self.options.get(f"fields.{col}.{opt}", default)

    @property
    def splits(self) -> list[str]:
        return [str(i) for i in range(self.num_splits)]

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
        seed = int(self._field(col, "seed", "0") or 0)
        h = F.abs(F.xxhash64(F.lit(seed), F.lit(col), n))
        if type_name == "varchar":
            length = int(self._field(col, "length", "10") or 10)
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
        if hi < lo:
            raise SqlError(f"table {self.table!r}: fields.{col}.max is below fields.{col}.min")
        return F.lit(lo) + F.pmod(h, F.lit(hi - lo + 1))
