"""The errors sparkwave raises. Every user-facing failure is a `SparkwaveError`."""

from __future__ import annotations


class SparkwaveError(Exception):
    """Base of every error sparkwave raises on bad input or an unusable state."""


class SqlError(SparkwaveError):
    """A statement that does not parse, or uses a clause sparkwave does not support."""


class CatalogError(SparkwaveError):
    """An unknown or duplicate name, or a drop that dependents forbid."""


class DataError(SparkwaveError):
    """A value that does not fit its column: type mismatch, NULL key, bad record."""


class WarehouseError(SparkwaveError):
    """A folder that is not a sparkwave warehouse, or a warehouse that cannot be opened safely (its
    marker or catalog missing, damaged or of a newer format)."""


class CorruptFileError(SparkwaveError):
    """A stored file that fails its checksums or disagrees with what the catalog recorded of it:
    damaged on disk. Its rows are never served."""


class QueryCanceledError(SparkwaveError):
    """A statement cancelled because it ran longer than the session's `statement_timeout`."""


class OwnershipError(SparkwaveError):
    """The warehouse is owned by another live session."""


class NotRetainedError(SparkwaveError):
    """An `as_of` epoch that is older than what retention keeps, or not yet committed."""


class PipelineError(SparkwaveError):
    """The barrier loop failed and stopped; the message carries the cause."""
