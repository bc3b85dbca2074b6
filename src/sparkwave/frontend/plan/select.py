"""One SELECT, as passes over a shared scope: FROM and joins (`joins.py`), WHERE pushed into scans,
then aggregation (`aggregates.py`) or window functions (`windows.py`) and the SELECT list."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.core.schema import column_name_problem
from sparkwave.frontend.plan import project_set, temporal
from sparkwave.frontend.plan.aggregates import agg_calls, aggregate
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.grouping_sets import grouped_sets, grouping_sets
from sparkwave.frontend.plan.joins import FromClause, plan_from, restrict
from sparkwave.frontend.plan.scope import Item, Scope
from sparkwave.frontend.plan.setops import set_operation
from sparkwave.frontend.plan.sources import table_item
from sparkwave.frontend.plan.windows import over
from sparkwave.frontend.rewrite import output_name
from sparkwave.frontend.shape import check_shape
from sparkwave.frontend.subqueries import HIDDEN_PREFIX, JOINED_PREFIX
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan

Outputs = list[tuple[str, str]]  # (output name, internal column)


def select(ctx: PlanContext, q: exp.Expr) -> tuple[Project, Outputs]:
    """`q` as an operator tree whose root projection has its output columns."""
    if isinstance(q, exp.SetOperation):  # UNION / INTERSECT / EXCEPT: each operand planned as a query
        return set_operation(ctx, q, select)
    if not isinstance(q, exp.Select):
        raise ctx.err(f"unsupported query shape {type(q).__name__} in a materialized view; expected SELECT")
    check_shape(ctx.stmt, q)
    project_set.check_placement(ctx, q)
    q_from, later = project_set.split_from(ctx, q)  # FROM t, unnest(...): over the FROM before them
    fc = plan_from(ctx, q_from, lambda t: from_item(ctx, t))
    for j in later:
        fc.node, srf = project_set.join_sets(ctx, fc.node, fc.items, j.this)
        fc.items.append(srf)
    timed, fc.where = temporal.split(fc.where)
    predicate = _where(ctx, fc)
    node, items = fc.node, fc.items
    if timed:  # WHERE ts > NOW() - INTERVAL ...: a temporal filter over what WHERE keeps
        node, predicate = temporal.with_temporal(ctx, node, Scope(ctx, items), predicate, timed)
    aggs = [a for e in q.expressions for a in agg_calls(e)]
    having = q.args.get("having")
    if having is not None:
        aggs += agg_calls(having.this)
    windowed = any(p.find(exp.Window) for p in q.expressions)
    if project_set.has_sets(q):  # SELECT unnest(...): a project set after WHERE, its calls then columns
        q, node, items = project_set.select_sets(ctx, q, node, items, predicate)
        predicate = None
    elif q.args.get("group") or aggs or having is not None or q.args.get("distinct"):
        if windowed:
            raise ctx.err("window functions (OVER ...) with SELECT DISTINCT * are not supported; name the "
                          "columns", "OVER")
        if grouping_sets(q):  # GROUPING SETS / ROLLUP / CUBE / GROUPING(): a union of one GROUP BY per set
            return grouped_sets(ctx, q, node, items, predicate)
        return aggregate(ctx, q, node, items, predicate)
    if windowed:  # after WHERE, before the SELECT list
        q, node = over(ctx, q, node, items, predicate)
        predicate = None
    outputs = select_list(ctx, q, items, fc.star)
    exprs = [(i, sql) for _, i, sql in outputs]
    proj = ctx.project(node, exprs + [(k, f"`{k}`") for k in node.key], predicate, node.key)
    return proj, [(n, i) for n, i, _ in outputs]


def _where(ctx: PlanContext, fc: FromClause) -> str | None:
    """WHERE: single-scan predicates pushed into their scans (only where no outer join can NULL
    them); the rest as the predicate of what is above the joins."""
    scope = Scope(ctx, fc.items)
    rest = []
    for c in fc.where:
        owner = scope.single_item(c)
        if fc.all_inner and owner is not None and isinstance(owner.node, Scan):
            restrict(owner.node, scope.resolve(c, "WHERE"))
        else:
            rest.append(c)
    return " AND ".join(f"({scope.resolve(c, 'WHERE')})" for c in rest) or None


def select_list(ctx: PlanContext, q: exp.Select, items: list[Item], star_list: list[tuple[str, str]] | None = None
                ) -> list[tuple[str, str, str]]:
    """(output name, internal name, Spark SQL) per SELECT item, stars expanded: `*` as
    `star_list` says after USING joins, else every item's columns in FROM order."""
    scope = Scope(ctx, items)
    out: list[tuple[str, str, str]] = []
    for i, proj in enumerate(q.expressions):
        star = proj if isinstance(proj, exp.Star) else (
            proj.this if isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star) else None)
        if star is not None:
            out += _star(ctx, proj, items, star_list)
            continue
        inner = proj.unalias() if isinstance(proj, exp.Alias) else proj
        name = output_name(proj, i)
        if problem := column_name_problem(name):
            raise ctx.err(f"output column name {name!r} {problem}; choose another alias", name)
        out.append((name, ctx.name(name), scope.resolve(inner, f"SELECT item {i + 1}")))
    return out


def _star(ctx: PlanContext, proj: exp.Expr, items: list[Item], star_list: list[tuple[str, str]] | None
          ) -> list[tuple[str, str, str]]:
    qual = proj.table.lower() if isinstance(proj, exp.Column) and proj.table else None
    chosen = [it for it in items if (qual is None and not it.alias.startswith(JOINED_PREFIX)) or it.alias == qual]
    if not chosen:
        raise ctx.err(f"unknown table {qual!r} in {proj.sql()}", qual)
    listed = star_list if qual is None and star_list is not None else [
        (c, f"`{it.cols[c]}`") for it in sorted(chosen, key=lambda it: it.pos) for c in it.order
        if not c.startswith(HIDDEN_PREFIX)]
    return [(c, ctx.name(c), sql) for c, sql in listed]


def from_item(ctx: PlanContext, t: exp.Expr) -> Item:
    """A FROM item: a subquery (planned as its own SELECT), or a table, window or VALUES."""
    if project_set.is_set_item(t):  # FROM generate_series(1, 10) AS g(v): named by its alias already
        return project_set.from_item(ctx, t)
    if isinstance(t, exp.Subquery):
        node, outputs = select(ctx, t.this)
        alias = t.alias.lower() if t.alias else f"_subquery{node.id}"
        item = Item(alias, node, {n: i for n, i in outputs}, [n for n, _ in outputs])
    else:
        item = table_item(ctx, t)
    return item if isinstance(t, exp.Values) else _renamed(ctx, item, t.args.get("alias"))


def _renamed(ctx: PlanContext, item: Item, alias: exp.Expr | None) -> Item:
    """A FROM item under its alias's column list (`AS q(a, b)`), which renames its first columns
    in order, as in PostgreSQL."""
    names = [c.name.lower() for c in alias.columns] if isinstance(alias, exp.TableAlias) and alias.columns else []
    if not names:
        return item
    if len(names) > len(item.order):
        raise ctx.err(f"{item.alias!r} has {len(item.order)} columns available but {len(names)} columns specified",
                      item.alias)
    order = names + item.order[len(names):]
    if len(set(order)) != len(order):
        raise ctx.err(f"column names of {item.alias!r} are not unique: {', '.join(order)}", item.alias)
    cols = {new: item.cols[old] for new, old in zip(order, item.order, strict=True)}
    hidden = {n: i for n, i in item.cols.items() if n not in item.order}  # hidden columns keep their names
    item.cols, item.order = {**hidden, **cols}, order
    return item
