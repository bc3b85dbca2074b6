"""A CREATE TABLE's or SOURCE's `WATERMARK FOR col AS expr`, checked into the declaration the
relation's definition stores (`stream/watermark.py: Declared`). The expression is the column or the
column less a constant (`ts - INTERVAL '5' SECOND`; `n - 10` for an integer column): the delay is
what RisingWave users write, and a constant delay keeps the watermark a max of the column."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from sqlglot import exp

from sparkwave.core.schema import Schema
from sparkwave.frontend.statements import CreateTable
from sparkwave.stream.watermark import Declared

TIMES = ("timestamp", "timestamptz", "date")
INTEGERS = ("smallint", "int", "bigint")
_UNITS = {"microsecond": 1, "us": 1, "millisecond": 1000, "ms": 1000, "second": 1_000_000, "sec": 1_000_000,
          "s": 1_000_000, "minute": 60_000_000, "min": 60_000_000, "m": 60_000_000, "hour": 3_600_000_000,
          "h": 3_600_000_000, "day": 86_400_000_000, "d": 86_400_000_000, "week": 7 * 86_400_000_000}
_WRITE = "write WATERMARK FOR col AS col - INTERVAL '5' SECOND (or AS col)"


def interval_micros(node: exp.Interval) -> int | None:
    """An interval literal (`INTERVAL '5' SECOND`, `INTERVAL '5 seconds'`) in microseconds; None if not one."""
    text = node.this.name if isinstance(node.this, exp.Literal) else None
    if text is None:
        return None
    parts = text.split()
    unit = node.args.get("unit")
    if unit is not None:
        parts.append(unit.name)
    if len(parts) != 2:
        return None
    name = parts[1].lower()
    factor = _UNITS.get(name) or _UNITS.get(name.removesuffix("s"))
    try:
        amount = Decimal(parts[0])
    except InvalidOperation:
        return None
    return None if factor is None else int(amount * factor)


def _delay(stmt: CreateTable, column: str, node: exp.Expr, integer: bool) -> int:
    """How far the watermark trails the column's max, from `column` or `column - constant`."""
    if isinstance(node, exp.Paren):
        return _delay(stmt, column, node.this, integer)
    if isinstance(node, exp.Column) and node.name.lower() == column:
        return 0
    if isinstance(node, exp.Sub) and isinstance(node.this, exp.Column) and node.this.name.lower() == column:
        right = node.expression
        if not integer and isinstance(right, exp.Interval) and (micros := interval_micros(right)) is not None:
            if micros < 0:
                raise stmt.error(f"the watermark's delay must not be negative; {_WRITE}", "WATERMARK")
            return micros
        if integer and isinstance(right, exp.Literal) and not right.is_string and right.name.isdigit():
            return int(right.name)
    raise stmt.error(f"WATERMARK FOR {column} AS {node.sql(dialect='postgres')} is not supported: the watermark is "
                     f"the column less a constant delay; {_WRITE}", "WATERMARK")


def declared(stmt: CreateTable, schema: Schema) -> Declared | None:
    """The statement's watermark, checked against the relation's `schema` (None: not declared)."""
    clause = stmt.watermark
    if clause is None:
        return None
    column = next((c for c in schema.columns if c.name == clause.column and not c.hidden), None)
    if column is None:
        raise stmt.error(f"WATERMARK FOR {clause.column}: no such column", "WATERMARK")
    kind = column.type.name
    if kind not in TIMES + INTEGERS:
        raise stmt.error(f"WATERMARK FOR {clause.column}: a watermark is on a timestamp, timestamptz, date or "
                         f"integer column, not {kind}", "WATERMARK")
    if not schema.append_only:
        raise stmt.error("a watermark needs an append-only relation (rows below it are dropped, so no row may be "
                         "updated or deleted later): write APPEND ONLY and no PRIMARY KEY", "WATERMARK")
    if stmt.relation_kind == "source" and stmt.options.get("connector") not in ("kafka", "nexmark"):
        raise stmt.error("a watermark on a source needs connector = 'kafka' (its history is read again by "
                         "partition and offset); declare it on a TABLE with the connector instead", "WATERMARK")
    return Declared(clause.column, _delay(stmt, clause.column, clause.expr, kind in INTEGERS), clause.sql)
