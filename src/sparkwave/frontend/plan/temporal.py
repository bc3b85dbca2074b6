"""Temporal filters in WHERE, as RisingWave has them: a conjunct comparing a timestamp column with
`NOW()` (or `CURRENT_TIMESTAMP`), optionally plus or minus a constant INTERVAL expression (folded:
`INTERVAL '1 day' * 365 * 2000`, `frontend/constants.py`), planned as a `TemporalFilter`
(`stream/temporal_filter.py`). `col > / >= NOW() ...` is a lower bound (rows leave as time passes),
`col < / <= NOW() ...` an upper bound (a delay: rows appear once NOW() passes them); one of each at
most. `col BETWEEN NOW() ... AND NOW() ...` is read as its two bounds. Anywhere else in a
materialized view NOW() is refused, saying where it may be written: it is the epoch's time, and
only a filter on it is maintained as time passes."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.frontend import constants
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.scope import Scope
from sparkwave.stream.expressions import column_ref
from sparkwave.stream.operator import Operator
from sparkwave.stream.temporal_filter import LOWER_OPS, Bound, TemporalFilter

WHERE_TO_WRITE = ("is not allowed in a materialized view outside a temporal filter: a condition of WHERE, joined to "
                  "the others by AND, comparing a timestamp column with NOW() plus or minus a constant INTERVAL, "
                  "e.g. WHERE ts > NOW() - INTERVAL '1 hour' (rows leave as time passes) or WHERE ts <= NOW() (rows "
                  "appear once NOW() passes them)")
_OPS: dict[type[exp.Expr], str] = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


def _now_side(e: exp.Expr) -> int | None:
    """The offset (microseconds) if `e` is NOW() [+|- constant INTERVAL expression], else None."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.CurrentTimestamp):
        return 0
    if isinstance(e, exp.Add | exp.Sub):
        base, step = _now_side(e.this), interval_micros(e.expression)
        if base is not None and step is not None:
            return base + (step if isinstance(e, exp.Add) else -step)
        if isinstance(e, exp.Add):  # INTERVAL '1 hour' + NOW()
            base, step = _now_side(e.expression), interval_micros(e.this)
            if base is not None and step is not None:
                return base + step
    return None


def interval_micros(e: exp.Expr) -> int | None:
    """A constant INTERVAL expression of fixed length ('1 hour', '90' SECOND, '1 day 2 hours',
    INTERVAL '1 day' * 365 * 2000: `constants.interval`) in microseconds; None for anything else
    (months and years have no fixed length) and for NULL."""
    try:
        return constants.interval(e)
    except ValueError:  # NotConstant, or a division by zero: not a temporal filter, NOW() is then refused
        return None


def _column_side(e: exp.Expr) -> tuple[exp.Column, int] | None:
    """(column, shift in microseconds) if `e` is a column [+|- constant INTERVAL]."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Column):
        return e, 0
    if isinstance(e, exp.Add | exp.Sub) and (inner := _column_side(e.this)) is not None:
        step = interval_micros(e.expression)
        if step is not None:
            return inner[0], inner[1] + (step if isinstance(e, exp.Add) else -step)
    return None


def temporal_parts(c: exp.Expr) -> tuple[exp.Column, str, int] | None:
    """(column, operator with the column on its left, offset) if the conjunct `c` is a temporal filter:
    `col [+|- INTERVAL] <op> NOW() [+|- INTERVAL]`, either way round (the column's shift moves to NOW's side)."""
    op = _OPS.get(type(c))
    if op is None:
        return None
    assert isinstance(c, exp.Binary)
    left, right = c.this, c.expression
    if (col := _column_side(left)) is not None and (offset := _now_side(right)) is not None:
        return col[0], op, offset - col[1]
    if (col := _column_side(right)) is not None and (offset := _now_side(left)) is not None:
        return col[0], _FLIP[op], offset - col[1]
    return None


def allowed_now(node: exp.Expr, q: exp.Select) -> bool:
    """Whether `node` (a NOW()) is part of a temporal filter that is a conjunct of `q`'s WHERE (or
    one bound of a BETWEEN conjunct: `ts BETWEEN NOW() AND NOW() + INTERVAL '1 day'`)."""
    where = q.args.get("where")
    if where is None:
        return False
    for c in conjuncts(where.this):
        if not any(n is node for n in c.walk()):
            continue
        if temporal_parts(c) is not None:
            return True
        if _splits(c):
            side = "low" if any(n is node for n in c.args["low"].walk()) else "high"
            return temporal_parts(_half(c, side)) is not None
    return False


def conjuncts(e: exp.Expr) -> list[exp.Expr]:
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    return [e]


def _splits(c: exp.Expr) -> bool:
    """Whether `c` is `x BETWEEN a AND b` with NOW() in a bound: read as `x >= a AND x <= b`."""
    return (isinstance(c, exp.Between) and not c.args.get("symmetric")
            and any(c.args[side].find(exp.CurrentTimestamp) for side in ("low", "high")))


def _half(c: exp.Expr, side: str) -> exp.Expr:
    """One bound of a BETWEEN as its own comparison (copies: `c` stays whole)."""
    op = exp.GTE if side == "low" else exp.LTE
    return op(this=c.this.copy(), expression=c.args[side].copy())


def split(conds: list[exp.Expr]) -> tuple[list[exp.Expr], list[exp.Expr]]:
    """WHERE's conditions as (temporal filters, the others); a BETWEEN with NOW() in a bound is
    split into its two comparisons first."""
    conds = [h for c in conds for h in ([_half(c, "low"), _half(c, "high")] if _splits(c) else [c])]
    temporal = [c for c in conds if temporal_parts(c) is not None]
    return temporal, [c for c in conds if temporal_parts(c) is None]


def temporal_filter(ctx: PlanContext, node: Operator, scope: Scope, conds: list[exp.Expr]) -> TemporalFilter:
    """The temporal filter of WHERE's temporal conditions `conds` over `node` (at most one lower and
    one upper bound, on one timestamp column)."""
    column: str | None = None
    lower = upper = None
    for c in conds:
        parts = temporal_parts(c)
        assert parts is not None, "BUG: not a temporal filter"
        col, op, offset = parts
        name = column_ref(scope.resolve(col, "WHERE"))
        if name is None or name not in node.names:
            raise ctx.err(f"a temporal filter compares a column of the query's FROM with NOW(): {c.sql()}", "NOW")
        kind = node.type_of(name)
        if kind not in ("timestamptz", "timestamp"):
            raise ctx.err(f"a temporal filter compares a timestamp column with NOW(); {col.sql()} is {kind}: "
                          f"cast it in a subquery first", "NOW")
        if column is not None and name != column:
            raise ctx.err("the temporal filters of one WHERE must all compare the same column with NOW(); filter "
                          "the other column in an enclosing query", "NOW")
        column = name
        if op in LOWER_OPS:
            if lower is not None:
                raise ctx.err("a WHERE may have one lower bound on NOW() (col > NOW() - ...); keep the tighter one",
                              "NOW")
            lower = Bound(op, offset)
        else:
            if upper is not None:
                raise ctx.err("a WHERE may have one upper bound on NOW() (col <= NOW() + ...); keep the tighter one",
                              "NOW")
            upper = Bound(op, offset)
    assert column is not None, "BUG: no temporal condition"
    return TemporalFilter(ctx.next_id(), list(node.columns), list(node.key), input=node, column=column,
                          lower=lower, upper=upper)


def with_temporal(ctx: PlanContext, node: Operator, scope: Scope, predicate: str | None,
                  conds: list[exp.Expr]) -> tuple[Operator, str | None]:
    """`node` under WHERE's temporal filter (`conds`), the other conditions (`predicate`) applied
    first, so that its state holds only rows that pass them; returns (node, predicate left: none)."""
    if predicate is not None:
        node = ctx.project(node, [(n, f"`{n}`") for n in node.names], predicate, list(node.key))
    return temporal_filter(ctx, node, scope, conds), None
