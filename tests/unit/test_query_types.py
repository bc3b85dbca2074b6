"""Where an ad-hoc query's operand types come from (`frontend/plan/query_types.py`), without Spark:
a column's from the catalog relation its FROM item names (correlated ones from the outer SELECT's),
anything else from Spark's analyser over a probe query built from the enclosing SELECT."""

from __future__ import annotations

import sqlglot
from pyspark.sql import types as T
from sqlglot import exp

from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.frontend.plan.query_types import catalog_type, probes

RELATIONS = {
    "v_t": Schema((Column("id", SqlType("int")), Column("g", SqlType("int")), Column("x", SqlType("double")),
                   Column("_row_id", SqlType("bigint"), hidden=True)), ("id",)),
    "v_u": Schema((Column("id", SqlType("bigint")), Column("name", SqlType("varchar"))), ("id",)),
}


def _column(sql: str, name: str, table: str = "") -> exp.Column:
    tree = sqlglot.parse_one(sql, read="spark")
    return next(c for c in tree.find_all(exp.Column) if c.name == name and c.table == table)


def test_a_column_is_typed_by_the_relation_its_from_item_names() -> None:
    sql = "SELECT t.id, x, u.id, name FROM v_t AS t JOIN v_u AS u ON t.id = u.id"
    assert catalog_type(_column(sql, "x"), RELATIONS) == T.DoubleType()
    assert catalog_type(_column(sql, "id", "t"), RELATIONS) == T.IntegerType()
    assert catalog_type(_column(sql, "id", "u"), RELATIONS) == T.LongType()
    assert catalog_type(_column(sql, "name"), RELATIONS) == T.StringType()


def test_an_ambiguous_hidden_or_derived_column_is_left_to_spark() -> None:
    assert catalog_type(_column("SELECT id FROM v_t AS t, v_u AS u", "id"), RELATIONS) is None
    assert catalog_type(_column("SELECT _row_id FROM v_t AS t", "_row_id"), RELATIONS) is None
    assert catalog_type(_column("SELECT x FROM (SELECT x FROM v_t AS t) AS q", "x", ""), RELATIONS) is None


def test_a_correlated_column_is_the_outer_selects() -> None:
    sql = "SELECT id FROM v_u AS u WHERE EXISTS (SELECT 1 FROM v_t AS t WHERE t.g = u.id AND name = 'a')"
    assert catalog_type(_column(sql, "id", "u"), RELATIONS) == T.LongType()
    assert catalog_type(_column(sql, "name"), RELATIONS) == T.StringType()


def test_a_probe_selects_the_expression_from_its_selects_from_grouped_as_it_is() -> None:
    tree = sqlglot.parse_one("WITH w AS (SELECT g, x FROM v_t AS t) SELECT g, ROUND(CAST(SUM(x) AS DECIMAL), 2) "
                             "FROM w WHERE x > 0 GROUP BY 1 ORDER BY 2", read="spark")
    total = tree.find(exp.Sum)
    assert total is not None
    assert probes(total) == [
        "WITH w AS (SELECT g, x FROM v_t AS t) SELECT SUM(x) FROM w GROUP BY g",
        "WITH w AS (SELECT g, x FROM v_t AS t) SELECT SUM(x) FROM w",
    ]
    g = tree.expressions[0]
    assert probes(g) == ["WITH w AS (SELECT g, x FROM v_t AS t) SELECT g FROM w"]
