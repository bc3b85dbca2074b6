"""Operand types inside an ad-hoc query, so that a query goes through the same PostgreSQL translation
(`postgres.translated`) as an MV: `ROUND(SUM(x)::NUMERIC, 2)` must not read `::NUMERIC` as Spark's
`DECIMAL(10, 0)` in one and keep the scale in the other.

An MV's expressions are typed over the operator they read (`types.py`); a query's are typed where
they stand: a column by the catalog relation its FROM item names, anything else by Spark's analyser
over the enclosing SELECT's FROM (with the query's CTEs in scope). An expression Spark cannot type
there (a correlated column) is left untranslated; the query's own analysis reports a real error."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.types import DataType
from sqlglot import exp

from sparkwave.core.schema import Schema, to_spark_type
from sparkwave.frontend.plan.types import obvious_type

_SOURCES = ("from_", "joins", "laterals")


class QueryTypes:
    """`postgres.TypesOf` over an ad-hoc query whose FROM tables name the views in `relations`
    (view name -> the relation's schema)."""

    def __init__(self, spark: SparkSession, relations: dict[str, Schema]) -> None:
        self.spark = spark
        self.relations = relations

    def of(self, e: exp.Expr) -> DataType | None:
        known = obvious_type([], e)
        if known is None and isinstance(e, exp.Column):
            known = catalog_type(e, self.relations)
        if known is not None:
            return known
        for sql in probes(e):
            try:
                return self.spark.sql(sql).schema.fields[0].dataType
            except Exception:  # noqa: BLE001 - any analysis or parse failure: untyped, as Spark's own report says
                continue
        return None


def catalog_type(col: exp.Column, relations: dict[str, Schema]) -> DataType | None:
    """A column's type from the catalog, if the FROM items of the SELECT it is in (or, for a
    correlated one, of the SELECT around it) are all catalog relations and exactly one offers it
    (else: Spark's analyser decides)."""
    name, qualifier = col.name.lower(), col.table.lower()
    select = col.find_ancestor(exp.Select)
    while select is not None:
        tables = [t for k in _SOURCES for t in _items(select.args.get(k))]
        if not tables or not all(isinstance(t, exp.Table) and t.name in relations for t in tables):
            return None
        named = [t for t in tables if not qualifier or qualifier == t.alias_or_name.lower()]
        found = [c for t in named for c in relations[t.name].columns if c.name == name and not c.hidden]
        if found or (named and qualifier):
            return to_spark_type(found[0].type) if len(found) == 1 else None
        select = select.find_ancestor(exp.Select)  # an outer query's column
    return None


def probes(e: exp.Expr) -> list[str]:
    """Queries (Spark SQL) whose one column is `e` selected from the FROM of the SELECT it is in,
    with the query's CTEs; first grouped as that SELECT is, if `e` aggregates."""
    select = e.find_ancestor(exp.Select)
    probe = exp.Select(expressions=[e.copy()])
    if select is None:
        return [probe.sql(dialect="spark")]
    for k in _SOURCES:
        if select.args.get(k):
            probe.set(k, select.args[k].copy() if k == "from_" else [x.copy() for x in select.args[k]])
    ctes = [c.copy() for a in reversed([select, *_ancestors(select)]) if (w := a.args.get("with_"))
            for c in w.expressions]
    if ctes:
        probe.set("with_", exp.With(expressions=ctes))
    out = [probe.sql(dialect="spark")]
    group = select.args.get("group")
    if group is not None and e.find(exp.AggFunc):
        probe.set("group", _positions_resolved(group, select))
        out.insert(0, probe.sql(dialect="spark"))
    return out


def _items(v: exp.Expr | list[exp.Expr] | None) -> list[exp.Expr]:
    """The relations a FROM, JOIN or LATERAL argument names."""
    if v is None:
        return []
    if isinstance(v, list):
        return [x for item in v for x in _items(item)]
    return [v.this] if isinstance(v, exp.From | exp.Join) else [v]


def _ancestors(e: exp.Expr) -> list[exp.Expr]:
    out = []
    while e.parent is not None:
        e = e.parent
        out.append(e)
    return out


def _positions_resolved(group: exp.Group, select: exp.Select) -> exp.Group:
    """GROUP BY with its positions (`GROUP BY 1`) as the expressions they name: the probe's SELECT
    list is not the query's."""
    group = group.copy()
    items = select.expressions
    for g in list(group.expressions):
        if isinstance(g, exp.Literal) and g.is_int and 1 <= int(g.this) <= len(items):
            g.replace(items[int(g.this) - 1].unalias().copy())
    return group
