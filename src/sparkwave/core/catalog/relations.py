"""Relations: tables, sources, MVs and their operator state tables, with their schema and their
definition (the JSON that CREATE stored), and the folders no relation holds while a CREATE or DROP
is under way (`pending_folders`, what recovery may delete)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkwave.core.catalog.backend import INTEGRITY_ERRORS, CatalogDb
from sparkwave.core.catalog.files import DELTA_RETIRE
from sparkwave.core.catalog.jobs import Phase
from sparkwave.core.catalog.pins import PinsMixin
from sparkwave.core.errors import CatalogError
from sparkwave.core.schema import Schema

# the tables whose rows belong to one relation (column `relation`), besides `dml`
RELATION_TABLES = ("log_files", "bases", "base_files", "source_offsets", "source_errors", "source_error_counts",
                   "source_snapshots", "pins", "watermarks", "late_rows",
                   "judged_ranges")


@dataclass(frozen=True)
class Definition:
    """A typed view of the keys a relation's definition may have. The catalog stores the
    definition as the JSON object CREATE made (`Relation.definition`); this reads it."""

    sql: str = ""  # the CREATE statement's text
    upstreams: tuple[str, ...] = ()  # the relations an MV reads
    query: str | None = None  # an MV's query (the text after AS)
    dataflow: dict[str, Any] | None = None  # an MV's operator tree (stream/plan.py)
    outputs: tuple[tuple[str, str], ...] = ()  # an MV's (column, root column)
    states: tuple[str, ...] = ()  # the suffixes of an MV's operator state tables
    backfill_strategy: str | None = None  # an MV's
    sink: str | None = None  # the sink whose query an MV holds
    owner: str | None = None  # a state table's MV
    on_conflict: str = "overwrite"  # a table's INSERT of a key it holds
    connector: dict[str, str] | None = None  # a Kafka table's or source's WITH options
    startup_offsets: dict[str, int] = field(default_factory=dict)  # where a source backfill starts

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> Definition:
        return cls(sql=d.get("sql", ""), upstreams=tuple(d.get("upstreams", ())), query=d.get("query"),
                   dataflow=d.get("dataflow"), outputs=tuple((m, i) for m, i in d.get("outputs", ())),
                   states=tuple(d.get("states", ())), backfill_strategy=d.get("backfill_strategy"),
                   sink=d.get("sink"), owner=d.get("owner"), on_conflict=d.get("on_conflict", "overwrite"),
                   connector=d.get("connector"), startup_offsets=d.get("startup_offsets", {}))


@dataclass(frozen=True)
class Relation:
    name: str
    kind: str  # 'table' | 'source' (stores nothing) | 'mv' | 'state' (an MV's operator state, '<mv>.<suffix>')
    schema: Schema
    definition: dict[str, Any]  # as stored (JSON); `spec` reads it typed
    created_epoch: int
    state: str = "created"  # 'creating' while its job backfills, 'failed' once isolated: outside the main graph

    @property
    def upstreams(self) -> list[str]:
        return list(self.definition.get("upstreams", []))

    @property
    def spec(self) -> Definition:
        return Definition.of(self.definition)


_REL_COLS = "name, kind, schema, definition, created_epoch, state"


def _relation(row: tuple) -> Relation:
    return Relation(row[0], row[1], Schema.from_json(json.loads(row[2])), json.loads(row[3]), row[4], row[5])


class RelationsMixin(PinsMixin):
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

    def add_relation(self, db: CatalogDb, rel: Relation, strategy: str = "-",
                     upstream: str | None = None) -> int:
        """Add a relation and its job; returns the job id."""
        if db.execute("SELECT 1 FROM sinks WHERE name = ?", (rel.name,)).fetchone():
            raise CatalogError(f"{rel.name!r} already exists: it is a sink")
        try:
            db.execute(f"INSERT INTO relations ({_REL_COLS}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (rel.name, rel.kind, json.dumps(rel.schema.to_json()), json.dumps(rel.definition),
                        rel.created_epoch, rel.state, time.time()))
        except INTEGRITY_ERRORS:
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

    def remove_relation(self, db: CatalogDb, name: str) -> None:
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
        db.execute("DELETE FROM settings WHERE key IN (?, ?)", (f"retained_from.{name}", DELTA_RETIRE + name))
        for table in (*RELATION_TABLES, "dml"):
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
