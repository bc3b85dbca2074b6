"""A join side that is an append-only table's rows: its state table stores them under the table's
own column names, so that a backfill links the table's snapshot files as the state's base instead
of writing a copy sorted by join key.

A join keeps each side's rows in a state table arranged by join key. When a side is a scan of an
append-only table (no window, no filter), passed up only through shares and projections that
rename columns, the state's rows as of the snapshot are exactly the table's rows: Nexmark q4's and
q7's bids, 1.2M rows whose sorted copy cost a CREATE more than the rest of its build. The state
table then names its columns as the table does; the backfill hard-links the table's base and log
files of the snapshot into the state's base (`storage/links.py`), and the first compaction after
it (due at once: `links.is_linked`) writes the copy sorted by join key that lookups prune by.
Until then a lookup reads every row group of the linked files. The join renames the side's rows
on their way in and out; a row with a NULL join key, which the state would not keep, is in the
linked files but never matches a key.

The planner decides it once (`Join.link_tables`) and the stored plan records it (the table per
side), so a plan keeps the state tables it was created with. A `JoinSide` (`stream/join_side.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame

from sparkwave.core.schema import Schema
from sparkwave.core.zset_frames import q
from sparkwave.stream.expressions import column_ref
from sparkwave.stream.join_side import Near, matchable
from sparkwave.stream.operator import FrameIO, Operator, SnapshotIO, States, state_schema
from sparkwave.stream.project import renames_below
from sparkwave.stream.scan import Scan


@dataclass(frozen=True)
class TableSide:
    """A join side whose state table `state` holds `relation`'s rows, its columns renamed by `names`."""

    relation: str
    scan: int  # the scan's operator id: a backfill chunk it drives links the table's files if it is the first
    state: str
    names: dict[str, str]  # the side's column -> the table's column
    links_table = True

    @staticmethod
    def of(side: Operator, state: str) -> TableSide | None:
        """The table under `side` whose rows can stand for the side's state `state` if the table is
        append-only (the caller checks): only renames and shares in between, and a scan with no
        window and no filter whose columns the side keeps are table columns as they are, no two of
        them the same."""
        scan, names = renames_below(side)
        if not isinstance(scan, Scan) or scan.window is not None or scan.predicate:
            return None
        refs = {n: ref for n, e in scan.exprs if (ref := column_ref(e)) is not None}
        if not set(names.values()) <= set(refs):
            return None
        mapped = {s: refs[c] for s, c in names.items()}
        if len(set(mapped.values())) < len(mapped):
            return None  # two side columns of one table column: the state would name it twice
        return TableSide(scan.relation, scan.id, state, mapped)

    def state_schema(self, side: Operator, key: list[str]) -> Schema | None:
        """The state table's schema: the side's columns and `key` (the join keys, then the side's
        row key) under the table's names."""
        return state_schema([(self.names[n], t) for n, t in side.columns], [self.names[k] for k in key])

    def stored(self, rows: pa.Table) -> pa.Table:
        """A side's rows (`| columns | _w |`) as the state stores them."""
        return rows.rename_columns([self.names.get(c, c) for c in rows.column_names])

    def lookup(self, states: States, by: list[str], keys: pa.Table) -> pa.Table:
        """The side's rows as of the previous epoch whose `by` columns match a row of `keys`."""
        stored_by = [self.names[k] for k in by]
        rows = states.lookup(self.state, stored_by, keys.select(by).rename_columns(stored_by))
        return pa.table({n: rows[c] for n, c in self.names.items()})

    def stage(self, states: States, changes: pa.Table) -> None:
        states.stage(self.state, self.stored(changes))

    def stored_frame(self, rows: DataFrame) -> DataFrame:
        """A side's rows or change frame (`| columns | _w |`) as the state stores them."""
        return rows.select(*[q(c).alias(self.names.get(c, c)) for c in rows.columns])

    def frame(self, io: FrameIO, near: Near) -> DataFrame:
        """The side's rows as of `prev` near a change's keys (`FrameIO.state_rows`, `near`'s lead
        being a join key of the side)."""
        keys, column, lead = near
        return self.rows(io.state_rows(self.state, (keys, column, self.names[lead])))

    def stage_frame(self, io: FrameIO, changes: DataFrame) -> None:
        io.stage_frame(self.state, self.stored_frame(changes))

    def gather(self, io: SnapshotIO, rows: DataFrame, by: list[str]) -> None:
        """The table's files linked as the state (`SnapshotIO.links`), by the first chunk of a
        backfill the table's scan drives, unless the table is too big for it (`BuildPlan.linkable`);
        else its rows written under the table's names."""
        if self.relation in io.plan.linkable:
            if io.links_first(self.scan):
                io.links[self.state] = self.relation
        else:
            io.state_rows[self.state] = self.stored_frame(matchable(rows, by))

    def handed(self, stored: DataFrame, by: list[str]) -> DataFrame:
        return matchable(self.rows(stored), by)

    def rows(self, stored: DataFrame) -> DataFrame:
        """The side's rows from the state's (`| columns |` under the table's names)."""
        return stored.select(*[q(c).alias(n) for n, c in self.names.items()])
