"""RisingWave's generated columns (`v2 int AS v1 + 1`) as CREATE TABLE reads them: the clause
taken off the column list (sqlglot reads only `AS (expr)`), and the expression's rules."""

from __future__ import annotations

import pytest

from sparkwave.core.errors import SqlError
from sparkwave.frontend.plan.generated import parsed
from sparkwave.frontend.statements import parse_one


@pytest.mark.parametrize("sql, columns, generated", [
    ("create table t1 (v1 int as v2-1, v2 int, v3 int as v2+1.02, v4 double as v2 + 1.02)",
     "v1 INT, v2 INT, v3 INT, v4 DOUBLE", (("v1", "v2-1"), ("v3", "v2+1.02"), ("v4", "v2 + 1.02"))),
    ("CREATE TABLE t (k int, s varchar AS upper(concat('a,(', k::varchar)), n numeric(10,2) AS (k * 1.5), "
     "PRIMARY KEY (k))", "k INT, s VARCHAR, n DECIMAL(10, 2), PRIMARY KEY (k)",
     (("s", "upper(concat('a,(', k::varchar))"), ("n", "k * 1.5"))),
    ("create table t (a int, b int as (a), c int as (a) + (a))", "a INT, b INT, c INT",
     (("b", "a"), ("c", "(a) + (a)"))),
    ("create table t (a double precision as 1, b int)", "a DOUBLE, b INT", (("a", "1"),)),
    ("create table t (v1 int, p timestamptz as proctime(), v2 int as v1 * 2)", "v1 INT, p TIMESTAMPTZ, v2 INT",
     (("v2", "v1 * 2"),)),
])
def test_generated_columns_are_taken_off_the_column_list(sql: str, columns: str, generated: tuple) -> None:
    stmt = parse_one(sql, 1, 1)
    assert stmt.generated == generated
    assert stmt.ast.sql().split("(", 1)[1].rsplit(")", 1)[0] == columns


@pytest.mark.parametrize("written, words", [
    ("now()", "Failed to bind expression"),
    ("random() * k", "must not be volatile"),
    ("(SELECT 1)", "no subquery"),
    ("sum(k)", "aggregate"),
    ("no_such_fn(k)", "function no_such_fn is not supported"),
    ("CASE WHEN k > 0 THEN raise_error('no') END", "raise_error() would fail the write of the row at every epoch"),
])
def test_a_generated_expression_reads_only_its_row_and_is_not_volatile(written: str, words: str) -> None:
    stmt = parse_one(f"create table t (k int, g int as {written})", 1, 1)
    with pytest.raises(SqlError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parsed(stmt, "g", written)
