"""What the epoch loop needs of a connector: splits, how far each may go, and the rows of an
offset range, generated deterministically so that a replayed epoch reads exactly the same rows."""

from __future__ import annotations

from abc import ABC, abstractmethod

from pyspark.sql import DataFrame, SparkSession

from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Schema


class Connector(ABC):
    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        self.table = table
        self.schema = schema
        self.options = options

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

    @abstractmethod
    def rows(self, spark: SparkSession, split: str, start: int, end: int) -> DataFrame:
        """The rows of offsets `[start, end)` of `split`: every column of the schema, plus `_seq`,
        which orders them within the epoch."""
