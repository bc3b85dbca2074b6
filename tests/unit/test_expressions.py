"""The operators' Spark SQL read as trees (`stream/expressions.py`), without Spark: every expression
of every golden plan (Nexmark, TPC-H, the SQL-surface cases) survives text -> tree -> text with its
meaning (the tree read back is the same tree), so stored plans can be read as trees; and the
analyses that once were regexes see columns, not backticks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlglot

from sparkwave.frontend.plan.planner import MvPlan
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.stream.expressions import DIALECT, canonical, column_ref, parsed, references, renamed, spark_sql
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import OverWindow
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan
from sparkwave.stream.values import Values
from tests.planner import golden


def _expressions(op: Operator) -> Iterator[str]:
    if isinstance(op, Scan | Project):
        yield from (e for _, e in op.exprs)
        if op.predicate:
            yield op.predicate
    elif isinstance(op, OverWindow):
        yield from (e for _, e in op.calls)
    elif isinstance(op, Values):
        yield from (v for row in op.rows for v in row)


def _corpus() -> list[str]:
    """The expressions of every golden case's plan, planned as `golden.render` plans it."""
    plans: list[MvPlan] = []

    def keep(name: str, plan: MvPlan, **_options: Any) -> list[str]:
        plans.append(plan)
        return []

    render_plan = golden.explain
    golden.explain = keep
    try:
        for path in golden.files():
            for case in golden.read(path):
                golden.render(case, StaticTypes())
    finally:
        golden.explain = render_plan
    return sorted({e for plan in plans for op in plan.root.walk() for e in _expressions(op)})


CORPUS = _corpus()


def test_the_corpus_is_the_golden_plans_expressions() -> None:
    assert len(CORPUS) > 500
    assert any("TO_CHAR" in e.upper() for e in CORPUS) and any("TO_UTC_TIMESTAMP" in e.upper() for e in CORPUS)


@pytest.mark.parametrize("sql", CORPUS)
def test_every_golden_expression_round_trips(sql: str) -> None:
    tree = parsed(sql)
    text = spark_sql(tree)
    again = sqlglot.parse_one(text, read=DIALECT)
    assert again == tree, f"{sql!r} read back from {text!r} is another tree"
    assert spark_sql(again) == text


def test_sparks_own_reader_would_change_their_meaning() -> None:
    """Why `SparkExpr` keeps some calls as written: sqlglot's Spark reader drops to_char's pattern."""
    sql = "TO_CHAR(ABS(`c3_x`), '9990.00')"
    assert "9990.00" not in sqlglot.parse_one(sql, read="spark").sql(dialect="spark")
    assert canonical(sql) == sql


def test_references_are_columns_not_backticks() -> None:
    assert references("`c1_a` + `c2_b`", None, "'`c3_c`' || `c4_d`") == {"c1_a", "c2_b", "c4_d"}
    assert references("`price` * 2") == set()  # a relation's own column, not an internal one
    assert references("`c5_s`.`f` IS NULL") == {"c5_s"}


def test_column_ref_is_a_bare_column() -> None:
    assert column_ref("`c1_a`") == "c1_a"
    assert column_ref("`price`") == "price"
    assert column_ref("`c1_a` + 0") is None
    assert column_ref("'`c1_a`'") is None  # a string constant
    assert column_ref("`c1_a` || '`'") is None


def test_renamed_maps_every_reference_or_none() -> None:
    assert renamed("`c1_a` + `c2_b` || '`c1_a`'", {"c1_a": "c9_x", "c2_b": "c8_y"}) == "`c9_x` + `c8_y` || '`c1_a`'"
    assert renamed("`c1_a` + `c2_b`", {"c1_a": "c9_x"}) is None
