"""sparkwave: a streaming database layer for Apache Spark.

Tables, materialized views kept exactly up to date epoch by epoch, stored on Delta Lake."""

from typing import TYPE_CHECKING, Any

from sparkwave.core.errors import (
    CatalogError,
    DataError,
    NotRetainedError,
    OwnershipError,
    PipelineError,
    QueryCanceledError,
    SparkwaveError,
    SqlError,
    WarehouseError,
)

if TYPE_CHECKING:
    from sparkwave.frontend.session import JobInfo, Session, connect


def __getattr__(name: str) -> Any:
    """`connect`, `Session` and `JobInfo` are imported on first use: a command that needs no Spark
    (`sparkwave sql` beside a server) does not pay for importing pyspark."""
    if name in ("connect", "Session", "JobInfo"):
        from sparkwave.frontend import session

        return getattr(session, name)
    raise AttributeError(f"module 'sparkwave' has no attribute {name!r}")

__all__ = [
    "connect", "Session", "JobInfo", "SparkwaveError", "SqlError", "CatalogError", "DataError",
    "OwnershipError", "NotRetainedError", "PipelineError", "QueryCanceledError",
    "WarehouseError",
]
