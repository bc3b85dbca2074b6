"""The temporal filter: `WHERE ts > NOW() - INTERVAL '1 hour'` (a lower bound: rows leave as time
passes), `WHERE ts <= NOW()` (an upper bound: a delay, rows appear once NOW() passes them), or both,
as RisingWave has them. `NOW()` is the epoch's time, recorded in its persisted plan
(`meta/barrier/plan.py`, `Catalog.epoch_now`), so every row of an epoch sees one time and a replay
the same one; it never goes back.

Its output as of an epoch is its input's rows whose time column satisfies the bounds at that epoch's
NOW(). So its change in an epoch is the input's change filtered at the new NOW(), plus the rows it
held whose condition the move of NOW() from the previous epoch's flipped. Those rows lie in two
ranges of the time column (between the old and the new lower bound, between the old and the new
upper bound), so its state table (`t<id>`: its input's rows keyed by time column, then row key)
is read by range, never whole. The state keeps only rows whose condition may still change: with a
lower bound, the rows above it (a row below it never comes back); with only an upper bound, the rows
not yet released. Each epoch deletes what fell below, so the state stays as big as the window.

Three evaluations of one semantics: `delta` in Arrow, `delta_frame` in Spark for a big epoch, and
`batch` over a snapshot at the snapshot epoch's NOW(). A tree holding one steps every epoch, whether
its upstreams changed or not (`ticks`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.schema import Schema
from sparkwave.core.zset import W, net
from sparkwave.core.zset_frames import net_frame
from sparkwave.stream.operator import EpochIO, FrameIO, Operator, SnapshotIO, state_schema

_STATE = re.compile(r"t(\d+)")
LOWER_OPS = (">", ">=")
UPPER_OPS = ("<", "<=")


@dataclass(frozen=True)
class Bound:
    """`column <op> NOW() + offset` (offset in microseconds, negative for `- INTERVAL`)."""

    op: str
    offset: int

    def at(self, now: int) -> int:
        return now + self.offset

    def to_json(self) -> list[Any]:
        return [self.op, self.offset]


def _holds(op: str, ts: Any, bound: Any) -> Any:
    """`ts <op> bound`, for Arrow arrays and Spark columns alike."""
    if op == ">":
        return ts > bound
    if op == ">=":
        return ts >= bound
    if op == "<":
        return ts < bound
    return ts <= bound


def _arrow_holds(op: str, ts: pa.Array, bound: int) -> pa.Array:
    fn = {">": pc.greater, ">=": pc.greater_equal, "<": pc.less, "<=": pc.less_equal}[op]
    return pc.fill_null(fn(ts, pa.scalar(bound, pa.int64())), False)


@dataclass(kw_only=True)
class TemporalFilter(Operator):
    op = "temporal_filter"
    keeps_state = True

    input: Operator
    column: str  # the input's time column (timestamptz, or timestamp read as UTC)
    lower: Bound | None = None  # column > / >= NOW() + offset
    upper: Bound | None = None  # column < / <= NOW() + offset

    def __post_init__(self) -> None:
        assert self.lower is None or self.lower.op in LOWER_OPS, f"BUG: lower bound {self.lower}"
        assert self.upper is None or self.upper.op in UPPER_OPS, f"BUG: upper bound {self.upper}"
        assert self.lower or self.upper, "BUG: a temporal filter without a bound"

    @property
    def inputs(self) -> list[Operator]:
        return [self.input]

    def _fields_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"column": self.column}
        if self.lower is not None:
            d["lower"] = self.lower.to_json()
        if self.upper is not None:
            d["upper"] = self.upper.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> TemporalFilter:
        (child,) = inputs
        lower, upper = d.get("lower"), d.get("upper")
        return TemporalFilter(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), input=child,
                              column=d["column"], lower=Bound(*lower) if lower else None,
                              upper=Bound(*upper) if upper else None)

    def prune(self, needed: set[str]) -> None:
        keep = needed | set(self.key) | {self.column}
        self.input.prune({n for n in self.input.names if n in keep})
        self.columns = list(self.input.columns)

    def describe(self, now: str = "NOW()") -> str:
        """The condition in words, `column` standing for the time column (EXPLAIN)."""
        parts = [f"{b.op} {now}{_interval(b.offset)}" for b in (self.lower, self.upper) if b is not None]
        return " AND ".join(parts)

    def cleaned(self, column: str) -> str:
        """What deletes the state's rows, in words (EXPLAIN, DESCRIBE)."""
        if self.lower is not None:
            bound = f"{column} {self.lower.op} NOW(){_interval(self.lower.offset)}"
            return f"each epoch deletes the rows for which {bound} no longer holds"
        assert self.upper is not None
        return f"each epoch deletes the rows it releases ({column} {self.upper.op} NOW(){_interval(self.upper.offset)})"

    # --- state ---------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return f"t{self.id}"

    def state_tables(self) -> dict[str, Schema]:
        return {self.state: state_schema(self.input.columns, [self.column, *self.input.key])}

    @classmethod
    def state_purpose(cls, suffix: str, key: tuple[str, ...]) -> str | None:
        if m := _STATE.fullmatch(suffix):
            return (f"input rows of temporal filter {m.group(1)} that NOW() may still move in or out, arranged by "
                    f"{key[0]}, then row key: ({', '.join(key)}); each epoch deletes those NOW() left behind")
        return None

    # --- the condition at a time ---------------------------------------------------------------
    def _arrow_masks(self, rows: pa.Table, now: int) -> tuple[pa.Array, pa.Array]:
        """(passes, kept in the state) per row at `now`. A row stays in the state while the lower bound
        holds (below it, it never comes back), or, with only an upper bound, until it is released."""
        ts = pc.cast(rows[self.column], pa.int64())
        passes = pa.array([True] * rows.num_rows, pa.bool_())
        for b in (self.lower, self.upper):
            if b is not None:
                passes = pc.and_(passes, _arrow_holds(b.op, ts, b.at(now)))
        if self.lower is not None:
            kept = _arrow_holds(self.lower.op, ts, self.lower.at(now))
        else:
            assert self.upper is not None
            kept = pc.and_(pc.invert(_arrow_holds(self.upper.op, ts, self.upper.at(now))), pc.is_valid(ts))
        return passes, kept

    def _spark_ts(self) -> SparkColumn:
        t = self.type_of(self.column)
        col = F.col(f"`{self.column}`")
        return F.unix_micros(col if t == "timestamptz" else col.cast("timestamp"))  # the session's zone is UTC

    def _spark_masks(self, now: int) -> tuple[SparkColumn, SparkColumn]:
        ts = self._spark_ts()
        passes = F.lit(True)
        for b in (self.lower, self.upper):
            if b is not None:
                passes = passes & _holds(b.op, ts, F.lit(b.at(now)))
        if self.lower is not None:
            kept = _holds(self.lower.op, ts, F.lit(self.lower.at(now)))
        else:
            assert self.upper is not None
            kept = ~_holds(self.upper.op, ts, F.lit(self.upper.at(now)))
        return F.coalesce(passes, F.lit(False)), F.coalesce(kept, F.lit(False))

    def _moved(self, prev: int, now: int) -> list[tuple[int, int]]:
        """The closed ranges of the time column whose condition may differ between NOW() = `prev`
        and `now`: between the old and the new value of each bound."""
        return [(b.at(prev), b.at(now)) for b in (self.lower, self.upper) if b is not None and now > prev]

    # --- per epoch -----------------------------------------------------------------------------
    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: a temporal filter's output reaches the MV through a projection"
        assert io.now is not None, "BUG: a temporal filter stepped without the epoch's NOW()"
        now = io.now
        schema = self.input.arrow_schema()
        outs, staged = [], []
        d = self.input.delta(io)
        if d is not None and d.num_rows:
            d = net(d.select([*schema.names, W]))  # a row inserted and deleted in one epoch never reaches the state
            passes, kept = self._arrow_masks(d, now)
            outs.append(d.filter(passes))
            staged.append(d.filter(kept))
        if io.prev_now is not None and (ranges := self._moved(io.prev_now, now)):
            held = io.states.between(self.state, self.column, ranges).select(schema.names).cast(schema)
            if held.num_rows:
                was, _ = self._arrow_masks(held, io.prev_now)
                passes, kept = self._arrow_masks(held, now)
                flipped = pc.not_equal(was, passes)
                ins = pc.if_else(passes, 1, -1).cast(pa.int64())
                outs.append(held.append_column(W, ins).filter(flipped))
                gone = held.filter(pc.invert(kept))
                staged.append(gone.append_column(W, pa.array([-1] * gone.num_rows, pa.int64())))
        if staged:
            io.states.stage(self.state, pa.concat_tables(staged))
        if not outs:
            return None
        out = net(pa.concat_tables(outs).cast(self.arrow_schema(pa.field(W, pa.int64()))))
        return out if out.num_rows else None

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        assert not root, "BUG: a temporal filter's output reaches the MV through a projection"
        assert io.now is not None, "BUG: a temporal filter stepped without the epoch's NOW()"
        now, names = io.now, [f"`{n}`" for n in self.input.names]
        outs, staged = [], []
        d = self.input.delta_frame(io)
        if d is not None:
            d = net_frame(d.select(*names, W))
            passes, kept = self._spark_masks(now)
            outs.append(d.where(passes))
            staged.append(d.where(kept))
        if io.prev_now is not None and (ranges := self._moved(io.prev_now, now)):
            ts = self._spark_ts()
            within = F.lit(False)
            for lo, hi in ranges:
                within = within | ts.between(lo, hi)
            held = io.state_rows(self.state).where(within).select(*names)
            was, _ = self._spark_masks(io.prev_now)
            passes, kept = self._spark_masks(now)
            outs.append(held.where(was != passes).withColumn(W, F.when(passes, F.lit(1)).otherwise(F.lit(-1))
                                                               .cast("bigint")))
            staged.append(held.where(~kept).withColumn(W, F.lit(-1).cast("bigint")))
        if staged:
            union = staged[0]
            for s in staged[1:]:
                union = union.unionByName(s)
            io.stage_frame(self.state, union)
        if not outs:
            return None
        out = outs[0]
        for o in outs[1:]:
            out = out.unionByName(o)
        return net_frame(out)

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        now = io.rt.catalog.epoch_now(io.epoch) or 0
        rows = io.once(self.input)
        passes, kept = self._spark_masks(now)
        io.state_rows[self.state] = rows.where(kept)
        return rows.where(passes)


def _interval(offset: int) -> str:
    if offset == 0:
        return ""
    sign, n = ("-" if offset < 0 else "+"), abs(offset)
    for unit, size in (("day", 86_400_000_000), ("hour", 3_600_000_000), ("minute", 60_000_000),
                       ("second", 1_000_000), ("millisecond", 1000)):
        if n % size == 0:
            return f" {sign} INTERVAL '{n // size} {unit}{'s' if n // size != 1 else ''}'"
    return f" {sign} INTERVAL '{n} microseconds'"
