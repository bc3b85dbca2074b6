"""The join operator: an equi-join (inner, left, right, full) of two Z-sets, with one state table per
side arranged by join key (`j<id>l`, `j<id>r`: the side's rows, keyed by join key then row key).

Per epoch (on the driver; as Spark frames for a big epoch: `delta_frame`), an inner join emits
`dL x R + L x dR + dL x dR`: each side's change joined with the other side's rows of its keys,
looked up in that side's state table, so the cost follows the change and the matching rows of the
other side. An outer join recomputes, for every join key the epoch
touches on either side, that key's output rows from both sides' rows before and after the epoch and
emits the difference, `J(L', R') - J(L, R)` restricted to the touched keys (its NULL-padded rows
appear and disappear as a key gains or loses matches). Rows with a NULL join key never match:
they pass through NULL-padded on a preserved side and are not stored. (The planner sets a preserved
side's join key to NULL on rows that fail the ON clause's conditions on that side.)

From a snapshot, each side's frame is both its state table's rows and the join's input, so it is
evaluated once (`SnapshotIO.once`).

Where a side's rows live is the side's own (`Join.side`, a `JoinSide`: `stream/join_side.py`): a
state table of the join's (`OwnState`); a side that is an aggregate's output keeps no state table
and reads the aggregate's partials (`stream/aggregate_side.py`, `Join.aggregate_sides`); a side that
is an append-only table's rows keeps them under the table's column names, so that a backfill links
the table's files as its state (`stream/table_side.py`, `Join.table_sides`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.errors import CatalogError
from sparkwave.core.schema import Schema, SqlType
from sparkwave.core.zset import W, apply_zset, distinct, net, with_weight
from sparkwave.core.zset_frames import apply_frame, net_frame, q, semi, union_all, weighted
from sparkwave.stream.aggregate_side import AggregateSide
from sparkwave.stream.join_ranges import Range, condition, matched
from sparkwave.stream.join_side import JoinSide, OwnState, matchable
from sparkwave.stream.operator import EpochIO, FrameIO, Operator, SnapshotIO, States
from sparkwave.stream.table_side import TableSide
from sparkwave.stream.watermark import Derivation
from sparkwave.stream.watermark_clean import CleaningFrameIO, CleaningStates, at_or_above

JoinType = Literal["inner", "left", "right", "full"]
_PYARROW_JOIN = {"inner": "inner", "left": "left outer", "right": "right outer", "full": "full outer"}
_SPARK_JOIN = {"inner": "inner", "left": "left_outer", "right": "right_outer", "full": "full_outer"}
_STATE = re.compile(r"j(\d+)([lr])")
Side = Literal["left", "right"]
SIDES: tuple[Side, ...] = ("left", "right")
_OTHER: dict[Side, Side] = {"left": "right", "right": "left"}


@dataclass(frozen=True)
class Bound:
    """`left - right >= value` (a lower bound) or `<= value` (an upper bound) on two time columns
    (microseconds), with the watermark derivation of the column on the other side of the one it cleans."""

    left: str
    right: str
    value: int
    watermark: Derivation | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"left": self.left, "right": self.right, "value": self.value}
        if self.watermark is not None:
            d["watermark"] = self.watermark.to_json()
        return d

    @staticmethod
    def from_json(d: dict[str, Any] | None) -> Bound | None:
        if not d:
            return None
        w = Derivation.from_json(d["watermark"]) if d.get("watermark") else None
        return Bound(d["left"], d["right"], int(d["value"]), w)


@dataclass(frozen=True)
class Interval:
    """An interval join's bounds on its times (planner metadata, `frontend/plan/intervals.py`): a
    `lower` one, `left - right >= value`, and an `upper` one, `left - right <= value` (each of a pair
    of time columns; either may be absent). The range conditions themselves are the join's residual
    predicate; the bounds only let each side's state go: a left row whose `lower.left` is below the
    right side's watermark (of `lower.right`) + `lower.value`, a right row whose `upper.right` is below
    the left side's (of `upper.left`) - `upper.value`, can match no row still to come."""

    lower: Bound | None
    upper: Bound | None

    def to_json(self) -> dict[str, Any]:
        return {name: b.to_json() for name, b in (("lower", self.lower), ("upper", self.upper)) if b is not None}

    @staticmethod
    def from_json(d: dict[str, Any] | None) -> Interval | None:
        return Interval(Bound.from_json(d.get("lower")), Bound.from_json(d.get("upper"))) if d else None

    @property
    def columns(self) -> set[str]:
        return {c for b in (self.lower, self.upper) if b is not None for c in (b.left, b.right)}

    def time(self, side: Side) -> str:
        """The time column a side is cleaned by."""
        b = self.lower if side == "left" else self.upper
        assert b is not None, f"BUG: the {side} side of an interval join has no bound to clean it by"
        return b.left if side == "left" else b.right

    @property
    def cleanable(self) -> set[Side]:
        """The sides a watermark can clean (once it has a value)."""
        sides: tuple[tuple[Side, Bound | None], ...] = (("left", self.lower), ("right", self.upper))
        return {side for side, b in sides if b is not None and b.watermark is not None}

    def thresholds(self, watermarks: Mapping[str, int | None]) -> dict[Side, tuple[str, int]]:
        """Per side that can be cleaned this epoch: its time column and the value below which its rows go."""
        out: dict[Side, tuple[str, int]] = {}
        lo, up = self.lower, self.upper
        if lo is not None and lo.watermark is not None and (w := lo.watermark.value(watermarks)) is not None:
            out["left"] = (lo.left, w + lo.value)
        if up is not None and up.watermark is not None and (w := up.watermark.value(watermarks)) is not None:
            out["right"] = (up.right, w - up.value)
        return out


@dataclass(kw_only=True)
class Join(Operator):
    op = "join"
    keeps_state = True
    # each touched join key's output recomputed from its rows before and after the epoch (outer joins
    # and the ASOF join); an inner join adds `dL x R + L x dR + dL x dR` instead
    per_key: ClassVar[bool] = False

    left: Operator
    right: Operator
    join_type: JoinType
    left_keys: list[str]
    right_keys: list[str]
    # the sides read from the aggregate below them, which keep no state table (`borrow_states`)
    aggregate_sides: dict[Side, AggregateSide] = field(default_factory=dict, repr=False, compare=False)
    # the sides that are an append-only table's rows, kept under its column names (`link_tables`)
    table_sides: dict[Side, TableSide] = field(default_factory=dict, repr=False, compare=False)
    interval: Interval | None = None  # an interval join's bound on its times: its sides' state cleaning
    ranges: list[Range] = field(default_factory=list)  # an outer join's range conditions in ON (`join_ranges.py`)

    @property
    def inputs(self) -> list[Operator]:
        return [self.left, self.right]

    def _fields_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"join_type": self.join_type}
        if self.left_keys:
            d["left_keys"] = self.left_keys
        if self.right_keys:
            d["right_keys"] = self.right_keys
        if self.aggregate_sides:  # the aggregate each reads, by id
            d["borrowed"] = {side: a.agg.id for side, a in self.aggregate_sides.items()}
        if self.table_sides:  # the table each keeps, by name
            d["linked"] = {side: t.relation for side, t in self.table_sides.items()}
        if self.interval is not None:
            d["interval"] = self.interval.to_json()
        if self.ranges:
            d["ranges"] = [list(r) for r in self.ranges]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Join:
        left, right = inputs
        join = cls(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), left=left, right=right,
                   join_type=d["join_type"], left_keys=list(d.get("left_keys", [])),
                   right_keys=list(d.get("right_keys", [])), interval=Interval.from_json(d.get("interval")),
                   ranges=[(a, op, b, int(n)) for a, op, b, n in d.get("ranges", [])],
                   **cls._own_fields(d))
        for side, agg_id in d.get("borrowed", {}).items():
            found = AggregateSide.of(*join._side_and_keys(side))
            if found is None or found.agg.id != agg_id:
                raise CatalogError(f"the stored plan's join {join.id} reads its {side} side from aggregate {agg_id}'s "
                                   "state, which this version of sparkwave does not; recreate the materialized view")
            join.aggregate_sides[side] = found
        for side, relation in d.get("linked", {}).items():
            table = TableSide.of(join._side_and_keys(side)[0], join._state(side))
            if table is None or table.relation != relation:
                raise CatalogError(f"the stored plan's join {join.id} keeps its {side} side as {relation!r}'s rows, "
                                   "which this version of sparkwave does not; recreate the materialized view")
            join.table_sides[side] = table
        return join

    @classmethod
    def _own_fields(cls, d: dict[str, Any]) -> dict[str, Any]:
        """A subclass's fields from its stored JSON (`stream/asof_join.py`)."""
        return {}

    def linear_in(self, side: Side) -> bool:
        """Whether each output row (and state row) comes from one row of `side`, so that a backfill
        may split that side's rows into chunks (`stream/chunking.py`): a side joined inner or
        preserved, whose missing rows the join never NULL-pads from the other."""
        return self.join_type != "full" and self.join_type != _OTHER[side]

    def borrow_states(self) -> None:
        """Read each side that is an aggregate's output from the aggregate's partials (planning,
        after pruning and sharing: the shape it looks at is final)."""
        self.aggregate_sides = {side: found for side in SIDES
                                if (found := AggregateSide.of(*self._side_and_keys(side))) is not None}

    def link_tables(self, append_only: Callable[[str], bool]) -> None:
        """Keep each side that is an append-only table's rows under the table's column names, so that
        a backfill links the table's files as the side's state (planning, after `borrow_states`)."""
        cleaned = self.interval.cleanable if self.interval is not None else set()  # own state: cleaned row by row
        self.table_sides = {side: found for side in SIDES if side not in self.aggregate_sides and side not in cleaned
                            and (found := TableSide.of(self._side_and_keys(side)[0], self._state(side))) is not None
                            and append_only(found.relation)}

    def _side_and_keys(self, side: Side) -> tuple[Operator, list[str]]:
        return (self.left, self.left_keys) if side == "left" else (self.right, self.right_keys)

    def side(self, side: Side) -> JoinSide:
        """Where a side's rows live: the aggregate's partials it reads, the table's rows it keeps, or
        a state table of its own."""
        return self.aggregate_sides.get(side) or self.table_sides.get(side) or OwnState(self._state(side))

    def _lookup(self, states: States, side: Side, keys: pa.Table) -> pa.Table:
        """A side's rows as of the previous epoch whose join keys match a row of `keys` (named by
        the side's join keys)."""
        return self.side(side).lookup(states, self._side_and_keys(side)[1], keys)

    def _state(self, side: Side) -> str:
        return self.left_state if side == "left" else self.right_state

    def handed_state(self, side: Side) -> str:
        """The state table whose files carry a side's rows to a backfill's later chunks."""
        return self.side(side).state

    def prune(self, needed: set[str]) -> None:
        keep = needed | set(self.key) | (self.interval.columns if self.interval else set()) | \
            {c for a, _, b, _ in self.ranges for c in (a, b)}
        self.left.prune({n for n in self.left.names if n in keep} | set(self.left_keys))
        self.right.prune({n for n in self.right.names if n in keep} | set(self.right_keys))
        self.columns = self.left.columns + self.right.columns

    # --- state ---------------------------------------------------------------------------------
    @property
    def left_state(self) -> str:
        return f"j{self.id}l"

    @property
    def right_state(self) -> str:
        return f"j{self.id}r"

    def state_tables(self) -> dict[str, Schema]:
        out: dict[str, Schema] = {}
        for side in SIDES:
            op, keys = self._side_and_keys(side)
            # a side an interval's watermark cleans is keyed by its time too (the range read of what goes)
            time = [self.interval.time(side)] if self.interval is not None and side in self.interval.cleanable else []
            if (schema := self.side(side).state_schema(op, keys + time + op.key)) is not None:
                out[self._state(side)] = schema
        return out

    @classmethod
    def state_purpose(cls, suffix: str, key: tuple[str, ...]) -> str | None:
        if m := _STATE.fullmatch(suffix):
            side = "left" if m.group(2) == "l" else "right"
            return f"{side} input of join {m.group(1)}, arranged by join key, then row key: ({', '.join(key)})"
        return None

    # --- per epoch -----------------------------------------------------------------------------
    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: a join's output reaches the MV through a projection"
        dl, dr = self.left.delta(io), self.right.delta(io)
        states = self._cleaning(io.states, io.watermarks)
        if (dl is None or dl.num_rows == 0) and (dr is None or dr.num_rows == 0):
            finish_cleaning_all(states)
            return None
        out = self.apply(dl, dr, states)
        finish_cleaning_all(states)
        return out if out.num_rows else None

    def _cleaned_sides(self, watermarks: Mapping[str, int | None]) -> dict[Side, tuple[str, int]]:
        """The sides kept in the join's own state that an interval's watermarks clean this epoch."""
        if self.interval is None:
            return {}
        return {side: t for side, t in self.interval.thresholds(watermarks).items()
                if isinstance(self.side(side), OwnState)}

    def _cleaning(self, states: States, watermarks: Mapping[str, int | None]) -> States:
        """`states` deleting each cleaned side's rows below its threshold (`stream/watermark_clean.py`)."""
        for side, (column, value) in self._cleaned_sides(watermarks).items():
            states = CleaningStates(states, column, value, [self._state(side)])
        return states

    def apply(self, dl: pa.Table | None, dr: pa.Table | None, states: States) -> pa.Table:
        """The join's change from its sides' changes (None: that side did not change), against and
        staging its state tables."""
        left_schema, right_schema = self.left.arrow_schema(), self.right.arrow_schema()
        dl = dl if dl is not None else with_weight(left_schema.empty_table(), 1)
        dr = dr if dr is not None else with_weight(right_schema.empty_table(), 1)
        lk, rk = self.left_keys, self.right_keys
        l_null, r_null = _has_null_key(dl, lk), _has_null_key(dr, rk)
        padded = []
        if self.join_type in ("left", "full"):
            padded.append(self._pad(dl.filter(l_null), right_schema))
        if self.join_type in ("right", "full"):
            padded.append(self._pad(dr.filter(r_null), left_schema))
        dl, dr = dl.filter(pc.invert(l_null)), dr.filter(pc.invert(r_null))
        if self.join_type == "inner" and not self.per_key:
            return self._inner(dl, dr, states)
        keys = pa.concat_tables([distinct(dl, lk), distinct(dr, rk).rename_columns(lk).cast(distinct(dl, lk).schema)])
        keys = distinct(keys, lk)
        l_old = self._lookup(states, "left", keys).select(left_schema.names).cast(left_schema)
        r_old = self._lookup(states, "right", keys.rename_columns(rk)).select(right_schema.names).cast(right_schema)
        l_new, r_new = apply_zset(l_old, dl), apply_zset(r_old, dr)
        self.side("left").stage(states, dl)
        self.side("right").stage(states, dr)
        before, after = self._join(l_old, r_old), self._join(l_new, r_new)
        out = pa.concat_tables([with_weight(before, -1), with_weight(after, 1).cast(with_weight(before, -1).schema)]
                               + [p.cast(with_weight(before, -1).schema) for p in padded])
        return net(out)

    def _inner(self, dl: pa.Table, dr: pa.Table, states: States) -> pa.Table:
        """An inner join's change, `dL x R + L x dR + dL x dR`: each side's change meets the other
        side's old rows of its keys, so a change on one side never reads its own side's state (a
        new bid looks up its auction, not the auction's earlier bids)."""
        lk, rk = self.left_keys, self.right_keys
        left_schema, right_schema = self.left.arrow_schema(), self.right.arrow_schema()
        r_old = self._lookup(states, "right", distinct(dl, lk).rename_columns(rk)) if dl.num_rows \
            else right_schema.empty_table()
        l_old = self._lookup(states, "left", distinct(dr, rk).rename_columns(lk)) if dr.num_rows \
            else left_schema.empty_table()
        self.side("left").stage(states, dl)
        self.side("right").stage(states, dr)
        parts = [self._weighted(dl, with_weight(r_old.select(right_schema.names).cast(right_schema), 1)),
                 self._weighted(with_weight(l_old.select(left_schema.names).cast(left_schema), 1), dr),
                 self._weighted(dl, dr)]
        return net(pa.concat_tables([p.cast(parts[0].schema) for p in parts]))

    def _weighted(self, left: pa.Table, right: pa.Table) -> pa.Table:
        """The inner join of two Z-sets: each output row weighs its two input rows' weights' product."""
        out = left.rename_columns([c if c != W else "_wl" for c in left.column_names]).join(
            right.rename_columns([c if c != W else "_wr" for c in right.column_names]), self.left_keys,
            right_keys=self.right_keys, join_type="inner", coalesce_keys=False, use_threads=False)
        return out.select(self.names).append_column(W, pc.multiply(out["_wl"], out["_wr"]))

    def _join(self, left: pa.Table, right: pa.Table) -> pa.Table:
        if self.ranges:
            return self._ranged_join(left, right)
        out = left.join(right, self.left_keys, right_keys=self.right_keys, join_type=_PYARROW_JOIN[self.join_type],
                        coalesce_keys=False, use_threads=False)
        return out.select(self.names)

    def _ranged_join(self, left: pa.Table, right: pa.Table) -> pa.Table:
        """An outer join whose ON clause has range conditions: the pairs of equal keys that satisfy
        them, then each preserved side's rows in no such pair, NULL-padded."""
        lt = left.append_column("_li", pa.array(np.arange(left.num_rows), pa.int64()))
        rt = right.append_column("_ri", pa.array(np.arange(right.num_rows), pa.int64()))
        pairs = lt.join(rt, self.left_keys, right_keys=self.right_keys, join_type="inner", coalesce_keys=False,
                        use_threads=False)
        pairs = pairs.filter(pa.array(matched(pairs, self.ranges)))
        parts = [pairs.select(self.names)]
        for side, rows, index in (("left", left, "_li"), ("right", right, "_ri")):
            if self.join_type in (side, "full"):
                alone = np.ones(rows.num_rows, dtype=bool)
                alone[pairs[index].to_numpy()] = False
                other = (self.right if side == "left" else self.left).arrow_schema()
                padded = self._pad(with_weight(rows.filter(pa.array(alone)), 1), other)
                parts.append(padded.drop_columns([W]).cast(parts[0].schema))
        return pa.concat_tables(parts)

    def _pad(self, rows: pa.Table, other: pa.Schema) -> pa.Table:
        """A preserved side's rows with NULLs for the other side's columns."""
        nulls = pa.table({f.name: pa.nulls(rows.num_rows, f.type) for f in other})
        cols = {**{c: rows[c] for c in rows.column_names if c != W}, **{c: nulls[c] for c in nulls.column_names}}
        return pa.table({**{n: cols[n] for n in self.names}, W: rows[W]})

    # --- per big epoch -------------------------------------------------------------------------
    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        """`apply` as Spark frames: the state lookups are joins with the sides' state snapshots,
        bounded by the range of the change's first join key (`FrameIO.state_rows`)."""
        assert not root, "BUG: a join's output reaches the MV through a projection"
        dl, dr = self.left.delta_frame(io), self.right.delta_frame(io)
        if dl is None and dr is None:
            return None
        lk, rk = self.left_keys, self.right_keys
        padded: list[DataFrame] = []
        staging = self._cleaning_frames(io)
        dl = self._side_change(staging, dl, "left", padded)
        dr = self._side_change(staging, dr, "right", padded)
        finish_cleaning_all(staging)
        if self.join_type == "inner" and not self.per_key:  # each side's change meets the other's rows of its keys
            parts = [self._weighted_frame(dl, weighted(self._state_frame(io, "right", (dl, lk[0], rk[0])), 1))] \
                if dl is not None else []
            if dr is not None:
                parts.append(self._weighted_frame(weighted(self._state_frame(io, "left", (dr, rk[0], lk[0])), 1), dr))
            if dl is not None and dr is not None:
                parts.append(self._weighted_frame(dl, dr))
            return net_frame(union_all(parts))
        touched = [d.select(*[q(k).alias(f"_k{i}") for i, k in enumerate(keys)])
                   for d, keys in ((dl, lk), (dr, rk)) if d is not None]
        keys = io.shared(union_all(touched).distinct())
        l_old = io.shared(semi(self._state_frame(io, "left", (keys, "_k0", lk[0])), keys.toDF(*lk), lk))
        r_old = io.shared(semi(self._state_frame(io, "right", (keys, "_k0", rk[0])), keys.toDF(*rk), rk))
        l_new = l_old if dl is None else apply_frame(l_old, dl)
        r_new = r_old if dr is None else apply_frame(r_old, dr)
        return net_frame(union_all([weighted(self._join_frames(l_old, r_old), -1),
                                    weighted(self._join_frames(l_new, r_new), 1), *padded]))

    def _cleaning_frames(self, io: FrameIO) -> FrameIO:
        """`io` staging each cleaned side without its rows below its threshold, and their deletion."""
        for side, (column, value) in self._cleaned_sides(io.watermarks).items():
            io = CleaningFrameIO(io, column, self.type_of(column), value,  # type: ignore[assignment]
                                 [self._state(side)])
        return io

    def _state_frame(self, io: FrameIO, side: Side, near: tuple[DataFrame, str, str]) -> DataFrame:
        """A side's rows as of `prev` near a change's keys (`FrameIO.state_rows`)."""
        return self.side(side).frame(io, near)

    def _side_change(self, io: FrameIO, d: DataFrame | None, side: Side, padded: list[DataFrame]) -> DataFrame | None:
        """A side's change (persisted), its rows with a NULL join key padded into `padded` if the
        side is preserved, and the rest, which its state stages and the join matches."""
        if d is None:
            return None
        d = io.shared(d)
        keys = self._side_and_keys(side)[1]
        if self.join_type in (side, "full"):  # a preserved side
            padded.append(self._pad_frame(d.where(_any_null(keys)), self.right if side == "left" else self.left))
        d = matchable(d, keys)
        self.side(side).stage_frame(io, d)
        return d

    def _weighted_frame(self, left: DataFrame, right: DataFrame) -> DataFrame:
        """The inner join of two Z-set frames, each output row weighing its input rows' product."""
        a, b = left.withColumnRenamed(W, "_wl"), right.withColumnRenamed(W, "_wr")
        return a.join(b, self._on(a, b), "inner").select(*[q(n) for n in self.names],
                                                         (F.col("_wl") * F.col("_wr")).alias(W))

    def _join_frames(self, left: DataFrame, right: DataFrame) -> DataFrame:
        on = self._on(left, right)
        if self.ranges and (ranged := condition(self.ranges, dict(self.columns))) is not None:
            on = on & ranged
        return left.join(right, on, _SPARK_JOIN[self.join_type]).select(*[q(n) for n in self.names])

    def _on(self, left: DataFrame, right: DataFrame) -> SparkColumn:
        cond: SparkColumn | None = None
        for a, b in zip(self.left_keys, self.right_keys, strict=True):
            c = left[f"`{a}`"] == right[f"`{b}`"]
            cond = c if cond is None else cond & c
        assert cond is not None, "BUG: a join without keys"
        return cond

    def _pad_frame(self, rows: DataFrame, other: Operator) -> DataFrame:
        """A preserved side's rows with NULLs for the other side's columns."""
        nulls = {n: F.lit(None).cast(SqlType(t).spark) for n, t in other.columns}
        return rows.select(*[nulls[n].alias(n) if n in nulls else q(n) for n in self.names], W)

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        return self._join_frames(self._side(io, "left"), self._side(io, "right"))

    def _side(self, io: SnapshotIO, side: Side) -> DataFrame:
        """A side's rows, and its state's (`JoinSide.gather`). A side handed over by an earlier chunk
        (its state as written then: only matchable rows, which is all a side the join does not
        preserve needs; a borrowed side's aggregate's partials) is neither evaluated nor written again."""
        op, keys = self._side_and_keys(side)
        kept = self.side(side)
        if (stored := io.plan.sides.get(kept.state)) is not None:
            return kept.handed(stored, keys)
        rows = io.once(op)
        if not kept.links_table and self.side(_OTHER[side]).links_table:
            io.size_first(op, rows)
        kept.gather(io, rows, keys)
        # a chunked build hands this state on to its later chunks, whose rows must meet all of it: the
        # first step after the build cleans it instead
        chunked = io.plan.driving is not None
        if not chunked and (cleaned := self._cleaned_sides(io.watermarks).get(side)) is not None \
                and kept.state in io.state_rows:
            column, value = cleaned
            io.state_rows[kept.state] = at_or_above(io.state_rows[kept.state], column, self.type_of(column), value)
        return rows


def finish_cleaning_all(io: object) -> None:
    """Stage the deletions of every cleaned side the epoch did not stage (a chain of cleaning wrappers)."""
    while isinstance(io, CleaningStates | CleaningFrameIO):
        io.finish()
        io = io.inner if isinstance(io, CleaningStates) else io._inner


def _any_null(keys: list[str]) -> SparkColumn:
    """One flat call over the keys, not an OR each: Spark's tree walks recurse on an expression's depth."""
    return F.array_contains(F.array(*[q(k).isNull() for k in keys]), True)


def _has_null_key(t: pa.Table, keys: list[str]) -> pa.ChunkedArray:
    mask = pc.is_null(t[keys[0]])
    for k in keys[1:]:
        mask = pc.or_(mask, pc.is_null(t[k]))
    return mask
