"""The operators' Spark SQL read as trees (`stream/expressions.py`), without Spark: every expression
of every golden plan (Nexmark, TPC-H, the SQL-surface cases) survives text -> tree -> text with its
meaning (the tree read back is the same tree), so stored plans can be read as trees; and the
analyses that once were regexes see columns, not backticks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlglot

from sparkwave.frontend import postgres
from sparkwave.frontend.plan.planner import MvPlan
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.plan.types import to_spark_sql
from sparkwave.stream.expressions import (
    DIALECT,
    Expr,
    canonical,
    column_ref,
    parsed,
    references,
    renamed,
    spark_sql,
)
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import OverWindow
from sparkwave.stream.plan import from_json
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan
from sparkwave.stream.values import Values
from tests.function_samples import COLUMNS, SAMPLES
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
    HELD.extend(e for plan in plans for op in plan.root.walk() for e in _expressions(op))
    return sorted({str(e) for e in HELD})


HELD: list[str] = []  # every expression object the planner put into the golden plans' operators
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


def _sample_sql(sample: str) -> str:
    """A documented function's call as the planner translates it (types by rule, no Spark)."""
    e = sqlglot.parse_one(f"SELECT {sample} AS x FROM t", read=postgres.DIALECT).selects[0].this
    return to_spark_sql(e, COLUMNS, StaticTypes())


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_documented_function_round_trips(name: str) -> None:
    """Each function of `frontend/functions.FUNCTIONS`, also those no golden plan calls: its Spark
    SQL reads back as the same tree (tests/integration/test_expression_round_trip.py checks in Spark
    that the text written again means the same)."""
    sql = _sample_sql(SAMPLES[name])
    tree = parsed(sql)
    text = spark_sql(tree)
    assert sqlglot.parse_one(text, read=DIALECT) == tree, f"{name}: {sql!r} read back from {text!r}"
    assert canonical(text) == text


OLD_PLANS = json.loads((Path(__file__).parents[1] / "fixtures" / "plans_84a0f4f.json").read_text())


@pytest.mark.parametrize("name", sorted(OLD_PLANS["mvs"]))
def test_plans_stored_by_84a0f4f_read_and_are_written_back_unchanged(name: str) -> None:
    """A stored plan (Spark SQL text per expression) decodes, each expression reads as a tree, and the
    plan is written back as it was stored: warehouses keep reading (tests/integration/test_old_plans.py
    runs epochs on these plans)."""
    stored = OLD_PLANS["mvs"][name]["dataflow"]
    root = from_json(stored)
    assert root.to_json() == stored
    for op in root.walk():
        for sql in _expressions(op):
            assert spark_sql(parsed(sql)) == canonical(sql)


def test_an_expr_is_its_text_with_its_tree() -> None:
    """`Expr`: the text Spark evaluates and the JSON stores, the tree read from it once and shared."""
    e = Expr.of_text("UPPER(`c1_v`)")
    assert e == "UPPER(`c1_v`)" and json.dumps([e]) == json.dumps(["UPPER(`c1_v`)"])
    assert type(e.sql()) is str and e.sql() == "UPPER(`c1_v`)"
    assert e.tree is parsed("UPPER(`c1_v`)") and Expr.of_text(e) is e
    made = Expr.of_tree(sqlglot.parse_one("TO_CHAR(`c1_x`, '9990.00')", read=DIALECT))
    assert made == "TO_CHAR(`c1_x`, '9990.00')" and references(made) == {"c1_x"}
    assert isinstance(renamed(made, {"c1_x": "c2_y"}), Expr)


def test_operators_hold_exprs_from_the_planner_from_json_and_by_hand() -> None:
    plans: list[Operator] = []
    for mv in OLD_PLANS["mvs"].values():
        plans.append(from_json(mv["dataflow"]))
    by_hand = Project(1, [("c2_a", "int")], [], input=Scan(0, [("c1_a", "int")], [], relation="t",
                                                            exprs=[("c1_a", "`a`")]),
                      exprs=[("c2_a", "`c1_a` + 1")], predicate="`c1_a` > 0")
    for root in [*plans, by_hand]:
        found = [e for op in root.walk() for e in _expressions(op)]
        assert found and all(isinstance(e, Expr) for e in found)
    assert len(HELD) > 500 and all(isinstance(e, Expr) for e in HELD)  # the planner's, as the operators hold them
