"""The share: one operator's output read by more than one parent, so that a subplan a query spells
twice (Nexmark q5's two identical HOP counts) is evaluated once and keeps one set of state tables, as
RisingWave's `StreamShare`. The planner puts it in (`frontend/common_subplans.py`); the tree becomes
a DAG whose shared node is the same object under each parent.

It keeps no state of its own. Per epoch the first parent to ask evaluates the shared input and the
others get the same change (`EpochIO.shares`, `FrameIO.shared_frames`), so its state is staged once;
from a snapshot, the first evaluation is kept in `SnapshotIO.outputs`. The stored JSON repeats the
shared input under each reference; `stream/plan.py: from_json` decodes one object per share id."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from sparkwave.stream.operator import EpochIO, FrameIO, Operator, SnapshotIO


@dataclass(kw_only=True)
class Share(Operator):
    op = "share"

    input: Operator

    @property
    def inputs(self) -> list[Operator]:
        return [self.input]

    def _fields_json(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Share:
        (child,) = inputs
        return Share(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), input=child)

    def prune(self, needed: set[str]) -> None:
        """Nothing: the planner shares subplans after pruning, and the shared input keeps what every
        parent reads."""

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: a shared operator is under a parent, never the root"
        if self.id not in io.shares:
            io.shares[self.id] = self.input.delta(io)
        return io.shares[self.id]

    def frame(self, io: EpochIO, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame | None:
        """A shared scan-and-projection chain (the FROM of a GROUPING SETS query) is read by each
        parent's frame: it keeps no state to stage once."""
        return self.input.frame(io, keep, vnode=vnode)

    def arrow_delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        return self.input.arrow_delta(io, root=root) if self.stateless else None

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        assert not root, "BUG: a shared operator is under a parent, never the root"
        if self.id not in io.shared_frames:
            d = self.input.delta_frame(io)
            io.shared_frames[self.id] = None if d is None else io.shared(d)  # read by each parent: evaluated once
        return io.shared_frames[self.id]

    def batch(self, io: SnapshotIO) -> DataFrame:
        if self.id not in io.outputs:
            io.outputs[self.id] = io.once(self.input)
        return io.outputs[self.id]
