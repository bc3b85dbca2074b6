"""The projection: Spark SQL expressions over its input's columns, after an optional predicate. It
keeps no state: each output row follows from one input row with the same weight.

Over a scan (or projections over one) it extends the scan's DataFrame, so the chain is one Spark
job per epoch. Over a join or an aggregate its input is an Arrow Z-set on the driver: a pure rename
stays in Arrow; anything else, and the MV's root (whose `_vnode` Spark computes), goes through Spark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from sparkwave.core.local_frames import local_frame
from sparkwave.core.zset import W
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

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        if self.stateless:
            return self.frame(io, vnode=root)
        child = self.input.delta_frame(io)
        return None if child is None else self.select(child, (W,), vnode=root)

    def apply(self, child: pa.Table, spark: SparkSession | None = None, *, root: bool = False) -> pa.Table:
        """The projection of an Arrow Z-set of the input (`| columns | _w |`). Only a rename below the
        root runs without Spark."""
        if not root and self.is_rename:
            names = [e[1:-1] for _, e in self.exprs]
            return child.select([*names, W]).rename_columns([*self.names, W]).cast(self.arrow_schema(WEIGHT))
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
