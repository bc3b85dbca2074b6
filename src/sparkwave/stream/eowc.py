"""EMIT ON WINDOW CLOSE: an operator that buffers its input's latest row per key in a state table
keyed by the watermarked column first (`e<id>`), and emits a row once, as an insert, when the
column's watermark passes it (the column below the watermark: no input row can change it again),
deleting it from the buffer. Its output only ever inserts, so the MV is append-only and an
append-only sink takes it.

Over an aggregate grouped by `window_start` of a TUMBLE or HOP of a watermarked time column, a window
is emitted when the watermark reaches its end; over a group of the watermarked column itself, when
the watermark passes the value. The three evaluations: per small epoch in Arrow (`delta`), per big
epoch as Spark frames (`delta_frame`), from a snapshot (`batch`: the closed rows out, the open ones
into the buffer). What the MV holds at an epoch equals the rows of the same query without EOWC whose
column is below the watermark (`tests/integration/test_watermark_oracle.py`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.schema import Schema
from sparkwave.core.zset import W, distinct, net, ns_join, with_weight
from sparkwave.core.zset_frames import net_frame, null_safe_on, q, semi, weighted
from sparkwave.stream.operator import EpochIO, FrameIO, Operator, SnapshotIO, state_schema
from sparkwave.stream.watermark import as_ints
from sparkwave.stream.watermark_clean import LOWEST, Cleaning, as_micros

_BUFFER = re.compile(r"e(\d+)")


@dataclass(kw_only=True)
class Eowc(Operator):
    op = "eowc"
    keeps_state = True

    input: Operator
    cleaning: Cleaning  # the key column that closes a row, and its watermark

    @property
    def inputs(self) -> list[Operator]:
        return [self.input]

    @property
    def buffer(self) -> str:
        return f"e{self.id}"

    @property
    def buffer_key(self) -> list[str]:
        """The input's key, the watermarked column first (a range read finds the closed rows)."""
        return [self.cleaning.column, *[k for k in self.key if k != self.cleaning.column]]

    def _fields_json(self) -> dict[str, Any]:
        return {"cleaning": self.cleaning.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Eowc:
        (child,) = inputs
        cleaning = Cleaning.from_json(d["cleaning"])
        assert cleaning is not None, "BUG: a stored EOWC operator without its watermarked column"
        return Eowc(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), input=child, cleaning=cleaning)

    def prune(self, needed: set[str]) -> None:
        """Every input column stays: the buffer holds whole rows."""
        self.input.prune(set(self.input.names))

    def state_tables(self) -> dict[str, Schema]:
        return {self.buffer: state_schema(list(self.columns), self.buffer_key)}

    @classmethod
    def state_purpose(cls, suffix: str, key: tuple[str, ...]) -> str | None:
        if m := _BUFFER.fullmatch(suffix):
            return (f"rows of EMIT ON WINDOW CLOSE {m.group(1)} not yet closed, per ({', '.join(key)}); each leaves "
                    f"when the watermark of {key[0]} passes it")
        return None

    def describe_state(self) -> str:
        """EXPLAIN's and DESCRIBE's words for the buffer."""
        return (f"rows not yet closed per ({', '.join(self.buffer_key)}), emitted once and deleted when "
                f"{self.cleaning.watermark.describe()} passes {self.cleaning.column}")

    # --- per epoch -----------------------------------------------------------------------------
    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: EMIT ON WINDOW CLOSE reaches the MV through a projection"
        child = self.input.delta(io)
        value = self.cleaning.threshold(io.watermarks)
        states = io.states
        schema = self.arrow_schema()
        key = self.buffer_key
        col = self.cleaning.column
        old = schema.empty_table()
        now = schema.empty_table()
        if child is not None and child.num_rows:
            keys = distinct(child, key)
            old = states.lookup(self.buffer, key, keys).select(schema.names).cast(schema)
            both = net(pa.concat_tables([with_weight(old, 1), child.select([*schema.names, W]).cast(
                with_weight(old, 1).schema)]))
            now = both.filter(pc.greater(both[W], 0)).drop_columns([W])
        waiting = states.between(self.buffer, col, [(LOWEST, value - 1)]).select(schema.names).cast(schema) \
            if value is not None else schema.empty_table()
        if old.num_rows and waiting.num_rows:
            waiting = ns_join(waiting, distinct(old, key), key, "left anti").select(schema.names)
        closed_now = _below(now, col, value)
        emitted = pa.concat_tables([closed_now, waiting])
        staged = pa.concat_tables([with_weight(old, -1), with_weight(now.filter(pc.invert(closed_now_mask(
            now, col, value))), 1), with_weight(waiting, -1)])
        if staged.num_rows:
            states.stage(self.buffer, staged)
        return with_weight(emitted, 1) if emitted.num_rows else None

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        assert not root, "BUG: EMIT ON WINDOW CLOSE reaches the MV through a projection"
        child = self.input.delta_frame(io)
        value = self.cleaning.threshold(io.watermarks)
        key, col, names = self.buffer_key, self.cleaning.column, self.names
        typ = self.type_of(col)
        state = io.state_rows(self.buffer)
        empty = state.limit(0)
        old, now = empty, empty
        if child is not None:
            keys = io.shared(child.select(*[q(k) for k in key]).distinct())
            old = io.shared(semi(state, keys, key))
            both = net_frame(weighted(old, 1).unionByName(child.select(*[q(n) for n in names], q(W))))
            now = io.shared(both.where(F.col(W) > 0).drop(W))
            renamed = keys.select(*[q(k).alias(f"_k{i}") for i, k in enumerate(key)])
            state = state.join(renamed, null_safe_on(state, renamed, key, [f"_k{i}" for i in range(len(key))]),
                               "left_anti")
        below = as_micros(col, typ) < F.lit(value) if value is not None else F.lit(False)
        waiting = state.where(below) if value is not None else empty
        emitted = now.where(below).unionByName(waiting)
        io.stage_frame(self.buffer, weighted(old, -1).unionByName(weighted(now.where(~below | q(col).isNull()), 1))
                       .unionByName(weighted(waiting, -1)))
        return weighted(emitted, 1)

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        rows = io.shared(self.input.batch(io).select(*[q(n) for n in self.names]))
        value = self.cleaning.threshold(io.watermarks)
        if value is None:
            io.state_rows[self.buffer] = rows
            return rows.limit(0)
        below = as_micros(self.cleaning.column, self.type_of(self.cleaning.column)) < F.lit(value)
        io.state_rows[self.buffer] = rows.where(~below | q(self.cleaning.column).isNull())
        return rows.where(below)


def closed_now_mask(rows: pa.Table, column: str, value: int | None) -> pa.ChunkedArray | pa.Array:
    """Which rows are closed: their column below `value` (None: no watermark yet, none; NULL never)."""
    if value is None or rows.num_rows == 0:
        return pa.array([False] * rows.num_rows, pa.bool_())
    return pc.fill_null(pc.less(as_ints(rows[column]), value), False)


def _below(rows: pa.Table, column: str, value: int | None) -> pa.Table:
    return rows.filter(closed_now_mask(rows, column, value))
