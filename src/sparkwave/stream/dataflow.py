"""Running an MV's operator tree (`stream/plan.py`), per epoch and from a snapshot.

**Per epoch** (`Dataflow.step`): the changed upstreams' log rows go through their scans and the
projections above them as one Spark DataFrame (window, filter, expressions; one Spark job per
changed scan), collected as Z-sets; joins and aggregates run on the driver in Arrow against their
state tables (the epoch's change is small, and an Arrow lookup costs no Spark job); projections
above them go back to Spark only when they compute something. The root's change is netted per MV
key into the MV's log rows. A stateless tree (scans and projections) runs whole in Spark, and
`Dataflow.log_slice` computes its log rows for many epochs in one job.

**From a snapshot** (`Dataflow.build`): the same tree as Spark DataFrames over the upstreams'
snapshots at one epoch gives the MV's rows and every state table's rows, for a backfill. A frame
that feeds more than one table (a join's sides: its state and its output; an aggregate's input and
partials) is persisted, so writing every table evaluates each subtree once; `release()` frees it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from sparkwave.core.catalog import Relation
from sparkwave.core.chunk import Op, consolidate, vnode
from sparkwave.core.schema import SqlType
from sparkwave.core.zset import W, to_ops
from sparkwave.storage import snapshot as snap
from sparkwave.storage.state import StateIO, state_name
from sparkwave.storage.store import Store
from sparkwave.storage.table import log_rows, log_spark_ddl
from sparkwave.stream.aggregate import aggregate
from sparkwave.stream.join import join
from sparkwave.stream.plan import Node, agg_partials, state_schemas, sum_type, value_args

_SPARK_JOIN = {"inner": "inner", "left": "left_outer", "right": "right_outer", "full": "full_outer"}


def arrow_schema(node: Node, *extra: pa.Field) -> pa.Schema:
    return pa.schema([*[pa.field(n, SqlType(t).arrow) for n, t in node.columns], *extra])


def spark_ddl(node: Node) -> str:
    return ", ".join(f"`{n}` {SqlType(t).spark}" for n, t in node.columns)


def scan_frame(node: Node, rows: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
    """A scan's window, projections and predicate over upstream rows (with `_w` and `keep`)."""
    if node.window:
        w = node.window
        t = F.col(f"`{w['time']}`")
        win = F.window(t, f"{w['size']} seconds") if w["kind"] == "tumble" else \
            F.window(t, f"{w['size']} seconds", f"{w['slide']} seconds")
        rows = rows.withColumn("_win", win).withColumn("window_start", F.col("_win.start")) \
            .withColumn("window_end", F.col("_win.end")).drop("_win")
    out = rows.selectExpr(*[f"{e} AS `{n}`" for n, e in node.exprs], W, *keep)
    return out.where(node.predicate) if node.predicate else out


def project_frame(node: Node, rows: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
    if node.predicate:
        rows = rows.where(node.predicate)
    return rows.selectExpr(*[f"{e} AS `{n}`" for n, e in node.exprs], *keep)


def _spark_side(node: Node) -> bool:
    """A scan, or projections over one: evaluated as one Spark DataFrame, never collected between."""
    return node.op == "scan" or (node.op == "project" and _spark_side(node.inputs[0]))


def _weighted(log: DataFrame) -> DataFrame:
    """Log rows as a Z-set: +1 for an insert or update-after, -1 for a delete or update-before."""
    return log.withColumn(W, F.when(F.col("_op").isin(int(Op.INSERT), int(Op.UPDATE_INSERT)), 1)
                          .otherwise(-1).cast("bigint"))


def _is_rename(node: Node) -> bool:
    return node.predicate is None and all(e.startswith("`") and e.endswith("`") and e.count("`") == 2
                                          for _, e in node.exprs)


class Dataflow:
    def __init__(self, rt: Store, rel: Relation) -> None:
        self.rt = rt
        self.rel = rel
        self.root = Node.from_json(rel.definition["dataflow"])
        self.outputs: list[tuple[str, str]] = [(m, i) for m, i in rel.definition["outputs"]]
        self._persisted: list[DataFrame] = []

    @property
    def spark(self) -> SparkSession:
        return self.rt.spark

    # --- per epoch -----------------------------------------------------------------------------
    def step(self, epoch: int, prev: int, inputs: dict[str, list[str]]) -> tuple[pa.Table | None, dict[str, pa.Table]]:
        """The MV's log rows for `epoch` from its upstreams' log files of that epoch (`inputs`), with
        state as of `prev`; state changes are staged. Returns (MV rows, staged state rows by table)."""
        states = StateIO(self.rt, self.rel.name, prev, epoch)
        d = self._delta(self.root, inputs, states, root=True)
        if d is None or d.num_rows == 0:
            return None, states.staged
        return self._log_rows(d, epoch), states.staged

    def log_slice(self, inputs: dict[str, list[str]], epochs: list[int]) -> dict[int, pa.Table]:
        """A stateless tree's log rows per epoch, from its upstream's log files of those epochs: one
        Spark job for the whole slice, netted per epoch on the driver."""
        assert self.root.stateless, "BUG: a stateful tree's epochs depend on each other's state"
        frame = self._frame(self.root, inputs, keep=("_epoch",))
        if frame is None:
            return {}
        chunk = self._collect(self.root, frame.withColumn("_vnode", vnode(self.root.key)),
                              pa.field("_vnode", pa.int16()), pa.field("_epoch", pa.int64()))
        out: dict[int, pa.Table] = {}
        for e in epochs:
            d = chunk.filter(pc.equal(chunk["_epoch"], e)).drop_columns(["_epoch"])
            rows = self._log_rows(d, e) if d.num_rows else None
            if rows is not None and rows.num_rows:
                out[e] = rows
        return out

    def _log_rows(self, d: pa.Table, epoch: int) -> pa.Table:
        """The root's Z-set `| _vnode | internal columns | _w |` as the MV's log rows."""
        rows = d.rename_columns([{i: m for m, i in self.outputs}.get(c, c) for c in d.column_names])
        schema = self.rel.schema
        rows = to_ops(rows.select(["_vnode", *schema.names, W]))
        if schema.append_only:
            return log_rows(rows, schema, epoch)
        return log_rows(consolidate(rows, list(schema.key), schema.values), schema, epoch)

    def _frame(self, node: Node, inputs: dict[str, list[str]], keep: tuple[str, ...] = ()) -> DataFrame | None:
        """The epoch's change through a scan and the projections above it, as one Spark DataFrame."""
        if node.op == "project":
            child = self._frame(node.inputs[0], inputs, keep)
            return None if child is None else project_frame(node, child, (W, *keep))
        paths = inputs.get(node.relation or "")
        if not paths:
            return None
        up = self.rt.relation(node.relation or "")
        return scan_frame(node, _weighted(snap.read_parquet(self.spark, log_spark_ddl(up.schema), paths)), keep)

    def _delta(self, node: Node, inputs: dict[str, list[str]], states: StateIO, root: bool = False) -> pa.Table | None:
        if _spark_side(node):
            frame = self._frame(node, inputs)
            if frame is None:
                return None
            if root:
                return self._collect(node, frame.withColumn("_vnode", vnode(node.key)), pa.field("_vnode", pa.int16()))
            return self._collect(node, frame)
        if node.op == "project":
            child = self._delta(node.inputs[0], inputs, states)
            if child is None or child.num_rows == 0:
                return None
            return self._project(node, child, root)
        if node.op == "join":
            left, right = node.inputs
            dl, dr = self._delta(left, inputs, states), self._delta(right, inputs, states)
            if (dl is None or dl.num_rows == 0) and (dr is None or dr.num_rows == 0):
                return None
            out = join(node, dl, dr, states, (arrow_schema(left), arrow_schema(right)))
            return out if out.num_rows else None
        assert node.op == "agg", f"BUG: unknown operator {node.op}"
        child = self._delta(node.inputs[0], inputs, states)
        if child is None or child.num_rows == 0:
            return None
        out = aggregate(node, child, states)
        return out if out.num_rows else None

    def _collect(self, node: Node, df: DataFrame, *extra: pa.Field) -> pa.Table:
        out = df.toArrow()
        target = arrow_schema(node, pa.field(W, pa.int64()), *extra)
        return out.select(target.names).cast(target)

    def _project(self, node: Node, child: pa.Table, root: bool) -> pa.Table:
        if not root and _is_rename(node):
            names = [e[1:-1] for _, e in node.exprs]
            return child.select([*names, W]).rename_columns([*node.names, W]).cast(
                arrow_schema(node, pa.field(W, pa.int64())))
        df = self.spark.createDataFrame(child.drop_columns([W]).append_column(W, child[W]),
                                        schema=f"{spark_ddl(node.inputs[0])}, `{W}` bigint")
        out = project_frame(node, df, (W,))
        if root:
            out = out.withColumn("_vnode", vnode(node.key))
            return self._collect(node, out, pa.field("_vnode", pa.int16()))
        return self._collect(node, out)

    # --- from a snapshot -----------------------------------------------------------------------
    def build(self, epoch: int, vnodes: tuple[int, int] | None = None) -> dict[str, DataFrame]:
        """Every table of the MV (its own rows, then each state table) as `| _vnode | columns |`
        DataFrames over the upstreams' snapshots at `epoch`; with `vnodes`, only the upstream rows
        of those vnodes (a stateless tree's chunk: each MV row comes from one upstream row)."""
        assert vnodes is None or self.root.stateless, "BUG: a stateful tree needs whole snapshots"
        states: dict[str, DataFrame] = {}
        root = self._batch(self.root, epoch, states, vnodes)
        names = {i: m for m, i in self.outputs}
        mv = root.select(vnode(self.root.key).alias("_vnode"),
                         *[F.col(f"`{i}`").alias(names[i]) for _, i in self.outputs])
        schemas = state_schemas(self.root)
        out = {self.rel.name: mv.select("_vnode", *[F.col(f"`{c.name}`").cast(c.type.spark).alias(c.name)
                                                   for c in self.rel.schema.columns])}
        for suffix, schema in schemas.items():
            df = states[suffix]
            out[state_name(self.rel.name, suffix)] = df.select(
                F.lit(0).cast("smallint").alias("_vnode"),
                *[F.col(f"`{c.name}`").cast(c.type.spark).alias(c.name) for c in schema.columns])
        return out

    def _batch(self, node: Node, epoch: int, states: dict[str, DataFrame],
               vnodes: tuple[int, int] | None = None) -> DataFrame:
        if node.op == "scan":
            up = self.rt.relation(node.relation or "")
            rows = self.rt.snapshot(up, epoch, vnodes).withColumn(W, F.lit(1).cast("bigint"))
            return scan_frame(node, rows).drop(W)
        if node.op == "project":
            return project_frame(node, self._batch(node.inputs[0], epoch, states, vnodes))
        if node.op == "join":
            left, right = (self._shared(self._batch(i, epoch, states)) for i in node.inputs)
            states[f"j{node.id}l"], states[f"j{node.id}r"] = left, right
            cond = None
            for a, b in zip(node.left_keys, node.right_keys, strict=True):
                c = left[f"`{a}`"] == right[f"`{b}`"]
                cond = c if cond is None else cond & c
            return left.join(right, cond, _SPARK_JOIN[node.join_type or "inner"]).select(
                *[F.col(f"`{n}`") for n in node.names])
        return self._batch_agg(node, self._shared(self._batch(node.inputs[0], epoch, states)), states)

    def _shared(self, df: DataFrame) -> DataFrame:
        self._persisted.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return self._persisted[-1]

    def release(self) -> None:
        """Free what `build` persisted, once its tables are written."""
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()

    def _batch_agg(self, node: Node, child: DataFrame, states: dict[str, DataFrame]) -> DataFrame:
        cin = node.inputs[0]
        parts: list[SparkColumn] = [F.count(F.lit(1)).alias("_count")]
        for i, a in enumerate(node.aggs):
            if a.fn == "count_star":
                continue  # counted by `_count`
            assert a.arg, f"BUG: aggregate {a.fn} without an argument"
            arg = F.col(f"`{a.arg}`")
            if a.fn == "count":
                parts.append(F.count(arg).alias(f"p{i}"))
            elif a.fn in ("sum", "avg"):
                st = SqlType(sum_type(cin.type_of(a.arg))).spark
                parts += [F.sum(arg.cast(st)).cast(st).alias(f"p{i}"), F.count(arg).alias(f"n{i}")]
            elif a.fn == "min":
                parts.append(F.min(arg).alias(f"p{i}"))
            elif a.fn == "max":
                parts.append(F.max(arg).alias(f"p{i}"))
            elif a.fn == "count_distinct":
                parts.append(F.countDistinct(arg).alias(f"p{i}"))
        group = [F.col(f"`{g}`") for g in node.group]
        partials = self._shared(child.groupBy(*group).agg(*parts))
        assert [c for c, _ in agg_partials(node)] == partials.columns[len(group):], "BUG: partial columns"
        states[f"a{node.id}"] = partials
        for j, arg_name in enumerate(value_args(node)):
            states[f"a{node.id}v{j}"] = child.where(F.col(f"`{arg_name}`").isNotNull()) \
                .groupBy(*group, F.col(f"`{arg_name}`")).agg(F.count(F.lit(1)).alias("_count"))
        if node.scalar:
            one = self.spark.range(1).select(F.lit(0).cast("bigint").alias(node.group[0]))
            partials = one.join(partials, node.group, "left")
        outs = [F.col(f"`{g}`") for g in node.group]
        for i, a in enumerate(node.aggs):
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
        return partials.select(*outs)
