"""The values of the Arrow evaluator (`stream/arrow_eval.py`): Spark type names, a batch of rows, a
compiled expression, and the two ways of declining one."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from sparkwave.core.schema import SqlType

INTS = ("tinyint", "smallint", "int", "bigint")
FLOATS = ("real", "double")
NUMERIC_ORDER = (*INTS, *FLOATS)
INT_BOUNDS = {"tinyint": 7, "smallint": 15, "int": 31, "bigint": 63}


class Refused(Exception):
    """An expression the Arrow evaluator does not compute exactly as Spark: Spark evaluates it."""


class Inexact(Exception):
    """A value met at run time that the evaluator cannot compute exactly: the epoch goes to Spark."""


@dataclass(frozen=True)
class Rows:
    """A batch of input rows: columns by name, `n` rows."""

    cols: dict[str, pa.Array]
    n: int


Fn = Callable[[Rows], pa.Array]


@dataclass(frozen=True)
class Compiled:
    """An expression's Spark type (a `SqlType` name, or tinyint / null) and its evaluation."""

    type: str
    fn: Fn
    constant: object = None  # a literal's Python value (for literal-only rules), else None
    is_literal: bool = False


def arrow_type(t: str) -> pa.DataType:
    if t == "tinyint":
        return pa.int8()
    if t == "null":
        return pa.null()
    return SqlType(t).arrow


@functools.lru_cache(maxsize=256)
def sql_type_of(t: pa.DataType) -> str | None:
    """The Spark type name of an Arrow type, None if the evaluator has none."""
    for name in ("boolean", "smallint", "int", "bigint", "real", "double", "date", "timestamp", "timestamptz"):
        if SqlType(name).arrow == t:
            return name
    if t == pa.int8():
        return "tinyint"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "varchar"
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})"
    return None


def constant(value: object, t: str) -> Compiled:
    """A literal of type `t`: the same value for every row."""
    at = arrow_type(t)
    scalar = pa.scalar(value, at)
    return Compiled(t, lambda r: pa.repeat(scalar, r.n), value, True)
