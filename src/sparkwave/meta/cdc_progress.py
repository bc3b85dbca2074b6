"""A PostgreSQL CDC table's backfill as a job row of SHOW JOBS and the dashboard: rows read of the
upstream's estimated rows (`reltuples` at CREATE), the key it reads from next (or, a key PostgreSQL
orders, the last key it read), the average rate and
an ETA. The table is readable throughout (it is in the main graph, not creating), so this is progress
only: the relation's status stays 'running' and its error column empty. Computed from the committed
offsets alone (`connectors/postgres_cdc.py` keeps them), so another process sees the same."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

from sparkwave.connectors.postgres_cdc import BACKFILL, BACKFILLED, ROWS_ESTIMATE, ROWS_READ, STARTED
from sparkwave.connectors.postgres_cdc_backfill import INT_BITS, uuid_text
from sparkwave.connectors.postgres_cdc_position import is_text, text_position
from sparkwave.core.catalog import Catalog, Relation
from sparkwave.meta.progress import JobInfo, UpstreamProgress

CDC_JOB_ID = 0  # a table without a job row (none is made by today's CREATE TABLE, which records one)


def with_cdc_backfills(catalog: Catalog, jobs: list[JobInfo], now: float | None = None) -> list[JobInfo]:
    """`jobs` with each postgres-cdc table's job (a created table's) showing its backfill while it
    has not read its last chunk: phase 'snapshot', rows read of the estimate, the next key."""
    backfills = {j.name: j for j in cdc_backfills(catalog, now)}
    out = [dataclasses.replace(backfills.pop(j.name), id=j.id, started_at=j.started_at)
           if j.name in backfills and j.kind == "table" else j for j in jobs]
    return out + list(backfills.values())


def cdc_backfills(catalog: Catalog, now: float | None = None) -> list[JobInfo]:
    """A job row for each postgres-cdc table whose backfill has not read its last chunk."""
    now = time.time() if now is None else now
    out = []
    for rel in catalog.relations():
        options = rel.spec.connector
        if not options or options.get("connector") != "postgres-cdc":
            continue
        offsets = catalog.source_offsets(rel.name)
        if BACKFILL in offsets and BACKFILLED not in offsets:
            out.append(_info(rel, options, offsets, now))
    return out


def _info(rel: Relation, options: dict[str, str], offsets: dict[str, int], now: float) -> JobInfo:
    done = offsets.get(ROWS_READ, 0)
    total = max(done, offsets.get(ROWS_ESTIMATE, 0))
    started = offsets.get(STARTED, int(now))
    rate = done / max(1.0, now - started)
    limit = options.get("source_rate_limit", "")
    upstream = f"{options.get('schema.name', 'public')}.{options.get('table.name')}"
    at = UpstreamProgress(f"{upstream} {_at_key(rel, offsets)}", done, total)
    return JobInfo(CDC_JOB_ID, rel.name, "table", "cdc backfill", "snapshot", done, total,
                   round(100.0 * done / total, 1) if total else 0.0, round(rate, 1),
                   round((total - done) / rate, 1) if rate > 0 else None, 0, 0.0,
                   int(limit) if limit.isdigit() else None, datetime.fromtimestamp(started, tz=UTC),
                   rel.created_epoch, None, 0, None, (at,))


def _at_key(rel: Relation, offsets: dict[str, int]) -> str:
    """Where the backfill stands: `from` the next key, `after` the last key read (a key PostgreSQL
    orders: its values as SQL literals)."""
    key = list(rel.schema.key) or ["key"]
    if not is_text(offsets):
        word, values = "from", [str(v) for v in _key_values(rel, offsets)]
    else:
        try:
            texts = text_position(offsets)
        except ValueError as e:
            return str(e)
        if not texts:
            return "from the first key"
        word, values = "after", ["'" + t.replace("'", "''") + "'" for t in texts]
    return f"{word} {key[0]} {values[0]}" if len(key) == 1 else f"{word} ({', '.join(key)}) ({', '.join(values)})"


def _key_values(rel: Relation, offsets: dict[str, int]) -> list[int | str]:
    """The next key's column values from its splits, a key ordered here: one an integer column, two a
    uuid (declared varchar here; a table holds more splits than key columns only then)."""
    key = list(rel.schema.key) or ["key"]
    parts: list[int] = []
    for i in range(2 * len(key)):
        split = BACKFILL if i == 0 else f"{BACKFILL}.{i}"
        if split not in offsets:
            break
        parts.append(offsets[split])
    if len(parts) <= len(key):
        return [*parts, *[0] * (len(key) - len(parts))]
    types = {c.name: c.type.name for c in rel.schema.columns}
    if len(parts) != sum(1 if types.get(name) in INT_BITS else 2 for name in key):
        return list(parts)  # not a layout of integers and uuids: the splits as they are
    out: list[int | str] = []
    it = iter(parts)
    for name in key:
        out.append(next(it) if types.get(name) in INT_BITS else uuid_text(next(it), next(it)))
    return out
