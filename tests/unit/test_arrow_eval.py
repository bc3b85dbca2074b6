"""The Arrow evaluator of operators' expressions (`stream/arrow_eval.py`, `stream/arrow_chain.py`)
and Spark's xxhash64 in numpy (`core/xxhash64.py`), without Spark: hard-coded values as Spark gives
them (tests/integration/test_arrow_parity.py compares the same paths with Spark itself), and what
the evaluator refuses, so that Spark keeps evaluating it."""

from __future__ import annotations

import math
from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from sparkwave.core.xxhash64 import hash_columns, vnodes
from sparkwave.core.zset import W
from sparkwave.stream import arrow_chain
from sparkwave.stream.arrow_eval import Inexact, Refused, Rows, compile_expr
from sparkwave.stream.expressions import parsed
from sparkwave.stream.operator import EpochIO, HeldRows
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan, Window

I32 = [0, 1, -1, 2**31 - 1, -(2**31), None]
COLUMNS = {
    "i": (pa.array(I32, pa.int32()), "int"),
    "j": (pa.array([2, 0, -1, 1, -1, 3], pa.int32()), "int"),
    "b": (pa.array([7, 2**63 - 1, -(2**63), 5, None, -7], pa.int64()), "bigint"),
    "d": (pa.array([0.0, -0.0, float("nan"), 1.5, None, float("inf")]), "double"),
    "n": (pa.array([Decimal("1.25"), Decimal("-1.25"), Decimal("99999999.99"), None, Decimal("0.05"),
                    Decimal("-0.05")], pa.decimal128(10, 2)), "decimal(10,2)"),
    "v": (pa.array(["", "a", "Abc", None, "  x ", "CA"]), "varchar"),
    "u": (pa.array(["é", "a", "abd", "b", None, "ca"]), "varchar"),
    "f": (pa.array([True, False, None, True, False, None]), "boolean"),
}
ROWS = Rows({n: a for n, (a, _) in COLUMNS.items()}, 6)
TYPES = {n: t for n, (_, t) in COLUMNS.items()}


def ev(sql: str) -> tuple[str, list]:
    c = compile_expr(parsed(sql), TYPES)
    return c.type, c.fn(ROWS).to_pylist()


def same(got: list, want: list) -> bool:
    return all((isinstance(g, float) and isinstance(w, float) and math.isnan(g) and math.isnan(w)) or
               (g == w and (not isinstance(g, float) or math.copysign(1, g) == math.copysign(1, w)))
               for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize(("sql", "type_", "want"), [
    ("`i` + 1", "int", [1, 2, 0, -(2**31), -(2**31) + 1, None]),  # wraps, as Java
    ("TRY_ADD(`i`, 1)", "int", [1, 2, 0, None, -(2**31) + 1, None]),  # NULL on overflow
    ("TRY_MULTIPLY(`b`, 2)", "bigint", [14, None, None, 10, None, -14]),
    ("TRY_SUBTRACT(`b`, 1)", "bigint", [6, 2**63 - 2, None, 4, None, -8]),
    ("`i` DIV `j`", "bigint", [0, None, 1, 2**31 - 1, 2**31, None]),  # by zero: NULL; truncated
    ("`b` DIV -1", "bigint", [-7, -(2**63) + 1, -(2**63), -5, None, 7]),  # MIN DIV -1 wraps
    ("-7 DIV 2", "bigint", [-3] * 6),
    ("`i` % `j`", "int", [0, None, 0, 0, 0, None]),
    ("-7 % 3", "int", [-1] * 6),
    ("`d` / 0", "double", [None] * 6),
    ("`i` / `j`", "double", [0.0, None, 1.0, 2147483647.0, 2147483648.0, None]),
    ("`d` = `d`", "boolean", [True, True, True, True, None, True]),  # NaN = NaN
    ("`d` > 1.0E300", "boolean", [False, False, True, True and False, None, True]),  # NaN above all
    ("`d` <=> NULL", "boolean", [False, False, False, False, True, False]),
    ("`v` < `u`", "boolean", [True, False, True, None, None, True]),  # UTF-8 bytes: 'A' < 'a'
    ("`f` AND NULL", "boolean", [None, False, None, None, False, None]),
    ("`f` OR NULL", "boolean", [True, None, None, True, None, None]),
    ("`i` IN (1, -1)", "boolean", [False, True, True, False, False, None]),
    ("CASE WHEN `i` > 0 THEN 'p' WHEN `i` < 0 THEN 'n' END", "varchar", [None, "p", "n", "p", "n", None]),
    ("COALESCE(`b`, `i`)", "bigint", [7, 2**63 - 1, -(2**63), 5, -(2**31), -7]),
    ("IF(`f`, `i`, `b`)", "bigint", [0, 2**63 - 1, -(2**63), 2**31 - 1, None, -7]),
    ("GREATEST(`d`, 1.0E0)", "double", [1.0, 1.0, float("nan"), 1.5, 1.0, float("inf")]),
    ("CAST(`b` AS INT)", "int", [7, -1, 0, 5, None, -7]),  # the low bits
    ("TRY_CAST(`b` AS INT)", "int", [7, None, None, 5, None, -7]),
    ("CAST(`i` AS DECIMAL(5,0))", "decimal(5,0)", [Decimal(0), Decimal(1), Decimal(-1), None, None, None]),
    ("CAST(`n` AS DECIMAL(9,1))", "decimal(9,1)", [Decimal("1.3"), Decimal("-1.3"), None, None, Decimal("0.1"),
                                                   Decimal("-0.1")]),  # HALF_UP; overflow NULL
    ("0.908 * `b`", "decimal(24,3)", [Decimal("6.356"), Decimal("8374821809464136432.756"),
                                      Decimal("-8374821809464136433.664"), Decimal("4.540"), None,
                                      Decimal("-6.356")]),
    ("1 - `n`", "decimal(11,2)", [Decimal("-0.25"), Decimal("2.25"), Decimal("-99999998.99"), None,
                                  Decimal("0.95"), Decimal("1.05")]),
    ("LENGTH(`u`)", "int", [1, 1, 3, 1, None, 2]),  # characters, not bytes
    ("CONCAT(`v`, `i`)", "varchar", ["0", "a1", "Abc-1", None, "  x -2147483648", None]),
    ("TRIM(`v`)", "varchar", ["", "a", "Abc", None, "x", "CA"]),
    ("LOWER(`v`)", "varchar", ["", "a", "abc", None, "  x ", "ca"]),
    ("-2147483648", "int", [-(2**31)] * 6),  # one literal in Spark
    ("CAST('1995-03-15' AS DATE)", "date", [date(1995, 3, 15)] * 6),
])
def test_values_and_types_are_sparks(sql, type_, want):
    got_type, got = ev(sql)
    assert got_type == type_
    assert same(got, want), got


@pytest.mark.parametrize("sql", [
    "`n` / 3",  # decimal division: Spark's scale rules
    "`d` + `n`",  # a decimal meeting a double
    "`v` = 1",  # a string meeting a number
    "CAST(`v` AS INT)",  # parsing text
    "CAST(`d` AS INT)",
    "CAST(`d` AS STRING)",  # Java's formatting of doubles
    "SUBSTR(`v`, 2, 1)",
    "`n` = `d`",  # a decimal meeting a double: compared as doubles
    "CASE `i` WHEN 1 THEN 2 END",
    "`unknown` + 1",
    "REGEXP_REPLACE(`v`, 'a', 'b')",
])
def test_refuses_what_it_does_not_compute_exactly(sql):
    with pytest.raises(Refused):
        compile_expr(parsed(sql), TYPES)


def test_a_timestamp_shifted_by_a_day_time_interval_is_exact():
    types = {"t": "timestamp"}
    rows = Rows({"t": pa.array([datetime(1970, 1, 1), None], pa.timestamp("us"))}, 2)
    c = compile_expr(parsed("`t` - INTERVAL '10' SECOND"), types)
    assert (c.type, c.fn(rows).to_pylist()) == ("timestamp", [datetime(1969, 12, 31, 23, 59, 50), None])
    with pytest.raises(Refused):
        compile_expr(parsed("`t` + INTERVAL '1' MONTH"), types)  # calendar months: Spark's own rules


def test_non_ascii_case_mapping_goes_to_spark_at_run_time():
    c = compile_expr(parsed("UPPER(`u`)"), TYPES)
    with pytest.raises(Inexact):
        c.fn(ROWS)
    assert arrow_chain.evaluate(lambda: pa.table({"x": c.fn(ROWS)})) is None


# --- xxhash64 (values as Spark's xxhash64 gives them) ---------------------------------------------
@pytest.mark.parametrize(("values", "want"), [
    (pa.array([0, 1, -1, None], pa.int32()), [3614696996920510707, -6698625589789238999, 2017008487422258757, 42]),
    (pa.array([0, 1, 2**63 - 1], pa.int64()), [-5252525462095825812, -7001672635703045582, -3246596055638297850]),
    (pa.array(["", "a", "héllo", "x" * 40]), [-7444071767201028348, -8582455328737087284, 501425390238239234,
                                              -5348608777870439244]),
    (pa.array([0.0, -0.0, float("nan"), 1.5]), [-5252525462095825812, -5252525462095825812, -3127944061524951246,
                                                7738255526519901366]),
    (pa.array([Decimal("-0.000128"), Decimal("12345678901234567890123456789012.123456")], pa.decimal128(38, 6)),
     [-7898411661632158123, 5724760807551324748]),
    (pa.array([Decimal("1.23")], pa.decimal128(10, 2)), [-3178482946328430151]),
    (pa.array([True, False]), [-6698625589789238999, 3614696996920510707]),
    (pa.array([date(1970, 1, 2)]), [-6698625589789238999]),
    (pa.array([datetime(1970, 1, 1, 0, 0, 1)], pa.timestamp("us")), [6087480646152566239]),
])
def test_xxhash64_is_sparks(values, want):
    assert hash_columns([values], len(values)).tolist() == want


def test_xxhash64_folds_columns_and_skips_nulls():
    got = hash_columns([pa.array([1, None], pa.int32()), pa.array(["a", "b"])], 2).tolist()
    assert got == [8205864924878002737, -6391946315847899181]
    assert vnodes([pa.array([0, 1, -1, None], pa.int32())], 4, 256).to_pylist() == [243, 41, 69, 42]


# --- chains --------------------------------------------------------------------------------------
class _Spark:
    """Stands where a SparkSession is handed on: an Arrow chain never makes a frame."""


def _held(rows: dict, ops: list[int]) -> dict[str, HeldRows]:
    from sparkwave.core.schema import Column, Schema, SqlType

    schema = Schema(tuple(Column(n, SqlType(t)) for n, (_, t) in rows.items()), (next(iter(rows)),))
    n = len(ops)
    table = pa.table({"_epoch": pa.array([1] * n, pa.int64()), "_seq": pa.array(range(n), pa.int64()),
                      "_op": pa.array(ops, pa.int8()), "_vnode": pa.array([0] * n, pa.int16()),
                      **{c: a for c, (a, _) in rows.items()}})
    return {"t": HeldRows(_Spark(), schema, table)}  # type: ignore[arg-type]


def _vnode(k: int) -> int:
    return vnodes([pa.array([k], pa.int32())], 1, 256)[0].as_py()


def test_a_scan_and_projection_chain_runs_in_arrow_with_weights_and_vnodes():
    held = _held({"k": (pa.array([1, 2, 3, 4], pa.int32()), "int"), "p": (pa.array([10, 95, 99, None], pa.int64()),
                                                                          "bigint")}, [1, 2, 3, 4])
    scan = Scan(1, [("c1_k", "int"), ("c1_p", "bigint")], ["c1_k"], relation="t",
                exprs=[("c1_k", "`k`"), ("c1_p", "`p`")], predicate="`c1_p` > 50")
    proj = Project(2, [("c2_k", "int"), ("c2_q", "bigint")], ["c2_k"], input=scan,
                   exprs=[("c2_k", "`c1_k`"), ("c2_q", "`c1_p` * 2")])
    out = proj.arrow_delta(EpochIO(None, {}, changes=held), root=True)  # type: ignore[arg-type]
    assert out is not None
    assert out.column_names == ["c2_k", "c2_q", W, "_vnode"]
    assert out.to_pylist() == [{"c2_k": 2, "c2_q": 190, W: -1, "_vnode": _vnode(2)},
                               {"c2_k": 3, "c2_q": 198, W: -1, "_vnode": _vnode(3)}]
    assert scan.arrow_steps and proj.arrow_steps  # compiled once, kept on the operators


def test_a_refused_expression_leaves_the_chain_to_spark():
    held = _held({"k": (pa.array([1], pa.int32()), "int"), "s": (pa.array(["x"]), "varchar")}, [1])
    scan = Scan(1, [("c1_k", "int"), ("c1_s", "varchar")], ["c1_k"], relation="t",
                exprs=[("c1_k", "`k`"), ("c1_s", "REGEXP_REPLACE(`s`, 'x', 'y')")])
    assert scan.arrow_delta(EpochIO(None, {}, changes=held), root=True) is None  # type: ignore[arg-type]


def test_tumble_and_hop_windows_floor_before_1970_and_drop_null_times():
    t = pa.array([datetime(1970, 1, 1, 0, 0, 7), datetime(1969, 12, 31, 23, 59, 57), None], pa.timestamp("us"))
    rows = pa.table({"t": t})
    tumble = arrow_chain.window_rows(rows, "t", 5, None)
    assert tumble["window_start"].to_pylist() == [datetime(1970, 1, 1, 0, 0, 5), datetime(1969, 12, 31, 23, 59, 55)]
    hop = arrow_chain.window_rows(rows, "t", 10, 5)
    assert sorted(hop["window_start"].to_pylist()) == [datetime(1969, 12, 31, 23, 59, 50),
                                                       datetime(1969, 12, 31, 23, 59, 55),
                                                       datetime(1970, 1, 1, 0, 0), datetime(1970, 1, 1, 0, 0, 5)]
    assert Window("tumble", "t", 5).kind == "tumble"
