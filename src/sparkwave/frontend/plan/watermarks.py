"""The planner's watermark pass, after the tree-wide rules: which columns carry a watermark
(`stream/watermark.py: derive`, RisingWave's propagation rules), the state each aggregate grouped by
one of them deletes below it (`Aggregate.cleaning`), and `EMIT ON WINDOW CLOSE` as an `Eowc`
operator above the MV's aggregate, which makes the MV append-only. Stored in the plan as added
fields, so a recovery, a backfill and EXPLAIN of an existing MV read the same."""

from __future__ import annotations

from collections.abc import Callable

from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.eowc_over import close_call
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.eowc import Eowc
from sparkwave.stream.join import Join
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import OverWindow
from sparkwave.stream.project import Project
from sparkwave.stream.watermark import Declared, Derivation, derive
from sparkwave.stream.watermark_clean import Cleaning

_WRITE = ("write GROUP BY window_start of TUMBLE(t, ts, ...) or HOP(...) over a table or source with "
          "WATERMARK FOR ts AS ..., or GROUP BY the watermarked column, or select the watermarked column, or "
          "window functions ORDER BY it or PARTITION BY a window of it")


def watermarked(ctx: PlanContext, op: Operator) -> dict[str, Derivation]:
    """The output columns of `op` that carry a watermark, and how (for any operator's planning)."""
    return derive(op, lambda name: Declared.of(ctx.relation(name).definition))


def cleaned_words(cleaning: Cleaning | None, name: Callable[[str], str]) -> str:
    """What an operator's state cleaning does, in words, after its state's (EXPLAIN, DESCRIBE)."""
    if cleaning is None:
        return ""
    return f"; cleaned: rows whose {name(cleaning.column)} is below {cleaning.watermark.describe()} are deleted"


def _first_key(op: Operator, group: list[str], wms: dict[str, Derivation]) -> str | None:
    """The group column whose watermark cleans: a window's start first, else the first watermarked."""
    found = [g for g in group if g in wms]
    starts = [g for g in found if wms[g].terms[0].kind.endswith("_start")]
    return (starts or found)[0] if found else None


def plan_watermarks(ctx: PlanContext, root: Project) -> bool:
    """Mark each aggregate's state cleaning and add EMIT ON WINDOW CLOSE if the statement asks for
    it; returns whether the MV is append-only because of it."""
    readers: dict[int, set[int]] = {}  # aggregate id -> the joins reading its state as a side
    for op in root.walk():
        if isinstance(op, Join):
            for a in op.aggregate_sides.values():
                readers.setdefault(a.agg.id, set()).add(op.id)
    for op in root.walk():
        if isinstance(op, Aggregate) and op.group and op.id not in readers and op.cleaning is None:
            wms = watermarked(ctx, op.input)
            if (column := _first_key(op, op.group, wms)) is not None:
                op.cleaning = Cleaning(column, wms[column])
        elif isinstance(op, OverWindow) and op.cleaning is None:
            wms = watermarked(ctx, op.input)
            if (column := _first_key(op, op.partition, wms)) is not None:
                op.cleaning = Cleaning(column, wms[column])
        elif isinstance(op, Join) and op.join_type == "inner" and op.aggregate_sides:
            _clean_borrowed(ctx, op, {a for a, joins in readers.items() if len(joins) > 1})
    if not getattr(ctx.stmt, "emit_on_window_close", False):
        return False
    _add_eowc(ctx, root)
    return True


def _clean_borrowed(ctx: PlanContext, join: Join, shared: set[int]) -> None:
    """An aggregate whose state an inner join reads as a side is cleaned by a join key that carries
    a watermark on both sides, below the smaller of the two: no row of either side can reach a
    group below it again, so neither the aggregate nor the join needs it (RisingWave cleans a hash
    join's state by such a key). Not an aggregate another join reads too (`shared`, a CTE joined
    twice): that join's other side may still look up the groups below it."""
    left, right = watermarked(ctx, join.left), watermarked(ctx, join.right)
    both = {}
    for lk, rk in zip(join.left_keys, join.right_keys, strict=True):
        if lk in left and rk in right:
            both["left", lk] = both["right", rk] = Derivation(left[lk].terms + right[rk].terms)
    for side, found in join.aggregate_sides.items():
        keys = join.left_keys if side == "left" else join.right_keys
        agg = found.agg
        if agg.id in shared:
            continue
        usable = [k for k in keys if (side, k) in both and found.names.get(k) in agg.group]
        if usable and agg.cleaning is None:
            agg.cleaning = Cleaning(found.names[usable[0]], both[side, usable[0]])


def _add_eowc(ctx: PlanContext, root: Project) -> None:
    """An `Eowc` right above the aggregate under the MV's projections; else right under the MV's
    projection when its input has a column that carries a watermark (a SELECT of a watermarked
    table, an inner join on watermarked keys, a group top-n partitioned by a window); else above
    window functions ordered by a watermarked column (`eowc_over.py`)."""
    parent: Project = root
    while isinstance(parent.input, Project):
        parent = parent.input
    below = parent.input
    if isinstance(below, Aggregate):
        _eowc_aggregate(ctx, parent, below)
        return
    top = root.input
    wms = watermarked(ctx, top)
    if (column := _first_key(top, [*top.key, *[n for n in top.names if n not in top.key]], wms)) is not None:
        if root.predicate is not None:  # filter first (a top-n's `rn <= N`): the buffer holds only what passes
            top = ctx.passthrough(top, predicate=str(root.predicate))
            root.predicate = None
        root.input = Eowc(ctx.next_id(), list(top.columns), list(top.key), input=top,
                          cleaning=Cleaning(column, wms[column]))
        return
    if isinstance(below, OverWindow) and (ordered := watermarked(ctx, below.input)):
        close, derivation = close_call(ctx, below, ordered)
        parent.input = Eowc(ctx.next_id(), list(below.columns), list(below.key), input=below,
                            cleaning=Cleaning(close, derivation))
        return
    raise ctx.err(f"EMIT ON WINDOW CLOSE: no column of the query carries a watermark; {_WRITE}", "EMIT")


def _eowc_aggregate(ctx: PlanContext, parent: Project, below: Aggregate) -> None:
    if not below.group:
        raise ctx.err(f"EMIT ON WINDOW CLOSE needs the query to end in a GROUP BY of a watermarked column; {_WRITE}",
                      "EMIT")
    wms = watermarked(ctx, below)
    column = _first_key(below, below.key, wms)
    if column is None:
        raise ctx.err("EMIT ON WINDOW CLOSE: no GROUP BY column carries a watermark (a window's start or end over "
                      f"a column with WATERMARK FOR, or that column); {_WRITE}", "EMIT")
    parent.input = Eowc(ctx.next_id(), list(below.columns), list(below.key), input=below,
                        cleaning=Cleaning(column, wms[column]))
