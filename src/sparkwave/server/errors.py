"""sparkwave's errors as PostgreSQL's: a SQLSTATE (`SparkwaveError.sqlstate`, set per class and at the
raise sites that know better), the message as sparkwave writes it, and the position (ErrorResponse's
P: a 1-based character offset into the query string) where the error knows its line and column."""

from __future__ import annotations

import re

from sparkwave.core.errors import SparkwaveError
from sparkwave.server.backend import ServerError

CANCELED = "canceling statement due to user request"

# Spark's error classes whose SQLSTATE PySpark may not hand over (an error raised from a py4j call
# wrapped by sparkwave keeps only its first line, which names the class in brackets).
_SPARK_CLASSES = {
    "TABLE_OR_VIEW_NOT_FOUND": "42P01",
    "UNRESOLVED_COLUMN": "42703",
    "UNRESOLVED_ROUTINE": "42883",
    "PARSE_SYNTAX_ERROR": "42601",
    "DATATYPE_MISMATCH": "42804",
    "CAST_INVALID_INPUT": "22P02",
    "NUMERIC_VALUE_OUT_OF_RANGE": "22003",
    "ARITHMETIC_OVERFLOW": "22003",
    "DIVIDE_BY_ZERO": "22012",
    "AMBIGUOUS_REFERENCE": "42702",
}
_CLASS = re.compile(r"\[([A-Z_]+)(?:\.[A-Z_]+)*\]")


def position(text: str, at: tuple[int, int] | None) -> int | None:
    """The 1-based character offset into `text` of (line, column), both 1-based."""
    if at is None:
        return None
    line, col = at
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return None
    return sum(len(lines[i]) + 1 for i in range(line - 1)) + max(1, min(col, len(lines[line - 1]) + 1))


def to_server_error(err: BaseException, text: str = "") -> ServerError:
    """The error a client receives for `err`, raised while running `text` (the query string as sent)."""
    if isinstance(err, ServerError):
        return err
    if isinstance(err, SparkwaveError):
        code = err.sqlstate
        message = str(err)
        if code in ("XX000", "42601") and (m := _CLASS.search(message)) and m.group(1) in _SPARK_CLASSES:
            code = _SPARK_CLASSES[m.group(1)]
        return ServerError(code, message, position=position(text, err.at))
    state = getattr(err, "getSqlState", None)
    if callable(state):  # a Spark error that reached us unwrapped
        try:
            code = state() or "XX000"
        except Exception:
            code = "XX000"
        return ServerError(code, str(err).strip().splitlines()[0][:500] if str(err).strip() else type(err).__name__)
    if isinstance(err, MemoryError):
        return ServerError("53200", "out of memory while running the statement")
    if isinstance(err, RecursionError):
        return ServerError("54001", "statement too complex (recursion too deep)")
    first = str(err).strip().splitlines()[0][:500] if str(err).strip() else ""
    return ServerError("XX000", f"internal error: {type(err).__name__}{': ' + first if first else ''}")


def canceled() -> ServerError:
    return ServerError("57014", CANCELED)
