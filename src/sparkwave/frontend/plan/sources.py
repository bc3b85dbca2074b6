"""FROM items that read rows: a table or MV (`Scan`), `TUMBLE` / `HOP` over one (a windowed
`Scan`), and `VALUES` (constant rows, or the one row of a SELECT without FROM)."""

from __future__ import annotations

import re

from sqlglot import exp

from sparkwave.core.catalog import Relation
from sparkwave.core.errors import CatalogError
from sparkwave.core.schema import SqlType
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.scope import Item
from sparkwave.frontend.plan.types import UntypedError, readable
from sparkwave.frontend.postgres import GROWING
from sparkwave.stream.expressions import Expr, exprs_of
from sparkwave.stream.scan import Scan, Window
from sparkwave.stream.values import Values

_UNIT_SECONDS = {"second": 1, "seconds": 1, "minute": 60, "minutes": 60, "hour": 3600, "hours": 3600,
                 "day": 86400, "days": 86400}


def table_item(ctx: PlanContext, t: exp.Expr) -> Item:
    """A FROM item other than a subquery."""
    if isinstance(t, exp.Table) and isinstance(t.this, exp.Anonymous):
        return window_item(ctx, t)
    if isinstance(t, exp.Values):
        return values_item(ctx, t)
    if not isinstance(t, exp.Table) or t.args.get("db"):
        raise ctx.err(f"unsupported FROM item {t.sql(dialect='postgres')}; expected a table, an MV, TUMBLE, "
                      "HOP or a subquery", "FROM")
    rel = ctx.relation(t.name.lower())
    return scan(ctx, rel, (t.alias or rel.name).lower(), None)


def scan(ctx: PlanContext, rel: Relation, alias: str, window: Window | None) -> Item:
    exprs, cols, order, internal = [], {}, [], {}
    for c in rel.schema.columns:
        internal[c.name] = ctx.name(c.name)
        exprs.append((internal[c.name], f"`{c.name}`"))
        if not c.hidden:
            cols[c.name] = internal[c.name]
            order.append(c.name)
    columns = [(internal[c.name], c.type.name) for c in rel.schema.columns]
    key = [internal[k] for k in rel.schema.key]
    if window is not None:
        tcol = rel.schema.column(window.time)
        assert tcol is not None, "BUG: window_item checks the time column"
        for w in ("window_start", "window_end"):
            if w in cols:
                raise ctx.err(f"{rel.name!r} already has a column {w!r}; the window would hide it", w)
            internal[w] = ctx.name(w)
            exprs.append((internal[w], f"`{w}`"))
            cols[w] = internal[w]
            order.append(w)
            columns.append((internal[w], tcol.type.name))
        if window.kind == "hop":
            key.append(internal["window_start"])
    node = Scan(ctx.next_id(), columns, key, relation=rel.name, exprs=exprs_of(exprs), window=window)
    return Item(alias, node, cols, order)


def window_item(ctx: PlanContext, t: exp.Table) -> Item:
    """`TUMBLE(t, time, size)` or `HOP(t, time, slide, size)`: a scan with its window."""
    fn = t.this
    kind = fn.name.lower()
    args = fn.expressions
    if kind not in ("tumble", "hop"):
        raise ctx.err(f"unsupported table function {fn.name}; supported: TUMBLE, HOP", fn.name)
    want = 3 if kind == "tumble" else 4
    if len(args) != want:
        usage = "TUMBLE(table, time_col, size)" if kind == "tumble" else "HOP(table, time_col, slide, size)"
        raise ctx.err(f"{fn.name} takes {want} arguments: {usage}", fn.name)
    if not isinstance(args[0], exp.Column) or not isinstance(args[1], exp.Column):
        raise ctx.err(f"{fn.name}'s first two arguments are a table or MV name and a time column", fn.name)
    rel = ctx.relation(args[0].name.lower())
    time_col = args[1].name.lower()
    col = rel.schema.column(time_col)
    if col is None or col.hidden:
        raise CatalogError(f"unknown column {time_col!r} in {fn.name} of {rel.name!r} "
                           f"(at {ctx.stmt.where(time_col)})")
    if col.type.name not in ("timestamp", "timestamptz"):
        raise ctx.err(f"{fn.name}'s time column {time_col!r} is {col.type.name}; it needs a timestamp", time_col)
    if kind == "tumble":
        window = Window("tumble", time_col, interval(ctx, args[2], fn.name))
    else:
        slide, size = interval(ctx, args[2], fn.name), interval(ctx, args[3], fn.name)
        if size % slide:
            raise ctx.err(f"HOP's size ({size} s) must be a multiple of its slide ({slide} s)", fn.name)
        window = Window("hop", time_col, size, slide)
    return scan(ctx, rel, (t.alias or rel.name).lower(), window)


def interval(ctx: PlanContext, node: exp.Expr, fn: str) -> int:
    """A window's size or slide in seconds."""
    text = None
    if isinstance(node, exp.Interval):
        unit = node.args.get("unit")
        text = f"{node.this.name} {unit.name if unit else ''}".strip()
    elif isinstance(node, exp.Literal) and node.is_string:
        text = node.name
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]+)\s*", (text or "").lower())
    if not m or m.group(2) not in _UNIT_SECONDS or int(m.group(1)) <= 0:
        raise ctx.err(f"{fn} needs a positive interval of seconds, minutes, hours or days, "
                      f"got {node.sql(dialect='postgres')}", fn)
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2)]


def values_item(ctx: PlanContext, t: exp.Values | None) -> Item:
    """`VALUES (...), ...` as a FROM item (columns named by its alias list, else column1, ...,
    as in PostgreSQL), or, for a SELECT without FROM, one row of no columns."""
    tuples = [[]] if t is None else [list(r.expressions) if isinstance(r, exp.Tuple) else [r]
                                     for r in t.expressions]
    width = len(tuples[0])
    if any(len(r) != width for r in tuples):
        raise ctx.err(f"VALUES lists must all have the same length ({width} in the first)", "VALUES")
    alias = t.args.get("alias") if t is not None else None
    names = [c.name.lower() for c in alias.columns] if alias is not None and alias.columns else []
    if len(names) > width:
        raise ctx.err(f"VALUES has {width} columns available but {len(names)} columns specified", "VALUES")
    names += [f"column{i}" for i in range(len(names) + 1, width + 1)]
    for item in (i for r in tuples for i in r):
        if item.find(exp.Column, exp.Subquery, exp.Star, exp.AggFunc, exp.Window):
            raise ctx.err(f"VALUES items must be constants, not {item.sql(dialect='postgres')!r}", "VALUES")
        if grows := item.find(*GROWING):  # Spark's inline table refuses their size guard
            call = grows.sql(dialect="postgres").split("(")[0].lower()
            raise ctx.err(f"{call}() is not supported in the VALUES of a materialized view", "VALUES")
    internal = [ctx.name(n) for n in names]
    ordinal = ctx.name("_row_id")
    rows = [[ctx.spark_sql(i, []) for i in r] + [f"{n}L"] for n, r in enumerate(tuples)]
    try:
        types = [SqlType(ty) for ty in ctx.oracle.values_types([*internal, ordinal], rows)]
    except UntypedError as e:
        raise ctx.err(f"cannot evaluate VALUES: {readable(str(e))}", "VALUES") from None
    columns = [(n, ty.name) for n, ty in zip([*internal, ordinal], types, strict=True)]
    typed = [[Expr.of_text(f"CAST({v} AS {ty.spark})") for v, ty in zip(r, types, strict=True)] for r in rows]
    node = Values(ctx.next_id(), columns, [ordinal], rows=typed)
    name = alias.name.lower() if alias is not None and alias.name else f"_values{node.id}"
    return Item(name, node, dict(zip(names, internal, strict=True)), names)
