"""`EXPLAIN`: an MV's operator tree as text, one line per operator, each input indented under its
parent, as PostgreSQL's and RisingWave's `QUERY PLAN`. State tables are named as the warehouse
names them (`<mv>.<suffix>`) with what they hold in words; internal columns keep their planner
names (`c7_price`: the 7th column the planner named, from `price`)."""

from __future__ import annotations

import re

from sparkwave.frontend.plan.planner import MvPlan
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.aggregate_side import AggregateSide
from sparkwave.stream.join import SIDES, Join
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import OverWindow
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan
from sparkwave.stream.share import Share
from sparkwave.stream.table_side import TableSide
from sparkwave.stream.values import Values

INDENT = "  "


def explain(name: str, plan: MvPlan) -> list[str]:
    """The plan of MV `name`, one line per operator."""
    schema = plan.schema
    cols = ", ".join(f"{c.name} {c.type.name}" + (" hidden" if c.hidden else "") for c in schema.columns)
    head = f"Materialize({name}, key: [{', '.join(schema.key)}], columns: [{cols}]" + \
        (", append only)" if schema.append_only else ")")
    lines = [head]
    _walk(name, plan.root, 1, lines, set())
    return lines


def _walk(mv: str, op: Operator, depth: int, lines: list[str], seen: set[int]) -> None:
    if isinstance(op, Share) and op.id in seen:
        lines.append(f"{INDENT * depth}Share(#{op.id}, read again: see above)")
        return
    seen.add(op.id)
    lines.append(INDENT * depth + _line(mv, op))
    for child in op.inputs:
        _walk(mv, child, depth + 1, lines, seen)


def _line(mv: str, op: Operator) -> str:
    if isinstance(op, Scan):
        return _scan(op)
    if isinstance(op, Project):
        return _project(op)
    if isinstance(op, Join):
        return _join(mv, op)
    if isinstance(op, Aggregate):
        return _aggregate(mv, op)
    if isinstance(op, OverWindow):
        calls = ", ".join(f"{n} := {_sql(e)}" for n, e in op.calls)
        return (f"Over(#{op.id}, partition: [{', '.join(op.partition)}], calls: [{calls}], state: "
                f"{_state(mv, op.state, f'the window input rows by {_words(op.partition)}')})")
    if isinstance(op, Values):
        rows = ", ".join("(" + ", ".join(_sql(v) for v in r) + ")" for r in op.rows)
        return f"Values(#{op.id}, columns: [{', '.join(n for n, _ in op.columns)}], rows: [{rows}])"
    if isinstance(op, Share):
        return f"Share(#{op.id})"
    return f"{type(op).__name__}(#{op.id})"


def _scan(op: Scan) -> str:
    cols = ", ".join(f"{c} := {_sql(e)}" for c, e in op.exprs)
    parts = [op.relation, f"columns: [{cols}]"]
    if op.window is not None:
        w = op.window
        parts.append(f"window: {w.kind}({w.time}, size {w.size}s" + (f", slide {w.slide}s)" if w.slide else ")"))
    if op.predicate:
        parts.append(f"filter: {_sql(op.predicate)}")
    return f"Scan(#{op.id}, {', '.join(parts)})"


def _project(op: Project) -> str:
    kept = [n for n, e in op.exprs if _sql(e) == n]
    computed = [f"{n} := {_sql(e)}" for n, e in op.exprs if _sql(e) != n]
    parts = [f"exprs: [{', '.join(computed)}]"]
    if kept:
        parts.append(f"pass: [{', '.join(kept)}]")
    if op.predicate:
        parts.append(f"filter: {_sql(op.predicate)}")
    parts.append(f"key: [{', '.join(op.key)}]")
    return f"Project(#{op.id}, {', '.join(parts)})"


def _join(mv: str, op: Join) -> str:
    keys = ", ".join(f"{a} = {b}" for a, b in zip(op.left_keys, op.right_keys, strict=True))
    states = []
    for side in SIDES:
        keys_of = op.left_keys if side == "left" else op.right_keys
        where = op.side(side)
        if isinstance(where, AggregateSide):
            states.append(f"{side}: reads aggregate #{where.agg.id}'s partials")
            continue
        words = f"the join's {side} side rows by {_words(keys_of)}"
        if isinstance(where, TableSide):
            words += f", kept as {where.relation}'s rows"
        states.append(f"{side}: {_state(mv, where.state, words)}")
    return f"Join(#{op.id}, {op.join_type}, keys: [{keys}], state: [{'; '.join(states)}])"


def _aggregate(mv: str, op: Aggregate) -> str:
    calls = ", ".join(f"{a.out} := {a.fn}({a.arg or ''})" for a in op.aggs)
    group = "no group (one row)" if op.scalar else _words(op.group)
    states = [_state(mv, op.partials_state, f"the aggregate's partials by {group}")]
    states += [_state(mv, op.values_state(j), f"the values of {_words([arg])} per {group}")
               for j, arg in enumerate(op.value_args())]
    group_list = "" if op.scalar else f"group: [{', '.join(op.group)}], "
    return f"Aggregate(#{op.id}, {group_list}calls: [{calls}], state: [{'; '.join(states)}])"


def _state(mv: str, suffix: str, words: str) -> str:
    return f'{mv}.{suffix} "{words}"'


def _words(columns: list[str]) -> str:
    """Internal column names as the user's (`c3_auction` -> auction)."""
    return ", ".join(re.sub(r"^c\d+_", "", c) for c in columns) or "nothing"


def _sql(e: str) -> str:
    return e.replace("`", "")
