"""GROUP BY, aggregate calls, HAVING and SELECT DISTINCT: a projection of the group expressions
and aggregate arguments, an `Aggregate`, and a projection of the SELECT list over its groups and
results. A decimal `sum` / `avg` is exact (`decimals.py`); `string_agg` is window functions below
the aggregate (`string_aggs.py`)."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.core.errors import CatalogError, SqlError
from sparkwave.core.schema import SqlType, column_name_problem
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.decimals import decimal_avg, decimal_parts, decimal_scale, decimal_sum
from sparkwave.frontend.plan.ordered_aggs import ordered_aggs, ordered_calls
from sparkwave.frontend.plan.scope import Item, Scope
from sparkwave.frontend.plan.string_aggs import string_aggs
from sparkwave.frontend.rewrite import output_name
from sparkwave.frontend.subqueries import HIDDEN_PREFIX, JOINED_PREFIX
from sparkwave.stream.aggregate import Agg, Aggregate, sum_type
from sparkwave.stream.operator import Operator
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan

_AGGS = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
Outputs = list[tuple[str, str]]  # (output name, internal column)


def agg_calls(e: exp.Expr) -> list[exp.AggFunc]:
    """The aggregate calls of `e` (not those a window function computes over its partition)."""
    return [a for a in e.find_all(exp.AggFunc) if not a.find_ancestor(exp.Window)]


def _is_star(proj: exp.Expr) -> bool:
    return isinstance(proj, exp.Star) or (isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star))


def group_expressions(ctx: PlanContext, q: exp.Select) -> tuple[list[exp.Expr], exp.Expr | None]:
    """The GROUP BY expressions (positions read as SELECT items), and the DISTINCT left to apply
    over the groups (None where the DISTINCT is itself the grouping)."""
    distinct = q.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise ctx.err("unsupported DISTINCT ON in a materialized view: it needs a group top-n, which is not "
                      "supported", "DISTINCT ON")
    group_exprs: list[exp.Expr] = []
    if q.args.get("group"):
        for g in q.args["group"].expressions:
            if isinstance(g, exp.Literal) and not g.is_string:
                idx = int(g.name) - 1
                if not 0 <= idx < len(q.expressions):
                    raise ctx.err(f"GROUP BY position {g.name} is not in the select list", "GROUP BY")
                sel = q.expressions[idx]
                g = sel.unalias() if isinstance(sel, exp.Alias) else sel
            group_exprs.append(g)
    elif distinct is not None and q.args.get("having") is None and not any(map(agg_calls, q.expressions)):
        for proj in q.expressions:  # no aggregates: the DISTINCT is the grouping
            if _is_star(proj):
                raise ctx.err("SELECT DISTINCT * is not supported; name the columns", "DISTINCT")
            group_exprs.append(proj.unalias() if isinstance(proj, exp.Alias) else proj)
        distinct = None
    return group_exprs, distinct


class _Calls:
    """The aggregate's inputs and calls as the SELECT list and HAVING are rewritten over it: each
    group expression and aggregate argument a column of the projection below (`pre`), each call an
    `Agg`, each once however often the query spells it."""

    def __init__(self, ctx: PlanContext, scope: Scope) -> None:
        self.ctx, self.scope = ctx, scope
        self.node: Operator | None = None  # the input, for the types of `sum` / `avg` arguments
        self.pre: list[tuple[str, str]] = []
        self.group_of: dict[str, str] = {}  # resolved SQL -> group column
        self.group_cols: list[str] = []
        self.aggs: list[Agg] = []
        self._by_call: dict[str, str] = {}
        self._arg_of: dict[str, str] = {}
        self.dependent: set[str] = set()  # aliases of the FROM items whose whole key is grouped

    def grouped_keys(self, exprs: list[exp.Expr]) -> None:
        """PostgreSQL's functional dependency: a table or MV whose whole key the GROUP BY names as
        columns has one row per group, so any of its columns (and `t.*`) may be selected."""
        grouped = {self.scope.internal(g, "GROUP BY") for g in exprs if isinstance(g, exp.Column)
                   and not isinstance(g.this, exp.Star) and self.scope.single_item(g) is not None}
        for it in self.scope.items:
            visible = {it.cols[c] for c in it.order}
            if isinstance(it.node, Scan) and it.node.key and set(it.node.key) <= grouped & visible:
                self.dependent.add(it.alias)

    def group(self, exprs: list[exp.Expr]) -> None:
        for g in exprs:
            sql = self.scope.resolve(g, "GROUP BY")
            if sql in self.group_of:
                continue
            internal = self.ctx.name(g.name if isinstance(g, exp.Column) else "g")
            self.group_of[sql] = internal
            self.group_cols.append(internal)
            self.pre.append((internal, sql))

    def column_of(self, sql: str) -> str:
        """The input column of the aggregate computing `sql`."""
        if sql not in self._arg_of:
            self._arg_of[sql] = self.ctx.name("arg")
            self.pre.append((self._arg_of[sql], sql))
        return self._arg_of[sql]

    def agg(self, fn: str, arg_col: str | None) -> str:
        ident = f"{fn}({arg_col})"
        if ident not in self._by_call:
            self._by_call[ident] = self.ctx.name(fn)
            self.aggs.append(Agg(fn, arg_col, self._by_call[ident], ""))
        return self._by_call[ident]

    def call(self, call: exp.AggFunc) -> exp.Expr:
        """An aggregate call, as the expression over the aggregate's output that is its value."""
        fn = _AGGS.get(type(call))
        if isinstance(call, exp.ArrayAgg):
            raise self.ctx.err("array_agg is not supported: arrays are not a column type in sparkwave (left out on "
                               "purpose); string_agg(x::varchar, ',' ORDER BY ...) keeps the values as text",
                               call.sql_name())
        if fn is None:
            raise self.ctx.err(f"unsupported aggregate {call.sql(dialect='postgres')} in a materialized view; "
                               "supported: count, sum, avg, min, max, count(DISTINCT x), bool_and, bool_or, "
                               "string_agg, first_value / last_value (x ORDER BY y), percentile_cont, "
                               "percentile_disc, mode", call.sql_name())
        if call.find(exp.Window):
            raise self.ctx.err("unsupported window function (OVER ...)", "OVER")
        arg = call.this
        if fn == "count" and isinstance(arg, exp.Star):
            return exp.column(self.agg("count_star", None), quoted=True)
        if isinstance(arg, exp.Distinct):
            if fn != "count" or len(arg.expressions) != 1:
                raise self.ctx.err(f"unsupported aggregate {call.sql(dialect='postgres')}; DISTINCT is supported in "
                                   "count(DISTINCT x)", "DISTINCT")
            fn, arg = "count_distinct", arg.expressions[0]
        if arg.find(exp.AggFunc):
            raise self.ctx.err(f"nested aggregate in {call.sql(dialect='postgres')}", call.sql_name())
        sql = self.scope.resolve(arg, "an aggregate's argument")
        assert self.node is not None
        scale = decimal_scale(self.ctx.types(self.node, [("x", sql)], None)["x"]) if fn in ("sum", "avg") else None
        if scale is None:
            return exp.column(self.agg(fn, self.column_of(sql)), quoted=True)
        hi, lo = (self.column_of(part) for part in decimal_parts(sql, scale))
        h, low = self.agg("sum", hi), self.agg("sum", lo)
        total = decimal_sum(f"`{h}`", f"`{low}`", scale) if fn == "sum" else \
            decimal_avg(f"`{h}`", f"`{low}`", f"`{self.agg('count', hi)}`", scale)
        return exp.paren(exp.var(total))

    def rewrite(self, e: exp.Expr, where: str) -> exp.Expr:
        """`e` over the aggregate's output: calls and group expressions as its columns."""
        if isinstance(e, exp.AggFunc):
            return self.call(e)
        if not isinstance(e, (exp.Literal, exp.Star)) and not isinstance(e, exp.Interval):
            try:
                sql = self.scope.resolve(e, where)
            except (SqlError, CatalogError):
                sql = None
            if sql is not None and sql in self.group_of:
                return exp.column(self.group_of[sql], quoted=True)
        if isinstance(e, exp.Column):
            if (owner := self.scope.single_item(e)) is not None and owner.alias in self.dependent:
                self.group([e])  # functionally dependent on a grouped key: one value per group
                return exp.column(self.group_of[self.scope.resolve(e, where)], quoted=True)
            raise self.ctx.err(f"column {e.sql(dialect='postgres')} must appear in GROUP BY or be used in an "
                               f"aggregate ({where})", e.name)
        e = e.copy()
        for k, v in list(e.args.items()):
            if isinstance(v, exp.Expression):
                e.set(k, self.rewrite(v, where))
            elif isinstance(v, list):
                e.set(k, [self.rewrite(x, where) if isinstance(x, exp.Expression) else x for x in v])
        return e


def aggregate(ctx: PlanContext, q: exp.Select, node: Operator, items: list[Item], predicate: str | None
              ) -> tuple[Project, Outputs]:
    """A SELECT with GROUP BY, aggregates, HAVING or DISTINCT over `node`'s rows passing `predicate`."""
    group_exprs, distinct = group_expressions(ctx, q)
    having = q.args.get("having")
    if any(e.find(exp.GroupConcat) for e in [*q.expressions, *([having.this] if having is not None else [])]):
        q, node = string_aggs(ctx, q, group_exprs, node, items, predicate)
        predicate = None
    if any(ordered_calls(e) for e in [*q.expressions, *([having.this] if having is not None else [])]):
        q, node = ordered_aggs(ctx, q, group_exprs, node, items, predicate)
        predicate = None
    calls = _Calls(ctx, Scope(ctx, items))
    calls.node = node
    calls.group(group_exprs)
    calls.grouped_keys(group_exprs)
    scalar = not calls.group_cols
    if scalar:
        gcol = ctx.name("_g")
        calls.group_cols.append(gcol)
        calls.pre.append((gcol, "0L"))
    post: list[tuple[str, str, exp.Expr]] = []
    for i, proj in enumerate(q.expressions):
        inner = proj.unalias() if isinstance(proj, exp.Alias) else proj
        for name, term in _star_columns(ctx, calls, inner) if _is_star(inner) else [(output_name(proj, i), inner)]:
            if problem := column_name_problem(name):
                raise ctx.err(f"output column name {name!r} {problem}; choose another alias", name)
            post.append((name, ctx.name(name), calls.rewrite(term, f"SELECT item {i + 1}")))
    having = q.args.get("having")
    having_tree = calls.rewrite(having.this, "HAVING") if having is not None else None
    pre_node = ctx.project(node, calls.pre, predicate, [])
    for a in calls.aggs:
        a.type = _agg_type(ctx, a, pre_node)
    gtypes = dict(pre_node.columns)
    group_cols = calls.group_cols
    agg_node = Aggregate(ctx.next_id(), [(g, gtypes[g]) for g in group_cols] + [(a.out, a.type) for a in calls.aggs],
                         list(group_cols), input=pre_node, group=list(group_cols), aggs=calls.aggs, scalar=scalar,
                         append_only=ctx.append_only(pre_node))
    exprs = [(i, ctx.spark_sql(t, agg_node.columns)) for _, i, t in post] + [(g, f"`{g}`") for g in group_cols]
    having_sql = ctx.spark_sql(having_tree, agg_node.columns) if having_tree is not None else None
    out = ctx.project(agg_node, exprs, having_sql, list(group_cols))
    outputs = [(n, i) for n, i, _ in post]
    if distinct is not None and not scalar:  # DISTINCT over groups (a scalar aggregate has one row)
        out = distinct_rows(ctx, out, [i for _, i in outputs])
    return out, outputs


def _star_columns(ctx: PlanContext, calls: _Calls, star: exp.Expr) -> list[tuple[str, exp.Expr]]:
    """`*` / `t.*` with GROUP BY: the columns of the items whose key is grouped, in FROM order."""
    qual = star.table.lower() if isinstance(star, exp.Column) and star.table else None
    chosen = sorted((it for it in calls.scope.items if (qual is None and not it.alias.startswith(JOINED_PREFIX))
                     or it.alias == qual), key=lambda it: it.pos)
    loose = [it.alias for it in chosen if it.alias not in calls.dependent or it.merged]
    if loose or not chosen:
        raise ctx.err(f"SELECT {star.sql()} with GROUP BY needs the primary key of {', '.join(loose) or qual} in "
                      "GROUP BY (PostgreSQL's functional dependency); name the columns otherwise", "*")
    return [(c, exp.column(c, table=it.alias, quoted=True)) for it in chosen for c in it.order
            if not c.startswith(HIDDEN_PREFIX)]


def distinct_rows(ctx: PlanContext, node: Project, columns: list[str]) -> Project:
    """`SELECT DISTINCT` over an aggregate's rows: a second aggregate, grouped by every output."""
    types = dict(node.columns)
    agg = Aggregate(ctx.next_id(), [(c, types[c]) for c in columns], list(columns), input=node,
                    group=list(columns), aggs=[])
    return ctx.project(agg, [(c, f"`{c}`") for c in columns], None, list(columns))


def _agg_type(ctx: PlanContext, a: Agg, child: Operator) -> str:
    if a.fn in ("count_star", "count", "count_distinct"):
        return "bigint"
    assert a.arg is not None
    t = SqlType(child.type_of(a.arg))
    if a.fn in ("min", "max"):
        return t.name
    if not t.is_numeric:
        raise ctx.err(f"{a.fn} needs a numeric argument, got {t.name}", a.fn)
    return "double" if a.fn == "avg" else sum_type(t.name)
