"""Constant folding for the planner (temporal bounds, percentile fractions), BETWEEN NOW() ... as two
temporal bounds, numeric input rounded as PostgreSQL's, and RETURNING refused into a watermarked
table. No Spark."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.frontend import constants
from sparkwave.frontend.dml import _cast
from sparkwave.frontend.ordered_sets import fraction, ordered_set_value
from sparkwave.frontend.plan.temporal import allowed_now, conjuncts, split, temporal_parts
from sparkwave.frontend.statements import parse

SEC = 1_000_000
DAY = 86_400 * SEC


def _e(text: str) -> exp.Expr:
    return sqlglot.parse_one(f"SELECT {text}", read="postgres").expressions[0]


@pytest.mark.parametrize("text, value", [
    ("0.2 + 0.3", Decimal("0.5")), ("7 / 2", 3), ("-7 / 2", -3), ("1 - 0.25 * 2", Decimal("0.50")),
    ("(0.5)", Decimal("0.5")), ("NULL", None), ("0.3 + NULL", None),
    ("CAST('0.25' AS DOUBLE PRECISION)", Decimal("0.25")), ("1.0 / 4", Decimal("0.25")),
    # a cast decides the arithmetic: numeric division, and an integer rounded half away from zero
    ("CAST(7 AS numeric) / 2", Decimal("3.5")), ("7::double precision / 2", Decimal("3.5")),
    ("CAST(0.6 AS int)", 1), ("CAST(2.5 AS int)", 3), ("CAST(-2.5 AS bigint)", -3), ("CAST(1.4 AS int) / 2", 0),
    ("CAST('3' AS int) / 2", 1), ("CAST(NULL AS int)", None),
    ("CAST(ROUND(0.6) AS INT)", 1), ("ROUND(-2.5)", Decimal(-3))])  # the ad-hoc path's translated int cast
def test_numbers_fold_as_postgresql_computes_them(text: str, value: object) -> None:
    assert constants.number(_e(text)) == value


@pytest.mark.parametrize("text", ["a + 1", "'x'", "random()", "ARRAY[0.5]", "CAST('2.5' AS int)"])
def test_what_is_not_a_constant_number_says_so(text: str) -> None:
    with pytest.raises(constants.NotConstant):
        constants.number(_e(text))


def test_division_by_zero_is_an_error() -> None:
    with pytest.raises(ValueError, match="division by zero"):
        constants.number(_e("1 / 0"))
    with pytest.raises(ValueError, match="division by zero"):
        constants.interval(_e("INTERVAL '1 hour' / 0"))


@pytest.mark.parametrize("text, micros", [("INTERVAL '1 day' * 365 * 2000", 730_000 * DAY),
                                          ("365 * INTERVAL '1 day'", 365 * DAY),
                                          ("2 * INTERVAL '1 hour' / 4", 1800 * SEC),
                                          ("INTERVAL '1 hour' + INTERVAL '30 minutes'", 5400 * SEC),
                                          ("-INTERVAL '1 hour'", -3600 * SEC),
                                          ("INTERVAL '1 second' * 0.0000005", 0),  # half to even, as rint
                                          ("INTERVAL '1 second' * 0.0000015", 2),
                                          ("INTERVAL '1 hour' * NULL", None),
                                          ("'1 hour'::interval * 2", 7200 * SEC),
                                          ("CAST('30 minutes' AS INTERVAL)", 1800 * SEC),
                                          ("INTERVAL '01:30'", 5400 * SEC),
                                          ("INTERVAL '-00:00:05'", -5 * SEC)])
def test_interval_arithmetic_folds_to_microseconds(text: str, micros: int | None) -> None:
    assert constants.interval(_e(text)) == micros


@pytest.mark.parametrize("text", ["INTERVAL '1 month' * 2", "INTERVAL '1 hour' * a", "INTERVAL '1 hour' * '2'",
                                  "INTERVAL '1:30' MINUTE TO SECOND", "INTERVAL '01:30' SECOND"])
def test_intervals_without_a_fixed_length_or_a_constant_factor_are_not_folded(text: str) -> None:
    with pytest.raises(constants.NotConstant):
        constants.interval(_e(text))


@pytest.mark.parametrize("cond, op, offset", [
    ("ts > NOW() - INTERVAL '1 day' * 365 * 2000", ">", -730_000 * DAY),
    ("ts <= NOW() + 2 * INTERVAL '1 hour' / 4", "<=", 1800 * SEC),
    ("INTERVAL '1 hour' + NOW() < ts", ">", 3600 * SEC),
    ("ts + INTERVAL '1 minute' * 2 >= NOW()", ">=", -120 * SEC),
    ("ts > NOW() - '1 hour'::interval / 4", ">", -900 * SEC),
    ("ts <= NOW() - INTERVAL '00:00:30'", "<=", -30 * SEC),
    ("ts > NOW() - INTERVAL '1 month' * 2", None, None),
])
def test_temporal_bounds_fold_their_interval_arithmetic(cond: str, op: str | None, offset: int | None) -> None:
    parts = temporal_parts(sqlglot.parse_one(cond, read="postgres"))
    assert (parts[1:] if parts else (None, None)) == (op, offset)


def test_between_now_and_a_later_time_is_a_lower_and_an_upper_bound() -> None:
    q = sqlglot.parse_one("SELECT v FROM t WHERE v BETWEEN NOW() AND NOW() + INTERVAL '1 day' * 365 * 2000 AND k > 1",
                          read="postgres")
    timed, rest = split(conjuncts(q.args["where"].this))
    assert [temporal_parts(c)[1:] for c in timed] == [(">=", 0), ("<=", 730_000 * DAY)]
    assert [c.sql() for c in rest] == ["k > 1"]
    assert all(allowed_now(n, q) for n in q.find_all(exp.CurrentTimestamp))
    assert q.args["where"].find(exp.Between) is not None  # the query itself is left whole


@pytest.mark.parametrize("where", ["v BETWEEN NOW() AND NOW() + k",
                                   "v BETWEEN SYMMETRIC NOW() AND NOW() + INTERVAL '1 hour'",
                                   "NOT v BETWEEN NOW() AND NOW() + INTERVAL '1 hour'"])
def test_a_between_that_is_not_two_temporal_bounds_keeps_now_refused(where: str) -> None:
    q = sqlglot.parse_one(f"SELECT v FROM t WHERE {where}", read="postgres")
    assert not all(allowed_now(n, q) for n in q.find_all(exp.CurrentTimestamp))


def test_a_percentile_fraction_may_be_a_constant_expression_or_null() -> None:
    assert fraction(_e("0.2 + 0.3"), "percentile_disc").sql() == "CAST('0.5' AS DOUBLE)"
    assert fraction(_e("NULL"), "percentile_cont") is None
    assert fraction(_e("0.3 + NULL"), "percentile_cont") is None
    with pytest.raises(ValueError, match="percentile value 1.5 is not between 0 and 1"):
        fraction(_e("1 + 0.5"), "percentile_cont")
    with pytest.raises(ValueError, match="must be a numeric constant"):
        fraction(_e("a"), "percentile_cont")


@pytest.mark.parametrize("fn", ["percentile_cont", "percentile_disc"])
def test_a_null_fraction_gives_null_typed_as_the_percentile(fn: str) -> None:
    call = _e(f"{fn}(NULL) WITHIN GROUP (ORDER BY a)")
    value = ordered_set_value(call.this, call.expression.expressions[0].this, False, lambda f: f)
    assert isinstance(value, exp.Case) and value.args.get("default") is None
    assert value.args["ifs"][0].this.sql() == "SIZE(SORT_ARRAY(COLLECT_LIST(" + (
        "CAST(a AS DOUBLE)" if fn == "percentile_cont" else "a") + "))) < 0"  # never holds: NULL


@pytest.mark.parametrize("values, target, out", [
    ([Decimal("1.234"), Decimal("-1.235"), Decimal("1.235"), None], pa.decimal128(10, 2),
     [Decimal("1.23"), Decimal("-1.24"), Decimal("1.24"), None]),
    (["1.234", "5", " 2.005 ", None], pa.decimal128(10, 2), [Decimal("1.23"), Decimal("5.00"), Decimal("2.01"), None]),
    ([" 5", "7 "], pa.int32(), [5, 7]),
    # rounding carries into a new digit before the point: 100.00 fits numeric(5, 2) as in PostgreSQL
    ([Decimal("99.9995"), Decimal("-99.995")], pa.decimal128(5, 2), [Decimal("100.00"), Decimal("-100.00")]),
    (["99.995"], pa.decimal128(5, 2), [Decimal("100.00")]),
])
def test_numeric_input_is_rounded_to_the_columns_scale_as_postgresql_does(values: list[object], target: pa.DataType,
                                                                          out: list[object]) -> None:
    assert _cast(pa.chunked_array([pa.array(values)]), target).to_pylist() == out


@pytest.mark.parametrize("values", [["123456789.00"], [Decimal("123456789.001")], ["1.2.3"], ["NaN"],
                                    [Decimal("99999999.995")]])  # rounds to 100000000.00: past numeric(10, 2)
def test_numeric_input_that_does_not_fit_is_still_an_error(values: list[object]) -> None:
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        _cast(pa.chunked_array([pa.array(values)]), pa.decimal128(10, 2))


@pytest.mark.parametrize("sql, refused", [
    ("SELECT INTERVAL '1 day 00:00:05'", True),  # sqlglot would read INTERVAL '1' DAY
    ("SELECT NOW() - INTERVAL '2 hours 00:30'", True),
    ("SELECT INTERVAL '1 day 2 hours', INTERVAL '01:30', INTERVAL '1.5 hours', INTERVAL '5' SECOND", False),
    ("SELECT 'INTERVAL', '1 day 00:00:05'", False),
])
def test_an_interval_literal_sqlglot_would_read_in_part_is_refused(sql: str, refused: bool) -> None:
    if refused:
        with pytest.raises(SqlError, match="alone \\(its other part dropped\\): write every part with its unit"):
            parse(sql)
    else:
        parse(sql)

