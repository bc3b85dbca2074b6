"""Planning `a ASOF [LEFT] JOIN b ON a.k = b.k AND a.ts >= b.ts` (RisingWave's ASOF join): its
one inequality between a column of each side taken out of the ON clause's conditions, the two
time columns brought to one type, and the rows whose time is NULL kept from matching (filtered on
the right and on an inner join's left; on an ASOF LEFT join's left, the first join key set to NULL,
so the row passes NULL-padded). The equalities are the join's keys, as for any join
(`frontend/plan/joins.py`); the operator is `stream/asof_join.py`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from sparkwave.core.schema import SqlType
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.scope import Item, Scope
from sparkwave.stream.asof_join import FLIPPED, Inequality
from sparkwave.stream.expressions import Expr
from sparkwave.stream.operator import Operator
from sparkwave.stream.scan import Scan

_OPS: dict[type[exp.Expr], Inequality] = {exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
EXAMPLE = "a ASOF JOIN b ON a.k = b.k AND a.ts >= b.ts"


@dataclass(frozen=True)
class AsofCondition:
    """`left <inequality> right`, in the two sides' internal column names."""

    inequality: Inequality
    left: str
    right: str


def asof_kind(ctx: PlanContext, j: exp.Join) -> Literal["inner", "left"]:
    """The join type of an ASOF join ("inner" or "left"), refusing what RisingWave does not have."""
    side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        raise ctx.err(f"ASOF {side or kind} JOIN is not supported: there are ASOF JOIN and ASOF LEFT JOIN (swap the "
                      f"two sides for a right one), as in {EXAMPLE}", "ASOF")
    if not j.args.get("on"):
        raise ctx.err(f"ASOF JOIN needs an ON clause with its equalities and one inequality, as in {EXAMPLE}", "ASOF")
    return "left" if side == "LEFT" else "inner"


def take_inequality(ctx: PlanContext, items: list[Item], right: Item, both: list[exp.Expr]) -> AsofCondition:
    """The ASOF join's inequality among `both` (the ON clause's conditions on both sides), removed
    from it; anything else there is refused, saying what the clause takes."""
    found = [c for c in both if type(c) in _OPS]
    rest = [c for c in both if type(c) not in _OPS]
    if rest:
        Scope(ctx, [*items, right]).resolve(rest[0], "ON")  # an unknown column is named as such
        raise ctx.err(f"unsupported condition {rest[0].sql(dialect='postgres')} in the ON clause of an ASOF JOIN: "
                      "besides equalities between the two sides and conditions on one side, it takes exactly one "
                      f"inequality (<, <=, >, >=) between a column of each side, as in {EXAMPLE}", "ON")
    if len(found) != 1:
        what = "none" if not found else f"{len(found)}: " + " AND ".join(c.sql(dialect="postgres") for c in found)
        raise ctx.err(f"ASOF JOIN needs exactly one inequality (<, <=, >, >=) between a column of each side in its "
                      f"ON clause, as in {EXAMPLE}; it has {what}", "ON" if found else "ASOF")
    c = found[0]
    both.remove(c)
    left, other = Scope(ctx, items), Scope(ctx, [right])
    for a, b, op in ((c.this, c.expression, _OPS[type(c)]), (c.expression, c.this, FLIPPED[_OPS[type(c)]])):
        if left.owners(a) and not other.owners(a) and other.owners(b) and not left.owners(b):
            for operand in (a, b):
                if not isinstance(operand, exp.Column):
                    raise ctx.err(f"the ASOF JOIN inequality {c.sql(dialect='postgres')} must compare a column of "
                                  f"each side; compute {operand.sql(dialect='postgres')} as a column of its side in a "
                                  "subquery and compare that column", "ON")
            return AsofCondition(op, left.internal(a, "ON"), other.internal(b, "ON"))
    raise ctx.err(f"the ASOF JOIN inequality {c.sql(dialect='postgres')} must compare a column of the left side with "
                  f"one of the right side, as in {EXAMPLE}", "ON")


def one_time_type(ctx: PlanContext, left: Operator, right: Operator, cond: AsofCondition
                  ) -> tuple[Operator, Operator, AsofCondition]:
    """The two sides with their time columns of one type: numeric ones compared as the wider (as
    join keys are); other differing types refused."""
    ta, tb = left.type_of(cond.left), right.type_of(cond.right)
    if ta == tb:
        return left, right, cond
    if not (SqlType(ta).is_numeric and SqlType(tb).is_numeric):
        raise ctx.err(f"the ASOF JOIN inequality compares a {ta} with a {tb}; cast one side's column to the "
                      "other's type in a subquery", "ON")
    common = ctx.oracle.common_type(ta, tb)
    lt, rt = cond.left, cond.right
    if ta != common:
        lt = ctx.name("asof_time")
        left = ctx.passthrough(left, (lt, f"CAST(`{cond.left}` AS {SqlType(common).spark})"))
    if tb != common:
        rt = ctx.name("asof_time")
        right = ctx.passthrough(right, (rt, f"CAST(`{cond.right}` AS {SqlType(common).spark})"))
    return left, right, AsofCondition(cond.inequality, lt, rt)


def timed_rows(ctx: PlanContext, node: Operator, time: str, keys: list[str], *, preserved: bool
               ) -> tuple[Operator, list[str]]:
    """A side (and its join keys) whose rows with a NULL time match nothing: filtered out, or on
    the preserved side of ASOF LEFT, kept with their first join key NULL (padded by the join)."""
    if preserved:
        gated = ctx.name("asof_key")
        return ctx.passthrough(node, (gated, f"CASE WHEN `{time}` IS NOT NULL THEN `{keys[0]}` END")), \
            [gated, *keys[1:]]
    predicate = f"`{time}` IS NOT NULL"
    if isinstance(node, Scan):  # pushed into the scan, as `joins.restrict` does
        node.predicate = Expr.of_text(predicate if node.predicate is None else f"({node.predicate}) AND ({predicate})")
        return node, keys
    return ctx.passthrough(node, predicate=predicate), keys
