"""`GROUP BY GROUPING SETS (...)`, `ROLLUP (...)`, `CUBE (...)` and `GROUPING(e, ...)`, with
PostgreSQL's rows: the `UNION ALL` of one GROUP BY per grouping set (`setops.union_all`).

A GROUP BY's items multiply out into the grouping sets (`a, ROLLUP (b, c)` is the sets (a, b, c),
(a, b), (a)); each set is the query grouped by that set alone, over the same FROM and WHERE (planned
once, under a `Share`, so that a join below is evaluated and keeps its state once). In a set, a
group expression it lacks reads as NULL of its own type outside aggregate calls, as in PostgreSQL,
and `GROUPING(e, ...)` is the constant whose bit is 1 for each argument the set lacks (the last
argument the lowest bit). The empty set `()` is a grand total: one row even over no rows, as there.
Each set's rows carry its branch tag, so two equal sets (`GROUPING SETS ((a), (a))`) give their
rows twice, as PostgreSQL does."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from sqlglot import exp

from sparkwave.core.errors import CatalogError, SqlError
from sparkwave.frontend.plan.aggregates import aggregate
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.scope import Item, Scope
from sparkwave.frontend.plan.setops import MAX_BRANCHES, Planned, distinct_union, union_all
from sparkwave.frontend.rewrite import output_name
from sparkwave.stream.expressions import references
from sparkwave.stream.operator import Operator
from sparkwave.stream.project import Project
from sparkwave.stream.share import Share

_SETS = (exp.GroupingSets, exp.Rollup, exp.Cube)
_PG_TYPE = {"double": "double precision", "timestamptz": "timestamp with time zone",
            "timestamp": "timestamp without time zone"}


def grouping_sets(q: exp.Select) -> bool:
    """Whether `q` groups by more than one set (or asks `GROUPING()`)."""
    group = q.args.get("group")
    return bool(group is not None and any(isinstance(g, _SETS) for g in group.expressions)) or \
        any(g.find_ancestor(exp.Select) is q for g in q.find_all(exp.Grouping))


def grouped_sets(ctx: PlanContext, q: exp.Select, node: Operator, items: list[Item], predicate: str | None
                 ) -> Planned:
    """`q` (its FROM and WHERE planned as `node`, `items`, `predicate`) as one GROUP BY per grouping set."""
    scope = Scope(ctx, items)

    def ident(e: exp.Expr) -> str:  # a group expression by what it computes (`l.g` and `g` alike)
        try:
            return str(scope.resolve(e, "GROUP BY"))
        except (SqlError, CatalogError):
            return e.sql()

    sets = [_distinct(s, ident) for s in _expand(ctx, q)]
    every = _distinct([g for s in sets for g in s], ident)
    distinct = q.args.get("distinct") is not None  # over the union of the sets' rows, as PostgreSQL's
    if distinct:
        q = q.copy()
        q.set("distinct", None)
    if len(sets) == 1 and not distinct:  # only GROUPING(): a plain GROUP BY
        return aggregate(ctx, _for_set(ctx, q, sets[0], every, {}, ident), node, items, predicate)
    if len(sets) > MAX_BRANCHES:
        raise ctx.err(f"GROUP BY makes {len(sets)} grouping sets; at most {MAX_BRANCHES} are supported", "GROUP BY")
    types = {ident(g): ctx.types(node, [("x", scope.resolve(g, "GROUP BY"))], predicate)["x"] for g in every}
    shared = Share(ctx.next_id(), list(node.columns), list(node.key), input=node)  # the FROM's columns, once
    planned = [aggregate(ctx, _for_set(ctx, q, s, every, types, ident), shared, items, predicate) for s in sets]
    readers = {op.id: op for proj, _ in planned for op in proj.walk() if any(i is shared for i in op.inputs)}
    if all(isinstance(op, Project) for op in readers.values()):  # a share prunes nothing: its input keeps
        node.prune(set(node.key).union(*[references(op.predicate, *[e for _, e in op.exprs])  # what the sets read
                                          for op in readers.values() if isinstance(op, Project)]))
        shared.columns = list(node.columns)
    rows = union_all(ctx, planned, "GROUPING SETS")
    return distinct_union(ctx, *rows) if distinct else rows


def _expand(ctx: PlanContext, q: exp.Select) -> list[list[exp.Expr]]:
    """The grouping sets of `q`'s GROUP BY: the product of its items' sets, each set's expressions."""
    group = q.args.get("group")
    factors: list[list[list[exp.Expr]]] = []
    for g in group.expressions if group is not None else []:
        factors.append(_sets_of(ctx, q, g))
        if len(factors) > 1 and _size(factors) > MAX_BRANCHES:
            raise ctx.err(f"GROUP BY makes more than {MAX_BRANCHES} grouping sets", "GROUP BY")
    return [[e for s in combo for e in s] for combo in itertools.product(*factors)] or [[]]


def _size(factors: list[list[list[exp.Expr]]]) -> int:
    n = 1
    for f in factors:
        n *= len(f)
    return n


def _sets_of(ctx: PlanContext, q: exp.Select, g: exp.Expr) -> list[list[exp.Expr]]:
    """The grouping sets one GROUP BY item stands for."""
    if isinstance(g, exp.Rollup):
        units = [_unit(q, e) for e in g.expressions]
        return [[e for u in units[:n] for e in u] for n in range(len(units), -1, -1)]
    if isinstance(g, exp.Cube):
        units = [_unit(q, e) for e in g.expressions]
        if len(units) > 8:
            raise ctx.err(f"CUBE of {len(units)} elements makes {2 ** len(units)} grouping sets; at most 8 elements "
                          "are supported", "CUBE")
        return [[e for u, on in zip(units, mask, strict=True) if on for e in u]
                for mask in itertools.product((True, False), repeat=len(units))]
    if isinstance(g, exp.GroupingSets):
        return [s for e in g.expressions for s in (_sets_of(ctx, q, e) if isinstance(e, _SETS) else [_unit(q, e)])]
    return [_unit(q, g)]


def _unit(q: exp.Select, e: exp.Expr) -> list[exp.Expr]:
    """One element of a grouping set: `(a, b)`, `()`, `(a)` or `a`; a position is its SELECT item."""
    if isinstance(e, exp.Tuple):
        return [x for y in e.expressions for x in _unit(q, y)]
    if isinstance(e, exp.Paren):
        return _unit(q, e.this)
    if isinstance(e, exp.Literal) and not e.is_string and e.name.isdigit():
        idx = int(e.name) - 1
        if 0 <= idx < len(q.expressions):
            item = q.expressions[idx]
            return [(item.unalias() if isinstance(item, exp.Alias) else item).copy()]
    return [e]


def _distinct(exprs: list[exp.Expr], ident: Callable[[exp.Expr], str]) -> list[exp.Expr]:
    return list({ident(e): e for e in exprs}.values())


def _for_set(ctx: PlanContext, q: exp.Select, grouped: list[exp.Expr], every: list[exp.Expr],
             types: dict[str, str], ident: Callable[[exp.Expr], str]) -> exp.Select:
    """`q` grouped by the one set `grouped`: the group expressions it lacks as typed NULLs outside
    aggregate calls, `GROUPING(...)` as its constant."""
    have = {ident(e) for e in grouped}
    absent = {ident(e) for e in every} - have
    out = q.copy()
    out.set("group", exp.Group(expressions=[e.copy() for e in grouped]) if grouped else None)

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Grouping):
            bits = 0
            for arg in node.expressions:
                if ident(arg) not in have and ident(arg) not in absent:
                    raise ctx.err(f"arguments to GROUPING must be grouping expressions of the associated query "
                                  f"level: {arg.sql(dialect='postgres')}", "GROUPING")
                bits = bits * 2 + (ident(arg) in absent)
            return exp.Literal.number(bits)
        if absent and not isinstance(node, exp.Literal) and ident(node) in absent:
            return exp.Cast(this=exp.Null(), to=exp.DataType.build(
                _PG_TYPE.get(t := types[ident(node)], t), dialect="postgres"))
        return node

    items = []
    for i, item in enumerate(out.expressions):  # each keeps its name (`a`, `grouping`) as PostgreSQL's
        name = "grouping" if isinstance(item, exp.Grouping) else output_name(item, i)
        new = _swap_outside_aggs(item, swap)
        items.append(new if isinstance(new, exp.Alias) or output_name(new, i) == name else exp.alias_(new, name))
    out.set("expressions", items)
    if out.args.get("having") is not None:
        out.set("having", _swap_outside_aggs(out.args["having"], swap))
    return out


def _swap_outside_aggs(e: exp.Expr, swap: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """`e` with `swap` applied top-down to every node outside aggregate calls (and their insides kept)."""
    if isinstance(e, exp.AggFunc) and not isinstance(e, exp.Grouping):
        return e
    new = swap(e)
    if new is not e:
        return new
    for k, v in list(e.args.items()):
        if isinstance(v, exp.Expr):
            e.set(k, _swap_outside_aggs(v, swap))
        elif isinstance(v, list):
            e.set(k, [_swap_outside_aggs(x, swap) if isinstance(x, exp.Expr) else x for x in v])
    return e
