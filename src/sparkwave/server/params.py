"""`$n` parameters of the extended protocol. sparkwave's parser refuses parameters (`functions.check`),
so a statement is parsed with each `$n` replaced by a typed literal: at Execute the literal that
sqlglot renders from the decoded Python value (quoting and escaping are sqlglot's, never the
caller's text), at Describe before Bind `CAST(NULL AS type)`. The statement is then parsed and
checked as any other, as exactly one statement.

A statement that is a read `frontend/reads.py` answers is parsed once, at Parse, with each `$n` a
marker (`marked`): at Execute the markers are replaced by the nodes of the values (`value_node`),
the nodes sqlglot parses their literals to, with no SQL text in between."""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Any

import sqlglot
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from sparkwave.core.errors import DataError, SqlError
from sparkwave.frontend.postgres import DIALECT
from sparkwave.server.pgparams import spark_type_for_oid

_CAST_NAMES: list[tuple[type[DataType], str]] = [
    (BooleanType, "BOOLEAN"), (BinaryType, "BYTEA"), (ByteType, "SMALLINT"), (ShortType, "SMALLINT"),
    (IntegerType, "INT"), (LongType, "BIGINT"), (FloatType, "REAL"), (DoubleType, "DOUBLE PRECISION"),
    (DateType, "DATE"), (TimestampNTZType, "TIMESTAMP"), (TimestampType, "TIMESTAMPTZ"),
    (DayTimeIntervalType, "INTERVAL"), (StringType, "VARCHAR"),
]


def cast_name(t: DataType) -> str:
    if isinstance(t, DecimalType):
        return f"DECIMAL({t.precision}, {t.scale})"
    for cls, name in _CAST_NAMES:
        if isinstance(t, cls):
            return name
    return "VARCHAR"


MAX_PARAMETERS = 65_535  # as PostgreSQL (a Bind counts its parameters in 16 bits)


CACHED_TEXT = 8192  # statements up to this long keep their parameters' places (the cache stays small)


def parameters(text: str) -> tuple[tuple[int, int, int], ...]:
    """Each `$n` of `text` as (n, start, end): its character span, end exclusive. A `$n` inside a
    string or a quoted name is no parameter (the tokenizer says which). An `n` past MAX_PARAMETERS is
    refused: the statement's parameter list has n places (`$99999999` alone would take gigabytes).
    A prepared statement's text comes again at each Execute: a short one is tokenized once."""
    return _kept_parameters(text) if len(text) <= CACHED_TEXT else _parameters(text)


def _parameters(text: str) -> tuple[tuple[int, int, int], ...]:
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text)
    except TokenError as e:
        raise SqlError(f"cannot tokenize SQL: {e}") from None
    out = []
    for a, b in zip(tokens, tokens[1:], strict=False):
        if a.token_type == TokenType.PARAMETER and b.token_type == TokenType.NUMBER and b.start == a.end + 1 \
                and b.text.isdigit():
            if int(b.text) > MAX_PARAMETERS:
                raise SqlError(f"there is no parameter ${b.text} (at character {a.start + 1}): a statement has at "
                               f"most {MAX_PARAMETERS:,}", sqlstate="42P02")
            out.append((int(b.text), a.start, b.end + 1))
    return tuple(out)


_kept_parameters = lru_cache(maxsize=256)(_parameters)


def count(text: str) -> int:
    """How many parameters the statement has: the highest `$n`."""
    return max((n for n, _, _ in parameters(text)), default=0)


def substitute(text: str, render: Callable[[int], str]) -> str:
    """`text` with each `$n` replaced by `render(n)` (SQL that sqlglot rendered)."""
    out, pos = [], 0
    for n, start, end in parameters(text):
        out.append(text[pos:start])
        sql = render(n)
        out.append(f" {sql} " if sql.startswith("-") else sql)  # `x-$1` must not become the comment `x--5`
        pos = end
    out.append(text[pos:])
    return "".join(out)


# A string no client can write knowingly (it is drawn at start): a literal starting so is a marker.
_MARK = f"sparkwave-parameter-{secrets.token_hex(16)}-"


def marked(text: str) -> str:
    """`text` with each `$n` a string literal that `marker` reads back as n."""
    return substitute(text, lambda n: f"'{_MARK}{n}'")


def marker(node: exp.Expr) -> int | None:
    """The parameter number of a marker that `marked` wrote, or None for any other node."""
    if isinstance(node, exp.Literal) and node.is_string and node.this.startswith(_MARK):
        return int(node.this[len(_MARK):])
    return None


def value_node(value: Any, t: DataType) -> exp.Expr:
    """The node sqlglot parses `literal(value, t)` to, built without SQL text (a negative number is
    `Neg` of its magnitude, as parsed); raises what `literal` raises."""
    node = _literal(value, t)
    if isinstance(node, exp.Literal) and not node.is_string and node.this.startswith("-"):  # `-0`
        return exp.Neg(this=exp.Literal.number(node.this[1:]))
    return node


def null_of(t: DataType) -> str:
    """The placeholder of a parameter whose value is not known yet (Describe before Bind)."""
    return exp.cast(exp.Null(), exp.DataType.build(cast_name(t), dialect="postgres")).sql(dialect=DIALECT)


def literal(value: Any, t: DataType) -> str:
    """`value` (decoded by the protocol for type `t`) as a SQL literal of that type."""
    return _literal(value, t).sql(dialect=DIALECT)


def _cast(text: str, t: DataType | str) -> exp.Expr:
    name = t if isinstance(t, str) else cast_name(t)
    return exp.cast(exp.Literal.string(text), exp.DataType.build(name, dialect="postgres"))


def _literal(value: Any, t: DataType) -> exp.Expr:
    if value is None:
        return exp.cast(exp.Null(), exp.DataType.build(cast_name(t), dialect="postgres")) \
            if not isinstance(t, StringType) else exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return _cast({math.inf: "Infinity", -math.inf: "-Infinity"}.get(value, "NaN"), t)
        return _cast(repr(value), t if isinstance(t, FloatType | DoubleType) else DoubleType())
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise DataError(f"parameter value {value} is not a finite number: sparkwave's decimals have none")
        return exp.Literal.number(format(value, "f"))
    if isinstance(value, bytes | bytearray | memoryview):
        return exp.HexString(this=bytes(value).hex())
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return _cast(value.isoformat(sep=" "), "TIMESTAMPTZ")
        return _cast(value.isoformat(sep=" "), "TIMESTAMP")
    if isinstance(value, date):
        return _cast(value.isoformat(), "DATE")
    if isinstance(value, time):
        return exp.Literal.string(value.isoformat())
    if isinstance(value, timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return _cast(f"{micros} microseconds", "INTERVAL")
    if isinstance(value, str):
        if "\x00" in value:
            raise DataError("invalid byte sequence for encoding \"UTF8\": 0x00 in a parameter value", sqlstate="22021")
        if isinstance(t, StringType):
            return exp.Literal.string(value)
        return _cast(value, t)
    raise SqlError(f"a parameter of type {type(value).__name__} is not supported", sqlstate="0A000")


def infer(text: str, oids: Sequence[int], column_type: Callable[[str | None, str], DataType | None]) -> list[DataType]:
    """The types of the statement's parameters: the client's where it gave one, else the type of
    what the parameter is compared with or inserted into (`col = $1`, `INSERT INTO t (a) VALUES
    ($1)`), else text. `column_type(table, column)` looks a column up (table None: any table)."""
    n = max(count(text), len(oids))
    types: list[DataType | None] = [(spark_type_for_oid(o) or StringType()) if o else None for o in oids]
    types += [None] * (n - len(types))
    if any(t is None for t in types):
        for i, t in _context_types(text, column_type).items():
            if 0 < i <= n and types[i - 1] is None:
                types[i - 1] = t
    return [t or StringType() for t in types]


_PLACEHOLDER = re.compile(r"\$([0-9]+)")


def _context_types(text: str, column_type: Callable[[str | None, str], DataType | None]) -> dict[int, DataType]:
    try:
        ast = sqlglot.parse_one(text, read=DIALECT)
    except (ParseError, TokenError, RecursionError):
        return {}
    out: dict[int, DataType] = {}
    tables = [t.name.lower() for t in ast.find_all(exp.Table)]
    if isinstance(ast, exp.Insert) and isinstance(ast.expression, exp.Values):
        target = ast.this
        table = (target.this if isinstance(target, exp.Schema) else target)
        columns = [c.name.lower() for c in target.expressions] if isinstance(target, exp.Schema) else None
        name = table.name.lower() if isinstance(table, exp.Table) else None
        for row in ast.expression.expressions:
            items = row.expressions if isinstance(row, exp.Tuple) else [row]
            for pos, item in enumerate(items):
                if (n := _number(item)) is not None:
                    col = columns[pos] if columns and pos < len(columns) else None
                    if (t := column_type(name, col if col is not None else f"#{pos}")) is not None:
                        out.setdefault(n, t)
    for node in ast.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In):
        operands = [node.this, *node.expressions] if isinstance(node, exp.In) else \
            [node.this, node.args.get("low"), node.args.get("high")] if isinstance(node, exp.Between) else \
            [node.this, node.expression]
        cols = [o for o in operands if isinstance(o, exp.Column)]
        if not cols:
            continue
        col = cols[0]
        t = column_type(col.table.lower() or (tables[0] if len(tables) == 1 else None), col.name.lower())
        if t is None:
            continue
        for o in operands:
            if (n := _number(o)) is not None:
                out.setdefault(n, t)
    for eq in ast.find_all(exp.EQ):  # UPDATE ... SET col = $1
        if isinstance(eq.parent, exp.Update) and isinstance(eq.this, exp.Column) and (n := _number(eq.expression)):
            if (t := column_type(tables[0] if tables else None, eq.this.name.lower())) is not None:
                out.setdefault(n, t)
    return out


def _number(node: exp.Expr | None) -> int | None:
    if isinstance(node, exp.Parameter | exp.Placeholder):
        m = _PLACEHOLDER.fullmatch(node.sql(dialect="postgres"))
        return int(m.group(1)) if m else None
    return None
