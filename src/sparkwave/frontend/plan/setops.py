"""Set operations: `UNION ALL` as a `Union` operator (`stream/union.py`), and `UNION`, `INTERSECT`,
`EXCEPT` (set semantics) as grouping over it, each with PostgreSQL's meaning.

- `UNION ALL` (a chain of them is one union of every branch): each branch planned as its own query,
  then a projection per branch that casts its columns to the types PostgreSQL unifies them to
  (`INT` and `BIGINT` give `BIGINT`, `INT` and `NUMERIC` give `NUMERIC`; a bare `NULL` takes the
  other branches' type; a string and a number are an error, as there), adds the branch's tag and
  its key columns (`Union`'s key). Column names are the first branch's.
- `UNION`: the union's rows grouped by every column (GROUP BY puts NULLs in one group, as set
  operations compare them).
- `INTERSECT` / `EXCEPT`: the two branches' union grouped by every column with a count of each
  branch's rows per group, kept where both counts are positive (`INTERSECT`) or the right one is 0
  (`EXCEPT`).
- `INTERSECT ALL` / `EXCEPT ALL`: each branch's rows numbered within their group of equal rows
  (`row_number() OVER (PARTITION BY every column)`, in a subquery), then `INTERSECT` / `EXCEPT` of
  (row, number): the n-th copy of a row is kept if the other branch has (`INTERSECT ALL`) or has not
  (`EXCEPT ALL`) an n-th copy, so a row appears min(m, n) or max(m - n, 0) times."""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from sparkwave.core.schema import SqlType
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.stream.aggregate import Agg, Aggregate
from sparkwave.stream.expressions import column_ref, exprs_of
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import SIDE, OverWindow
from sparkwave.stream.project import Project
from sparkwave.stream.union import Union

Outputs = list[tuple[str, str]]  # (output name, internal column)
Planned = tuple[Project, Outputs]
PlanQuery = Callable[[PlanContext, exp.Expr], Planned]
MAX_BRANCHES = 256  # a union's inputs (grouping sets expand into one each)

# PostgreSQL's type categories: a set operation unifies types within one, never across
_CATEGORY = {"smallint": "numeric", "int": "numeric", "bigint": "numeric", "real": "numeric", "double": "numeric",
             "varchar": "string", "boolean": "boolean", "date": "datetime", "timestamp": "datetime",
             "timestamptz": "datetime", "bytea": "bytea"}
_PG_TYPE = {"int": "integer", "double": "double precision", "varchar": "text",
            "timestamptz": "timestamp with time zone", "timestamp": "timestamp without time zone"}


def set_operation(ctx: PlanContext, q: exp.SetOperation, plan: PlanQuery) -> Planned:
    """`q` as a tree whose root projection has the set operation's output columns."""
    word = _word(q)
    if q.args.get("with_") or q.args.get("with"):  # (the top query's WITH is inlined by `rewrite`)
        raise ctx.err("unsupported WITH inside a subquery of a materialized view; move it to the top", "WITH")
    for arg in ("order", "limit", "offset"):  # (`rewrite` makes them a SELECT over the set operation)
        if q.args.get(arg):
            raise ctx.err(f"unsupported {arg.upper()} on {word} here; put the set operation in a subquery and "
                          f"order / limit the query over it", arg.upper())
    if isinstance(q, exp.Union) and not q.args.get("distinct") and not q.args.get("by_name"):
        branches = _union_all_branches(q)
        if len(branches) > MAX_BRANCHES:
            raise ctx.err(f"UNION ALL of {len(branches)} queries; at most {MAX_BRANCHES} are supported", "UNION")
        return union_all(ctx, [plan(ctx, branch(b)) for b in branches], word)
    pair = [plan(ctx, branch(q.this)), plan(ctx, branch(q.expression))]
    if q.args.get("by_name"):
        pair = _corresponding(ctx, q, pair, word)
    if isinstance(q, exp.Union):
        if not q.args.get("distinct"):
            return union_all(ctx, pair, word)
        node, outputs = union_all(ctx, pair, word)
        return _grouped(ctx, node, outputs, None)
    kind = "intersect" if isinstance(q, exp.Intersect) else "except"
    if not q.args.get("distinct"):  # INTERSECT ALL / EXCEPT ALL: set semantics over (row, its copy's number)
        node, outputs = union_all(ctx, [_numbered(ctx, p) for p in pair], word)
        kept, out = _grouped(ctx, node, outputs, kind)
        return kept, out[:-1]  # the copy's number is no output (a hidden key column of the MV)
    node, outputs = union_all(ctx, pair, word)
    return _grouped(ctx, node, outputs, kind)


def _corresponding(ctx: PlanContext, q: exp.SetOperation, pair: list[Planned], word: str) -> list[Planned]:
    """`CORRESPONDING [BY (c, ...)]` (the SQL standard's, RisingWave's): the columns both operands
    name, in the first one's order (or the BY list's), matched by name. DuckDB's `BY NAME`, which
    keeps the columns only one side has, is refused."""
    if str(q.args.get("kind") or "").upper() != "INNER":
        raise ctx.err(f"{word} BY NAME is not supported in a materialized view; write {word} CORRESPONDING (the "
                      "columns both queries name), or list the same columns in each query", "BY")
    by = [c.name.lower() for c in q.args.get("on") or []]
    for i, (_, outs) in enumerate(pair, 1):
        names = [n for n, _ in outs]
        if dupes := sorted({n for n in names if names.count(n) > 1} & set(by or names)):
            raise ctx.err(f"column {dupes[0]!r} appears more than once in query {i} of {word} CORRESPONDING",
                          "CORRESPONDING")
        if missing := [c for c in by if c not in names]:
            raise ctx.err(f"column {missing[0]!r} of CORRESPONDING BY is not in query {i} (its columns: "
                          f"{', '.join(names)})", "CORRESPONDING")
    names = by or [n for n, _ in pair[0][1] if n in {m for m, _ in pair[1][1]}]
    if not names:
        raise ctx.err(f"the queries of {word} CORRESPONDING have no column name in common", "CORRESPONDING")
    return [(node, [(n, dict(outs)[n]) for n in names]) for node, outs in pair]


def _word(q: exp.SetOperation) -> str:
    kind = "UNION" if isinstance(q, exp.Union) else "INTERSECT" if isinstance(q, exp.Intersect) else "EXCEPT"
    return kind if q.args.get("distinct") else f"{kind} ALL"


def branch(e: exp.Expr) -> exp.Expr:
    """A set operation's operand as a query: parentheses taken off, `VALUES` as `SELECT * FROM`."""
    while isinstance(e, exp.Subquery | exp.Paren) and not e.alias:
        e = e.this
    if isinstance(e, exp.Values):
        return exp.select("*").from_(e.copy())
    return e


def _union_all_branches(q: exp.Expr) -> list[exp.Expr]:
    """The operands of a chain of UNION ALLs (nested either way), in order."""
    if isinstance(q, exp.Union) and not q.args.get("distinct") and not _modified(q):
        return [*_union_all_branches(branch(q.this)), *_union_all_branches(branch(q.expression))]
    return [q]


def _modified(q: exp.Expr) -> bool:
    return any(q.args.get(a) for a in ("order", "limit", "offset", "with_", "by_name"))


def union_all(ctx: PlanContext, planned: list[Planned], word: str) -> Planned:
    """The branches' rows as one `Union`, under a projection of its columns (named as the first
    branch's) and key (the branch tag, then each branch's key)."""
    names = [n for n, _ in planned[0][1]]
    for i, (_, outs) in enumerate(planned[1:], 2):
        if len(outs) != len(names):
            raise ctx.err(f"each {word} query must have the same number of columns: the first query has "
                          f"{len(names)}, query {i} has {len(outs)}", word.split()[0])
    types = [_unified(ctx, [(node, outs[j][1]) for node, outs in planned], names[j], word) for j in range(len(names))]
    data = [ctx.name(n) for n in names]
    seen = {n: 1 for n in names}  # the union's own columns' names, each read alike once (`id`, `id_2`)

    def fresh(base: str) -> str:
        seen[base] = seen.get(base, 0) + 1
        return ctx.name(base if seen[base] == 1 else f"{base}_{seen[base]}")

    tag = fresh("branch")
    slots: list[tuple[str, str]] = []  # key columns of one branch, NULL on the others': (union column, type)
    keys: list[list[str]] = []  # per branch: the union column holding each of its key columns
    for node, outs in planned:
        by_out = {i: j for j, (_, i) in enumerate(outs)}
        mine = []
        for k in node.key:  # a data column the branch passes on as it is, in its own type; else a slot
            j = next((by_out[n] for n, e in node.exprs if n in by_out and column_ref(e) == k
                      and types[by_out[n]] == node.type_of(k)), None)
            if j is None:
                slots.append((fresh(_base(k)), node.type_of(k)))
            mine.append(data[j] if j is not None else slots[-1][0])
        keys.append(mine)
    parts: list[Operator] = []
    branches: list[list[str]] = []
    for b, (node, outs) in enumerate(planned):
        exprs = [(ctx.name(names[j]), _cast(node, i, types[j])) for j, (_, i) in enumerate(outs)]
        exprs.append((ctx.name(_base(tag)), str(b)))
        own = dict(zip(keys[b], node.key, strict=True))
        exprs += [(ctx.name(_base(s)), f"`{own[s]}`" if s in own else f"CAST(NULL AS {SqlType(t).spark})")
                  for s, t in slots]
        held = dict(zip([*data, tag, *[s for s, _ in slots]], [n for n, _ in exprs], strict=True))
        parts.append(ctx.project(node, exprs, None, list(dict.fromkeys([held[tag], *[held[u] for u in keys[b]]]))))
        branches.append([n for n, _ in exprs])
    columns = [*zip(data, types, strict=True), (tag, "int"), *slots]
    for part in parts:
        got = [t for _, t in part.columns]
        assert got == [t for _, t in columns], f"BUG: a union branch's types {got} are not the union's {columns}"
    key = list(dict.fromkeys([tag, *[u for mine in keys for u in mine]]))
    union = Union(ctx.next_id(), columns, key, parts=parts, branches=branches)
    outputs = [(n, ctx.name(n)) for n in names]
    proj = ctx.project(union, [(i, f"`{d}`") for (_, i), d in zip(outputs, data, strict=True)]
                       + [(k, f"`{k}`") for k in key], None, key)
    return proj, outputs


def _base(internal: str) -> str:
    """The name an internal column was made from (`c3_id` -> `id`)."""
    return re.sub(r"^c\d+_", "", internal)


def _unified(ctx: PlanContext, columns: list[tuple[Project, str]], name: str, word: str) -> str:
    """The type PostgreSQL gives a set operation's column from its branches' (a bare NULL has none)."""
    typed = [node.type_of(c) for node, c in columns if not _is_null(node, c)]
    if not typed:
        return "varchar"  # PostgreSQL's unknown as text
    out = typed[0]
    for t in typed[1:]:
        if _category(t) != _category(out):
            raise ctx.err(f"{word} types {_pg(out)} and {_pg(t)} cannot be matched (column {name!r})",
                          word.split()[0])
        out = t if t == out else ctx.oracle.common_type(out, t)
    return out


def _category(t: str) -> str:
    return "numeric" if t.startswith("decimal") else _CATEGORY.get(t, t)


def _pg(t: str) -> str:
    return "numeric" if t.startswith("decimal") else _PG_TYPE.get(t, t)


def _is_null(node: Project, column: str) -> bool:
    e = dict(node.exprs).get(column)
    return e is not None and str(e).strip().upper() == "NULL"


def _cast(node: Project, column: str, t: str) -> str:
    if _is_null(node, column):
        return f"CAST(NULL AS {SqlType(t).spark})"
    return f"`{column}`" if node.type_of(column) == t else f"CAST(`{column}` AS {SqlType(t).spark})"


def distinct_union(ctx: PlanContext, node: Project, outputs: Outputs) -> Planned:
    """A union's distinct rows (`SELECT DISTINCT` over GROUPING SETS: across the sets' rows)."""
    return _grouped(ctx, node, outputs, None)


def _grouped(ctx: PlanContext, node: Project, outputs: Outputs, kind: str | None) -> Planned:
    """The union's distinct rows (`kind` None: UNION), or those of the first branch that the second
    has (`intersect`) or has not (`except`): a group per row, NULLs equal."""
    tag = node.input.key[0] if isinstance(node.input, Union) else None
    assert tag is not None, "BUG: a set operation groups a union's rows"
    group = [ctx.name(n) for n, _ in outputs]
    pre = [(g, f"`{i}`") for g, (_, i) in zip(group, outputs, strict=True)]
    aggs: list[Agg] = []
    if kind is not None:
        for b in (0, 1):
            flag = ctx.name(f"in{b}")
            pre.append((flag, f"CASE WHEN `{tag}` = {b} THEN 1 END"))
            aggs.append(Agg("count", flag, ctx.name(f"n{b}"), "bigint"))
    below = ctx.project(node, pre, None, [])
    types = dict(below.columns)
    agg = Aggregate(ctx.next_id(), [(g, types[g]) for g in group] + [(a.out, a.type) for a in aggs], list(group),
                    input=below, group=list(group), aggs=aggs)
    having = None
    if kind is not None:
        n0, n1 = (f"`{a.out}`" for a in aggs)
        having = f"{n0} > 0 AND {n1} {'> 0' if kind == 'intersect' else '= 0'}"
    out = [(n, ctx.name(n)) for n, _ in outputs]
    proj = ctx.project(agg, [(i, f"`{g}`") for (_, i), g in zip(out, group, strict=True)]
                       + [(g, f"`{g}`") for g in group], having, list(group))
    return proj, out


def _numbered(ctx: PlanContext, planned: Planned) -> Planned:
    """A branch's rows with each one's number among its equal rows (1, 2, ...), as a last column:
    `row_number()` over a partition of every column (an `OverWindow`; ties in row-key order)."""
    node, outputs = planned
    cols = [i for _, i in outputs]
    order = ", ".join(f"`{k}`" for k in (node.key or cols))
    call = f"row_number() OVER (PARTITION BY `{SIDE}`, {', '.join(f'`{c}`' for c in cols)} ORDER BY {order})"
    copy = ctx.name("copy")
    types = ctx.types(node, [(copy, call)], None, extra=[(SIDE, "int")])
    over = OverWindow(ctx.next_id(), node.columns + [(copy, types[copy])], list(node.key), input=node,
                      partition=list(dict.fromkeys(cols)), calls=exprs_of([(copy, call)]))
    proj = ctx.project(over, [*[(i, f"`{i}`") for i in cols], (copy, f"`{copy}`"), *[(k, f"`{k}`") for k in node.key]],
                       None, list(node.key))
    return proj, [*outputs, ("copy", copy)]
