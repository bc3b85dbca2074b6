"""The operator base class, and what operators read and write through.

An MV is a tree of operators (the closed set is in `stream/plan.py`; a shared one, `stream/share.py`,
makes it a DAG). Every operator produces a
**Z-set**: rows with a weight `_w` (+1 inserted, -1 retracted), so an update is a retraction of the
old row and an insertion of the new one. Columns have internal names unique within the plan
(`c<n>_<name>`); `key` names the columns that identify a row of the operator's output.

Each operator is evaluated three ways:
- **per epoch** (`delta`): the epoch's change of its output from its inputs' changes. A stateless
  subtree (a scan and the projections above it) is one Spark DataFrame (`frame`), collected once
  (over a source, computed by the source's read instead: `stream/fusion.py`, `EpochIO.fused`);
  joins and aggregates run on the driver in Arrow (`apply`) against their state tables (`States`).
- **per big epoch** (`delta_frame`): the same change as a Spark DataFrame, for an epoch whose
  change is too big for the driver: state lookups are joins of the change with the state tables'
  snapshots, and the executors write the new state rows and the output (`FrameIO`).
- **from a snapshot** (`batch`): its whole output as a Spark DataFrame over the upstreams'
  snapshots, with its state tables' rows put in the `SnapshotIO`, which a `BuildPlan` decided once
  before the build describes.

Which evaluation runs for a size is `core/policy.py`'s decision."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

import pyarrow as pa
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from sparkwave.core import policy
from sparkwave.core.chunk import vnode_sql
from sparkwave.core.local_frames import local_frame, to_arrow
from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.core.zset import W
from sparkwave.core.zset_frames import key_range, log_ops, net_frame
from sparkwave.storage.snapshot import read_parquet
from sparkwave.storage.state import state_name
from sparkwave.storage.store import Store
from sparkwave.storage.table import StoredTable, log_arrow_schema, log_spark_ddl
from sparkwave.stream.expressions import column_ref, renamed

WEIGHT = pa.field(W, pa.int64())
VNODE = pa.field("_vnode", pa.int16())


class States(Protocol):
    """An MV's state tables in one epoch (`storage/state.py: StateIO`; tests use an in-memory one)."""

    def lookup(self, suffix: str, by: list[str], keys: pa.Table) -> pa.Table:
        """The rows as of the previous epoch whose `by` columns match a row of `keys`."""
        ...

    def stage(self, suffix: str, changes: pa.Table) -> None:
        """Stage a consistent Z-set of state rows (-1 the old row of a key, +1 its new row)."""
        ...

    def between(self, suffix: str, column: str, ranges: list[tuple[int, int]]) -> pa.Table:
        """The rows as of the previous epoch whose timestamp `column`, in microseconds, lies in one of
        the closed `ranges` (a temporal filter's rows that the move of NOW() may flip)."""
        ...


class HeldRows:
    """A relation's log rows of an epoch that the driver holds and that are few
    (`policy.runs_locally`), for every MV over it: in Arrow (`rows`, in the log's stored types) for
    the chains evaluated in Arrow (`stream/arrow_chain.py`), and as a local frame (`frame`: read
    without a file scan, collected without a job) made on the first chain that needs Spark, once."""

    def __init__(self, spark: SparkSession, schema: Schema, rows: pa.Table) -> None:
        target = log_arrow_schema(schema)
        self.rows = rows.select(target.names).cast(target)
        self._spark, self._ddl = spark, log_spark_ddl(schema)
        self._frame: DataFrame | None = None
        self._lock = threading.Lock()

    def frame(self) -> DataFrame:
        with self._lock:
            if self._frame is None:
                self._frame = local_frame(self._spark, self.rows, self._ddl)
            return self._frame


@dataclass
class EpochIO:
    """What a tree reads and writes in one epoch: its upstreams' log files by relation (of one
    epoch, or of several for a stateless tree's slice), the same rows of one epoch where the driver
    still holds them (`changes`: `HeldRows`, or a frame), the changes of the chains that a source's read
    computed (`fused`), an aggregate's whole output that a snapshot build computed in Spark, as
    inserts, for the driver to evaluate what is above it (`given`: `Dataflow`'s top), and its MV's
    state tables."""

    rt: Store
    inputs: dict[str, list[str]]
    state: States | None = None
    changes: Mapping[str, DataFrame | HeldRows] = field(default_factory=dict)  # held rows, by upstream
    shares: dict[int, pa.Table | None] = field(default_factory=dict)  # a shared operator's change, by id
    fused: dict[int, pa.Table] = field(default_factory=dict)  # a chain's change from its upstream's read, by id
    given: dict[int, pa.Table] = field(default_factory=dict)  # an aggregate's change computed by Spark, by id
    # upstream relation -> its watermark after this epoch (`stream/watermark.py`: `Derivation.value`)
    watermarks: Mapping[str, int | None] = field(default_factory=dict)
    now: int | None = None  # the epoch's NOW() (microseconds, UTC), for a tree that reads it (`ticks`)
    prev_now: int | None = None  # the previous step's NOW(); None from empty state
    lookup_epoch: int | None = None  # the epoch a temporal join reads its table as of (the previous one)

    @property
    def spark(self) -> SparkSession:
        return self.rt.spark

    @property
    def states(self) -> States:
        assert self.state is not None, "BUG: a stateful operator evaluated without state tables"
        return self.state

    def log(self, relation: str) -> DataFrame | None:
        """The upstream's log rows `| _epoch | _seq | _op | _vnode | columns |`, None if it did not change."""
        held = self.changes.get(relation)
        if isinstance(held, HeldRows):
            return held.frame()
        if held is not None:
            return held
        paths = self.inputs.get(relation)
        if not paths:
            return None
        return read_parquet(self.spark, log_spark_ddl(self.rt.relation(relation).schema), paths)

    def held_rows(self, relation: str) -> pa.Table | None:
        """The upstream's log rows in Arrow if the driver holds them (`HeldRows`), else None."""
        held = self.changes.get(relation)
        return held.rows if isinstance(held, HeldRows) else None


def held_log(spark: SparkSession, schema: Schema, rows: pa.Table) -> HeldRows | None:
    """A relation's log rows of an epoch that the driver holds, when they are few
    (`policy.runs_locally`): evaluated in Arrow, or as a local frame (read without a file scan,
    collected without a job: `to_arrow`)."""
    if not policy.runs_locally(rows.num_rows):
        return None
    return HeldRows(spark, schema, rows)


@dataclass
class FrameIO(EpochIO):
    """What a tree reads and writes in one big epoch, on the executors: its upstreams' log files, its
    MV's state tables as of `prev` (Spark snapshots: a lookup is a join with one), and the state
    changes staged as frames (`state_logs`, for the executors to write). A frame read more than once is persisted
    (`shared`), so each subtree is evaluated once."""

    owner: str = ""
    prev: int = 0
    epoch: int = 0
    staged_frames: dict[str, DataFrame] = field(default_factory=dict)
    persisted: list[DataFrame] = field(default_factory=list)
    ranges: dict[tuple[int, str, str], tuple[DataFrame, SparkColumn | None]] = field(default_factory=dict)
    shared_frames: dict[int, DataFrame | None] = field(default_factory=dict)  # a shared operator's change, by id

    def state_rows(self, suffix: str, near: tuple[DataFrame, str, str] | None = None) -> DataFrame:
        """The state table's rows `| columns |` as of `prev`; with `near = (keys, column, lead)`,
        only those whose leading key column `lead` lies within the range of `keys[column]` (the
        lookup's keys): a state's base is sorted by that column, so the scans skip the row groups
        outside it and the lookup's cost follows the change's key range, not the state's size."""
        rel = self.rt.relation(state_name(self.owner, suffix))
        where = None
        if near is not None:
            keys, by, lead = near
            assert lead == rel.schema.key[0], f"BUG: state {rel.name} is sorted by {rel.schema.key[0]}, not {lead}"
            column = rel.schema.column(lead)
            assert column is not None, f"BUG: state {rel.name} lacks its key column {lead}"
            memo = (id(keys), by, lead)  # one keys column bounds states of one lead type alike
            if memo not in self.ranges:  # an aggregate looks up its partials and value counts by the same keys
                self.ranges[memo] = (keys, key_range(keys, by, lead, column.type))  # holds `keys`: its id stays
            where = self.ranges[memo][1]
        rows = self.rt.snapshot(rel, self.prev, where=where)
        return rows.select(*[F.col(f"`{n}`") for n in rel.schema.names])

    def stage_frame(self, suffix: str, changes: DataFrame) -> None:
        """Stage a consistent Z-set of state rows (`| columns | _w |`)."""
        assert suffix not in self.staged_frames, f"BUG: state {suffix} staged twice in one epoch"
        self.staged_frames[suffix] = changes

    def shared(self, df: DataFrame) -> DataFrame:
        self.persisted.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return self.persisted[-1]

    def state_logs(self) -> dict[str, tuple[StoredTable, DataFrame]]:
        """Each staged state change as its table's log rows of `epoch` (`| _seq | _op | _vnode |
        columns |`), by table name, for the executors to write."""
        out: dict[str, tuple[StoredTable, DataFrame]] = {}
        for suffix, changes in self.staged_frames.items():
            rel = self.rt.relation(state_name(self.owner, suffix))
            rows = log_ops(net_frame(changes.select(*[F.col(f"`{n}`") for n in rel.schema.names], W)),
                           list(rel.schema.key))
            out[rel.name] = (self.rt.stored(rel), rows.withColumn("_vnode", F.lit(0)))
        return out

    def release(self) -> None:
        for df in self.persisted:
            df.unpersist()
        self.persisted.clear()
        self.ranges.clear()
        self.shared_frames.clear()


@dataclass(frozen=True)
class BuildPlan:
    """What a snapshot build is, decided once before it (`Dataflow`): the `epoch` of the upstreams'
    snapshots; for a chunk of a backfill, the `vnodes` whose rows it reads, of every scan in a
    stateless tree, of the `driving` scan alone in a stateful one (`stream/chunking.py`); the
    tables whose files a join side may link as its state (`linkable`: `policy.links_base`); the join
    sides an earlier chunk wrote (`sides`: a side's state rows by suffix, or its aggregate's partials
    for a side read from them), which the chunk neither evaluates nor writes again; and the
    `big_epoch_rows` setting, which bounds what the driver evaluates above the tree's top aggregate
    (`policy.top_on_driver`)."""

    epoch: int
    big_epoch_rows: int = policy.BIG_EPOCH_ROWS
    vnodes: tuple[int, int] | None = None
    driving: int | None = None
    linkable: frozenset[str] = frozenset()
    sides: Mapping[str, DataFrame] = field(default_factory=lambda: MappingProxyType({}))


@dataclass
class SnapshotIO:
    """What a snapshot build (its `plan`) reads and gathers: the upstreams' snapshots and each state
    table's rows by suffix, or the table whose snapshot files are its rows (`links`: a join side
    that is an append-only table's rows). A frame that feeds more than one table is persisted
    (`shared`), so writing every table evaluates each subtree once. An operator's whole output
    computed once is kept in `outputs` (by operator id: a share's first evaluation, an aggregate's
    from merged partials or the build's top's input), so it is not evaluated again."""

    rt: Store
    plan: BuildPlan
    outputs: dict[int, DataFrame] = field(default_factory=dict)
    state_rows: dict[str, DataFrame] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # state suffix -> the table whose files are its rows
    persisted: list[DataFrame] = field(default_factory=list)
    sized: list[DataFrame] = field(default_factory=list)  # computed before the writes are planned (`size_first`)
    watermarks: Mapping[str, int | None] = field(default_factory=dict)  # upstream -> its watermark at the epoch

    @property
    def spark(self) -> SparkSession:
        return self.rt.spark

    @property
    def epoch(self) -> int:
        return self.plan.epoch

    def snapshot(self, relation: str, scan: int) -> DataFrame:
        """The snapshot a scan (operator id `scan`) reads: restricted to the plan's vnodes where it
        drives the chunk."""
        plan = self.plan
        vnodes = plan.vnodes if plan.driving is None or plan.driving == scan else None
        return self.rt.snapshot(self.rt.relation(relation), plan.epoch, vnodes)

    def links_first(self, scan: int) -> bool:
        """Whether this build links a table's files as a join side's state, the side's table being
        read by scan `scan`: a whole build, or a chunk that the scan does not drive, or the first."""
        plan = self.plan
        return plan.vnodes is None or plan.driving != scan or plan.vnodes[0] == 0

    def forget_states(self, suffixes: list[str]) -> None:
        """Write none of these state tables (a merge chunk: the chunks wrote them)."""
        for suffix in suffixes:
            self.state_rows.pop(suffix, None)
            self.links.pop(suffix, None)

    def shared(self, df: DataFrame) -> DataFrame:
        self.persisted.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return self.persisted[-1]

    def once(self, op: Operator) -> DataFrame:
        """`op`'s output for more than one use: persisted (evaluated once), unless Spark computes it
        again for less than caching costs: projections (and shares) over snapshots that read again
        cheaply (`Store.rereads_cheaply`: q7's bid side) or constant rows, or over an aggregate, whose
        partials are persisted (q5's join side and max input are not cached twice more)."""
        rows = op.batch(self)
        below = _below_projections(op)
        if below.keeps_state:
            again = below.output_persisted
        else:
            again = not below.inputs and all(self.rt.rereads_cheaply(self.rt.relation(u), self.epoch)
                                             for u in below.upstreams())
        return rows if again else self.shared(rows)

    def size_first(self, op: Operator, rows: DataFrame) -> None:
        """`rows` (`op`'s output, from `once`) computed before the tables' writes are planned, if
        it is an aggregate's (through projections): Spark sizes a scan from its files but not an
        aggregate's output until it is cached, so a join of a table's rows with a small aggregate
        (q7's maxima per window) would shuffle and sort the table's rows; computed first, the
        aggregate is broadcast. Not a join's or a window's output, which may be as big as a table."""
        if _below_projections(op).op == "agg":
            self.sized.append(rows)

    def release(self) -> None:
        for df in self.persisted:
            df.unpersist()
        self.persisted.clear()
        self.sized.clear()


def _below_projections(op: Operator) -> Operator:
    """The first operator at or below `op` that keeps state or has other than one input (through
    projections and shares)."""
    while len(op.inputs) == 1 and not op.keeps_state:
        op = op.inputs[0]
    return op


@dataclass(frozen=True)
class Fused:
    """A stateless chain evaluated inside the job that reads its upstream (`stream/fusion.py`): the
    upstream's rows with the columns the chain computes added, the column of `rows` that holds each
    of the chain's columns (`names`: an upstream column where the chain only passes it on), and
    `keep`, the condition (Spark SQL) under which a row passes the chain."""

    rows: DataFrame
    names: dict[str, str]
    keep: str

    def filtered(self, predicate: str | None, prefix: str) -> Fused:
        """The rows that also pass `predicate` (over the chain's columns), as the flag `prefix_keep`."""
        if not predicate:
            return self
        where = renamed(predicate, self.names)
        assert where is not None, f"BUG: predicate {predicate!r} reads a column the chain lacks"
        rows = self.rows.selectExpr("*", f"({self.keep}) AND coalesce(({where}), false) AS `{prefix}_keep`")
        return Fused(rows, self.names, f"`{prefix}_keep`")

    def computed(self, exprs: Sequence[tuple[str, str]], prefix: str) -> Fused:
        """The chain's columns after `exprs` (over its columns): a bare reference is the column it
        names; anything else is computed as `prefix<column>`, only where `keep` holds (NULL elsewhere)."""
        names: dict[str, str] = {}
        computed = []
        for n, e in exprs:
            ref = column_ref(e)
            if ref is not None and ref in self.names:
                names[n] = self.names[ref]
                continue
            expr = renamed(e, self.names)
            assert expr is not None, f"BUG: expression {e!r} reads a column the chain lacks"
            names[n] = f"{prefix}{n}"
            computed.append(f"CASE WHEN {self.keep} THEN ({expr}) END AS `{names[n]}`")
        return Fused(self.rows.selectExpr("*", *computed) if computed else self.rows, names, self.keep)


def state_schema(columns: list[tuple[str, str]], key: list[str]) -> Schema:
    return Schema(tuple(Column(n, SqlType(t)) for n, t in columns), tuple(dict.fromkeys(key)))


def select_items(exprs: Sequence[tuple[str, str]], key: list[str], extra: tuple[str, ...], vnode: bool) -> list[str]:
    """A projection's select items: each expression as its column, then `extra`, then (at the MV's
    root) the key's `_vnode` over the same expressions, so that one select computes all three."""
    by_name = dict(exprs)
    return [f"{e} AS `{n}`" for n, e in exprs] + list(extra) + ([vnode_sql([by_name[k] for k in key])] if vnode else [])


def exprs_json(exprs: Sequence[tuple[str, str]], predicate: str | None) -> dict[str, Any]:
    """A scan's or projection's expressions and predicate as stored (absent ones left out)."""
    d: dict[str, Any] = {}
    if predicate is not None:
        d["predicate"] = predicate
    if exprs:
        d["exprs"] = [list(e) for e in exprs]
    return d


def collect(df: DataFrame, schema: pa.Schema) -> pa.Table:
    """A per-epoch frame on the driver, in the operator's Arrow types (a small change's without a
    Spark job: `core/local_frames.py`)."""
    return to_arrow(df, schema)


@dataclass
class Operator(ABC):
    """One node of an MV's operator tree: its output columns and key, its inputs, its state tables
    and its two evaluations (per epoch, from a snapshot)."""

    id: int
    columns: list[tuple[str, str]]  # (internal name, SQL type name), in output order
    key: list[str]

    # Its expressions compiled for Arrow (`stream/arrow_chain.py`), by input types; not part of the plan.
    arrow_steps: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    op: ClassVar[str]  # its name in the catalog's JSON
    keeps_state: ClassVar[bool] = False
    output_persisted: ClassVar[bool] = False  # `batch` is cheap over a frame it persisted (its partials)

    @property
    def inputs(self) -> list[Operator]:
        return []

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.columns]

    def type_of(self, name: str) -> str:
        return dict(self.columns)[name]

    def arrow_schema(self, *extra: pa.Field) -> pa.Schema:
        return pa.schema([*[pa.field(n, SqlType(t).arrow) for n, t in self.columns], *extra])

    def spark_ddl(self) -> str:
        return ", ".join(f"`{n}` {SqlType(t).spark}" for n, t in self.columns)

    def walk(self) -> list[Operator]:
        """This operator and every operator below it, inputs first, each once (a shared operator,
        `stream/share.py`, is below more than one parent)."""
        out: dict[int, Operator] = {}
        self._walk(out)
        return list(out.values())

    def _walk(self, into: dict[int, Operator]) -> None:
        for i in self.inputs:
            if i.id not in into:
                i._walk(into)
        into[self.id] = self

    @property
    def stateless(self) -> bool:
        """Scans and projections only: each output row follows from one input row, so the tree runs
        whole in Spark and its changes of several epochs can be computed in one job."""
        return not any(n.keeps_state for n in self.walk())

    def upstreams(self) -> list[str]:
        """The relations the tree scans, each once, in scan order."""
        return list(dict.fromkeys(u for i in self.inputs for u in i.upstreams()))

    # --- planning ------------------------------------------------------------------------------
    @abstractmethod
    def prune(self, needed: set[str]) -> None:
        """Keep only the output columns a parent uses (`needed`) and those this operator needs itself
        (its key, what its predicate reads), then prune its inputs to what is left: a join side or
        an aggregate's input then stores no column that nothing reads."""

    # --- state ---------------------------------------------------------------------------------
    def state_tables(self) -> dict[str, Schema]:
        """This operator's own state tables by suffix (the MV stores them as `<mv>.<suffix>`)."""
        return {}

    @classmethod
    def state_purpose(cls, suffix: str, key: tuple[str, ...]) -> str | None:
        """What the state table `suffix` holds, for DESCRIBE, if it is one of this operator type's."""
        return None

    # --- catalog JSON --------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "op": self.op, "columns": [list(c) for c in self.columns], "key": self.key,
                "inputs": [i.to_json() for i in self.inputs], **self._fields_json()}

    @abstractmethod
    def _fields_json(self) -> dict[str, Any]:
        """This operator type's own fields, as stored (absent ones left out)."""

    @classmethod
    @abstractmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Operator:
        """The operator stored as `d`, over its already decoded inputs."""

    # --- per epoch -----------------------------------------------------------------------------
    @abstractmethod
    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        """The epoch's change of this operator's output: a Z-set `| columns | _w |` (and `_vnode`,
        the MV's, at the root), or None if it did not change."""

    def frame(self, io: EpochIO, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame | None:
        """The epoch's change of a stateless tree as one Spark DataFrame `| columns | _w | keep |`
        (and `_vnode`), None if its upstream did not change."""
        raise AssertionError(f"BUG: {self.op} {self.id} keeps state: only a stateless tree is one Spark frame")

    on_spark: ClassVar[bool] = True  # has `delta_frame`

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        """The epoch's change as a Spark Z-set `| columns | _w |` (and `_vnode` at the root),
        evaluated by the executors; None if it did not change. A stateless tree is its `frame`."""
        assert self.stateless, f"BUG: {self.op} {self.id} keeps state and has no delta_frame"
        return self.frame(io, vnode=root)

    def arrow_delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        """A stateless chain's change evaluated in Arrow from its upstream's held rows
        (`stream/arrow_chain.py`): `| columns | _w |` (and `_vnode` at the root), or None where it
        is not (rows not held, an expression or a value it does not compute exactly)."""
        return None

    def _collected(self, io: EpochIO, root: bool) -> pa.Table | None:
        if self.id in io.fused:  # computed by the job that read the upstream (`stream/fusion.py`)
            return io.fused[self.id]
        rows = self.arrow_delta(io, root=root)
        if rows is not None:
            return rows
        frame = self.frame(io, vnode=root)
        return None if frame is None else collect(frame, self.arrow_schema(WEIGHT, *([VNODE] if root else [])))

    # --- from a snapshot -----------------------------------------------------------------------
    @abstractmethod
    def batch(self, io: SnapshotIO) -> DataFrame:
        """This operator's whole output as of the snapshot, `| columns |`; its state tables' rows go
        to `io.state_rows`."""
