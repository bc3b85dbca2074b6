"""PostgreSQL's meaning of the functions and operators whose Spark namesakes differ (checked against
a PostgreSQL 18 server, value by value: `tests/integration/test_sql_semantics.py`). `frontend/postgres.py`
calls `translate` on each node of an expression, innermost first, with the node's operands
already translated; `type_of` gives an operand's Spark type.

- integer `+`, `-`, `*`, unary `-`, `abs`: NULL when the result leaves the type (Spark wraps
  around; PostgreSQL raises, which a streaming epoch must not: RisingWave gives NULL too);
- `CAST(numeric AS int)` rounds half away from zero, `CAST(float AS int)` half to even, and text
  that is not an integer is NULL (Spark truncates all three);
- `round(float)` rounds half to even; `log(x)` is base 10;
- `substr`/`substring` with a start below 1 count the positions before the string, `left`/`right`
  with a negative length drop characters from the other end;
- `initcap` starts a word after any character that is not a letter or digit (Spark's: a space);
- `regexp_replace` replaces the first match unless the flags say `g`, reads `\\1` as a group and
  takes the flags `i`, `g`;
- `extract` / `date_part`: `dow` counts from Sunday = 0, `isodow`, `millisecond`, `microsecond`;
- a timestamptz as text ends with its zone, `+00` (the session's time zone is UTC);
- `ts AT TIME ZONE z` (`timezone(z, ts)`) reads a timestamp as wall time in `z`; `date - date` is
  a number of days."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql.types import (
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    IntegralType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)
from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.frontend.ordered_sets import ordered_set_value

TypeOf = Callable[[exp.Expr], DataType | None]
_LIMITS = {ShortType: (-(2**15), 2**15 - 1), IntegerType: (-(2**31), 2**31 - 1), LongType: (-(2**63), 2**63 - 1)}


def translate(node: exp.Expr, type_of: TypeOf) -> exp.Expr | None:
    """`node` in Spark SQL with PostgreSQL's meaning, or None if Spark's is the same."""
    for kind, rule in _RULES:
        if isinstance(node, kind):
            return rule(node, type_of)
    return None


def _call(fn: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=fn, expressions=list(args))


def _num(n: int) -> exp.Expr:
    return exp.Literal.number(n) if n >= 0 else exp.Neg(this=exp.Literal.number(-n))


def _arith(node: exp.Expr, type_of: TypeOf) -> exp.Expr | None:
    left, right = node.args["this"], node.args["expression"]
    if isinstance(node, exp.Sub) and (days := _date_difference(node, type_of)) is not None:
        return days
    if not (isinstance(type_of(left), IntegralType) and isinstance(type_of(right), IntegralType)):
        return None
    fn = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply"}[type(node)]  # type: ignore[index]
    return _call(fn, left, right)


def _neg(node: exp.Neg, type_of: TypeOf) -> exp.Expr | None:
    if isinstance(node.this, exp.Literal):
        return None
    return _unless_min(node.this, type_of, lambda x: exp.Neg(this=x))


def _abs(node: exp.Abs, type_of: TypeOf) -> exp.Expr | None:
    return _unless_min(node.this, type_of, lambda x: _call("abs", x))


def _unless_min(x: exp.Expr, type_of: TypeOf, fn: Callable[[exp.Expr], exp.Expr]) -> exp.Expr | None:
    """`fn(x)`, NULL for the type's least value (whose negation does not fit)."""
    t = type_of(x)
    low = next((lo for cls, (lo, _) in _LIMITS.items() if type(t) is cls), None)
    if low is None:
        return None
    return exp.If(this=exp.EQ(this=x, expression=_num(low)), true=exp.Null(), false=fn(x.copy()))


def _cast(node: exp.Cast, type_of: TypeOf) -> exp.Expr | None:
    to = node.to
    if to.this in exp.DataType.INTEGER_TYPES:
        # TRY_CAST: a value out of the type's range is NULL (RisingWave's non-strict answer for
        # PostgreSQL's "out of range" error), where Spark's CAST would wrap 100000 to -31072.
        t = type_of(node.this)
        if isinstance(t, DecimalType):
            return _try_cast(_call("round", node.this), to)
        if isinstance(t, DoubleType | FloatType):
            return _try_cast(_call("bround", node.this), to)
        if isinstance(t, StringType):  # '12.7' is not an integer: NULL, as any text that does not fit
            text = _call("trim", node.this)
            return _try_cast(exp.If(this=exp.RegexpLike(this=text, expression=exp.Literal.string(r"^[+-]?[0-9]+$")),
                                    true=text.copy(), false=exp.Null()), to)
        if not node.args.get("safe"):  # whatever else it is (an integer, or a type the planner cannot tell)
            return _try_cast(node.this, to)
    elif to.this in exp.DataType.TEXT_TYPES and isinstance(type_of(node.this), TimestampType):
        return _call("concat", exp.Cast(this=node.this, to=to), exp.Literal.string("+00"))
    return None


def _try_cast(this: exp.Expr, to: exp.DataType) -> exp.Expr:
    return exp.TryCast(this=this, to=to, safe=True)  # Spark's TRY_CAST (sqlglot reads Spark's CAST as unsafe)


def _round(node: exp.Round, type_of: TypeOf) -> exp.Expr | None:
    if node.args.get("decimals") is None and isinstance(type_of(node.this), DoubleType | FloatType):
        return _call("bround", node.this)
    return None


def _log(node: exp.Log, type_of: TypeOf) -> exp.Expr | None:
    return _call("log10", node.this) if node.args.get("expression") is None else None


def _substring(node: exp.Substring, type_of: TypeOf) -> exp.Expr | None:
    start, length = node.args.get("start"), node.args.get("length")
    if start is None or (isinstance(start, exp.Literal) and start.is_int and int(start.this) >= 1):
        return None
    s = node.this
    if length is None:  # from `start` to the end: PostgreSQL's positions before the string are empty
        return _call("substr", s, _call("greatest", start, exp.Literal.number(1)))
    end = exp.Sub(this=exp.Add(this=start.copy(), expression=length), expression=exp.Literal.number(1))
    return exp.If(this=exp.GTE(this=start, expression=exp.Literal.number(1)),
                  true=_call("substr", s, start.copy(), length.copy()),
                  false=_call("substr", s.copy(), exp.Literal.number(1), _call("greatest", end, exp.Literal.number(0))))


def _left_right(node: exp.Left | exp.Right, type_of: TypeOf) -> exp.Expr | None:
    n = node.expression
    if isinstance(n, exp.Literal) and n.is_int:
        return None
    s, fn = node.this, "left" if isinstance(node, exp.Left) else "right"
    rest = _call("greatest", exp.Add(this=_call("length", s.copy()), expression=n.copy()), exp.Literal.number(0))
    return exp.If(this=exp.LT(this=n, expression=exp.Literal.number(0)), true=_call(fn, s, rest),
                  false=_call(fn, s.copy(), n.copy()))


def _initcap(node: exp.Initcap, type_of: TypeOf) -> exp.Expr | None:
    # each piece ends after a character that is not a letter or digit: capitalised on its own
    pieces = _call("split", _call("lower", node.this), exp.Literal.string(r"(?<=[^\p{L}\p{N}])"))
    w = exp.to_identifier("w")
    cap = exp.Lambda(this=_call("concat", _call("upper", _call("substr", exp.column(w), exp.Literal.number(1),
                                                                exp.Literal.number(1))),
                                _call("substr", exp.column(w.copy()), exp.Literal.number(2))),
                     expressions=[w.copy()])
    return _call("array_join", _call("transform", pieces, cap), exp.Literal.string(""))


def _regexp_replace(node: exp.RegexpReplace, type_of: TypeOf) -> exp.Expr | None:
    pattern, replacement = node.expression, node.args.get("replacement")
    flags = node.args.get("modifiers")
    if flags is not None and not (isinstance(flags, exp.Literal) and flags.is_string):
        raise SqlError("regexp_replace's flags must be a constant ('g', 'i' or both)")
    flag_text = flags.this if flags is not None else ""
    if set(flag_text) - set("gi"):
        raise SqlError(f"regexp_replace flags {flag_text!r} are not supported; supported: 'g', 'i'")
    if not (isinstance(replacement, exp.Literal) and replacement.is_string):
        raise SqlError("regexp_replace's replacement must be a constant string (its \\1 groups are translated)")
    java = _java_replacement(replacement.this, 0 if "g" in flag_text else 2)
    prefix = "(?i)" if "i" in flag_text else ""
    if "g" in flag_text:
        regex: exp.Expr = _call("concat", exp.Literal.string(prefix), pattern) if prefix else pattern
        return _call("regexp_replace", node.this, regex, exp.Literal.string(java))
    # the first match only: group 1 the text before it (as short as can be), group 2 the match
    regex = _call("concat", exp.Literal.string(prefix + "(?s)^(.*?)("), pattern, exp.Literal.string(")"))
    return _call("regexp_replace", node.this, regex, exp.Literal.string("$1" + java))


def _java_replacement(text: str, shift: int) -> str:
    """PostgreSQL's replacement (`\\1`..`\\9` groups, `\\&` the match, `\\\\` a backslash) in Java's
    (`$n`, `\\$`), its groups shifted by `shift` (the match is group `shift`)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt.isdigit() and nxt != "0":
                out.append(f"${int(nxt) + shift}")
            elif nxt == "&":
                out.append(f"${shift}")
            else:
                out.append("\\" + nxt if nxt in "\\$" else nxt)
            i += 2
            continue
        out.append("\\$" if c == "$" else ("\\\\" if c == "\\" else c))
        i += 1
    return "".join(out)


def _extract(node: exp.Extract, type_of: TypeOf) -> exp.Expr | None:
    field, value = node.this.name.upper(), node.expression
    if field == "DOW":
        return exp.Sub(this=_call("dayofweek", value), expression=exp.Literal.number(1))
    if field == "ISODOW":
        return exp.Extract(this=exp.var("DAYOFWEEK_ISO"), expression=value)
    if field in ("MILLISECOND", "MILLISECONDS", "MICROSECOND", "MICROSECONDS"):
        scale = 1000 if field.startswith("MILLI") else 1_000_000
        return exp.Mul(this=exp.Extract(this=exp.var("SECOND"), expression=value),
                       expression=exp.Literal.number(scale))
    return None


def _at_time_zone(node: exp.Expr, type_of: TypeOf) -> exp.Expr | None:
    """`x AT TIME ZONE z` / `timezone(z, x)`: a timestamp read as wall time in `z` (a timestamptz),
    or a timestamptz as wall time in `z` (a timestamp)."""
    if isinstance(node, exp.Anonymous):
        if node.name.lower() != "timezone" or len(node.expressions) != 2:
            return None
        zone, value = node.expressions
    else:
        value, zone = node.this, node.args["zone"]
    t = type_of(value)
    if isinstance(t, TimestampNTZType):
        return _call("to_utc_timestamp", value, zone)
    if isinstance(t, TimestampType):
        return exp.Cast(this=_call("from_utc_timestamp", value, zone),
                        to=exp.DataType.build("TIMESTAMP_NTZ", dialect="spark"))
    return None


def _date_difference(node: exp.Sub, type_of: TypeOf) -> exp.Expr | None:
    """`date - date` is a number of days (Spark's: an interval)."""
    if isinstance(type_of(node.this), DateType) and isinstance(type_of(node.expression), DateType):
        return _call("datediff", node.this, node.expression)
    return None


def _similar_to(node: exp.SimilarTo, type_of: TypeOf) -> exp.Expr | None:
    raise SqlError("SIMILAR TO is not supported; write LIKE, or ~ with a regular expression")


def _within_group(node: exp.WithinGroup, type_of: TypeOf) -> exp.Expr | None:
    """percentile_cont / percentile_disc / mode in a query: PostgreSQL's values (`ordered_sets.py`), not
    Spark's percentile_approx that sqlglot would write."""
    keys = node.expression.expressions if isinstance(node.expression, exp.Order) else []
    name = node.this.sql_name().lower() if isinstance(node.this, exp.Func) else "WITHIN GROUP"
    if len(keys) != 1:
        raise SqlError(f"{name}() WITHIN GROUP takes exactly one ORDER BY expression")
    try:
        return ordered_set_value(node.this, keys[0].this, bool(keys[0].args.get("desc")), lambda f: f)
    except ValueError as e:
        raise SqlError(str(e)) from None


def _ordered_first_last(node: exp.FirstValue | exp.LastValue, type_of: TypeOf) -> exp.Expr | None:
    """RisingWave's first_value / last_value aggregates (`x ORDER BY y`) are planned in MVs only
    (`plan/ordered_aggs.py`); Spark has no such aggregate. A window function's call passes unchanged."""
    if isinstance(node.this, exp.Order) and not isinstance(node.parent, exp.Window):
        name = node.sql_name().lower()
        raise SqlError(f"{name}(x ORDER BY y) as an aggregate is supported in materialized views, not in queries; "
                       f"write {name}(x) OVER (PARTITION BY ... ORDER BY y ROWS BETWEEN UNBOUNDED PRECEDING AND "
                       "UNBOUNDED FOLLOWING)")
    return None


_RULES: list[tuple[type | tuple[type, ...], Callable[..., exp.Expr | None]]] = [
    ((exp.Add, exp.Sub, exp.Mul), _arith), (exp.Neg, _neg), (exp.Abs, _abs), (exp.Cast, _cast),
    (exp.Round, _round), (exp.Log, _log), (exp.Substring, _substring), ((exp.Left, exp.Right), _left_right),
    (exp.Initcap, _initcap), (exp.RegexpReplace, _regexp_replace), (exp.Extract, _extract),
    (exp.SimilarTo, _similar_to), ((exp.AtTimeZone, exp.Anonymous), _at_time_zone), (exp.WithinGroup, _within_group),
    ((exp.FirstValue, exp.LastValue), _ordered_first_last),
]
NODES = tuple(k for kinds, _ in _RULES for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
