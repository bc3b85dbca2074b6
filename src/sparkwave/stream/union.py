"""The union: `UNION ALL` of any number of inputs, each input's Z-set passed through as it is. It
keeps no state: each output row is one input row with the same weight.

The planner gives every input the same columns in the same types (a projection per branch casts
them to the type PostgreSQL's rules unify them to) plus a branch tag, the branch's ordinal, and
the branch's key columns (NULL on the other branches' rows, or a data column the branch passes on
as it is). The union's key is the tag and those columns: a row's key is unique because its
branch's key is, and the tag keeps equal rows of two branches apart, so the MV's key (which
`frontend/plan/keys.py` derives from the root's) holds two rows that are equal in every visible
column. `branches` names, per input, the input column that feeds each output column.

Per epoch a union of scans and projections stays one Spark frame (`frame`: the inputs' frames
unioned, one job), or is evaluated in Arrow where every changed input's chain is (`arrow_delta`);
over joins and aggregates the inputs' Arrow Z-sets are concatenated (`delta`); a big epoch unions
the inputs' frames (`delta_frame`); a snapshot build unions the inputs' builds (`batch`). In a
chunked backfill (`stream/chunking.py`) the branches that do not hold the driving scan (or, in a
stateless tree's chunks, constant rows) are read whole in the first chunk only, so the chunks add
up to the whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.chunk import vnode_sql
from sparkwave.core.schema import SqlType
from sparkwave.core.spark import empty_frame
from sparkwave.core.zset import W
from sparkwave.core.zset_frames import union_all
from sparkwave.stream.operator import WEIGHT, EpochIO, FrameIO, Operator, SnapshotIO


@dataclass(kw_only=True)
class Union(Operator):
    op = "union"

    parts: list[Operator]
    branches: list[list[str]]  # per input, its column feeding each output column, in output order

    def __post_init__(self) -> None:
        assert len(self.parts) == len(self.branches), "BUG: a union's inputs and branches differ in number"
        assert all(len(b) == len(self.columns) for b in self.branches), "BUG: a union branch misses columns"

    @property
    def inputs(self) -> list[Operator]:
        return list(self.parts)

    def _fields_json(self) -> dict[str, Any]:
        return {"branches": [list(b) for b in self.branches]}

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Union:
        return Union(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), parts=list(inputs),
                     branches=[list(b) for b in d["branches"]])

    def prune(self, needed: set[str]) -> None:
        keep = needed | set(self.key)
        at = [j for j, n in enumerate(self.names) if n in keep]
        self.columns = [self.columns[j] for j in at]
        self.branches = [[b[j] for j in at] for b in self.branches]
        for part, branch in zip(self.parts, self.branches, strict=True):
            part.prune(set(branch))

    # --- one input's rows as the union's ---------------------------------------------------------
    def _arrow(self, i: int, rows: pa.Table) -> pa.Table:
        return rows.select([*self.branches[i], W]).rename_columns([*self.names, W]).cast(self.arrow_schema(WEIGHT))

    def _frame(self, i: int, rows: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
        cols = [F.col(f"`{b}`").cast(SqlType(t).spark).alias(n)
                for b, (n, t) in zip(self.branches[i], self.columns, strict=True)]
        return rows.select(*cols, *[F.col(f"`{k}`") for k in keep])

    def _concat(self, parts: list[pa.Table]) -> pa.Table | None:
        parts = [p for p in parts if p.num_rows]
        return pa.concat_tables(parts) if parts else None

    # --- per epoch -----------------------------------------------------------------------------
    def frame(self, io: EpochIO, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame | None:
        frames = [self._frame(i, f, (W, *keep)) for i, part in enumerate(self.parts)
                  if (f := part.frame(io, keep)) is not None]
        if not frames:
            return None
        rows = union_all(frames)
        return rows.selectExpr("*", vnode_sql([f"`{k}`" for k in self.key])) if vnode else rows

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: a union's output reaches the MV through a projection"
        if self.stateless:
            return self._collected(io, root)
        return self._concat([self._arrow(i, d) for i, part in enumerate(self.parts)
                             if (d := part.delta(io)) is not None])

    def arrow_delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        """Every changed input's chain in Arrow (`Operator.arrow_delta`), or None: then one Spark
        frame evaluates them all."""
        if not self.stateless or root:
            return None
        parts = []
        for i, part in enumerate(self.parts):
            if not any(io.inputs.get(u) or u in io.changes for u in part.upstreams()):
                continue  # its upstreams did not change this epoch
            rows = part.arrow_delta(io)
            if rows is None:
                return None
            parts.append(self._arrow(i, rows))
        return self._concat(parts)

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        if self.stateless:
            return self.frame(io, vnode=root)
        frames = [self._frame(i, d, (W,)) for i, part in enumerate(self.parts)
                  if (d := part.delta_frame(io)) is not None]
        return union_all(frames) if frames else None

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        frames = [self._frame(i, part.batch(io)) for i, part in enumerate(self.parts) if self._builds(io, part)]
        return union_all(frames) if frames else empty_frame(io.spark, self.spark_ddl())

    @staticmethod
    def _builds(io: SnapshotIO, part: Operator) -> bool:
        """Whether this build evaluates the input `part`: in a chunked backfill, a branch without
        the driving scan is read whole by the first chunk alone (the chunks' outputs add up)."""
        plan = io.plan
        if plan.vnodes is None or plan.vnodes[0] == 0:
            return True
        if plan.driving is None:  # a stateless tree's chunk: every scan reads the chunk's vnodes
            return bool(part.upstreams())  # constant rows (VALUES) once, in the first chunk
        return any(o.id == plan.driving for o in part.walk())
