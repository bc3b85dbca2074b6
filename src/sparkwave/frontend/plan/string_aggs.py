"""`string_agg(x, sep [ORDER BY ...])`: each row of a group carries its group's string (window
functions over the group, below the aggregate), and the aggregate takes its `max`. The string of a
group is computed again whenever one of its rows changes."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.scope import Item
from sparkwave.frontend.plan.windows import over
from sparkwave.frontend.subqueries import HIDDEN_PREFIX
from sparkwave.stream.operator import Operator


def string_aggs(ctx: PlanContext, q: exp.Select, groups: list[exp.Expr], node: Operator, items: list[Item],
                predicate: str | None) -> tuple[exp.Select, Operator]:
    """`q` with each `string_agg` call a `max` of its per-row string, and the node with those strings."""
    q = q.copy()
    having = q.args.get("having")
    calls = [c for e in [*q.expressions, *([having.this] if having is not None else [])]
             for c in e.find_all(exp.GroupConcat)]
    per_row = [_per_row(ctx, call, groups, j) for j, call in enumerate(calls)]
    evaluated, node = over(ctx, exp.select(*per_row), node, items, predicate)
    for call, e in zip(calls, evaluated.expressions, strict=True):
        call.replace(exp.Max(this=e.unalias().copy()))
    return q, node


def _per_row(ctx: PlanContext, call: exp.GroupConcat, groups: list[exp.Expr], j: int) -> exp.Expr:
    """The group's string on each of its rows: NULL if no value is non-NULL, else the values joined."""
    arg = call.this
    value, order = (arg.this, list(arg.expressions)) if isinstance(arg, exp.Order) else (arg, [])
    if isinstance(value, exp.Distinct):
        raise ctx.err("string_agg(DISTINCT ...) is not supported; take the distinct values in a subquery "
                      "first", "string_agg")
    sep = call.args.get("separator")
    if sep is None:
        raise ctx.err("string_agg takes a value and a delimiter: string_agg(x, ',')", "string_agg")

    def window(fn: exp.Func) -> exp.Window:
        return exp.Window(this=fn, partition_by=[g.copy() for g in groups],
                          order=exp.Order(expressions=[o.copy() for o in order]) if order else None,
                          spec=exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING",
                                              end="UNBOUNDED", end_side="FOLLOWING"))

    joined = exp.Anonymous(this="array_join", expressions=[
        window(exp.Anonymous(this="collect_list", expressions=[exp.cast(value.copy(), "text")])), sep.copy()])
    none = exp.EQ(this=window(exp.Count(this=value.copy())), expression=exp.Literal.number(0))
    return exp.alias_(exp.Case(ifs=[exp.If(this=none, true=exp.Null())], default=joined), f"{HIDDEN_PREFIX}sa{j}")
