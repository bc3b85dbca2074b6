"""The stored side of a running warehouse: Spark, the catalog, the warehouse folder, and the open
stored tables of its relations, with snapshot reads checked against retention."""

from __future__ import annotations

import threading

import pyarrow as pa
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkwave.core.catalog import Catalog, Relation
from sparkwave.core.errors import CatalogError, NotRetainedError
from sparkwave.core.local_frames import local_frame
from sparkwave.storage import snapshot as snap
from sparkwave.storage.table import StoredTable, base_spark_ddl
from sparkwave.storage.warehouse import Warehouse


class Store:
    def __init__(self, spark: SparkSession, warehouse: Warehouse, catalog: Catalog) -> None:
        self.spark = spark
        self.warehouse = warehouse
        self.catalog = catalog
        self._tables: dict[str, StoredTable] = {}
        self._lock = threading.Lock()

    def relation(self, name: str) -> Relation:
        rel = self.catalog.relation(name)
        if rel is None:
            known = ", ".join(r.name for r in self.catalog.relations()) or "none"
            raise CatalogError(f"unknown table or materialized view {name!r} (known: {known})", sqlstate="42P01")
        return rel

    def stored(self, rel: Relation) -> StoredTable:
        with self._lock:
            t = self._tables.get(rel.name)
            if t is None or t.schema != rel.schema:
                t = StoredTable(self.warehouse.relation_dir(rel.name), rel.name, rel.schema)
                self._tables[rel.name] = t
            return t

    def stored_of(self, name: str) -> StoredTable:
        """`stored(relation(name))` without a catalog read when the table is open (DROP forgets it)."""
        with self._lock:
            t = self._tables.get(name)
        return t if t is not None else self.stored(self.relation(name))

    def forget(self, name: str) -> None:
        """Close a dropped relation's tables, its state tables (`<name>.<suffix>`) with it: a relation
        created later under the same name must not reuse their open Delta logs."""
        with self._lock:
            gone = [self._tables.pop(t) for t in [t for t in self._tables if t == name or t.startswith(f"{name}.")]]
        for table in gone:  # a Delta log commit under way ends first; none starts after (`delta_log.py`)
            table.close()

    def retained_from(self, rel: Relation) -> int:
        return self.catalog.retained_from(rel.name, rel.created_epoch)

    def check_retained(self, rel: Relation, epoch: int) -> None:
        committed = self.catalog.committed_epoch()
        lo = self.retained_from(rel)
        if epoch > committed:
            raise NotRetainedError(f"epoch {epoch} is not committed yet (latest committed epoch: {committed})")
        if epoch < lo:
            raise NotRetainedError(f"{rel.name!r} as of epoch {epoch} is no longer retained; "
                                   f"the oldest retained epoch is {lo}")

    def snapshot(self, rel: Relation, epoch: int, vnodes: tuple[int, int] | None = None,
                 where: SparkColumn | None = None) -> DataFrame:
        """All stored columns (hidden included, `_vnode` too) of `rel` as of a committed epoch, or
        only the rows of the vnodes in `[lo, hi)`, or only those a predicate on key columns holds
        for (`snapshot.snapshot`). The frame holds the whole snapshot or, if
        retention removes one of its files before it is evaluated, fails: never partial rows."""
        self.check_retained(rel, epoch)
        df = snap.snapshot(self.spark, self.catalog, rel.name, rel.schema, epoch, vnodes, where)
        # Retention forgets files in the catalog before it removes them: had it run while the files
        # were being listed, the listing may lack some, and this check says so.
        self.check_retained(rel, epoch)
        return df

    def rereads_cheaply(self, rel: Relation, epoch: int) -> bool:
        """Whether `snapshot(rel, epoch)` read again costs less than a cache (`snapshot.rereads_cheaply`)."""
        return snap.rereads_cheaply(self.catalog, rel.name, rel.schema, epoch)

    def visible(self, rel: Relation, epoch: int) -> DataFrame:
        """The visible columns of `rel` as of a committed epoch: a user's read (`read`)."""
        return self.read(rel, epoch).select(*[F.col(f"`{c.name}`") for c in rel.schema.visible])

    def read(self, rel: Relation, epoch: int, max_rows: int | None = None) -> DataFrame:
        """`snapshot(rel, epoch)` for a whole read: a small snapshot (of at most `max_rows` rows, if
        given) is read on the driver now (`snapshot.local_snapshot`) and handed to Spark as a local
        relation, so a query over it plans no file scan and, if it only projects and filters, runs no
        Spark job."""
        rows = self.local_snapshot(rel, epoch)
        if rows is None or (max_rows is not None and rows.num_rows > max_rows):
            return self.snapshot(rel, epoch)
        return local_frame(self.spark, rows, base_spark_ddl(rel.schema))

    def local_snapshot(self, rel: Relation, epoch: int, *, build: bool = False) -> pa.Table | None:
        """`snapshot(rel, epoch)`'s rows read on the driver, if small (`snapshot.local_snapshot`; for
        a driver build, `build`)."""
        self.check_retained(rel, epoch)
        for attempt in range(2):
            try:
                rows = snap.local_snapshot(self.catalog, rel.name, rel.schema, epoch, build=build)
                break
            except FileNotFoundError:
                # Retention removed a file after the listing: either the epoch is gone, or a newer
                # base covers it now (compaction, then retention of the old base): list it again.
                self.check_retained(rel, epoch)
                if attempt:
                    raise
        self.check_retained(rel, epoch)
        return rows
