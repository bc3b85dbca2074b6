"""Operators' Spark SQL expressions compiled once into Arrow evaluators, with Spark's exact values
and types (non-ANSI mode, as `core/spark.py` runs it), for small epochs on the driver.

`compile_expr(tree, types)` reads an `Expr`'s sqlglot tree over input columns of known types and
returns a `Compiled` (the result's Spark type and a function of the rows), or raises `Refused` for
anything it does not compute exactly as Spark does: the caller then keeps Spark's evaluation.
What it accepts is small on purpose: column references, literals, comparisons (NaN equal to
itself and above every number, as Spark orders it), AND/OR/NOT (three-valued), IS [NOT] NULL, IN,
BETWEEN, + - * on integers (wrapping, as Java does) and floats, TRY_ADD/TRY_SUBTRACT/TRY_MULTIPLY
(NULL on overflow), DIV and % (NULL for a zero divisor), / on doubles, exact decimal + - *, CASE,
IF, COALESCE, GREATEST/LEAST, ABS, casts between integers, to floats, strings and decimals where
exact, and a few string functions (LENGTH, CONCAT, TRIM; LOWER/UPPER of ASCII text). A value the
evaluator cannot be sure of at run time (non-ASCII text to case-map) raises `Inexact`, and the
epoch's chain goes to Spark instead. Types follow Spark's coercion: integer types widen to the
wider one, an integer meets a float as the float; anything else that differs is refused."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sparkwave.stream.arrow_casts import cast_text_literal, cast_values, target_type
from sparkwave.stream.arrow_numbers import (
    MAX_PRECISION,
    DecimalType,
    cast_decimal,
    decimal_binary,
    decimal_type,
    int_division,
    int_remainder,
    operand_type,
    spark_compare,
    try_int_op,
)
from sparkwave.stream.arrow_values import (
    FLOATS,
    INT_BOUNDS,
    INTS,
    NUMERIC_ORDER,
    Compiled,
    Fn,
    Inexact,
    Refused,
    Rows,
    arrow_type,
    constant,
    sql_type_of,
)

__all__ = ["INTS", "Compiled", "Inexact", "Refused", "Rows", "arrow_type", "compile_expr", "sql_type_of"]


def compile_expr(tree: exp.Expr, types: dict[str, str]) -> Compiled:
    """`tree` over columns of `types` (name -> Spark type name) as an Arrow evaluator."""
    rule = _RULES.get(type(tree))
    if rule is None:
        raise Refused(f"{type(tree).__name__} is not evaluated in Arrow")
    return rule(tree, types)


def _sub(tree: exp.Expr, types: dict[str, str]) -> Compiled:
    return compile_expr(tree, types)


# --- leaves ------------------------------------------------------------------------------------
def _column(tree: exp.Column, types: dict[str, str]) -> Compiled:
    if tree.table or not isinstance(tree.this, exp.Identifier):
        raise Refused(f"column {tree.sql()} is qualified")
    name = tree.this.name
    if name not in types:
        raise Refused(f"column {name} is not an input column")
    return Compiled(types[name], lambda r: r.cols[name])


_INT_TEXT = re.compile(r"-?\d+")
_DEC_TEXT = re.compile(r"-?(\d*)\.(\d*)")


def _literal(tree: exp.Literal, types: dict[str, str]) -> Compiled:
    text = tree.this
    if tree.is_string:
        return constant(text, "varchar")
    if _INT_TEXT.fullmatch(text):
        v = int(text)
        if -(2**31) <= v < 2**31:
            return constant(v, "int")
        if -(2**63) <= v < 2**63:
            return constant(v, "bigint")
        raise Refused(f"integer literal {text} is a decimal in Spark")
    m = _DEC_TEXT.fullmatch(text)
    if m:
        d = Decimal(text)
        t = decimal_type(d)
        if t is None:
            raise Refused(f"decimal literal {text} is too wide")
        return constant(d, t.name)
    if re.fullmatch(r"-?\d+(\.\d*)?[eE][+-]?\d+", text):
        return constant(float(text), "double")
    raise Refused(f"literal {text}")


def _boolean(tree: exp.Boolean, types: dict[str, str]) -> Compiled:
    return constant(bool(tree.this), "boolean")


def _null(tree: exp.Null, types: dict[str, str]) -> Compiled:
    return Compiled("null", lambda r: pa.nulls(r.n), None, True)


def _paren(tree: exp.Paren, types: dict[str, str]) -> Compiled:
    return _sub(tree.this, types)


# --- coercion ------------------------------------------------------------------------------------
def wider(a: str, b: str) -> str:
    """Spark's common type of two operand types (`findWiderTypeForTwo`), for the cases it is exact."""
    if a == b:
        return a
    if a == "null":
        return b
    if b == "null":
        return a
    if a in NUMERIC_ORDER and b in NUMERIC_ORDER:
        return max(a, b, key=NUMERIC_ORDER.index)
    raise Refused(f"no exact common type of {a} and {b}")


def cast_to(c: Compiled, t: str) -> Fn:
    """`c`'s values as type `t`, for a widening `wider` allows (exact)."""
    if c.type == t:
        return c.fn
    at = arrow_type(t)
    fn = c.fn
    if c.type == "null":
        return lambda r: pa.nulls(r.n, at)
    return lambda r: fn(r).cast(at, safe=False)  # integer -> wider integer or float: Java's conversions (nearest)


# --- logic and comparisons -----------------------------------------------------------------------
def _boolean_operand(tree: exp.Expr, types: dict[str, str]) -> Fn:
    c = _sub(tree, types)
    if c.type not in ("boolean", "null"):
        raise Refused(f"{c.type} operand of a boolean operator")
    return cast_to(c, "boolean")


def _and(tree: exp.And, types: dict[str, str]) -> Compiled:
    a, b = _boolean_operand(tree.this, types), _boolean_operand(tree.expression, types)
    return Compiled("boolean", lambda r: pc.and_kleene(a(r), b(r)))


def _or(tree: exp.Or, types: dict[str, str]) -> Compiled:
    a, b = _boolean_operand(tree.this, types), _boolean_operand(tree.expression, types)
    return Compiled("boolean", lambda r: pc.or_kleene(a(r), b(r)))


def _not(tree: exp.Not, types: dict[str, str]) -> Compiled:
    a = _boolean_operand(tree.this, types)
    return Compiled("boolean", lambda r: pc.invert(a(r)))


def _is(tree: exp.Is, types: dict[str, str]) -> Compiled:
    if not isinstance(tree.expression, exp.Null):
        raise Refused("IS other than IS NULL")
    a = _sub(tree.this, types).fn
    return Compiled("boolean", lambda r: pc.is_null(a(r)))


_COMPARABLE = (*NUMERIC_ORDER, "boolean", "varchar", "date", "timestamp", "timestamptz")


def _operands(left: exp.Expr, right: exp.Expr, types: dict[str, str]) -> tuple[str, Fn, Fn]:
    a, b = _sub(left, types), _sub(right, types)
    if a.type.startswith("decimal") or b.type.startswith("decimal"):
        if a.type == b.type:
            return a.type, a.fn, b.fn
        d = _wider_decimal(a, b)
        return d.name, _as_decimal(a, d), _as_decimal(b, d)
    t = wider(a.type, b.type)
    if t not in _COMPARABLE and t != "null":
        raise Refused(f"comparison of {t}")
    return t, cast_to(a, t), cast_to(b, t)


def _wider_decimal(a: Compiled, b: Compiled) -> DecimalType:
    """Spark's common decimal type of two compared operands (decimals, integers, integer literals);
    refused where Spark would bound it to 38 digits (a cast that may overflow)."""
    if not all(c.type.startswith("decimal") or c.type in INTS or c.type == "null" for c in (a, b)):
        raise Refused(f"comparison of {a.type} with {b.type}")
    ta, tb = (operand_type(c.type, c.constant if c.is_literal else None) if c.type != "null" else DecimalType(1, 0)
              for c in (a, b))
    scale = max(ta.scale, tb.scale)
    t = DecimalType(max(ta.precision - ta.scale, tb.precision - tb.scale) + scale, scale)
    if t.precision > MAX_PRECISION:
        raise Refused(f"comparison of {a.type} with {b.type} past 38 digits")
    return t


def _as_decimal(c: Compiled, t: DecimalType) -> Fn:
    """`c`'s values as decimal `t` (exact: `t` holds every value of `c`'s type)."""
    fn = c.fn
    if c.type == "null":
        return lambda r: pa.nulls(r.n, t.arrow)
    return lambda r: cast_decimal(fn(r), t)


def _comparison(op: str) -> Callable[[exp.Expr, dict[str, str]], Compiled]:
    def rule(tree: exp.Expr, types: dict[str, str]) -> Compiled:
        t, a, b = _operands(tree.this, tree.expression, types)
        if t == "null":
            return Compiled("boolean", lambda r: pa.nulls(r.n, pa.bool_()))
        return Compiled("boolean", lambda r: spark_compare(op, a(r), b(r), t in FLOATS))
    return rule


def _null_safe_eq(tree: exp.NullSafeEQ, types: dict[str, str]) -> Compiled:
    t, a, b = _operands(tree.this, tree.expression, types)

    def fn(r: Rows) -> pa.Array:
        x, y = a(r), b(r)
        both = pc.and_(pc.is_null(x), pc.is_null(y))
        if t == "null":
            return both
        return pc.or_(pc.fill_null(spark_compare("eq", x, y, t in FLOATS), False), both)
    return Compiled("boolean", fn)


def _in(tree: exp.In, types: dict[str, str]) -> Compiled:
    if tree.args.get("query") or tree.args.get("unnest") or tree.args.get("field") or not tree.expressions:
        raise Refused("IN other than a list")
    tests = [_comparison("eq")(exp.EQ(this=tree.this, expression=e), types).fn for e in tree.expressions]

    def fn(r: Rows) -> pa.Array:
        out = tests[0](r)
        for t in tests[1:]:
            out = pc.or_kleene(out, t(r))
        return out
    return Compiled("boolean", fn)


def _between(tree: exp.Between, types: dict[str, str]) -> Compiled:
    if tree.args.get("symmetric"):
        raise Refused("BETWEEN SYMMETRIC")
    lo = _comparison("ge")(exp.GTE(this=tree.this, expression=tree.args["low"]), types).fn
    hi = _comparison("le")(exp.LTE(this=tree.this, expression=tree.args["high"]), types).fn
    return Compiled("boolean", lambda r: pc.and_kleene(lo(r), hi(r)))


# --- arithmetic ----------------------------------------------------------------------------------
def _numeric(tree: exp.Expr, types: dict[str, str]) -> tuple[Compiled, Compiled]:
    a, b = _sub(tree.this, types), _sub(tree.expression, types)
    for c in (a, b):
        if c.type not in NUMERIC_ORDER and not c.type.startswith("decimal") and c.type != "null":
            raise Refused(f"arithmetic on {c.type}")
    return a, b


_PLAIN: dict[type, Callable[..., pa.Array]] = {exp.Add: pc.add, exp.Sub: pc.subtract, exp.Mul: pc.multiply}
_KINDS: dict[type, str] = {exp.Add: "add", exp.Sub: "subtract", exp.Mul: "multiply", exp.SafeAdd: "add",
                           exp.SafeSubtract: "subtract", exp.SafeMultiply: "multiply"}  # Arrow's plain ops wrap


_UNIT_MICROS = {"SECOND": 1_000_000, "MINUTE": 60_000_000, "HOUR": 3_600_000_000, "DAY": 86_400_000_000}


def _interval_micros(tree: exp.Expr) -> int | None:
    """A day-time interval literal (`INTERVAL '10' SECOND`) in microseconds; None if not one."""
    if not isinstance(tree, exp.Interval):
        return None
    unit, value = tree.args.get("unit"), tree.this
    name = unit.name.upper() if unit is not None else ""
    if name not in _UNIT_MICROS or not isinstance(value, exp.Literal) or not re.fullmatch(r"-?\d+", value.this):
        raise Refused(f"interval {tree.sql()}")
    return int(value.this) * _UNIT_MICROS[name]


def _time_shift(tree: exp.Expr, types: dict[str, str]) -> Compiled | None:
    """A timestamp plus or minus a day-time interval literal: microseconds added, as Spark's exact
    `TimeAdd` (no timestamp a column holds comes near a long's range); None if not that shape."""
    left, right = _interval_micros(tree.this), _interval_micros(tree.expression)
    if left is None and right is None:
        return None
    if left is not None and (right is not None or not isinstance(tree, exp.Add)):
        raise Refused(f"interval arithmetic {tree.sql()}")
    t = _sub(tree.expression if left is not None else tree.this, types)
    if t.type not in ("timestamp", "timestamptz"):
        raise Refused(f"{t.type} plus an interval")
    shift = (left if left is not None else right) * (-1 if isinstance(tree, exp.Sub) else 1)  # type: ignore[operator]
    fn, at = t.fn, arrow_type(t.type)
    return Compiled(t.type, lambda r: pc.add(fn(r).view(pa.int64()), shift).view(at))


def _arith(tree: exp.Expr, types: dict[str, str]) -> Compiled:
    if isinstance(tree, exp.Add | exp.Sub) and (shifted := _time_shift(tree, types)) is not None:
        return shifted
    a, b = _numeric(tree, types)
    kind = _KINDS[type(tree)]
    if a.type.startswith("decimal") or b.type.startswith("decimal"):
        return decimal_binary(kind, a, b, Compiled)
    t = wider(a.type, b.type)
    if t == "null":
        raise Refused("arithmetic on NULL")
    x, y, op = cast_to(a, t), cast_to(b, t), _PLAIN[type(tree)]
    return Compiled(t, lambda r: op(x(r), y(r)))


def _try_arith(tree: exp.Expr, types: dict[str, str]) -> Compiled:
    a, b = _numeric(tree, types)
    t = wider(a.type, b.type)
    kind = _KINDS[type(tree)]
    x, y = cast_to(a, t), cast_to(b, t)
    if t in FLOATS:
        op = {"add": pc.add, "subtract": pc.subtract, "multiply": pc.multiply}[kind]
        return Compiled(t, lambda r: op(x(r), y(r)))
    if t not in ("int", "bigint"):
        raise Refused(f"try_{kind} on {t}")
    return Compiled(t, lambda r: try_int_op(kind, x(r), y(r), INT_BOUNDS[t]))


def _int_div(tree: exp.IntDiv, types: dict[str, str]) -> Compiled:
    a, b = _numeric(tree, types)
    if a.type not in INTS or b.type not in INTS:
        raise Refused(f"DIV of {a.type} and {b.type}")
    x, y = cast_to(a, "bigint"), cast_to(b, "bigint")
    return Compiled("bigint", lambda r: int_division(x(r), y(r)))


def _mod(tree: exp.Mod, types: dict[str, str]) -> Compiled:
    a, b = _numeric(tree, types)
    t = wider(a.type, b.type)
    if t not in NUMERIC_ORDER:
        raise Refused(f"% of {a.type} and {b.type}")
    x, y = cast_to(a, t), cast_to(b, t)
    return Compiled(t, lambda r: int_remainder(x(r), y(r), t in FLOATS))


def _div(tree: exp.Div, types: dict[str, str]) -> Compiled:
    a, b = _numeric(tree, types)
    if a.type not in NUMERIC_ORDER or b.type not in NUMERIC_ORDER:
        raise Refused(f"/ of {a.type} and {b.type}")  # decimal division: Spark's scale rules
    x, y = cast_to(a, "double"), cast_to(b, "double")

    def fn(r: Rows) -> pa.Array:
        d = y(r)
        return pc.if_else(pc.fill_null(pc.equal(d, 0.0), False), pa.scalar(None, pa.float64()), pc.divide(x(r), d))
    return Compiled("double", fn)


def _neg(tree: exp.Neg, types: dict[str, str]) -> Compiled:
    if isinstance(tree.this, exp.Literal) and not tree.this.is_string:  # Spark reads `-3` as one literal
        return _literal(exp.Literal(this=f"-{tree.this.this}", is_string=False), types)
    a = _sub(tree.this, types)
    if a.type not in NUMERIC_ORDER and not a.type.startswith("decimal"):
        raise Refused(f"negation of {a.type}")
    fn = a.fn
    return Compiled(a.type, lambda r: pc.negate(fn(r)))


def _abs(tree: exp.Abs, types: dict[str, str]) -> Compiled:
    a = _sub(tree.this, types)
    if a.type not in NUMERIC_ORDER and not a.type.startswith("decimal"):
        raise Refused(f"abs of {a.type}")
    fn = a.fn
    return Compiled(a.type, lambda r: pc.abs(fn(r)))


# --- conditionals --------------------------------------------------------------------------------
def _branches(values: list[Compiled]) -> tuple[str, list[Fn]]:
    t = "null"
    for v in values:
        if v.type.startswith("decimal") or t.startswith("decimal"):
            if t not in ("null", v.type) and v.type != "null":
                raise Refused(f"branches of {t} and {v.type}")
            t = v.type if v.type != "null" else t
        else:
            t = wider(t, v.type)
    return t, [cast_to(v, t) for v in values]


def _case(tree: exp.Case, types: dict[str, str]) -> Compiled:
    if tree.this is not None:
        raise Refused("CASE <operand> WHEN")
    conds = [_boolean_operand(i.this, types) for i in tree.args["ifs"]]
    default = tree.args.get("default")
    values = [_sub(i.args["true"], types) for i in tree.args["ifs"]] + \
        [_sub(default, types) if default is not None else _null(exp.Null(), types)]
    t, fns = _branches(values)
    at = arrow_type(t)

    def fn(r: Rows) -> pa.Array:
        out = fns[-1](r)
        for cond, value in zip(reversed(conds), reversed(fns[:-1]), strict=True):
            out = pc.if_else(pc.fill_null(cond(r), False), value(r), out)
        return out.cast(at)
    return Compiled(t, fn)


def _if(tree: exp.If, types: dict[str, str]) -> Compiled:
    false = tree.args.get("false")
    return _case(exp.Case(ifs=[exp.If(this=tree.this, true=tree.args["true"])], default=false), types)


def _coalesce(tree: exp.Coalesce, types: dict[str, str]) -> Compiled:
    t, fns = _branches([_sub(e, types) for e in [tree.this, *tree.expressions]])
    at = arrow_type(t)
    return Compiled(t, lambda r: pc.coalesce(*[f(r) for f in fns]).cast(at))


def _extreme(greatest: bool) -> Callable[[exp.Expr, dict[str, str]], Compiled]:
    def rule(tree: exp.Expr, types: dict[str, str]) -> Compiled:
        t, fns = _branches([_sub(e, types) for e in [tree.this, *tree.expressions]])
        if t not in (*_COMPARABLE, "null") or t == "boolean":
            raise Refused(f"GREATEST/LEAST of {t}")
        op = "gt" if greatest else "lt"

        def fn(r: Rows) -> pa.Array:  # NULLs skipped; NaN above every number
            out = fns[0](r)
            for f in fns[1:]:
                v = f(r)
                take = pc.or_(pc.is_null(out), pc.fill_null(spark_compare(op, v, out, t in FLOATS), False))
                out = pc.if_else(pc.and_(take, pc.is_valid(v)), v, out)
            return out
        return Compiled(t, fn)
    return rule


# --- strings -------------------------------------------------------------------------------------
def _string(tree: exp.Expr, types: dict[str, str]) -> Fn:
    c = _sub(tree, types)
    if c.type in INTS or c.type == "boolean":  # Spark's implicit cast: the same digits / true, false
        fn = c.fn
        return lambda r: fn(r).cast(pa.string())
    if c.type not in ("varchar", "null"):
        raise Refused(f"{c.type} as a string operand")
    return cast_to(c, "varchar")


def _case_map(upper: bool) -> Callable[[exp.Expr, dict[str, str]], Compiled]:
    def rule(tree: exp.Expr, types: dict[str, str]) -> Compiled:
        a = _string(tree.this, types)

        def fn(r: Rows) -> pa.Array:
            v = a(r)
            if not pc.all(pc.fill_null(pc.string_is_ascii(v), True)).as_py():
                raise Inexact("case mapping of non-ASCII text")  # Java's and Python's Unicode tables differ
            return pc.ascii_upper(v) if upper else pc.ascii_lower(v)
        return Compiled("varchar", fn)
    return rule


def _length(tree: exp.Length, types: dict[str, str]) -> Compiled:
    a = _sub(tree.this, types)
    if a.type != "varchar":
        raise Refused(f"LENGTH of {a.type}")
    fn = a.fn
    return Compiled("int", lambda r: pc.utf8_length(fn(r)).cast(pa.int32()))


def _concat(tree: exp.Expr, types: dict[str, str]) -> Compiled:
    parts = [tree.this, tree.expression] if isinstance(tree, exp.DPipe) else list(tree.expressions)
    fns = [_string(p, types) for p in parts]
    return Compiled("varchar", lambda r: pc.binary_join_element_wise(*[f(r) for f in fns], "",
                                                                    null_handling="emit_null"))


def _trim(tree: exp.Trim, types: dict[str, str]) -> Compiled:
    if tree.args.get("collation"):
        raise Refused("TRIM with a collation")
    a = _string(tree.this, types)
    chars = " "
    if tree.expression is not None:
        c = _sub(tree.expression, types)
        if not (c.is_literal and isinstance(c.constant, str)):
            raise Refused("TRIM of characters that are not a literal")
        chars = c.constant
    position = (tree.args.get("position") or "BOTH").upper()
    op = {"BOTH": pc.utf8_trim, "LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}[position]
    if not chars:
        return Compiled("varchar", a)
    return Compiled("varchar", lambda r: op(a(r), characters=chars))


# --- casts ---------------------------------------------------------------------------------------
def _cast(tree: exp.Cast, types: dict[str, str]) -> Compiled:
    target = target_type(tree.to)
    safe = bool(tree.args.get("safe"))  # TRY_CAST; a CAST of sqlglot's Spark reader is a TryCast without it
    a = _sub(tree.this, types)
    if a.is_literal and isinstance(a.constant, str):
        return cast_text_literal(a.constant, target)
    return cast_values(a, target, safe)


_RULES: dict[type, Callable[..., Compiled]] = {
    exp.Column: _column, exp.Literal: _literal, exp.Boolean: _boolean, exp.Null: _null, exp.Paren: _paren,
    exp.And: _and, exp.Or: _or, exp.Not: _not, exp.Is: _is, exp.In: _in, exp.Between: _between,
    exp.EQ: _comparison("eq"), exp.NEQ: _comparison("ne"), exp.GT: _comparison("gt"), exp.GTE: _comparison("ge"),
    exp.LT: _comparison("lt"), exp.LTE: _comparison("le"), exp.NullSafeEQ: _null_safe_eq,
    exp.Add: _arith, exp.Sub: _arith, exp.Mul: _arith, exp.SafeAdd: _try_arith, exp.SafeSubtract: _try_arith,
    exp.SafeMultiply: _try_arith, exp.IntDiv: _int_div, exp.Mod: _mod, exp.Div: _div, exp.Neg: _neg,
    exp.Abs: _abs, exp.Case: _case, exp.If: _if, exp.Coalesce: _coalesce, exp.Greatest: _extreme(True),
    exp.Least: _extreme(False), exp.Upper: _case_map(True), exp.Lower: _case_map(False), exp.Length: _length,
    exp.Concat: _concat, exp.DPipe: _concat, exp.Trim: _trim, exp.Cast: _cast, exp.TryCast: _cast,
}
