"""Relations by name without a warehouse, for planning without one: golden plan tests, and EXPLAIN
of a script's MVs. Tables come from their `CREATE TABLE` text (read as `ddl.py` reads it: the
primary key, or a hidden `_row_id` key; append-only if declared so or fed by a connector without a
key), MVs from planning their `CREATE MATERIALIZED VIEW`, or either from a schema as it is."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.connectors import connector_class
from sparkwave.core.catalog import Relation
from sparkwave.core.errors import CatalogError
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.frontend.plan.planner import MvPlan, Planner
from sparkwave.frontend.plan.types import TypeOracle
from sparkwave.frontend.statements import CreateMaterializedView, CreateTable, Query, parse
from sparkwave.frontend.watermark_ddl import declared


class StaticCatalog:
    def __init__(self, types: TypeOracle) -> None:
        self.types = types
        self.relations: dict[str, Relation] = {}

    def lookup(self, name: str) -> Relation:
        """As the warehouse's `Store.relation`: an unknown name is a CatalogError naming the known ones."""
        rel = self.relations.get(name)
        if rel is None:
            known = ", ".join(self.relations) or "none"
            raise CatalogError(f"unknown table or materialized view {name!r} (known: {known})")
        return rel

    def add(self, name: str, kind: str, schema: Schema, watermark: dict | None = None) -> Relation:
        """`watermark`: the relation's `WATERMARK FOR` as its definition stores it (`stream/watermark.py`)."""
        definition: dict = {"sql": "", "upstreams": []} | ({"watermark": watermark} if watermark else {})
        self.relations[name] = Relation(name, kind, schema, definition, 0)
        return self.relations[name]

    def run(self, sql: str) -> list[MvPlan]:
        """Register the tables and MVs `sql` creates (other statements are refused); the MVs' plans."""
        plans = []
        for stmt in parse(sql):
            if isinstance(stmt, CreateTable):  # a CreateSource too
                self._table(stmt)
            elif isinstance(stmt, CreateMaterializedView):
                plan = self.plan(stmt)
                self.add(stmt.name, "mv", plan.schema)
                plans.append(plan)
            else:
                raise stmt.error("a static catalog takes CREATE TABLE and CREATE MATERIALIZED VIEW, not "
                                 f"{type(stmt).__name__}")
        return plans

    def plan(self, stmt: CreateMaterializedView | Query) -> MvPlan:
        return Planner(stmt, self.lookup, self.types).plan(stmt.ast)

    def _table(self, stmt: CreateTable) -> None:
        ast = stmt.ast
        name = ast.this.this.name.lower()
        columns: list[Column] = []
        key: list[str] = []
        for item in ast.this.expressions:
            if isinstance(item, exp.ColumnDef):
                columns.append(Column(item.this.name.lower(), parse_type(item.args["kind"].sql(dialect="postgres"))))
                if any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in item.constraints):
                    key.append(columns[-1].name)
            elif isinstance(item, exp.PrimaryKey):
                key.extend(i.name.lower() for i in item.expressions)
        options = stmt.options
        if options:
            columns += connector_class(name, options).extra_columns(options)
        append_only = stmt.append_only or (bool(options) and not key)
        if not key:
            columns.append(Column("_row_id", parse_type("bigint"), hidden=True))
            key = ["_row_id"]
        schema = Schema(tuple(columns), tuple(key), append_only)
        watermark = declared(stmt, schema)
        self.add(name, stmt.relation_kind, schema, watermark.to_json() if watermark else None)
