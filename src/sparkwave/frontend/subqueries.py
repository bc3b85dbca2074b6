"""Subqueries in an MV's WHERE, SELECT list and HAVING, turned into joins the planner maintains
incrementally, each with PostgreSQL's meaning:

- `x IN (SELECT y ...)` / `EXISTS (SELECT ... WHERE inner.a = outer.b)`: a semi join, an inner
  join with the subquery's distinct keys, so that an outer row matches at most once;
- `NOT EXISTS (...)`: an anti join, a LEFT JOIN with the distinct keys, keeping the rows that
  found none;
- `x NOT IN (SELECT y ...)`: PostgreSQL's three-valued rule, true only if the subquery is empty,
  or `x` is not NULL, not among the values, and no value is NULL. A LEFT JOIN with the distinct
  values and a join with the one-row counts of the subquery's rows and non-NULL values decide it;
- a scalar subquery `(SELECT agg(...) FROM ...)`: a join with that one-row aggregate (the
  planner joins a one-row input on a constant). In an aggregated SELECT list or HAVING, outside
  an aggregate, it is read as `max(...)` of that one value.

A subquery may refer to the enclosing query through equalities between an outer column and its
own columns, at the top level of its WHERE (`EXISTS`, `NOT EXISTS`, `IN`): they become the join
keys. An outer column must be qualified by its table or alias; an unqualified column is the
subquery's. What else a subquery may not do (a correlated scalar subquery, `NOT IN` with
correlation, one under `OR`) is refused with what to write instead."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from sqlglot import exp

from sparkwave.core.errors import SqlError

HIDDEN_PREFIX = "_sw_"  # the columns rewrites add: `SELECT *` does not list them
_SUBQUERY = (exp.Subquery, exp.Exists, exp.Any, exp.All)  # nodes that may hold a subquery
JOINED_PREFIX = "_sw_sq"  # the FROM items joined for subqueries (and window outputs): nor these


ColumnsOf = Callable[[str], "set[str] | None"]  # a relation's column names (None: no such relation)


def unnest(query: exp.Expr, columns_of: ColumnsOf | None = None) -> exp.Expr:
    """`query` with every subquery outside FROM made a join; innermost first, so that a
    subquery's own subqueries are joins of it before it is moved. With `columns_of`, an outer
    column a subquery names unqualified (TPC-H's `WHERE p_partkey = ps_partkey`) is qualified first."""
    if columns_of is not None:
        qualify_outer(query, columns_of)
    ids = itertools.count(1)
    for sel in reversed(list(query.find_all(exp.Select))):
        _Unnester(sel, ids).run()
    return query


class _Unnester:
    def __init__(self, sel: exp.Select, ids: Iterator[int]) -> None:
        self.sel = sel
        self.ids = ids
        self.conds: list[exp.Expr] = []  # new WHERE conjuncts
        self.aggregated = bool(sel.args.get("group") or sel.args.get("having") or any(
            _aggregates(e) for e in sel.expressions))

    def run(self) -> None:
        where = self.sel.args.get("where")
        if where is not None and where.find(*_SUBQUERY):
            kept = []
            for c in conjuncts(where.this):
                if (new := self.predicate(c)) is not None:
                    kept.append(new)
            self.sel.set("where", exp.Where(this=exp.and_(*kept, *self.conds)) if kept or self.conds else None)
            self.conds = []
        if any(e.find(*_SUBQUERY) for e in self.sel.expressions):
            self.sel.set("expressions", [self.scalars(_named(e), "the SELECT list", self.aggregated)
                                         if e.find(*_SUBQUERY) else e for e in self.sel.expressions])
        having = self.sel.args.get("having")
        if having is not None and having.find(*_SUBQUERY):
            self.sel.set("having", exp.Having(this=self.scalars(having.this, "HAVING", True)))

    # --- WHERE ---------------------------------------------------------------------------------
    def predicate(self, c: exp.Expr) -> exp.Expr | None:
        """One conjunct of WHERE: None if it became a join, else it (its scalar subqueries joined)."""
        negated = isinstance(c, exp.Not)
        inner = c.this if negated else c
        if isinstance(inner, exp.Paren):
            inner = inner.unnest()
        if isinstance(inner, exp.Exists):
            self.exists(inner.this, negated)
            return None
        if isinstance(inner, exp.EQ) and isinstance(inner.expression, exp.Any) and \
                isinstance(inner.expression.this, exp.Subquery | exp.Select):  # `x = ANY (...)` is IN
            inner = exp.In(this=inner.this.copy(), query=exp.Subquery(this=_select_of(inner.expression.this,
                                                                                         "ANY").copy()))
        if isinstance(inner, exp.In) and inner.args.get("query") is not None:
            self.in_(inner, negated)
            return None
        return self.scalars(c, "WHERE", False)

    def exists(self, sub: exp.Expr, negated: bool) -> None:
        body = _select_of(sub, "EXISTS")
        body, pairs = self.decorrelate(body, "EXISTS")
        if not pairs:  # uncorrelated: the subquery's row count
            n = self.counts(body, None)
            self.conds.append(exp.EQ(this=n, expression=exp.Literal.number(0)) if negated
                              else exp.GT(this=n, expression=exp.Literal.number(0)))
            return
        if not _plain(body):
            raise SqlError("a correlated EXISTS subquery with GROUP BY, HAVING, DISTINCT, LIMIT or aggregates is "
                           "not supported; join a GROUP BY subquery in FROM instead")
        self.semi([i for i, _ in pairs], [o for _, o in pairs], body, negated)

    def in_(self, node: exp.In, negated: bool) -> None:
        left = node.this
        body = _select_of(node.args["query"], "IN")
        if len(body.expressions) != 1 or isinstance(body.expressions[0], exp.Star):
            raise SqlError("a subquery in IN must return exactly one column")
        if not isinstance(left, exp.Column):
            raise SqlError(f"the left side of IN (subquery) must be a column, got {left.sql(dialect='postgres')}; "
                           "compute it in a subquery in FROM")
        body, pairs = self.decorrelate(body, "IN")
        value = body.expressions[0]
        value = value.unalias() if isinstance(value, exp.Alias) else value
        if not negated:
            if pairs and not _plain(body):
                raise SqlError("a correlated IN subquery with GROUP BY, HAVING, DISTINCT, LIMIT or aggregates is "
                               "not supported; join a GROUP BY subquery in FROM instead")
            if not _plain(body):  # its values through a subquery of it
                body = _wrapped(body, value, "_v")
                value = exp.column(f"{HIDDEN_PREFIX}_v")
            self.semi([value, *[i for i, _ in pairs]], [left, *[o for _, o in pairs]], body, False)
            return
        if pairs:
            raise SqlError("a correlated NOT IN subquery is not supported; write NOT EXISTS (... WHERE "
                           "inner = outer ...) if the values are never NULL")
        alias = self.alias()
        values = _wrapped(body, value, "_v")
        keyed = exp.select(exp.column(f"{HIDDEN_PREFIX}_v").as_(f"{alias}_k1")).from_(
            exp.Subquery(this=values.copy(), alias=exp.TableAlias(this=exp.to_identifier(f"{alias}_s"))))
        keyed.set("distinct", exp.Distinct())
        self.join(keyed, alias, exp.EQ(this=left.copy(), expression=exp.column(f"{alias}_k1", table=alias)),
                  left=True)
        matched = exp.column(f"{alias}_k1", table=alias)
        n = self.counts(values, exp.column(f"{HIDDEN_PREFIX}_v"))
        nn = exp.column(f"{n.name}n", table=n.table)
        self.conds.append(exp.paren(exp.or_(
            exp.EQ(this=n, expression=exp.Literal.number(0)),
            exp.and_(exp.Not(this=exp.Is(this=left.copy(), expression=exp.Null())),
                     exp.Is(this=matched, expression=exp.Null()), exp.EQ(this=nn, expression=n.copy())))))

    def semi(self, inner: list[exp.Expr], outer: list[exp.Expr], body: exp.Select, negated: bool) -> None:
        """A join with the distinct values of `inner` in `body`, on them equal to `outer`: an inner
        join keeps the rows with a match (semi), a LEFT JOIN whose key stays NULL those without (anti)."""
        alias = self.alias()
        keyed = body.copy()
        keyed.set("expressions", [e.copy().as_(f"{alias}_k{j}") for j, e in enumerate(inner, start=1)])
        keyed.set("distinct", exp.Distinct())
        keyed.set("order", None)
        on = exp.and_(*[exp.EQ(this=o.copy(), expression=exp.column(f"{alias}_k{j}", table=alias))
                        for j, o in enumerate(outer, start=1)])
        self.join(keyed, alias, on, left=negated)
        if negated:
            self.conds.append(exp.Is(this=exp.column(f"{alias}_k1", table=alias), expression=exp.Null()))

    def counts(self, body: exp.Select, value: exp.Expr | None) -> exp.Column:
        """The column of a joined one-row count of `body`'s rows (and, with `value`, the column
        named the same plus `n` counting its non-NULL values)."""
        alias = self.alias()
        inner = f"{alias}_s"
        src = body.copy()
        if value is None and _plain(src):
            src.set("expressions", [exp.Literal.number(1).as_(f"{HIDDEN_PREFIX}_one")])
            src.set("distinct", None)
        src.set("order", None)
        items: list[exp.Expr] = [exp.Count(this=exp.Star()).as_(f"{alias}_n")]
        if value is not None:
            items.append(exp.Count(this=value.copy()).as_(f"{alias}_nn"))
        one_row = exp.select(*items).from_(exp.Subquery(this=src, alias=exp.TableAlias(
            this=exp.to_identifier(inner))))
        self.join(one_row, alias, None)
        return exp.column(f"{alias}_n", table=alias)

    # --- scalar subqueries ---------------------------------------------------------------------
    def scalars(self, e: exp.Expr, where: str, aggregated: bool) -> exp.Expr:
        """`e` with each scalar subquery a column of a joined one-row aggregate."""
        for quantified in e.find_all(exp.Any, exp.All):
            if quantified.find(exp.Select):
                raise SqlError(f"{quantified.key.upper()} (subquery) is not supported (in {where}); write x IN "
                               "(SELECT ...) for = ANY, NOT EXISTS or a comparison with (SELECT max(...)) / "
                               "(SELECT min(...)) for the others")
        for node in list(e.find_all(exp.Exists, exp.In)):
            if isinstance(node, exp.Exists) or node.args.get("query") is not None:
                raise SqlError(f"{'EXISTS' if isinstance(node, exp.Exists) else 'IN'} (subquery) in {where} is "
                               "supported only as a condition of WHERE joined to the others by AND (not under OR, "
                               "CASE or a function); rewrite it as a join")
        for sub in list(e.find_all(exp.Subquery)):
            body = _select_of(sub, "a scalar subquery")
            if len(body.expressions) != 1 or not body.expressions[0].find(exp.AggFunc) \
                    or body.args.get("group") or body.args.get("having") or body.args.get("limit"):
                raise SqlError(f"unsupported scalar subquery ({body.sql(dialect='postgres')}) in {where}: a scalar "
                               "subquery must compute one aggregate without GROUP BY, HAVING or LIMIT (so that it "
                               "has exactly one row); join a subquery in FROM instead")
            decorrelated, pairs = self.decorrelate(body, "scalar subquery", allow=not aggregated)
            if pairs:
                col: exp.Expr = self.correlated_scalar(decorrelated, pairs)
                if sub is e:
                    return col
                sub.replace(col)
                continue
            alias = self.alias()
            value = body.copy()
            first = value.expressions[0]
            value.set("expressions", [(first.unalias() if isinstance(first, exp.Alias) else first).as_(f"{alias}_v")])
            value.set("order", None)
            self.join(value, alias, None)
            col = exp.column(f"{alias}_v", table=alias)
            if aggregated and not _inside_aggregate(sub, e):
                if not self.sel.args.get("group"):  # its one row would be lost with the last input row
                    raise SqlError(f"a scalar subquery in {where} of an aggregate without GROUP BY is not supported; "
                                   "join two one-row subqueries in FROM instead: SELECT a.n, b.m FROM (SELECT "
                                   "count(*) AS n FROM t1) a, (SELECT count(*) AS m FROM t2) b")
                col = exp.Max(this=col)
            if sub is e:
                return col
            sub.replace(col)
        return e

    def correlated_scalar(self, body: exp.Select, pairs: list[tuple[exp.Expr, exp.Column]]) -> exp.Expr:
        """A correlated scalar aggregate (TPC-H q2, q17, q20) as a LEFT JOIN with it grouped by its
        correlation's inner expressions, on them equal to the outer columns. An outer row that no
        group matches takes the aggregate's value over no rows (count 0, the others NULL)."""
        alias = self.alias()
        value = body.copy()
        first = value.expressions[0]
        first = first.unalias() if isinstance(first, exp.Alias) else first
        inner = [i for i, _ in pairs]
        value.set("expressions", [first.copy().as_(f"{alias}_v"),
                                  *[i.copy().as_(f"{alias}_k{j}") for j, i in enumerate(inner, start=1)]])
        value.set("group", exp.Group(expressions=[i.copy() for i in inner]))
        value.set("order", None)
        on = exp.and_(*[exp.EQ(this=o.copy(), expression=exp.column(f"{alias}_k{j}", table=alias))
                        for j, (_, o) in enumerate(pairs, start=1)])
        self.join(value, alias, on, left=True)
        col = exp.column(f"{alias}_v", table=alias)
        empty = first.copy()
        for call in list(empty.find_all(exp.AggFunc)):
            if call is empty:
                empty = exp.Literal.number(0) if isinstance(call, exp.Count) else exp.Null()
                break
            call.replace(exp.Literal.number(0) if isinstance(call, exp.Count) else exp.Null())
        if isinstance(empty, exp.Null):
            return col  # a NULL either way
        matched = exp.Not(this=exp.Is(this=exp.column(f"{alias}_k1", table=alias), expression=exp.Null()))
        return exp.paren(exp.Case(ifs=[exp.If(this=matched, true=col)], default=empty))

    # --- helpers -------------------------------------------------------------------------------
    def decorrelate(self, body: exp.Select, what: str, allow: bool = True
                    ) -> tuple[exp.Select, list[tuple[exp.Expr, exp.Column]]]:
        """`body` without its correlation, and the pairs (its expression, the outer column) that
        must be equal: the equalities at the top level of its WHERE between an outer column and
        an expression of its own columns."""
        own = _aliases(body)
        outer = [c for c in _scoped_columns(body) if c.table and c.table.lower() not in own]
        if not outer:
            return body, []
        if not allow:
            raise SqlError(f"a correlated {what} (it uses {outer[0].sql(dialect='postgres')}) is not supported; "
                           "join a GROUP BY subquery in FROM instead")
        body = body.copy()
        where = body.args.get("where")
        pairs: list[tuple[exp.Expr, exp.Column]] = []
        kept = []
        for c in conjuncts(where.this) if where is not None else []:
            pair = _correlation(c, own)
            if pair is not None:
                pairs.append(pair)
            elif any(col.table and col.table.lower() not in own for col in c.find_all(exp.Column)):
                raise SqlError(f"unsupported correlation {c.sql(dialect='postgres')} in {what}: a subquery may use "
                               "the outer query's columns only in equalities with its own columns, at the top level "
                               "of its WHERE")
            else:
                kept.append(c)
        body.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
        rest = [c for c in _scoped_columns(body) if c.table and c.table.lower() not in own]
        if rest:
            raise SqlError(f"unsupported use of the outer column {rest[0].sql(dialect='postgres')} in {what}: a "
                           "subquery may use the outer query's columns only in equalities with its own columns, at "
                           "the top level of its WHERE")
        return body, pairs

    def alias(self) -> str:
        return f"{JOINED_PREFIX}{next(self.ids)}"

    def join(self, body: exp.Select, alias: str, on: exp.Expr | None, left: bool = False) -> None:
        """`body AS alias` added to FROM: a LEFT JOIN ON `on`, or an inner (comma) join whose
        condition goes to WHERE."""
        item = exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias)))
        joins = self.sel.args.get("joins") or []
        if left:
            joins.append(exp.Join(this=item, side="LEFT", on=on))
        else:
            joins.append(exp.Join(this=item))
            if on is not None:
                self.conds.append(on)
        self.sel.set("joins", joins)


def qualify_outer(query: exp.Expr, columns_of: ColumnsOf) -> None:
    """Qualify by its enclosing query's FROM item each column a subquery outside FROM names
    unqualified that none of its own FROM items has and exactly one enclosing item has, as
    PostgreSQL resolves it (the nearest query level that has the name)."""
    for sel in list(query.find_all(exp.Select)):
        scopes = _enclosing(sel)
        if not scopes:
            continue
        own = _offered(sel, columns_of)
        for col in _scoped_columns(sel):
            name = col.name.lower()
            if col.table or isinstance(col.this, exp.Star) or own is None or any(
                    cols is None or name in cols for cols in own.values()):
                continue
            for outer in scopes:
                items = _offered(outer, columns_of)
                if items is None or any(cols is None for cols in items.values()):
                    break  # a level whose columns are unknown: leave it to the planner's error
                having = [alias for alias, cols in items.items() if cols is not None and name in cols]
                if len(having) == 1:
                    col.set("table", exp.to_identifier(having[0]))
                if having:
                    break


def _enclosing(sel: exp.Select) -> list[exp.Select]:
    """The queries whose columns `sel` may name, nearest first: none for a FROM item's query."""
    out: list[exp.Select] = []
    node: exp.Expr = sel
    while True:
        parent = node.parent
        while isinstance(parent, exp.Subquery | exp.Paren):
            node, parent = parent, parent.parent
        if parent is None or isinstance(parent, exp.From | exp.Join) or isinstance(parent, exp.Union):
            return out
        outer = node.find_ancestor(exp.Select)
        if outer is None:
            return out
        out.append(outer)
        node = outer


def _offered(sel: exp.Select, columns_of: ColumnsOf) -> dict[str, set[str] | None] | None:
    """Each FROM item of `sel` by alias with its column names (None: not known here)."""
    src = sel.args.get("from_") or sel.args.get("from")
    items = ([src.this] if src is not None else []) + [j.this for j in sel.args.get("joins") or []]
    out: dict[str, set[str] | None] = {}
    for it in items:
        cols: set[str] | None = None
        if isinstance(it, exp.Table) and isinstance(it.this, exp.Identifier) and not it.args.get("db"):
            cols = columns_of(it.name.lower())
        elif isinstance(it, exp.Table) and isinstance(it.this, exp.Anonymous) and it.this.expressions \
                and isinstance(first := it.this.expressions[0], exp.Column):
            cols = columns_of(first.name.lower())  # TUMBLE / HOP: the table's columns and the window's
            cols = None if cols is None else cols | {"window_start", "window_end"}
        elif isinstance(it, exp.Subquery) and isinstance(it.this, exp.Select) and not any(
                isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
                for e in it.this.expressions):
            cols = {e.alias_or_name.lower() for e in it.this.expressions}
        alias = it.args.get("alias")
        if cols is not None and isinstance(alias, exp.TableAlias) and alias.columns:
            cols |= {c.name.lower() for c in alias.columns}  # renamed: either name is taken as offered
        if it.alias:
            out[it.alias.lower()] = cols
        elif isinstance(it, exp.Table) and isinstance(it.this, exp.Identifier):
            out[it.name.lower()] = cols
        elif isinstance(it, exp.Table) and isinstance(it.this, exp.Anonymous) and it.this.expressions:
            out[it.this.expressions[0].name.lower()] = cols
        else:
            return None
    return out


def _select_of(sub: exp.Expr, what: str) -> exp.Select:
    body = sub.this if isinstance(sub, exp.Subquery) else sub
    if isinstance(body, exp.Subquery):
        return _select_of(body, what)
    if not isinstance(body, exp.Select):
        raise SqlError(f"unsupported {type(body).__name__} in {what}; expected SELECT")
    limit = body.args.get("limit")
    if what == "EXISTS" and not body.args.get("offset") and isinstance(limit, exp.Limit) and isinstance(
            count := limit.args.get("expression"), exp.Literal) and count.name.isdigit() and int(count.name) >= 1:
        body.set("limit", None)  # whether a row exists does not depend on how many are returned
    if body.args.get("limit") or body.args.get("offset"):
        raise SqlError(f"LIMIT / OFFSET in a subquery of {what} is not supported")
    return body


def _scoped_columns(body: exp.Select) -> list[exp.Column]:
    """The columns `body` itself names (not those of the subqueries in its FROM, which see only
    their own tables)."""
    return [c for c in body.find_all(exp.Column) if c.find_ancestor(exp.Select) is body]


def _named(e: exp.Expr) -> exp.Expr:
    """A SELECT item that is a bare scalar subquery, named as PostgreSQL names it: after its one
    column (`(SELECT max(x) ...)` is `max`)."""
    if not isinstance(e, exp.Subquery) or not isinstance(body := e.this, exp.Select) or len(body.expressions) != 1:
        return e
    first = body.expressions[0]
    name = first.alias if isinstance(first, exp.Alias) else first.name if isinstance(first, exp.Column) else (
        first.sql_name().lower() if isinstance(first, exp.Func) else "?column?")
    return exp.Alias(this=e, alias=exp.to_identifier(name))  # (alias_ would name the subquery itself)


def _plain(body: exp.Select) -> bool:
    """No GROUP BY, HAVING, DISTINCT or aggregate: its rows are its FROM's rows that pass WHERE."""
    return not (body.args.get("group") or body.args.get("having") or body.args.get("distinct")
                or any(e.find(exp.AggFunc) for e in body.expressions))


def _wrapped(body: exp.Select, value: exp.Expr, name: str) -> exp.Select:
    """`SELECT * FROM (body with its one column named name)`: its values as one named column."""
    inner = body.copy()
    inner.set("expressions", [value.copy().as_(f"{HIDDEN_PREFIX}{name}")])
    inner.set("order", None)
    return exp.select(exp.column(f"{HIDDEN_PREFIX}{name}")).from_(exp.Subquery(
        this=inner, alias=exp.TableAlias(this=exp.to_identifier(f"{HIDDEN_PREFIX}{name}_src"))))


def _aliases(body: exp.Select) -> set[str]:
    """The names a subquery's own columns may be qualified with: its FROM items' aliases or names."""
    src = body.args.get("from_") or body.args.get("from")
    items = [src.this] if src is not None else []
    items += [j.this for j in body.args.get("joins") or []]
    out = set()
    for it in items:
        if isinstance(it, exp.Table) and isinstance(it.this, exp.Anonymous) and not it.alias:
            first = it.this.expressions[0] if it.this.expressions else None
            if isinstance(first, exp.Column):
                out.add(first.name.lower())  # TUMBLE(t, ...) is read as t
        elif it.alias_or_name:
            out.add(it.alias_or_name.lower())
    return out


def _correlation(c: exp.Expr, own: set[str]) -> tuple[exp.Expr, exp.Column] | None:
    if not isinstance(c, exp.EQ):
        return None
    for a, b in ((c.this, c.expression), (c.expression, c.this)):
        if isinstance(b, exp.Column) and b.table and b.table.lower() not in own and not any(
                col.table and col.table.lower() not in own for col in a.find_all(exp.Column)) \
                and a.find(exp.Column):
            return a, b
    return None


def _inside_aggregate(node: exp.Expr, top: exp.Expr) -> bool:
    p = node.parent
    while p is not None and p is not top.parent:
        if isinstance(p, exp.AggFunc):
            return True
        p = p.parent
    return False


def _aggregates(e: exp.Expr) -> bool:
    """Whether `e` aggregates its query's rows: an aggregate call not inside a subquery or a window."""
    return any(not any(isinstance(p, exp.Subquery | exp.Window) for p in _ancestors(a, e))
               for a in e.find_all(exp.AggFunc))


def _ancestors(node: exp.Expr, top: exp.Expr) -> Iterator[exp.Expr]:
    p = node.parent
    while p is not None and p is not top.parent:
        yield p
        p = p.parent


def conjuncts(e: exp.Expr) -> list[exp.Expr]:
    """The terms of a condition joined by AND."""
    if isinstance(e, exp.Paren):
        return conjuncts(e.this)
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    return [e]
