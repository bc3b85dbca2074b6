"""The Session: the owner of a warehouse and its SQL and Python entry point, a facade over DDL
(`ddl.py`), DML (`dml.py`), settings, SHOW (`show.py`), the barrier loop and maintenance."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import TimestampType
from sqlglot import exp

from sparkwave.connectors.postgres_cdc_release import release_held
from sparkwave.core import spark_features
from sparkwave.core.catalog import Catalog, Relation
from sparkwave.core.errors import CatalogError, OwnershipError, SparkwaveError, SqlError
from sparkwave.core.schema import Schema
from sparkwave.core.spark import acquire_spark, configure, release_spark
from sparkwave.frontend import dml, query_sets, show
from sparkwave.frontend.control import creating_job_of
from sparkwave.frontend.ddl import Ddl
from sparkwave.frontend.explain_estimate import BackfillSettings, estimate
from sparkwave.frontend.plan.explain import stored_plan
from sparkwave.frontend.plan.query_types import QueryTypes
from sparkwave.frontend.planner import Planner, explain
from sparkwave.frontend.postgres import translated
from sparkwave.frontend.query_sets import SetViews
from sparkwave.frontend.sink_ddl import SinkDdl
from sparkwave.frontend.statements import (
    AlterBackfillRate,
    AlterSinkRate,
    AlterSourceRate,
    Cancel,
    CreateMaterializedView,
    CreateSink,
    CreateSource,
    CreateTable,
    Delete,
    Describe,
    Drop,
    DropMaterializedView,
    DropSink,
    DropSource,
    DropTable,
    Explain,
    Flush,
    Insert,
    Query,
    Set,
    Show,
    Statement,
    Update,
    Wait,
    parse,
    rate_limit_value,
)
from sparkwave.frontend.timeout import statement_deadline
from sparkwave.frontend.value_size import grown_as_data_error
from sparkwave.meta.barrier import BarrierLoop, EpochReport
from sparkwave.meta.jobs import CreatingJobs
from sparkwave.meta.locks import Locks
from sparkwave.meta.maintenance import Maintenance
from sparkwave.meta.ownership import Ownership
from sparkwave.meta.pipeline import Barriers
from sparkwave.meta.progress import JobInfo, job_infos
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.settings import SPECS, Settings
from sparkwave.meta.sinks import Sinks
from sparkwave.meta.telemetry import Telemetry
from sparkwave.storage.sweep import sweep
from sparkwave.storage.warehouse import Warehouse

FETCH_BATCH_ROWS = 1000


def connect(warehouse: str | os.PathLike[str], *, spark: SparkSession | None = None,
            barrier_interval_ms: int = 1000, on_epoch: Callable[[EpochReport], None] | None = None,
            catalog: str | None = None) -> Session:
    """Open (creating or recovering) a warehouse and start its barrier loop. `catalog`: a PostgreSQL
    connection string for the catalog (default: `catalog.db` in the warehouse, or the PostgreSQL
    catalog the warehouse records)."""
    return Session(warehouse, spark=spark, barrier_interval_ms=barrier_interval_ms, on_epoch=on_epoch,
                   catalog=catalog)


class Session:
    """Owns a warehouse while open. `sql()` runs statements; the barrier loop runs in a background
    thread and commits an epoch every `barrier_interval_ms` (or at once on `flush()`)."""

    def __init__(self, warehouse: str | os.PathLike[str], *, spark: SparkSession | None = None,
                 barrier_interval_ms: int = 1000, on_epoch: Callable[[EpochReport], None] | None = None,
                 catalog: str | None = None) -> None:
        if barrier_interval_ms <= 0:
            raise SparkwaveError("barrier_interval_ms must be positive")
        self.warehouse = Warehouse(warehouse)
        self.warehouse.open(catalog)  # refuses a folder that is not a warehouse before anything is written to it
        self._ownership = Ownership(self.warehouse.owner_path)
        self._ownership.acquire()
        self._closed = True
        self.statement_timeout_ms = 0  # `SET statement_timeout`: this session's, as in PostgreSQL
        # What close() undoes, newest first; a connect() that fails midway undoes what it did.
        self._undo: list[Callable[[], None]] = [self._ownership.release]
        try:
            if spark is None:
                spark = acquire_spark()
                self._undo.append(functools.partial(release_spark, spark))
            else:
                configure(spark)
            self.spark = spark
            self.catalog = Catalog(self.warehouse.catalog_path, create=False)
            self.catalog.fenced_by(self._ownership.generation)  # a PostgreSQL catalog's: commits only while owner
            self._undo.append(self.catalog.close)
            spark_features.take_over_session(spark, self.catalog)  # a killed owner's Connect operations stop
            self.rt = Runtime(spark, self.warehouse, self.catalog)
            self._undo.append(self.rt.close_connectors)
            self.locks = Locks()
            # The loop's doorbell first: the jobs ring it, the loop plans with the jobs and hands
            # each commit to the sinks, then to the jobs (meta/pipeline.py); no part holds another.
            barriers = Barriers(barrier_interval_ms)
            self.sinks = Sinks(self.rt)
            self.creating = CreatingJobs(self.rt, self.locks, barriers, self.sinks,
                                         Settings(self.catalog).backfill_chunk_rows)
            self.telemetry = Telemetry()  # the recent epochs, for the dashboard and /metrics
            self.loop = BarrierLoop(self.rt, self.locks, barriers, jobs=self.creating,
                                    listeners=(self.sinks, self.creating, self.telemetry),
                                    failure_listeners=(self.telemetry,), on_epoch=on_epoch)
            self.ddl = Ddl(self.rt, self.locks, self.creating, self.loop)
            self.sink_ddl = SinkDdl(self.ddl, self.sinks)
            self._recover()
            self._undo.append(self.loop.stop)
            self.loop.start()
            self._undo.append(self.creating.stop)
            self.creating.resume_all()
            self.maintenance = Maintenance(self.rt, self.locks, max(1.0, barrier_interval_ms / 1000 * 5))
            self._undo.append(self.maintenance.stop)
            self.maintenance.start()
            # Stopped first: the barrier loop may be waiting for a coupled sink under `epoch`, which
            # maintenance may be waiting for.
            self._undo.append(self.sinks.stop)
            self.sinks.resume_all()
        except BaseException:
            self._unwind()
            raise
        self._closed = False

    # --- lifecycle -----------------------------------------------------------------------------
    def _recover(self) -> None:
        sweep(self.warehouse, self.catalog)  # what a crashed DDL or DML left; what sparkwave did not make
        release_held(self.catalog)  # a replication slot a DROP TABLE did not get to drop
        self.catalog.forget_orphans()
        for rel in self.catalog.relations():
            if rel.kind == "source":  # an epoch's staged rows, left by a crash after its commit
                self.warehouse.remove_tree(self.rt.stored(rel).log_path)
                self.rt.stored(rel).log_path.mkdir(parents=True, exist_ok=True)
        self._refuse_stored_queries()

    def _refuse_stored_queries(self) -> None:
        """An MV an earlier release created with a query this one refuses (a function outside the
        set: `reflect(...)`, say) is taken out of the pipeline before it runs again: its stored plan
        is never parsed again, and a replay would run it first thing."""
        for rel in self.catalog.relations():
            if rel.kind == "mv" and rel.state == "created" and (text := rel.definition.get("sql")):
                try:
                    parse(text)
                except SqlError as e:
                    self.loop.take_out(rel.name, f"its query is refused by this version of sparkwave: {e}; DROP it",
                                       "whose query is refused by this version of sparkwave")

    def close(self) -> None:
        """Stop maintenance, the creating jobs and the barrier loop (whose Delta follower brings every
        relation's Delta log up to the catalog), close the catalog, stop the Spark this session started,
        and release the warehouse, even if one of them fails."""
        if self._closed:
            return
        self._closed = True
        self._unwind()

    def _unwind(self) -> None:
        error: BaseException | None = None
        while self._undo:
            try:
                self._undo.pop()()
            except BaseException as e:  # the rest still runs: above all, the ownership lock is released
                error = error or e
        if error is not None:
            raise error

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
            with statement_deadline(self.spark, self.statement_timeout_ms if stmt.timed else 0):
                result = self._execute(stmt)
        return result

    def fetch(self, query: DataFrame, batch_rows: int = FETCH_BATCH_ROWS) -> Iterator[list[tuple[Any, ...]]]:
        """A query's rows in batches of `batch_rows`, read from Spark a partition at a time (the driver
        never holds the whole result), under this session's `statement_timeout`. A TIMESTAMP WITH
        TIME ZONE is an aware datetime in UTC, as `toArrow()` gives it."""
        self._check_open()
        zoned = {i for i, f in enumerate(query.schema.fields) if isinstance(f.dataType, TimestampType)}
        with statement_deadline(self.spark, self.statement_timeout_ms):
            batch: list[tuple[Any, ...]] = []
            for row in query.toLocalIterator(prefetchPartitions=True):
                # PySpark returns such a value as a naive datetime in this process's local time
                batch.append(tuple(v.astimezone(UTC) if i in zoned and v is not None else v for i, v in enumerate(row))
                             if zoned else tuple(row))
                if len(batch) == batch_rows:
                    yield batch
                    batch = []
            if batch:
                yield batch

    def flush(self) -> int:
        self._check_open()
        return self.loop.flush()

    def check_ownership(self) -> None:
        """Raise `OwnershipError` once another owner has taken the warehouse over (a PostgreSQL
        catalog's: `meta/ownership.py`); the catalog then refuses everything, reads included."""
        try:
            self._ownership.check()
        except OwnershipError as e:
            self.catalog.fence_out(str(e))
            raise

    @property
    def pipeline_error(self) -> str | None:
        """Why the main graph's next epoch is failing (it is being retried), or None."""
        error = self.loop.error
        return None if error is None or self.loop.failures == 0 else str(error)

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
        if rel.kind == "source":
            raise CatalogError(f"{name!r} is a source: it stores nothing to read; create a materialized view "
                               f"over it (CREATE MATERIALIZED VIEW ... AS SELECT ... FROM {name}), or make it a "
                               "TABLE to store what it reads")
        if rel.state == "failed":
            job = self.catalog.job_of(name)
            raise CatalogError(f"materialized view {name!r} is stopped, out of the pipeline: "
                               f"{job.error if job else 'it failed'}; DROP MATERIALIZED VIEW {name} and create it "
                               "again (its rows are no longer kept up to date)")
        if rel.state != "created":
            job = self.catalog.job_of(name)
            raise CatalogError(f"materialized view {name!r} is still being created (job {job.id if job else '?'}); "
                               "WAIT for it or watch SHOW JOBS")
        return rel

    def compact(self, name: str | None = None) -> list[str]:
        """Compact now (every relation, or `name`) at the committed epoch, then apply retention,
        checkpoint the Delta tables and prune the catalog's history."""
        self._check_open()
        done = []
        epoch = self.committed_epoch
        rels = [self._readable(name.lower())] if name else self.catalog.relations(internal=True)
        for rel in rels:
            if self.maintenance.run(rel, epoch):
                done.append(rel.name)
        self.catalog.prune_history()
        return done

    # --- statements ----------------------------------------------------------------------------
    def _execute(self, stmt: Statement) -> DataFrame | None:
        handler = self.HANDLERS.get(type(stmt))
        if handler is None:
            raise SparkwaveError(f"BUG: no handler for statement {type(stmt).__name__}")
        return handler(self, stmt)

    def _do_flush(self, stmt: Flush) -> None:
        self.flush()

    def _do_wait(self, stmt: Wait) -> None:
        self.wait()

    def _do_set(self, stmt: Set) -> None:
        key, text = stmt.key, stmt.value.lower()
        if key not in SPECS:
            raise stmt.error(f"unknown setting {key!r}; known: {', '.join(SPECS)}", key)
        if key == "statement_timeout":  # per session, not stored: PostgreSQL's semantics
            try:
                self.statement_timeout_ms = SPECS[key].parse(text)
            except (ValueError, OverflowError):
                raise stmt.error(SPECS[key].error(key, text), text) from None
            return
        try:
            Settings(self.catalog).store(key, text)
        except ValueError as e:
            raise stmt.error(str(e), text) from None
        if key == "backfill_chunk_rows":
            self.creating.chunk_rows = Settings(self.catalog).backfill_chunk_rows

    def _do_show(self, stmt: Show) -> DataFrame:
        return show.show(self.rt, stmt)

    def _do_describe(self, stmt: Describe) -> DataFrame:
        return show.describe(self.rt, stmt)

    def _do_create_table(self, stmt: CreateTable) -> None:
        self.ddl.create_table(stmt)  # a CreateSource too

    def _do_create_mv(self, stmt: CreateMaterializedView) -> None:
        self.ddl.create_mv(stmt)

    def _do_drop(self, stmt: Drop) -> None:
        if stmt.cascade and self.catalog.relation(stmt.name) is not None:
            for kind, name in self.ddl.dependents(stmt.name):  # deepest first
                if kind == "sink":
                    self.sink_ddl.drop(name, if_exists=True)
                else:
                    self.ddl.drop(DropMaterializedView(stmt.text, stmt.line, stmt.col, name=name, if_exists=True,
                                                       cascade=False))
        self.ddl.drop(stmt)

    def _do_drop_sink(self, stmt: DropSink) -> None:
        self.sink_ddl.drop(stmt.name, stmt.if_exists, f" (at {stmt.where(stmt.name)})")

    def _do_create_sink(self, stmt: CreateSink) -> None:
        self.sink_ddl.create(stmt)

    def _do_alter_sink_rate(self, stmt: AlterSinkRate) -> None:
        """SINK_RATE_LIMIT (rows/s, 0 pauses, DEFAULT unlimited): the sink's worker reads it at once."""
        self.sink_ddl.set_rate_limit(stmt)

    def _do_cancel(self, stmt: Cancel) -> None:
        for job_id in stmt.ids:
            self.creating.creating_job(job_id)  # every id is checked before any is cancelled
        for job_id in stmt.ids:
            self.creating.cancel(job_id)

    def _do_alter_backfill_rate(self, stmt: AlterBackfillRate) -> None:
        limit = rate_limit_value(stmt, stmt.value)
        self.creating.set_rate_limit(creating_job_of(self.catalog, stmt).id, limit)

    def _do_alter_source_rate(self, stmt: AlterSourceRate) -> None:
        """A connector's rate limit (rows/s; 0 pauses it; DEFAULT: its own rate, at most
        `max.rows.per.epoch` an epoch), kept with its options: the barrier loop reads it at the next
        plan, in this process or the owner."""
        rel = self.rt.relation(stmt.name)
        options = rel.definition.get("connector")
        if not options:
            raise stmt.error(f"{rel.name!r} is not fed by a connector; SOURCE_RATE_LIMIT applies to sources and "
                             "tables created WITH (connector = ...)", stmt.name)
        limit = rate_limit_value(stmt, stmt.value)
        options = {k: v for k, v in options.items() if k != "source_rate_limit"}
        if limit is not None:
            options["source_rate_limit"] = str(limit)
        self.catalog.set_definition(rel.name, {**rel.definition, "connector": options})

    def _do_query(self, stmt: Query) -> DataFrame:
        """A query reads catalog relations only, all as of one committed epoch, each through a view
        of its own name for this query alone (`spark_features.sql_over`: on classic Spark a temp view
        dropped once Spark has analysed the query; on Connect a plan sent with the query's), so
        concurrent queries cannot see each other's epochs and no name reaches a file or a Spark table."""
        assert stmt.ast is not None
        epoch = self.committed_epoch
        ast = stmt.ast.copy()
        ctes = {c.alias_or_name.lower() for c in ast.find_all(exp.CTE)}
        views: dict[str, DataFrame] = {}
        schemas: dict[str, Schema] = {}  # each view's relation: the translation types the query's operands
        sets = SetViews(self.spark, lambda e: translated(e, QueryTypes(self.spark, {})), [])
        try:
            query_sets.rewrite(ast, sets, stmt.error)  # generate_series/unnest of constants: views of their rows
            ctes |= set(sets.names)
            for t in list(ast.find_all(exp.Table)):
                if not isinstance(t.this, exp.Identifier):
                    raise stmt.error(f"table functions are not supported in queries: {t.sql(dialect='postgres')}")
                if t.args.get("db") or t.args.get("catalog"):
                    raise stmt.error(f"schema-qualified table names are not supported: {t.sql(dialect='postgres')}",
                                     t.name)
                name = t.name.lower()
                if name in ctes:
                    continue
                view = f"sparkwave_query_{uuid.uuid4().hex}"
                rel = self._readable(name)
                views[view] = self.rt.visible(rel, epoch)
                schemas[view] = rel.schema
                if not t.alias:
                    t.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
                t.set("this", exp.to_identifier(view))
            return spark_features.sql_over(self.spark, lambda: translated(ast, QueryTypes(self.spark, schemas)),
                                           {**sets.frames, **views})
        except SparkwaveError:
            raise
        except Exception as e:
            get_state = getattr(e, "getSqlState", None)  # Spark's codes are PostgreSQL's (42703, 42P01, ...)
            state = get_state() if callable(get_state) else None
            raise SqlError(f"query failed: {str(e).strip().splitlines()[0][:300]} (at {stmt.where()})",
                           sqlstate=state or "XX000") from None

    def _do_explain(self, stmt: Explain) -> DataFrame:
        """EXPLAIN: the operator tree of an existing MV (as stored) or of the MV (or query, planned as
        one) a statement would create, a line per operator in the one column `QUERY PLAN`, as
        PostgreSQL's; for a CREATE, what its backfill would read, write and take. Nothing is created."""
        settings = Settings(self.catalog)
        target = stmt.target
        if isinstance(target, str):
            plan = stored_plan(self.rt.relation(target))
            lines = explain(target, plan, big_epoch_rows=settings.big_epoch_rows)
        else:
            name = target.name if isinstance(target, CreateMaterializedView) else "query"
            plan = Planner(target, self.rt.relation, self.spark).plan(target.ast)
            lines = explain(name, plan, big_epoch_rows=settings.big_epoch_rows)
            if isinstance(target, CreateMaterializedView):
                strategy = {k.lower(): v for k, v in target.options.items()}.get(
                    "backfill_strategy", settings.backfill_strategy)
                lines += estimate(self.catalog, name, plan, BackfillSettings(
                    str(strategy).lower(), settings.big_epoch_rows, settings.backfill_rate_limit))
        return self.spark.createDataFrame([(line,) for line in lines], "`QUERY PLAN` string")

    def _do_insert(self, stmt: Insert) -> DataFrame | None:
        """The rows of RETURNING, if given, as every DML statement below."""
        with grown_as_data_error(f"INSERT (at {stmt.where()})"):
            return dml.insert_values(self.rt, stmt).rows

    def _do_update(self, stmt: Update) -> DataFrame | None:
        with grown_as_data_error(f"UPDATE (at {stmt.where()})"):
            return dml.update(self.rt, stmt, self.committed_epoch).rows

    def _do_delete(self, stmt: Delete) -> DataFrame | None:
        return dml.delete(self.rt, stmt, self.committed_epoch).rows

    # Each kind of statement's handler (a CREATE SOURCE is created as the table it is declared as).
    HANDLERS: ClassVar[dict[type[Statement], Callable[[Session, Any], DataFrame | None]]] = {
        Flush: _do_flush, Wait: _do_wait, Set: _do_set, Show: _do_show, Describe: _do_describe,
        CreateTable: _do_create_table, CreateSource: _do_create_table, CreateMaterializedView: _do_create_mv,
        CreateSink: _do_create_sink, DropTable: _do_drop, DropSource: _do_drop, DropMaterializedView: _do_drop,
        DropSink: _do_drop_sink, Cancel: _do_cancel, AlterBackfillRate: _do_alter_backfill_rate,
        AlterSourceRate: _do_alter_source_rate, AlterSinkRate: _do_alter_sink_rate, Query: _do_query,
        Explain: _do_explain, Insert: _do_insert, Update: _do_update, Delete: _do_delete,
    }

