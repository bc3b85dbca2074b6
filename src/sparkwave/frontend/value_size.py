"""The bound on one stored text or bytea value (`MAX_VALUE_BYTES`), checked wherever DML takes
values: literals in the statement before any of it reaches Spark, rows on the driver in Arrow, and
rows Spark computes (`repeat(...)`) in the job that checks their casts, so that no value can exhaust
the owner's memory on its way into a table."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import PySparkException
from sqlglot import exp

from sparkwave.core.errors import DataError
from sparkwave.core.limits import MAX_VALUE_BYTES
from sparkwave.core.schema import Column
from sparkwave.frontend.postgres import bytea_from_text

SIZED = ("varchar", "bytea")  # the column types whose values' size a statement decides
# the row error of a call `postgres.size_guarded` stopped before it grew a value past the limit
_GROWN = re.compile(r"\w+\(\) would make a value of more than \d+ bytes, the limit of one value")


@contextmanager
def grown_as_data_error(what: str) -> Iterator[None]:
    """A DML statement whose expression would grow a value past the limit (`repeat(...)`) fails with
    a DataError saying so, not Spark's raw error."""
    try:
        yield
    except PySparkException as e:
        if (reason := grown(e)) is None:
            raise
        raise DataError(f"{what}: {reason}") from None


def grown(err: BaseException) -> str | None:
    """The reason, if `err` is a row stopped before it grew a value past the limit."""
    m = _GROWN.search(str(err))
    return m[0] if m else None


def too_big(what: str, table: str, column: str, size: int) -> DataError:
    return DataError(f"{what}: a value of {size:,} bytes for column {column!r} of table {table!r} is larger than "
                     f"the limit of {MAX_VALUE_BYTES:,} bytes ({MAX_VALUE_BYTES // 2**20} MiB) on one text or bytea "
                     "value")


def check_literals(node: exp.Expr, column: Column, table: str, what: str) -> None:
    """Refuse a string literal in `node` (a value for `column`) larger than the limit."""
    for lit in node.find_all(exp.Literal):
        text = lit.this
        if not lit.is_string or len(text) <= MAX_VALUE_BYTES // 4:  # at most 4 bytes a character
            continue
        size = (len(text) - 2) // 2 if column.type.name == "bytea" and text.startswith("\\x") else len(text.encode())
        if size > MAX_VALUE_BYTES and column.type.name == "bytea" and not text.startswith("\\x"):
            size = len(bytea_from_text(text))  # escape format: `\\` and `\nnn` are one byte each
        if size > MAX_VALUE_BYTES:
            raise too_big(what, table, column.name, size)


def check_arrow(data: pa.Table, table: str, what: str) -> None:
    """Refuse a batch on the driver that holds a string or binary value larger than the limit."""
    for name in data.column_names:
        values = data[name]
        t = values.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t)) or values.nbytes <= MAX_VALUE_BYTES:
            continue
        size = pc.max(pc.binary_length(values)).as_py()
        if size is not None and size > MAX_VALUE_BYTES:
            raise too_big(what, table, name, size)
