"""Aggregates over a group's rows in an order: `first_value(x ORDER BY y)` / `last_value(x ORDER BY
y)` (RisingWave's), and PostgreSQL's ordered-set aggregates `percentile_cont(f)`, `percentile_disc(f)`
and `mode()` `WITHIN GROUP (ORDER BY x)`. As `string_agg` (`string_aggs.py`): each row of a group
carries its group's value, computed by window functions over the group (an `OverWindow`, whose
state is the group's rows: exact under inserts, updates and deletes, in all three evaluations),
and the aggregate takes its `max`. A group's value is computed again whenever one of its rows
changes.

The values are PostgreSQL's: NULL ordering keys sort last ascending and first descending;
first/last_value keep a NULL `x` (the first row's value, whatever it is); rows tied in the order
are taken in the row key's order (PostgreSQL leaves it unspecified). The ordered-set aggregates'
values are `frontend/ordered_sets.py`'s, over the group's values collected by a window."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.frontend.ordered_sets import ordered_set_value
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.scope import Item
from sparkwave.frontend.plan.windows import over
from sparkwave.frontend.subqueries import HIDDEN_PREFIX
from sparkwave.stream.operator import Operator

_ORDERED_SETS = (exp.PercentileCont, exp.PercentileDisc, exp.Mode)


def ordered_calls(e: exp.Expr) -> list[exp.Expr]:
    """The ordered aggregates of `e` (not window functions): first/last_value with an ORDER BY
    argument, and `... WITHIN GROUP (...)`."""
    return [c for c in e.find_all(exp.FirstValue, exp.LastValue, exp.WithinGroup) if not c.find_ancestor(exp.Window)
            and not isinstance(c.parent, exp.Window) and not isinstance(c.parent, exp.WithinGroup)]


def ordered_aggs(ctx: PlanContext, q: exp.Select, groups: list[exp.Expr], node: Operator, items: list[Item],
                 predicate: str | None) -> tuple[exp.Select, Operator]:
    """`q` with each ordered aggregate a `max` of its per-row value, and the node with those values."""
    q = q.copy()
    having = q.args.get("having")
    calls = [c for e in [*q.expressions, *([having.this] if having is not None else [])] for c in ordered_calls(e)]
    per_row = [exp.alias_(_per_row(ctx, call, groups), f"{HIDDEN_PREFIX}oa{j}") for j, call in enumerate(calls)]
    evaluated, node = over(ctx, exp.select(*per_row), node, items, predicate)
    for call, e in zip(calls, evaluated.expressions, strict=True):
        new: exp.Expr = exp.Max(this=e.unalias().copy())
        if isinstance(call.parent, exp.Select) and call.arg_key == "expressions":  # PostgreSQL's name
            fn = call.this if isinstance(call, exp.WithinGroup) else call
            new = exp.alias_(new, fn.sql_name().lower() if isinstance(fn, exp.Func) else "?column?")
        call.replace(new)
    return q, node


def _per_row(ctx: PlanContext, call: exp.Expr, groups: list[exp.Expr]) -> exp.Expr:
    if isinstance(call.parent, exp.Filter):
        raise ctx.err(f"FILTER on {call.sql(dialect='postgres')} is not supported; filter the rows in a subquery "
                      "in FROM", "FILTER")
    if isinstance(call, exp.FirstValue | exp.LastValue):
        return _first_last(ctx, call, groups)
    assert isinstance(call, exp.WithinGroup)
    fn, order = call.this, call.expression
    name = fn.sql_name().lower() if isinstance(fn, exp.Func) else fn.sql(dialect="postgres")
    if not isinstance(fn, _ORDERED_SETS):
        raise ctx.err(f"{name}(...) WITHIN GROUP is not supported; supported: percentile_cont, percentile_disc, "
                      "mode", "WITHIN GROUP")
    keys = order.expressions if isinstance(order, exp.Order) else []
    if len(keys) != 1:
        raise ctx.err(f"{name}() WITHIN GROUP takes exactly one ORDER BY expression", "WITHIN GROUP")
    key = keys[0]
    x, desc = key.this, bool(key.args.get("desc"))
    try:
        return ordered_set_value(fn, x, desc, lambda f: _window(f, groups))
    except ValueError as e:
        raise ctx.err(str(e), name) from None


def _first_last(ctx: PlanContext, call: exp.FirstValue | exp.LastValue, groups: list[exp.Expr]) -> exp.Expr:
    name = call.sql_name().lower()
    arg = call.this
    if not isinstance(arg, exp.Order) or not arg.expressions:
        raise ctx.err(f"{name}(x) as an aggregate needs an order: {name}(x ORDER BY y)", name)
    if isinstance(arg.this, exp.Distinct):
        raise ctx.err(f"{name}(DISTINCT ...) is not supported", name)
    fn = type(call)(this=arg.this.copy())
    return _window(fn, groups, exp.Order(expressions=[o.copy() for o in arg.expressions]))


def _window(fn: exp.Func, groups: list[exp.Expr], order: exp.Order | None = None) -> exp.Window:
    """`fn` over the whole group: ties in `order` taken in the row key's order (`windows._window`)."""
    return exp.Window(this=fn, partition_by=[g.copy() for g in groups], order=order,
                      spec=exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING",
                                          end="UNBOUNDED", end_side="FOLLOWING"))
