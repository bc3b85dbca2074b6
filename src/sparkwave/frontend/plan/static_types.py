"""A `TypeOracle` without a JVM: Spark SQL's typing rules for the expressions the planner writes,
in a table (numeric promotion, decimal precision and scale as Spark's `DecimalPrecision` with
precision loss allowed, the result types of the functions sparkwave allows). Plan tests use it, so
planning runs without Spark; `tests/unit/test_planner_golden.py` checks it against Spark's analyser on
the whole golden corpus. An expression it has no rule for raises `UntypedError` naming the node."""

from __future__ import annotations

import sqlglot
from pyspark.sql import types as T
from sqlglot import exp
from sqlglot.errors import ParseError

from sparkwave.core.schema import SqlType, from_spark, to_spark_type
from sparkwave.frontend.plan.types import Columns, UntypedError

_INTEGRAL: list[type] = [T.ByteType, T.ShortType, T.IntegerType, T.LongType]
_NUMERIC_ORDER: list[type] = [*_INTEGRAL, T.FloatType, T.DoubleType]
_DIGITS: dict[type, int] = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 20}
_BOOLEAN = (exp.Predicate, exp.Not, exp.And, exp.Or, exp.Exists, exp.RegexpLike, exp.StartsWith, exp.LogicalAnd,
            exp.LogicalOr, exp.Xor)
_DOUBLE = (exp.Sqrt, exp.Cbrt, exp.Exp, exp.Ln, exp.Log, exp.Pow, exp.Pi, exp.Degrees, exp.Radians, exp.Sin, exp.Cos,
           exp.Tan, exp.Asin, exp.Acos, exp.Atan, exp.Atan2, exp.PercentRank, exp.CumeDist, exp.Stddev,
           exp.StddevSamp, exp.StddevPop, exp.Variance, exp.VariancePop, exp.Rand, exp.Sign)
_STRING = (exp.Upper, exp.Lower, exp.Initcap, exp.Substring, exp.Left, exp.Right, exp.Trim, exp.Pad, exp.Replace,
           exp.Repeat, exp.Reverse, exp.Translate, exp.Concat, exp.ConcatWs, exp.SplitPart, exp.Chr, exp.MD5,
           exp.RegexpReplace, exp.DPipe, exp.ArrayToString, exp.Uuid, exp.TimeToStr, exp.Hex, exp.ToBase64,
           exp.LowerHex, exp.UnixToStr)
_INT = (exp.Length, exp.BitLength, exp.Ascii, exp.StrPosition, exp.RowNumber, exp.Rank, exp.DenseRank, exp.Ntile,
        exp.DayOfWeek, exp.DayOfMonth, exp.DayOfYear, exp.WeekOfYear, exp.Quarter, exp.Year, exp.Month, exp.Day,
        exp.Hour, exp.Minute, exp.Second, exp.DayOfWeekIso, exp.Week)
_SAME = (exp.Abs, exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue, exp.Min, exp.Max, exp.Neg,
         exp.Paren, exp.BitwiseNot, exp.Mode)
_COMMON = (exp.Coalesce, exp.Greatest, exp.Least)
_ANONYMOUS: dict[str, T.DataType] = {
    "octet_length": T.IntegerType(), "bit_length": T.IntegerType(), "locate": T.IntegerType(),
    "instr": T.IntegerType(), "dayofweek": T.IntegerType(), "weekday": T.IntegerType(), "quarter": T.IntegerType(),
    "weekofyear": T.IntegerType(), "dayofyear": T.IntegerType(), "dayofmonth": T.IntegerType(),
    "year": T.IntegerType(), "month": T.IntegerType(), "hour": T.IntegerType(), "minute": T.IntegerType(),
    "second": T.IntegerType(), "unix_micros": T.LongType(), "unix_date": T.IntegerType(),
    "date_format": T.StringType(), "format_string": T.StringType(), "hex": T.StringType(),
    "base64": T.StringType(), "to_char": T.StringType(), "lpad": T.StringType(), "rpad": T.StringType(),
    "ltrim": T.StringType(), "rtrim": T.StringType(), "btrim": T.StringType(), "unhex": T.BinaryType(),
    "unbase64": T.BinaryType(), "raise_error": T.NullType(), "uuid": T.StringType(), "md5": T.StringType(),
    "length": T.IntegerType(), "startswith": T.BooleanType(), "rlike": T.BooleanType(),
    "to_utc_timestamp": T.TimestampType(), "from_utc_timestamp": T.TimestampType(), "make_date": T.DateType(),
    "make_timestamp": T.TimestampType(), "from_unixtime": T.StringType(), "current_timestamp": T.TimestampType(),
    "current_date": T.DateType(), "initcap": T.StringType(), "split_part": T.StringType(), "chr": T.StringType(),
    "ascii": T.IntegerType(), "translate": T.StringType(), "bround": T.DoubleType(),
}


class StaticTypes:
    """Spark's types by rule; see the module's docstring."""

    def expression_types(self, columns: Columns, exprs: Columns, predicate: str | None) -> dict[str, str]:
        schema = _schema(columns)
        if predicate:
            _type(_parse(predicate), schema)
        # an interval or array is refused by `from_spark` itself, as Spark's analyser's types are
        return {name: from_spark(_type(_parse(sql), schema)).name for name, sql in exprs}

    def spark_type(self, columns: Columns, e: exp.Expr) -> T.DataType | None:
        try:  # as Spark reads it: the translations' calls (`try_add(...)`) parse as their typed nodes
            return _type(_parse(e.sql(dialect="spark")), _schema(columns))
        except UntypedError:
            return None

    def values_types(self, names: list[str], rows: list[list[str]]) -> list[str]:
        schema: dict[str, T.DataType] = {}
        out = []
        for j in range(len(names)):
            types = [_type(_parse(r[j]), schema) for r in rows]
            out.append(from_spark(_common(types, "VALUES")).name)
        return out

    def common_type(self, a: str, b: str) -> str:
        return from_spark(_common([to_spark_type(SqlType(a)), to_spark_type(SqlType(b))], "COALESCE")).name


def _schema(columns: Columns) -> dict[str, T.DataType]:
    return {n: to_spark_type(SqlType(t)) for n, t in columns}


def _parse(sql: str) -> exp.Expr:
    try:
        return sqlglot.parse_one(sql, read="spark")
    except ParseError as e:
        raise UntypedError(f"cannot parse {sql!r}: {e}") from None


def _type(e: exp.Expr, schema: dict[str, T.DataType]) -> T.DataType:
    """Spark's type of `e` (Spark SQL, parsed) over the columns `schema`."""
    if isinstance(e, exp.Column):
        if e.name not in schema:
            raise UntypedError(f"A column or function parameter with name `{e.name}` cannot be resolved")
        return schema[e.name]
    if isinstance(e, exp.Literal):
        return _literal(e)
    if isinstance(e, exp.Null):
        return T.NullType()
    if isinstance(e, exp.Boolean):
        return T.BooleanType()
    if isinstance(e, exp.Cast):  # TryCast too
        return _data_type(e.to)
    if isinstance(e, exp.Alias):
        return _type(e.this, schema)
    if isinstance(e, _BOOLEAN):
        for child in e.iter_expressions():
            if not isinstance(child, (exp.Var, exp.DataType)):
                _type(child, schema)  # an unknown column is an error here too
        return T.BooleanType()
    if isinstance(e, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.SafeAdd, exp.SafeMultiply, exp.SafeSubtract)):
        return _arithmetic(e, schema)
    if isinstance(e, exp.IntDiv):
        return T.LongType()
    return _function(e, schema)


def _function(e: exp.Expr, schema: dict[str, T.DataType]) -> T.DataType:
    if isinstance(e, exp.Window):
        return _type(e.this, schema)
    if isinstance(e, _SAME):
        return _type(e.this, schema)
    if isinstance(e, _STRING):
        return T.StringType()
    if isinstance(e, _INT):
        return T.IntegerType()
    if isinstance(e, _DOUBLE):
        return T.DoubleType()
    if isinstance(e, exp.Count):
        return T.LongType()
    if isinstance(e, _COMMON):
        return _common([_type(x, schema) for x in [e.this, *e.expressions]], e.key)
    if isinstance(e, exp.Nullif):
        return _type(e.this, schema)
    if isinstance(e, exp.Case):
        branches = [_type(i.args["true"], schema) for i in e.args.get("ifs") or []]
        if e.args.get("default") is not None:
            branches.append(_type(e.args["default"], schema))
        return _common(branches, "CASE")
    if isinstance(e, exp.If):
        return _common([_type(e.args["true"], schema)] + ([_type(e.args["false"], schema)]
                                                          if e.args.get("false") is not None else []), "IF")
    if isinstance(e, (exp.Sum, exp.Avg)):
        return _sum_avg(e, _type(e.this, schema))
    if isinstance(e, (exp.Round, exp.Ceil, exp.Floor)):
        return _rounding(e, schema)
    if isinstance(e, exp.TimestampTrunc):
        return T.TimestampNTZType() if isinstance(_type(e.this, schema), T.TimestampNTZType) else T.TimestampType()
    if isinstance(e, exp.Extract):
        return T.DecimalType(8, 6) if e.this.name.upper() in ("SECOND", "SECONDS") else T.IntegerType()
    if isinstance(e, exp.UnixMicros):
        return T.LongType()
    if isinstance(e, exp.Interval):
        return T.DayTimeIntervalType()
    if isinstance(e, exp.HexString):
        return T.BinaryType()
    if isinstance(e, (exp.Unhex, exp.FromBase64)):
        return T.BinaryType()
    if isinstance(e, (exp.FromTimeZone, exp.ConvertTimezone)):
        return T.TimestampType()
    if isinstance(e, exp.DateDiff):
        return T.IntegerType()
    if isinstance(e, exp.Anonymous) and (t := _ANONYMOUS.get(e.name.lower())) is not None:
        return t
    if isinstance(e, exp.ArraySize):
        return T.IntegerType()
    if isinstance(e, exp.Bracket) and len(e.expressions) == 1:  # element_at(sort_array(collect_list(x) OVER ...), i)
        arr = e.this
        while isinstance(arr, exp.ArraySort | exp.Window):
            arr = arr.this
        if isinstance(arr, exp.ArrayAgg):
            return _type(arr.this, schema)
    raise UntypedError(f"no typing rule for {e.sql(dialect='spark')[:80]} ({type(e).__name__}); "
                     "planning it needs Spark's analyser (SparkTypes)")


def _literal(e: exp.Literal) -> T.DataType:
    if e.is_string:
        return T.StringType()
    text = e.this
    if "e" in text.lower():
        return T.DoubleType()
    if "." in text:
        whole, _, frac = text.lstrip("-").partition(".")
        digits = (whole.lstrip("0") + frac) or "0"
        return T.DecimalType(max(len(digits.lstrip("0")) if whole.strip("0") else len(frac), len(frac), 1), len(frac))
    value = int(text)
    if -(2**31) <= value < 2**31:
        return T.IntegerType()
    if -(2**63) <= value < 2**63:
        return T.LongType()
    return T.DecimalType(min(38, len(text.lstrip("-"))), 0)


def _data_type(dt: exp.DataType) -> T.DataType:
    kind = dt.this
    D = exp.DataType.Type
    if kind == D.DECIMAL:
        params = [int(p.this.this) if isinstance(p, exp.DataTypeParam) else int(p.this) for p in dt.expressions]
        return T.DecimalType(*(params or [10, 0]))
    simple = {D.TINYINT: T.ByteType(), D.SMALLINT: T.ShortType(), D.INT: T.IntegerType(), D.BIGINT: T.LongType(),
              D.FLOAT: T.FloatType(), D.DOUBLE: T.DoubleType(), D.BOOLEAN: T.BooleanType(), D.DATE: T.DateType(),
              D.TIMESTAMP: T.TimestampType(), D.TIMESTAMPTZ: T.TimestampType(), D.TIMESTAMPLTZ: T.TimestampType(),
              D.TIMESTAMPNTZ: T.TimestampNTZType(), D.BINARY: T.BinaryType(), D.VARBINARY: T.BinaryType()}
    if kind in simple:
        return simple[kind]
    if kind in exp.DataType.TEXT_TYPES:
        return T.StringType()
    raise UntypedError(f"no typing rule for the type {dt.sql(dialect='spark')}")


def _as_decimal(t: T.DataType, node: exp.Expr) -> T.DecimalType:
    """An integral operand as Spark widens it beside a decimal (a literal: its own digits)."""
    if isinstance(t, T.DecimalType):
        return t
    if isinstance(node, exp.Literal) and not node.is_string:
        return T.DecimalType(max(len(node.this.lstrip("-")), 1), 0)
    return T.DecimalType(_DIGITS[type(t)], 0)


def _bounded(p: int, s: int) -> T.DecimalType:
    """`DecimalType.adjustPrecisionScale`: above 38 digits, the integral part is kept and the scale
    shrinks, to no less than 6."""
    if p <= 38:
        return T.DecimalType(p, s)
    minimum = min(s, 6)
    return T.DecimalType(38, max(38 - (p - s), minimum))


def _arithmetic(e: exp.Expr, schema: dict[str, T.DataType]) -> T.DataType:
    a, b = e.this, e.expression
    ta, tb = _type(a, schema), _type(b, schema)
    if isinstance(ta, T.NullType):
        ta = tb
    if isinstance(tb, T.NullType):
        tb = ta
    datetime = (T.TimestampType, T.TimestampNTZType, T.DateType)
    if isinstance(ta, datetime) or isinstance(tb, datetime):
        if isinstance(ta, datetime) and isinstance(tb, datetime):
            return T.DayTimeIntervalType()
        return ta if isinstance(ta, datetime) else tb
    if isinstance(ta, T.StringType) or isinstance(tb, T.StringType):
        return T.DoubleType()
    if not isinstance(ta, T.NumericType) or not isinstance(tb, T.NumericType):
        raise UntypedError(f"cannot type {e.sql(dialect='spark')[:80]}: operands {ta.simpleString()} and "
                         f"{tb.simpleString()}")
    if isinstance(ta, (T.FloatType, T.DoubleType)) or isinstance(tb, (T.FloatType, T.DoubleType)):
        return T.DoubleType() if isinstance(e, exp.Div) else _wider_numeric(ta, tb)
    if isinstance(ta, T.DecimalType) or isinstance(tb, T.DecimalType):
        return _decimal(e, _as_decimal(ta, a), _as_decimal(tb, b))
    if isinstance(e, exp.Div):
        return T.DoubleType()
    return _wider_numeric(ta, tb)


def _decimal(e: exp.Expr, a: T.DecimalType, b: T.DecimalType) -> T.DecimalType:
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if isinstance(e, (exp.Add, exp.Sub, exp.SafeAdd, exp.SafeSubtract)):
        scale = max(s1, s2)
        return _bounded(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if isinstance(e, (exp.Mul, exp.SafeMultiply)):
        return _bounded(p1 + p2 + 1, s1 + s2)
    if isinstance(e, exp.Div):
        scale = max(6, s1 + p2 + 1)
        return _bounded(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)  # remainder
    return _bounded(min(p1 - s1, p2 - s2) + scale, scale)


def _wider_numeric(a: T.DataType, b: T.DataType) -> T.DataType:
    if isinstance(a, T.DecimalType) or isinstance(b, T.DecimalType):
        if isinstance(a, (T.FloatType, T.DoubleType)) or isinstance(b, (T.FloatType, T.DoubleType)):
            return T.DoubleType()
        da = a if isinstance(a, T.DecimalType) else T.DecimalType(_DIGITS[type(a)], 0)
        db = b if isinstance(b, T.DecimalType) else T.DecimalType(_DIGITS[type(b)], 0)
        scale = max(da.scale, db.scale)
        whole = max(da.precision - da.scale, db.precision - db.scale)
        return T.DecimalType(min(38, whole + scale), scale)
    return max(a, b, key=lambda t: _NUMERIC_ORDER.index(type(t)))


def _common(types: list[T.DataType], what: str) -> T.DataType:
    """The type of `COALESCE`, `CASE` and the like over operands of `types` (Spark's wider type)."""
    known = [t for t in types if not isinstance(t, T.NullType)]
    if not known:
        return T.NullType()
    out = known[0]
    for t in known[1:]:
        if t == out:
            continue
        if isinstance(out, T.NumericType) and isinstance(t, T.NumericType):
            out = _wider_numeric(out, t)
        elif isinstance(out, T.StringType) or isinstance(t, T.StringType):
            out = T.StringType()
        elif {type(out), type(t)} <= {T.DateType, T.TimestampType, T.TimestampNTZType}:
            out = T.TimestampType() if T.TimestampType in (type(out), type(t)) else T.TimestampNTZType()
        else:
            raise UntypedError(f"{what} has operands of types {out.simpleString()} and {t.simpleString()}")
    return out


def _sum_avg(e: exp.Expr, t: T.DataType) -> T.DataType:
    if isinstance(t, T.DecimalType):
        if isinstance(e, exp.Sum):
            return T.DecimalType(min(38, t.precision + 10), t.scale)
        return _bounded(t.precision + 4, t.scale + 4)
    if isinstance(e, exp.Sum) and type(t) in _INTEGRAL:
        return T.LongType()
    return T.DoubleType()


def _rounding(e: exp.Expr, schema: dict[str, T.DataType]) -> T.DataType:
    t = _type(e.this, schema)
    if isinstance(e, (exp.Ceil, exp.Floor)):
        if isinstance(t, T.DecimalType):
            return T.DecimalType(min(38, t.precision - t.scale + 1), 0)
        return T.LongType()
    if isinstance(t, T.DecimalType):  # round(x, d): Spark's RoundBase
        digits = e.args.get("decimals")
        d = int(digits.this) if isinstance(digits, exp.Literal) else 0
        whole = t.precision - t.scale
        scale = max(min(t.scale, d), 0)
        return T.DecimalType(min(38, whole + scale + 1), scale)
    return t
