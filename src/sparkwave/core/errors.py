"""The errors sparkwave raises. Every user-facing failure is a `SparkwaveError`."""

from __future__ import annotations


class SparkwaveError(Exception):
    """Base of every error sparkwave raises on bad input or an unusable state. `sqlstate` is the
    PostgreSQL error code a client of `sparkwave serve` receives (each class has one; a raise site
    may give a more precise one), `at` the (line, column) in the submitted text it points to."""

    sqlstate: str = "XX000"
    at: tuple[int, int] | None = None

    def __init__(self, *args: object, sqlstate: str | None = None, at: tuple[int, int] | None = None) -> None:
        super().__init__(*args)
        if sqlstate is not None:
            self.sqlstate = sqlstate
        if at is not None:
            self.at = at


class SqlError(SparkwaveError):
    """A statement that does not parse, or uses a clause sparkwave does not support."""

    sqlstate = "42601"


class CatalogError(SparkwaveError):
    """An unknown or duplicate name, or a drop that dependents forbid."""

    sqlstate = "55000"


class DataError(SparkwaveError):
    """A value that does not fit its column: type mismatch, NULL key, bad record."""

    sqlstate = "22000"


class WarehouseError(SparkwaveError):
    """A folder that is not a sparkwave warehouse, or a warehouse that cannot be opened safely (its
    marker or catalog missing, damaged or of a newer format)."""

    sqlstate = "58000"


class CorruptFileError(SparkwaveError):
    """A stored file that fails its checksums or disagrees with what the catalog recorded of it:
    damaged on disk. Its rows are never served."""

    sqlstate = "XX001"


class QueryCanceledError(SparkwaveError):
    """A statement cancelled because it ran longer than the session's `statement_timeout`."""

    sqlstate = "57014"


class OwnershipError(SparkwaveError):
    """The warehouse is owned by another live session."""

    sqlstate = "55006"


class NotRetainedError(SparkwaveError):
    """An `as_of` epoch that is older than what retention keeps, or not yet committed."""

    sqlstate = "55000"


class PipelineError(SparkwaveError):
    """The barrier loop failed and stopped; the message carries the cause."""

    sqlstate = "XX000"
