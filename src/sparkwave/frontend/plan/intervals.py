"""Interval joins: `a.k = b.k AND a.ts BETWEEN b.ts - INTERVAL '1' MINUTE AND b.ts + INTERVAL '1' MINUTE`
(or the same with `>=` / `<=`, `>` / `<`). The range conditions stay what they are, the join's
residual predicate (applied to its output: exact). What this adds is their bound on the two times,
`lower <= a.ts - b.ts <= upper` (constants in the column's units: microseconds for timestamps), which
the planner records with the join (`stream/join.py: Interval`) together with how each time column
derives its watermark (`stream/watermark.py: derive`): a left row can no longer match once the right
side's watermark passes `a.ts - lower`, a right row once the left side's passes `b.ts + upper`, so
each side's state is cleaned below the other side's watermark shifted by the bound."""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from sparkwave.core.errors import SparkwaveError
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.join_words import MICROS as _MICROS
from sparkwave.frontend.plan.join_words import TIMES as _TIMES
from sparkwave.frontend.plan.scope import Item, Scope
from sparkwave.stream.join import Bound, Interval
from sparkwave.stream.join_ranges import Op, Range
from sparkwave.stream.operator import Operator
from sparkwave.stream.watermark import Declared, Derivation, derive

_FLIP: dict[Op, Op] = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_LOOSE: dict[Op, Op] = {"<": "<=", "<=": "<=", ">": ">=", ">=": ">="}


def interval_of(ctx: PlanContext, items: list[Item], right: Item, both: list[exp.Expr], left_node: Operator,
                right_node: Operator) -> Interval | None:
    """The bound the conditions `both` put on a left time minus a right time, with the two columns'
    watermark derivations; None if they bound no such pair. `both`: the ON clause's conditions on
    both sides of an inner join, and WHERE's (below only inner joins, a WHERE condition drops every
    output row that fails it just as ON does; those on other items are passed over)."""
    left, other = Scope(ctx, items), Scope(ctx, [right])
    found: dict[tuple[str, str], list[int | None]] = {}
    for c in both:
        for op, a, b in _comparisons(c):
            ta, tb = _term(ctx, left, a), _term(ctx, other, b)
            if ta is None or tb is None:  # written the other way round: b op' a
                ta, tb, op = _term(ctx, left, b), _term(ctx, other, a), _FLIP[op]
            if ta is None or tb is None or not _same_units(left_node.type_of(ta[0]), right_node.type_of(tb[0])):
                continue
            # a + x  (>= | <=)  b + y   <=>   a - b  (>= | <=)  y - x
            bounds = found.setdefault((ta[0], tb[0]), [None, None])
            at = 0 if op == ">=" else 1
            value = tb[1] - ta[1]
            old = bounds[at]
            bounds[at] = value if old is None else max(old, value) if at == 0 else min(old, value)
    if not found:
        return None
    wms = derive(left_node, _declared(ctx)), derive(right_node, _declared(ctx))
    return Interval(_best(found, 0, wms[1], lambda pair: pair[1]), _best(found, 1, wms[0], lambda pair: pair[0]))


def outer_cleaning(interval: Interval | None, join_type: str) -> Interval | None:
    """The bounds an outer join may clean by: only a preserved side's (a left row of a LEFT join no
    right row still to come can match is final). A row of a NULL-padded side decides whether the
    other side's rows it matched are padded: dropped while one of them is kept, a later match of
    that row would retract a padding row that was never there."""
    if interval is None or join_type == "full":
        return None
    lower = interval.lower if join_type == "left" else None  # the lower bound cleans the left side
    upper = interval.upper if join_type == "right" else None
    return Interval(lower, upper) if lower is not None or upper is not None else None


def _best(found: dict[tuple[str, str], list[int | None]], at: int, marks: dict[str, Derivation],
          other: Callable[[tuple[str, str]], str]) -> Bound | None:
    """The lower (`at` 0) or upper (1) bound to clean by: of a pair whose other column has a
    watermark if there is one, else the first."""
    pairs = [(pair, b[at]) for pair, b in found.items() if b[at] is not None]
    if not pairs:
        return None
    (left, right), value = next((p for p in pairs if other(p[0]) in marks), pairs[0])
    assert value is not None
    return Bound(left, right, value, marks.get(other((left, right))))


def outer_ranges(ctx: PlanContext, items: list[Item], right: Item, conds: list[exp.Expr], left_node: Operator,
                 right_node: Operator) -> list[Range] | None:
    """An outer join's ON conditions on both sides as ranges between a time of each side
    (`stream/join_ranges.py`), or None unless every one is such a range (BETWEEN, <, <=, >, >= of a
    column plus or minus a constant interval; whole days are not constant for timestamptz)."""
    left, other = Scope(ctx, items), Scope(ctx, [right])
    out: list[Range] = []
    for c in conds:
        comps = _comparisons(c, strict=True)
        if not comps:
            return None
        for op, a, b in comps:
            ta, tb = _term(ctx, left, a), _term(ctx, other, b)
            if ta is None or tb is None:
                ta, tb, op = _term(ctx, left, b), _term(ctx, other, a), _FLIP[op]
            if ta is None or tb is None or not _same_units(left_node.type_of(ta[0]), right_node.type_of(tb[0])):
                return None
            days = [n for n in (ta[1], tb[1]) if n and n % _MICROS["day"] == 0]
            if days and "timestamptz" in (left_node.type_of(ta[0]), right_node.type_of(tb[0])):
                return None  # a day of a zoned time is not always 24 hours
            out.append((ta[0], op, tb[0], tb[1] - ta[1]))  # a + x op b + y  <=>  a op b + (y - x)
    return out


def _declared(ctx: PlanContext) -> Callable[[str], Declared | None]:
    def of(name: str) -> Declared | None:
        try:
            return Declared.of(ctx.relation(name).definition or {})
        except (SparkwaveError, AttributeError):
            return None
    return of


def _comparisons(c: exp.Expr, *, strict: bool = False) -> list[tuple[Op, exp.Expr, exp.Expr]]:
    """`c` as comparisons `a op b`: `>=` / `<=` only unless `strict` (strictness does not change a
    bound; it does change which rows an outer join matches)."""
    if isinstance(c, exp.Between) and not c.args.get("symmetric"):
        return [(">=", c.this, c.args["low"]), ("<=", c.this, c.args["high"])]
    ops: tuple[tuple[type[exp.Expr], Op], ...] = ((exp.GT, ">"), (exp.GTE, ">="), (exp.LT, "<"), (exp.LTE, "<="))
    for cls, op in ops:
        if isinstance(c, cls):
            return [(op if strict else _LOOSE[op], c.this, c.expression)]
    return []


def _term(ctx: PlanContext, scope: Scope, e: exp.Expr) -> tuple[str, int] | None:
    """`e` as (a column of `scope`, its internal name, plus a constant offset), or None."""
    e = e.unnest()
    if isinstance(e, exp.Column):
        if not scope.owners(e):
            return None
        try:
            return scope.internal(e, "ON"), 0
        except SparkwaveError:  # ambiguous or merged by USING: the join's own planning names the problem
            return None
    if isinstance(e, exp.Add | exp.Sub):
        base, offset = _term(ctx, scope, e.this), _constant(e.expression)
        if base is None and isinstance(e, exp.Add):  # INTERVAL ... + b.ts
            base, offset = _term(ctx, scope, e.expression), _constant(e.this)
        if base is None or offset is None:
            return None
        return base[0], base[1] + (offset if isinstance(e, exp.Add) else -offset)
    return None


def _constant(e: exp.Expr) -> int | None:
    """An interval literal in microseconds, or an integer literal; None for anything else (months,
    expressions)."""
    e = e.unnest()
    if isinstance(e, exp.Literal) and not e.is_string and re.fullmatch(r"-?\d+", e.name):
        return int(e.name)
    if not isinstance(e, exp.Interval):
        return None
    unit = e.args.get("unit")
    text = f"{e.this.name if e.this is not None else ''} {unit.name if unit is not None else ''}".strip().lower()
    m = re.fullmatch(r"(-?\d+)\s*([a-z]+?)s?", text)
    if m is None or m.group(2) not in _MICROS:
        return None
    return int(m.group(1)) * _MICROS[m.group(2)]


def _same_units(a: str, b: str) -> bool:
    """Two time columns (an interval join is over event times; integer times, not recognised, stay a
    plain residual predicate)."""
    return a in _TIMES and b in _TIMES

