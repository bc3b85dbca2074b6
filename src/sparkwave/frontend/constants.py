"""Constant expressions folded while planning, as PostgreSQL's planner folds them
(`eval_const_expressions`): where the planner needs a value rather than an expression -- a
temporal filter's offset from NOW() (`NOW() + INTERVAL '1 day' * 365 * 2000`), a percentile's
fraction (`percentile_disc(0.2 + 0.3)`, `percentile_cont(NULL)`). Only what has one exact value is
folded: numbers (integer arithmetic stays integer, `7 / 2` is 3 as in PostgreSQL; the rest is exact
decimal arithmetic) and intervals of a fixed length (microsecond .. week; a month has none), NULL
propagating through both. Anything else raises `NotConstant`."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from sparkwave.core.errors import SqlError

Number = int | Decimal

_UNITS = {"microsecond": 1, "millisecond": 1000, "second": 1_000_000, "minute": 60_000_000,
          "hour": 3_600_000_000, "day": 86_400_000_000, "week": 7 * 86_400_000_000}
_PART = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)
_CLOCK = re.compile(r"\s*([+-]?)(\d+):(\d{2})(?::(\d{2}(?:\.\d{1,6})?))?\s*$")  # '01:30', '-00:00:05.5'

_INTEGERS = (exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.TINYINT)
_NUMERIC = (exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.TINYINT,
            exp.DataType.Type.DECIMAL, exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT)


class NotConstant(ValueError):
    """The expression is not a constant this module folds."""


def _bare(e: exp.Expr) -> exp.Expr:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def number(e: exp.Expr | None) -> Number | None:
    """The value of a constant numeric expression, None for NULL; NotConstant for anything else,
    ValueError for a division by zero."""
    e = _bare(e) if e is not None else None
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Literal) and not e.is_string:
        text = str(e.this)
        return Decimal(text) if any(ch in text for ch in ".eE") else int(text)
    if isinstance(e, exp.Neg):
        v = number(e.this)
        return None if v is None else -v
    if isinstance(e, exp.Cast) and e.to.is_type(*_NUMERIC):
        inner = _bare(e.this)
        quoted = isinstance(inner, exp.Literal) and inner.is_string
        try:
            v = Decimal(inner.this.strip()) if quoted else number(inner)
        except InvalidOperation:
            raise NotConstant(e.sql(dialect="postgres")) from None
        if v is None:
            return None
        d = Decimal(v)
        if not e.to.is_type(*_INTEGERS):  # numeric or float: 7::numeric / 2 is 3.5, not integer division
            return d
        if quoted and d != d.to_integral_value():  # '2.5'::int is PostgreSQL's invalid input syntax
            raise NotConstant(e.sql(dialect="postgres"))
        return int(d.to_integral_value(ROUND_HALF_UP))  # 2.5::int is 3: numeric rounds half away from zero
    if (isinstance(e, exp.Round) and e.args.get("decimals") is None) or (
            isinstance(e, exp.Anonymous) and e.name.lower() == "round" and len(e.expressions) == 1):
        # round(numeric): half away from zero (also the round() of an int cast translated for Spark)
        v = number(e.this if isinstance(e, exp.Round) else e.expressions[0])
        return None if v is None else Decimal(v).to_integral_value(ROUND_HALF_UP)
    if isinstance(e, exp.Add | exp.Sub | exp.Mul | exp.Div):
        left, right = number(e.this), number(e.expression)
        if left is None or right is None:
            return None
        return _arith(e, left, right)
    raise NotConstant(e.sql(dialect="postgres") if e is not None else "nothing")


def _arith(e: exp.Expr, left: Number, right: Number) -> Number:
    if isinstance(e, exp.Add):
        return left + right
    if isinstance(e, exp.Sub):
        return left - right
    if isinstance(e, exp.Mul):
        return left * right
    if right == 0:
        raise ValueError(f"division by zero in {e.sql(dialect='postgres')}")
    if isinstance(left, int) and isinstance(right, int):  # PostgreSQL's integer division truncates toward zero
        q = abs(left) // abs(right)
        return q if (left >= 0) == (right >= 0) else -q
    return Decimal(left) / Decimal(right)


def interval(e: exp.Expr) -> int | None:
    """The microseconds of a constant interval expression of fixed length: an INTERVAL literal
    ('1 hour', '90' SECOND, '1 day 2 hours'), negated, added to or subtracted from another, or
    multiplied or divided by a constant number (rounded to the microsecond, half to even as
    PostgreSQL's rint); None for NULL. NotConstant for anything else (months and years have no
    fixed length), ValueError for a division by zero."""
    e = _bare(e)
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Interval):
        return _literal_micros(e)
    if isinstance(e, exp.Cast) and e.to.is_type(exp.DataType.Type.INTERVAL):  # '1 hour'::interval
        inner = _bare(e.this)
        if isinstance(inner, exp.Null):
            return None
        if isinstance(inner, exp.Literal) and inner.is_string:
            return _literal_micros(exp.Interval(this=inner.copy()))
    if isinstance(e, exp.Neg):
        v = interval(e.this)
        return None if v is None else -v
    if isinstance(e, exp.Add | exp.Sub):
        left, right = interval(e.this), interval(e.expression)
        if left is None or right is None:
            return None
        return left + right if isinstance(e, exp.Add) else left - right
    if isinstance(e, exp.Mul | exp.Div):
        if isinstance(e, exp.Mul) and not _is_interval(e.this):  # 365 * INTERVAL '1 day'
            micros, factor = interval(e.expression), number(e.this)
        else:
            micros, factor = interval(e.this), number(e.expression)
        if micros is None or factor is None:
            return None
        if isinstance(e, exp.Div):
            if factor == 0:
                raise ValueError(f"division by zero in {e.sql(dialect='postgres')}")
            return int((Decimal(micros) / Decimal(factor)).to_integral_value(ROUND_HALF_EVEN))
        return int((Decimal(micros) * Decimal(factor)).to_integral_value(ROUND_HALF_EVEN))
    raise NotConstant(e.sql(dialect="postgres"))


def _is_interval(e: exp.Expr) -> bool:
    """Whether `e` is an interval expression (rather than a number) at its top."""
    e = _bare(e)
    while isinstance(e, exp.Neg | exp.Mul | exp.Div | exp.Add | exp.Sub | exp.Paren):
        if isinstance(e, exp.Mul) and not _is_interval(e.this):
            e = e.expression
        else:
            e = e.this
    return isinstance(e, exp.Interval) or (isinstance(e, exp.Cast) and e.to.is_type(exp.DataType.Type.INTERVAL))


def _literal_micros(e: exp.Interval) -> int:
    if not isinstance(e.this, exp.Literal):
        raise NotConstant(e.sql(dialect="postgres"))
    text = e.this.name + (f" {e.args['unit'].name}" if e.args.get("unit") is not None else "")
    total, pos = Decimal(0), 0
    if (clock := _CLOCK.search(text)) is not None:  # PostgreSQL's hh:mm[:ss] part, after any units
        sign = -1 if clock.group(1) == "-" else 1
        total = sign * (int(clock.group(2)) * _UNITS["hour"] + int(clock.group(3)) * _UNITS["minute"]
                        + Decimal(clock.group(4) or 0) * _UNITS["second"])
        text = text[:clock.start()]
        if not text.strip():
            return int(total.to_integral_value(ROUND_HALF_EVEN))
    for m in _PART.finditer(text):
        if m.start() != pos:
            raise NotConstant(e.sql(dialect="postgres"))
        unit = m.group(2).lower()
        unit = unit[:-1] if unit not in _UNITS and unit.endswith("s") else unit
        if unit not in _UNITS:
            raise NotConstant(e.sql(dialect="postgres"))
        total += Decimal(m.group(1)) * _UNITS[unit]
        pos = m.end()
    if pos != len(text) or not pos:
        raise NotConstant(e.sql(dialect="postgres"))
    return int(total.to_integral_value(ROUND_HALF_EVEN))


_ONE_PART = re.compile(r"\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]+)\s*")  # sqlglot's INTERVAL_STRING_RE


def check_interval_literals(tokens: list[Token], error: Callable[[str, str | None], SqlError]) -> None:
    """Refuse `INTERVAL '1 day 00:00:05'` before sqlglot parses it: a literal with exactly one
    `<number> <unit>` part and anything else (a clock time) is read by sqlglot's parser as that one
    part alone (`INTERVAL '1' DAY`), silently dropping the rest; written with units only, or as a
    clock time only, it is kept whole."""
    for before, token in zip(tokens, tokens[1:], strict=False):
        if before.token_type != TokenType.INTERVAL or token.token_type != TokenType.STRING:
            continue
        parts = list(_ONE_PART.finditer(token.text))
        if len(parts) == 1 and (token.text[:parts[0].start()] + token.text[parts[0].end():]).strip():
            raise error(f"INTERVAL '{token.text}' would be read as INTERVAL '{parts[0].group(0).strip()}' alone (its "
                        "other part dropped): write every part with its unit, e.g. INTERVAL '1 day 5 seconds'",
                        token.text)
