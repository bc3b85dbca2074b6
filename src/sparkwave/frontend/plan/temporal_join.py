"""`[LEFT] JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k`: a process-time temporal join
(`stream/temporal_join.py`), as RisingWave has it. The table side must be a table with a primary key
that the ON clause's equalities cover (each stream row meets at most one of its rows); ON may also
restrict the stream side. Anything else is refused saying what to write."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.proctime import SHAPE, is_proctime
from sparkwave.frontend.plan.scope import Item
from sparkwave.stream.expressions import column_ref
from sparkwave.stream.operator import Operator
from sparkwave.stream.scan import Scan
from sparkwave.stream.temporal_join import TemporalJoin, TemporalJoinType

if TYPE_CHECKING:
    from sparkwave.frontend.plan.joins import FromClause


def is_temporal(j: exp.Join) -> bool:
    return isinstance(j.this, exp.Table) and j.this.args.get("version") is not None


def _append_only(ctx: PlanContext, node: Operator) -> bool:
    """Whether the stream side never retracts a row: scans and projections of append-only relations."""
    return node.stateless and all(ctx.relation(u).schema.append_only for u in node.upstreams())


def plan_temporal_join(ctx: PlanContext, fc: FromClause, j: exp.Join, right: Item) -> None:
    """`fc` (a `joins.FromClause`) joined with `right`, the table read as of each stream row's arrival."""
    from sparkwave.frontend.plan.joins import _split, on_side  # joins.py hooks this module in

    if not is_proctime(j.this.args.get("version")):
        raise ctx.err(f"FOR SYSTEM_TIME AS OF is supported as a process-time temporal join only: {SHAPE}", "FOR")
    side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER") or j.args.get("method") or \
            j.args.get("using") or not j.args.get("on"):
        raise ctx.err(f"a temporal join is written {SHAPE} (inner or LEFT, with ON)", "FOR")
    node, table = fc.node, right.node
    rel = ctx.relation(table.relation) if isinstance(table, Scan) else None
    if not isinstance(table, Scan) or table.window is not None or rel is None or rel.kind != "table":
        raise ctx.err(f"FOR SYSTEM_TIME AS OF PROCTIME() reads a table: {SHAPE}", "FOR")
    key = [c for c in rel.schema.key if c != "_row_id"]
    if not key or rel.schema.append_only:
        raise ctx.err(f"table {rel.name!r} has no primary key: a temporal join looks its rows up by their primary "
                      f"key, which the ON clause's equalities must cover ({SHAPE})", "FOR")
    split = _split(ctx, fc.items, right, _conjuncts(j.args["on"]))
    names = {n: column_ref(e) for n, e in table.exprs}
    covered = {names.get(r) for r in split.rk}
    if missing := [k for k in key if k not in covered]:
        raise ctx.err(f"a temporal join's ON clause must equate a column of the stream with each column of "
                      f"{rel.name!r}'s primary key ({', '.join(key)}); missing: {', '.join(missing)}", "ON")
    if split.both or split.on_right or split.null_safe:
        bad = (split.both or split.on_right)
        what = bad[0].sql(dialect="postgres") if bad else "IS NOT DISTINCT FROM"
        raise ctx.err(f"unsupported condition {what} in a temporal join's ON clause: besides the equalities with "
                      f"the table's key, ON may restrict the stream's rows; filter the joined rows in WHERE", "ON")
    for a, b in zip(split.lk, split.rk, strict=True):
        if node.type_of(a) != table.type_of(b):
            raise ctx.err(f"temporal join key types differ: {node.type_of(a)} and {table.type_of(b)} "
                          f"({rel.name}.{names[b]}); cast the stream's column in a subquery", "ON")
    jtype: TemporalJoinType = "left" if side == "LEFT" else "inner"
    node, lk = on_side(ctx, node, split.on_left, fc.items, split.lk, preserved=jtype == "left")
    fc.node = TemporalJoin(ctx.next_id(), node.columns + table.columns, list(node.key), left=node, right=table,
                           join_type=jtype, left_keys=lk, right_keys=split.rk, append_only=_append_only(ctx, node))
    fc.all_inner = False  # WHERE on the table's columns applies to the joined rows, never inside the lookup
    right.nullable = right.nullable or jtype == "left"
    fc.items.append(right)


def _conjuncts(e: exp.Expr) -> list[exp.Expr]:
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]
