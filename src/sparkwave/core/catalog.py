"""The catalog: SQLite (WAL) inside the warehouse.

It is the source of truth for what is committed. A Delta commit that the catalog does not know of
is uncommitted work, redone or skipped on recovery. Tables:

- `relations(name, kind, schema, definition, created_epoch)`: tables and MVs.
- `epochs(epoch, state, plan, ...)`: each epoch's plan, persisted before it executes.
- `log_files(relation, epoch, path, rows, version)`: the epoch -> log file / Delta version map.
- `base_files(relation, epoch, path, rows)` + `bases(relation, epoch, version)`: compacted bases.
- `source_offsets(relation, split, offset)`: committed offsets, written with the epoch's commit.
- `source_errors(relation, split, offset, epoch, error, raw)`: bad source records, committed with
  the epoch that read them (at most a bounded number per epoch); `source_error_counts` counts all.
- `source_snapshots(relation, epoch, ranges)`: a source's history as of an epoch a backfill reads
  it at: each split's offsets from its startup offset to the one committed at that epoch.
- `dml(id, relation, path, rows, epoch)`: staged DML batches; `epoch` is set when planned.
- `pins(id, relation, epoch, holder)`: snapshots retention must keep.
- `jobs(...)`: one row per job (a table's ingestion or an MV); a creating job's phase and progress.
- `job_chunks(job, lo, hi, ...)`: a snapshot backfill's chunks (vnode ranges), in flight or done,
  with the files each wrote per table.
- `job_steps(job, step, ...)`: a creating job's checkpoints: rows, lag, for progress and rates.
- `requests(id, job, kind, value, ...)`: ALTER / CANCEL sent by another process, applied by the owner.
- `sinks(name, mv, sink_id, spec, decouple, job)`: sinks; each has a job (strategy `sink`) whose
  row holds its position (`snapshot_epoch`, `next_vnode`, `consumed_epoch`), rate limit and error,
  and a pin (`sink:<name>`) on the MV at that position. Sinks share the relations' namespace.
- `pending_folders(name)`: relation folders (`tables/<name>`) sparkwave is making or dropping while
  no relation holds them: recorded before a CREATE makes the folder and cleared in the transaction
  that adds the relation; recorded by the transaction that removes a relation and cleared once its
  folder is gone. Recovery deletes only folders recorded here (`storage/sweep.py`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from sparkwave.core.chunk import VNODES
from sparkwave.core.epoch import Lag
from sparkwave.core.errors import CatalogError, WarehouseError
from sparkwave.core.schema import Schema

_DDL = """
CREATE TABLE IF NOT EXISTS relations (
    name TEXT PRIMARY KEY, kind TEXT NOT NULL, schema TEXT NOT NULL, definition TEXT NOT NULL,
    created_epoch INTEGER NOT NULL, created_at REAL NOT NULL, state TEXT NOT NULL DEFAULT 'created');
CREATE TABLE IF NOT EXISTS epochs (
    epoch INTEGER PRIMARY KEY, prev INTEGER NOT NULL, state TEXT NOT NULL, plan TEXT NOT NULL,
    planned_at REAL NOT NULL, committed_at REAL, rows_in INTEGER, latency_ms REAL);
CREATE TABLE IF NOT EXISTS log_files (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, path TEXT NOT NULL, rows INTEGER NOT NULL,
    version INTEGER NOT NULL, PRIMARY KEY (relation, epoch));
CREATE TABLE IF NOT EXISTS bases (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, version INTEGER NOT NULL, rows INTEGER NOT NULL,
    PRIMARY KEY (relation, epoch));
CREATE TABLE IF NOT EXISTS base_files (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, path TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS base_files_rel ON base_files (relation, epoch);
CREATE TABLE IF NOT EXISTS source_offsets (
    relation TEXT NOT NULL, split TEXT NOT NULL, "offset" INTEGER NOT NULL, PRIMARY KEY (relation, split));
CREATE TABLE IF NOT EXISTS source_errors (
    relation TEXT NOT NULL, split TEXT NOT NULL, "offset" INTEGER NOT NULL, epoch INTEGER NOT NULL,
    error TEXT NOT NULL, raw TEXT, PRIMARY KEY (relation, split, "offset"));
CREATE TABLE IF NOT EXISTS source_error_counts (relation TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS source_snapshots (
    relation TEXT NOT NULL, epoch INTEGER NOT NULL, ranges TEXT NOT NULL, PRIMARY KEY (relation, epoch));
CREATE TABLE IF NOT EXISTS dml (
    id INTEGER PRIMARY KEY AUTOINCREMENT, relation TEXT NOT NULL, path TEXT NOT NULL,
    rows INTEGER NOT NULL, epoch INTEGER);
CREATE TABLE IF NOT EXISTS pins (
    id INTEGER PRIMARY KEY AUTOINCREMENT, relation TEXT NOT NULL, epoch INTEGER NOT NULL, holder TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, relation TEXT NOT NULL UNIQUE, strategy TEXT NOT NULL,
    phase TEXT NOT NULL, upstream TEXT, snapshot_epoch INTEGER, consumed_epoch INTEGER,
    allowed_lag REAL, next_vnode INTEGER NOT NULL DEFAULT 0, vnode_rows TEXT,
    rows_total INTEGER NOT NULL DEFAULT 0, rows_done INTEGER NOT NULL DEFAULT 0, rate_limit INTEGER,
    started_at REAL NOT NULL, finished_at REAL, merged_epoch INTEGER, held_back INTEGER NOT NULL DEFAULT 0,
    error TEXT);
CREATE TABLE IF NOT EXISTS job_chunks (
    job INTEGER NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL, rows INTEGER NOT NULL,
    state TEXT NOT NULL, attempts INTEGER NOT NULL, files TEXT, PRIMARY KEY (job, lo));
CREATE TABLE IF NOT EXISTS job_steps (
    job INTEGER NOT NULL, step INTEGER NOT NULL, phase TEXT NOT NULL, at REAL NOT NULL,
    rows INTEGER NOT NULL, epochs INTEGER NOT NULL, lag_epochs INTEGER NOT NULL, lag_ms INTEGER NOT NULL,
    allowed_lag REAL, PRIMARY KEY (job, step));
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job INTEGER NOT NULL, kind TEXT NOT NULL, value INTEGER,
    requested_at REAL NOT NULL, applied_at REAL, outcome TEXT);
CREATE TABLE IF NOT EXISTS sinks (
    name TEXT PRIMARY KEY, mv TEXT NOT NULL, sink_id TEXT NOT NULL, spec TEXT NOT NULL,
    decouple INTEGER NOT NULL, job INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS pending_folders (name TEXT PRIMARY KEY);
CREATE INDEX IF NOT EXISTS epochs_state ON epochs (state, epoch);
CREATE INDEX IF NOT EXISTS requests_pending ON requests (applied_at, id);
CREATE INDEX IF NOT EXISTS dml_epoch ON dml (epoch);
CREATE INDEX IF NOT EXISTS pins_relation ON pins (relation, epoch);
"""


CORE_TABLES = ("relations", "epochs", "log_files", "jobs")  # what every release's catalog has


def catalog_problem(path: Path) -> str | None:
    """Why `path` is not a readable sparkwave catalog (to follow its name), or None. Reads only."""
    if not path.exists():
        return "is missing"
    if path.stat().st_size == 0:
        return "is empty (0 bytes)"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            db.close()
    except sqlite3.Error as e:
        return f"cannot be read ({e})"
    if missing := [t for t in CORE_TABLES if t not in tables]:
        return f"is not a sparkwave catalog (it has no table {', '.join(missing)})"
    return None


@dataclass(frozen=True)
class Relation:
    name: str
    kind: str  # 'table' | 'source' (stores nothing) | 'mv' | 'state' (an MV's operator state, '<mv>.<suffix>')
    schema: Schema
    definition: dict[str, Any]
    created_epoch: int
    state: str = "created"  # 'creating' while its job backfills, 'failed' once isolated: outside the main graph

    @property
    def upstreams(self) -> list[str]:
        return list(self.definition.get("upstreams", []))


class Phase(StrEnum):
    """A job's phase. A creating job goes snapshot -> log store -> created (merged into the main
    graph); a job created in the main graph (a table, a blocking backfill) starts as created."""

    SNAPSHOT = "snapshot"
    LOG_STORE = "log_store"
    CREATED = "created"


@dataclass(frozen=True)
class JobRow:
    """A job's row: its phase and the progress of a creating job."""

    id: int
    relation: str
    strategy: str
    phase: Phase
    upstream: str | None
    snapshot_epoch: int | None
    consumed_epoch: int | None
    allowed_lag: float | None  # the lag rule (lag_rule.py)
    next_vnode: int  # the snapshot's vnodes below this one are read (VNODES + 1: a chunked backfill's merge too)
    vnode_rows: dict[str, list[int]] | None  # rows per vnode of each upstream's snapshot at S
    rows_total: int
    rows_done: int
    rate_limit: int | None  # rows per second; None = unlimited, 0 = paused
    started_at: float
    finished_at: float | None
    merged_epoch: int | None
    held_back: int
    error: str | None

    @property
    def creating(self) -> bool:
        return self.phase is not Phase.CREATED


ALL_UPSTREAMS = "*"  # older versions stored one count per vnode summed over the upstreams
KEPT_JOB_STEPS = 5000  # a job's most recent checkpoints kept for progress and inspection
KEPT_EPOCHS = 1000  # committed epochs kept in `epochs` beyond what retention and pins need
KEPT_REQUESTS = 1000  # applied requests kept for `request_outcome`

_JOB_COLS = ("id, relation, strategy, phase, upstream, snapshot_epoch, consumed_epoch, allowed_lag, next_vnode, "
             "vnode_rows, rows_total, rows_done, rate_limit, started_at, finished_at, merged_epoch, held_back, error")


@dataclass(frozen=True)
class Chunk:
    """One checkpoint of a job's snapshot phase: the upstream rows of vnodes `[lo, hi)` (of the
    driving upstream, for a chunked stateful backfill, whose merge chunk is `[VNODES, VNODES + 1)`)."""

    lo: int
    hi: int
    rows: int
    state: str  # 'reading' (in flight: a crash re-reads it) | 'done'
    attempts: int
    files: dict[str, list[str]]  # the files it wrote, by table (the MV, its state tables, `<table>#partial`)


@dataclass(frozen=True)
class SinkRow:
    """A sink: the MV it delivers, what its target is told (`spec`: columns, key, mode, options)."""

    name: str
    mv: str
    sink_id: str  # unique per CREATE SINK: its progress's key in the target
    spec: dict[str, Any]
    decouple: bool  # False: each epoch waits for the sink to commit it
    job: int


@dataclass(frozen=True)
class Request:
    id: int
    job: int
    kind: str  # rate_limit | cancel
    value: int | None


@dataclass(frozen=True)
class Base:
    epoch: int
    version: int
    rows: int
    files: list[str]


class Catalog:
    """Thread-safe access to the catalog database. Writers use `transaction()`. A catalog is
    created only where there is none and `create` says so; an existing file that is not a readable
    catalog (empty, damaged, another database) is an error, never overwritten."""

    def __init__(self, path: Path, *, read_only: bool = False, create: bool = True) -> None:
        self.path = path
        self.root = str(path.resolve().parent)  # file paths are stored relative to the warehouse
        if read_only and not path.exists():
            raise CatalogError(f"no sparkwave warehouse at {path.parent} (no catalog.db)")
        if path.exists() or not create:
            if (problem := catalog_problem(path)) is not None:
                raise WarehouseError(f"the catalog {path} of warehouse {path.parent} {problem}; sparkwave opens "
                                     "nothing and deletes nothing without it: restore catalog.db from a backup")
        if read_only:
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                                       isolation_level=None, timeout=30)
        else:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_DDL)
        self._lock = threading.RLock()

    def _stored(self, path: str) -> str:
        """A file's path as stored: relative to the warehouse, so a copied or moved warehouse reads
        (and its retention deletes) its own files."""
        rel = os.path.relpath(os.path.abspath(path), self.root)
        if rel.startswith(os.pardir):
            raise CatalogError(f"BUG: {path} is outside the warehouse {self.root}")
        return rel

    def _file(self, stored: str) -> str:
        """A stored path as a file: older versions stored absolute paths, which `join` keeps."""
        return os.path.join(self.root, stored)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _all(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _one(self, sql: str, args: tuple = ()) -> tuple | None:
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    # --- settings -------------------------------------------------------------------------------
    def setting(self, key: str, default: str | None = None) -> str | None:
        row = self._one("SELECT value FROM settings WHERE key = ?", (key,))
        return row[0] if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    def next_counter(self, name: str, n: int, start: int = 0) -> int:
        """Reserve `n` consecutive values of a durable counter (which begins at `start`); returns the
        first."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM settings WHERE key = ?", (f"counter.{name}",)).fetchone()
            first = int(row[0]) if row else start
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (f"counter.{name}", str(first + n)))
        return first

    # --- relations ------------------------------------------------------------------------------
    def relation(self, name: str) -> Relation | None:
        """A relation by name, creating or not."""
        row = self._one(f"SELECT {_REL_COLS} FROM relations WHERE name = ?", (name,))
        return _relation(row) if row else None

    def relations(self, *, creating: bool = False, internal: bool = False) -> list[Relation]:
        """The main graph's tables and MVs in creation order; with `creating`, also those still
        backfilling; with `internal`, also operator state tables (kind 'state')."""
        conds = ([] if creating else ["state = 'created'"]) + ([] if internal else ["kind != 'state'"])
        where = f"WHERE {' AND '.join(conds)}" if conds else ""
        rows = self._all(f"SELECT {_REL_COLS} FROM relations {where} ORDER BY created_epoch, created_at")
        return [_relation(r) for r in rows]

    def add_relation(self, db: sqlite3.Connection, rel: Relation, strategy: str = "-",
                     upstream: str | None = None) -> int:
        """Add a relation and its job; returns the job id."""
        if db.execute("SELECT 1 FROM sinks WHERE name = ?", (rel.name,)).fetchone():
            raise CatalogError(f"{rel.name!r} already exists: it is a sink")
        try:
            db.execute(f"INSERT INTO relations ({_REL_COLS}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (rel.name, rel.kind, json.dumps(rel.schema.to_json()), json.dumps(rel.definition),
                        rel.created_epoch, rel.state, time.time()))
        except sqlite3.IntegrityError:
            raise CatalogError(f"relation {rel.name!r} already exists") from None
        if rel.kind == "state":
            return 0
        db.execute("DELETE FROM pending_folders WHERE name = ?", (rel.name,))  # the relation holds it now
        phase = Phase.CREATED if rel.state == "created" else Phase.SNAPSHOT
        cur = db.execute("INSERT INTO jobs (relation, strategy, phase, upstream, snapshot_epoch, consumed_epoch, "
                         "started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (rel.name, strategy, phase, upstream, rel.created_epoch, rel.created_epoch, time.time(),
                          time.time() if phase is Phase.CREATED else None))
        return int(cur.lastrowid or 0)

    def fail_relations(self, reasons: dict[str, str]) -> None:
        """Take MVs out of the main graph for good, each with the reason its job shows (state
        'failed': they keep their rows and state as of their last committed epoch until dropped)."""
        with self.transaction() as db:
            for name, reason in reasons.items():
                db.execute("UPDATE relations SET state = 'failed' WHERE name = ? OR (kind = 'state' AND "
                           "json_extract(definition, '$.owner') = ?)", (name, name))
                db.execute("UPDATE jobs SET error = ? WHERE relation = ?", (reason, name))

    def set_definition(self, name: str, definition: dict[str, Any]) -> None:
        with self.transaction() as db:
            db.execute("UPDATE relations SET definition = ? WHERE name = ?", (json.dumps(definition), name))

    def remove_relation(self, db: sqlite3.Connection, name: str) -> None:
        """Remove a relation, its job and its operator state tables; its folder stays recorded as
        sparkwave's (`pending_folders`) until the caller has removed it (`folder_removed`)."""
        if db.execute("SELECT 1 FROM relations WHERE name = ? AND kind != 'state'", (name,)).fetchone():
            db.execute("INSERT OR IGNORE INTO pending_folders VALUES (?)", (name,))
        for (state,) in db.execute("SELECT name FROM relations WHERE kind = 'state' AND "
                                   "json_extract(definition, '$.owner') = ?", (name,)).fetchall():
            self.remove_relation(db, state)
        job = db.execute("SELECT id FROM jobs WHERE relation = ?", (name,)).fetchone()
        if job:
            for table in ("job_chunks", "job_steps"):
                db.execute(f"DELETE FROM {table} WHERE job = ?", (job[0],))
            db.execute("DELETE FROM pins WHERE holder = ?", (f"job:{job[0]}",))
        db.execute("DELETE FROM jobs WHERE relation = ?", (name,))
        db.execute("DELETE FROM relations WHERE name = ?", (name,))
        db.execute("DELETE FROM settings WHERE key = ?", (f"retained_from.{name}",))
        for table in ("log_files", "bases", "base_files", "source_offsets", "source_errors", "source_error_counts",
                      "source_snapshots", "dml", "pins"):
            db.execute(f"DELETE FROM {table} WHERE relation = ?", (name,))

    # --- relation folders no relation holds (a CREATE or DROP under way) -------------------------
    def folder_pending(self, name: str) -> None:
        """Record that a CREATE is about to make the folder of relation `name`."""
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO pending_folders VALUES (?)", (name,))

    def folder_removed(self, name: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM pending_folders WHERE name = ?", (name,))

    def pending_folders(self) -> set[str]:
        return {r[0] for r in self._all("SELECT name FROM pending_folders")}

    # --- sinks ----------------------------------------------------------------------------------
    def add_sink(self, db: sqlite3.Connection, sink: SinkRow, epoch: int, snapshot: bool,
                 rate_limit: int | None) -> int:
        """Add a sink and its job, pinning its MV at `epoch`: with `snapshot`, its backfill delivers
        the MV as of `epoch` first; without, it starts from the epochs after. Returns the job id."""
        if db.execute("SELECT 1 FROM relations WHERE name = ?", (sink.name,)).fetchone():
            raise CatalogError(f"{sink.name!r} already exists: it is a table, source or materialized view")
        if db.execute("SELECT 1 FROM sinks WHERE name = ?", (sink.name,)).fetchone():
            raise CatalogError(f"sink {sink.name!r} already exists")
        phase = Phase.SNAPSHOT if snapshot else Phase.CREATED
        now = time.time()
        cur = db.execute("INSERT INTO jobs (relation, strategy, phase, upstream, snapshot_epoch, consumed_epoch, "
                         "next_vnode, rate_limit, started_at, finished_at, merged_epoch) "
                         "VALUES (?, 'sink', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (sink.name, phase, sink.mv, epoch, epoch, 0 if snapshot else VNODES, rate_limit, now,
                          None if snapshot else now, None if snapshot else epoch))
        job = int(cur.lastrowid or 0)
        db.execute("INSERT INTO sinks VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (sink.name, sink.mv, sink.sink_id, json.dumps(sink.spec), int(sink.decouple), job, now))
        self.add_pin(sink.mv, epoch, f"sink:{sink.name}", db)
        return job

    def sinks(self) -> list[SinkRow]:
        return [_sink(r) for r in self._all(f"SELECT {_SINK_COLS} FROM sinks ORDER BY created_at")]

    def sink(self, name: str) -> SinkRow | None:
        row = self._one(f"SELECT {_SINK_COLS} FROM sinks WHERE name = ?", (name,))
        return _sink(row) if row else None

    def remove_sink(self, db: sqlite3.Connection, name: str) -> None:
        job = db.execute("SELECT job FROM sinks WHERE name = ?", (name,)).fetchone()
        if job:
            for table in ("job_chunks", "job_steps"):
                db.execute(f"DELETE FROM {table} WHERE job = ?", (job[0],))
            db.execute("DELETE FROM jobs WHERE id = ?", (job[0],))
        db.execute("DELETE FROM pins WHERE holder = ?", (f"sink:{name}",))
        db.execute("DELETE FROM sinks WHERE name = ?", (name,))

    def sink_delivered(self, job_id: int, name: str, epoch: int, vnode: int, rows: int, epochs: int,
                       lag: Lag, note: str | None = None) -> None:
        """A sink's delivery is in its target: its position moves to `(epoch, vnode)` and its pin with
        it (the log store's truncation); a snapshot that reaches the last vnode is done. The job's
        error becomes `note` (what the target changed of a delivery), or none."""
        with self.transaction() as db:
            done = vnode >= VNODES
            row = db.execute("SELECT phase FROM jobs WHERE id = ?", (job_id,)).fetchone()
            snapshot = row is not None and row[0] == Phase.SNAPSHOT
            fields: dict[str, Any] = {"consumed_epoch": epoch, "next_vnode": vnode, "error": note}
            if snapshot and done:
                fields.update(phase=Phase.CREATED, finished_at=time.time(), merged_epoch=epoch)
            self.update_job(db, job_id, **fields)
            if snapshot:
                db.execute("UPDATE jobs SET rows_done = rows_done + ? WHERE id = ?", (rows, job_id))
            self.move_pin(db, f"sink:{name}", epoch)
            self.add_job_step(db, job_id, Phase.SNAPSHOT if snapshot else Phase.CREATED, rows, epochs,
                              lag.epochs, lag.ms, None)

    # --- epochs ---------------------------------------------------------------------------------
    def forget_orphans(self) -> None:
        """Files, offsets and pins of relations that no longer exist (a DROP that crashed midway)."""
        with self.transaction() as db:
            for table in ("log_files", "bases", "base_files", "source_offsets", "source_errors", "source_error_counts",
                          "source_snapshots", "pins"):
                db.execute(f"DELETE FROM {table} WHERE relation NOT IN (SELECT name FROM relations)")

    def committed_epoch(self) -> int:
        row = self._one("SELECT max(epoch) FROM epochs WHERE state = 'committed'")
        return int(row[0]) if row and row[0] is not None else 0

    def uncommitted_plan(self) -> tuple[int, int, dict] | None:
        row = self._one("SELECT epoch, prev, plan FROM epochs WHERE state = 'planned' ORDER BY epoch LIMIT 1")
        return (row[0], row[1], json.loads(row[2])) if row else None

    def persist_plan(self, epoch: int, prev: int, plan: dict, dml_ids: list[int]) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO epochs (epoch, prev, state, plan, planned_at) VALUES (?, ?, 'planned', ?, ?)",
                       (epoch, prev, json.dumps(plan), time.time()))
            db.executemany("UPDATE dml SET epoch = ? WHERE id = ?", [(epoch, i) for i in dml_ids])

    def commit_epoch(self, epoch: int, logs: list[tuple[str, str, int, int]],
                     offsets: dict[str, dict[str, int]], rows_in: int, latency_ms: float,
                     errors: Sequence[tuple[str, str, int, str, str | None]] = (),
                     bad_counts: dict[str, int] | None = None) -> None:
        """Mark `epoch` committed with its log files `(relation, path, rows, version)`, offsets, the
        bad source records kept `(relation, split, offset, error, raw)` and how many there were."""
        now = time.time()
        with self.transaction() as db:
            last = db.execute("SELECT committed_at FROM epochs WHERE state = 'committed' ORDER BY epoch DESC "
                              "LIMIT 1").fetchone()
            if last and last[0] is not None and last[0] > now:  # committed while the clock was ahead
                db.execute("UPDATE epochs SET committed_at = ? WHERE state = 'committed' AND committed_at > ?",
                           (now, now))
            db.executemany("INSERT INTO source_error_counts VALUES (?, ?) ON CONFLICT (relation) DO UPDATE "
                           "SET count = count + excluded.count", list((bad_counts or {}).items()))
            db.executemany('INSERT OR REPLACE INTO source_errors VALUES (?, ?, ?, ?, ?, ?)',
                           [(r, s, o, epoch, err, raw) for r, s, o, err, raw in errors])
            db.executemany("INSERT OR REPLACE INTO log_files VALUES (?, ?, ?, ?, ?)",
                           [(r, epoch, self._stored(p), n, v) for r, p, n, v in logs])
            for rel, splits in offsets.items():
                db.executemany('INSERT OR REPLACE INTO source_offsets VALUES (?, ?, ?)',
                               [(rel, s, o) for s, o in splits.items()])
            db.execute("UPDATE epochs SET state = 'committed', committed_at = ?, rows_in = ?, latency_ms = ? "
                       "WHERE epoch = ?", (now, rows_in, latency_ms, epoch))

    def committed_by(self, wall_time: float) -> int | None:
        """The newest epoch committed at or before `wall_time` (every older epoch was superseded by
        then), or None. Commit times are wall time as recorded, a time later than the next commit
        clamped to it (`commit_epoch`), so epochs numbered during a forward clock jump age from the
        moment the clock came back."""
        row = self._one("SELECT epoch FROM epochs WHERE state = 'committed' AND committed_at <= ? "
                        "ORDER BY epoch DESC LIMIT 1", (wall_time,))
        return int(row[0]) if row else None

    def committed_epochs(self, since: int = 0) -> list[int]:
        return [r[0] for r in self._all(
            "SELECT epoch FROM epochs WHERE state = 'committed' AND epoch >= ? ORDER BY epoch", (since,))]

    def last_planned_at(self) -> float:
        row = self._one("SELECT planned_at FROM epochs ORDER BY epoch DESC LIMIT 1")
        return float(row[0]) if row and row[0] is not None else 0.0

    def prune_history(self) -> int:
        """Forget committed epochs no reader can ask for (below every relation's oldest retained
        epoch and every pin, beyond the newest `KEPT_EPOCHS`) and old applied requests, so the
        catalog stays the same size on a long run. Returns the epochs forgotten."""
        with self.transaction() as db:
            floor = db.execute(
                "SELECT min(e) FROM (SELECT coalesce(CAST(s.value AS INTEGER), r.created_epoch) AS e FROM relations r "
                "LEFT JOIN settings s ON s.key = 'retained_from.' || r.name "
                "WHERE r.kind != 'source' AND r.state != 'failed' "  # a source keeps none; a failed MV reads none
                "UNION ALL SELECT epoch FROM pins "
                "UNION ALL SELECT consumed_epoch FROM jobs WHERE phase != 'created' AND consumed_epoch IS NOT NULL)"
            ).fetchone()[0]
            newest = db.execute("SELECT epoch FROM epochs WHERE state = 'committed' ORDER BY epoch DESC "
                                "LIMIT 1 OFFSET ?", (KEPT_EPOCHS,)).fetchone()
            cut = None if newest is None else newest[0] if floor is None else min(floor, newest[0])
            gone = db.execute("DELETE FROM epochs WHERE state = 'committed' AND epoch < ?",
                              (cut,)).rowcount if cut is not None else 0
            db.execute("DELETE FROM requests WHERE applied_at IS NOT NULL AND id <= "
                       "(SELECT max(id) FROM requests) - ?", (KEPT_REQUESTS,))
        return gone

    def log_files(self, relation: str, after: int, upto: int) -> list[tuple[int, str]]:
        """The log files of epochs in `(after, upto]`, oldest first."""
        return [(e, self._file(p)) for e, p in self._all(
            "SELECT epoch, path FROM log_files WHERE relation = ? AND epoch > ? AND epoch <= ? ORDER BY epoch",
            (relation, after, upto))]

    def base_at(self, relation: str, epoch: int) -> Base | None:
        """The newest base with compaction epoch <= `epoch`."""
        row = self._one("SELECT epoch, version, rows FROM bases WHERE relation = ? AND epoch <= ? "
                        "ORDER BY epoch DESC LIMIT 1", (relation, epoch))
        if not row:
            return None
        files = [self._file(r[0]) for r in self._all("SELECT path FROM base_files WHERE relation = ? AND epoch = ?",
                                         (relation, row[0]))]
        return Base(row[0], row[1], row[2], files)

    def bases(self, relation: str) -> list[Base]:
        rows = self._all("SELECT epoch FROM bases WHERE relation = ? ORDER BY epoch", (relation,))
        return [b for r in rows if (b := self.base_at(relation, r[0]))]

    def add_base(self, db: sqlite3.Connection, relation: str, epoch: int, version: int, rows: int,
                 files: list[str]) -> None:
        db.execute("INSERT OR REPLACE INTO bases VALUES (?, ?, ?, ?)", (relation, epoch, version, rows))
        db.execute("DELETE FROM base_files WHERE relation = ? AND epoch = ?", (relation, epoch))
        db.executemany("INSERT INTO base_files VALUES (?, ?, ?)", [(relation, epoch, self._stored(f)) for f in files])

    def retained_from(self, relation: str, default: int) -> int:
        """The oldest epoch retention keeps readable for `relation` (`default` until it first runs)."""
        row = self._one("SELECT value FROM settings WHERE key = ?", (f"retained_from.{relation}",))
        return int(row[0]) if row else default

    def retire(self, relation: str, keep: int, retained_from: int) -> None:
        """Retention: bases older than the base at `keep` and log files of epochs `<= keep` are
        forgotten; time travel works from `retained_from` on."""
        with self.transaction() as db:
            db.execute("DELETE FROM log_files WHERE relation = ? AND epoch <= ?", (relation, keep))
            db.execute("DELETE FROM bases WHERE relation = ? AND epoch < ?", (relation, keep))
            db.execute("DELETE FROM base_files WHERE relation = ? AND epoch < ?", (relation, keep))
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)",
                       (f"retained_from.{relation}", str(retained_from)))

    def log_rows_since(self, relation: str, epoch: int) -> tuple[int, int]:
        row = self._one("SELECT count(*), coalesce(sum(rows), 0) FROM log_files WHERE relation = ? AND epoch > ?",
                        (relation, epoch))
        return (int(row[0]), int(row[1])) if row else (0, 0)

    # --- sources and DML ------------------------------------------------------------------------
    def source_offsets(self, relation: str) -> dict[str, int]:
        return dict(self._all('SELECT split, "offset" FROM source_offsets WHERE relation = ?', (relation,)))

    def source_ranges(self, relation: str, after: int = 0) -> list[tuple[int, dict[str, list[int]]]]:
        """The offset ranges `{split: [start, end)}` each committed epoch after `after` read from
        `relation`'s source, in epoch order (epochs that read nothing from it left out)."""
        out = []
        for epoch, plan in self._all("SELECT epoch, plan FROM epochs WHERE state = 'committed' AND epoch > ? "
                                     "ORDER BY epoch", (after,)):
            ranges = json.loads(plan).get("sources", {}).get(relation)
            if ranges:
                out.append((epoch, ranges))
        return out

    def record_source_snapshot(self, db: sqlite3.Connection, relation: str, epoch: int,
                               ranges: dict[str, list[int]]) -> None:
        db.execute("INSERT OR REPLACE INTO source_snapshots VALUES (?, ?, ?)", (relation, epoch, json.dumps(ranges)))

    def source_snapshot(self, relation: str, epoch: int) -> dict[str, list[int]] | None:
        row = self._one("SELECT ranges FROM source_snapshots WHERE relation = ? AND epoch = ?", (relation, epoch))
        return json.loads(row[0]) if row else None

    def set_source_offsets(self, db: sqlite3.Connection, relation: str, offsets: dict[str, int]) -> None:
        """A source's starting offsets, decided at CREATE."""
        db.executemany('INSERT OR REPLACE INTO source_offsets VALUES (?, ?, ?)',
                       [(relation, s, o) for s, o in offsets.items()])

    def source_error_counts(self) -> dict[str, int]:
        """Bad records per relation, kept or not."""
        return dict(self._all("SELECT relation, count FROM source_error_counts"))

    def source_errors(self, relation: str | None = None,
                      limit: int = -1) -> list[tuple[str, str, int, int, str, str | None]]:
        """Bad source records `(relation, split, offset, epoch, error, raw)` in offset order, the first
        `limit` of them (-1: all)."""
        return self._all('SELECT relation, split, "offset", epoch, error, raw FROM source_errors '
                         "WHERE ? IS NULL OR relation = ? ORDER BY relation, CAST(split AS INTEGER), \"offset\" "
                         "LIMIT ?", (relation, relation, limit))

    def stage_dml(self, relation: str, batches: list[tuple[str, int]]) -> None:
        """Record a statement's batches `(folder, rows)` together: a crash stages all or none."""
        with self.transaction() as db:
            db.executemany("INSERT INTO dml (relation, path, rows) VALUES (?, ?, ?)",
                           [(relation, self._stored(p), n) for p, n in batches])

    def pending_dml(self) -> list[tuple[int, str, str, int]]:
        return [(i, r, self._file(p), n) for i, r, p, n in self._all(
            "SELECT id, relation, path, rows FROM dml WHERE epoch IS NULL ORDER BY id")]

    def dml_batches(self, ids: list[int]) -> list[tuple[int, str, str, int]]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        return [(i, r, self._file(p), n) for i, r, p, n in self._all(
            f"SELECT id, relation, path, rows FROM dml WHERE id IN ({marks}) ORDER BY id", tuple(ids))]

    def staged_paths(self) -> set[str]:
        return {self._file(r[0]) for r in self._all("SELECT path FROM dml")}

    def consumed_dml(self) -> list[tuple[int, str]]:
        return [(i, self._file(p)) for i, p in self._all(
            "SELECT d.id, d.path FROM dml d JOIN epochs e ON d.epoch = e.epoch WHERE e.state = 'committed'")]

    def forget_dml(self, ids: list[int]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM dml WHERE id = ?", [(i,) for i in ids])

    # --- jobs -----------------------------------------------------------------------------------
    def job(self, job_id: int) -> JobRow | None:
        row = self._one(f"SELECT {_JOB_COLS} FROM jobs WHERE id = ?", (job_id,))
        return _job(row) if row else None

    def job_of(self, relation: str) -> JobRow | None:
        row = self._one(f"SELECT {_JOB_COLS} FROM jobs WHERE relation = ?", (relation,))
        return _job(row) if row else None

    def creating_job(self, job_id: int) -> JobRow:
        """The job `job_id`, which must still be creating (for ALTER / CANCEL)."""
        job = self.job(job_id)
        if job is None or not job.creating:
            known = ", ".join(str(j.id) for j in self.jobs() if j.creating) or "none"
            state = (f"no job with id {job_id}" if job is None else
                     f"job {job_id} ({job.relation}) is not creating: it finished at epoch {job.merged_epoch}")
            raise CatalogError(f"{state} (creating jobs: {known})")
        return job

    def jobs(self) -> list[JobRow]:
        return [_job(r) for r in self._all(f"SELECT {_JOB_COLS} FROM jobs ORDER BY id")]

    def update_job(self, db: sqlite3.Connection, job_id: int, **fields: Any) -> None:
        if "vnode_rows" in fields and fields["vnode_rows"] is not None:
            fields["vnode_rows"] = json.dumps(fields["vnode_rows"])
        sets = ", ".join(f"{k} = ?" for k in fields)
        db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def job_steps(self, job_id: int, since: float = 0.0) -> list[tuple]:
        """(step, phase, at, rows, epochs, lag_epochs, lag_ms, allowed_lag) oldest first."""
        return self._all("SELECT step, phase, at, rows, epochs, lag_epochs, lag_ms, allowed_lag FROM job_steps "
                         "WHERE job = ? AND at >= ? ORDER BY step", (job_id, since))

    def add_job_step(self, db: sqlite3.Connection, job_id: int, phase: str, rows: int, epochs: int,
                     lag_epochs: int, lag_ms: int, allowed_lag: float | None) -> None:
        row = db.execute("SELECT coalesce(max(step), 0) FROM job_steps WHERE job = ?", (job_id,)).fetchone()
        db.execute("INSERT INTO job_steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (job_id, row[0] + 1, phase, time.time(), rows, epochs, lag_epochs, lag_ms, allowed_lag))
        db.execute("DELETE FROM job_steps WHERE job = ? AND step <= ?", (job_id, row[0] + 1 - KEPT_JOB_STEPS))

    # --- a creating job's checkpoints (each one transaction) -------------------------------------
    def set_job_counts(self, job_id: int, vnode_rows: dict[str, list[int]]) -> None:
        """Each upstream snapshot's rows per vnode, counted once when the job starts reading them."""
        with self.transaction() as db:
            self.update_job(db, job_id, vnode_rows=vnode_rows, rows_total=sum(map(sum, vnode_rows.values())))

    def start_chunk(self, job_id: int, lo: int, hi: int, rows: int) -> None:
        """A chunk is in flight: a crash from here on re-reads it (and counts the attempt)."""
        with self.transaction() as db:
            db.execute("INSERT INTO job_chunks VALUES (?, ?, ?, ?, 'reading', 1, NULL) ON CONFLICT (job, lo) DO "
                       "UPDATE SET hi = excluded.hi, rows = excluded.rows, state = 'reading', "
                       "attempts = attempts + 1", (job_id, lo, hi, rows))

    def finish_chunk(self, job_id: int, lo: int, hi: int, rows: int, files: dict[str, list[str]], lag: Lag) -> None:
        with self.transaction() as db:
            db.execute("UPDATE job_chunks SET state = 'done', files = ? WHERE job = ? AND lo = ?",
                       (json.dumps({t: [self._stored(f) for f in fs] for t, fs in files.items()}), job_id, lo))
            db.execute("UPDATE jobs SET next_vnode = ?, rows_done = rows_done + ?, error = NULL WHERE id = ?",
                       (hi, rows, job_id))
            self.add_job_step(db, job_id, Phase.SNAPSHOT, rows, 0, lag.epochs, lag.ms, None)

    def start_log_store(self, job_id: int, epoch: int, bases: list[tuple[str, int, int, list[str]]],
                        lag: Lag, allowed: float) -> None:
        """The snapshot phase's end: each table's base `(relation, version, rows, files)` as of `epoch`."""
        with self.transaction() as db:
            for name, version, rows, files in bases:
                self.add_base(db, name, epoch, version, rows, files)
            self.update_job(db, job_id, phase=Phase.LOG_STORE, consumed_epoch=epoch, allowed_lag=allowed)
            self.add_job_step(db, job_id, Phase.LOG_STORE, 0, 0, lag.epochs, lag.ms, allowed)

    def log_store_checkpoint(self, job_id: int, holder: str, logs: list[tuple[str, int, str, int, int]],
                             through: int, epochs: int, rows: int, lag: Lag, allowed: float) -> None:
        """Log files `(relation, epoch, path, rows, version)` consumed up to `through`; the job's pin
        follows it, with the lag rule's new allowed lag."""
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO log_files VALUES (?, ?, ?, ?, ?)",
                           [(r, e, self._stored(p), n, v) for r, e, p, n, v in logs])
            self.update_job(db, job_id, consumed_epoch=through, allowed_lag=allowed, error=None)
            self.move_pin(db, holder, through)
            self.add_job_step(db, job_id, Phase.LOG_STORE, rows, epochs, lag.epochs, lag.ms, allowed)

    def merge_job(self, job_id: int, holder: str, relation: str, epoch: int) -> None:
        """The MV and its state tables join the main graph at `epoch`; the job's pins go."""
        with self.transaction() as db:
            db.execute("UPDATE relations SET state = 'created' WHERE name = ? OR (kind = 'state' AND "
                       "json_extract(definition, '$.owner') = ?)", (relation, relation))
            self.update_job(db, job_id, phase=Phase.CREATED, merged_epoch=epoch, finished_at=time.time(),
                            allowed_lag=None, error=None)
            db.execute("DELETE FROM pins WHERE holder = ?", (holder,))
            self.add_job_step(db, job_id, Phase.CREATED, 0, 0, 0, 0, 0)

    def count_held_back(self, job_id: int) -> None:
        with self.transaction() as db:
            db.execute("UPDATE jobs SET held_back = held_back + 1 WHERE id = ?", (job_id,))

    def set_job_error(self, job_id: int, error: str | None) -> None:
        with self.transaction() as db:
            self.update_job(db, job_id, error=error)

    def set_job_fields(self, job_id: int, **fields: Any) -> None:
        with self.transaction() as db:
            self.update_job(db, job_id, **fields)

    def job_chunks(self, job_id: int) -> list[Chunk]:
        """The snapshot phase's chunks by vnode."""
        return [Chunk(lo, hi, n, st, a, {t: [self._file(f) for f in fs] for t, fs in json.loads(f or "{}").items()})
                for lo, hi, n, st, a, f in self._all(
                    "SELECT lo, hi, rows, state, attempts, files FROM job_chunks WHERE job = ? ORDER BY lo", (job_id,))]

    def epochs_between(self, after: int, upto: int | None = None) -> list[int]:
        """Planned or committed epochs in `(after, upto]` (upto: unbounded if None)."""
        if upto is None:
            return [r[0] for r in self._all("SELECT epoch FROM epochs WHERE epoch > ? ORDER BY epoch", (after,))]
        return [r[0] for r in self._all("SELECT epoch FROM epochs WHERE epoch > ? AND epoch <= ? ORDER BY epoch",
                                        (after, upto))]

    def log_file_rows(self, relation: str, after: int, upto: int) -> list[tuple[int, int]]:
        """(epoch, rows) of the log files of epochs in `(after, upto]`."""
        return self._all("SELECT epoch, rows FROM log_files WHERE relation = ? AND epoch > ? AND epoch <= ? "
                         "ORDER BY epoch", (relation, after, upto))

    def add_request(self, job_id: int, kind: str, value: int | None) -> int:
        with self.transaction() as db:
            return int(db.execute("INSERT INTO requests (job, kind, value, requested_at) VALUES (?, ?, ?, ?)",
                                  (job_id, kind, value, time.time())).lastrowid or 0)

    def pending_requests(self) -> list[Request]:
        return [Request(*r) for r in self._all("SELECT id, job, kind, value FROM requests WHERE applied_at IS NULL "
                                               "ORDER BY id")]

    def request_outcome(self, request_id: int) -> str | None:
        row = self._one("SELECT outcome FROM requests WHERE id = ? AND applied_at IS NOT NULL", (request_id,))
        return row[0] if row else None

    def finish_request(self, request_id: int, outcome: str) -> None:
        with self.transaction() as db:
            db.execute("UPDATE requests SET applied_at = ?, outcome = ? WHERE id = ?",
                       (time.time(), outcome, request_id))

    # --- pins -----------------------------------------------------------------------------------
    def add_pin(self, relation: str, epoch: int, holder: str, db: sqlite3.Connection | None = None) -> None:
        if db is None:
            with self.transaction() as db:
                self.add_pin(relation, epoch, holder, db)
            return
        db.execute("INSERT INTO pins (relation, epoch, holder) VALUES (?, ?, ?)", (relation, epoch, holder))

    def remove_pins(self, holder: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM pins WHERE holder = ?", (holder,))

    def move_pin(self, db: sqlite3.Connection, holder: str, epoch: int) -> None:
        db.execute("UPDATE pins SET epoch = ? WHERE holder = ?", (epoch, holder))

    def min_pin(self, relation: str) -> int | None:
        row = self._one("SELECT min(epoch) FROM pins WHERE relation = ?", (relation,))
        return row[0] if row and row[0] is not None else None


_REL_COLS = "name, kind, schema, definition, created_epoch, state"
_SINK_COLS = "name, mv, sink_id, spec, decouple, job"


def _sink(row: tuple) -> SinkRow:
    return SinkRow(row[0], row[1], row[2], json.loads(row[3]), bool(row[4]), row[5])


def _relation(row: tuple) -> Relation:
    return Relation(row[0], row[1], Schema.from_json(json.loads(row[2])), json.loads(row[3]), row[4], row[5])


def _job(row: tuple) -> JobRow:
    vals = list(row)
    vals[3] = Phase(vals[3])
    counts = json.loads(vals[9]) if vals[9] else None
    vals[9] = {ALL_UPSTREAMS: counts} if isinstance(counts, list) else counts
    return JobRow(*vals)
