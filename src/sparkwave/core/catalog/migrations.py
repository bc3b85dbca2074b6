"""The catalog's schema version (SQLite's `PRAGMA user_version`, PostgreSQL's `sparkwave_version`
row: `backend.py`) and the numbered steps that reach it.

A catalog records the last step applied to it. Opening one applies the steps after that, in order
and in one transaction with the new version (a crash or a failing step leaves it at its old version
and shape); a new catalog goes through every step. Version 0 is every catalog of a release before
versions were recorded (2026-11-22 to 2026-11-28): they differ in shape, and the steps after 1 turn
each shape into the last one. A catalog of a higher version than `latest()` is refused by the
caller, never changed. A new step goes at the end with the next number; no step is ever edited or
removed, since catalogs at every version exist.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from sparkwave.core.catalog.backend import Backend, CatalogDb

# Version 1: the schema of 2026-11-28. `IF NOT EXISTS` because a version-0 catalog has some of it:
# one of a release before 2026-11-25 lacks the tables of sources' errors and snapshots, sinks,
# pending folders and the indexes, and gains them here.
SCHEMA_1 = (
    """CREATE TABLE IF NOT EXISTS relations (
    name TEXT PRIMARY KEY, kind TEXT NOT NULL, schema TEXT NOT NULL, definition TEXT NOT NULL,
    created_epoch INTEGER NOT NULL, created_at REAL NOT NULL, state TEXT NOT NULL DEFAULT 'created')""",
    """CREATE TABLE IF NOT EXISTS epochs (
    epoch INTEGER PRIMARY KEY, prev INTEGER NOT NULL, state TEXT NOT NULL, plan TEXT NOT NULL,
    planned_at REAL NOT NULL, committed_at REAL, rows_in INTEGER, latency_ms REAL)""",
    """CREATE TABLE IF NOT EXISTS log_files (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, path TEXT NOT NULL, rows INTEGER NOT NULL,
    version INTEGER NOT NULL, PRIMARY KEY (relation, epoch))""",
    """CREATE TABLE IF NOT EXISTS bases (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, version INTEGER NOT NULL, rows INTEGER NOT NULL,
    PRIMARY KEY (relation, epoch))""",
    """CREATE TABLE IF NOT EXISTS base_files (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, path TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS base_files_rel ON base_files (relation, epoch)",
    """CREATE TABLE IF NOT EXISTS source_offsets (
    relation TEXT NOT NULL, split TEXT NOT NULL, "offset" INTEGER NOT NULL, PRIMARY KEY (relation, split))""",
    """CREATE TABLE IF NOT EXISTS source_errors (
    relation TEXT NOT NULL, split TEXT NOT NULL, "offset" INTEGER NOT NULL, epoch INTEGER NOT NULL,
    error TEXT NOT NULL, raw TEXT, PRIMARY KEY (relation, split, "offset"))""",
    "CREATE TABLE IF NOT EXISTS source_error_counts (relation TEXT PRIMARY KEY, count INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS source_snapshots (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, ranges TEXT NOT NULL, PRIMARY KEY (relation, epoch))""",
    """CREATE TABLE IF NOT EXISTS dml (
    id INTEGER PRIMARY KEY AUTOINCREMENT, relation TEXT NOT NULL, path TEXT NOT NULL,
    rows INTEGER NOT NULL, epoch INTEGER)""",
    """CREATE TABLE IF NOT EXISTS pins (
    id INTEGER PRIMARY KEY AUTOINCREMENT, relation TEXT NOT NULL, epoch INTEGER NOT NULL, holder TEXT NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, relation TEXT NOT NULL UNIQUE, strategy TEXT NOT NULL,
    phase TEXT NOT NULL, upstream TEXT, snapshot_epoch INTEGER, consumed_epoch INTEGER,
    allowed_lag REAL, next_vnode INTEGER NOT NULL DEFAULT 0, vnode_rows TEXT,
    rows_total INTEGER NOT NULL DEFAULT 0, rows_done INTEGER NOT NULL DEFAULT 0, rate_limit INTEGER,
    started_at REAL NOT NULL, finished_at REAL, merged_epoch INTEGER, held_back INTEGER NOT NULL DEFAULT 0,
    error TEXT)""",
    """CREATE TABLE IF NOT EXISTS job_chunks (
    job INTEGER NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL, rows INTEGER NOT NULL,
    state TEXT NOT NULL, attempts INTEGER NOT NULL, files TEXT, PRIMARY KEY (job, lo))""",
    """CREATE TABLE IF NOT EXISTS job_steps (
    job INTEGER NOT NULL, step INTEGER NOT NULL, phase TEXT NOT NULL, at REAL NOT NULL,
    rows INTEGER NOT NULL, epochs INTEGER NOT NULL, lag_epochs INTEGER NOT NULL, lag_ms INTEGER NOT NULL,
    allowed_lag REAL, PRIMARY KEY (job, step))""",
    """CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job INTEGER NOT NULL, kind TEXT NOT NULL, value INTEGER,
    requested_at REAL NOT NULL, applied_at REAL, outcome TEXT)""",
    """CREATE TABLE IF NOT EXISTS sinks (
    name TEXT PRIMARY KEY, mv TEXT NOT NULL, sink_id TEXT NOT NULL, spec TEXT NOT NULL,
    decouple INTEGER NOT NULL, job INTEGER NOT NULL, created_at REAL NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS pending_folders (name TEXT PRIMARY KEY)",
    "CREATE INDEX IF NOT EXISTS epochs_state ON epochs (state, epoch)",
    "CREATE INDEX IF NOT EXISTS requests_pending ON requests (applied_at, id)",
    "CREATE INDEX IF NOT EXISTS dml_epoch ON dml (epoch)",
    "CREATE INDEX IF NOT EXISTS pins_relation ON pins (relation, epoch)",
)

ALL_UPSTREAMS = "*"  # the upstream of a job's counts stored summed over all its upstreams (before 2026-11-23)


def _schema(db: CatalogDb, root: str) -> None:
    for statement in SCHEMA_1:
        db.execute(statement)


def _vnode_rows_by_upstream(db: CatalogDb, root: str) -> None:
    """A job's rows per vnode, stored as one list summed over its upstreams before 2026-11-23,
    become the map by upstream of today, under the one key `ALL_UPSTREAMS`."""
    for job, stored in db.execute("SELECT id, vnode_rows FROM jobs WHERE vnode_rows LIKE '[%'").fetchall():
        db.execute("UPDATE jobs SET vnode_rows = ? WHERE id = ?", (json.dumps({ALL_UPSTREAMS: json.loads(stored)}),
                                                                  job))


def _relative_paths(db: CatalogDb, root: str) -> None:
    """File paths stored absolute before 2026-11-23 become relative to the warehouse, as stored
    since. A path outside `root` (a warehouse moved before this step ran) stays as recorded:
    `os.path.join(root, path)` reads it where it was."""
    prefix = root.rstrip(os.sep) + os.sep
    cut = len(prefix) + 1  # SQLite's substr counts from 1
    for table in ("log_files", "base_files", "dml"):
        db.execute(f"UPDATE {table} SET path = substr(path, ?) WHERE substr(path, 1, ?) = ?",
                   (cut, len(prefix), prefix))
    for job, lo, stored in db.execute("SELECT job, lo, files FROM job_chunks WHERE files IS NOT NULL").fetchall():
        files = {t: [f.removeprefix(prefix) for f in fs] for t, fs in json.loads(stored).items()}
        db.execute("UPDATE job_chunks SET files = ? WHERE job = ? AND lo = ?", (json.dumps(files), job, lo))


def _watermarks(db: CatalogDb, root: str) -> None:
    """The watermarks each epoch moved, per relation and split (split '' the relation's), the rows
    each relation dropped below its watermark, and the watermark a source's offsets were judged by
    (`watermarks.py`)."""
    db.execute("""CREATE TABLE IF NOT EXISTS watermarks (
    relation TEXT NOT NULL, split TEXT NOT NULL, epoch INTEGER NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (relation, split, epoch))""")
    db.execute("CREATE TABLE IF NOT EXISTS late_rows (relation TEXT PRIMARY KEY, count INTEGER NOT NULL)")
    db.execute("""CREATE TABLE IF NOT EXISTS judged_ranges (
    relation TEXT NOT NULL, split TEXT NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL, watermark INTEGER NOT NULL,
    PRIMARY KEY (relation, split, lo))""")


@dataclass(frozen=True)
class Migration:
    version: int  # the catalog's version once applied
    what: str
    apply: Callable[[CatalogDb, str], None]  # (the catalog in a transaction, the warehouse's root)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the schema of 2026-11-28 (a version-0 catalog gains the tables and indexes it lacks)", _schema),
    Migration(2, "a job's rows per vnode by upstream", _vnode_rows_by_upstream),
    Migration(3, "file paths relative to the warehouse", _relative_paths),
    Migration(4, "watermarks per relation, split and epoch; late-row counts", _watermarks),
)


def latest() -> int:
    """The version this release writes and reads."""
    return MIGRATIONS[-1].version


def migrate(db: CatalogDb, root: str, backend: Backend) -> int:
    """Bring the catalog `db` (no transaction open) to `latest()`; returns the version it had. The
    version is read again under the write lock, so two processes opening the same catalog at once
    migrate it once."""
    if backend.version(db) == latest():
        return latest()
    backend.begin(db, None)
    try:
        found = backend.version(db)  # above latest(): a newer release migrated it meanwhile; the caller refuses it
        for step in MIGRATIONS if found < latest() else ():
            if step.version > found:
                step.apply(db, root)
                backend.set_version(db, step.version)
    except BaseException:
        backend.rollback(db)
        raise
    backend.commit(db)
    return found
