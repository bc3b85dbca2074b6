"""Type inference behind one interface, so that planning needs no JVM.

The planner needs the type of an expression at four points: to translate PostgreSQL's semantics
into Spark SQL (`/` between integers, `::numeric`, `to_char`, bytea: `postgres._translate` asks the
type of an operand), to type every column an operator outputs, to type the columns of `VALUES`, and
to find the type two numeric join keys are compared as. `TypeOracle` is those four questions.
`SparkTypes` asks Spark's analyser (production: the types are Spark's by definition, since Spark
evaluates the expressions); `StaticTypes` (`static_types.py`) answers from a table of Spark's rules,
for plan tests without a JVM."""

from __future__ import annotations

import re
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, IntegerType, LongType, StringType
from pyspark.sql.utils import AnalysisException
from sqlglot import exp

from sparkwave.core.schema import SqlType, from_spark, to_spark_type
from sparkwave.core.spark import empty_frame
from sparkwave.frontend.postgres import spark_ddl, translated_tree
from sparkwave.stream.expressions import Expr

Columns = list[tuple[str, str]]  # (internal name, sparkwave type name)


class UntypedError(Exception):
    """An expression the oracle cannot type (an unknown column, a function on the wrong type): the
    planner reports it as the query's error, with the analyser's first line."""


class TypeOracle(Protocol):
    """The types the planner needs; every expression is Spark SQL over `columns`."""

    def expression_types(self, columns: Columns, exprs: Columns, predicate: str | None) -> dict[str, str]:
        """The sparkwave type of each (name, Spark SQL) in `exprs` over rows passing `predicate`;
        raises `UntypedError`."""

    def spark_type(self, columns: Columns, e: exp.Expr) -> DataType | None:
        """Spark's type of a parsed expression (mid-translation), None if it cannot be typed."""

    def values_types(self, names: list[str], rows: list[list[str]]) -> list[str]:
        """The column types of an inline table of Spark SQL constants; raises `UntypedError`."""

    def common_type(self, a: str, b: str) -> str:
        """The type `COALESCE(a, b)` has: two numeric join keys are compared as it."""


class SparkTypes:
    """Spark's analyser on empty frames (no Spark job runs)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._frames: dict[str, DataFrame] = {}  # an empty frame per schema: one JVM call each

    def _frame(self, columns: Columns) -> DataFrame:
        ddl = spark_ddl(columns)
        if ddl not in self._frames:
            self._frames[ddl] = empty_frame(self.spark, ddl)
        return self._frames[ddl]

    def expression_types(self, columns: Columns, exprs: Columns, predicate: str | None) -> dict[str, str]:
        try:
            df = self._frame(columns)
            if predicate:
                df = df.where(predicate)
            df = df.selectExpr(*[f"{e} AS `{n}`" for n, e in exprs])
            return {f.name: from_spark(f.dataType).name for f in df.schema.fields}
        except AnalysisException as e:
            raise UntypedError(first_line(e)) from None

    def spark_type(self, columns: Columns, e: exp.Expr) -> DataType | None:
        known = obvious_type(columns, e)
        if known is not None:
            return known
        try:
            return self._frame(columns).selectExpr(e.sql(dialect="spark")).schema.fields[0].dataType
        except AnalysisException:
            return None  # the whole expression's analysis reports it, naming the query

    def values_types(self, names: list[str], rows: list[list[str]]) -> list[str]:
        inline = ", ".join("(" + ", ".join(r) + ")" for r in rows)
        try:
            fields = self.spark.sql(f"SELECT * FROM VALUES {inline} AS v({', '.join(names)})").schema.fields
        except AnalysisException as e:
            raise UntypedError(first_line(e)) from None
        return [from_spark(f.dataType).name for f in fields]

    def common_type(self, a: str, b: str) -> str:
        df = self._frame([("a", a), ("b", b)])
        return from_spark(df.selectExpr("coalesce(a, b) AS c").schema.fields[0].dataType).name


def obvious_type(columns: Columns, e: exp.Expr) -> DataType | None:
    """A column's or a literal's type, without asking anyone (as `postgres._Types` does)."""
    if isinstance(e, exp.Column) and not e.table and (t := dict(columns).get(e.name)) is not None:
        return to_spark_type(SqlType(t))
    if isinstance(e, exp.Literal) and e.is_int:
        return IntegerType() if -(2**31) <= int(e.this) < 2**31 else LongType()
    if isinstance(e, exp.Literal) and e.is_string:
        return StringType()
    return None


class _Of:
    """`postgres._Types`'s one method, over an oracle."""

    def __init__(self, oracle: TypeOracle, columns: Columns) -> None:
        self.oracle, self.columns = oracle, columns

    def of(self, e: exp.Expr) -> DataType | None:
        known = obvious_type(self.columns, e)
        return known if known is not None else self.oracle.spark_type(self.columns, e)


def to_spark_sql(e: exp.Expr, columns: Columns, oracle: TypeOracle) -> Expr:
    """`postgres.to_spark` with the types from `oracle`: the translated tree, as an operator holds it."""
    return Expr.of_tree(translated_tree(e, _Of(oracle, columns)))


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def readable(msg: str) -> str:
    """An analyser's message with internal column names (`c3_price`) as the user wrote them."""
    return re.sub(r"`?c\d+_([a-z0-9_]+)`?", r"\1", msg)
