"""One relation's step of an epoch: a table's intents (source rows, DML) into consistent log rows,
an MV's operator tree over its upstreams' log rows of the epoch. Each step stages the relation's
log file (committed later by the barrier loop, `meta/barrier/`, which decides what runs when): in
memory, or only a file the executors wrote when the change is big (over `big_epoch_rows`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeAlias

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from sparkwave.connectors import Connector
from sparkwave.connectors.base import ERROR, RAW
from sparkwave.core import policy
from sparkwave.core.catalog import Relation
from sparkwave.core.chunk import Op, with_vnode
from sparkwave.core.local_frames import to_arrow
from sparkwave.storage import snapshot as snap
from sparkwave.storage.lookup import lookup
from sparkwave.storage.store import Store
from sparkwave.storage.table import StagedLog
from sparkwave.stream import bad_records, fusion
from sparkwave.stream.dataflow import Dataflow
from sparkwave.stream.direct_intents import arrow_intents, old_rows, takes_direct
from sparkwave.stream.epoch_work import DmlBatches, EpochWork
from sparkwave.stream.fused_read import read_fused
from sparkwave.stream.materialize import materialize_table, materialize_table_frame
from sparkwave.stream.operator import HeldRows, held_log
from sparkwave.stream.watermark_filter import watermark_step

Step: TypeAlias = pa.Table | StagedLog | None  # a relation's log rows of the epoch (None: no change)
ConnectorOf: TypeAlias = Callable[[Relation], Connector | None]  # the barrier loop's cached connector of a relation


class Executor:
    """Executes relations of an epoch against the store; `connector` gives a relation's source
    connector (the meta layer's, cached for the barrier loop's thread)."""

    def __init__(self, store: Store, connector: ConnectorOf) -> None:
        self.store = store
        self.connector = connector
        self._flows: dict[str, tuple[Relation, Dataflow]] = {}

    def _dataflow(self, rel: Relation) -> Dataflow:
        """The MV's operator tree, decoded once and kept while its definition and schema stay the same
        (a DROP and CREATE under the same name makes another): what an operator compiles on first use
        (its expressions' trees, their evaluation in Arrow) serves every epoch."""
        kept = self._flows.get(rel.name)
        if kept is not None and kept[0].definition == rel.definition and kept[0].schema == rel.schema \
                and kept[0].created_epoch == rel.created_epoch:
            return kept[1]
        flow = Dataflow(self.store, rel)
        self._flows[rel.name] = (rel, flow)
        return flow

    def keep_only(self, names: set[str]) -> None:
        """Forget the kept trees of MVs no longer in the main graph (dropped, or failed and isolated)."""
        for name in [n for n in self._flows if n not in names]:
            del self._flows[name]

    def execute(self, rel: Relation, e: EpochWork, dml: DmlBatches) -> Step:
        """The relation's log rows for the epoch, staged as its log file. A source's file (it commits
        none) is written only if an MV reads it (`_source_file`)."""
        # A replayed epoch (one the catalog did not commit, so in no Delta log either: the logs
        # follow the catalog) is computed again like any other: every step is deterministic.
        if rel.kind == "mv":
            return self._mv_step(rel, e)
        stored = self.store.stored(rel)
        overwrites = rel.definition.get("on_conflict", "overwrite") == "overwrite"
        watermarked = "watermark" in rel.definition  # its late rows are dropped on the driver
        direct = self._direct(rel, dml) if e.source_ranges(rel.name) else None
        held = direct is not None and direct.holds_rows  # its rows are on the driver already: no executor job
        if policy.is_big_epoch(_rows_in(rel, e, dml), e.big_rows) and overwrites and not watermarked and not held:
            staged = self._table_step_frame(rel, e, dml)
            return staged if staged is not None and staged.num_rows else None
        chunk = self._table_step(rel, e, dml)
        if chunk is not None and chunk.num_rows > 0:
            if rel.kind == "source":  # its file only for an MV that reads it (`_source_file`)
                with e.lock:
                    e.file_locks[rel.name] = threading.Lock()
                    e.unwritten[rel.name] = chunk
            else:
                stored.stage_log(e.epoch, chunk)
        return chunk

    def _intents(self, rel: Relation, e: EpochWork, dml: DmlBatches) -> DataFrame | None:
        """A table's intents of the epoch (source rows and DML batches) with their vnodes."""
        spark = self.store.spark
        parts: list[DataFrame] = []
        ranges = e.source_ranges(rel.name)
        if ranges:
            conn = self.connector(rel)
            assert conn is not None, f"BUG: plan has source offsets for {rel.name!r}, which has no connector"
            rows = conn.read(spark, ranges)
            if "on_conflict" in rel.definition:  # a connector's rows are inserts, which the rule applies to
                rows = rows.withColumn("_op", F.when(F.col("_op") == int(Op.UPDATE_INSERT), F.lit(int(Op.INSERT)))
                                       .otherwise(F.col("_op")).cast("tinyint"))
            parts.append(rows)
        files = [path for _, r, path, _ in dml if r == rel.name]
        if files:
            parts.append(snap.read_parquet(spark, "_op tinyint, _seq bigint, " + rel.schema.spark_ddl(), files))
        if not parts:
            return None
        intents = parts[0]
        for p in parts[1:]:
            intents = intents.unionByName(p, allowMissingColumns=True)
        if (generated := rel.definition.get("proctime")) and e.now is not None:  # col AS PROCTIME(): the epoch's NOW
            intents = intents.withColumns({c: F.timestamp_micros(F.lit(e.now)) for c in generated})
        if computed := rel.definition.get("generated"):  # col type AS expr: from the row (`plan/generated.py`)
            keyed = F.col("_op") == int(Op.KEY_DELETE)  # a delete by key (a tombstone) names the key it deletes
            intents = intents.withColumns({c: F.when(keyed, F.col(f"`{c}`")).otherwise(F.expr(g["spark"]))
                                           for c, g in computed.items()})
        keep = (ERROR, RAW) if ERROR in intents.columns else ()
        return with_vnode(intents, rel.schema, keep)

    def _table_step(self, rel: Relation, e: EpochWork, dml: DmlBatches) -> pa.Table | None:
        """A table's intents of the epoch as consistent log rows, on the driver."""
        ranges = e.source_ranges(rel.name)
        conn = self._direct(rel, dml) if ranges else None  # its rows held in Arrow: no Spark round trip
        rows = arrow_intents(conn, rel, ranges) if conn is not None else None
        if rows is None:
            intents = self._intents(rel, e, dml)
            if intents is None:
                return None
            watermarked = "watermark" in rel.definition  # its MVs' chains see only the rows on time
            rows = read_fused(self.store, rel, e, intents) if rel.kind == "source" and not watermarked \
                else to_arrow(intents)
        chunk = e.bad.set_aside(rel.name, self.connector(rel) if ERROR in rows.column_names else None, rows)
        if "watermark" in rel.definition:
            chunk = watermark_step(self.store.catalog, rel, e, chunk, self.connector(rel))
        absent = conn.absent_keys(ranges) if conn is not None else None  # a CDC backfill chunk's keys
        return materialize_table(chunk, rel.schema, e.epoch,
                                 lambda keys: old_rows(lambda k: lookup(self.store.catalog, rel.name, rel.schema,
                                                                        e.prev, k), keys, rel.schema, absent),
                                 rel.definition.get("on_conflict", "overwrite"), new_keys=absent is not None)

    def _direct(self, rel: Relation, dml: DmlBatches) -> Connector | None:
        """The table's connector if its intents may skip Spark (`direct_intents.takes_direct`)."""
        return self.connector(rel) if takes_direct(rel, any(r == rel.name for _, r, _, _ in dml)) else None

    def _table_step_frame(self, rel: Relation, e: EpochWork, dml: DmlBatches) -> StagedLog | None:
        """`_table_step` for a big epoch: the executors join the intents with the table as of the
        previous epoch and write the log file; the driver sees only bad records."""
        intents = self._intents(rel, e, dml)
        if intents is None:
            return None
        if ERROR in intents.columns:  # read once: counted, sampled and written
            intents = intents.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if ERROR in intents.columns:
                bad = intents.where(F.col(ERROR).isNotNull())
                found = bad.count()
                if found:
                    first = bad.select("_seq", ERROR, RAW).orderBy("_seq").limit(bad_records.MAX_BAD_RECORDS_KEPT)
                    conn = self.connector(rel)
                    assert conn is not None, f"BUG: bad records in {rel.name!r}, which has no connector"
                    e.bad.keep(rel.name, conn, first.toArrow(), found)
                good = intents.where(F.col(ERROR).isNull()).drop(ERROR, RAW)
            else:
                good = intents
            current = None if rel.schema.append_only else self.store.snapshot(rel, e.prev)
            return self.store.stored(rel).stage_log_frame(e.epoch, materialize_table_frame(good, current, rel.schema))
        finally:
            intents.unpersist()

    def _mv_step(self, rel: Relation, e: EpochWork) -> Step:
        changed = {u: c.num_rows for u in rel.upstreams if (c := e.chunks.get(u)) is not None and c.num_rows > 0}
        flow = self._dataflow(rel)
        if not changed and not flow.ticks:  # a tree reading NOW() steps every epoch: time alone moves it
            return None
        inputs = {u: [self.store.stored(e.relation(u) or self.store.relation(u)).log_file_path(e.epoch)]
                  for u in changed}
        big = policy.is_big_epoch(sum(changed.values()), e.big_rows) and flow.on_spark
        fused = {u for u in changed if fusion.covers(flow.root, u, e.fused.get(rel.name, {}))}
        chunk: Step
        if big:
            for u in changed:
                self._source_file(e, u)
            chunk, staged = flow.step_frame(e.epoch, e.prev, inputs, e.watermarks)
            e.chunks.update(staged)
        else:
            held = {u: f for u in changed if u not in fused and (f := self._held(e, u)) is not None}
            for u in changed:
                if u not in fused and u not in held:
                    self._source_file(e, u)
            chunk, tables = flow.step(e.epoch, e.prev, inputs, held, e.fused.get(rel.name), e.watermarks)
            if chunk is not None and chunk.num_rows > 0:
                self.store.stored(rel).stage_log(e.epoch, chunk)
            e.chunks.update(tables)
        e.chunks[rel.name] = chunk
        return chunk

    def _source_file(self, e: EpochWork, name: str) -> None:
        """Write a source's rows of the epoch as its (transient) log file, once, for an MV that reads
        the file: one whose scans of it its read did not all compute (`read_fused`) and that the
        driver does not hand them as a local frame, or a big epoch's. A no-op for any other relation."""
        lock = e.file_locks.get(name)
        if lock is None:
            return
        with lock:
            if (rows := e.unwritten.get(name)) is not None:
                self.store.stored(e.relation(name) or self.store.relation(name)).stage_log(e.epoch, rows,
                                                                                           transient=True)
                del e.unwritten[name]

    def _held(self, e: EpochWork, name: str) -> HeldRows | None:
        """The relation's log rows of the epoch, held for every MV reading them (in Arrow; their local
        frame made once, for the first MV whose chain needs Spark), if the driver holds them and they
        are few (`held_log`)."""
        with e.lock:
            if name in e.held:
                return e.held[name]
        rows = e.chunks.get(name)  # built outside the lock: two MVs may both build it; one is kept
        rel = e.relation(name) or self.store.relation(name)
        held = held_log(self.store.spark, rel.schema, rows) if isinstance(rows, pa.Table) else None
        with e.lock:
            return e.held.setdefault(name, held)


def _rows_in(rel: Relation, e: EpochWork, dml: DmlBatches) -> int:
    """The rows of a table's intents this epoch: its DML batches and source ranges."""
    return sum(n for _, r, _, n in dml if r == rel.name) + sum(end - start for start, end in
                                                                 e.source_ranges(rel.name).values())
