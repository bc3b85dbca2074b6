"""The planner's driver: a query in, an MV's operator tree, schema and key out, as a short list of
passes (the shape of sqlglot's optimizer): refuse what is not planned (`closed_world.py`), rewrite
(`frontend/rewrite.py`: CTEs, FILTER, ORDER BY ... LIMIT, subqueries outside FROM), plan the SELECT
(`select.py`), name the MV's columns and derive its key (`keys.py`), then the tree-wide rules:
prune columns, share common subplans, let join sides borrow aggregates' and tables' rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from pyspark.sql import SparkSession
from sqlglot import exp

from sparkwave.core.catalog import Relation
from sparkwave.core.errors import SparkwaveError
from sparkwave.core.schema import Schema
from sparkwave.core.spark_features import is_session
from sparkwave.frontend.common_subplans import share_common_subplans
from sparkwave.frontend.plan.closed_world import check_closed
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.keys import mv_columns, mv_key, named_outputs
from sparkwave.frontend.plan.select import select
from sparkwave.frontend.plan.types import SparkTypes, TypeOracle
from sparkwave.frontend.plan.watermarks import plan_watermarks
from sparkwave.frontend.rewrite import rewrite
from sparkwave.frontend.statements import Statement
from sparkwave.stream.join import Join
from sparkwave.stream.project import Project


@dataclass
class MvPlan:
    root: Project
    schema: Schema
    outputs: list[tuple[str, str]]  # (MV column, internal column of the root), visible then hidden keys
    upstreams: list[str]


class Planner:
    """Plans `CREATE MATERIALIZED VIEW ... AS <query>` (the statement, for errors and its column
    list); `types` is a `TypeOracle`, or a SparkSession whose analyser is the oracle."""

    def __init__(self, stmt: Statement, lookup: Callable[[str], Relation], types: TypeOracle | SparkSession) -> None:
        self.ctx = PlanContext(stmt, lookup, SparkTypes(cast(SparkSession, types)) if is_session(types)
                               else cast(TypeOracle, types))

    def plan(self, query: exp.Expr) -> MvPlan:
        ctx = self.ctx
        check_closed(query, ctx.err)
        node, outputs = select(ctx, rewrite(_as_select(ctx, query), self._columns_of))
        visible = named_outputs(ctx, outputs)
        key, hidden = mv_key(node, visible)
        cols = mv_columns(node, visible, hidden)
        ups = node.upstreams()
        # Scans and projections of append-only inputs only ever insert: the MV is append-only too.
        append_only = node.stateless and ctx.append_only(node)
        node.prune(set(node.names))  # scans read, and join sides store, only the columns the query uses
        share_common_subplans(node, ctx.ids)
        for op in node.walk():
            if isinstance(op, Join):
                op.borrow_states()  # a join side that is an aggregate's output reads the aggregate's state
                op.link_tables(ctx.linkable)  # a side that is a table's rows keeps them under its names
        if plan_watermarks(ctx, node):  # EMIT ON WINDOW CLOSE: each row inserted once, when closed
            append_only = True
        return MvPlan(node, Schema(tuple(cols), tuple(key), append_only), visible + hidden, ups)

    def _columns_of(self, name: str) -> set[str] | None:
        try:
            rel = self.ctx.relation(name)
        except SparkwaveError:
            return None  # a CTE's name, or unknown: planning says which
        return {c.name.lower() for c in rel.schema.columns if not c.hidden}


def _as_select(ctx: PlanContext, query: exp.Expr) -> exp.Expr:
    """A query that is only VALUES as `SELECT * FROM (VALUES ...)`; any other as it is."""
    if not isinstance(query, exp.Values):
        return query
    if query.args.get("limit") or query.args.get("offset"):
        raise ctx.err("LIMIT / OFFSET on VALUES is not supported in a materialized view; list only the "
                      "rows it should hold", "LIMIT" if query.args.get("limit") else "OFFSET")
    query = query.copy()
    query.set("order", None)  # an MV's rows have no order
    return exp.select("*").from_(query)
