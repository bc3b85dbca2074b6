"""The Session: the owner of a warehouse, its barrier loop and its SQL entry point."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from sparkwave.connectors import make_connector
from sparkwave.errors import CatalogError, SparkwaveError, SqlError
from sparkwave.frontend import dml
from sparkwave.frontend.control import creating_job_of
from sparkwave.frontend.planner import Planner
from sparkwave.frontend.statements import Statement, parse, rate_limit_value
from sparkwave.meta.barrier import BarrierLoop, EpochReport
from sparkwave.meta.catalog import Catalog, Relation
from sparkwave.meta.creating_job import Strategy
from sparkwave.meta.jobs import FOREGROUND_FAILURES, CreatingJobs
from sparkwave.meta.locks import Locks
from sparkwave.meta.ownership import Ownership
from sparkwave.meta.progress import JobInfo, job_infos
from sparkwave.meta.runtime import Runtime
from sparkwave.spark import configure, create_spark
from sparkwave.storage.compaction import compact, write_base
from sparkwave.storage.retention import apply_retention
from sparkwave.storage.schema import RESERVED_COLUMNS, Column, Schema, parse_type
from sparkwave.storage.state import state_name, state_relations
from sparkwave.storage.warehouse import Warehouse
from sparkwave.stream.dataflow import Dataflow
from sparkwave.stream.plan import state_purpose, state_schemas

log = logging.getLogger("sparkwave")

SETTINGS = {
    "retention_seconds": ("3600", "how long committed epochs stay readable with as_of"),
    "compaction_epochs": ("50", "log epochs since the base that trigger a compaction"),
    "backfill_strategy": ("snapshot", "how CREATE MATERIALIZED VIEW fills a new MV: snapshot | rearranged | "
                                      "blocking"),
    "background_ddl": ("false", "true: CREATE MATERIALIZED VIEW returns at once; the job backfills in the background"),
    "backfill_rate_limit": ("default", "rows per second per new creating job; default = unlimited, 0 = paused"),
    "backfill_chunk_rows": ("10000000", "at most this many snapshot rows per checkpoint of a creating job"),
}
STRATEGIES = tuple(Strategy)


def connect(warehouse: str | os.PathLike[str], *, spark: SparkSession | None = None,
            barrier_interval_ms: int = 1000, on_epoch: Callable[[EpochReport], None] | None = None) -> Session:
    """Open (creating or recovering) a warehouse and start its barrier loop."""
    return Session(warehouse, spark=spark, barrier_interval_ms=barrier_interval_ms, on_epoch=on_epoch)


class Session:
    """Owns a warehouse while open. `sql()` runs statements; the barrier loop runs in a background
    thread and commits an epoch every `barrier_interval_ms` (or at once on `flush()`)."""

    def __init__(self, warehouse: str | os.PathLike[str], *, spark: SparkSession | None = None,
                 barrier_interval_ms: int = 1000, on_epoch: Callable[[EpochReport], None] | None = None) -> None:
        if barrier_interval_ms <= 0:
            raise SparkwaveError("barrier_interval_ms must be positive")
        self.warehouse = Warehouse(warehouse)
        self.warehouse.create()
        self._ownership = Ownership(self.warehouse.owner_path)
        self._ownership.acquire()
        try:
            if spark is None:
                spark = create_spark()
            else:
                configure(spark)
            self.spark = spark
            self.catalog = Catalog(self.warehouse.catalog_path)
            self.rt = Runtime(spark, self.warehouse, self.catalog)
            self.locks = Locks()
            self.loop = BarrierLoop(self.rt, self.locks, barrier_interval_ms, on_epoch)
            self.creating = CreatingJobs(self.rt, self.locks, self.loop.nudge, self.loop, self.loop.request_barrier)
            self.creating.chunk_rows = int(self._setting("backfill_chunk_rows"))
            self.loop.jobs = self.creating
            self._recover()
            self.loop.start()
            self.creating.resume_all()
            self._closed = False
            self._compactor_stop = threading.Event()
            self._compactor = threading.Thread(target=self._compact_loop, name="sparkwave-compactor", daemon=True)
            self._compactor.start()
        except BaseException:
            self._ownership.release()
            raise

    # --- lifecycle -----------------------------------------------------------------------------
    def _recover(self) -> None:
        known = {r.name for r in self.catalog.relations(creating=True)}
        for name in self.warehouse.relation_dirs():
            if name not in known:  # a DDL that crashed before its catalog commit
                self.warehouse.remove_tree(self.warehouse.relation_dir(name))
        with self.catalog.transaction() as db:
            for table in ("log_files", "bases", "base_files", "source_offsets", "pins"):
                db.execute(f"DELETE FROM {table} WHERE relation NOT IN (SELECT name FROM relations)")
        staged = self.catalog.staged_paths()
        for entry in os.listdir(self.warehouse.staging_dir()):
            path = str(self.warehouse.staging_dir() / entry)
            if path not in staged:
                self.warehouse.remove_tree(self.warehouse.staging_dir() / entry)
        self.loop.recover()

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._compactor_stop.set()
        self.creating.stop()
        self.loop.stop()
        self._compactor.join()
        self.catalog.close()
        self._ownership.release()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SparkwaveError("this session is closed")

    # --- public API ----------------------------------------------------------------------------
    def sql(self, text: str) -> DataFrame | None:
        """Run one or more `;`-separated statements; returns the last statement's result."""
        self._check_open()
        result = None
        for stmt in parse(text):
            result = self._execute(stmt)
        return result

    def flush(self) -> int:
        self._check_open()
        return self.loop.flush()

    @property
    def committed_epoch(self) -> int:
        return self.catalog.committed_epoch()

    def table(self, name: str, as_of: int | None = None) -> DataFrame:
        rel = self._readable(name.lower())
        epoch = self.committed_epoch if as_of is None else as_of
        return self.rt.visible(rel, epoch)

    def insert(self, table: str, data: Any) -> int:
        """Bulk-load rows from a pyarrow Table, a pandas DataFrame or a Spark DataFrame."""
        self._check_open()
        rel = self.rt.relation(table.lower())
        if isinstance(data, DataFrame):
            return dml.insert_frame(self.rt, rel, data)
        if hasattr(data, "to_records") and hasattr(data, "columns"):
            data = pa.Table.from_pandas(data, preserve_index=False)
        if not isinstance(data, pa.Table):
            raise SparkwaveError(f"insert into {table!r}: expected a pyarrow Table, pandas DataFrame or Spark "
                                 f"DataFrame, got {type(data).__name__}")
        return dml.insert_arrow(self.rt, rel, data)

    def jobs(self) -> list[JobInfo]:
        """Every job with its phase and, while creating, its progress."""
        return job_infos(self.catalog)

    def wait(self) -> None:
        """Block until every creating job has joined the main graph."""
        self._check_open()
        self.creating.wait_created()

    def _readable(self, name: str) -> Relation:
        rel = self.rt.relation(name)
        if rel.state != "created":
            job = self.catalog.job_of(name)
            raise CatalogError(f"materialized view {name!r} is still being created (job {job.id if job else '?'}); "
                               "WAIT for it or watch SHOW JOBS")
        return rel

    def compact(self, name: str | None = None) -> list[str]:
        """Compact now (every relation, or `name`) at the committed epoch, then apply retention."""
        self._check_open()
        done = []
        epoch = self.committed_epoch
        rels = [self._readable(name.lower())] if name else self.catalog.relations(internal=True)
        for rel in rels:
            if self._maintain(rel, epoch):
                done.append(rel.name)
        return done

    def _maintain(self, rel: Relation, epoch: int) -> bool:
        """Compact `rel` at `epoch` and apply retention; returns whether it compacted. Under the ddl
        lock, so that a DROP waits; retention also between two epochs, so that no epoch is reading
        the files it removes (lock order: ddl, then epoch; see meta/locks.py)."""
        with self.locks.ddl:
            if self.catalog.relation(rel.name) is None:  # dropped meanwhile
                return False
            compacted = compact(self.rt, rel, epoch)
            with self.locks.epoch:
                apply_retention(self.rt, rel, float(self._setting("retention_seconds")))
        return compacted

    def _setting(self, key: str) -> str:
        return self.catalog.setting(f"config.{key}", SETTINGS[key][0]) or SETTINGS[key][0]

    def _compact_loop(self) -> None:
        while not self._compactor_stop.wait(max(1.0, self.loop.interval_ms / 1000 * 5)):
            try:
                threshold = int(self._setting("compaction_epochs"))
                epoch = self.committed_epoch
                for rel in self.catalog.relations(internal=True):
                    if self._compactor_stop.is_set():
                        return
                    base = self.catalog.base_at(rel.name, epoch)
                    n, _ = self.catalog.log_rows_since(rel.name, base.epoch if base else 0)
                    if n >= threshold:
                        self._maintain(rel, epoch)
            except Exception:
                log.exception("compaction failed; it will be retried")

    # --- statements ----------------------------------------------------------------------------
    def _execute(self, stmt: Statement) -> DataFrame | None:
        handler = getattr(self, f"_do_{stmt.kind}")
        return handler(stmt)

    def _do_flush(self, stmt: Statement) -> None:
        self.flush()

    def _do_wait(self, stmt: Statement) -> None:
        self.wait()

    def _do_set(self, stmt: Statement) -> None:
        key, value = stmt.args["key"], stmt.args["value"].lower()
        if key not in SETTINGS:
            raise stmt.error(f"unknown setting {key!r}; known: {', '.join(SETTINGS)}", key)
        if key == "backfill_strategy":
            if value not in STRATEGIES:
                raise stmt.error(f"unknown backfill strategy {value!r}; supported: {', '.join(STRATEGIES)}", value)
        elif key == "background_ddl":
            if value not in ("true", "false", "on", "off"):
                raise stmt.error(f"setting background_ddl needs true or false, got {value!r}", value)
            value = "true" if value in ("true", "on") else "false"
        elif key == "backfill_rate_limit":
            limit = rate_limit_value(stmt, value)
            value = "default" if limit is None else str(limit)
        else:
            try:
                if float(value) < 0 or (key == "backfill_chunk_rows" and int(value) < 1):
                    raise ValueError
            except ValueError:
                raise stmt.error(f"setting {key} needs a non-negative number, got {value!r}", value) from None
            if key == "backfill_chunk_rows":
                self.creating.chunk_rows = int(value)
        self.catalog.set_setting(f"config.{key}", value)

    def _do_cancel(self, stmt: Statement) -> None:
        for job_id in stmt.args["ids"]:
            self.creating.creating_job(job_id)  # every id is checked before any is cancelled
        for job_id in stmt.args["ids"]:
            self.creating.cancel(job_id)

    def _do_alter_rate(self, stmt: Statement) -> None:
        limit = rate_limit_value(stmt, stmt.args["value"])
        self.creating.set_rate_limit(creating_job_of(self.catalog, stmt).id, limit)

    def _do_show(self, stmt: Statement) -> DataFrame:
        what = stmt.args["what"]
        rels = self.catalog.relations()
        if what == "TABLES":
            return self.spark.createDataFrame([(r.name,) for r in rels if r.kind == "table"], "name string")
        if what == "MATERIALIZED VIEWS":
            return self.spark.createDataFrame([(r.name, r.definition.get("sql", "")) for r in rels if r.kind == "mv"],
                                              "name string, definition string")
        return self.spark.createDataFrame(
            [(j.id, j.name, j.kind, j.strategy, j.phase, j.rows_done, j.rows_total, j.percent, j.rows_per_second,
              j.eta_seconds, j.lag_epochs, j.lag_seconds, j.rate_limit, j.started_at.replace(tzinfo=None),
              j.created_epoch, j.held_back, j.error) for j in self.jobs()],
            "id int, name string, kind string, strategy string, phase string, snapshot_rows_done bigint, "
            "snapshot_rows_total bigint, percent double, rows_per_second double, eta_seconds double, "
            "lag_epochs int, lag_seconds double, rate_limit bigint, started_at timestamp, created_epoch bigint, "
            "held_back int, error string")

    def _do_describe(self, stmt: Statement) -> DataFrame:
        """Columns, then the internal state tables the MV's job keeps (as RisingWave lists them)."""
        rel = self.rt.relation(stmt.args["name"])
        rows: list[tuple[str, str, bool | None, bool | None, str | None]] = [
            (c.name, c.type.name, c.name in rel.schema.key, c.hidden, None) for c in rel.schema.columns]
        for state in state_relations(self.rt, rel):
            suffix = state.name.split(".", 1)[1]
            rows.append((state.name, "internal table", None, None, state_purpose(suffix, state.schema.key)))
        return self.spark.createDataFrame(
            rows, "name string, type string, is_key boolean, is_hidden boolean, description string")

    def _do_query(self, stmt: Statement) -> DataFrame:
        assert stmt.ast is not None
        epoch = self.committed_epoch
        for t in {t.name.lower() for t in stmt.ast.find_all(exp.Table)}:
            if self.catalog.relation(t) is None:
                continue
            self.rt.visible(self._readable(t), epoch).createOrReplaceTempView(t)
        try:
            return self.spark.sql(stmt.ast.sql(dialect="spark"))
        except Exception as e:
            raise SqlError(f"query failed: {str(e).strip().splitlines()[0][:300]} (at {stmt.where()})") from None

    def _do_insert(self, stmt: Statement) -> None:
        dml.insert_values(self.rt, stmt)

    def _do_update(self, stmt: Statement) -> None:
        dml.update(self.rt, stmt, self.committed_epoch)

    def _do_delete(self, stmt: Statement) -> None:
        dml.delete(self.rt, stmt, self.committed_epoch)

    def _do_create_table(self, stmt: Statement) -> None:
        ast = stmt.ast
        assert isinstance(ast, exp.Create)
        name = ast.this.this.name.lower()
        if self.catalog.relation(name) is not None:
            if stmt.args["if_not_exists"]:
                return
            raise CatalogError(f"relation {name!r} already exists (at {stmt.where(name)})")
        columns: list[Column] = []
        key: list[str] = []
        for item in ast.this.expressions:
            if isinstance(item, exp.ColumnDef):
                cname = item.this.name.lower()
                if cname in RESERVED_COLUMNS:
                    raise stmt.error(f"column name {cname!r} is reserved", cname)
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
        if not columns:
            raise stmt.error(f"table {name!r} needs at least one column")
        for k in key:
            if not any(c.name == k for c in columns):
                raise stmt.error(f"primary key column {k!r} is not a column of {name!r}", k)
        append_only = stmt.args["append_only"]
        if append_only and key:
            raise stmt.error("an APPEND ONLY table has no primary key", "APPEND ONLY")
        options = stmt.args["options"]
        if options and "connector" not in options:
            raise stmt.error("WITH options of a table need connector = '...'", "WITH")
        if options and not key:
            append_only = True
        if not key:
            columns.append(Column("_row_id", parse_type("bigint"), hidden=True))
            key = ["_row_id"]
        schema = Schema(tuple(columns), tuple(key), append_only)
        definition: dict[str, Any] = {"sql": stmt.text, "upstreams": []}
        if options:
            make_connector(name, schema, options)  # validates the options
            definition["connector"] = options
        with self.locks.epoch:
            rel = Relation(name, "table", schema, definition, self.committed_epoch)
            self.rt.stored(rel).create()
            with self.catalog.transaction() as db:
                self.catalog.add_relation(db, rel)

    def _do_create_mv(self, stmt: Statement) -> None:
        name = stmt.args["name"]
        if self.catalog.relation(name) is not None:
            if stmt.args["if_not_exists"]:
                return
            raise CatalogError(f"relation {name!r} already exists (at {stmt.where(name)})")
        options = {k.lower(): v for k, v in stmt.args["options"].items()}
        unknown = set(options) - {"backfill_strategy"}
        if unknown:
            raise stmt.error(f"unknown option(s) {', '.join(sorted(unknown))} for CREATE MATERIALIZED VIEW", "WITH")
        strategy = options.get("backfill_strategy", self._setting("backfill_strategy")).lower()
        if strategy not in STRATEGIES:
            raise stmt.error(f"unknown backfill strategy {strategy!r}; supported: {', '.join(STRATEGIES)}",
                             "backfill_strategy")
        assert stmt.ast is not None
        plan = Planner(stmt, self.rt.relation, self.spark).plan(stmt.ast)
        for u in plan.upstreams:
            upstream = self.rt.relation(u)
            if upstream.state != "created":
                job = self.catalog.job_of(u)
                raise CatalogError(f"cannot create {name!r} on {u!r}: {u!r} is itself still being created "
                                   f"(job {job.id if job else '?'}); WAIT for it first (at {stmt.where(u)})")
        schemas = state_schemas(plan.root)
        definition = {"sql": stmt.text, "query": stmt.args["query"], "upstreams": plan.upstreams,
                      "dataflow": plan.root.to_json(), "outputs": [list(o) for o in plan.outputs],
                      "states": list(schemas), "backfill_strategy": strategy}
        limit = self._setting("backfill_rate_limit")
        with self.locks.epoch:  # blocking: the whole build; snapshot: only to read one committed epoch S
            epoch = self.committed_epoch
            state = "created" if strategy == "blocking" else "creating"
            rel = Relation(name, "mv", plan.schema, definition, epoch, state=state)
            tables = [rel] + [Relation(state_name(name, sfx), "state", sch, {"owner": name, "upstreams": []},
                                       epoch, state=state) for sfx, sch in schemas.items()]
            for t in tables:
                self.rt.stored(t).create()
            if strategy == "blocking":
                flow = Dataflow(self.rt, rel)
                try:
                    built = flow.build(epoch)
                    bases = [write_base(self.rt, t, built[t.name], epoch, crash_name="mid_backfill", record=False)
                             for t in tables]
                finally:
                    flow.release()
            with self.catalog.transaction() as db:
                if strategy == "blocking":
                    self.catalog.add_relation(db, rel, "blocking", plan.upstreams[0])
                else:
                    job_id = self.creating.register(db, rel, plan.upstreams, Strategy(strategy))
                    if limit != "default":
                        self.catalog.update_job(db, job_id, rate_limit=int(limit))
                for t in tables[1:]:
                    self.catalog.add_relation(db, t)
                if strategy == "blocking":
                    for t, b in zip(tables, bases, strict=True):
                        self.catalog.add_base(db, t.name, epoch, b.version, sum(b.rows), b.files)
        if strategy == "blocking":
            return
        self.creating.start(job_id)
        if self._setting("background_ddl") != "true":
            self._wait_foreground(job_id)

    def _wait_foreground(self, job_id: int) -> None:
        if not sys.stderr.isatty():
            self.creating.wait_created([job_id], give_up_after=FOREGROUND_FAILURES)
            return
        from sparkwave.cli.progress import JobBars

        with JobBars() as bars:
            self.creating.wait_created([job_id], give_up_after=FOREGROUND_FAILURES,
                                       on_progress=lambda: bars.update([j for j in self.jobs() if j.id == job_id]))

    def _do_drop(self, stmt: Statement) -> None:
        name = stmt.args["name"]
        rel = self.catalog.relation(name)
        if rel is None:
            if stmt.args["if_exists"]:
                return
            raise CatalogError(f"cannot drop {name!r}: no such table or materialized view (at {stmt.where(name)})")
        if rel.kind != stmt.args["kind"]:
            what = "a table" if rel.kind == "table" else "a materialized view"
            raise stmt.error(f"cannot drop {name!r} this way: it is {what}", name)
        job = self.catalog.job_of(name)
        if job is not None and job.creating:
            self.creating.cancel(job.id)  # its partial table, progress and pins go with it
            return
        with self.locks.ddl, self.locks.epoch:
            dependents = [r.name for r in self.catalog.relations(creating=True) if name in r.upstreams]
            if dependents:
                raise CatalogError(f"cannot drop {name!r}: materialized view(s) {', '.join(dependents)} depend on it; "
                                   "drop them first")
            with self.catalog.transaction() as db:
                self.catalog.remove_relation(db, name)
            self.rt.forget(name)
            self.warehouse.remove_tree(self.warehouse.relation_dir(name))


