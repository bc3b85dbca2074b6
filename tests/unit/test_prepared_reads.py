"""A prepared point read is parsed once, at Parse (`session_backend.read_plan`), and its parameters'
values are put in as nodes at Execute (`value_nodes`, `PreparedRead.filled`): the query and the key
values `frontend/reads.py` reads must be those of the old way, the values rendered as literals into
the text and the text parsed again, for every value (quotes, NULLs, numbers out of range, times,
bytes, strings that look like SQL), and so must the errors. No Spark session, no server."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import types as T

from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.frontend import read_shape
from sparkwave.frontend.statements import Query, parse_one
from sparkwave.server import params as P
from sparkwave.server.session_backend import read_plan, value_nodes

SCHEMA = Schema((Column("k", SqlType("bigint")), Column("s", SqlType("varchar")), Column("i", SqlType("int")),
                 Column("b", SqlType("boolean")), Column("v", SqlType("double"))), ("k", "s"))
ONE_KEY = Schema((Column("k", SqlType("bigint")), Column("v", SqlType("varchar"))), ("k",))

# (text, its parameters' types): reads of the shapes `reads.py` answers, parameters as key values
TEMPLATED = [
    ("SELECT k, v FROM m WHERE k = $1", [T.LongType()]),
    ("SELECT * FROM m WHERE $1 = k", [T.LongType()]),
    ("select m.k AS kk, v from m where (k) = ($1) limit 3", [T.LongType()]),
    ("SELECT * FROM m x WHERE x.s = $1 AND x.k = $2", [T.StringType(), T.LongType()]),
    ("SELECT * FROM m WHERE k = $2 AND s = $1", [T.StringType(), T.LongType()]),
    ("SELECT * FROM m WHERE k = $1 AND s = 'it''s $1'", [T.LongType()]),
    ("SELECT *\n  FROM m -- $2 is no parameter here\n WHERE k=$1", [T.LongType()]),
    ("SELECT * FROM m WHERE k = $1 AND k = $1", [T.LongType()]),
    ("SELECT k FROM m WHERE b = $1", [T.BooleanType()]),
    ("SELECT k FROM m WHERE i = $1", [T.IntegerType()]),
    ("SELECT k FROM m WHERE k = $1", [T.StringType()]),  # a client that sent text for a number
    ("SELECT k FROM m WHERE s = $1", [T.LongType()]),
    ("SELECT k FROM m WHERE k = $1", [T.DecimalType(10, 2)]),
    ("SELECT * FROM m", []),
    ("SELECT * FROM m WHERE k = 5", []),
]
# statements that are no such read: each Execute parses its text with the values in place
NOT_TEMPLATED = [
    "SELECT $1 FROM m WHERE k = $2", "SELECT * FROM m WHERE k = -$1", "SELECT * FROM m WHERE k = $1 + 1",
    "SELECT * FROM m LIMIT $1", "SELECT * FROM m WHERE k = $1::bigint", "SELECT * FROM m WHERE k = $1 OR k = 2",
    "INSERT INTO m VALUES ($1, $2)", "UPDATE m SET v = $1 WHERE k = $2", "SELECT * FROM m WHERE k IN ($1)",
    "SELECT * FROM m WHERE k = (SELECT $1)", "SELECT count(*) FROM m WHERE k = $1", "SET application_name = $1",
    "SELECT version() FROM m WHERE k = $1", "SELECT * FROM m WHERE k = $1 GROUP BY k", "BEGIN",
    "SELECT * FROM pg_catalog.pg_class WHERE relname = $1", "SELECT * FROM m WHERE k = $1 ORDER BY k",
]
VALUES: list[Any] = [
    0, 5, -5, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 10**30, True, False, None,
    "", "abc", "it's", "a''b", "back\\slash", "\\'", "nl\nx", "tab\t", "é漢字🙂", "$$x$$", "$1", "-- c", "/* c */",
    "'; DROP TABLE m; --", "5", "-5", "x\x00y", P._MARK + "1", Decimal("5"), Decimal("-5"), Decimal("5.50"),
    Decimal("-0"), Decimal("1E+2"), Decimal("NaN"), 1.5, -0.0, float("nan"), float("inf"), b"\x00'\xff",
    bytearray(b"ab"), date(2024, 2, 29), time(12, 30, 1), datetime(2024, 1, 2, 3, 4, 5, 6),
    datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), timedelta(days=-1, microseconds=5), [1, 2], object(),
]


def _old(text: str, types: list[T.DataType], values: list[Any]) -> Any:
    """What the old way reads: the text with each value rendered into it, parsed again."""
    try:
        stmt = parse_one(P.substitute(text, lambda n: P.literal(values[n - 1], types[n - 1])), 1, 1)
    except Exception as e:
        return ("error", type(e), str(e))
    assert isinstance(stmt, Query)
    return _read(read_shape.shape(stmt.ast))


def _new(plan: read_shape.PreparedRead, text: str, types: list[T.DataType], values: list[Any]) -> Any:
    try:
        nodes = value_nodes(text, types, values)
    except Exception as e:
        return ("error", type(e), str(e))
    return _read(plan.filled(nodes))


def _read(query: Any) -> Any:
    """The query and the key values (with their Python types) that `reads.py` would look up."""
    if query is None:
        return None
    keys = [_keys(schema, query) for schema in (SCHEMA, ONE_KEY)]
    return query, [None if k is None else {c: (v, type(v)) for c, v in k.items()} for k in keys]


def _keys(schema: Schema, query: Any) -> dict[str, Any] | None:
    return read_shape.key_values(schema, query, read_shape.Resolved.of(schema, query).where)


@pytest.mark.parametrize(("text", "types"), TEMPLATED)
def test_a_read_parsed_once_is_the_read_parsed_at_each_execute(text: str, types: list[T.DataType]) -> None:
    plan = read_plan(text)
    assert plan is not None, text
    n = len(types)
    rng = random.Random(text)
    cases = [[v] * n for v in VALUES] + [[rng.choice(VALUES) for _ in range(n)] for _ in range(200)]
    for values in cases:
        assert _new(plan, text, types, values) == _old(text, types, values), (text, values)


def test_random_strings_and_integers_are_the_same_values_both_ways() -> None:
    rng = random.Random(44)
    text, types = "SELECT * FROM m WHERE s = $1 AND k = $2", [T.StringType(), T.LongType()]
    plan = read_plan(text)
    assert plan is not None
    alphabet = "ab'\"\\$-/*;\n\t\r é🙂\u2028\x7f\x01"
    for _ in range(500):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        k = rng.randrange(-(2**64), 2**64)
        assert _new(plan, text, types, [s, k]) == _old(text, types, [s, k]), (s, k)


@pytest.mark.parametrize("text", NOT_TEMPLATED)
def test_other_statements_are_parsed_at_each_execute(text: str) -> None:
    assert read_plan(text) is None


def test_a_parameter_is_a_value_never_sql() -> None:
    text = "SELECT * FROM m WHERE k = $1 AND s = $2"
    plan = read_plan(text)
    assert plan is not None
    query = plan.filled(value_nodes(text, [T.LongType(), T.StringType()], [1, "x' OR '1' = '1"]))
    assert _keys(SCHEMA, query) == {"k": 1, "s": "x' OR '1' = '1"}
