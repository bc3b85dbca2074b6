"""Stored plans read back with their meaning, for every documented function: each function's call,
translated as sparkwave translates it (Spark SQL text, what a plan stores), gives in Spark the same
value as the text read as a tree and written again (`stream/expressions.canonical`: what an
operator's expression is once it is a tree). tests/unit/test_expressions.py proves the tree side
without Spark; this is the meaning side, the risk of a reader that rewrites a call (to_char's
pattern dropped by sqlglot's Spark reader)."""

from __future__ import annotations

import sqlglot

from sparkwave.frontend import postgres
from sparkwave.frontend.postgres import to_spark
from sparkwave.stream.expressions import canonical
from tests.function_samples import COLUMNS, ROWS, SAMPLES

NOT_DETERMINISTIC = {"random", "gen_random_uuid", "now", "current_timestamp"}


def _value(spark, sql: str) -> tuple[str, object]:
    try:
        df = spark.sql(f"SELECT {sql} FROM {ROWS}")
        return df.schema.simpleString(), df.collect()
    except Exception as e:  # raise_error: the same error either way
        return "error", type(e).__name__


def test_every_documented_function_means_the_same_read_back_as_a_tree(spark):
    changed = []
    for name, sample in SAMPLES.items():
        ast = sqlglot.parse_one(f"SELECT {sample} AS x FROM t", read=postgres.DIALECT)
        text = to_spark(ast.selects[0], COLUMNS, spark)  # `<call> AS x`
        again = canonical(text)
        if again == text:
            continue
        changed.append(name)
        before, after = _value(spark, text), _value(spark, again)
        if name in NOT_DETERMINISTIC:
            before, after = before[0], after[0]
        assert before == after, f"{name}: {text!r} read back as {again!r}"
    assert changed  # some calls are written back differently (LOG10(f) as LOG(10, f)): those were compared
