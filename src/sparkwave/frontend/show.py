"""SHOW and DESCRIBE: what the catalog knows, as DataFrames."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame

from sparkwave.connectors.postgres_cdc_position import key_bytes
from sparkwave.core.catalog import Relation
from sparkwave.core.errors import CatalogError
from sparkwave.core.limits import MAX_SHOW_ROWS
from sparkwave.frontend.plan import proctime
from sparkwave.frontend.plan.explain import state_tables, stored_plan
from sparkwave.frontend.sink_ddl import SECRET
from sparkwave.frontend.statements import Describe, Show
from sparkwave.frontend.watermark_show import describe_rows
from sparkwave.meta.progress import job_infos, sink_infos
from sparkwave.meta.runtime import Runtime
from sparkwave.storage.state import state_relations
from sparkwave.stream.plan import state_purpose


def show(rt: Runtime, stmt: Show) -> DataFrame:
    what = stmt.what
    rels = rt.catalog.relations()
    if what == "TABLES":
        return rt.spark.createDataFrame([(r.name,) for r in rels if r.kind == "table"], "name string")
    if what == "MATERIALIZED VIEWS":
        sinks = {s.name for s in rt.catalog.sinks()}  # an MV holding a sink's query is shown while the sink is
        mvs = [r for r in rt.catalog.relations(creating=True) if r.kind == "mv" and r.state != "creating"]
        # append_only as RisingWave's rw_materialized_views: the MV only ever inserts rows (EMIT ON WINDOW CLOSE,
        # or stateless over append-only inputs), so an append-only sink takes it
        return rt.spark.createDataFrame([(r.name, r.spec.sql, r.schema.append_only) for r in mvs
                                         if r.spec.sink not in sinks],
                                        "name string, definition string, append_only boolean")
    if what == "SOURCES":
        return _sources(rt)
    if what == "SINKS":
        return rt.spark.createDataFrame(
            [(s.name, s.mv, s.connector, s.target, s.mode, s.phase, s.epoch, s.lag_epochs, s.lag_seconds, s.lag_bytes,
              s.rows_per_second, s.rate_limit, s.decouple, s.error) for s in sink_infos(rt.catalog)],
            "name string, from_relation string, connector string, target string, format string, phase string, "
            "committed_epoch bigint, lag_epochs int, lag_seconds double, lag_bytes bigint, rows_per_second double, "
            "rate_limit bigint, decoupled boolean, last_error string")
    if what == "SOURCE ERRORS":
        if stmt.name:
            rt.relation(stmt.name)  # a clear error if there is no such relation
        return rt.spark.createDataFrame(
            [(e.relation, int(e.split) if e.split.isdigit() else None, e.offset, e.epoch, e.error, e.raw, e.split)
             for e in rt.catalog.source_errors(stmt.name, MAX_SHOW_ROWS)],  # a split: a partition, a file, ...
            "relation string, partition int, offset bigint, epoch bigint, error string, raw string, split string")
    return rt.spark.createDataFrame(
        [(j.id, j.name, j.kind, j.strategy, j.phase, j.rows_done, j.rows_total, j.percent, j.rows_per_second,
          j.eta_seconds, j.lag_epochs, j.lag_seconds, j.rate_limit, j.started_at.replace(tzinfo=None),
          j.created_epoch, j.held_back, j.error, "; ".join(map(str, j.upstreams)),
          sum(c.attempts - 1 for c in j.chunks)) for j in job_infos(rt.catalog)],
        "id int, name string, kind string, strategy string, phase string, snapshot_rows_done bigint, "
        "snapshot_rows_total bigint, percent double, rows_per_second double, eta_seconds double, "
        "lag_epochs int, lag_seconds double, rate_limit bigint, started_at timestamp, created_epoch bigint, "
        "held_back int, error string, upstreams string, chunks_reread int")


def _generated(rel: Relation, name: str) -> str:
    """DESCRIBE's words for a generated column."""
    exprs = rel.definition.get("generated")
    if isinstance(exprs, dict) and isinstance(g := exprs.get(name), dict):
        return f"generated: AS {g.get('sql')}"
    return proctime.DESCRIBED


def describe(rt: Runtime, stmt: Describe) -> DataFrame:
    """Columns, then the internal state tables the MV's job keeps (as RisingWave lists them)."""
    if stmt.sink or (rt.catalog.relation(stmt.name) is None and rt.catalog.sink(stmt.name)):
        return _describe_sink(rt, stmt)
    rel = rt.relation(stmt.name)
    generated = proctime.generated(rel.definition)
    rows: list[tuple[str, str, bool | None, bool | None, str | None]] = [
        (c.name, c.type.name, c.name in rel.schema.key, c.hidden,
         _generated(rel, c.name) if c.name in generated else None)
        for c in rel.schema.columns]
    words = dict(state_tables(rel.name, stored_plan(rel))) if rel.kind == "mv" else {}  # EXPLAIN's words
    rows += describe_rows(rt.catalog, rel)  # its watermark, or that EMIT ON WINDOW CLOSE makes it append-only
    for state in state_relations(rt, rel):
        suffix = state.name.split(".", 1)[1]
        rows.append((state.name, "internal table", None, None,
                     words.get(state.name) or state_purpose(suffix, state.schema.key)))
    return rt.spark.createDataFrame(
        rows, "name string, type string, is_key boolean, is_hidden boolean, description string")


def _describe_sink(rt: Runtime, stmt: Describe) -> DataFrame:
    """A sink's columns (is_key: its upsert key), then its options (the password left out)."""
    sink = rt.catalog.sink(stmt.name)
    if sink is None:
        raise CatalogError(f"no sink {stmt.name!r} (at {stmt.where(stmt.name)})")
    key = set(sink.spec["key"])
    rows: list[tuple[str, str, bool | None, bool | None, str | None]] = [
        (c["name"], c["type"], c["name"] in key, False, None) for c in sink.spec["columns"]]
    rows.append(("from", "relation", None, None, sink.mv))
    rows.append(("format", "option", None, None, sink.spec["mode"]))
    rows.append(("sink_decouple", "option", None, None, str(sink.decouple).lower()))
    rows += [(k, "option", None, None, "***" if SECRET.search(k) else v)
             for k, v in sorted(sink.spec["options"].items())]
    return rt.spark.createDataFrame(
        rows, "name string, type string, is_key boolean, is_hidden boolean, description string")


def _sources(rt: Runtime) -> DataFrame:
    """Each relation fed by a connector: where it reads, how far it has committed, how many bad
    records it set aside, and why it is not advancing if it is not."""
    errors = rt.catalog.source_error_counts()
    rows = []
    for rel in rt.catalog.relations():
        options = rel.definition.get("connector")
        if not options:
            continue
        offsets = {s: o for s, o in rt.catalog.source_offsets(rel.name).items() if not key_bytes(s)}
        where = options.get("topic") or options.get("location") or options.get("posix_fs.root") \
            or options.get("table.name")  # what it reads (postgres-cdc: the upstream table)
        rows.append((rel.name, rel.kind, options.get("connector"), where, len(offsets),
                     json.dumps(dict(sorted(offsets.items(), key=lambda o: int(o[0]) if o[0].isdigit() else 0))),
                     errors.get(rel.name, 0), rt.source_status(rel.name)))
    return rt.spark.createDataFrame(
        rows, "name string, kind string, connector string, topic string, splits int, committed_offsets string, "
              "bad_records bigint, status string")
