"""State cleaning below a watermark: a stateful operator keyed by a watermarked column (an aggregate
grouped by a window or by the column, an EOWC buffer) deletes its state rows whose column is below
the column's watermark in the epoch, since no row of them can arrive again (the table's step
dropped every row below the watermark). The MV's rows are kept.

The operator stages its state's change as usual; the cleaning takes out of it the rows of the
keys below the watermark and adds the deletion (-1) of those keys' rows as of the previous epoch
(a range read of the state, which is keyed by the column: `States.between`), in all three
evaluations: per small epoch (`CleaningStates`), per big epoch (`CleaningFrameIO`) and from a
snapshot (`clean_built`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.zset import W
from sparkwave.core.zset_frames import weighted
from sparkwave.stream.operator import FrameIO, Operator, States
from sparkwave.stream.watermark import Derivation, as_ints

LOWEST = -(2**63)


@dataclass(frozen=True)
class Cleaning:
    """Which of an operator's key columns (internal name) is watermarked, and how its watermark derives."""

    column: str
    watermark: Derivation

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "watermark": self.watermark.to_json()}

    @staticmethod
    def from_json(d: dict[str, Any] | None) -> Cleaning | None:
        return None if not d else Cleaning(d["column"], Derivation.from_json(d["watermark"]))

    def threshold(self, watermarks: Mapping[str, int | None]) -> int | None:
        """The value below which the state goes this epoch (None: no watermark yet)."""
        return self.watermark.value(watermarks)


def kept(changes: pa.Table, column: str, value: int) -> pa.Table:
    """The rows of `changes` at or above `value` (NULL kept: never below a watermark)."""
    return changes.filter(pc.fill_null(pc.greater_equal(as_ints(changes[column]), value), True))


class CleaningStates:
    """`States` that clean `suffixes` below `value` of `column` as they are staged; `finish` cleans
    those the epoch did not stage."""

    def __init__(self, inner: States, column: str, value: int, suffixes: list[str]) -> None:
        self.inner, self.column, self.value, self.suffixes = inner, column, value, suffixes
        self._staged: set[str] = set()

    def lookup(self, suffix: str, by: list[str], keys: pa.Table) -> pa.Table:
        return self.inner.lookup(suffix, by, keys)

    def between(self, suffix: str, column: str, ranges: list[tuple[int, int]]) -> pa.Table:
        return self.inner.between(suffix, column, ranges)

    def stage(self, suffix: str, changes: pa.Table) -> None:
        if suffix not in self.suffixes:
            self.inner.stage(suffix, changes)
            return
        self._staged.add(suffix)
        changes = kept(changes, self.column, self.value)
        gone = self.inner.between(suffix, self.column, [(LOWEST, self.value - 1)])
        if gone.num_rows:
            gone = gone.append_column(W, pa.array([-1] * gone.num_rows, pa.int64()))
            changes = pa.concat_tables([changes.select(gone.column_names).cast(gone.schema), gone]) \
                if changes.num_rows else gone
        self.inner.stage(suffix, changes)

    def finish(self) -> None:
        for suffix in self.suffixes:
            if suffix not in self._staged:
                gone = self.inner.between(suffix, self.column, [(LOWEST, self.value - 1)])
                if gone.num_rows:
                    self.inner.stage(suffix, gone.append_column(W, pa.array([-1] * gone.num_rows, pa.int64())))


def cleaning_states(op: Operator, cleaning: Cleaning | None, states: States,
                    watermarks: Mapping[str, int | None]) -> States | CleaningStates:
    """`states` cleaning `op`'s state tables, if it cleans and its watermark is known this epoch."""
    value = None if cleaning is None else cleaning.threshold(watermarks)
    if cleaning is None or value is None:
        return states
    return CleaningStates(states, cleaning.column, value, list(op.state_tables()))


def as_micros(column: str, type_name: str) -> SparkColumn:
    """A watermarked column as the integer its watermark compares with (microseconds for times)."""
    c = F.col(f"`{column}`")
    if type_name in ("timestamp", "timestamptz"):
        return F.unix_micros(c.cast("timestamp"))
    if type_name == "date":
        return F.unix_date(c).cast("bigint") * 86_400_000_000
    return c.cast("bigint")


def at_or_above(rows: DataFrame, column: str, type_name: str, value: int) -> DataFrame:
    return rows.where(F.col(f"`{column}`").isNull() | (as_micros(column, type_name) >= F.lit(value)))


class CleaningFrameIO:
    """A `FrameIO` whose `stage_frame` cleans `suffixes` (the big epoch's evaluation); every other
    attribute is the wrapped one's."""

    def __init__(self, inner: FrameIO, column: str, type_name: str, value: int, suffixes: list[str]) -> None:
        self._inner, self._column, self._type, self._value, self._suffixes = inner, column, type_name, value, suffixes
        self._staged: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _gone(self, suffix: str) -> DataFrame:
        rows = self._inner.state_rows(suffix)
        below = rows.where(as_micros(self._column, self._type) < F.lit(self._value))
        return weighted(below, -1)

    def stage_frame(self, suffix: str, changes: DataFrame) -> None:
        if suffix in self._suffixes:
            self._staged.add(suffix)
            changes = at_or_above(changes, self._column, self._type, self._value).unionByName(self._gone(suffix))
        self._inner.stage_frame(suffix, changes)

    def finish(self) -> None:
        for suffix in self._suffixes:
            if suffix not in self._staged:
                self.stage_frame(suffix, self._gone(suffix).limit(0))


def cleaning_frame_io(op: Operator, cleaning: Cleaning | None, io: FrameIO) -> FrameIO:
    """`io` cleaning `op`'s state tables in a big epoch, if it cleans and its watermark is known."""
    value = None if cleaning is None else cleaning.threshold(io.watermarks)
    if cleaning is None or value is None:
        return io
    tables = op.state_tables()
    column = next(iter(tables.values())).column(cleaning.column)
    assert column is not None, f"BUG: {op.op} {op.id}'s state lacks its watermarked column {cleaning.column}"
    return CleaningFrameIO(io, cleaning.column, column.type.name, value, list(tables))  # type: ignore[return-value]


def finish_cleaning(io: object) -> None:
    """Stage the deletions of the state tables the epoch did not stage (a no-op unless cleaning)."""
    if isinstance(io, CleaningStates | CleaningFrameIO):
        io.finish()


def clean_built(root: Operator, suffix: str, rows: DataFrame, watermarks: Mapping[str, int | None]) -> DataFrame:
    """A snapshot build's rows of state table `suffix` without those below its operator's watermark."""
    for op in root.walk():
        cleaning: Cleaning | None = getattr(op, "cleaning", None)
        if cleaning is not None and suffix in op.state_tables():
            value = cleaning.threshold(watermarks)
            if value is not None:
                column = op.state_tables()[suffix].column(cleaning.column)
                assert column is not None, f"BUG: state {suffix} lacks its watermarked column {cleaning.column}"
                return at_or_above(rows, cleaning.column, column.type.name, value)
    return rows
