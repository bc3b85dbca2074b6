"""Set-returning functions, `generate_series(a, b[, step])` and `unnest(array)`, planned as a
`ProjectSet` (`stream/project_set.py`), as in PostgreSQL and RisingWave:

- in the SELECT list (`SELECT k, unnest(ARRAY[a, b]) AS x FROM t`): after WHERE, each call a column
  of one project set over the FROM's rows (the calls of one list run in lockstep), each call then
  replaced by its column, so it may sit inside an expression (`generate_series(1, n) * 2`);
- in FROM: a FROM item alone (`FROM generate_series(1, 10) AS g(v)`: one row of no columns, exploded),
  or the last items of FROM, reading the items before them (`FROM t, unnest(...) AS u(x)`,
  `CROSS JOIN [LATERAL] ...`, `LATERAL generate_series(1, t.n)`): a project set over the FROM so far;
  `WITH ORDINALITY` adds the 1-based position (the project set's ordinal + 1).

The MV's key gets the ordinal (0-based, RisingWave's `projected_row_id`) as a hidden column, so an
input row's equal elements stay apart. The operator makes each call a Spark array
(`ProjectSet.array_sql`): `generate_series` a guarded `sequence`, empty where PostgreSQL's series is
(the step away from the end, a NULL argument) and the row's error for a step of 0, as PostgreSQL's.
Arrays are not a column type, so `unnest` takes an array constructor, `ARRAY[a, b, ...]`."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from sparkwave.core.schema import SqlType
from sparkwave.frontend import constants
from sparkwave.frontend.constants import NotConstant
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.scope import Item, Scope
from sparkwave.frontend.plan.sources import values_item
from sparkwave.stream.expressions import Expr
from sparkwave.stream.operator import Operator
from sparkwave.stream.project_set import ProjectSet
from sparkwave.stream.values import Values

CALLS = (exp.Explode, exp.GenerateSeries)  # in a SELECT list: unnest(...), generate_series(...)
_INTEGERS = ("smallint", "int", "bigint")
_TIMES = ("timestamp", "timestamptz")
FROM_HINT = "write FROM t, unnest(...) AS u(x) or FROM t CROSS JOIN LATERAL generate_series(...) AS g"


def has_sets(q: exp.Select) -> bool:
    return any(e.find(*CALLS) for e in q.expressions)


def is_set_item(t: exp.Expr) -> bool:
    """A FROM item that is a set-returning call."""
    if isinstance(t, exp.Lateral):
        t = t.this
    return isinstance(t, exp.Unnest | exp.GenerateSeries) or (isinstance(t, exp.Table) and
                                                              isinstance(t.this, exp.GenerateSeries))


@dataclass
class _Call:
    """One set-returning call: its node, the column it fills and the name PostgreSQL gives it."""

    node: exp.Expr
    name: str


# --- a call's array -----------------------------------------------------------------------------
def _set(ctx: PlanContext, scope: Scope, node: Operator, call: exp.Expr) -> tuple[str, list[str], str]:
    """(the set function, its Spark SQL arguments over `node`'s columns, its element type)."""
    if isinstance(call, exp.GenerateSeries):
        return _series(ctx, scope, node, call)
    arrays = [call.this, *call.expressions] if isinstance(call, exp.Explode) else list(call.expressions)
    if len(arrays) != 1:
        raise ctx.err("unnest() of several arrays is supported only in FROM (unnest(a, b) AS u(x, y))", "unnest")
    arr = arrays[0].unnest() if isinstance(arrays[0], exp.Paren) else arrays[0]
    if not isinstance(arr, exp.Array) or not arr.expressions:
        raise ctx.err(f"unnest() takes an array constructor, ARRAY[a, b, ...] (arrays are not a column type); got "
                      f"{arr.sql(dialect='postgres')}", "unnest")
    args, ty = _cast(ctx, scope, node, arr.expressions, "ARRAY[...]")
    return "unnest", args, ty


def _cast(ctx: PlanContext, scope: Scope, node: Operator, values: list[exp.Expr], where: str) -> tuple[list[str], str]:
    """`values` in Spark SQL, each cast to their common type (PostgreSQL's: a NULL takes the
    others' type, text if all are NULL), and that type."""
    sql = [scope.resolve(e, where) for e in values]
    typed = [(f"_e{i}", s) for i, (e, s) in enumerate(zip(values, sql, strict=True)) if not isinstance(e, exp.Null)]
    types = ctx.types(node, typed, None) if typed else {}
    ty = "varchar"
    for i, other in enumerate(types.values()):
        ty = other if i == 0 or other == ty else ctx.oracle.common_type(ty, other)
    spark = SqlType(ty).spark
    return [s if types.get(f"_e{i}") == ty else f"CAST({s} AS {spark})" for i, s in enumerate(sql)], ty


def _series(ctx: PlanContext, scope: Scope, node: Operator, call: exp.GenerateSeries) -> tuple[str, list[str], str]:
    start, end, step = call.args["start"], call.args["end"], call.args.get("step")
    if call.args.get("is_end_exclusive"):
        raise ctx.err("generate_series() with an exclusive end is not supported", "generate_series")
    (a, b), ty = _cast(ctx, scope, node, [start, end], "generate_series()")
    if ty in _INTEGERS and step is not None:  # the step's type too: (1, 5, 1.5) is PostgreSQL's numeric series
        (a, b, _), ty = _cast(ctx, scope, node, [start, end, step], "generate_series()")
    if ty not in _INTEGERS + _TIMES:
        raise ctx.err(f"generate_series() of {ty} is not supported: it takes integers (smallint, int, bigint), or "
                      "timestamps with an interval step; cast the arguments", "generate_series")
    if ty in _TIMES and step is None:
        raise ctx.err("generate_series() of timestamps needs a step: generate_series(a, b, INTERVAL '1 hour')",
                      "generate_series")
    if step is None or ty in _INTEGERS:
        ((s,), _) = _cast(ctx, scope, node, [exp.Cast(this=step or exp.Literal.number(1), to=exp.DataType.build(
            ty))], "generate_series()")
    else:
        _fixed_step(ctx, step)
        s = scope.resolve(step, "generate_series()")
    return "generate_series", [a, b, s], ty


def _fixed_step(ctx: PlanContext, step: exp.Expr) -> None:
    """Refuse a month or year step: PostgreSQL adds the step to the previous element (Jan 31, Feb 29,
    Mar 29), Spark's `sequence` multiplies it from the start (Jan 31, Feb 29, Mar 31); the two agree
    only for steps of a fixed length."""
    for part in step.find_all(exp.Interval, exp.Cast):
        if isinstance(part, exp.Cast) and not part.to.is_type(exp.DataType.Type.INTERVAL):
            continue
        try:
            constants.interval(part)
        except NotConstant:
            raise ctx.err(f"generate_series() of timestamps with the step {part.sql(dialect='postgres')} is not "
                          "supported: the step must have a fixed length (weeks, days, hours, ... not months or "
                          "years); write e.g. INTERVAL '30 days'", "generate_series") from None


def _project_set(ctx: PlanContext, scope: Scope, node: Operator, calls: list[_Call], ordinal: str) -> ProjectSet:
    sets, columns = [], []
    for c in calls:
        out = ctx.name(c.name)
        fn, args, ty = _set(ctx, scope, node, c.node)
        sets.append((out, fn, [Expr.of_text(a) for a in args]))
        columns.append((out, ty))
    return ProjectSet(ctx.next_id(), [*node.columns, *columns, (ordinal, "bigint")], [*node.key, ordinal],
                      input=node, sets=sets, ordinal=ordinal)


def _stand_in(op: Operator, names: list[str]) -> Values:
    """An item's node for name resolution only: the columns the project set adds (the others are
    the other items' columns, each named once in a scope); never part of the tree."""
    return Values(op.id, [(n, t) for n, t in op.columns if n in names], [], rows=[])


# --- in the SELECT list ---------------------------------------------------------------------------
def select_sets(ctx: PlanContext, q: exp.Select, node: Operator, items: list[Item], predicate: str | None
                ) -> tuple[exp.Select, Operator, list[Item]]:
    """The SELECT list's set-returning calls as a project set over `node` (after `predicate`, WHERE):
    `q` with each call replaced by its column, the project set, and the items with its columns."""
    if q.args.get("group") or q.args.get("having") or q.args.get("distinct") or any(
            e.find(exp.AggFunc, exp.Window) for e in q.expressions):
        raise ctx.err("set-returning functions (unnest, generate_series) with GROUP BY, DISTINCT, aggregates or "
                      "window functions are not supported; call them in a subquery: SELECT ... FROM (SELECT "
                      "unnest(...) AS x FROM t) s GROUP BY ...", "SELECT")
    q = q.copy()
    calls = [_Call(c, _default_name(c)) for e in q.expressions for c in e.find_all(*CALLS)]
    for c in calls:
        if any(isinstance(n, CALLS) for n in c.node.walk() if n is not c.node):
            raise ctx.err(f"set-returning functions may not be nested: {c.node.sql(dialect='postgres')}", c.name)
    if predicate is not None:
        node = ctx.passthrough(node, predicate=predicate)
    scope = Scope(ctx, items)
    ps = _project_set(ctx, scope, node, calls, ctx.name("projected_row_id"))
    alias = f"_sets{ps.id}"
    cols = {}
    for i, (c, (out, _, _)) in enumerate(zip(calls, ps.sets, strict=True)):
        cols[f"s{i}"] = out
        col = exp.column(f"s{i}", table=alias)
        bare = isinstance(c.node.parent, exp.Select)  # PostgreSQL names its column after the function
        c.node.replace(exp.alias_(col, c.name) if bare else col)
    item = Item(alias, _stand_in(ps, list(cols.values())), cols, [], pos=len(items))
    return q, ps, [*items, item]


def _default_name(call: exp.Expr) -> str:
    return "generate_series" if isinstance(call, exp.GenerateSeries) else "unnest"


# --- in FROM --------------------------------------------------------------------------------------
def split_from(ctx: PlanContext, q: exp.Select) -> tuple[exp.Select, list[exp.Join]]:
    """`q` without its last joins that are set-returning calls (each planned over the FROM before
    it, `join_sets`), and those joins; a set-returning call elsewhere in FROM is a FROM item of
    constants (`from_item`)."""
    joins = list(q.args.get("joins") or [])
    at = len(joins)
    while at and is_set_item(joins[at - 1].this):
        at -= 1
    later = joins[at:]
    if not later:
        return q, []
    for j in later:
        side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
        if side or kind not in ("", "CROSS") or j.args.get("using") or (j.args.get("on") and not _true(j.args["on"])):
            raise ctx.err(f"{(side + ' ' + kind).strip() or 'a'} JOIN of a set-returning function is not supported "
                          "(an input row whose series is empty would be dropped); write a comma or CROSS JOIN",
                          "JOIN")
    q = q.copy()
    q.set("joins", q.args["joins"][:at] or None)
    return q, later


def _true(on: exp.Expr) -> bool:
    return isinstance(on, exp.Boolean) and on.this is True


def join_sets(ctx: PlanContext, node: Operator, items: list[Item], t: exp.Expr) -> tuple[Operator, Item]:
    """A set-returning FROM item `t` over the FROM before it (`node`, `items`): the new FROM node,
    and `t`'s item."""
    calls, alias, ordinality = _from_call(ctx, t)
    scope = Scope(ctx, items)
    ps = _project_set(ctx, scope, node, calls, ctx.name("projected_row_id"))
    names = _column_names(ctx, calls, alias, ordinality)
    cols = {n: out for n, (out, _, _) in zip(names, ps.sets, strict=False)}
    top: Operator = ps
    if ordinality:
        cols[names[-1]] = ctx.name(names[-1])
        top = ctx.passthrough(ps, (cols[names[-1]], f"`{ps.ordinal}` + 1"))
    name = alias.name.lower() if alias is not None and alias.name else calls[0].name
    return top, Item(name, _stand_in(top, list(cols.values())), cols, names, pos=len(items))


def from_item(ctx: PlanContext, t: exp.Expr) -> Item:
    """A set-returning call as a FROM item of its own: over one row of no columns, so its arguments
    are constants."""
    call = t.this if isinstance(t, exp.Lateral) else t
    if (col := call.find(exp.Column)) is not None:
        raise ctx.err(f"a set-returning function in FROM may read columns of the FROM items before it only as one "
                      f"of the last FROM items; {FROM_HINT} (it reads {col.sql(dialect='postgres')})", col.name)
    one = values_item(ctx, None)
    top, item = join_sets(ctx, one.node, [one], t)
    item.node = top
    return item


def _from_call(ctx: PlanContext, t: exp.Expr) -> tuple[list[_Call], exp.TableAlias | None, bool]:
    """The calls of a set-returning FROM item, its alias and whether it is WITH ORDINALITY."""
    alias, ordinality = t.args.get("alias"), bool(t.args.get("ordinality"))
    if isinstance(t, exp.Lateral):
        if t.args.get("view") or t.args.get("outer") or t.args.get("cross_apply") is not None:
            raise ctx.err("LATERAL VIEW / OUTER APPLY are not supported; " + FROM_HINT, "LATERAL")
        t = t.this
        alias = alias or t.args.get("alias")
        ordinality = ordinality or bool(t.args.get("ordinality"))
    if isinstance(t, exp.GenerateSeries):  # LATERAL generate_series(...)
        return [_Call(t, "generate_series")], alias, ordinality
    if isinstance(t, exp.Table):
        ordinality = ordinality or bool(t.args.get("ordinality"))
        alias = alias or t.args.get("alias")
        return [_Call(t.this, "generate_series")], alias, ordinality
    assert isinstance(t, exp.Unnest), "BUG: is_set_item checks the FROM item"
    offset = t.args.get("offset")
    if isinstance(offset, exp.Identifier) and isinstance(alias, exp.TableAlias):  # WITH ORDINALITY AS u(x, n)
        alias = alias.copy()
        alias.append("columns", offset.copy())
    return [_Call(exp.Explode(this=a), "unnest") for a in t.expressions], alias, ordinality or bool(offset)


def _column_names(ctx: PlanContext, calls: list[_Call], alias: exp.TableAlias | None, ordinality: bool) -> list[str]:
    """PostgreSQL's: the alias's column list, else the alias itself for one call, else the
    function's name; `ordinality` last."""
    listed = [c.name.lower() for c in alias.columns] if alias is not None and alias.columns else []
    want = len(calls) + int(ordinality)
    if len(listed) > want:
        raise ctx.err(f"the set-returning FROM item has {want} columns available but {len(listed)} columns "
                      "specified", "FROM")
    if not listed and alias is not None and alias.name and len(calls) == 1:
        listed = [alias.name.lower()]
    names = (listed + [c.name for c in calls[len(listed):]] + (["ordinality"] if ordinality else []))[:want]
    if len(set(names)) != len(names):
        raise ctx.err(f"column names of the set-returning FROM item are not unique: {', '.join(names)}", "FROM")
    return names


def check_placement(ctx: PlanContext, q: exp.Select) -> None:
    """PostgreSQL's rule: a set-returning call in the SELECT list (or as a FROM item), not in a condition."""
    for arg, where in (("where", "WHERE"), ("having", "HAVING"), ("group", "GROUP BY"), ("qualify", "QUALIFY")):
        if (part := q.args.get(arg)) is not None and (call := part.find(*CALLS)) is not None:
            raise ctx.err(f"set-returning functions are not allowed in {where}: {call.sql(dialect='postgres')}",
                          _default_name(call))
    sources = [f.this for f in [q.args.get("from_")] if f is not None] + [j.this for j in q.args.get("joins") or []]
    for t in sources:
        if isinstance(t, exp.Table) and t.args.get("ordinality") and not is_set_item(t):
            raise ctx.err(f"WITH ORDINALITY applies to a set-returning function, not to the table {t.name}",
                          "ORDINALITY")
    for e in q.expressions:  # PostgreSQL and RisingWave: a call is not evaluated conditionally
        for call in e.find_all(*CALLS):
            node = call
            while node is not e and (node := node.parent) is not None and not isinstance(
                    node, exp.Case | exp.If | exp.Coalesce):
                pass
            if isinstance(node, exp.Case | exp.If | exp.Coalesce):
                raise ctx.err(f"set-returning functions are not allowed in CASE or COALESCE: "
                              f"{call.sql(dialect='postgres')}; call it in a subquery or LATERAL FROM item and "
                              "use CASE over its column", _default_name(call))
    for j in q.args.get("joins") or []:
        if (on := j.args.get("on")) is not None and (call := on.find(*CALLS)) is not None:
            raise ctx.err(f"set-returning functions are not allowed in JOIN conditions: {call.sql(dialect='postgres')}",
                          _default_name(call))
