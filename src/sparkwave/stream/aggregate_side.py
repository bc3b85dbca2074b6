"""A join side that is an aggregate's output: the join reads its rows from the aggregate's partials
state instead of keeping a copy of its own.

A join keeps each side's rows in a state table arranged by join key. When a side is an aggregate's
output, passed up only through shares and projections that rename columns, and the join key leads
the aggregate's group (whose partials state is sorted by it), that state table would hold exactly
the aggregate's live groups, finalized, in the same order: Nexmark q5's counts per window and
auction (7.3M rows for 1.5M bids) and its maximum count per window. The side then reads the
partials state as of the previous epoch, finalizes the groups it finds and renames their columns;
the aggregate alone stages them: one arrangement serving two operators, as Differential Dataflow
and Materialize share arrangements.

The planner decides it once (`Join.borrow_states`) and the stored plan records it (the aggregate's
id per side), so a plan keeps the state tables it was created with. A `JoinSide`
(`stream/join_side.py`): it stages nothing and writes nothing from a snapshot."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame

from sparkwave.core.schema import Schema
from sparkwave.core.zset_frames import q
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.join_side import Near
from sparkwave.stream.operator import FrameIO, Operator, SnapshotIO, States
from sparkwave.stream.project import renames_below


@dataclass(frozen=True)
class AggregateSide:
    """A join side read from `agg`'s partials, its columns renamed by `names`."""

    agg: Aggregate
    names: dict[str, str]  # the side's column -> the aggregate's output column
    links_table = False

    @staticmethod
    def of(side: Operator, keys: list[str]) -> AggregateSide | None:
        """The aggregate under `side` whose partials can stand for the side's state, if there is one:
        only renames and shares in between, every join key one of its group columns, the first
        join key its first (what lookups prune the partials' row groups by)."""
        op, names = renames_below(side)
        if not isinstance(op, Aggregate) or op.scalar or not op.group:
            return None
        mapped = [names[k] for k in keys]
        if not mapped or mapped[0] != op.group[0] or not set(mapped) <= set(op.group) or len(set(mapped)) < len(keys):
            return None  # (two join keys renaming one group column would look it up twice)
        return AggregateSide(op, names)

    @property
    def state(self) -> str:
        """The state table the side reads: the aggregate's partials."""
        return self.agg.partials_state

    def state_schema(self, side: Operator, key: list[str]) -> Schema | None:
        return None  # the aggregate's partials are the side's state

    def lookup(self, states: States, by: list[str], keys: pa.Table) -> pa.Table:
        """The side's rows as of the previous epoch whose `by` columns match a row of `keys`."""
        group_by = [self.names[k] for k in by]
        partials = states.lookup(self.state, group_by, keys.select(by).rename_columns(group_by))
        out = self.agg.finalize_table(partials)
        return pa.table({n: out[c] for n, c in self.names.items()})

    def stage(self, states: States, changes: pa.Table) -> None:
        """Nothing: the aggregate stages its partials."""

    def frame(self, io: FrameIO, near: Near) -> DataFrame:
        """The side's rows as of `prev` near a change's keys (`FrameIO.state_rows`, `near`'s lead
        being a join key of the side)."""
        keys, column, lead = near
        return self.rows(io.state_rows(self.state, (keys, column, self.names[lead])))

    def stage_frame(self, io: FrameIO, changes: DataFrame) -> None:
        """Nothing: the aggregate stages its partials."""

    def gather(self, io: SnapshotIO, rows: DataFrame, by: list[str]) -> None:
        """Nothing: the aggregate's build writes its partials."""

    def handed(self, stored: DataFrame, by: list[str]) -> DataFrame:
        return self.rows(stored)

    def rows(self, partials: DataFrame) -> DataFrame:
        """The side's rows from the aggregate's partials (`| group | partials |`)."""
        out = self.agg.finalize(partials)
        return out.select(*[q(c).alias(n) for n, c in self.names.items()])
