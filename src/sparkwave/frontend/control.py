"""Control of creating jobs from a process that does not own the warehouse.

`ALTER MATERIALIZED VIEW ... SET BACKFILL_RATE_LIMIT`, `ALTER SINK ... SET SINK_RATE_LIMIT` and
`CANCEL JOBS` are written to the
catalog's `requests` table; the owner applies them before its next barrier and records the
outcome. Every other statement needs ownership."""

from __future__ import annotations

from pathlib import Path

from sparkwave.core.catalog import Catalog, JobRow
from sparkwave.core.errors import CatalogError, OwnershipError
from sparkwave.frontend.statements import AlterBackfillRate, AlterSinkRate, Cancel, parse, rate_limit_value

CONTROL = (AlterBackfillRate, AlterSinkRate, Cancel)  # the statements a process that is not the owner may run


def creating_job_of(catalog: Catalog, stmt: AlterBackfillRate) -> JobRow:
    """The creating job an ALTER ... SET BACKFILL_RATE_LIMIT names."""
    name = stmt.name
    job = catalog.job_of(name)
    if job is None or catalog.relation(name) is None:
        raise CatalogError(f"no materialized view {name!r} to alter (at {stmt.where(name)})")
    if not job.creating:
        raise CatalogError(f"materialized view {name!r} is not being created: BACKFILL_RATE_LIMIT applies to a "
                           f"creating job (at {stmt.where(name)})")
    return job


def queue_requests(catalog_path: Path, text: str, not_owner: OwnershipError) -> list[tuple[int, str]]:
    """Validate and queue the control statements of `text`; returns (request id, description)."""
    stmts = parse(text)
    for st in stmts:
        if not isinstance(st, CONTROL):
            raise not_owner
    catalog = Catalog(catalog_path, create=False)
    try:
        queued: list[tuple[str, int, int | None, str]] = []
        for st in stmts:
            if isinstance(st, AlterSinkRate):
                limit = rate_limit_value(st, st.value)
                sink = catalog.sink(st.name)
                if sink is None:
                    raise CatalogError(f"no sink {st.name!r} to alter (at {st.where(st.name)})")
                queued.append(("rate_limit", sink.job, limit, f"sink {sink.name}: rate limit "
                               f"{'unlimited' if limit is None else limit}"))
            elif isinstance(st, AlterBackfillRate):
                limit = rate_limit_value(st, st.value)
                job = creating_job_of(catalog, st)
                queued.append(("rate_limit", job.id, limit, f"job {job.id} ({job.relation}): rate limit "
                               f"{'unlimited' if limit is None else limit}"))
            elif isinstance(st, Cancel):
                for job_id in st.ids:
                    job = catalog.creating_job(job_id)
                    queued.append(("cancel", job.id, None, f"job {job.id} ({job.relation}): cancel"))
        return [(catalog.add_request(job_id, kind, value), what) for kind, job_id, value, what in queued]
    finally:
        catalog.close()


def request_outcome(catalog_path: Path, request_id: int) -> str | None:
    catalog = Catalog(catalog_path, read_only=True)
    try:
        return catalog.request_outcome(request_id)
    finally:
        catalog.close()
