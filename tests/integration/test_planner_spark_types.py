"""The Spark-free type oracle against Spark's analyser: every golden case planned with `SparkTypes`
gives the same text as with `StaticTypes` (the golden text), so the golden tests, which run without
a JVM, check what production plans."""

from __future__ import annotations

from sparkwave.frontend.plan.types import SparkTypes
from tests.planner import golden


def test_spark_plans_every_golden_case_as_the_golden_text(spark):
    types = SparkTypes(spark)
    differ = [case.name for path in golden.files() for case in golden.read(path)
              if golden.render(case, types) != case.expected]
    assert not differ, f"Spark's analyser plans these otherwise: {differ}"
