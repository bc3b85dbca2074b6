"""PostgreSQL's semantics on Spark SQL, decided in one place: the dialect statements are parsed in,
and the translation of a parsed expression to Spark SQL wherever the two differ (the README's SQL
section has the table):

- `/` between two integers truncates toward zero (Spark's `DIV`), typed as the wider operand;
- `::numeric` without a precision keeps the value's scale (Spark's bare `DECIMAL` is
  `DECIMAL(10, 0)`): an integer becomes `DECIMAL(38, 0)`, a decimal keeps its type, a float
  its 15 significant digits (a real: 6) as `DECIMAL(38, 15)`, as does a string;
- `to_char(timestamp, pattern)` reads PostgreSQL's patterns (`HH` is 12-hour, `MI` minutes,
  `Month` blank-padded, `FM` drops padding, `"text"` literal), not Java's; `to_char(number,
  pattern)` prints PostgreSQL's sign;
- `extract(epoch FROM x)` (Spark has none) is seconds as numeric, of a timestamp, date or interval;
- bytea: `'\\x...'::bytea` is hex, `b::text` prints `\\x` and hex, `encode`/`decode` take 'hex' or
  'base64' (Spark's take a charset);
- `sum` / `avg` of a decimal are exact (an MV's aggregate plans them so; a query's are rewritten
  alike), and `x = ANY (subquery)` is `x IN (subquery)`.

MVs' expressions and ad-hoc queries both come here: the planner's with types from its `TypeOracle`,
a query's with `plan/query_types.py`'s.

A cast that overflows, like a division by zero, is NULL rather than an error: an epoch does not
fail for one bad value (RisingWave's streaming behaviour)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    IntegralType,
    LongType,
    NumericType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
    YearMonthIntervalType,
)
from pyspark.sql.utils import AnalysisException
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres

from sparkwave.core.errors import SqlError
from sparkwave.core.limits import MAX_VALUE_BYTES
from sparkwave.core.schema import SqlType, to_spark_type
from sparkwave.core.spark import empty_frame
from sparkwave.frontend.pg_functions import NODES, translate
from sparkwave.frontend.plan.decimals import exact_aggregate

_INTEGRAL = [ByteType, ShortType, IntegerType, LongType]  # narrowest first
_BINARY = (exp.DataType.Type.VARBINARY, exp.DataType.Type.BINARY)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
NUMERIC_SCALE = 15  # of a float or text cast to numeric: PostgreSQL's float8 has 15 significant digits


class Sparkwave(Postgres):
    """PostgreSQL as sqlglot reads it, except `to_char`, kept as written: sqlglot rewrites its
    pattern into strftime's at parse time, and loses PostgreSQL's meaning (`HH`, `FM`, ...)."""

    class Parser(Postgres.Parser):  # type: ignore[valid-type,misc]
        FUNCTIONS = {**Postgres.Parser.FUNCTIONS,
                     "TO_CHAR": lambda args: exp.Anonymous(this="TO_CHAR", expressions=args)}


DIALECT = "sparkwave"  # the name sqlglot registers `Sparkwave` under


def to_spark(e: exp.Expr, columns: list[tuple[str, str]], spark: SparkSession) -> str:
    """`e`, over the internal `columns` (name, Spark type), in Spark SQL with PostgreSQL's meaning."""
    return translated(e, _Types(spark, columns))


def translated(e: exp.Expr, types: TypesOf) -> str:
    """`e` in Spark SQL with PostgreSQL's meaning, its operands' types from `types.of` (Spark's analyser,
    or the planner's `TypeOracle`)."""
    return translated_tree(e, types).sql(dialect="spark")


def translated_tree(e: exp.Expr, types: TypesOf) -> exp.Expr:
    """`translated`'s tree (Spark's functions with PostgreSQL's meaning). Innermost first: an outer
    node sees its operands' translated types."""
    if (srf := e.find(exp.Explode, exp.GenerateSeries, exp.Unnest)) is not None:  # Spark's explode is not PostgreSQL's
        raise SqlError(f"{srf.sql(dialect='postgres')}: set-returning functions (generate_series, unnest) are "
                       "supported in a materialized view's SELECT list and FROM only, not in queries or DML")
    for node in reversed(list(e.find_all(exp.Div, exp.Cast, exp.Anonymous, exp.Encode, exp.Decode, *_COMPARISONS,
                                         exp.In, exp.Coalesce, exp.Sum, exp.Avg, exp.Filter, *NODES, bfs=False))):
        new = _translate(node, types)
        if new is None:
            new = translate(node, types.of)
        if new is not None:
            if node is e:
                e = new
            else:
                node.replace(new)
    return size_guarded(e)


def spark_ddl(columns: list[tuple[str, str]]) -> str:
    """A Spark DDL schema of (name, sparkwave type) columns, for analysing expressions over them."""
    return ", ".join(f"`{n}` {SqlType(t).spark}" for n, t in columns) or "_empty int"


class TypesOf(Protocol):
    """Where a translation learns an operand's Spark type."""

    def of(self, e: exp.Expr) -> DataType | None: ...


class _Types:
    """Spark's type of an expression over the columns (an empty frame, made on first use)."""

    def __init__(self, spark: SparkSession, columns: list[tuple[str, str]]) -> None:
        self._make = lambda: empty_frame(spark, spark_ddl(columns))
        self._frame: DataFrame | None = None
        self._columns = dict(columns)

    def of(self, e: exp.Expr) -> DataType | None:
        if isinstance(e, exp.Column) and not e.table and (t := self._columns.get(e.name)) is not None:
            return to_spark_type(SqlType(t))  # a column's type, without asking Spark
        if isinstance(e, exp.Literal) and e.is_int:
            return IntegerType() if -(2**31) <= int(e.this) < 2**31 else LongType()
        if isinstance(e, exp.Literal) and e.is_string:
            return StringType()
        try:
            if self._frame is None:
                self._frame = self._make()
            return self._frame.selectExpr(e.sql(dialect="spark")).schema.fields[0].dataType
        except AnalysisException:
            return None  # the whole expression's analysis reports it, naming the query


# The functions whose result can be far larger than their arguments: the argument that sizes the
# result (guarded), and a bound on the result's bytes over the arguments `__a`, `__b`, `__c`.
_GROWS: dict[type[exp.Expr], tuple[tuple[str, ...], str, str]] = {
    exp.Repeat: (("this", "times"), "times", "octet_length(__a) * CAST(greatest(__b, 0) AS BIGINT)"),
    exp.Pad: (("this", "expression", "fill_pattern"), "expression", "CAST(__b AS BIGINT) * 4"),  # <= 4 bytes a char
    exp.Replace: (("this", "expression", "replacement"), "replacement",
                  "octet_length(__a) + octet_length(__a) DIV greatest(octet_length(__b), 1) "
                  "* CAST(octet_length(__c) AS BIGINT)"),
}
GROWING = tuple(_GROWS)
MAX_GROWING_NESTED = 4  # such calls within each other's arguments: each level writes its arguments twice


def size_guarded(e: exp.Expr) -> exp.Expr:
    """`e` with every call that can grow a value past `MAX_VALUE_BYTES` (`repeat('x', 2000000000)`)
    made to fail its row with `raise_error` before it allocates the value: one row must not take
    the JVM's memory (an MV's would, again, at every recovery). The guard is on the argument that
    sizes the result (`repeat(s, CASE WHEN <too big> THEN raise_error(...) ELSE n END)`), so the call
    is not constant-folded by Spark's optimizer, which would build the value on the driver while
    planning. It writes the call's arguments twice, so such calls may nest only `MAX_GROWING_NESTED`
    deep within each other."""
    for node in reversed(list(e.find_all(*_GROWS, bfs=False))):
        keys, sizing, bound = _GROWS[type(node)]
        name = ("lpad" if node.args.get("is_left") else "rpad") if isinstance(node, exp.Pad) else node.key
        args = {k: a for k in keys if (a := node.args.get(k)) is not None}
        depth = 1 + max((c.meta.get("grows", 0) for a in args.values() for c in a.walk() if isinstance(c, exp.Case)),
                        default=0)
        if depth > MAX_GROWING_NESTED:
            raise SqlError(f"repeat(), lpad(), rpad() and replace() may nest at most {MAX_GROWING_NESTED} deep within "
                           f"each other's arguments (here: {name}())")
        guard = sqlglot.parse_one(
            f"CASE WHEN {bound} > {MAX_VALUE_BYTES} THEN raise_error('{name}() would make a value of more than "
            f"{MAX_VALUE_BYTES} bytes, the limit of one value') ELSE __{'abc'[keys.index(sizing)]} END", read="spark")
        for k, arg in zip("abc", [node.args.get(k) for k in keys], strict=False):
            for c in [c for c in guard.find_all(exp.Column) if c.name == f"__{k}"]:
                c.replace(arg.copy() if arg is not None else exp.null())
        guard.meta["grows"] = depth
        node.set(sizing, guard)
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            node.replace(exp.alias_(node.copy(), name))  # the column's name, as PostgreSQL gives it
    return e


def _translate(node: exp.Expr, types: TypesOf) -> exp.Expr | None:
    if isinstance(node, exp.EQ) and isinstance(node.expression, exp.Any) \
            and isinstance(sub := node.expression.this, exp.Subquery | exp.Select):  # Spark has no `= ANY (...)`
        return exp.In(this=node.this, query=sub if isinstance(sub, exp.Subquery) else exp.Subquery(this=sub))
    if isinstance(node, exp.Sum | exp.Avg) and not isinstance(node.this, exp.Distinct) \
            and not isinstance(node.parent, exp.Window | exp.Filter):
        return _exact_decimal(node, node.this, types)
    if isinstance(node, exp.Filter) and isinstance(call := node.this, exp.Sum | exp.Avg) \
            and not isinstance(call.this, exp.Distinct) and not isinstance(node.parent, exp.Window):
        # copies: the argument stays in the query, where `types` finds its type
        filtered = exp.Case(ifs=[exp.If(this=node.expression.this.copy(), true=call.this.copy())])
        return _exact_decimal(call, filtered, types)
    if isinstance(node, exp.Div):
        lt, rt = types.of(node.left), types.of(node.right)
        if isinstance(lt, IntegralType) and isinstance(rt, IntegralType):
            wide = max(lt, rt, key=lambda t: _INTEGRAL.index(type(t)))
            return exp.TryCast(this=exp.IntDiv(this=node.left, expression=node.right),
                               to=exp.DataType.build(wide.simpleString(), dialect="spark"), safe=True)
    elif isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.DECIMAL and not node.to.expressions:
        t = types.of(node.this)
        if isinstance(t, DecimalType):
            return node.this
        if isinstance(t, IntegralType):
            return node.__class__(this=node.this, to=exp.DataType.build("DECIMAL(38, 0)"))
        return node.__class__(this=_float_text(node.this, t), to=exp.DataType.build(f"DECIMAL(38, {NUMERIC_SCALE})"))
    elif isinstance(node, exp.Cast) and node.to.this in _BINARY and isinstance(node.this, exp.Literal) \
            and node.this.is_string:
        return bytea_literal(node.this.this)
    elif isinstance(node, exp.Cast) and node.to.this in _BINARY and isinstance(types.of(node.this), StringType):
        return sqlglot.parse_one(bytea_from_text_sql(node.this.sql(dialect="spark")), read="spark")
    elif isinstance(node, (*_COMPARISONS, exp.In, exp.Coalesce)) and _bytea_operands(node, types):
        for operand in [*node.iter_expressions()]:  # in place: the node stays
            if isinstance(operand, exp.Literal) and operand.is_string:
                operand.replace(bytea_literal(operand.this))
    elif isinstance(node, exp.Cast) and node.to.this in exp.DataType.TEXT_TYPES \
            and isinstance(types.of(node.this), BinaryType):
        return _call("concat", exp.Literal.string("\\x"), _call("lower", _call("hex", node.this)))
    elif isinstance(node, exp.Extract) and node.this.name.upper() == "EPOCH":
        return _epoch(node.expression, types.of(node.expression))
    elif isinstance(node, exp.Encode | exp.Decode):
        fmt = node.args.get("charset")
        how = fmt.this.lower() if isinstance(fmt, exp.Literal) and fmt.is_string else None
        if how not in ("hex", "base64"):
            raise SqlError(f"{node.key}(..., {fmt.sql() if fmt else ''}) is not supported; supported: 'hex', 'base64'")
        if isinstance(node, exp.Encode):  # PostgreSQL's base64 breaks lines after 76 characters
            return _call("lower", _call("hex", node.this)) if how == "hex" else _call(
                "regexp_replace", _call("base64", node.this), exp.Literal.string("(.{76})(?!$)"),
                exp.Literal.string("$1\n"))
        if how == "base64":
            return _call("unbase64", node.this)
        even = exp.EQ(this=exp.Mod(this=_call("length", node.this), expression=exp.Literal.number(2)),
                      expression=exp.Literal.number(0))
        return exp.If(this=even, true=_call("unhex", node.this.copy()), false=exp.Null())  # PostgreSQL: an error
    elif isinstance(node, exp.Anonymous) and node.name.upper() == "TO_CHAR" and len(node.expressions) == 2:
        value, pattern = node.expressions
        t = types.of(value)
        if isinstance(t, TimestampType | TimestampNTZType | DateType) and isinstance(pattern, exp.Literal) \
                and pattern.is_string:
            return timestamp_to_char(value, pattern.this)
        if isinstance(t, NumericType) and isinstance(pattern, exp.Literal) and pattern.is_string:
            arg = value if isinstance(t, IntegralType | DecimalType) else \
                exp.Cast(this=_float_text(value, t), to=exp.DataType.build(f"DECIMAL(38, {NUMERIC_SCALE})"))
            return number_to_char(arg, pattern.this)
    return None


def _exact_decimal(call: exp.Sum | exp.Avg, arg: exp.Expr, types: TypesOf) -> exp.Expr | None:
    """A query's `sum` / `avg` of a decimal (`arg`: the call's, or `CASE WHEN <filter> THEN ... END`
    as an MV's FILTER is rewritten), exact as an MV's: its aggregate plans decimal calls as
    `plan/decimals.py` says (Spark's own sum is NULL once a partial sum overflows, by row order)."""
    t = types.of(call.this)
    if not isinstance(t, DecimalType):
        return None
    fn = "sum" if isinstance(call, exp.Sum) else "avg"
    return sqlglot.parse_one(exact_aggregate(fn, arg.sql(dialect="spark"), t.scale), read="spark")


def _epoch(value: exp.Expr, t: DataType | None) -> exp.Expr:
    """`extract(epoch FROM x)`, which Spark lacks: seconds since 1970-01-01 00:00 (a timestamp without
    time zone read as UTC, as PostgreSQL does) or in an interval, as numeric with microseconds."""
    micros: exp.Expr
    if isinstance(t, DayTimeIntervalType):  # the interval after the epoch: any of its fields
        micros = _call("unix_micros", exp.Add(this=exp.Cast(this=exp.Literal.string("1970-01-01 00:00:00+00:00"),
                                                           to=exp.DataType.build("TIMESTAMP", dialect="spark")),
                                              expression=exp.Paren(this=value)))
    elif isinstance(t, DateType):
        micros = exp.Mul(this=_call("unix_date", value), expression=exp.Literal.number(86_400_000_000))
    elif isinstance(t, TimestampNTZType):
        micros = _call("unix_micros", _call("to_utc_timestamp", value, exp.Literal.string("UTC")))
    elif isinstance(t, TimestampType):
        micros = _call("unix_micros", value)
    else:
        what = "a year-month interval (its length in seconds is not fixed)" if isinstance(t, YearMonthIntervalType) \
            else f"a value of type {t.simpleString() if t is not None else 'unknown'}"
        raise SqlError(f"extract(epoch FROM ...) takes a timestamp, a date or a day-time interval, not {what}")
    return exp.Div(this=exp.Cast(this=micros, to=exp.DataType.build("DECIMAL(38, 6)")),
                   expression=exp.Literal.number(1_000_000))


def _bytea_operands(node: exp.Expr, types: TypesOf) -> bool:
    """Whether a comparison, IN or COALESCE has a bytea operand (its text constants are then bytea)."""
    operands = list(node.iter_expressions())
    return any(isinstance(o, exp.Literal) and o.is_string for o in operands) and any(
        not isinstance(o, exp.Literal) and isinstance(types.of(o), BinaryType) for o in operands)


def bytea_from_text_sql(text_sql: str) -> str:
    """Spark SQL reading text as PostgreSQL's bytea input: `\\x` and hex digits (an odd count, or a
    non-digit: NULL), else the text's bytes (NULL if it has a backslash escape: write hex)."""
    return (f"CASE WHEN startswith({text_sql}, '\\\\x') THEN CASE WHEN length({text_sql}) % 2 = 0 "
            f"THEN unhex(substr({text_sql}, 3)) END WHEN instr({text_sql}, '\\\\') = 0 THEN CAST({text_sql} AS "
            "BINARY) END")


def bytea_literal(text: str) -> exp.Expr:
    """A bytea constant in PostgreSQL's input forms: hex (`\\xdeadbeef`) or escape (the text's bytes,
    `\\\\` a backslash, `\\nnn` an octal byte)."""
    return _call("unhex", exp.Literal.string(bytea_from_text(text).hex()))


def bytea_from_text(text: str) -> bytes:
    if text.startswith("\\x"):
        try:
            return bytes.fromhex(text[2:])
        except ValueError:
            raise SqlError(f"invalid hexadecimal data in bytea {text!r}") from None
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] != "\\":
            out += text[i].encode()
            i += 1
        elif text[i + 1:i + 2] == "\\":
            out.append(0x5C)
            i += 2
        elif re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1:i + 4]):
            out.append(int(text[i + 1:i + 4], 8))
            i += 4
        else:
            raise SqlError(f"invalid input syntax for type bytea: {text!r}")
    return bytes(out)


def _float_text(value: exp.Expr, t: DataType | None) -> exp.Expr:
    """A float as PostgreSQL converts it to numeric: its 15 (a real: 6) significant digits."""
    if isinstance(t, DoubleType | FloatType):
        digits = 6 if isinstance(t, FloatType) else 15
        return _call("format_string", exp.Literal.string(f"%.{digits}g"), value)
    return value


def number_to_char(value: exp.Expr, pattern: str) -> exp.Expr:
    """PostgreSQL's `to_char(number, pattern)`. Spark's reads the same digit patterns (9, 0, ., D,
    ',', G) but prints no sign unless the pattern has one (S, MI, PR): PostgreSQL's is a `-` (a
    blank if positive) just before the first digit, and `FM` trims the padding."""
    fm = pattern.upper().startswith("FM")
    body = pattern[2:] if fm else pattern
    if any(sign in body.upper() for sign in ("S", "MI", "PR", "PL", "SG")):
        spark = _call("to_char", value, exp.Literal.string(body))
        return _call("trim", spark) if fm else spark
    fraction = body.upper().replace("D", ".").partition(".")[2]
    if fm and "9" in fraction:
        raise SqlError(f"to_char(number, {pattern!r}): FM with 9 after the decimal point (trailing zeros "
                       "dropped) is not supported; write 0 there to keep them, or round() the number")
    # PostgreSQL rounds to the pattern's fraction digits (Spark's prints #s), and prints a zero
    # integer part as 0 (Spark's, with 9s, as blanks)
    rounded = _call("round", value.copy(), exp.Literal.number(sum(c in "09" for c in fraction)))
    printed = _call("to_char", _call("abs", rounded), exp.Literal.string(body))
    digits = exp.If(this=exp.EQ(this=_call("trim", printed), expression=exp.Literal.string("")),
                    true=_call("lpad", exp.Literal.string("0"), _call("length", printed.copy()),
                               exp.Literal.string(" ")),
                    false=printed.copy())
    negative = exp.LT(this=value.copy(), expression=exp.Literal.number(0))
    if fm:
        return _call("concat", exp.If(this=negative, true=exp.Literal.string("-"), false=exp.Literal.string("")),
                     _call("trim", digits))
    padding = exp.Sub(this=_call("length", digits.copy()), expression=_call("length", _call("ltrim", digits.copy())))
    return _call("concat", _call("repeat", exp.Literal.string(" "), padding),
                 exp.If(this=negative, true=exp.Literal.string("-"), false=exp.Literal.string(" ")),
                 _call("ltrim", digits.copy()))


def _call(fn: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=fn, expressions=list(args))


def _fmt(v: exp.Expr, java: str) -> exp.Expr:
    return _call("date_format", v.copy(), exp.Literal.string(java))


def _pad(width: int) -> Callable[[exp.Expr], exp.Expr]:
    return lambda e: _call("rpad", e, exp.Literal.number(width), exp.Literal.string(" "))


def _ident(e: exp.Expr) -> exp.Expr:
    return e


def _upper(e: exp.Expr) -> exp.Expr:
    return _call("upper", e)


def _lower(e: exp.Expr) -> exp.Expr:
    return _call("lower", e)


# PostgreSQL's timestamp patterns, longest first: the Java pattern with padding, without (FM), or
# a function of the value when no Java pattern has PostgreSQL's meaning.
_JAVA: dict[str, tuple[str, str]] = {
    "HH24": ("HH", "H"), "HH12": ("hh", "h"), "HH": ("hh", "h"), "MI": ("mm", "m"), "SS": ("ss", "s"),
    "MS": ("SSS", "SSS"), "US": ("SSSSSS", "SSSSSS"), "YYYY": ("yyyy", "y"), "YY": ("yy", "yy"),
    "MM": ("MM", "M"), "DDD": ("DDD", "D"), "DD": ("dd", "d"), "AM": ("a", "a"), "PM": ("a", "a"),
    "TZ": ("z", "z"),
}
_NAMES: dict[str, tuple[str, int, Callable[[exp.Expr], exp.Expr]]] = {
    # pattern -> (Java name pattern, PostgreSQL's blank-padded width, case)
    "MONTH": ("MMMM", 9, _upper), "Month": ("MMMM", 9, _ident), "month": ("MMMM", 9, _lower),
    "MON": ("MMM", 0, _upper), "Mon": ("MMM", 0, _ident), "mon": ("MMM", 0, _lower),
    "DAY": ("EEEE", 9, _upper), "Day": ("EEEE", 9, _ident), "day": ("EEEE", 9, _lower),
    "DY": ("EEE", 0, _upper), "Dy": ("EEE", 0, _ident), "dy": ("EEE", 0, _lower),
    "am": ("a", 0, _lower), "pm": ("a", 0, _lower),
}


def _meridiem(am: str, pm: str) -> Callable[[exp.Expr], exp.Expr]:
    return lambda v: exp.If(this=exp.LT(this=_call("hour", v.copy()), expression=exp.Literal.number(12)),
                            true=exp.Literal.string(am), false=exp.Literal.string(pm))


def _sql(text: str, width: int = 0) -> Callable[[exp.Expr], exp.Expr]:
    """A Spark SQL expression of the value `{v}`, as text (zero-padded to `width`)."""
    def build(v: exp.Expr) -> exp.Expr:
        e = exp.Cast(this=exp.maybe_parse(text.format(v=f"({v.sql(dialect='spark')})"), dialect="spark"),
                     to=exp.DataType.build("STRING"))
        return _call("lpad", e, exp.Literal.number(width), exp.Literal.string("0")) if width else e
    return build


_FUNCTIONS: dict[str, Callable[[exp.Expr], exp.Expr]] = {
    "A.M.": _meridiem("A.M.", "P.M."), "P.M.": _meridiem("A.M.", "P.M."),
    "a.m.": _meridiem("a.m.", "p.m."), "p.m.": _meridiem("a.m.", "p.m."),
    "ID": _sql("weekday({v}) + 1"),
    "D": _sql("dayofweek({v})"),
    "Q": _sql("quarter({v})"),
    "IW": _sql("weekofyear({v})", 2),
    "WW": _sql("div(dayofyear({v}) - 1, 7) + 1", 2),
    "W": _sql("div(dayofmonth({v}) - 1, 7) + 1"),
    "YYY": _sql("year({v}) % 1000", 3),
    "Y": _sql("year({v}) % 10"),
    "SSSSS": _sql("hour({v}) * 3600 + minute({v}) * 60 + second({v})"),
    "SSSS": _sql("hour({v}) * 3600 + minute({v}) * 60 + second({v})"),
    "CC": _sql("div(year({v}) + 99, 100)", 2),
}
# PostgreSQL patterns with no translation here: refused at CREATE rather than printed wrongly
_UNSUPPORTED = ("Y,YYY", "IYYY", "IYY", "IY", "IDDD", "FF1", "FF2", "FF3", "FF4", "FF5", "FF6", "TZH", "TZM",
                "OF", "RM", "rm", "B.C.", "A.D.", "BC", "AD", "TH", "th", "TM", "J", "I")
# Numeric patterns are read in either case, as PostgreSQL does.
_JAVA |= {k.lower(): v for k, v in _JAVA.items() if k not in ("AM", "PM")}
_FUNCTIONS |= {k.lower(): v for k, v in _FUNCTIONS.items() if "." not in k}
_TOKENS = sorted([*_JAVA, *_NAMES, *_FUNCTIONS, *_UNSUPPORTED], key=len, reverse=True)


def timestamp_to_char(value: exp.Expr, pattern: str) -> exp.Expr:
    """PostgreSQL's `to_char(value, pattern)` for a timestamp or date, as a Spark expression: runs of
    patterns Java formats alike become one `date_format`, the others their own functions, joined
    by `concat` (NULL for a NULL value, as PostgreSQL's)."""
    parts: list[exp.Expr] = []
    java: list[str] = []  # the Java pattern being gathered
    literal: list[str] = []

    def flush_literal() -> None:
        if literal:
            java.append("'" + "".join(literal).replace("'", "''") + "'")
            literal.clear()

    def flush() -> None:
        flush_literal()
        if java:
            parts.append(_fmt(value, "".join(java)))
            java.clear()

    i = 0
    while i < len(pattern):
        fm = pattern[i:i + 2].upper() == "FM" and i + 2 < len(pattern)
        j = i + 2 if fm else i
        if pattern[j] == '"':  # quoted text, as PostgreSQL: copied as it is
            end = pattern.find('"', j + 1)
            end = len(pattern) if end < 0 else end
            if end > j + 1:
                literal.append(pattern[j + 1:end])
            i = end + 1
            continue
        token = next((t for t in _TOKENS if pattern.startswith(t, j)), None)
        if token is None:
            literal.append(pattern[i])
            i += 1
            continue
        if token in _UNSUPPORTED:
            raise SqlError(f"to_char pattern {token!r} (in {pattern!r}) is not supported; write it as text in "
                           'double quotes if it is meant literally ("...")')
        i = j + len(token)
        if token in _JAVA:
            flush_literal()
            java.append(_JAVA[token][1 if fm else 0])
            continue
        flush()
        if token in _NAMES:
            name, width, case = _NAMES[token]
            part = _fmt(value, name)
            parts.append(case(_pad(width)(part) if width and not fm else part))
        else:
            parts.append(_FUNCTIONS[token](value))
    flush()
    if not parts:
        return exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null(),
                      false=exp.Literal.string(""))
    return parts[0] if len(parts) == 1 else _call("concat", *parts)  # concat prints a number as its text
