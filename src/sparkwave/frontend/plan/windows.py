"""Window functions (`f(...) OVER (PARTITION BY ... ORDER BY ...)`) in a SELECT list: one
`OverWindow` over the rows that pass WHERE, whose outputs the SELECT list then reads as the columns
of a hidden FROM item."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.scope import Item, Scope
from sparkwave.frontend.rewrite import output_name
from sparkwave.frontend.subqueries import HIDDEN_PREFIX, JOINED_PREFIX
from sparkwave.stream.expressions import exprs_of
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import SIDE, OverWindow

# window functions whose value depends on the order of tied rows and not on a frame: the planner
# orders ties by row key (as in any explicit ROWS frame)
_ROW_ORDERED = (exp.RowNumber, exp.Lag, exp.Lead, exp.Ntile)
# ... and those whose default frame (RANGE ... CURRENT ROW: the current row's peers) that order would change
_FRAMED = (exp.FirstValue, exp.LastValue, exp.NthValue)


def over(ctx: PlanContext, q: exp.Select, node: Operator, items: list[Item], predicate: str | None
         ) -> tuple[exp.Select, Operator]:
    """The SELECT items of `q` with window functions as the calls of one `OverWindow` over
    `node`'s rows that pass `predicate`; returns `q` with each such item a column of a hidden FROM
    item (added to `items`) that names its output, and the new node."""
    if predicate:
        node = ctx.passthrough(node, predicate=predicate)
    q = q.copy()
    q.set("expressions", [p if isinstance(p, exp.Alias) or not p.find(exp.Window) else exp.alias_(
        p, output_name(p, i))  # PostgreSQL's name
        for i, p in enumerate(q.expressions)])
    alias = f"{JOINED_PREFIX}over{ctx.next_id()}"
    hidden = Item(alias, node, {f"{HIDDEN_PREFIX}side": SIDE}, [])
    for j, k in enumerate(node.key):
        hidden.cols[f"{HIDDEN_PREFIX}k{j}"] = k
    scope = Scope(ctx, [*items, hidden])
    calls: list[tuple[str, str]] = []
    partitions: list[list[str]] = []
    for j, item in enumerate(q.expressions):
        if not item.find(exp.Window):
            continue
        inner = item.unalias()
        e = inner.copy()
        for w in list(e.find_all(exp.Window)):
            partitions.append(_window(ctx, w, Scope(ctx, items), alias, len(node.key)))
        name = ctx.name(item.alias)
        calls.append((name, scope.resolve(e, f"SELECT item {j + 1}")))
        hidden.cols[f"{HIDDEN_PREFIX}w{j}"] = name
        inner.replace(exp.column(f"{HIDDEN_PREFIX}w{j}", table=alias))
    partition = [c for c in partitions[0] if all(c in p for p in partitions[1:])]
    if not partition:  # one partition: a constant column keys the state
        const = ctx.name("partition")
        node = ctx.passthrough(node, (const, "0L"))
        partition = [const]
    types = ctx.types(node, calls, None, extra=[(SIDE, "int")])
    out = OverWindow(ctx.next_id(), node.columns + [(n, types[n]) for n, _ in calls], list(node.key),
                     input=node, partition=partition, calls=exprs_of(calls))
    hidden.node = out
    items.append(hidden)
    return q, out


def _window(ctx: PlanContext, w: exp.Window, scope: Scope, alias: str, keys: int) -> list[str]:
    """Check one `OVER (...)` and make it evaluable per partition side (`w` changed in place): its
    partition led by the hidden side column, ties ordered by the row key where the order of tied
    rows would matter. Returns its PARTITION BY columns (internal names)."""
    if w.find_ancestor(exp.Window) or w.this.find(exp.Window):
        raise ctx.err("a window function inside another's arguments is not supported", "OVER")
    if w.args.get("alias") or not isinstance(w.this, exp.Func):
        raise ctx.err(f"unsupported window {w.sql(dialect='postgres')}: name the function and write "
                      "its PARTITION BY / ORDER BY in OVER (...)", "OVER")
    parts = list(w.args.get("partition_by") or [])
    columns = [scope.internal(p, "PARTITION BY") for p in parts if isinstance(p, exp.Column)]
    w.set("partition_by", [exp.column(f"{HIDDEN_PREFIX}side", table=alias), *parts])
    frame = w.args.get("spec")
    if frame is not None and frame.args.get("exclude") is not None:
        _exclude(ctx, frame)
    rows_frame = frame is not None and str(frame.args.get("kind", "")).upper() == "ROWS"
    if isinstance(w.this, _FRAMED) and not rows_frame:
        raise ctx.err(f"{w.this.sql_name().lower()}() needs an explicit ROWS frame in a materialized view "
                      "(e.g. ORDER BY ... ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING): "
                      "among rows tied in the order, its value would be arbitrary", "OVER")
    if isinstance(w.this, _ROW_ORDERED) or rows_frame:
        order = w.args.get("order") or exp.Order(expressions=[])
        order.set("expressions", [*order.expressions, *[exp.Ordered(this=exp.column(
            f"{HIDDEN_PREFIX}k{i}", table=alias), nulls_first=False) for i in range(keys)]])
        w.set("order", order)  # ties in the row key's order: deterministic, as the deltas need
    return columns


def _exclude(ctx: PlanContext, frame: exp.WindowSpec) -> None:
    """EXCLUDE of a frame (Spark has none), in place: EXCLUDE NO OTHERS is the frame; EXCLUDE CURRENT
    ROW of a ROWS frame that ends (or starts) at the current row is the frame ending at 1 PRECEDING
    (starting at 1 FOLLOWING). Anything else is refused."""
    what = str(frame.args["exclude"].name if isinstance(frame.args["exclude"], exp.Var) else
               frame.args["exclude"]).upper()
    end = frame.args.get("end") or "CURRENT ROW"
    rows = str(frame.args.get("kind", "")).upper() == "ROWS"
    if what == "NO OTHERS":
        pass
    elif what == "CURRENT ROW" and rows and str(end).upper() == "CURRENT ROW":
        frame.set("end", exp.Literal.number(1))
        frame.set("end_side", "PRECEDING")
    elif what == "CURRENT ROW" and rows and str(frame.args.get("start")).upper() == "CURRENT ROW":
        frame.set("start", exp.Literal.number(1))
        frame.set("start_side", "FOLLOWING")
    else:
        raise ctx.err(f"a window frame's EXCLUDE {what} is supported only as EXCLUDE CURRENT ROW of a ROWS frame "
                      "that ends or starts at the current row: write ROWS BETWEEN n PRECEDING AND 1 PRECEDING "
                      "(or 1 FOLLOWING AND n FOLLOWING), or two windows added together", "EXCLUDE")
    frame.set("exclude", None)
