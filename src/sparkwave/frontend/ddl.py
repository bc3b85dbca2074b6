"""DDL: CREATE TABLE, CREATE MATERIALIZED VIEW (with its backfill strategy) and DROP."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlglot import exp

from sparkwave.connectors import SOURCE_CONNECTORS, connector_class, make_connector, refuse_shared
from sparkwave.connectors.postgres_cdc_release import hold, release_held
from sparkwave.core.catalog import CatalogDb, Relation
from sparkwave.core.crash import crash_point
from sparkwave.core.errors import CatalogError
from sparkwave.core.names import relation_name
from sparkwave.core.schema import Column, Schema, column_name_problem, parse_type
from sparkwave.frontend.plan.generated import compiled
from sparkwave.frontend.plan.proctime import check_key
from sparkwave.frontend.planner import Planner
from sparkwave.frontend.progress_bars import JobBars
from sparkwave.frontend.statements import CreateMaterializedView, CreateSink, CreateTable, Drop, Statement
from sparkwave.frontend.watermark_ddl import declared
from sparkwave.meta.barrier import BarrierLoop
from sparkwave.meta.creating_job import Strategy
from sparkwave.meta.jobs import FOREGROUND_FAILURES, CreatingJobs
from sparkwave.meta.locks import Locks
from sparkwave.meta.progress import job_infos
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.settings import SPECS, Settings
from sparkwave.storage.compaction import write_base
from sparkwave.storage.state import state_name
from sparkwave.stream.dataflow import Dataflow, resolved
from sparkwave.stream.plan import state_schemas

log = logging.getLogger("sparkwave.ddl")
ABANDON_AFTER_SECONDS = 5.0  # a DROP waits this long for the running epoch, then abandons it


def _declared_columns(stmt: CreateTable, name: str) -> tuple[list[Column], list[str]]:
    """A CREATE TABLE's columns, each checked, and its primary key as declared."""
    columns: list[Column] = []
    key: list[str] = []
    for item in stmt.ast.this.expressions:
        if isinstance(item, exp.ColumnDef):
            cname = item.this.name.lower()
            if problem := column_name_problem(cname):
                raise stmt.error(f"column name {cname!r} {problem}; choose another name", cname)
            if any(c.name == cname for c in columns):
                raise stmt.error(f"duplicate column {cname!r}", cname)
            if item.args.get("kind") is None:
                raise stmt.error(f"column {cname!r} needs a type", cname)
            columns.append(Column(cname, parse_type(item.args["kind"].sql(dialect="postgres"))))
            if any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in item.constraints):
                key.append(cname)
        elif isinstance(item, exp.PrimaryKey):
            key.extend(i.name.lower() for i in item.expressions)
        else:
            raise stmt.error(f"unsupported table element {item.sql(dialect='postgres')!r}")
    if not columns and stmt.options.get("connector"):
        columns = connector_class(name, stmt.options).table_columns(stmt.options) or []
    if not columns:
        raise stmt.error(f"table {name!r} needs at least one column")
    return columns, key


class Ddl:
    progress_bars = True  # a foreground CREATE draws its job's progress on a terminal (not in `sparkwave serve`)
    # per thread: called while a foreground CREATE waits for its job; raising ends the wait (a client's cancel)
    waiting = threading.local()

    def __init__(self, rt: Runtime, locks: Locks, creating: CreatingJobs, loop: BarrierLoop) -> None:
        self.rt = rt
        self.loop = loop
        self.catalog = rt.catalog
        self.warehouse = rt.warehouse
        self.spark = rt.spark
        self.locks = locks
        self.creating = creating

    def _exists(self, stmt: CreateTable | CreateMaterializedView, name: str) -> bool:
        """Whether CREATE ... IF NOT EXISTS has nothing to do; an error if the name is taken."""
        if self.catalog.relation(name) is None:
            return False
        if stmt.if_not_exists:
            return True
        raise CatalogError(f"relation {name!r} already exists (at {stmt.where(name)})", sqlstate="42P07",
                           at=stmt.at(name))

    def create_table(self, stmt: CreateTable) -> None:
        """CREATE TABLE, or CREATE SOURCE (`relation_kind` 'source'): a Kafka relation that stores
        nothing; the main graph hands what it reads each epoch to the MVs over it, and an MV created
        later reads the history from Kafka (a source backfill)."""
        kind = stmt.relation_kind
        table = stmt.ast.this.this
        if table.args.get("db") or table.args.get("catalog"):
            raise stmt.error(f"schema-qualified table names are not supported: {table.sql(dialect='postgres')}",
                             table.name)
        name = relation_name(table.name, f" (at {stmt.where(table.name)})")
        if self._exists(stmt, name):
            return
        columns, key = _declared_columns(stmt, name)
        options = stmt.options
        if options and "connector" not in options:
            raise stmt.error("WITH options of a table need connector = '...'", "WITH")
        if options:
            for extra in connector_class(name, options).extra_columns(options):
                if problem := column_name_problem(extra.name):
                    raise stmt.error(f"column name {extra.name!r} {problem}; choose another name", extra.name)
                if any(c.name == extra.name for c in columns):
                    raise stmt.error(f"column {extra.name!r} is taken by the connector's metadata column "
                                     "(INCLUDE ... AS another name)", extra.name)
                columns.append(extra)
        for k in key:
            if not any(c.name == k for c in columns):
                raise stmt.error(f"primary key column {k!r} is not a column of {name!r}", k)
        append_only = stmt.append_only
        if append_only and key:
            raise stmt.error("an APPEND ONLY table has no primary key", "APPEND ONLY")
        if options and not key:
            append_only = True
        if not key:
            columns.append(Column("_row_id", parse_type("bigint"), hidden=True))
            key = ["_row_id"]
        schema = Schema(tuple(columns), tuple(key), append_only)
        definition: dict[str, Any] = {"sql": stmt.text, "upstreams": []}
        if stmt.proctime:  # `col TIMESTAMPTZ AS PROCTIME()`: filled in by the table's step (`plan/proctime.py`)
            check_key(stmt, stmt.proctime, key)
            definition["proctime"] = list(stmt.proctime)
        if stmt.generated:  # `col type AS expr`: computed by the table's step (`plan/generated.py`)
            if kind == "source":
                raise stmt.error("a source has no generated column: its rows are not stored; create a TABLE with "
                                 "the column instead, or compute it in a materialized view", stmt.generated[0][0])
            definition["generated"] = compiled(stmt, columns, stmt.generated, stmt.proctime, self.spark)
        if (watermark := declared(stmt, schema)) is not None:
            definition["watermark"] = watermark.to_json()
        if (on_conflict := stmt.on_conflict) is not None:
            if append_only or key == ["_row_id"]:
                raise stmt.error("ON CONFLICT needs a PRIMARY KEY: a table without one never has a conflict",
                                 "ON CONFLICT")
            if on_conflict != "overwrite":
                definition["on_conflict"] = on_conflict
        if kind == "source":
            if options.get("connector") not in SOURCE_CONNECTORS:
                raise stmt.error(f"CREATE SOURCE needs WITH (connector = {' | '.join(map(repr, SOURCE_CONNECTORS))}, "
                                 "...)", "SOURCE")
            if not schema.append_only or options.get("format", "plain") != "plain":
                raise stmt.error("a source is append-only: FORMAT PLAIN and no PRIMARY KEY (FORMAT UPSERT and "
                                 "DEBEZIUM need a TABLE, which stores the rows by key)", "SOURCE")
        offsets: dict[str, int] = {}
        if options:
            conn = make_connector(name, schema, options, definition.get("generated", {}))  # validates the options
            try:
                refuse_shared(conn, self.catalog.relations(creating=True))
                offsets = conn.initial_offsets()  # reaches the outside system: an error here creates nothing
            finally:
                conn.close()
            definition["connector"] = options
            definition["startup_offsets"] = offsets  # where a source backfill starts
        with self.locks.epoch:
            rel = Relation(name, kind, schema, definition, self.catalog.committed_epoch())
            with self._new_folder([name]):
                if kind == "source":
                    self.rt.stored(rel).log_path.mkdir(parents=True, exist_ok=True)  # an epoch's rows, staged
                else:
                    self.rt.stored(rel).create()
                with self.catalog.transaction() as db:
                    self.catalog.add_relation(db, rel)
                    self.catalog.set_source_offsets(db, name, offsets)

    @contextmanager
    def _new_folder(self, names: list[str]) -> Iterator[None]:
        """The folder of a relation being created (`names`: it, then its state tables), recorded as
        sparkwave's before it is made (recovery may delete it), and removed again if the CREATE
        fails before the catalog has the relation: a CREATE of the same name would find its Delta
        tables otherwise."""
        if self.catalog.relation(names[0]) is not None:  # before anything is made: the folder is its owner's
            raise CatalogError(f"relation {names[0]!r} already exists", sqlstate="42P07")
        self.catalog.folder_pending(names[0])
        try:
            yield
        except BaseException:
            for n in names:
                self.rt.forget(n)
            self.warehouse.remove_tree(self.warehouse.relation_dir(names[0]))
            self.catalog.folder_removed(names[0])
            raise


    def plan_schema(self, stmt: CreateSink, name: str) -> Schema:
        """The schema an MV of the statement's query would have (nothing is created)."""
        assert stmt.ast is not None
        return Planner(stmt, self.rt.relation, self.spark).plan(stmt.ast).schema

    def create_mv(self, stmt: CreateMaterializedView, sink: str | None = None) -> None:
        """CREATE MATERIALIZED VIEW; `sink` names the sink whose AS SELECT this MV holds."""
        name = relation_name(stmt.name, f" (at {stmt.where(stmt.name)})")
        if self._exists(stmt, name):
            return
        options = {k.lower(): v for k, v in stmt.options.items()}
        unknown = set(options) - {"backfill_strategy"}
        if unknown:
            raise stmt.error(f"unknown option(s) {', '.join(sorted(unknown))} for CREATE MATERIALIZED VIEW", "WITH")
        settings = Settings(self.catalog)
        strategy = options.get("backfill_strategy", settings.backfill_strategy).lower()
        if strategy not in tuple(Strategy):
            raise stmt.error(SPECS["backfill_strategy"].error("backfill_strategy", strategy), "backfill_strategy")
        plan = Planner(stmt, self.rt.relation, self.spark).plan(stmt.ast)
        self._check_upstreams(stmt, name, plan.upstreams)
        if not plan.upstreams:
            strategy = "blocking"  # constant rows: nothing to backfill while the pipeline runs
        schemas = state_schemas(plan.root)
        definition = {"sql": stmt.text, "query": stmt.query, "upstreams": plan.upstreams,
                      "dataflow": plan.root.to_json(), "outputs": [list(o) for o in plan.outputs],
                      "states": list(schemas), "backfill_strategy": strategy}
        if sink is not None:
            definition["sink"] = sink
        state = "created" if strategy == "blocking" else "creating"

        def relations(epoch: int) -> list[Relation]:  # the MV, then its state tables
            rel = Relation(name, "mv", plan.schema, definition, epoch, state=state)
            return [rel] + [Relation(state_name(name, sfx), "state", sch, {"owner": name, "upstreams": []},
                                     epoch, state=state) for sfx, sch in schemas.items()]

        # Between two epochs, as a DROP is: a DROP of the same name (which removes the folder after its
        # catalog transaction) or of an upstream cannot interleave with the folder's making and the
        # registration.
        with self.locks.epoch, self._new_folder([t.name for t in relations(0)]):
            for t in relations(0):
                self.rt.stored(t).create()
            job_id = self._register_mv(stmt, plan.upstreams, strategy, settings, relations)
        if job_id is None:
            return
        self.creating.start(job_id)
        if not settings.background_ddl:
            self._wait_foreground(job_id)

    def _register_mv(self, stmt: CreateMaterializedView, upstreams: list[str], strategy: str, settings: Settings,
                     relations: Callable[[int], list[Relation]]) -> int | None:
        """S, the committed epoch, then the MV and its state tables in the catalog: with its creating
        job (returned), or built whole (blocking: None; between two epochs, under `locks.epoch`).

        Called under `locks.epoch` (`create_mv`). A creating job's registration is one catalog
        transaction: S, the sources' offsets at S, the upstreams' state and the pins at S agree. A DROP
        also checks for dependents in the transaction that removes the relation, and a creating job
        whose upstream the main graph stopped meanwhile does not merge (`CreatingJob._merge`)."""
        if strategy != "blocking":
            with self.catalog.transaction() as db:
                self._check_upstreams(stmt, relations(0)[0].name, upstreams)  # again, as of S
                epoch = self.catalog.committed_epoch()
                self._record_source_snapshots(db, upstreams, epoch)
                tables = relations(epoch)
                job_id = self.creating.register(db, tables[0], upstreams, Strategy(strategy))
                if settings.backfill_rate_limit is not None:
                    self.catalog.update_job(db, job_id, rate_limit=settings.backfill_rate_limit)
                for t in tables[1:]:
                    self.catalog.add_relation(db, t)
            return job_id
        with self.locks.epoch:
            self._check_upstreams(stmt, relations(0)[0].name, upstreams)  # again: the loop may have stopped one
            epoch = self.catalog.committed_epoch()
            tables = relations(epoch)
            with self.catalog.transaction() as db:
                self._record_source_snapshots(db, upstreams, epoch)
            flow = Dataflow(self.rt, tables[0])
            try:
                built = flow.build(epoch, big_epoch_rows=settings.big_epoch_rows)
                bases = [write_base(self.rt, t, resolved(built[t.name]), epoch, crash_name="mid_backfill",
                                    record=False) for t in tables]
            finally:
                flow.release()
            with self.catalog.transaction() as db:
                self.catalog.add_relation(db, tables[0], "blocking", upstreams[0] if upstreams else None)
                for t, b in zip(tables, bases, strict=True):
                    if t is not tables[0]:
                        self.catalog.add_relation(db, t)
                    self.catalog.add_base(db, t.name, epoch, b.version, sum(b.rows), b.files)
        return None

    def _record_source_snapshots(self, db: CatalogDb, upstreams: list[str], epoch: int) -> None:
        """Each source upstream's history at S (`_source_snapshot`), for the job to read from Kafka."""
        for u in upstreams:
            if self.rt.relation(u).kind == "source":
                self.catalog.record_source_snapshot(db, u, epoch, self._source_snapshot(u))

    def _source_snapshot(self, name: str) -> dict[str, list[int]]:
        """A source's history at the committed epoch: each partition from its startup offset to the
        offset committed (a partition added since CREATE SOURCE starts at 0)."""
        startup = self.rt.relation(name).definition.get("startup_offsets", {})
        return {s: [startup.get(s, 0), end] for s, end in self.catalog.source_offsets(name).items()
                if end > startup.get(s, 0)}

    def _wait_foreground(self, job_id: int) -> None:
        if not sys.stderr.isatty() or not self.progress_bars:
            self.creating.wait_created([job_id], give_up_after=FOREGROUND_FAILURES,
                                       on_progress=getattr(self.waiting, "check", None))
            return
        with JobBars() as bars:
            self.creating.wait_created([job_id], give_up_after=FOREGROUND_FAILURES, on_progress=lambda: bars.update(
                [j for j in job_infos(self.catalog) if j.id == job_id]))

    def _check_upstreams(self, stmt: Statement, name: str, upstreams: list[str]) -> None:
        for u in upstreams:
            upstream = self.rt.relation(u)
            if upstream.state == "failed":
                raise CatalogError(f"cannot create {name!r} on {u!r}: {u!r} is stopped, out of the pipeline (SHOW "
                                   f"JOBS says why); DROP and create it again first (at {stmt.where(u)})")
            if upstream.state != "created":
                job = self.catalog.job_of(u)
                raise CatalogError(f"cannot create {name!r} on {u!r}: {u!r} is itself still being created "
                                   f"(job {job.id if job else '?'}); WAIT for it first (at {stmt.where(u)})")

    def drop(self, stmt: Drop) -> None:
        name = stmt.name
        rel = self.catalog.relation(name)
        if rel is None:
            if stmt.if_exists:
                return
            raise CatalogError(f"cannot drop {name!r}: no such table or materialized view (at {stmt.where(name)})",
                               sqlstate="42P01", at=stmt.at(name))
        if rel.kind != stmt.what:
            what = {"table": "a table", "source": "a source"}.get(rel.kind, "a materialized view")
            raise stmt.error(f"cannot drop {name!r} this way: it is {what}", name)
        job = self.catalog.job_of(name)
        if job is not None and job.creating:
            try:
                self.creating.cancel(job.id)  # its partial table, progress and pins go with it
                return
            except CatalogError:
                if (now := self.catalog.job_of(name)) is None or now.creating:
                    raise
                # it merged before the cancel took effect: dropped below as any MV
        if (sink := rel.spec.sink) and self.catalog.sink(sink) is not None:
            raise CatalogError(f"cannot drop {name!r}: it holds the query of sink {sink!r}; DROP SINK {sink} drops "
                               "both")
        self.drop_relation(name)

    @contextmanager
    def _between_epochs(self) -> Iterator[None]:
        """`locks.epoch`, for a DROP: an epoch that holds it past `ABANDON_AFTER_SECONDS` (a huge
        replay, a source that hangs: perhaps the very relation being dropped) is abandoned rather
        than waited for; its plan is replayed after the DROP."""
        epoch = self.locks.epoch
        abandoned = not epoch.acquire(timeout=ABANDON_AFTER_SECONDS)
        if abandoned:
            log.warning("DROP: the running epoch has held the pipeline for %.0f s; abandoning it",
                        ABANDON_AFTER_SECONDS)
            try:
                self.loop.abandon()
            except Exception:  # Spark would not take the cancel: the DROP waits for the epoch, as before
                log.exception("could not cancel the running epoch's Spark jobs")
            epoch.acquire()
        try:
            yield
        finally:
            if abandoned:
                self.loop.resume()  # before the release: the next epoch starts with the DROP done
            epoch.release()

    def dependents(self, name: str) -> list[tuple[str, str]]:
        """What `DROP ... CASCADE` drops before `name`, deepest first: ("sink" | "mv", name) for every
        MV reading it (transitively) and every sink delivering one of them or it."""
        relations = self.catalog.relations(creating=True)
        sinks = self.catalog.sinks()
        out: list[tuple[str, str]] = []
        seen: set[str] = set()

        def visit(rel: str) -> None:
            for r in relations:
                if rel in r.upstreams and r.name not in seen:
                    seen.add(r.name)
                    visit(r.name)
                    if not (r.definition.get("sink") and any(s.name == r.definition["sink"] for s in sinks)):
                        out.append(("mv", r.name))  # an MV holding a sink's query goes with its sink
            for s in sinks:
                if s.mv == rel and s.name not in seen:
                    seen.add(s.name)
                    out.append(("sink", s.name))

        visit(name)
        return out

    def drop_relation(self, name: str) -> None:
        """Drop a table or MV that no MV or sink depends on."""
        with self.locks.ddl, self._between_epochs():
            hold(self.catalog, self.catalog.relation(name))  # released below, or when the warehouse opens again
            with self.catalog.transaction() as db:  # the check too: a CREATE registers without `locks.epoch`
                dependents = [r.name for r in self.catalog.relations(creating=True) if name in r.upstreams]
                if dependents:
                    raise CatalogError(f"cannot drop {name!r}: materialized view(s) {', '.join(dependents)} depend "
                                       "on it; drop them first")
                sinks = [s.name for s in self.catalog.sinks() if s.mv == name]
                if sinks:
                    raise CatalogError(f"cannot drop {name!r}: sink(s) {', '.join(sinks)} deliver it; DROP SINK first")
                rel = self.catalog.relation(name)
                self.catalog.remove_relation(db, name)
            self.rt.forget(name)
            self.warehouse.remove_tree(self.warehouse.relation_dir(name))
            self.catalog.folder_removed(name)
        if rel is not None and rel.spec.connector:
            crash_point("drop_before_release")
            release_held(self.catalog, rel.name)  # an upstream out of reach: the log says so, the next open retries
