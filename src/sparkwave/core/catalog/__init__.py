"""The catalog: SQLite (WAL) inside the warehouse, or a PostgreSQL database shared by the hosts
that may own the warehouse in turn (`backend.py`, `postgres.py`; which one: `location.py`).

It is the source of truth for what is committed. The relations' Delta logs follow it: an epoch's
log files go into them after its catalog commit, a few epochs at a time. `Catalog` is composed of one part per concern,
each its own module; its schema has a version and numbered migrations (`migrations.py`). Tables:

- `relations(name, kind, schema, definition, created_epoch)`: tables and MVs (`relations.py`).
- `epochs(epoch, state, plan, ...)`: each epoch's plan, persisted before it executes (`epochs.py`).
- `log_files(relation, epoch, path, rows, version)`: the epoch -> log file map, with the Delta version
  holding each file (-1 until the Delta follower has committed it, `meta/delta_follower.py`).
- `base_files(relation, epoch, path, rows)` + `bases(relation, epoch, version)`: compacted bases (`files.py`).
- `source_offsets(relation, split, offset)`: committed offsets, written with the epoch's commit.
- `source_errors(relation, split, offset, epoch, error, raw)`: bad source records, committed with
  the epoch that read them (at most a bounded number per epoch); `source_error_counts` counts all.
- `source_snapshots(relation, epoch, ranges)`: a source's history as of an epoch a backfill reads
  it at: each split's offsets from its startup offset to the one committed at that epoch (`sources.py`).
- `dml(id, relation, path, rows, epoch)`: staged DML batches; `epoch` is set when planned (`dml.py`).
- `pins(id, relation, epoch, holder)`: snapshots retention must keep (`pins.py`).
- `jobs(...)`: one row per job (a table's ingestion or an MV); a creating job's phase and progress.
- `job_chunks(job, lo, hi, ...)`: a snapshot backfill's chunks (vnode ranges), in flight or done,
  with the files each wrote per table.
- `job_steps(job, step, ...)`: a creating job's checkpoints: rows, lag, for progress and rates (`jobs.py`).
- `requests(id, job, kind, value, ...)`: ALTER / CANCEL sent by another process, applied by the
  owner (`requests.py`).
- `sinks(name, mv, sink_id, spec, decouple, job)`: sinks; each has a job (strategy `sink`) whose
  row holds its position (`snapshot_epoch`, `next_vnode`, `consumed_epoch`), rate limit and error,
  and a pin (`sink:<name>`) on the MV at that position. Sinks share the relations' namespace (`sinks.py`).
- `watermarks(relation, split, epoch, value)`, `late_rows(relation, count)`: the watermarks each epoch
  moved (split '' the relation's) and the rows dropped below them, committed with the epoch (`watermarks.py`).
- `settings(key, value)`: settings, durable counters, retention's oldest epoch per relation (`settings.py`).
- `pending_folders(name)`: relation folders (`tables/<name>`) sparkwave is making or dropping while
  no relation holds them: recorded before a CREATE makes the folder and cleared in the transaction
  that adds the relation; recorded by the transaction that removes a relation and cleared once its
  folder is gone. Recovery deletes only folders recorded here (`storage/sweep.py`).

Old epochs and applied requests are pruned (`history.py`).
"""

from __future__ import annotations

from sparkwave.core.catalog.backend import INTEGRITY_ERRORS, CatalogDb
from sparkwave.core.catalog.connection import CORE_TABLES, CatalogBase, catalog_problem
from sparkwave.core.catalog.dml import ConsumedBatch, DmlBatch, DmlMixin
from sparkwave.core.catalog.epochs import BadRecord, EpochsMixin, NewLogFile, PlannedEpoch
from sparkwave.core.catalog.files import NOT_IN_DELTA, Base, EpochRows, FilesMixin, LogFile, LogTotal, PendingLogFile
from sparkwave.core.catalog.history import KEPT_EPOCHS, KEPT_REQUESTS, HistoryMixin
from sparkwave.core.catalog.jobs import KEPT_JOB_STEPS, Chunk, JobRow, JobsMixin, JobStep, Phase
from sparkwave.core.catalog.migrations import ALL_UPSTREAMS
from sparkwave.core.catalog.pins import PinsMixin
from sparkwave.core.catalog.relations import Definition, Relation, RelationsMixin
from sparkwave.core.catalog.requests import Request, RequestsMixin
from sparkwave.core.catalog.settings import SettingsMixin
from sparkwave.core.catalog.sinks import SinkRow, SinksMixin
from sparkwave.core.catalog.sources import EpochRanges, Ranges, SourceError, SourcesMixin
from sparkwave.core.catalog.watermarks import NewWatermark, WatermarksMixin


class Catalog(RelationsMixin, SinksMixin, EpochsMixin, DmlMixin, SourcesMixin, RequestsMixin, SettingsMixin,
              HistoryMixin, WatermarksMixin):
    """The catalog: one part per concern over one database connection (`CatalogBase`)."""


__all__ = [
    "ALL_UPSTREAMS", "BadRecord", "Base", "CORE_TABLES", "Catalog", "CatalogBase", "CatalogDb", "Chunk",
    "ConsumedBatch", "Definition", "DmlBatch", "DmlMixin", "EpochRanges", "EpochRows", "EpochsMixin", "FilesMixin",
    "HistoryMixin", "INTEGRITY_ERRORS", "JobRow", "JobStep", "JobsMixin", "KEPT_EPOCHS", "KEPT_JOB_STEPS",
    "KEPT_REQUESTS", "LogFile", "LogTotal", "NOT_IN_DELTA", "NewLogFile", "NewWatermark", "PendingLogFile", "Phase",
    "PinsMixin", "PlannedEpoch", "Ranges", "Relation", "RelationsMixin", "Request", "RequestsMixin", "SettingsMixin",
    "SinkRow", "SinksMixin", "SourceError", "SourcesMixin", "WatermarksMixin", "catalog_problem",
]
