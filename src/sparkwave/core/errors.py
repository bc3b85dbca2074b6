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


class OwnershipError(SparkwaveError):
    """The warehouse is owned by another live session."""


class NotRetainedError(SparkwaveError):
    """An `as_of` epoch that is older than what retention keeps, or not yet committed."""


class PipelineError(SparkwaveError):
    """The barrier loop failed and stopped; the message carries the cause."""
