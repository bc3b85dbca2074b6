"""Running an MV's operator tree (`stream/plan.py`), per epoch and from a snapshot.

**Per epoch** (`Dataflow.step`): the root's `delta` walks the tree. The changed upstreams' log rows
go through their scans and the projections above them as one Spark DataFrame (window, filter,
expressions), collected as Z-sets: a small change is held by the driver and evaluated by Spark's
optimizer without a job (`core/local_frames.py`), a larger one is read from its file by one job;
a source's read computes them itself (`stream/fusion.py`).
Joins and aggregates run on the driver in Arrow against their state tables (the epoch's change is
small, and an Arrow lookup costs no Spark job); projections above them go back to Spark only when
they compute something. The root's change is netted per MV key into the MV's log rows
(`Materialize`). A big epoch runs whole on the executors instead (`step_frame`), so the driver's
memory does not grow with the change. A stateless tree (scans and projections) runs whole in Spark,
and `Dataflow.log_slice` computes its log rows for many epochs in one job.

**From a snapshot** (`Dataflow.build`): the same tree as Spark DataFrames over the upstreams'
snapshots at one epoch gives the MV's rows and every state table's rows, for a backfill. A frame
that feeds more than one table is persisted, so writing every table evaluates each subtree once;
`release()` frees it. What is above the tree's last aggregate (its `Top`: an average of per-group
maxima, say) is evaluated on the driver from that aggregate's output when the output is small, as
`build_local` evaluates a small snapshot. A large stateful backfill is built in chunks
(`stream/chunking.py`): `build_chunk` per vnode range of the driving scan, then `build_merge` adds
up an aggregate's partials and evaluates what is above it (its top, if it is the tree's). Each
build's `BuildPlan` is decided before it starts; which path runs for a size is `core/policy.py`'s."""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core import policy
from sparkwave.core.catalog import Relation
from sparkwave.core.chunk import Op
from sparkwave.core.schema import Schema
from sparkwave.core.spark import concurrently
from sparkwave.core.zset import with_weight
from sparkwave.storage.links import Linked, small_enough_to_link
from sparkwave.storage.snapshot import read_parquet
from sparkwave.storage.state import EmptyStateIO, StateIO, state_name
from sparkwave.storage.store import Store
from sparkwave.storage.table import StagedLog, base_arrow_schema, base_spark_ddl
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.chunking import PARTIAL, ChunkPlan
from sparkwave.stream.join import Join
from sparkwave.stream.materialize import Materialize
from sparkwave.stream.operator import (
    VNODE,
    WEIGHT,
    BuildPlan,
    EpochIO,
    FrameIO,
    HeldRows,
    Operator,
    SnapshotIO,
    collect,
)
from sparkwave.stream.plan import from_json, state_schemas
from sparkwave.stream.temporal_filter import TemporalFilter
from sparkwave.stream.temporal_join import TemporalJoin
from sparkwave.stream.values import Values
from sparkwave.stream.watermark_clean import clean_built

__all__ = ["Built", "Dataflow", "Top", "TopTable", "resolved", "top_of"]


class Dataflow:
    def __init__(self, rt: Store, rel: Relation) -> None:
        self.rt = rt
        self.rel = rel
        self.root = from_json(rel.definition["dataflow"])
        self.materialize = Materialize(self.root.key, [(m, i) for m, i in rel.definition["outputs"]], rel.schema)
        self._builds: list[SnapshotIO] = []
        self._watermarked: list[str] | None = None  # upstreams that declare a watermark, once known

    def step(self, epoch: int, prev: int, inputs: dict[str, list[str]],
             changes: Mapping[str, DataFrame | HeldRows] | None = None,
             fused: dict[int, pa.Table] | None = None, watermarks: Mapping[str, int] | None = None
             ) -> tuple[pa.Table | None, dict[str, pa.Table]]:
        """The MV's log rows for `epoch` from its upstreams' log files of that epoch (`inputs`; the
        same rows as local frames `changes` where the driver holds them; chains over a source as its
        read computed them, `fused`), with state as of `prev`; state changes are staged. Returns
        (MV rows, staged state rows by table)."""
        states = StateIO(self.rt, self.rel.name, prev, epoch)
        now, prev_now = self._times(epoch, prev)
        io = EpochIO(self.rt, inputs, states, changes or {}, fused=fused or {}, now=now, prev_now=prev_now,
                     watermarks=self.watermarks(epoch, watermarks), lookup_epoch=prev)
        d = self.root.delta(io, root=True)
        if d is None or d.num_rows == 0:
            return None, states.staged
        return self.materialize.log_rows(d, epoch), states.staged

    @property
    def ticks(self) -> bool:
        """Whether the tree reads the epoch's NOW() (a temporal filter): it steps every epoch, its
        upstreams changed or not, since time alone changes its output."""
        return any(isinstance(op, TemporalFilter) for op in self.root.walk())

    def _times(self, epoch: int, prev: int | None) -> tuple[int | None, int | None]:
        """The NOW() of `epoch` and of `prev` (None: from empty state) as recorded with their plans,
        for a tree that reads them (else None, None)."""
        if not self.ticks:
            return None, None
        return self.rt.catalog.epoch_now(epoch) or 0, None if not prev else self.rt.catalog.epoch_now(prev)

    @property
    def on_spark(self) -> bool:
        """Whether a big epoch can run on the executors (`step_frame`): every operator has a frame path."""
        return all(op.on_spark for op in self.root.walk())

    def watermarks(self, epoch: int, pending: Mapping[str, int] | None = None) -> dict[str, int | None]:
        """The watermarked upstreams' watermarks after `epoch`: the main graph's of the epoch running
        (`pending`, not committed yet), else the catalog's, committed with it (`stream/watermark.py`)."""
        if self._watermarked is None:
            self._watermarked = [u for u in self.rel.upstreams if "watermark" in self.rt.relation(u).definition]
        pending = pending or {}
        return {u: pending[u] if u in pending else self.rt.catalog.watermark(u, epoch) for u in self._watermarked}

    def step_frame(self, epoch: int, prev: int, inputs: dict[str, list[str]],
                   watermarks: Mapping[str, int] | None = None) -> tuple[StagedLog | None, dict[str, StagedLog]]:
        """`step` for a big epoch, on the executors: the tree's change as Spark frames, state
        lookups as joins with the state tables' snapshots as of `prev`, and the MV's and every state
        table's log file of `epoch` written by the executors. The driver holds no rows."""
        now, prev_now = self._times(epoch, prev)
        io = FrameIO(self.rt, inputs, owner=self.rel.name, prev=prev, epoch=epoch, now=now, prev_now=prev_now,
                     watermarks=self.watermarks(epoch, watermarks))
        try:
            d = self.root.delta_frame(io, root=True)
            logs = io.state_logs()
            if d is not None:
                logs[self.rel.name] = (self.rt.stored(self.rel), self.materialize.log_frame(d))
            names = list(logs)
            written = concurrently(self.rt.spark, [functools.partial(stored.stage_log_frame, epoch, rows)
                                                   for stored, rows in logs.values()])
            staged = {n: w for n, w in zip(names, written, strict=True) if w.num_rows}
            return staged.pop(self.rel.name, None), staged
        finally:
            io.release()

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

    def build(self, epoch: int, vnodes: tuple[int, int] | None = None, *,
              big_epoch_rows: int = policy.BIG_EPOCH_ROWS) -> dict[str, Built]:
        """Every table of the MV (its own rows, then each state table) as `| _vnode | columns |`
        DataFrames over the upstreams' snapshots at `epoch` (a state linked from a table's files as
        `Linked`; the tables above the tree's top aggregate as `TopTable`s, evaluated on the driver
        if that aggregate's output is small: `policy.top_on_driver`, `Top`); with `vnodes`, only the
        upstream rows of those vnodes (a stateless tree's chunk: each MV row comes from one upstream row)."""
        assert vnodes is None or self.root.stateless, "BUG: a stateful tree is chunked by build_chunk"
        io = self._io(epoch, big_epoch_rows, vnodes)
        top = top_of(self.root)
        if top is None:
            return self._tables(io, self.root.batch(io))
        io.outputs[top.id] = top.batch(io)  # Spark evaluates the tree up to the aggregate, once
        return self._with_top(io, top)

    @property
    def builds_locally(self) -> bool:
        """Whether `build_local` can build the tree: one whose rows all come from its upstreams'
        rows. Not one with a scalar aggregate (its row over nothing) or constant rows (`VALUES`):
        only a snapshot build makes those; per epoch they are in the state already."""
        return not any(isinstance(o, Values | TemporalJoin) or (isinstance(o, Aggregate) and o.scalar)
                       for o in self.root.walk())  # a temporal join reads its table as of the build's epoch

    def build_local(self, epoch: int) -> dict[str, pa.Table]:
        """`build` on the driver, for snapshots no bigger than one epoch's change (`big_epoch_rows`;
        like an epoch's, the rows a join or window expands them to are held too; a stateless tree's
        `policy.builds_stateless_on_driver`): the upstreams' snapshots at `epoch` as one epoch of
        inserts through the per-epoch path (`delta`: scans and projections in Arrow where they compile,
        joins and aggregates in Arrow) from empty state. No Spark build: a small backfill's cost was
        the fixed costs of its Spark jobs. Every table as `| _vnode | columns |`."""
        changes = {u: self._snapshot_inserts(self.rt.relation(u), epoch) for u in self.rel.upstreams}
        states = EmptyStateIO(self.rt, self.rel.name, prev=0, epoch=epoch, schemas=self._state_schemas)
        now, _ = self._times(epoch, None)
        return self._inserts(EpochIO(self.rt, {}, states, changes, now=now,
                                     watermarks=self.watermarks(epoch)), epoch,
                             list(self._state_schemas))

    def _snapshot_inserts(self, rel: Relation, epoch: int) -> DataFrame | HeldRows:
        """An upstream's snapshot at `epoch` as log rows of inserts: held by the driver if it reads
        it (`Store.local_snapshot`), so that the chains over it run in Arrow with no Spark plan at all;
        else Spark's scan of it, which the tree collects."""
        rows = self.rt.local_snapshot(rel, epoch, build=True)
        if rows is None:
            insert = [F.lit(epoch).cast("bigint").alias("_epoch"), F.lit(0).cast("bigint").alias("_seq"),
                      F.lit(int(Op.INSERT)).cast("tinyint").alias("_op")]
            return self.rt.snapshot(rel, epoch).select(*insert, "*")
        n = rows.num_rows
        log = rows.add_column(0, "_epoch", pa.array(np.full(n, epoch, np.int64)))
        log = log.add_column(1, "_seq", pa.array(np.zeros(n, np.int64)))
        log = log.add_column(2, "_op", pa.array(np.full(n, int(Op.INSERT), np.int8)))
        return HeldRows(self.rt.spark, rel.schema, log)

    def _inserts(self, io: EpochIO, epoch: int, suffixes: list[str]) -> dict[str, pa.Table]:
        """The MV's and the state tables' (`suffixes`) rows `| _vnode | columns |` from one epoch of
        inserts through the tree from empty state (`io.state`, an `EmptyStateIO`)."""
        states = io.state
        assert isinstance(states, EmptyStateIO), "BUG: a build from inserts starts from empty state"
        d = self.root.delta(io, root=True)
        out = {self.rel.name: _inserted(self.rel, None if d is None else self.materialize.log_rows(d, epoch))}
        for suffix in suffixes:
            rel = states.relation(suffix)
            out[rel.name] = _inserted(rel, states.staged.get(rel.name))
        return out

    def build_chunk(self, epoch: int, plan: ChunkPlan, vnodes: tuple[int, int],
                    sides: dict[str, list[str]]) -> dict[str, Built]:
        """A stateful tree's tables over the driving scan's rows of `vnodes` (and the other scans'
        whole snapshots): with an aggregate above the driving scan, its partials and value counts
        (as `<table>#partial`) and the state below it; else the MV's rows and every state table's.
        `sides` hands the join sides that the first chunk wrote or linked (their state files, by
        suffix): a later chunk neither evaluates nor writes them again."""
        schemas = self._state_schemas
        handed = {suffix: read_parquet(self.rt.spark, base_spark_ddl(schemas[suffix]), files).select(
            *[F.col(f"`{c}`") for c in schemas[suffix].names]) for suffix, files in sides.items()}
        io = self._io(epoch, policy.BIG_EPOCH_ROWS, vnodes, driving=plan.driving.id, sides=handed)
        # No watermark cleans a chunk's tables: later chunks read the sides it hands on, the merge adds up
        # its partials; the merge cleans what it writes, the first step after the build the rest.
        whole = set(schemas)
        if plan.aggregate is None:
            return self._tables(io, self.root.batch(io), whole)
        agg = plan.aggregate
        agg.partial_batch(io)
        own = [agg.partials_state, *[agg.values_state(j) for j in range(len(agg.value_args()))]]
        out = self._tables(io, None, whole)
        return {f"{n}{PARTIAL}" if n in {state_name(self.rel.name, o) for o in own} else n: df for n, df in out.items()}

    def build_merge(self, epoch: int, plan: ChunkPlan, partials: dict[str, list[str]], *,
                    big_epoch_rows: int = policy.BIG_EPOCH_ROWS) -> dict[str, Built]:
        """The last chunk: the aggregate's partials and value counts of all chunks (their files, by
        table) added up, and the MV and every state table above the aggregate from them (on the
        driver, if the aggregate is the tree's top and small: as in `build`)."""
        agg = plan.aggregate
        assert agg is not None, "BUG: only a plan with an aggregate merges"
        io = self._io(epoch, big_epoch_rows, None)

        def read(suffix: str) -> DataFrame:
            schema = self._state_schemas[suffix]
            return read_parquet(self.rt.spark, base_spark_ddl(schema), partials.get(state_name(self.rel.name, suffix),
                                                                                    [])).drop("_vnode")

        values = [read(agg.values_state(j)) for j in range(len(agg.value_args()))]
        io.outputs[agg.id] = agg.merge_partials(io, read(agg.partials_state), values)
        top = top_of(self.root)
        if top is not None and top.id == agg.id:  # (then no share below it is read above it)
            return self._with_top(io, agg)
        root = self.root.batch(io)
        # the chunks wrote these: a shared one (`Share`) is also read above
        io.forget_states([suffix for op in agg.input.walk() for suffix in op.state_tables()])
        return self._tables(io, root)

    def _with_top(self, io: SnapshotIO, top: Aggregate) -> dict[str, Built]:
        """The tables below the tree's top aggregate, which `io` gathered (the aggregate's output is
        in `io.outputs`), and the top's as `TopTable`s: the MV's first, so that its writer starts the
        top at once; the top's others wait for it, so they come after the tables below."""
        tops = Top(self, io, top)
        below = self._tables(io, None)
        first, *others = tops.names
        return {first: TopTable(tops, first), **below, **{name: TopTable(tops, name) for name in others}}

    @property
    def _state_schemas(self) -> dict[str, Schema]:
        return state_schemas(self.root)

    def _io(self, epoch: int, big_epoch_rows: int, vnodes: tuple[int, int] | None, driving: int | None = None,
            sides: dict[str, DataFrame] | None = None) -> SnapshotIO:
        """A build's IO over its `BuildPlan`, decided here once."""
        tables = {t.relation for op in self.root.walk() if isinstance(op, Join) for t in op.table_sides.values()}
        plan = BuildPlan(epoch, big_epoch_rows, vnodes, driving,
                         linkable=frozenset(t for t in tables if small_enough_to_link(self.rt, t, epoch)),
                         sides=MappingProxyType(dict(sides or {})))
        io = SnapshotIO(self.rt, plan, watermarks=self.watermarks(epoch))
        self._builds.append(io)
        return io

    def _tables(self, io: SnapshotIO, root_rows: DataFrame | None, whole: set[str] | frozenset[str] = frozenset()
                ) -> dict[str, Built]:
        """The MV's rows (if evaluated) and each state table whose rows `io` gathered, as
        `| _vnode | columns |`, or as the table whose snapshot files they are (`Linked`). The
        frames to size first (`SnapshotIO.size_first`) are computed now, before any write is planned.
        A watermark cleans each table but those in `whole` (a chunk's partials: the merge's input)."""
        for rows in io.sized:
            rows.count()
        io.sized.clear()
        out: dict[str, Built] = {} if root_rows is None else {
            self.rel.name: self.materialize.rows(root_rows)}
        for suffix, schema in self._state_schemas.items():
            if suffix in io.links:
                out[state_name(self.rel.name, suffix)] = Linked(io.links[suffix], io.epoch)
            elif suffix in io.state_rows:
                rows = io.state_rows[suffix]
                out[state_name(self.rel.name, suffix)] = (
                    rows if suffix in whole else clean_built(self.root, suffix, rows, io.watermarks)).select(
                    F.lit(0).cast("smallint").alias("_vnode"),
                    *[F.col(f"`{c.name}`").cast(c.type.spark).alias(c.name) for c in schema.columns])
        return out

    def release(self) -> None:
        """Free what the builds persisted, once their tables are written."""
        for io in self._builds:
            io.release()
        self._builds.clear()


def top_of(root: Operator) -> Aggregate | None:
    """The aggregate that starts a tree's top: the lowest one the root reaches through operators of
    one input each (Nexmark q4's maxima per auction, below their average per category); None if
    there is none, or if an operator above it is a scalar aggregate (whose row over no input only
    Spark's build makes)."""
    op, found, above = root, None, []
    while len(op.inputs) == 1:
        above.append(op)
        op = op.inputs[0]
        if isinstance(op, Aggregate):
            found = op
            if any(isinstance(o, Aggregate) and o.scalar for o in above):
                return None
    return found


class Top:
    """The tables above a tree's top aggregate (`top_of`): the MV's and its operators' state
    tables. Spark's build of them is a chain of small jobs (each level persisted, then read by each
    table it feeds), so when the aggregate's output is small (`policy.top_on_driver`) it is collected,
    and the operators above it run on the driver as one epoch of inserts from empty state (as
    `build_local` runs a small snapshot): their tables are written from Arrow with no Spark job.
    Else Spark builds them as any other table. Evaluated once, when a writer first asks for one of
    them (`TopTable.resolve`), so that the other tables' writes start meanwhile; if it fails, every
    writer of its tables fails with the same error rather than evaluating it again."""

    def __init__(self, flow: Dataflow, io: SnapshotIO, aggregate: Aggregate) -> None:
        self.flow, self.io, self.aggregate = flow, io, aggregate
        below = {op.id for op in aggregate.walk()}
        self.suffixes = [suffix for op in flow.root.walk() if op.id not in below for suffix in op.state_tables()]
        self.names = [flow.rel.name, *[state_name(flow.rel.name, x) for x in self.suffixes]]
        self._lock = threading.Lock()
        self._tables: dict[str, Built | pa.Table] | None = None
        self._error: BaseException | None = None

    def table(self, name: str) -> DataFrame | pa.Table:
        """The rows of the top's table `name`: Arrow if the driver evaluated the top, else Spark's frame."""
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._tables is None:
                try:
                    self._tables = self._evaluate()
                except BaseException as e:
                    self._error = e
                    raise
        out = self._tables[name]
        assert isinstance(out, (DataFrame, pa.Table)), f"BUG: top table {name} is {type(out).__name__}"
        return out

    def _evaluate(self) -> dict[str, Built | pa.Table]:
        rows = self.io.outputs[self.aggregate.id]
        big_epoch_rows = self.io.plan.big_epoch_rows
        given = collect(rows.limit(policy.top_limit(big_epoch_rows) + 1), self.aggregate.arrow_schema())  # no count
        if policy.top_on_driver(given.num_rows, big_epoch_rows):
            schemas = {x: self.flow._state_schemas[x] for x in self.suffixes}
            states = EmptyStateIO(self.flow.rt, self.flow.rel.name, prev=0, epoch=self.io.epoch, schemas=schemas)
            io = EpochIO(self.flow.rt, {}, states, given={self.aggregate.id: with_weight(given, 1)},
                         watermarks=self.flow.watermarks(self.io.epoch))
            return dict(self.flow._inserts(io, self.io.epoch, self.suffixes))
        return dict(self.flow._tables(self.io, self.flow.root.batch(self.io)))


@dataclass(frozen=True)
class TopTable:
    """One table of a `Top`, as a writer's build asks for it."""

    top: Top
    name: str

    def resolve(self) -> DataFrame | pa.Table:
        """Its rows, the top evaluated if no writer has yet."""
        return self.top.table(self.name)


Built = DataFrame | Linked | TopTable  # a table of a snapshot build, as `Dataflow.build` hands it to its writer


def resolved(table: Built | pa.Table) -> DataFrame | pa.Table | Linked:
    """A built table's rows for its writer: a top's table evaluated (`Top`)."""
    return table.resolve() if isinstance(table, TopTable) else table


def _inserted(rel: Relation, log: pa.Table | None) -> pa.Table:
    """A table's log rows of a build from nothing as its base rows: inserts only, or it is a bug."""
    target = base_arrow_schema(rel.schema)
    if log is None:
        return target.empty_table()
    assert pc.all(pc.equal(log["_op"], int(Op.INSERT))).as_py() in (True, None), \
        f"BUG: a build from empty state changed rows of {rel.name} it never inserted"
    return log.select(target.names).cast(target)
