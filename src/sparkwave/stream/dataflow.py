"""Running an MV's operator tree (`stream/plan.py`), per epoch and from a snapshot.

**Per epoch** (`Dataflow.step`): the root's `delta` walks the tree. The changed upstreams' log rows
go through their scans and the projections above them as one Spark DataFrame (window, filter,
expressions; one Spark job per changed scan), collected as Z-sets; joins and aggregates run on the
driver in Arrow against their state tables (the epoch's change is small, and an Arrow lookup costs
no Spark job); projections above them go back to Spark only when they compute something. The
root's change is netted per MV key into the MV's log rows (`Materialize`). A stateless tree (scans
and projections) runs whole in Spark, and `Dataflow.log_slice` computes its log rows for many
epochs in one job.

**From a snapshot** (`Dataflow.build`): the same tree as Spark DataFrames over the upstreams'
snapshots at one epoch gives the MV's rows and every state table's rows, for a backfill. A frame
that feeds more than one table is persisted, so writing every table evaluates each subtree once;
`release()` frees it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.catalog import Relation
from sparkwave.storage.state import StateIO, state_name
from sparkwave.storage.store import Store
from sparkwave.stream.materialize import Materialize
from sparkwave.stream.operator import VNODE, WEIGHT, EpochIO, SnapshotIO, collect
from sparkwave.stream.plan import from_json, state_schemas


class Dataflow:
    def __init__(self, rt: Store, rel: Relation) -> None:
        self.rt = rt
        self.rel = rel
        self.root = from_json(rel.definition["dataflow"])
        self.materialize = Materialize(self.root.key, [(m, i) for m, i in rel.definition["outputs"]], rel.schema)
        self._builds: list[SnapshotIO] = []

    def step(self, epoch: int, prev: int, inputs: dict[str, list[str]]) -> tuple[pa.Table | None, dict[str, pa.Table]]:
        """The MV's log rows for `epoch` from its upstreams' log files of that epoch (`inputs`), with
        state as of `prev`; state changes are staged. Returns (MV rows, staged state rows by table)."""
        states = StateIO(self.rt, self.rel.name, prev, epoch)
        d = self.root.delta(EpochIO(self.rt, inputs, states), root=True)
        if d is None or d.num_rows == 0:
            return None, states.staged
        return self.materialize.log_rows(d, epoch), states.staged

    def log_slice(self, inputs: dict[str, list[str]], epochs: list[int]) -> dict[int, pa.Table]:
        """A stateless tree's log rows per epoch, from its upstream's log files of those epochs: one
        Spark job for the whole slice, netted per epoch on the driver."""
        assert self.root.stateless, "BUG: a stateful tree's epochs depend on each other's state"
        frame = self.root.frame(EpochIO(self.rt, inputs), keep=("_epoch",), vnode=True)
        if frame is None:
            return {}
        chunk = collect(frame, self.root.arrow_schema(WEIGHT, VNODE, pa.field("_epoch", pa.int64())))
        out: dict[int, pa.Table] = {}
        for e in epochs:
            d = chunk.filter(pc.equal(chunk["_epoch"], e)).drop_columns(["_epoch"])
            rows = self.materialize.log_rows(d, e) if d.num_rows else None
            if rows is not None and rows.num_rows:
                out[e] = rows
        return out

    def build(self, epoch: int, vnodes: tuple[int, int] | None = None) -> dict[str, DataFrame]:
        """Every table of the MV (its own rows, then each state table) as `| _vnode | columns |`
        DataFrames over the upstreams' snapshots at `epoch`; with `vnodes`, only the upstream rows
        of those vnodes (a stateless tree's chunk: each MV row comes from one upstream row)."""
        assert vnodes is None or self.root.stateless, "BUG: a stateful tree needs whole snapshots"
        io = SnapshotIO(self.rt, epoch, vnodes)
        self._builds.append(io)
        out = {self.rel.name: self.materialize.rows(self.root.batch(io))}
        for suffix, schema in state_schemas(self.root).items():
            out[state_name(self.rel.name, suffix)] = io.state_rows[suffix].select(
                F.lit(0).cast("smallint").alias("_vnode"),
                *[F.col(f"`{c.name}`").cast(c.type.spark).alias(c.name) for c in schema.columns])
        return out

    def release(self) -> None:
        """Free what `build` persisted, once its tables are written."""
        for io in self._builds:
            io.release()
        self._builds.clear()
