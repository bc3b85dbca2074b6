"""The project set: set-returning functions (`generate_series`, `unnest`) over each input row, as
RisingWave's ProjectSet. Each input row becomes 0..n output rows: n is the longest of its sets (the
functions of one SELECT list run in lockstep, a shorter one giving NULL, as in PostgreSQL 10+), and
each output row carries its position in the row's series, `ordinal` (0-based, RisingWave's
`projected_row_id`). It keeps no state: the rows of an input row follow from that row alone, so a
deleted input row retracts exactly the rows it made.

Every output column that is not a set or the ordinal is the input column of the same name (the
planner's internal names are unique), and the key is the input's key and the ordinal. Each set is a
call, `generate_series(a, b, step)` (its arguments already of one type) or `unnest(e1, e2, ...)`
(the elements of `ARRAY[e1, e2, ...]`), over the input's columns, made a Spark array here
(`array_sql`); arrays are not a column type, so they live only inside this operator's evaluation.

Per epoch a chain over a scan is one Spark frame (`frame`); over a join or an aggregate, and for a
small change of a chain, the input's Arrow Z-set is exploded on the driver (`delta`, `arrow_delta`):
in Arrow where the arguments compile and the series are integers (`stream/project_set_arrow.py`),
else by the Spark `explode` over a local relation. A big epoch explodes the input's frame
(`delta_frame`), a snapshot build the input's build (`batch`). tests/integration/test_project_set.py
checks the three agree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from sparkwave.core.chunk import vnode_sql
from sparkwave.core.local_frames import local_frame
from sparkwave.core.zset import W
from sparkwave.stream import arrow_chain, project_set_arrow
from sparkwave.stream.expressions import Expr, references
from sparkwave.stream.operator import WEIGHT, EpochIO, FrameIO, Operator, SnapshotIO, collect

MAX_SERIES_ROWS = 10_000_000  # elements of one input row's generate_series
SetCall = tuple[str, str, list[Expr]]


def exprs_of_text(args: list[str] | list[Expr]) -> list[Expr]:
    return [Expr.of_text(a) for a in args]


@dataclass(kw_only=True)
class ProjectSet(Operator):
    op = "project_set"

    input: Operator
    sets: list[SetCall]  # (column, "generate_series" | "unnest", Spark SQL arguments over the input's columns)
    ordinal: str  # the column of each output row's 0-based position in its input row's series

    def __post_init__(self) -> None:
        self.sets = [(n, fn, exprs_of_text(args)) for n, fn, args in self.sets]
        assert all(fn in ("generate_series", "unnest") for _, fn, _ in self.sets), "BUG: an unknown set function"
        assert self.ordinal in self.key, "BUG: a project set's key holds its ordinal"

    @property
    def inputs(self) -> list[Operator]:
        return [self.input]

    @property
    def passed(self) -> list[str]:
        """The output columns that are the input's columns as they are."""
        made = {n for n, _, _ in self.sets} | {self.ordinal}
        return [n for n in self.names if n not in made]

    def _fields_json(self) -> dict[str, Any]:
        return {"sets": [[n, fn, list(args)] for n, fn, args in self.sets], "ordinal": self.ordinal}

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> ProjectSet:
        (child,) = inputs
        return ProjectSet(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), input=child,
                          sets=[(n, fn, exprs_of_text(args)) for n, fn, args in d["sets"]], ordinal=d["ordinal"])

    def prune(self, needed: set[str]) -> None:
        # every set stays: the longest one decides how many rows an input row makes
        made = {n for n, _, _ in self.sets} | {self.ordinal}
        keep = needed | set(self.key) | made
        self.columns = [(n, t) for n, t in self.columns if n in keep]
        self.input.prune(set(self.passed) | references(*[a for _, _, args in self.sets for a in args]))

    def array_sql(self, i: int) -> str:
        """The i-th set's Spark array. A series is PostgreSQL's: empty where the step leads away from
        the end or an argument is NULL (where Spark's `sequence` fails), a step of 0 the row's error
        (PostgreSQL's "step size cannot equal zero"); a series of more than
        `MAX_SERIES_ROWS` elements fails its row too, so one row cannot take the JVM's memory."""
        name, fn, args = self.sets[i]
        if fn == "unnest":
            return f"array({', '.join(args)})"
        a, b, s = (f"({x})" for x in args)
        integers = self.type_of(name) in ("smallint", "int", "bigint")
        zero, grows = (f"{s} = 0", f"{s} > 0") if integers else (f"{a} + {s} = {a}", f"{a} + {s} > {a}")
        moves = f"({a} = {b} OR ({a} < {b}) = ({grows}))"
        whens = [f"WHEN {zero} THEN raise_error('step size cannot equal zero')"]
        if integers:
            longer = f"abs(CAST({b} AS decimal(20)) - {a}) / abs(CAST({s} AS decimal(20))) >= {MAX_SERIES_ROWS}"
        else:
            longer = (f"abs(CAST(timestampdiff(MICROSECOND, {a}, {b}) AS decimal(20))) / "
                      f"abs(CAST(timestampdiff(MICROSECOND, {a}, {a} + {s}) AS decimal(20))) >= {MAX_SERIES_ROWS}")
        whens.append(f"WHEN {moves} AND {longer} THEN raise_error('generate_series() would make more than "
                     f"{MAX_SERIES_ROWS} rows from one row')")
        return f"CASE {' '.join(whens)} WHEN {moves} THEN sequence({a}, {b}, {s}) END"

    # --- in Spark (and in Arrow on the driver: `_local`) -----------------------------------------
    def explode(self, rows: DataFrame, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame:
        """Each row of `rows` (the input's columns and `keep`) as its series' rows, in this
        operator's columns and then `keep` (and the key's `_vnode`)."""
        held = [f"`{n}`" for n in dict.fromkeys([*self.passed, *keep])]
        arrays = [f"_ps{self.id}_{i}" for i in range(len(self.sets))]
        at = f"`_ps{self.id}_at`"
        count = ", ".join(f"coalesce(size(`{a}`), 0)" for a in arrays)
        rows = rows.selectExpr(*held, *[f"{self.array_sql(i)} AS `{a}`" for i, a in enumerate(arrays)])
        rows = rows.selectExpr(*held, *[f"`{a}`" for a in arrays],
                               f"posexplode(array_repeat(0, greatest(0, {count}))) AS ({at}, `_ps{self.id}`)")
        by_name = {n: f"try_element_at(`{a}`, {at} + 1)" for a, (n, _, _) in zip(arrays, self.sets, strict=True)}
        by_name[self.ordinal] = f"CAST({at} AS bigint)"
        items = [f"{by_name[n]} AS `{n}`" if n in by_name else f"`{n}`" for n in self.names]
        items += [f"`{k}`" for k in keep if k not in self.names]
        if vnode:
            items.append(vnode_sql([by_name.get(k, f"`{k}`") for k in self.key]))
        return rows.selectExpr(*items)

    def _local(self, io: EpochIO, child: pa.Table | None) -> pa.Table | None:
        """An Arrow Z-set of the input exploded on the driver: in Arrow (`stream/project_set_arrow.py`),
        else by Spark over a local relation (no rows: an empty Z-set, so a chain's `arrow_delta` is not
        taken for "not evaluated")."""
        if child is None:
            return None
        if child.num_rows == 0:
            return self.arrow_schema(WEIGHT).empty_table()
        rows = arrow_chain.evaluate(lambda: project_set_arrow.explode(self, child, MAX_SERIES_ROWS))
        if rows is not None:
            return rows
        child = child.select([*self.input.names, W]).cast(self.input.arrow_schema(WEIGHT))
        df = local_frame(io.spark, child, f"{self.input.spark_ddl()}, `{W}` bigint")
        return collect(self.explode(df, (W,)), self.arrow_schema(WEIGHT))

    # --- per epoch -----------------------------------------------------------------------------
    def frame(self, io: EpochIO, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame | None:
        child = self.input.frame(io, keep)
        return None if child is None else self.explode(child, (W, *keep), vnode=vnode)

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: a project set's output reaches the MV through a projection"
        if self.stateless:
            return self._collected(io, root)
        child = self.input.delta(io)
        return None if child is None or child.num_rows == 0 else self._local(io, child)

    def arrow_delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        if not self.stateless or root:
            return None
        child = self.input.arrow_delta(io)
        return None if child is None else self._local(io, child)

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        if self.stateless:
            return self.frame(io, vnode=root)
        child = self.input.delta_frame(io)
        return None if child is None else self.explode(child, (W,), vnode=root)

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        return self.explode(self.input.batch(io))
