"""Casts in the Arrow evaluator (`stream/arrow_eval.py`): a string literal folded to its value, and
a column's values cast between integers, floats, strings and decimals where Spark's result is exact."""

from __future__ import annotations

import re
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sparkwave.stream.arrow_numbers import DecimalType, cast_decimal
from sparkwave.stream.arrow_values import FLOATS, INT_BOUNDS, INTS, Compiled, Refused, Rows, arrow_type, constant

_DATE_TEXT = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


def target_type(to: exp.DataType) -> str:
    name = to.sql(dialect="spark").lower().replace(" ", "")
    simple = {"boolean": "boolean", "tinyint": "tinyint", "smallint": "smallint", "int": "int", "bigint": "bigint",
              "float": "real", "double": "double", "string": "varchar", "date": "date",
              "timestamp": "timestamptz", "timestamp_ntz": "timestamp"}
    if name in simple:
        return simple[name]
    m = re.fullmatch(r"decimal\((\d+),(\d+)\)", name)
    if m:
        return f"decimal({m.group(1)},{m.group(2)})"
    raise Refused(f"cast to {name}")


def cast_text_literal(text: str, target: str) -> Compiled:
    """A string literal cast to a date or a decimal (`100BD`), folded when its text is plain."""
    if target == "date":
        m = _DATE_TEXT.fullmatch(text)
        if not m:
            raise Refused(f"date literal {text!r}")
        from datetime import date

        try:
            return constant(date(int(m.group(1)), int(m.group(2)), int(m.group(3))), "date")
        except ValueError:  # no such day: Spark's NULL, left to Spark
            raise Refused(f"date literal {text!r}") from None
    if target.startswith("decimal") and re.fullmatch(r"-?\d+(\.\d+)?", text):
        t = DecimalType.parse(target)
        d = Decimal(text)
        if d.as_tuple().exponent < -t.scale or len(str(abs(int(d)))) > t.precision - t.scale:  # type: ignore[operator]
            raise Refused(f"decimal literal {text!r} as {target}")
        return constant(d, target)
    if target == "varchar":
        return constant(text, "varchar")
    raise Refused(f"cast of a string literal to {target}")


def cast_values(a: Compiled, target: str, safe: bool) -> Compiled:
    src, fn = a.type, a.fn
    at = arrow_type(target)
    if src == target:
        return a
    if src == "null":
        return Compiled(target, lambda r: pa.nulls(r.n, at))
    if src in INTS and target in INTS:
        if INT_BOUNDS[target] >= INT_BOUNDS[src]:
            return Compiled(target, lambda r: fn(r).cast(at))
        bits = INT_BOUNDS[target]

        def narrow(r: Rows) -> pa.Array:
            v = fn(r).cast(pa.int64())
            if safe:  # TRY_CAST: NULL out of range
                out = pc.if_else(pc.and_(pc.greater_equal(v, -(2**bits)), pc.less(v, 2**bits)), v,
                                 pa.scalar(None, pa.int64()))
                return out.cast(at)
            return v.cast(at, safe=False)  # CAST: the low bits, as Java's narrowing
        return Compiled(target, narrow)
    if src in INTS and target in FLOATS:
        return Compiled(target, lambda r: fn(r).cast(at, safe=False))  # rounded to nearest, as Java
    if src == "real" and target == "double":
        return Compiled(target, lambda r: fn(r).cast(at))
    if src in INTS and target == "varchar" or src == "boolean" and target == "varchar":
        return Compiled(target, lambda r: fn(r).cast(pa.string()))
    if src == "boolean" and target in INTS:
        return Compiled(target, lambda r: fn(r).cast(at))
    if src in INTS and target == "boolean":
        return Compiled(target, lambda r: pc.not_equal(fn(r), 0))
    if target.startswith("decimal") and (src in INTS or src.startswith("decimal")):
        t = DecimalType.parse(target)
        return Compiled(target, lambda r: cast_decimal(fn(r), t))
    raise Refused(f"cast of {src} to {target}")
