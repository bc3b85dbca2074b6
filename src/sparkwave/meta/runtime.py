"""What every part of a running warehouse shares: the stored side (`storage/store.py`) and the
connectors of its sources."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkwave.connectors import Connector, make_connector
from sparkwave.connectors.base import ERROR, RAW
from sparkwave.core.catalog import Catalog, EpochRows, Relation
from sparkwave.core.chunk import Op, vnode, with_vnode
from sparkwave.core.local_frames import to_arrow
from sparkwave.core.offsets import merged, slot_counts, slot_ranges
from sparkwave.core.spark import empty_frame
from sparkwave.storage import snapshot as snap
from sparkwave.storage.integrity import write_table
from sparkwave.storage.store import Store
from sparkwave.storage.table import log_rows
from sparkwave.storage.warehouse import Warehouse
from sparkwave.stream.watermark_filter import on_time_epoch, on_time_history


class Runtime(Store):
    """A `Store` whose sources (`kind = 'source'`, which store nothing) are read from their
    connector: a source's snapshot at an epoch is its history up to the offsets that epoch
    committed (recorded by the CREATE that reads it), in slots standing for vnodes (`core/offsets.py`)."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse, catalog: Catalog) -> None:
        super().__init__(spark, warehouse, catalog)
        self._connectors: dict[str, Connector] = {}
        # Spark's job groups belong to the SparkContext, and a group cancelled with its future jobs stays
        # cancelled: this session's groups carry a token of their own, so another session on the same
        # Spark (another warehouse, a closed one) can never cancel them.
        self.group_token = uuid.uuid4().hex[:8]

    def connector(self, rel: Relation) -> Connector | None:
        """The relation's connector for the barrier loop (its thread alone uses the client; an ALTER
        of the options replaces it at the next plan)."""
        options = rel.definition.get("connector")
        if not options:
            return None
        with self._lock:
            conn = self._connectors.get(rel.name)
            if conn is not None and conn.options != options:  # ALTER SOURCE, here or in another process
                conn.close()
                conn = None
            if conn is None:
                conn = self._connectors[rel.name] = make_connector(rel.name, rel.schema, options,
                                                                   rel.definition.get("generated", {}))
            return conn

    def _reader(self, rel: Relation) -> Connector:
        """A connector of its own for a creating job's reads: they go through Spark, not the cached
        connector's client, which only the barrier loop's thread uses (and may replace), and they
        yield the CPU to the pipeline's."""
        options = rel.definition.get("connector")
        assert options, f"BUG: source {rel.name!r} has no connector"
        return make_connector(rel.name, rel.schema, options, rel.definition.get("generated", {})).in_background()

    def source_status(self, name: str) -> str | None:
        """Why a relation's connector is not advancing, as the barrier loop last found; read without
        touching the connector (only the barrier loop's thread uses its client)."""
        with self._lock:
            conn = self._connectors.get(name)
        return conn.status if conn is not None else None

    def forget(self, name: str) -> None:
        super().forget(name)
        with self._lock:
            conn = self._connectors.pop(name, None)
        if conn is not None:
            conn.close()

    def close_connectors(self) -> None:
        with self._lock:
            conns, self._connectors = list(self._connectors.values()), {}
        for conn in conns:
            conn.close()

    def snapshot(self, rel: Relation, epoch: int, vnodes: tuple[int, int] | None = None,
                 where: SparkColumn | None = None) -> DataFrame:
        if rel.kind != "source":
            return super().snapshot(rel, epoch, vnodes, where)
        assert where is None, "BUG: a source's snapshot filtered by key (only state tables are)"
        ranges = slot_ranges(self._source_snapshot(rel, epoch), vnodes)
        conn = self._reader(rel)
        if not ranges:
            return empty_frame(self.spark, "_vnode smallint, " + rel.schema.spark_ddl())
        rows = conn.read(self.spark, ranges)
        if conn.has_bad_records:  # set aside when the main graph read them
            rows = rows.where(f"{ERROR} IS NULL")
        rows = on_time_history(self.catalog, rel, rows)  # without the rows its epochs dropped as late
        return rows.select(vnode(list(rel.schema.key)).alias("_vnode"),
                           *[F.col(f"`{c.name}`") for c in rel.schema.columns])

    def rereads_cheaply(self, rel: Relation, epoch: int) -> bool:
        return rel.kind != "source" and super().rereads_cheaply(rel, epoch)  # a source's is read from Kafka

    def local_snapshot(self, rel: Relation, epoch: int, *, build: bool = False) -> pa.Table | None:
        return None if rel.kind == "source" else super().local_snapshot(rel, epoch, build=build)

    def vnode_rows(self, rel: Relation, epoch: int) -> list[int]:
        """The snapshot's rows per vnode; a source's offsets per slot."""
        if rel.kind == "source":
            return slot_counts(self._source_snapshot(rel, epoch))
        return snap.vnode_rows(self.catalog, rel.name, rel.schema, epoch)

    def log_file_rows(self, name: str, after: int, upto: int) -> list[EpochRows]:
        """The rows of a relation's log per epoch in `(after, upto]`; a source's offsets read per epoch."""
        if self.relation(name).kind == "source":
            return [EpochRows(e, sum(hi - lo for lo, hi in r.values()))
                    for e, r in self.catalog.source_ranges(name, after) if e <= upto]
        return self.catalog.log_file_rows(name, after, upto)

    def _source_snapshot(self, rel: Relation, epoch: int) -> dict[str, list[int]]:
        ranges = self.catalog.source_snapshot(rel.name, epoch)
        assert ranges is not None, f"BUG: no recorded history of source {rel.name!r} at epoch {epoch}"
        return ranges

    def source_log(self, rel: Relation, after: int, upto: int, folder: Path) -> list[tuple[int, str]]:
        """A source's log rows of the epochs in `(after, upto]`, read again from its connector by the
        ranges those epochs committed, as log files `(epoch, path)` in `folder` (a creating job's)."""
        conn = self._reader(rel)
        epochs = [r for r in self.catalog.source_ranges(rel.name, after) if r.epoch <= upto]
        if not epochs:
            return []
        rows = conn.read(self.spark, merged([r.ranges for r in epochs]))
        if conn.has_bad_records:
            rows = rows.where(f"{ERROR} IS NULL").drop(ERROR, RAW)
        table = to_arrow(with_vnode(rows, rel.schema))
        split, offset = conn.positions(table["_seq"])
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for e, ranges in epochs:
            mask = None
            for s, (lo, hi) in ranges.items():
                m = pc.and_(pc.equal(split, s), pc.and_(pc.greater_equal(offset, lo), pc.less(offset, hi)))
                mask = m if mask is None else pc.or_(mask, m)
            part = on_time_epoch(self.catalog, rel, e, table.filter(mask) if mask is not None else table.slice(0, 0))
            ops = pa.array([int(Op.INSERT)] * part.num_rows, pa.int8())
            part = part.set_column(part.schema.get_field_index("_op"), "_op", ops)
            path = str(folder / f"e{e}.parquet")
            write_table(log_rows(part, rel.schema, e), path)
            out.append((e, path))
        return out
