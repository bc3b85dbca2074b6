"""Rewrites of an MV's query into the forms the planner plans, each with PostgreSQL's meaning:

- `WITH name [(a, b)] AS (...)`: each reference to a CTE becomes that subquery, its column list the
  subquery alias's (a CTE used twice is planned twice; later CTEs may use earlier ones);
- `agg(x) FILTER (WHERE c)`: `agg(CASE WHEN c THEN x END)` (`count(*)` counts `CASE WHEN c THEN 1
  END`): aggregates skip NULLs, so the rows failing `c` add nothing;
- window functions in an aggregating or DISTINCT query: the grouping in a subquery (each group
  expression and aggregate call a hidden column), the windows over its rows, DISTINCT over those
  (PostgreSQL's order of evaluation);
- `ORDER BY` without `LIMIT`/`OFFSET`: dropped, as RisingWave does (an MV's rows have no order;
  read them with `ORDER BY`);
- `ORDER BY ... LIMIT n [OFFSET m]`: the rows whose `row_number() OVER (ORDER BY ...)` is in
  (m, m + n], a window over the query (ORDER BY terms it does not select become hidden columns);
- `SELECT DISTINCT ON (e...) ... ORDER BY ...`: the rows whose `row_number() OVER (PARTITION BY
  e... ORDER BY ...)` is 1;
- `bool_and(x)` / `every(x)` / `bool_or(x)`: counts of the false (true) values, which sums keep
  exact under deletes: `CASE WHEN count(x) = 0 THEN NULL ELSE sum(CASE WHEN x THEN 0 ELSE 1
  END) = 0 END`;
- `min(DISTINCT x)` / `max(DISTINCT x)`: `min(x)` / `max(x)` (the same value);
- subqueries outside FROM: joins (`subqueries.py`)."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.frontend.subqueries import HIDDEN_PREFIX, ColumnsOf, unnest


def rewrite(query: exp.Expr, columns_of: ColumnsOf | None = None) -> exp.Expr:
    """`query` in the planner's forms; `columns_of` names a relation's columns (for subqueries'
    unqualified outer columns)."""
    query = _inline_ctes(query.copy())
    for f in list(query.find_all(exp.Filter)):
        if isinstance(f.this, exp.AggFunc) and not isinstance(f.this, exp.FirstValue | exp.LastValue):  # (refused)
            f.replace(_filtered(f.this, f.expression.this))
    for setop in reversed(list(query.find_all(exp.SetOperation))):  # its ORDER BY ... LIMIT: a SELECT's
        if any(setop.args.get(a) for a in ("order", "limit", "offset")):
            query = _replace(query, setop, _set_operation_top(setop))
    for sel in reversed(list(query.find_all(exp.Select))):  # innermost first: an outer one copies them
        if any(e.find(exp.Window) for e in sel.expressions) and (_aggregating(sel) or sel.args.get("distinct")):
            split = _windows_after_grouping(sel)
            query, sel = _replace(query, sel, split), split
        distinct = sel.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            query = _replace(query, sel, _distinct_on(sel))
        elif (sel.args.get("limit") or sel.args.get("offset")) and not _in_expression(sel):
            query = _replace(query, sel, _top_n(sel))
        elif sel.args.get("order"):
            sel.set("order", None)
    for node in list(query.find_all(exp.LogicalAnd, exp.LogicalOr, exp.Anonymous, exp.Min, exp.Max)):
        if isinstance(node, exp.Min | exp.Max) and isinstance(node.this, exp.Distinct) \
                and len(node.this.expressions) == 1:
            node.set("this", node.this.expressions[0])
        elif isinstance(node, exp.LogicalAnd | exp.LogicalOr) or (
                isinstance(node, exp.Anonymous) and node.name.lower() == "every" and len(node.expressions) == 1):
            arg = node.this if not isinstance(node, exp.Anonymous) else node.expressions[0]
            new = _bool_agg(arg, every=not isinstance(node, exp.LogicalOr))
            if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":  # PostgreSQL's name
                new = exp.alias_(new, node.name.lower() if isinstance(node, exp.Anonymous) else
                                 "bool_or" if isinstance(node, exp.LogicalOr) else "bool_and")
            node.replace(new)
    return unnest(query, columns_of)


def _aggregating(sel: exp.Select) -> bool:
    return bool(sel.args.get("group") or sel.args.get("having") or _group_aggregates(sel))


def _group_aggregates(sel: exp.Select) -> list[exp.AggFunc]:
    """The aggregate calls of `sel`'s SELECT list and ORDER BY, but the window functions' own."""
    parts = [*sel.expressions, *(sel.args["order"].expressions if sel.args.get("order") else [])]
    return [a for p in parts for a in p.find_all(exp.AggFunc)
            if not (isinstance(a.parent, exp.Window) and a.arg_key == "this") and a.find_ancestor(exp.Select) is sel]


def _windows_after_grouping(sel: exp.Select) -> exp.Select:
    """PostgreSQL computes window functions after GROUP BY / HAVING and before DISTINCT: `sel` as
    its grouping in a subquery (each group expression and aggregate call a hidden column), with the
    SELECT list's windows over that subquery's rows, then DISTINCT over those."""
    outer = sel.copy()
    for i, item in enumerate(outer.expressions):  # keep each output's name once its terms are renamed
        if not isinstance(item, exp.Alias) and not _is_star(item):
            item.replace(exp.alias_(item.copy(), output_name(item, i)))
    if _aggregating(sel):
        groups = [_order_term(sel, g, "GROUP BY") for g in sel.args["group"].expressions] if sel.args.get("group") \
            else []
        inner = sel.copy()
        if groups:
            inner.set("group", exp.Group(expressions=[g.copy() for g in groups]))
        for arg in ("distinct", "order", "limit", "offset"):
            inner.set(arg, None)
        items: list[exp.Expr] = []
        names: dict[str, str] = {}  # an aggregate call's SQL -> its column: each computed once
        for call in _group_aggregates(outer):
            name = names.setdefault(call.sql(), f"{HIDDEN_PREFIX}a{len(names)}")
            if len(items) < len(names):
                items.append(exp.alias_(call.copy(), name))
            call.replace(exp.column(name))
        for i, g in enumerate(groups):
            name = f"{HIDDEN_PREFIX}g{i}"
            items.append(exp.alias_(g.copy(), name))
            for node in list(outer.find_all(type(g))):
                if _same_term(node, g):
                    node.replace(exp.column(name))
        inner.set("expressions", items)
        for arg in ("where", "group", "having", "joins", "laterals"):
            outer.set(arg, None)
        outer.set("from_" if "from_" in outer.args else "from", exp.From(this=exp.Subquery(
            this=inner, alias=exp.TableAlias(this=exp.to_identifier(f"{HIDDEN_PREFIX}grouped")))))
        outputs = {e.alias.lower() for e in outer.expressions if isinstance(e, exp.Alias)}
        loose = [c for c in outer.find_all(exp.Column)
                 if not c.name.startswith(HIDDEN_PREFIX) and c.find_ancestor(exp.Select) is outer
                 and not (c.find_ancestor(exp.Order) is outer.args.get("order") and not c.table
                          and c.name.lower() in outputs)]
        if loose:
            raise SqlError(f"column {loose[0].sql(dialect='postgres')} must appear in the GROUP BY clause or be used "
                           "in an aggregate function")
    if outer.args.get("distinct") is not None and not any(_is_star(e) for e in outer.expressions):
        windowed = outer.copy()
        windowed.set("distinct", None)
        for arg in ("order", "limit", "offset"):
            windowed.set(arg, None)
        below = exp.Subquery(this=windowed, alias=exp.TableAlias(this=exp.to_identifier(f"{HIDDEN_PREFIX}windowed")))
        outer = exp.select(*[exp.column(e.alias) for e in windowed.expressions]).from_(below).distinct()
        for arg in ("order", "limit", "offset"):
            if sel.args.get(arg) is not None:
                outer.set(arg, sel.args[arg].copy())
    return outer


def _same_term(node: exp.Expr, group: exp.Expr) -> bool:
    """Whether a SELECT term is the GROUP BY expression (a column named alike, qualified or not)."""
    if isinstance(group, exp.Column) and isinstance(node, exp.Column):
        return node.name.lower() == group.name.lower() and (not node.table or not group.table
                                                            or node.table.lower() == group.table.lower())
    return node == group


def output_name(item: exp.Expr, i: int) -> str:
    """PostgreSQL's name of the `i`-th SELECT item: its alias, column, function or window function."""
    if isinstance(item, exp.Alias):
        return item.alias.lower()
    if isinstance(item, exp.Column):
        return item.name.lower()
    if isinstance(item, exp.Cast) and isinstance(item.this, exp.Column):
        return item.this.name.lower()
    if isinstance(item, exp.Window):
        item = item.this
    if isinstance(item, exp.Anonymous):
        return item.name.lower()
    if isinstance(item, exp.Func):
        return (item.sql_name() or f"_col{i}").lower()
    return f"_col{i}"


def _bool_agg(arg: exp.Expr, every: bool) -> exp.Expr:
    """`bool_and` (`every`) / `bool_or` of `arg` from a count and a sum, both kept exact by deletes."""
    counted = exp.Case(ifs=[exp.If(this=arg.copy(), true=exp.Literal.number(0 if every else 1)),
                            exp.If(this=exp.Not(this=arg.copy()), true=exp.Literal.number(1 if every else 0))])
    hits = exp.Sum(this=counted)  # NULLs count in neither
    test = exp.EQ(this=hits, expression=exp.Literal.number(0)) if every else \
        exp.GT(this=hits, expression=exp.Literal.number(0))
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=exp.EQ(this=exp.Count(this=arg.copy()),
                                                           expression=exp.Literal.number(0)), true=exp.Null())],
                                   default=test))


def _inline_ctes(query: exp.Expr) -> exp.Expr:
    key = "with_" if "with_" in query.args else "with"  # sqlglot 30 names it `with_`
    with_ = query.args.get(key)
    if with_ is None:
        return query
    if with_.args.get("recursive"):
        raise SqlError("WITH RECURSIVE is not supported in a materialized view")
    query.set(key, None)
    ctes: dict[str, tuple[exp.Expr, list[exp.Identifier]]] = {}
    for cte in with_.expressions:
        body = _inline(_inline_ctes(cte.this), ctes)
        name = cte.alias_or_name.lower()
        if name in ctes:
            raise SqlError(f"WITH query name {name!r} specified more than once")
        alias = cte.args.get("alias")
        ctes[name] = body, list(alias.columns) if alias is not None else []  # `WITH c(a, b) AS`: renames
    return _inline(query, ctes)


def _inline(query: exp.Expr, ctes: dict[str, tuple[exp.Expr, list[exp.Identifier]]]) -> exp.Expr:
    """Each reference to a CTE as its subquery, under the reference's alias; the CTE's column list and
    the reference's (`FROM c AS z(p)`, which renames the first of them again) as the alias's columns."""
    for t in list(query.find_all(exp.Table)):
        if isinstance(t.this, exp.Anonymous) and t.this.expressions and isinstance(
                first := t.this.expressions[0], exp.Column) and first.name.lower() in ctes:
            raise SqlError(f"{t.this.name.upper()} over CTE {first.name!r} is not supported; window a table or a "
                           "materialized view, or put the CTE's query in an MV first")
        cte = ctes.get(t.name.lower()) if isinstance(t.this, exp.Identifier) and not t.args.get("db") else None
        if cte is not None:
            body, columns = cte
            ref = t.args.get("alias")
            renamed = list(ref.columns) if isinstance(ref, exp.TableAlias) else []
            columns = renamed + columns[len(renamed):]
            t.replace(exp.Subquery(this=body.copy(), alias=exp.TableAlias(
                this=exp.to_identifier(t.alias or t.name), columns=[c.copy() for c in columns] or None)))
    return query


def _filtered(agg: exp.AggFunc, cond: exp.Expr) -> exp.Expr:
    agg = agg.copy()
    if isinstance(agg.this, exp.Order):  # string_agg(x, ',' ORDER BY y) FILTER (...): gate x, keep the order
        ordered = agg.this
        ordered.set("this", _filtered(exp.Max(this=ordered.this.copy()), cond).this)
        return agg
    arg = agg.this
    distinct = isinstance(arg, exp.Distinct)
    if distinct and len(arg.expressions) != 1:
        raise SqlError(f"{agg.sql(dialect='postgres')} FILTER (...): an aggregate of several DISTINCT columns is "
                       "not supported")
    value = arg.expressions[0] if distinct else arg
    if isinstance(agg, exp.Count) and (value is None or isinstance(value, exp.Star)):
        gated: exp.Expr = exp.Case(ifs=[exp.If(this=cond.copy(), true=exp.Literal.number(1))])
    else:
        gated = exp.Case(ifs=[exp.If(this=cond.copy(), true=value.copy())])
    if distinct:
        arg.set("expressions", [gated])
    else:
        agg.set("this", gated)
    return agg


def _replace(query: exp.Expr, old: exp.Expr, new: exp.Expr) -> exp.Expr:
    if old is query:
        return new
    old.replace(new)
    return query


def _count(node: exp.Expr | None, clause: str) -> int | None:
    """A LIMIT's or OFFSET's row count: a non-negative integer literal (None: no limit)."""
    if node is None:
        return None
    if isinstance(node, exp.Fetch):
        options = node.args.get("limit_options")
        if options is not None and (options.args.get("with_ties") or options.args.get("percent")):
            raise SqlError("FETCH ... WITH TIES / PERCENT is not supported in a materialized view; filter on "
                           "rank() <= n in an enclosing query")
        value = node.args.get("count") or exp.Literal.number(1)
    else:
        value = node.args.get("expression") or node.this
    if isinstance(value, exp.Null):
        return None
    if not isinstance(value, exp.Literal) or value.is_string or not value.name.isdigit():
        raise SqlError(f"{clause} in a materialized view must be a non-negative integer constant, got "
                       f"{value.sql(dialect='postgres')}")
    return int(value.name)


def _item_name(e: exp.Expr) -> str | None:
    if isinstance(e, exp.Alias):
        return e.alias.lower()
    return e.name.lower() if isinstance(e, exp.Column) and not isinstance(e.this, exp.Star) else None


def _is_star(e: exp.Expr) -> bool:
    return isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))


def _order_term(sel: exp.Select, e: exp.Expr, clause: str) -> exp.Expr:
    """An ORDER BY (or DISTINCT ON) term as an expression of `sel`'s FROM items: a position or an
    output name becomes the SELECT item it names."""
    items = sel.expressions
    if isinstance(e, exp.Literal) and not e.is_string:
        idx = int(e.name) - 1
        if not 0 <= idx < len(items) or _is_star(items[idx]):
            raise SqlError(f"{clause} position {e.name} is not in the select list")
        item = items[idx]
        return (item.unalias() if isinstance(item, exp.Alias) else item).copy()
    if isinstance(e, exp.Column) and not e.table:
        named = [i for i in items if isinstance(i, exp.Alias) and i.alias.lower() == e.name.lower()]
        if named:
            return named[0].unalias().copy()
    return e.copy()


def _top_n(sel: exp.Select) -> exp.Select:
    """`sel` with `ORDER BY ... LIMIT n OFFSET m` as a filter on a row number over its rows."""
    n, m = _count(sel.args.get("limit"), "LIMIT"), _count(sel.args.get("offset"), "OFFSET") or 0
    order = sel.args["order"].expressions if sel.args.get("order") else []
    inner = sel.copy()
    for arg in ("limit", "offset", "order"):
        inner.set(arg, None)
    names = {_item_name(e) for e in inner.expressions} - {None}
    star = any(_is_star(e) for e in inner.expressions)
    terms = []
    for k, o in enumerate(order):
        e = o.this
        if isinstance(e, exp.Literal) and not e.is_string:
            idx = int(e.name) - 1
            if not 0 <= idx < len(inner.expressions) or _is_star(inner.expressions[idx]):
                raise SqlError(f"ORDER BY position {e.name} is not in the select list")
            name = _item_name(inner.expressions[idx])
            if name is None:  # an unnamed expression: ordered by a hidden copy of it
                name = f"{HIDDEN_PREFIX}o{k}"
                inner.append("expressions", exp.alias_(inner.expressions[idx].copy(), name))
            ref: exp.Expr = exp.column(name)
        elif isinstance(e, exp.Column) and not e.table and (e.name.lower() in names or star):
            ref = exp.column(e.name)
        elif inner.args.get("distinct") is not None:
            raise SqlError(f"for SELECT DISTINCT, ORDER BY expressions must appear in the select list: "
                           f"{e.sql(dialect='postgres')}")
        else:
            name = f"{HIDDEN_PREFIX}o{k}"
            inner.append("expressions", exp.alias_(e.copy(), name))
            ref = exp.column(name)
        term = o.copy()
        term.set("this", ref)
        terms.append(term)
    rn = f"{HIDDEN_PREFIX}rn"
    window = exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=terms) if terms else None)
    numbered = exp.select(exp.Star(), exp.alias_(window, rn)).from_(
        exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(f"{HIDDEN_PREFIX}top"))))
    bounds: list[exp.Expr] = []
    if m:
        bounds.append(exp.GT(this=exp.column(rn), expression=exp.Literal.number(m)))
    if n is not None:
        bounds.append(exp.LTE(this=exp.column(rn), expression=exp.Literal.number(m + n)))
    out = exp.select(exp.Star()).from_(exp.Subquery(this=numbered, alias=exp.TableAlias(
        this=exp.to_identifier(f"{HIDDEN_PREFIX}topn"))))
    return out.where(exp.and_(*bounds)) if bounds else out


def _distinct_on(sel: exp.Select) -> exp.Select:
    """`SELECT DISTINCT ON (e...) ... ORDER BY ...` as the first row of each `e...` in that order."""
    if sel.args.get("group") or sel.args.get("having") or any(e.find(exp.AggFunc) for e in sel.expressions):
        raise SqlError("SELECT DISTINCT ON with GROUP BY or aggregates is not supported; aggregate in a subquery")
    if sel.args.get("limit") or sel.args.get("offset"):
        raise SqlError("SELECT DISTINCT ON with LIMIT / OFFSET is not supported; put the DISTINCT ON in a subquery")
    on = sel.args["distinct"].args["on"]
    keys = [_order_term(sel, e, "DISTINCT ON") for e in (on.expressions if isinstance(on, exp.Tuple) else [on])]
    order = [o.copy() for o in (sel.args["order"].expressions if sel.args.get("order") else [])]
    for o in order:
        o.set("this", _order_term(sel, o.this, "ORDER BY"))
    inner = sel.copy()
    inner.set("distinct", None)
    inner.set("order", None)
    rn = f"{HIDDEN_PREFIX}rn"
    window = exp.Window(this=exp.RowNumber(), partition_by=keys, order=exp.Order(expressions=order) if order else None)
    inner.append("expressions", exp.alias_(window, rn))
    return exp.select(exp.Star()).from_(exp.Subquery(this=inner, alias=exp.TableAlias(
        this=exp.to_identifier(f"{HIDDEN_PREFIX}don")))).where(exp.EQ(this=exp.column(rn),
                                                                          expression=exp.Literal.number(1)))


def _in_expression(sel: exp.Select) -> bool:
    """Whether `sel` is a subquery in an expression (WHERE, SELECT list, HAVING), not a FROM item."""
    node: exp.Expr = sel
    while node.parent is not None:
        parent = node.parent
        if isinstance(parent, exp.Exists | exp.In | exp.Any | exp.All):
            return True
        if isinstance(parent, exp.Subquery) and isinstance(parent.parent, exp.SetOperation):
            node = parent  # an operand of UNION / INTERSECT / EXCEPT: where the set operation is
            continue
        if isinstance(parent, exp.Subquery) and not isinstance(parent.parent, exp.From | exp.Join):
            return True
        if isinstance(parent, exp.Subquery):
            return False
        node = parent
    return False


def _set_operation_top(op: exp.SetOperation) -> exp.Expr:
    """A set operation's `ORDER BY` (dropped without LIMIT / OFFSET, as a SELECT's) and `LIMIT n
    [OFFSET m]` as a SELECT over it, for `_top_n`: ORDER BY names its output columns, or positions
    in the first query's SELECT list."""
    inner = op.copy()
    for arg in ("order", "limit", "offset"):
        inner.set(arg, None)
    if not (op.args.get("limit") or op.args.get("offset")):
        return inner
    first: exp.Expr = op
    while isinstance(first, exp.SetOperation | exp.Subquery):
        first = first.this
    outer = exp.select(exp.Star()).from_(exp.Subquery(this=inner, alias=exp.TableAlias(
        this=exp.to_identifier(f"{HIDDEN_PREFIX}setop"))))
    if op.args.get("order"):
        order = op.args["order"].copy()
        for o in order.expressions:
            e = o.this
            if isinstance(e, exp.Literal) and not e.is_string:
                items = first.expressions if isinstance(first, exp.Select) else []
                idx = int(e.name) - 1
                if not 0 <= idx < len(items) or _is_star(items[idx]):
                    raise SqlError(f"ORDER BY position {e.name} is not in the select list of the set operation's "
                                   "first query; order by an output column's name")
                o.set("this", exp.column(output_name(items[idx], idx)))
        outer.set("order", order)
    for arg in ("limit", "offset"):
        if op.args.get(arg) is not None:
            outer.set(arg, op.args[arg].copy())
    return outer
