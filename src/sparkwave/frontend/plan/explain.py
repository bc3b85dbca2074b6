"""`EXPLAIN`: an MV's operator tree as text, one line per operator, each input indented under its
parent, as PostgreSQL's and RisingWave's `QUERY PLAN`. Each line gives the operator's key, its
state tables (named as the warehouse names them, `<mv>.<suffix>`, with what they hold in words) and
where it runs, in the user's column names (`explain_names.py`). The same words are what the
dashboard shows of an MV's state tables (`state_tables`)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkwave.core import policy
from sparkwave.core.catalog import Relation
from sparkwave.core.errors import CatalogError
from sparkwave.frontend.plan.explain_names import IDENT as _IDENT
from sparkwave.frontend.plan.explain_names import Names
from sparkwave.frontend.plan.explain_names import sql_text as _sql
from sparkwave.frontend.plan.join_words import interval_words
from sparkwave.frontend.plan.planner import MvPlan
from sparkwave.frontend.plan.watermarks import cleaned_words
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.aggregate_side import AggregateSide
from sparkwave.stream.asof_join import AsofJoin
from sparkwave.stream.eowc import Eowc
from sparkwave.stream.join import SIDES, Join
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import OverWindow
from sparkwave.stream.plan import from_json
from sparkwave.stream.project import Project
from sparkwave.stream.project_set import ProjectSet
from sparkwave.stream.scan import Scan
from sparkwave.stream.share import Share
from sparkwave.stream.table_side import TableSide
from sparkwave.stream.temporal_filter import TemporalFilter
from sparkwave.stream.temporal_join import TemporalJoin
from sparkwave.stream.union import Union
from sparkwave.stream.values import Values

INDENT = "  "

__all__ = ["INDENT", "explain", "runs", "state_tables", "stored_plan"]


@dataclass(frozen=True)
class StateTable:
    """One state table of an operator: its name as stored and what it holds, in words."""

    name: str
    words: str

    def __str__(self) -> str:
        return f'{self.name} "{self.words}"'


def explain(name: str, plan: MvPlan, *, big_epoch_rows: int = policy.BIG_EPOCH_ROWS,
            internal_names: bool = False) -> list[str]:
    """The plan of MV `name`, one line per operator (`internal_names`: the planner's column names,
    for debugging the planner)."""
    schema = plan.schema
    cols = ", ".join(f"{c.name} {c.type.name}" + (" hidden" if c.hidden else "") for c in schema.columns)
    head = f"Materialize({name}, key: [{', '.join(schema.key)}], columns: [{cols}]" + \
        (", append only)" if schema.append_only else ")")
    lines = [head]
    _Explain(name, Names(plan.root, internal=internal_names), big_epoch_rows).walk(plan.root, 1, lines, set())
    return lines


def state_tables(name: str, plan: MvPlan) -> list[tuple[str, str]]:
    """Each state table of MV `name` as (table name, what it holds in words), top of the tree first:
    the words EXPLAIN prints, for the dashboard's MV page."""
    ex = _Explain(name, Names(plan.root), policy.BIG_EPOCH_ROWS)
    seen: set[int] = set()
    out: list[tuple[str, str]] = []
    for op in _top_down(plan.root, seen):
        out += [(s.name, s.words) for s in ex.states(op)]
    return out


def stored_plan(rel: Relation) -> MvPlan:
    """The plan of an existing MV from its stored definition (the tree it runs, not a new plan)."""
    spec = rel.spec
    if rel.kind != "mv" or spec.dataflow is None:
        raise CatalogError(f"EXPLAIN {rel.name}: {rel.name!r} is a {_kind(rel)}, not a materialized view")
    root = from_json(spec.dataflow)
    assert isinstance(root, Project), f"BUG: the stored tree of {rel.name} has a {type(root).__name__} at its root"
    return MvPlan(root, rel.schema, list(spec.outputs), list(spec.upstreams))


def runs(op: Operator, big_epoch_rows: int) -> str | None:
    """Where `op` runs per epoch, by the size of its change (`core/policy.py`'s decisions), or None
    for an operator that does no work of its own per epoch."""
    if isinstance(op, (Scan, Project)):
        # runs_locally: a change the driver holds is a local relation, evaluated without a Spark job
        return f"driver up to {policy.LOCAL_ROWS:,} rows an epoch, else executors"
    if op.keeps_state:
        # is_big_epoch: past `big_epoch_rows` the step runs as Spark frames against the state files
        return f"driver (Arrow) up to {big_epoch_rows:,} rows an epoch (big_epoch_rows), else executors"
    return None


def _top_down(op: Operator, seen: set[int]) -> list[Operator]:
    if op.id in seen:
        return []
    seen.add(op.id)
    return [op, *[o for child in op.inputs for o in _top_down(child, seen)]]


def _kind(rel: Relation) -> str:
    return {"table": "table", "source": "source", "state": "state table"}.get(rel.kind, rel.kind)


class _Explain:
    def __init__(self, mv: str, names: Names, big_epoch_rows: int) -> None:
        self.mv = mv
        self.n = names
        self.big = big_epoch_rows

    def walk(self, op: Operator, depth: int, lines: list[str], seen: set[int]) -> None:
        if isinstance(op, Share) and op.id in seen:
            lines.append(f"{INDENT * depth}Share(#{op.id}, read again: see above)")
            return
        seen.add(op.id)
        lines.append(INDENT * depth + self.line(op))
        for child in op.inputs:
            self.walk(child, depth + 1, lines, seen)

    def line(self, op: Operator) -> str:
        parts = self.parts(op)
        if not isinstance(op, (Share, Values)):
            parts.append(f"key: [{self.n.all(op.key)}]" if op.key or not isinstance(op, Aggregate)
                         else "key: [] (one row)")
        if states := self.states(op):
            parts.append(f"state: [{'; '.join(map(str, states))}]")
        if (where := runs(op, self.big)) is not None:
            parts.append(f"runs: {where}")
        kind = "Over" if isinstance(op, OverWindow) else type(op).__name__
        return f"{kind}(#{op.id}{''.join(', ' + p for p in parts)})"

    def parts(self, op: Operator) -> list[str]:
        n = self.n
        if isinstance(op, Scan):
            return self.scan(op)
        if isinstance(op, Project):
            return self.project(op)
        if isinstance(op, Join):
            keys = ", ".join(f"{n(a)} = {n(b)}" for a, b in zip(op.left_keys, op.right_keys, strict=True))
            borrowed = [f"{side} side: aggregate #{where.agg.id}'s state" for side in SIDES
                        if isinstance(where := op.side(side), AggregateSide)]
            closest = [f"closest: {n(op.left_time)} {op.inequality} {n(op.right_time)}, a tie to the least right key"] \
                if isinstance(op, AsofJoin) else []
            return [op.join_type, f"on: [{keys}]", *closest, *borrowed]
        if isinstance(op, Aggregate):
            calls = [c if (c := n.call(a)) == n(a.out) else f"{n(a.out)} := {c}" for a in op.aggs]
            return [f"calls: [{', '.join(calls)}]"] if calls else []
        if isinstance(op, OverWindow):
            return [f"partition: [{n.all(op.partition)}]",
                    f"calls: [{', '.join(f'{n(c)} := {n.expr(e)}' for c, e in op.calls)}]"]
        if isinstance(op, Eowc):
            return [f"emit on window close: {n(op.cleaning.column)} below {op.cleaning.watermark.describe()}"]
        if isinstance(op, TemporalJoin):
            keys = ", ".join(f"{n(a)} = {n(b)}" for a, b in zip(op.left_keys, op.right_keys, strict=True))
            return [op.join_type, f"on: [{keys}]", f"{op.table} as of each row's epoch (FOR SYSTEM_TIME AS OF "
                    "PROCTIME()): its later changes retract nothing"]
        if isinstance(op, TemporalFilter):
            return [f"where: {' AND '.join(f'{n(op.column)} {c}' for c in op.describe().split(' AND '))}"]
        if isinstance(op, Values):
            rows = ", ".join("(" + ", ".join(_sql(v) for v in r) + ")" for r in op.rows)
            return [f"columns: [{n.all([c for c, _ in op.columns])}]", f"rows: [{rows}]"]
        if isinstance(op, Union):  # UNION ALL: no state; its key's first column tags each row's branch
            return [f"all: {len(op.inputs)} branches", f"branch: {n(op.key[0])}"]
        if isinstance(op, ProjectSet):  # no state: each input row's series, numbered by the ordinal
            calls = [f"{n(c)} := {fn}({', '.join(n.expr(a) for a in args)})" for c, fn, args in op.sets]
            return [f"sets: [{', '.join(calls)}]", f"ordinal: {n(op.ordinal)}"]
        return []

    def scan(self, op: Scan) -> list[str]:
        n = self.n
        cols = [c if (c := n(name)) == (t := _sql(e)) or c.endswith(f".{t}") else f"{c} := {t}"
                for name, e in op.exprs]
        parts = [op.relation, f"columns: [{', '.join(cols)}]"]
        if op.window is not None:
            w = op.window
            parts.append(f"window: {w.kind}({w.time}, size {w.size}s" + (f", slide {w.slide}s)" if w.slide else ")"))
        if op.predicate:
            parts.append(f"filter: {n.expr(op.predicate)}")
        return parts

    def project(self, op: Project) -> list[str]:
        n = self.n
        kept: dict[str, None] = {}  # the columns it passes on, each once (two names of one column read alike)
        computed = []
        for name, e in op.exprs:
            shown, value = n(name), n.expr(e)
            if shown != value:
                computed.append(f"{shown} := {value}")
            elif _IDENT.fullmatch(_sql(e)):
                kept[shown] = None
            else:
                computed.append(value)  # a computed column that reads as its expression
        parts = [f"exprs: [{', '.join(computed)}]"] if computed else []
        if kept:
            parts.append(f"pass: [{', '.join(kept)}]")
        if op.predicate:
            parts.append(f"filter: {n.expr(op.predicate)}")
        return parts

    # --- state tables in words ------------------------------------------------------------------
    def states(self, op: Operator) -> list[StateTable]:
        n = self.n
        if isinstance(op, Join):
            return self.join_states(op)
        if isinstance(op, Aggregate):
            group = "over all rows (one row)" if op.scalar else f"per {n.all(op.group)}"
            what = f"{', '.join(n(a.out) for a in op.aggs)} {group}" if op.aggs else f"each distinct {n.all(op.group)}"
            out = [self.table(op.partials_state, what)]
            by_arg = {a.arg: a for a in op.aggs if a.arg}
            for j, arg in enumerate(op.value_args()):
                used = by_arg.get(arg)
                purpose = f", for {n.call(used)}" if used else ""
                out.append(self.table(op.values_state(j), f"each value of {n(arg)} {group} with its count{purpose}"))
            return [StateTable(t.name, t.words + cleaned_words(op.cleaning, n)) for t in out]
        if isinstance(op, Eowc):
            return [self.table(op.buffer, f"rows not yet closed per {n.all(op.buffer_key)}, each emitted once and "
                                          f"deleted when {op.cleaning.watermark.describe()} passes "
                                          f"{n(op.cleaning.column)}")]
        if isinstance(op, TemporalJoin) and not op.append_only:
            return [self.table(op.state, f"what each stream row was joined to, by {n.all(op.key)}: its delete "
                                         "retracts it; cleaned by the row's delete")]
        if isinstance(op, TemporalFilter):
            return [self.table(op.state, f"temporal filter input rows NOW() may still move in or out, by "
                                         f"{n(op.column)}; cleaned by NOW(): {op.cleaned(n(op.column))}")]
        if isinstance(op, OverWindow):
            calls = ", ".join(n(c) for c, _ in op.calls)
            retired = f"; {op.retire.describe()}" if op.retire else ""
            return [StateTable(t.name, t.words + cleaned_words(op.cleaning, n) + retired)
                    for t in [self.table(op.state, f"the rows of each {n.all(op.partition)}, for {calls}")]]
        return []

    def join_states(self, op: Join) -> list[StateTable]:
        out = []
        for side in SIDES:
            child, keys = (op.left, op.left_keys) if side == "left" else (op.right, op.right_keys)
            where = op.side(side)
            if isinstance(where, AggregateSide):
                continue  # reads the aggregate's partials: a table of its own it has not
            rows = _rows_of(child)
            words = f"the {side} side's {rows} by {self.n.all(keys)}"
            if isinstance(where, TableSide):
                words += f" (kept as {where.relation}'s own rows: a backfill links its files)"
            words += interval_words(op, side, self.n)  # an interval join's state cleaning
            out.append(self.table(where.state, words))
        return out

    def table(self, suffix: str, words: str) -> StateTable:
        return StateTable(f"{self.mv}.{suffix}", words)


def _rows_of(op: Operator) -> str:
    """What a join side's rows are, in words: `bid rows`, `rows of auction and bid`."""
    ups = op.upstreams()
    if not ups:
        return "constant rows"
    return f"{ups[0]} rows" if len(ups) == 1 else f"rows of {', '.join(ups[:-1])} and {ups[-1]}"
