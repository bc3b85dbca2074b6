"""The aggregate operator: GROUP BY with count, sum, avg, min, max and count(DISTINCT), exact under
retractions, at a per-epoch cost that follows the groups an epoch touches.

State (`Aggregate.state_tables`):
- `a<id>`: per group, the row count and each aggregate's partial: a count; a sum with its count of
  non-null inputs (sum and avg); the current min / max; the number of distinct values.
- `a<id>v<n>`: per (group, value) of a min/max/count-distinct argument, how many input rows carry it.
  An aggregate over an append-only input (`append_only`: rows are only ever inserted) keeps none
  for min and max, which then only fold in new values (as RisingWave's append-only MIN/MAX).

Per epoch: the touched groups' partials are looked up, the epoch's weighted partials added, and the
value counts updated. A min or max is recomputed from the group's value counts only when a value
left the group entirely (the retracted value may have been the extreme); otherwise it folds in the
new values. The output is the retraction of each touched group's old row and its new row. A group
whose count reaches zero disappears (and reappears as new). A scalar aggregate (no GROUP BY) always
has its one row: count 0 and NULLs for an empty input (its group is a constant column, `0`).

From a snapshot, the partials are one Spark GROUP BY of the input (persisted: they are the state
table's rows and the output's source) and the value counts another. A chunked backfill computes
them per chunk and adds them up (`merge_partials`): counts and sums add, min and max fold, and
count(DISTINCT) counts the merged value counts."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.schema import Schema, SqlType
from sparkwave.core.zset import W, distinct, net, ns_join, with_weight
from sparkwave.core.zset_frames import net_frame, null_safe_on, q, semi, weighted
from sparkwave.stream.operator import EpochIO, FrameIO, Operator, SnapshotIO, States, state_schema
from sparkwave.stream.watermark_clean import Cleaning, cleaning_frame_io, cleaning_states, finish_cleaning

AGG_FUNCTIONS = ("count_star", "count", "sum", "avg", "min", "max", "count_distinct")
_PARTIALS = re.compile(r"a(\d+)")
_VALUES = re.compile(r"a(\d+)v\d+")


@dataclass
class Agg:
    fn: str  # one of AGG_FUNCTIONS
    arg: str | None  # input column (None for count_star)
    out: str  # output column
    type: str  # output SQL type

    def to_json(self) -> dict:
        return {"fn": self.fn, "arg": self.arg, "out": self.out, "type": self.type}

    @staticmethod
    def from_json(d: dict) -> Agg:
        return Agg(d["fn"], d["arg"], d["out"], d["type"])


def sum_type(arg_type: str) -> str:
    """The type sums of `arg_type` accumulate in (as DuckDB and PostgreSQL: exact for integers and
    decimals)."""
    if arg_type in ("smallint", "int", "bigint"):
        return "bigint"
    if arg_type.startswith("decimal"):
        return f"decimal(38,{arg_type.split(',')[1]}"
    return "double"


@dataclass(kw_only=True)
class Aggregate(Operator):
    op = "agg"
    keeps_state = True
    output_persisted = True  # its partials

    input: Operator
    group: list[str]  # the output's first columns and its key
    aggs: list[Agg]
    scalar: bool = False  # no GROUP BY: always one row
    append_only: bool = False  # its input never retracts a row: min and max keep no value counts
    cleaning: Cleaning | None = None  # a group column's watermark deletes its state below it (`watermark_clean.py`)

    @property
    def inputs(self) -> list[Operator]:
        return [self.input]

    def _fields_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.group:
            d["group"] = self.group
        if self.aggs:
            d["aggs"] = [a.to_json() for a in self.aggs]
        if self.scalar:
            d["scalar"] = True
        if self.append_only:
            d["append_only"] = True
        if self.cleaning is not None:
            d["cleaning"] = self.cleaning.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Aggregate:
        (child,) = inputs
        return Aggregate(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), input=child,
                         group=list(d.get("group", [])), aggs=[Agg.from_json(a) for a in d.get("aggs", [])],
                         scalar=d.get("scalar", False), append_only=d.get("append_only", False),
                         cleaning=Cleaning.from_json(d.get("cleaning")))

    def prune(self, needed: set[str]) -> None:
        """Every group column and aggregate stays (the partials state holds them all)."""
        self.input.prune(set(self.group) | {a.arg for a in self.aggs if a.arg})

    # --- state ---------------------------------------------------------------------------------
    @property
    def partials_state(self) -> str:
        return f"a{self.id}"

    def values_state(self, j: int) -> str:
        return f"a{self.id}v{j}"

    def value_args(self) -> list[str]:
        """The input columns whose values the aggregate counts per group (count distinct; min and
        max unless the input is append-only)."""
        counted = ("count_distinct",) if self.append_only else ("min", "max", "count_distinct")
        seen: list[str] = []
        for a in self.aggs:
            if a.fn in counted and a.arg and a.arg not in seen:
                seen.append(a.arg)
        return seen

    def partials(self) -> list[tuple[str, str]]:
        """The partials state's columns after the group: `_count` (rows per group) and per aggregate
        `p<i>` (its partial) and, for sum and avg, `n<i>` (non-null inputs)."""
        cols = [("_count", "bigint")]
        for i, a in enumerate(self.aggs):
            if a.fn == "count_star":
                continue
            arg_type = self.input.type_of(a.arg) if a.arg else "bigint"
            if a.fn in ("sum", "avg"):
                cols += [(f"p{i}", sum_type(arg_type)), (f"n{i}", "bigint")]
            elif a.fn in ("min", "max"):
                cols.append((f"p{i}", arg_type))
            else:
                cols.append((f"p{i}", "bigint"))
        return cols

    def state_tables(self) -> dict[str, Schema]:
        gcols = [(g, self.input.type_of(g)) for g in self.group]
        out = {self.partials_state: state_schema(gcols + self.partials(), self.group)}
        for j, arg in enumerate(self.value_args()):
            out[self.values_state(j)] = state_schema(gcols + [(arg, self.input.type_of(arg)), ("_count", "bigint")],
                                                     [*self.group, arg])
        return out

    @classmethod
    def state_purpose(cls, suffix: str, key: tuple[str, ...]) -> str | None:
        if m := _VALUES.fullmatch(suffix):
            return f"value counts of aggregate {m.group(1)} per ({', '.join(key)}), for min/max/count distinct"
        if m := _PARTIALS.fullmatch(suffix):
            return f"partial aggregates of aggregate {m.group(1)} per group ({', '.join(key)})"
        return None

    # --- per epoch -----------------------------------------------------------------------------
    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: an aggregate's output reaches the MV through a projection"
        if self.id in io.given:  # a snapshot build's, computed by Spark (`Dataflow`'s top)
            return io.given[self.id] if io.given[self.id].num_rows else None
        child = self.input.delta(io)
        if child is None or child.num_rows == 0:
            return None
        states = cleaning_states(self, self.cleaning, io.states, io.watermarks)
        out = self.apply(child, states)
        finish_cleaning(states)
        return out if out.num_rows else None

    def apply(self, d: pa.Table, states: States) -> pa.Table:
        """The aggregate's change from its input's change `d`, against and staging its state tables."""
        group = self.group
        sid = self.partials_state
        partials = self.partials()
        ptypes = dict(partials)
        w = d[W]
        pos = pc.greater(w, 0)
        assert not self.append_only or pc.all(pos).as_py(), \
            f"BUG: aggregate {self.id}'s append-only input retracted a row"
        keys = distinct(d, group)

        # The epoch's additive partials per group.
        cols: dict[str, pa.Array | pa.ChunkedArray] = {g: d[g] for g in group}
        cols["_count"] = w
        for i, a in enumerate(self.aggs):
            if a.fn == "count":
                cols[f"p{i}"] = pc.if_else(pc.is_valid(d[a.arg]), w, 0)
            elif a.fn in ("sum", "avg"):
                x = d[a.arg].cast(SqlType(ptypes[f"p{i}"]).arrow)
                cols[f"p{i}"] = pc.if_else(pos, x, pc.negate(x))
                cols[f"n{i}"] = pc.if_else(pc.is_valid(x), w, 0)
        additive = [c for c in cols if c not in group]

        old = states.lookup(sid, group, keys)
        delta = pa.table(cols).cast(pa.schema([*[old.schema.field(g) for g in group],
                                                *[pa.field(c, SqlType(ptypes[c]).arrow) for c in additive]]))
        both = pa.concat_tables([old.select([*group, *additive]), delta], promote_options="none")
        summed = _sum(both, group, additive)
        new = ns_join(keys, summed, group, "left outer")
        had = ns_join(keys, old.append_column("_had", pa.array([True] * old.num_rows, pa.bool_())), group,
                      "left outer")

        for j, arg in enumerate(self.value_args()):
            new, had = self._values(j, arg, d, states, new, had)
        if self.append_only:
            new = self._fold_extremes(d, new, had)

        new_count = pc.fill_null(new["_count"], 0)
        old_count = pc.fill_null(had["_count"], 0)
        had_state = pc.fill_null(had["_had"], False)
        # Stage the partials: the old row of every group that had one, the new row of every live group.
        state_cols = [*group, *[n for n, _ in partials]]
        old_rows = with_weight(had.filter(had_state).select(state_cols), -1)
        new_rows = with_weight(new.filter(pc.greater(new_count, 0)).select(state_cols), 1)
        states.stage(sid, pa.concat_tables([old_rows.cast(new_rows.schema), new_rows]))

        out_old, out_new = self.finalize_table(had), self.finalize_table(new)
        if self.scalar:
            olds, news = out_old, out_new
        else:
            olds, news = out_old.filter(pc.greater(old_count, 0)), out_new.filter(pc.greater(new_count, 0))
        return net(pa.concat_tables([with_weight(olds, -1), with_weight(news, 1)]))

    def _values(self, j: int, arg: str, d: pa.Table, states: States, new: pa.Table,
                had: pa.Table) -> tuple[pa.Table, pa.Table]:
        """Update the value counts of `arg` and fold them into min / max / count distinct."""
        group = self.group
        sid = self.values_state(j)
        by = [*group, arg]
        valid = d.filter(pc.is_valid(d[arg]))
        dc = _sum(valid.select([*by, W]), by, [W])
        old = states.lookup(sid, by, dc).rename_columns([*by, "_old"])
        pairs = ns_join(dc, old, by, "left outer")
        before = pc.fill_null(pairs["_old"], 0)
        after = pc.add(before, pairs[W])
        pairs = pairs.append_column("_new", after)
        states.stage(sid, pa.concat_tables([
            with_weight(pairs.filter(pc.greater(before, 0)).select(by).append_column(
                "_count", pc.fill_null(pairs["_old"], 0).filter(pc.greater(before, 0))), -1),
            with_weight(pairs.filter(pc.greater(after, 0)).select(by).append_column(
                "_count", after.filter(pc.greater(after, 0))), 1)]))

        gained = pc.and_(pc.equal(before, 0), pc.greater(after, 0))
        lost = pc.and_(pc.greater(before, 0), pc.equal(after, 0))
        change = pc.subtract(pc.cast(gained, pa.int64()), pc.cast(lost, pa.int64()))
        per_group = pa.table({**{g: pairs[g] for g in group}, "_dd": change, "_lost": pc.cast(lost, pa.int64())})
        per_group = _sum(per_group, group, ["_dd", "_lost"])
        live = pairs.filter(pc.greater(after, 0))
        ext = live.select(by).group_by(group, use_threads=False).aggregate([(arg, "min"), (arg, "max")]) \
            .rename_columns([*group, "_cmin", "_cmax"])
        per_group = ns_join(per_group, ext, group, "left outer")
        lost_groups = per_group.filter(pc.greater(per_group["_lost"], 0)).select(group)
        if lost_groups.num_rows:
            # A value left its group: recompute the group's extremes from all its value counts.
            full = states.lookup(sid, group, lost_groups).rename_columns([*by, W])
            mine = ns_join(dc, lost_groups, group, "left semi")
            stored = full.select([*by, W])
            counts = _sum(pa.concat_tables([stored, mine.select([*by, W]).cast(stored.schema)]), by, [W])
            counts = counts.filter(pc.greater(counts[W], 0))
            redo = counts.select(by).group_by(group, use_threads=False).aggregate([(arg, "min"), (arg, "max")]) \
                .rename_columns([*group, "_rmin", "_rmax"])
            redo = ns_join(lost_groups, redo, group, "left outer")
            redo = redo.append_column("_redo", pa.array([True] * redo.num_rows, pa.bool_()))
        else:
            atype = d.schema.field(arg).type
            redo = pa.table({**{g: pa.array([], new.schema.field(g).type) for g in group},
                             "_rmin": pa.array([], atype), "_rmax": pa.array([], atype),
                             "_redo": pa.array([], pa.bool_())})
        per_group = ns_join(per_group, redo, group, "left outer")
        mine = [(i, a) for i, a in enumerate(self.aggs) if a.arg == arg and a.fn in ("min", "max", "count_distinct")]
        olds = had.select([*group, *[f"p{i}" for i, _ in mine]]) \
            .rename_columns([*group, *[f"_o{i}" for i, _ in mine]])
        merged = ns_join(ns_join(new, olds, group, "left outer"), per_group, group, "left outer")
        redo_flag = pc.fill_null(merged["_redo"], False)
        for i, a in mine:
            o = merged[f"_o{i}"]
            if a.fn == "count_distinct":
                value = pc.add(pc.fill_null(o, 0), pc.fill_null(merged["_dd"], 0))
            elif a.fn == "min":
                value = pc.if_else(redo_flag, merged["_rmin"], _fold(o, merged["_cmin"], pc.less))
            else:
                value = pc.if_else(redo_flag, merged["_rmax"], _fold(o, merged["_cmax"], pc.greater))
            merged = merged.append_column(f"p{i}", value.cast(o.type))
        return merged.select([*new.column_names, *[f"p{i}" for i, _ in mine]]), had

    def _fold_extremes(self, d: pa.Table, new: pa.Table, had: pa.Table) -> pa.Table:
        """An append-only input's min and max: each group's old extreme folded with the epoch's."""
        group = self.group
        counted = self.value_args()  # (their extremes come from their value counts)
        mine = [(i, a) for i, a in enumerate(self.aggs) if a.fn in ("min", "max") and a.arg not in counted]
        if not mine:
            return new
        args = list(dict.fromkeys(a.arg for _, a in mine if a.arg))
        ext = pa.table({**{g: d[g] for g in group}, **{f"_x{k}": d[arg] for k, arg in enumerate(args)}}) \
            .group_by(group, use_threads=False).aggregate([(f"_x{k}", fn) for k in range(len(args))
                                                           for fn in ("min", "max")])
        olds = had.select([*group, *[f"p{i}" for i, _ in mine]]).rename_columns([*group, *[f"_o{i}" for i, _ in mine]])
        merged = ns_join(ns_join(new, olds, group, "left outer"), ext, group, "left outer")
        for i, a in mine:
            o = merged[f"_o{i}"]
            better = pc.less if a.fn == "min" else pc.greater
            epoch_extreme = merged[f"_x{args.index(a.arg or '')}_{a.fn}"]
            merged = merged.append_column(f"p{i}", _fold(o, epoch_extreme, better).cast(o.type))
        return merged.select([*new.column_names, *[f"p{i}" for i, _ in mine]])

    def finalize_table(self, p: pa.Table) -> pa.Table:
        """The aggregate's output rows (group, values) from partials; absent partials count as empty."""
        cols: dict[str, pa.ChunkedArray] = {g: p[g] for g in self.group}
        count = pc.fill_null(p["_count"], 0)
        for i, a in enumerate(self.aggs):
            t = SqlType(a.type).arrow
            if a.fn == "count_star":
                v = count
            elif a.fn in ("count", "count_distinct"):
                v = pc.fill_null(p[f"p{i}"], 0)
            elif a.fn == "sum":
                n = pc.fill_null(p[f"n{i}"], 0)
                v = pc.if_else(pc.greater(n, 0), p[f"p{i}"], pa.scalar(None, p[f"p{i}"].type))
            elif a.fn == "avg":
                n = pc.fill_null(p[f"n{i}"], 0)
                v = pc.if_else(pc.greater(n, 0), pc.divide(p[f"p{i}"].cast(pa.float64()), n.cast(pa.float64())),
                               pa.scalar(None, pa.float64()))
            else:
                v = p[f"p{i}"]
            cols[a.out] = v.cast(t)
        return pa.table(cols)

    # --- per big epoch -------------------------------------------------------------------------
    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        """`apply` as Spark frames: the touched groups' partials (and value counts) are joins of the
        touched groups with the state snapshots (bounded by the range of the first group column:
        `FrameIO.state_rows`); min, max and count(DISTINCT) over value counts are
        recomputed from each touched group's new value counts."""
        assert not root, "BUG: an aggregate's output reaches the MV through a projection"
        child = self.input.delta_frame(io)
        if child is None:
            return None
        d = io.shared(child)
        io = cleaning_frame_io(self, self.cleaning, io)
        group = self.group
        ptypes = dict(self.partials())
        keys = io.shared(d.select(*[q(g) for g in group]).distinct())
        w = F.col(W)
        parts: list[SparkColumn] = [F.sum(w).cast("bigint").alias("_count")]
        for i, a in enumerate(self.aggs):
            if a.fn == "count":
                parts.append(F.sum(F.when(q(a.arg or "").isNotNull(), w).otherwise(0)).cast("bigint").alias(f"p{i}"))
            elif a.fn in ("sum", "avg"):
                st = SqlType(ptypes[f"p{i}"]).spark
                x = q(a.arg or "").cast(st)
                parts += [F.sum(F.when(w > 0, x).otherwise(-x)).cast(st).alias(f"p{i}"),
                          F.sum(F.when(x.isNotNull(), w).otherwise(0)).cast("bigint").alias(f"n{i}")]
        delta = d.groupBy(*[q(g) for g in group]).agg(*parts)
        additive = delta.columns[len(group):]
        old = semi(io.state_rows(self.partials_state, self._near(keys)), keys, group)
        had = io.shared(_left(keys, old.withColumn("_had", F.lit(True)), group))
        new = had.where(F.col("_had")).select(*[q(g) for g in group], *additive).unionByName(delta) \
            .groupBy(*[q(g) for g in group]).agg(*[F.sum(c).cast(SqlType(ptypes[c]).spark).alias(c) for c in additive])
        for j, arg in enumerate(self.value_args()):
            new = _left(new, self._value_partials(io, j, arg, d, keys), group)
        if self.append_only:
            new = self._folded_extremes(d, new, had)
        distinct = {f"p{i}" for i, a in enumerate(self.aggs) if a.fn == "count_distinct"}  # 0, not NULL, as stored
        new = io.shared(new.select(*[q(g) for g in group], *[
            F.coalesce(F.col(c), F.lit(0)).cast("bigint").alias(c) if c in distinct else F.col(c)
            for c, _ in self.partials()]))

        state_cols = [*group, *[n for n, _ in self.partials()]]
        io.stage_frame(self.partials_state, weighted(had.where(F.col("_had")).select(*[q(c) for c in state_cols]), -1)
                       .unionByName(weighted(new.where(F.col("_count") > 0).select(*[q(c) for c in state_cols]), 1)))
        olds, news = had, new
        if not self.scalar:
            olds, news = had.where(F.col("_count") > 0), new.where(F.col("_count") > 0)
        finish_cleaning(io)
        return net_frame(weighted(olds.select(*self._outputs()), -1)
                         .unionByName(weighted(news.select(*self._outputs()), 1)))

    def _near(self, keys: DataFrame) -> tuple[DataFrame, str, str] | None:
        """What bounds a state lookup by the touched groups: the range of the first group column."""
        return (keys, self.group[0], self.group[0]) if self.group else None

    def _value_partials(self, io: FrameIO, j: int, arg: str, d: DataFrame, keys: DataFrame) -> DataFrame:
        """Stage the value counts of `arg` and return, per touched group, the min / max / count
        distinct partials over its new value counts."""
        by = [*self.group, arg]
        changes = d.where(q(arg).isNotNull()).groupBy(*[q(c) for c in by]).agg(F.sum(W).cast("bigint").alias("_count"))
        # read once, used twice
        old = io.shared(semi(io.state_rows(self.values_state(j), self._near(keys)), keys, self.group))
        new = io.shared(old.unionByName(changes).groupBy(*[q(c) for c in by])
                        .agg(F.sum("_count").cast("bigint").alias("_count")).where(F.col("_count") > 0))
        io.stage_frame(self.values_state(j), weighted(old, -1).unionByName(weighted(new, 1)))
        mine = [(i, a) for i, a in enumerate(self.aggs) if a.arg == arg and a.fn in ("min", "max", "count_distinct")]
        fns = {"min": F.min, "max": F.max, "count_distinct": F.count}
        return new.groupBy(*[q(g) for g in self.group]).agg(
            *[fns[a.fn](q(arg)).cast(SqlType(dict(self.partials())[f"p{i}"]).spark).alias(f"p{i}") for i, a in mine])

    def _folded_extremes(self, d: DataFrame, new: DataFrame, had: DataFrame) -> DataFrame:
        """An append-only input's min and max: each group's old extreme folded with the epoch's."""
        counted = self.value_args()
        mine = [(i, a) for i, a in enumerate(self.aggs) if a.fn in ("min", "max") and a.arg not in counted]
        if not mine:
            return new
        fns = {"min": F.min, "max": F.max}
        ext = d.groupBy(*[q(g) for g in self.group]).agg(*[fns[a.fn](q(a.arg or "")).alias(f"_x{i}") for i, a in mine])
        olds = had.select(*[q(g) for g in self.group], *[F.col(f"p{i}").alias(f"_o{i}") for i, _ in mine])
        merged = _left(_left(new, ext, self.group), olds, self.group)
        fold = {"min": F.least, "max": F.greatest}  # both skip NULLs
        return merged.select(*[q(c) for c in new.columns],
                             *[fold[a.fn](F.col(f"_o{i}"), F.col(f"_x{i}")).alias(f"p{i}") for i, a in mine])

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        if self.id in io.outputs:  # merged from a chunked backfill's partials
            return io.outputs[self.id]
        return self.finalize(self.partial_batch(io))

    def partial_batch(self, io: SnapshotIO) -> DataFrame:
        """The partials per group of the input's rows (persisted: they are the partials state's rows
        and the output's source), with the value counts put in `io.state_rows` too. The input is
        evaluated once for both only if it feeds value counts (q5's hop windows are 5x their input)."""
        child = io.once(self.input) if self.value_args() else self.input.batch(io)
        parts: list[SparkColumn] = [F.count(F.lit(1)).alias("_count")]
        for i, a in enumerate(self.aggs):
            if a.fn == "count_star":
                continue  # counted by `_count`
            assert a.arg, f"BUG: aggregate {a.fn} without an argument"
            arg = F.col(f"`{a.arg}`")
            if a.fn == "count":
                parts.append(F.count(arg).alias(f"p{i}"))
            elif a.fn in ("sum", "avg"):
                st = SqlType(sum_type(self.input.type_of(a.arg))).spark
                parts += [F.sum(arg.cast(st)).cast(st).alias(f"p{i}"), F.count(arg).alias(f"n{i}")]
            elif a.fn == "min":
                parts.append(F.min(arg).alias(f"p{i}"))
            elif a.fn == "max":
                parts.append(F.max(arg).alias(f"p{i}"))
            elif a.fn == "count_distinct":
                parts.append(F.countDistinct(arg).alias(f"p{i}"))
        group = [F.col(f"`{g}`") for g in self.group]
        partials = io.shared(child.groupBy(*group).agg(*parts))
        assert [c for c, _ in self.partials()] == partials.columns[len(group):], "BUG: partial columns"
        io.state_rows[self.partials_state] = partials
        for j, arg_name in enumerate(self.value_args()):
            io.state_rows[self.values_state(j)] = child.where(F.col(f"`{arg_name}`").isNotNull()) \
                .groupBy(*group, F.col(f"`{arg_name}`")).agg(F.count(F.lit(1)).alias("_count"))
        return partials

    def merge_partials(self, io: SnapshotIO, partials: DataFrame, values: list[DataFrame]) -> DataFrame:
        """The partials and value counts of a whole snapshot from those of its chunks (each chunk's
        rows of a group and value added up; count(DISTINCT) counts the merged values), put in
        `io.state_rows`; returns the aggregate's output from them."""
        group = [F.col(f"`{g}`") for g in self.group]
        ptypes = dict(self.partials())
        merged_values = []
        for j, (arg, v) in enumerate(zip(self.value_args(), values, strict=True)):
            merged_values.append(io.shared(v.groupBy(*group, F.col(f"`{arg}`"))
                                           .agg(F.sum("_count").cast("bigint").alias("_count"))))
            io.state_rows[self.values_state(j)] = merged_values[-1]
        parts: list[SparkColumn] = [F.sum("_count").cast("bigint").alias("_count")]
        distincts = []
        for i, a in enumerate(self.aggs):
            if a.fn == "count_star":
                continue
            p = F.col(f"p{i}")
            if a.fn in ("count", "sum", "avg"):
                parts.append(F.sum(p).cast(SqlType(ptypes[f"p{i}"]).spark).alias(f"p{i}"))
                if a.fn != "count":
                    parts.append(F.sum(f"n{i}").cast("bigint").alias(f"n{i}"))
            elif a.fn == "min":
                parts.append(F.min(p).alias(f"p{i}"))
            elif a.fn == "max":
                parts.append(F.max(p).alias(f"p{i}"))
            else:  # count_distinct: from the merged value counts
                parts.append(F.lit(0).cast("bigint").alias(f"p{i}"))
                distincts.append(i)
        out = partials.groupBy(*group).agg(*parts)
        for i in distincts:
            j = self.value_args().index(self.aggs[i].arg or "")
            n = merged_values[j].groupBy(*[F.col(f"`{g}`").alias(f"_g{k}") for k, g in enumerate(self.group)]) \
                .agg(F.count(F.lit(1)).cast("bigint").alias("_n"))
            on = [out[f"`{g}`"].eqNullSafe(n[f"_g{k}"]) for k, g in enumerate(self.group)]
            out = out.join(n, on, "left").select(
                *[F.coalesce(F.col("_n"), F.lit(0)).cast("bigint").alias(c) if c == f"p{i}" else F.col(f"`{c}`")
                  for c in out.columns])
        out = io.shared(out.select(*[f"`{g}`" for g in self.group], *[c for c, _ in self.partials()]))
        io.state_rows[self.partials_state] = out
        return self.finalize(out)

    def finalize(self, partials: DataFrame) -> DataFrame:
        """The aggregate's output rows from its partials (a scalar aggregate has its row regardless)."""
        if self.scalar:
            one = partials.sparkSession.range(1).select(F.lit(0).cast("bigint").alias(self.group[0]))
            partials = one.join(partials, self.group, "left")
        return partials.select(*self._outputs())

    def _outputs(self) -> list[SparkColumn]:
        """The output columns over a partials frame; absent partials (NULL) count as empty."""
        outs = [F.col(f"`{g}`") for g in self.group]
        for i, a in enumerate(self.aggs):
            t = SqlType(a.type).spark
            if a.fn == "count_star":
                v = F.coalesce(F.col("_count"), F.lit(0))
            elif a.fn in ("count", "count_distinct"):
                v = F.coalesce(F.col(f"p{i}"), F.lit(0))
            elif a.fn == "sum":
                v = F.when(F.col(f"n{i}") > 0, F.col(f"p{i}"))
            elif a.fn == "avg":
                v = F.when(F.col(f"n{i}") > 0, F.col(f"p{i}").cast("double") / F.col(f"n{i}").cast("double"))
            else:
                v = F.col(f"p{i}")
            outs.append(v.cast(t).alias(a.out))
        return outs


def _left(rows: DataFrame, other: DataFrame, group: list[str]) -> DataFrame:
    """`rows` left-joined with `other` on the group columns, NULL equal to NULL; `other`'s group
    columns dropped."""
    renamed = other.select(*[q(g).alias(f"_g{k}") for k, g in enumerate(group)],
                           *[q(c) for c in other.columns if c not in group])
    on = null_safe_on(rows, renamed, group, [f"_g{k}" for k in range(len(group))])
    return rows.join(renamed, on, "left").drop(*[f"_g{k}" for k in range(len(group))])


def _sum(t: pa.Table, group: list[str], cols: list[str]) -> pa.Table:
    g = t.group_by(group, use_threads=False).aggregate([(c, "sum") for c in cols])
    return g.rename_columns([c[:-4] if c.endswith("_sum") and c[:-4] in cols else c for c in g.column_names])


def _fold(current: pa.ChunkedArray, new: pa.ChunkedArray,
          better: Callable[[pa.ChunkedArray, pa.ChunkedArray], pa.ChunkedArray]) -> pa.ChunkedArray:
    """The element-wise min (`better=pc.less`) or max (`pc.greater`) of two columns, NULLs skipped.
    Comparisons have kernels for every column type; `min_element_wise` lacks boolean and
    timestamptz ones."""
    take_new = pc.or_(pc.is_null(current), pc.fill_null(better(new, current), False))
    return pc.if_else(take_new, new, current)


