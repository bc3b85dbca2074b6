"""Planning `CREATE MATERIALIZED VIEW ... AS SELECT <expressions> FROM <relation> [WHERE ...]`.

The result is the MV's schema and a ProjectFilter of Spark SQL expressions. The MV's key derives
from its upstream's: an upstream key column the query selects as it is becomes the MV's key
column under its output name; one it does not select is kept as a hidden column."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql.utils import AnalysisException
from sqlglot import exp

from sparkwave.errors import CatalogError
from sparkwave.frontend.shape import check_shape
from sparkwave.frontend.statements import Statement
from sparkwave.meta.catalog import Relation
from sparkwave.storage.schema import Column, Schema, from_spark
from sparkwave.stream.project_filter import ProjectFilter

SYSTEM_NAMES = {"_epoch", "_seq", "_op", "_vnode"}

@dataclass(frozen=True)
class MvPlan:
    upstream: str
    schema: Schema
    project_filter: ProjectFilter


def spark_sql(node: exp.Expression) -> str:
    return node.sql(dialect="spark")


def plan_mv(stmt: Statement, query: exp.Expression, lookup, spark: SparkSession) -> MvPlan:  # type: ignore[no-untyped-def]
    """`lookup(name) -> Relation` raises CatalogError for unknown names."""
    if not isinstance(query, exp.Select):
        raise stmt.error(f"unsupported query shape {type(query).__name__} in a materialized view; "
                         "expected SELECT ... FROM ... [WHERE ...]")
    check_shape(stmt, query)
    if query.find(exp.Subquery, exp.Exists):
        raise stmt.error("unsupported subquery in a materialized view", "SELECT")
    source = query.args.get("from_") or query.args.get("from")
    if source is None:
        raise stmt.error("a materialized view needs a FROM clause")
    table = source.this
    if not isinstance(table, exp.Table) or table.args.get("db"):
        raise stmt.error(f"unsupported FROM item {table.sql(dialect='postgres')}; expected a table or MV name",
                         "FROM")
    upstream: Relation = lookup(table.name.lower())
    qualifiers = {upstream.name, (table.alias or upstream.name).lower()}
    visible = {c.name: c for c in upstream.schema.visible}

    def check_columns(node: exp.Expression, where: str) -> exp.Expression:
        node = node.copy()
        for col in list(node.find_all(exp.Column)):
            if col.table and col.table.lower() not in qualifiers:
                raise stmt.error(f"unknown table {col.table!r} in column {col.sql()!r} ({where})", col.table)
            if col.name.lower() not in visible:
                raise CatalogError(f"unknown column {col.name!r} in {where} of materialized view "
                                   f"(columns of {upstream.name!r}: {', '.join(visible)}) "
                                   f"(at {stmt.where(col.name)})")
            col.replace(exp.column(col.name.lower(), quoted=True))
        return node

    outputs: list[tuple[str, str]] = []
    direct: dict[str, str] = {}  # upstream column -> output name, for outputs that are the column itself
    for i, proj in enumerate(query.expressions):
        if isinstance(proj, exp.Star) or (isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star)):
            for c in upstream.schema.visible:
                outputs.append((c.name, f"`{c.name}`"))
                direct.setdefault(c.name, c.name)
            continue
        inner = proj.unalias() if isinstance(proj, exp.Alias) else proj
        name = (proj.alias if isinstance(proj, exp.Alias) else (inner.name if isinstance(inner, exp.Column) else "")
                ).lower() or _default_name(inner, i)
        if name in SYSTEM_NAMES:
            raise stmt.error(f"output column name {name!r} is reserved", name)
        checked = check_columns(inner, f"SELECT item {i + 1}")
        if isinstance(inner, exp.Column):
            direct.setdefault(inner.name.lower(), name)
        outputs.append((name, spark_sql(checked)))
    names = [n for n, _ in outputs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise stmt.error(f"duplicate output column name(s) {', '.join(dupes)} in materialized view; add aliases")
    key: list[str] = []
    hidden: list[tuple[str, str]] = []
    for k in upstream.schema.key:
        if k in direct:
            key.append(direct[k])
        else:
            hname = k if k not in names else f"_pk_{k}"
            hidden.append((hname, f"`{k}`"))
            key.append(hname)
    where = query.args.get("where")
    predicate = spark_sql(check_columns(where.this, "WHERE")) if where is not None else None
    pf = ProjectFilter(tuple(outputs + hidden), predicate)
    try:
        probe = pf.apply(spark.createDataFrame([], "_op tinyint, _seq bigint, " + upstream.schema.spark_ddl()))
        types = {f.name: f.dataType for f in probe.schema.fields}
    except AnalysisException as e:
        raise stmt.error(f"cannot evaluate the materialized view's query: {_short(e)}") from None
    hidden_names = {h for h, _ in hidden}
    columns = tuple(Column(n, from_spark(types[n]), n in hidden_names) for n, _ in outputs + hidden)
    return MvPlan(upstream.name, Schema(columns, tuple(key), upstream.schema.append_only), pf)


def _default_name(node: exp.Expression, i: int) -> str:
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Column):
        return node.this.name.lower()
    if isinstance(node, exp.Func):
        return (node.sql_name() or f"_col{i}").lower()
    return f"_col{i}"


def _short(e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return msg[:300]
