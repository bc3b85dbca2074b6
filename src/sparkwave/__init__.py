"""sparkwave: a streaming database layer for Apache Spark.

Tables, materialized views kept exactly up to date epoch by epoch, stored on Delta Lake."""

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
from sparkwave.frontend.session import JobInfo, Session, connect

__all__ = [
    "connect", "Session", "JobInfo", "SparkwaveError", "SqlError", "CatalogError", "DataError",
    "OwnershipError", "NotRetainedError", "PipelineError", "QueryCanceledError",
    "WarehouseError",
]
