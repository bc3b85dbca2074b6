"""Fused reads: the stateless chains over a source, evaluated by the job that reads it.

A source's epoch is read by one Spark job and its rows come to the driver. Every MV over the source
starts with a chain of a scan and projections (`Scan`, `Project`): each would be its own Spark job
over the source's log file of the epoch, read, computed and collected again. Instead the read's
select computes what the chains compute too: only the expressions that are not a bare source
column (the chain then uses the source's own), each where the chain's predicates hold (NULL
elsewhere: a string dropped by a filter carries no bytes), and one flag per chain that filters.
The one collect brings them all, and each MV's chain takes its Z-set from them (`EpochIO.fused`):
one job per source and epoch, however many MVs read it, and no file between them. A chain keeps its
own evaluation: only the job it runs in differs. (A source is append-only: every row weighs +1.)
The driver holds the source's rows and each chain's rows of the epoch at once, as it held each
MV's rows of the epoch before; `big_epoch_rows` bounds the source's."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame

from sparkwave.core.chunk import vnode_expr
from sparkwave.core.zset import W
from sparkwave.stream.operator import VNODE, WEIGHT, Fused, Operator
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan

_PREFIX = "_fz"  # the columns a fused read adds; a source whose columns start so is not fused


@dataclass(frozen=True)
class Branch:
    """One MV's chain over the source: `op` is its top (whose `delta` collects the chain), `root`
    whether it is the MV's root (its rows then carry the MV key's `_vnode`)."""

    mv: str
    op: Operator
    root: bool


def branches(mv: str, root: Operator, relation: str) -> list[Branch]:
    """The chains of the MV's tree that read `relation` and can be fused: a scan (without a window,
    which makes one row per window) and the projections above it, up to the first operator that
    keeps state or the root."""
    out: list[Branch] = []
    seen: set[int] = set()

    def visit(op: Operator, top: bool) -> None:
        if op.id in seen:
            return
        seen.add(op.id)
        if op.stateless:  # its `delta` collects the whole chain below it
            below = op
            while isinstance(below, Project):
                below = below.input
            if isinstance(below, Scan) and below.relation == relation and below.window is None:
                out.append(Branch(mv, op, top))
            return
        for i in op.inputs:
            visit(i, False)

    visit(root, True)
    return out


@dataclass(frozen=True)
class Layout:
    """Where a chain's rows are in a fused read's rows: the column holding each of its columns (the
    source's own where the chain passes one on), the column of its `keep` condition (None: every
    good record passes), and of its `_vnode` (at an MV's root)."""

    columns: list[str]
    keep: str | None
    vnode: str | None


def covers(root: Operator, relation: str, fused: Container[int]) -> bool:
    """Whether the chains computed by reads (their tops' ids, `fused`) hold every scan of `relation`
    in the MV's tree: the MV then reads nothing else of it."""
    ops = root.walk()
    inside = {o.id for op in ops if op.id in fused for o in op.walk()}
    return all(op.id in inside for op in ops if isinstance(op, Scan) and op.relation == relation)


def fused_read(rows: DataFrame, chains: list[Branch], guard: str) -> tuple[DataFrame, list[Layout]] | None:
    """The source's rows (`rows`: its log rows of the epoch) with what every chain computes: each
    expression that is not a bare source column and, at an MV's root, the MV key's vnode (NULL
    where the row does not pass the chain or `guard`, a bad record's test, fails), and whether the
    row passes the chain (where it filters). None if the source's own columns would collide with
    those (`_fz...`)."""
    if not chains or any(c.startswith(_PREFIX) for c in rows.columns):
        return None
    items = [f"`{c}`" for c in rows.columns]
    layouts = []
    for i, chain in enumerate(chains):
        f = _evaluate(chain.op, rows, f"{_PREFIX}{i}o", guard)
        rows = f.rows
        out = f"{_PREFIX}{i}_"
        columns = []
        for n in chain.op.names:
            held = f.names[n]
            if held.startswith(_PREFIX):
                items.append(f"CASE WHEN {f.keep} THEN `{held}` END AS `{out}{n}`")
                held = f"{out}{n}"
            columns.append(held)
        keep = None if f.keep == guard else f"{out}_keep"
        if keep is not None:
            items.append(f"{f.keep} AS `{keep}`")
        vnode = None
        if chain.root:
            vnode = f"{out}_vnode"
            items.append(f"CASE WHEN {f.keep} THEN {vnode_expr([f'`{f.names[k]}`' for k in chain.op.key])} "
                         f"END AS `{vnode}`")
        layouts.append(Layout(columns, keep, vnode))
    return rows.selectExpr(*items), layouts


def _evaluate(op: Operator, rows: DataFrame, prefix: str, guard: str) -> Fused:
    if isinstance(op, Project):
        return op.fused(_evaluate(op.input, rows, prefix, guard), f"{prefix}{op.id}_")
    assert isinstance(op, Scan), f"BUG: {op.op} {op.id} is not part of a fusable chain"
    return op.fused(rows, f"{prefix}{op.id}_", guard)


def split(wide: pa.Table, columns: list[str], chains: list[Branch], layouts: list[Layout],
          good: pa.ChunkedArray | None) -> tuple[pa.Table, dict[str, dict[int, pa.Table]]]:
    """A fused read's rows on the driver: the source's own (`columns`), and each chain's Z-set in
    its operator's types, by MV and operator id. `good` marks the rows that are not bad records
    (None: all are)."""
    weight = pa.repeat(pa.scalar(1, pa.int64()), wide.num_rows)  # a source's rows are all inserted
    out: dict[str, dict[int, pa.Table]] = {}
    for chain, layout in zip(chains, layouts, strict=True):
        names = [*chain.op.names, W, *(["_vnode"] if chain.root else [])]
        arrays = [wide[c] for c in layout.columns] + [weight] + ([wide[layout.vnode]] if layout.vnode else [])
        rows = pa.Table.from_arrays(arrays, names=names)
        mask = wide[layout.keep] if layout.keep is not None else good
        if mask is not None:
            rows = rows.filter(mask)
        schema = chain.op.arrow_schema(WEIGHT, *([VNODE] if chain.root else []))
        out.setdefault(chain.mv, {})[chain.op.id] = rows.cast(schema)
    return wide.select(columns), out
