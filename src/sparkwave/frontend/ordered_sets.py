"""PostgreSQL's ordered-set aggregates `percentile_cont(f)`, `percentile_disc(f)` and `mode()`
`WITHIN GROUP (ORDER BY x)` as Spark expressions over an aggregate of the group's values: for an
MV, that aggregate is a window over the group (`plan/ordered_aggs.py`); for a query, a plain one
(`pg_functions.py`). Spark's namesakes differ (sqlglot writes percentile_cont as Spark's
`percentile_approx`; Spark's own interpolation rounds differently), so both compute PostgreSQL's
definition from the sorted values:

- percentile_cont: the input read as double precision; at position `f * (n - 1)` (double) the
  value there, or `lo + (pos - floor(pos)) * (hi - lo)` between two (PostgreSQL 16+'s lerp);
- percentile_disc: the `max(1, ceil(f * n))`-th value (`f * n` in double precision, as
  PostgreSQL's percentile_disc_final), in the ORDER BY's direction;
- mode: Spark's `mode(x, true)`, the smallest of the most frequent values, which is PostgreSQL's
  mode_final for ascending order (it keeps the first value it meets with the highest count).
NULLs are skipped; no values give NULL."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from sparkwave.frontend import constants

Aggregate = Callable[[exp.Func], exp.Expr]  # an aggregate call over the group's rows (a window, or itself)


def ordered_set_value(fn: exp.Expr, x: exp.Expr, desc: bool, over: Aggregate) -> exp.Expr:
    """The value of `fn() WITHIN GROUP (ORDER BY x [DESC])`; ValueError says what is not supported."""
    if isinstance(fn, exp.Mode):
        if desc:
            raise ValueError("mode() WITHIN GROUP (ORDER BY x DESC) is not supported; write ORDER BY x (the "
                             "smallest of the most frequent values)")
        return over(exp.Anonymous(this="mode", expressions=[x.copy(), exp.true()]))
    if not isinstance(fn, exp.PercentileCont | exp.PercentileDisc):
        raise ValueError(f"{fn.sql(dialect='postgres')} WITHIN GROUP is not supported; supported: percentile_cont, "
                         "percentile_disc, mode")
    name = fn.sql_name().lower()
    f = fraction(fn.this, name)
    cont = isinstance(fn, exp.PercentileCont)
    values = exp.Anonymous(this="sort_array", expressions=[
        over(exp.Anonymous(this="collect_list", expressions=[exp.cast(x.copy(), "double") if cont else x.copy()])),
        *([exp.false()] if desc else [])])  # ascending unwritten: a stored plan reads back the same
    n = exp.Anonymous(this="size", expressions=[values])
    if f is None:  # a NULL fraction: NULL, typed as a value would be (a CASE whose one branch never holds)
        first = exp.Anonymous(this="element_at", expressions=[values.copy(), exp.Literal.number(1)])
        return exp.Case(ifs=[exp.If(this=exp.LT(this=n.copy(), expression=exp.Literal.number(0)), true=first)])
    value = _cont(values, n, f) if cont else _disc(values, n, f)
    return exp.Case(ifs=[exp.If(this=exp.EQ(this=n.copy(), expression=exp.Literal.number(0)), true=exp.Null())],
                    default=value)


def _disc(values: exp.Expr, n: exp.Expr, f: exp.Expr) -> exp.Expr:
    at = exp.Anonymous(this="greatest", expressions=[exp.Literal.number(1), exp.cast(exp.Anonymous(
        this="ceil", expressions=[exp.Mul(this=f.copy(), expression=exp.cast(n.copy(), "double"))]), "int")])
    return exp.Anonymous(this="element_at", expressions=[values.copy(), at])


def _cont(values: exp.Expr, n: exp.Expr, f: exp.Expr) -> exp.Expr:
    # in double (exact below 2^52): integer arithmetic's translation would depend on how Spark types a window call
    one = exp.cast(exp.Literal.string("1"), "double")
    pos = exp.paren(exp.Mul(this=f.copy(), expression=exp.paren(exp.Sub(this=exp.cast(n.copy(), "double"),
                                                                         expression=one.copy()))))
    below = exp.Anonymous(this="floor", expressions=[pos.copy()])
    above = exp.Anonymous(this="ceil", expressions=[pos.copy()])

    def at(rounded: str) -> exp.Expr:  # the (1-based) value at floor / ceil of pos, its index computed in double
        index = exp.Anonymous(this=rounded, expressions=[exp.Add(this=pos.copy(), expression=one.copy())])
        return exp.Anonymous(this="element_at", expressions=[values.copy(), exp.cast(index, "int")])

    lo, hi = at("floor"), at("ceil")
    lerp = exp.Add(this=lo.copy(), expression=exp.Mul(this=exp.paren(exp.Sub(this=pos.copy(), expression=below.copy())),
                                                      expression=exp.paren(exp.Sub(this=hi, expression=lo.copy()))))
    return exp.Case(ifs=[exp.If(this=exp.EQ(this=below, expression=above), true=lo)], default=lerp)


def fraction(f: exp.Expr | None, name: str) -> exp.Expr | None:
    """A percentile's fraction: a constant expression (folded: `0.2 + 0.3`) between 0 and 1, as a
    double; None for NULL (PostgreSQL's percentile of a NULL fraction is NULL)."""
    try:
        value = constants.number(f)
    except constants.NotConstant:
        raise ValueError(f"{name}'s fraction must be a numeric constant between 0 and 1 (one fraction, not an array), "
                         f"got {f.sql(dialect='postgres') if f is not None else 'none'}") from None
    if value is None:
        return None
    if not 0 <= value <= 1:
        raise ValueError(f"percentile value {value} is not between 0 and 1 in {name}")
    return exp.cast(exp.Literal.string(repr(float(value))), "double")
