"""What the wire protocol (`server/protocol.py`, `server/connection.py`) asks of the database
behind it, and nothing more: the protocol knows no Spark and no catalog, the backend no bytes.

One `Backend` per server; one `Client` per connection, with its own settings. Every method may
raise a `ServerError` (or any `SparkwaveError`, which `errors.py` maps to a SQLSTATE)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark.sql.types import DataType

Batch = Sequence[Sequence[Any]]
"""Rows as Python values, as PySpark gives them (int, float, Decimal, str, bytes/bytearray, bool,
date, aware datetime in UTC for TIMESTAMP WITH TIME ZONE, naive datetime for TIMESTAMP, timedelta,
list, dict, Row), in the order of the outcome's fields. A `pyarrow.RecordBatch` is accepted too."""


@dataclass(frozen=True)
class Field:
    """A result column: its name and its sparkwave (Spark) type; `server/pgtypes.py` gives its OID,
    size and modifier."""

    name: str
    type: DataType


@dataclass
class Outcome:
    """One statement's result. `fields` is None for a statement that returns no rows (its
    CommandComplete tag is `tag`); otherwise `batches` yields its rows and the protocol writes
    `SELECT n` (or `tag` with the row count appended when `tag` is given, e.g. `SHOW 3`; `EXPLAIN`
    alone, as PostgreSQL writes it)."""

    tag: str
    fields: list[Field] | None = None
    batches: Iterator[Batch] = field(default_factory=lambda: iter(()))
    notices: list[str] = field(default_factory=list)
    at_hand: bool = False  # its few rows are read already (a point query's): sent with its end, in one write

    def close(self) -> None:
        """Stops the rows' production early (a portal closed before its end, a client gone)."""
        close = getattr(self.batches, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class Prepared:
    """A parsed statement of the extended protocol: the types of its `$n` parameters (Spark types;
    a parameter whose type the client left open and the backend could not infer is a string) and
    the fields it returns (None for a command)."""

    sql: str
    param_types: list[DataType]
    fields: list[Field] | None
    plan: Any = None  # what the backend kept from Parse to run the statement without parsing it again


class Client(Protocol):
    """One connection's session: its settings (`SET`), its running statement (cancelled by
    `cancel()` from another thread, as a CancelRequest does), its view of the latest committed epoch."""

    def parameters(self) -> dict[str, str]:
        """ParameterStatus values sent after startup and after a `SET` that changes one
        (server_version, client_encoding, DateStyle, TimeZone, integer_datetimes, ...)."""
        ...

    def run(self, sql: str) -> Iterator[Outcome]:
        """The simple query protocol: every statement of `sql` in order, each outcome yielded before
        the next statement starts (the protocol streams its rows first). Raises on the first
        failing statement; the ones before it stay done (autocommit)."""
        ...

    def prepare(self, sql: str, param_oids: Sequence[int]) -> Prepared:
        """Parse: one statement (or none: an empty query) with `$1..$n` parameters; `param_oids`
        are the client's type OIDs, 0 where it left the type open."""
        ...

    def execute(self, prepared: Prepared, params: Sequence[Any]) -> Outcome:
        """Bind + Execute: the statement with its parameters as Python values (decoded from text or
        binary by the protocol according to `prepared.param_types`; None for NULL)."""
        ...

    def cancel(self) -> None:
        """Cancel the running statement, if any (a long SELECT, a WAIT, a FLUSH): it fails with
        SQLSTATE 57014. Called from another thread."""
        ...

    def transaction_status(self) -> str:
        """ReadyForQuery's status byte: 'I' idle, 'T' in a transaction block, 'E' in a failed one.
        Optional: the protocol sends 'I' for a client without it."""
        ...

    def close(self) -> None:
        ...


class Backend(Protocol):
    def open(self, user: str, database: str, options: dict[str, str]) -> Client:
        """A session for a connection that passed authentication; raises `ServerError` (28000 or
        3D000) for a user or database it refuses."""
        ...


class ServerError(Exception):
    """An error with its SQLSTATE, for the client: ErrorResponse's fields C, M, P (1-based character
    position in the statement text), D, H."""

    def __init__(self, code: str, message: str, *, position: int | None = None, detail: str | None = None,
                 hint: str | None = None, severity: str = "ERROR") -> None:
        super().__init__(message)
        self.code, self.message, self.position = code, message, position
        self.detail, self.hint, self.severity = detail, hint, severity
