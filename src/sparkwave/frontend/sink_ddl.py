"""CREATE SINK and DROP SINK, in RisingWave's syntax:

    CREATE SINK [IF NOT EXISTS] s FROM mv | AS SELECT ...
      WITH (connector = 'postgres' | 'kafka' | 'deltalake' | 'iceberg', ..., type = 'upsert' | 'append-only',
            primary_key = 'a, b', force_append_only = 'true', snapshot = 'false', sink_decouple = 'false',
            sink_rate_limit = n)
      [FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON]

Everything is checked before the sink is recorded, the target included (reachable, its table's
columns fit): a CREATE that fails leaves nothing in the warehouse (on the target, the checks may
have created the progress table, and `auto.create` the table). `AS SELECT` creates the sink's own
MV (`_sink_<name>`, hidden while the sink exists, dropped with it)."""

from __future__ import annotations

import re
import sys
import uuid

from sparkwave.connectors import make_sink
from sparkwave.connectors.sink import APPEND_ONLY, DEBEZIUM, UPSERT, SinkSpec
from sparkwave.connectors.sink_delta import local_path
from sparkwave.connectors.sink_iceberg import normalised as iceberg_options
from sparkwave.core.catalog import Phase, SinkRow
from sparkwave.core.errors import CatalogError, PipelineError, SqlError
from sparkwave.core.names import MAX_LENGTH, relation_name
from sparkwave.frontend.ddl import Ddl
from sparkwave.frontend.progress_bars import JobBars
from sparkwave.frontend.statements import AlterSinkRate, CreateMaterializedView, CreateSink, Statement, rate_limit_value
from sparkwave.meta.jobs import FOREGROUND_FAILURES
from sparkwave.meta.progress import job_infos
from sparkwave.meta.settings import Settings
from sparkwave.meta.sinks import Sinks

SINK_MV_PREFIX = "_sink_"
_FORMATS = {"plain": APPEND_ONLY, "upsert": UPSERT, "debezium": DEBEZIUM}
_TYPES = {"upsert": UPSERT, "append-only": APPEND_ONLY, "append_only": APPEND_ONLY}


SECRET = re.compile(r"password|secret|token|credential|access_key|private_key|sasl", re.IGNORECASE)


def redact(sql: str) -> str:
    """The statement with the values of secret options replaced by '***' (it is kept in the catalog)."""
    return re.sub(r"(\b[A-Za-z_][A-Za-z0-9_.]*\s*=\s*)'(?:[^']|'')*'",
                  lambda m: m.group(1) + "'***'" if SECRET.search(m.group(1)) else m.group(0), sql)


def _flag(stmt: Statement, options: dict[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise stmt.error(f"option {key} needs 'true' or 'false', got {value!r}", key)
    return value.lower() == "true"


class SinkDdl:
    def __init__(self, ddl: Ddl, sinks: Sinks) -> None:
        self.ddl = ddl
        self.rt = ddl.rt
        self.catalog = ddl.catalog
        self.sinks = sinks
        sinks.on_dropped = self._drop_own_mv

    def create(self, stmt: CreateSink) -> None:
        name = relation_name(stmt.name, f" (at {stmt.where(stmt.name)})")
        if self.catalog.sink(name) is not None or self.catalog.relation(name) is not None:
            if stmt.if_not_exists and self.catalog.sink(name) is not None:
                return
            what = "sink" if self.catalog.sink(name) is not None else "table, source or materialized view"
            raise CatalogError(f"{name!r} already exists: it is a {what} (at {stmt.where(name)})", sqlstate="42P07")
        options = dict(stmt.options)
        if not options.get("connector"):
            raise stmt.error("CREATE SINK needs WITH (connector = 'postgres' | 'kafka' | 'deltalake' | 'iceberg', ...)",
                             "WITH")
        upstream = stmt.upstream
        if upstream is not None:
            self._check_upstream(stmt, name, upstream)
        spec = self._spec(stmt, name, options, upstream)
        target = make_sink(spec)
        try:
            target.check()  # reaches the target: an error here creates nothing of ours
        finally:
            target.close()
        snapshot = _flag(stmt, options, "snapshot", True)
        decouple = _flag(stmt, options, "sink_decouple", Settings(self.catalog).sink_decouple)
        limit = rate_limit_value(stmt, options["sink_rate_limit"]) if "sink_rate_limit" in options else None
        own_mv = None
        try:
            if upstream is None:  # AS SELECT: the sink's own MV, built at once
                own_mv = upstream = self._create_own_mv(stmt, name)
                spec = self._spec(stmt, name, options, upstream)
            row = SinkRow(name, upstream, spec.sink_id,
                          {"columns": [c.to_json() for c in spec.columns], "key": list(spec.key), "mode": spec.mode,
                           "options": spec.options, "sql": redact(stmt.text), "own_mv": own_mv}, decouple, 0)
            with self.ddl.locks.ddl, self.ddl.locks.epoch:  # S: the committed epoch the snapshot is read at
                self._check_upstream(stmt, name, upstream)  # not dropped meanwhile
                with self.catalog.transaction() as db:
                    job = self.catalog.add_sink(db, row, self.catalog.committed_epoch(), snapshot, limit)
        except BaseException:
            if own_mv is not None and self.catalog.relation(own_mv) is not None:
                self.ddl.drop_relation(own_mv)
            raise
        self.sinks.start(name)
        if snapshot and not Settings(self.catalog).background_ddl:
            self._wait_snapshot(name, job)

    def _check_upstream(self, stmt: Statement, name: str, upstream: str) -> None:
        mv = self.rt.relation(upstream)
        if mv.kind == "source":
            raise stmt.error(f"{upstream!r} is a source, which stores nothing: create a materialized view over it "
                             "and a sink from that, or CREATE SINK ... AS SELECT", upstream)
        if mv.state == "failed":
            raise CatalogError(f"cannot create sink {name!r} on {upstream!r}: it is stopped, out of the pipeline "
                               f"(SHOW JOBS says why) (at {stmt.where(upstream)})")
        if mv.state != "created":
            raise CatalogError(f"cannot create sink {name!r} on {upstream!r}: it is still being created; WAIT "
                               f"for it first (at {stmt.where(upstream)})")
        owner = mv.spec.sink
        if owner and owner != name:
            raise stmt.error(f"{upstream!r} holds the query of sink {owner!r}; create the sink from a materialized "
                             "view of your own", upstream)

    def _spec(self, stmt: CreateSink, name: str, options: dict[str, str], upstream: str | None) -> SinkSpec:
        """The sink's columns, key and mode from the MV (for AS SELECT before its MV exists: from the
        query's plan) and the options, each checked."""
        schema = self.rt.relation(upstream).schema if upstream else self.ddl.plan_schema(stmt, name)
        what = f"materialized view {upstream!r}" if upstream else "the query"
        options = dict(options)  # the target's options: without FORMAT and ENCODE
        fmt, encode = options.pop("format", None), options.pop("encode", None)
        if encode is not None and encode != "json":
            raise stmt.error(f"ENCODE {encode.upper()} is not supported; supported: ENCODE JSON", "ENCODE")
        if fmt is not None and fmt not in _FORMATS:
            raise stmt.error(f"FORMAT {fmt.upper()} is not supported; supported: FORMAT PLAIN, UPSERT, DEBEZIUM",
                             "FORMAT")
        typ = options.get("type")
        if typ is not None and typ.lower() not in _TYPES:
            raise stmt.error(f"type = {typ!r} is not supported; supported: 'upsert', 'append-only'", "type")
        mode = _FORMATS[fmt] if fmt else _TYPES[typ.lower()] if typ else (
            APPEND_ONLY if schema.append_only else UPSERT)
        if typ is not None and fmt is not None and _TYPES[typ.lower()] != mode and mode != DEBEZIUM:
            raise stmt.error(f"type = {typ!r} contradicts FORMAT {fmt.upper()}", "type")
        if mode == DEBEZIUM and options["connector"] != "kafka":
            raise stmt.error("FORMAT DEBEZIUM is for the Kafka sink", "FORMAT")
        force = _flag(stmt, options, "force_append_only", False)
        if mode == APPEND_ONLY and not schema.append_only and not force:
            raise stmt.error(f"{what} can update and delete rows, which an append-only sink would lose; use "
                             "type = 'upsert' (FORMAT UPSERT), or force_append_only = 'true' to keep only its "
                             "inserts and new values", "append")
        visible = schema.visible
        names = [c.name for c in visible]
        if "primary_key" in options:
            key = [k.strip().lower() for k in options["primary_key"].split(",") if k.strip()]
            for k in key:
                if k not in names:
                    raise stmt.error(f"primary_key column {k!r} is not a column of {what} (columns: "
                                     f"{', '.join(names)})", "primary_key")
        elif mode == APPEND_ONLY:
            key = []
        else:
            key = list(schema.key)
            if any(k not in names for k in key):
                raise stmt.error(f"the key of {what} ({', '.join(key)}) is not among its visible columns: an upsert "
                                 "sink needs primary_key = '...' naming the columns that identify a row",
                                 "WITH")
        if options["connector"] == "deltalake":
            options["location"] = self._location(stmt, options.get("location", ""))
        if options["connector"] == "iceberg":  # paths absolute, outside the warehouse
            try:
                options = iceberg_options(options, self.rt.warehouse.root)
            except ValueError as e:
                raise stmt.error(f"sink {e}", str(e).split(" ", 1)[0]) from None
        sink_id = f"{name}-{uuid.uuid4().hex[:12]}"
        return SinkSpec(name, sink_id, tuple(visible), tuple(key), mode, options)

    def _location(self, stmt: Statement, location: str) -> str:
        """A Delta sink's location, a local one normalised (absolute, `..` and symlinks resolved: a
        later session may run elsewhere) and stored so, so that what is checked is what is written;
        it never lies inside the warehouse, whose files are sparkwave's own."""
        if not location:
            return location
        try:
            path = local_path(location)
        except ValueError as e:
            raise stmt.error(f"sink location {location!r} {e}", "location") from None
        if path is None:
            return location
        root = self.rt.warehouse.root.resolve()
        if path == root or root in path.parents:
            raise stmt.error(f"location {location!r} is inside the warehouse {root}; a Delta sink writes to a "
                             "table outside it", "location")
        return str(path)

    def _create_own_mv(self, stmt: CreateSink, name: str) -> str:
        own = SINK_MV_PREFIX + name
        if len(own) > MAX_LENGTH:
            raise stmt.error(f"a sink AS SELECT keeps its query in a materialized view named {own!r}, longer than "
                             f"{MAX_LENGTH} characters: choose a shorter sink name")
        assert stmt.ast is not None and stmt.query is not None, "BUG: a sink's own MV needs its AS query"
        mv_stmt = CreateMaterializedView(redact(stmt.text), stmt.line, stmt.col, name=own, if_not_exists=False,
                                         options={"backfill_strategy": "blocking"}, query=stmt.query, columns=(),
                                         ast=stmt.ast)
        self.ddl.create_mv(mv_stmt, sink=name)
        return own

    def _wait_snapshot(self, name: str, job_id: int) -> None:
        """A foreground CREATE SINK returns once the sink backfill has delivered the snapshot."""
        bars = JobBars() if sys.stderr.isatty() and self.ddl.progress_bars else None
        try:
            if bars:
                bars.__enter__()
            while True:
                job = self.catalog.job(job_id)
                if job is None:
                    raise PipelineError(f"sink {name!r} was dropped while it delivered its snapshot")
                if bars:
                    bars.update([j for j in job_infos(self.catalog) if j.id == job_id])
                if job.phase is Phase.CREATED:
                    return
                if self.sinks.failures(name) >= FOREGROUND_FAILURES:
                    self.drop(name)
                    raise PipelineError(f"sink {name!r} failed {FOREGROUND_FAILURES} times delivering its snapshot "
                                        f"and was dropped: {job.error}")
                if job.rate_limit == 0:
                    raise PipelineError(f"sink {name!r} is paused (SINK_RATE_LIMIT = 0), so this wait would never "
                                        f"end; it delivers its snapshot once resumed with ALTER SINK {name} SET "
                                        "SINK_RATE_LIMIT = DEFAULT")
                self.sinks.wait_moved(0.5)
        finally:
            if bars:
                bars.__exit__(None, None, None)

    def drop(self, name: str, if_exists: bool = False, where: str = "") -> None:
        if self.catalog.sink(name) is None:
            if if_exists:
                return
            raise CatalogError(f"cannot drop sink {name!r}: no such sink{where}")
        self.sinks.drop(name)

    def _drop_own_mv(self, row: SinkRow) -> None:
        own = row.spec.get("own_mv")
        if own and self.catalog.relation(own) is not None:
            self.ddl.drop_relation(own)

    def set_rate_limit(self, stmt: AlterSinkRate) -> None:
        limit = rate_limit_value(stmt, stmt.value)
        if self.catalog.sink(stmt.name) is None:
            raise SqlError(f"no sink {stmt.name!r} to alter (at {stmt.where(stmt.name)})")
        self.sinks.set_rate_limit(stmt.name, limit)
