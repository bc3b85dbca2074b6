"""What a join reads and writes for one of its sides: one interface, three kinds of state.

A join keeps each side's rows arranged by join key, so that a change on the other side finds its
matches. Where those rows live is the side's business, not the join's:
- `OwnState` (here): a state table of the join's own (`j<id>l`, `j<id>r`), the side's rows keyed
  by join key then row key;
- `AggregateSide` (`stream/aggregate_side.py`): a side that is an aggregate's output reads the
  aggregate's partials and keeps nothing itself;
- `TableSide` (`stream/table_side.py`): a side that is an append-only table's rows keeps them under
  the table's column names, so that a backfill links the table's files as its state.

The join asks its side (`Join.side`) for the same four things in each of its three evaluations:
the rows of some join keys as of the previous epoch (`lookup`; `frame` for a big epoch), the
side's change to keep (`stage`; `stage_frame`), and, from a snapshot, what to write as the state
(`gather`) or the rows an earlier chunk wrote (`handed`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from pyspark.sql import DataFrame

from sparkwave.core.schema import Schema
from sparkwave.stream.operator import FrameIO, Operator, SnapshotIO, States, state_schema

Near = tuple[DataFrame, str, str]  # (the change's keys, their column, the state's leading key column)


class JoinSide(Protocol):
    """Where a join side's rows live, and how each of the join's evaluations reads and keeps them.
    `by` names the side's join keys (its columns), `keys` holds the join keys looked up."""

    @property
    def state(self) -> str:
        """The state table that holds the side's rows (its files hand them to a backfill's later chunks)."""
        ...

    def state_schema(self, side: Operator, key: list[str]) -> Schema | None:
        """The schema of the side's own state table (`key`: the join keys, then the side's row
        key), or None if the side keeps none."""
        ...

    def lookup(self, states: States, by: list[str], keys: pa.Table) -> pa.Table:
        """Per epoch: the side's rows as of the previous epoch whose `by` columns match a row of `keys`."""
        ...

    def stage(self, states: States, changes: pa.Table) -> None:
        """Per epoch: keep the side's matchable change (`| columns | _w |`)."""
        ...

    def frame(self, io: FrameIO, near: Near) -> DataFrame:
        """Per big epoch: the side's rows as of `prev` near a change's keys (`FrameIO.state_rows`,
        `near`'s lead being a join key of the side)."""
        ...

    def stage_frame(self, io: FrameIO, changes: DataFrame) -> None:
        """Per big epoch: keep the side's matchable change frame (`| columns | _w |`)."""
        ...

    def gather(self, io: SnapshotIO, rows: DataFrame, by: list[str]) -> None:
        """From a snapshot: put the side's state (from its rows `rows`) in `io`, to be written."""
        ...

    def handed(self, stored: DataFrame, by: list[str]) -> DataFrame:
        """From a snapshot: the side's rows from the state rows that an earlier chunk wrote."""
        ...

    @property
    def links_table(self) -> bool:
        """Whether a backfill may link a table's files as the side's state."""
        ...


def matchable(rows: DataFrame, keys: list[str]) -> DataFrame:
    """A side's rows that its state keeps: as per epoch, a row with a NULL join key is not stored (it
    never matches; a preserved side's such rows are NULL-padded from the change alone)."""
    return rows.where(" AND ".join(f"`{k}` IS NOT NULL" for k in keys))


@dataclass(frozen=True)
class OwnState:
    """A side kept in a state table of the join's own, `state`, under the side's column names."""

    state: str
    links_table = False

    def state_schema(self, side: Operator, key: list[str]) -> Schema | None:
        return state_schema(side.columns, key)

    def lookup(self, states: States, by: list[str], keys: pa.Table) -> pa.Table:
        return states.lookup(self.state, by, keys)

    def stage(self, states: States, changes: pa.Table) -> None:
        states.stage(self.state, changes)

    def frame(self, io: FrameIO, near: Near) -> DataFrame:
        return io.state_rows(self.state, near)

    def stage_frame(self, io: FrameIO, changes: DataFrame) -> None:
        io.stage_frame(self.state, changes)

    def gather(self, io: SnapshotIO, rows: DataFrame, by: list[str]) -> None:
        io.state_rows[self.state] = matchable(rows, by)

    def handed(self, stored: DataFrame, by: list[str]) -> DataFrame:
        return stored  # written matchable only
