"""The projection: Spark SQL expressions over its input's columns, after an optional predicate. It
keeps no state: each output row follows from one input row with the same weight.

Over a scan (or projections over one) it extends the scan's DataFrame, so the chain is one Spark
job per epoch. Over a join or an aggregate its input is an Arrow Z-set on the driver: a pure rename
stays in Arrow; anything else, and the MV's root (its `_vnode`), is evaluated in Arrow too where
its expressions compile (`stream/arrow_chain.py`), else goes through Spark. A small change of a
chain over a scan is evaluated in Arrow the same way (`arrow_delta`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from sparkwave.core.local_frames import local_frame
from sparkwave.core.zset import W
from sparkwave.stream import arrow_chain
from sparkwave.stream.expressions import Expr, column_ref, expr_or_none, exprs_of, references
from sparkwave.stream.operator import (
    VNODE,
    WEIGHT,
    EpochIO,
    FrameIO,
    Fused,
    Operator,
    SnapshotIO,
    collect,
    exprs_json,
    select_items,
)
from sparkwave.stream.share import Share


@dataclass(kw_only=True)
class Project(Operator):
    op = "project"

    input: Operator
    exprs: list[tuple[str, Expr]]  # (column, Spark SQL over the input's columns), in output order
    predicate: Expr | None = None  # over the input's columns

    def __post_init__(self) -> None:  # text written by hand (tests, templates) is an `Expr` too
        self.exprs = exprs_of(self.exprs)
        self.predicate = expr_or_none(self.predicate)

    @property
    def inputs(self) -> list[Operator]:
        return [self.input]

    def _fields_json(self) -> dict[str, Any]:
        return exprs_json(self.exprs, self.predicate)

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Project:
        (child,) = inputs
        return Project(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), input=child,
                       exprs=exprs_of(d.get("exprs", [])), predicate=expr_or_none(d.get("predicate")))

    def prune(self, needed: set[str]) -> None:
        keep = needed | set(self.key)
        self.exprs = [(n, e) for n, e in self.exprs if n in keep]
        self.columns = [(n, t) for n, t in self.columns if n in keep]
        self.input.prune(references(self.predicate, *[e for _, e in self.exprs]))

    @property
    def is_rename(self) -> bool:
        """Every column is an input column as it is (and nothing is filtered)."""
        return self.predicate is None and all(column_ref(e) is not None for _, e in self.exprs)

    def select(self, rows: DataFrame, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame:
        """The predicate and the expressions over the input's rows, keeping the columns `keep` (and
        adding the key's `_vnode`)."""
        if self.predicate:
            rows = rows.where(self.predicate)
        return rows.selectExpr(*select_items(self.exprs, self.key, keep, vnode))

    # --- per epoch -----------------------------------------------------------------------------
    def frame(self, io: EpochIO, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame | None:
        child = self.input.frame(io, keep)
        return None if child is None else self.select(child, (W, *keep), vnode=vnode)

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        if self.stateless:
            return self._collected(io, root)
        child = self.input.delta(io)
        if child is None or child.num_rows == 0:
            return None
        return self.apply(child, None if self.is_rename and not root else io.spark, root=root)

    def arrow_delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        if not self.stateless:
            return None
        child = self.input.arrow_delta(io)
        return None if child is None else arrow_chain.evaluate(lambda: self._arrow(child, root))

    def _arrow(self, child: pa.Table, root: bool) -> pa.Table | None:
        """The projection of an Arrow Z-set `| input columns | _w |` in Arrow, None where it does not compile.
        The input is read in its declared types first, as Spark's local frame of it is."""
        child = child.select([*self.input.names, W]).cast(self.input.arrow_schema(WEIGHT))
        types = arrow_chain.input_types(child.schema)
        types.pop(W, None)
        step = arrow_chain.compiled(self.arrow_steps, tuple(types.items()), lambda: arrow_chain.compile_step(
            self.exprs, self.predicate, self.columns, types, self.key, filter_first=True))
        return None if step is None else arrow_chain.run_step(step, child, root=root)

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        if self.stateless:
            return self.frame(io, vnode=root)
        child = self.input.delta_frame(io)
        return None if child is None else self.select(child, (W,), vnode=root)

    def apply(self, child: pa.Table, spark: SparkSession | None = None, *, root: bool = False) -> pa.Table:
        """The projection of an Arrow Z-set of the input (`| columns | _w |`): a rename below the root,
        or expressions that compile for Arrow, without Spark."""
        if not root and self.is_rename:
            names = [e[1:-1] for _, e in self.exprs]
            return child.select([*names, W]).rename_columns([*self.names, W]).cast(self.arrow_schema(WEIGHT))
        rows = arrow_chain.evaluate(lambda: self._arrow(child, root))
        if rows is not None:
            return rows
        assert spark is not None, f"BUG: projection {self.id} computes expressions: it needs Spark"
        df = local_frame(spark, child.drop_columns([W]).append_column(W, child[W]),
                         f"{self.input.spark_ddl()}, `{W}` bigint")
        return collect(self.select(df, (W,), vnode=root), self.arrow_schema(WEIGHT, *([VNODE] if root else [])))

    def fused(self, below: Fused, prefix: str) -> Fused:
        """The projection inside the job that reads its chain's upstream (`Scan.fused`): its
        predicate, then its expressions, over `below`'s columns."""
        return below.filtered(self.predicate, prefix).computed(self.exprs, prefix)

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        return self.select(self.input.batch(io))


def renames_below(op: Operator) -> tuple[Operator, dict[str, str]]:
    """The first operator under `op` that is neither a share nor a renaming projection, and the
    name each of `op`'s columns has there."""
    names = {n: n for n in op.names}
    while isinstance(op, Share) or (isinstance(op, Project) and op.is_rename):
        if isinstance(op, Project):
            refs = {n: column_ref(e) or "" for n, e in op.exprs}
            names = {s: refs[c] for s, c in names.items()}
        op = op.inputs[0]
    return op, names
