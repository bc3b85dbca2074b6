"""What every part of a running warehouse shares: the stored side (`storage/store.py`) and the
connectors of its sources."""

from __future__ import annotations

from pyspark.sql import SparkSession

from sparkwave.connectors import Connector, make_connector
from sparkwave.core.catalog import Catalog, Relation
from sparkwave.storage.store import Store
from sparkwave.storage.warehouse import Warehouse


class Runtime(Store):
    def __init__(self, spark: SparkSession, warehouse: Warehouse, catalog: Catalog) -> None:
        super().__init__(spark, warehouse, catalog)
        self._connectors: dict[str, Connector] = {}

    def connector(self, rel: Relation) -> Connector | None:
        options = rel.definition.get("connector")
        if not options:
            return None
        with self._lock:
            conn = self._connectors.get(rel.name)
            if conn is not None and conn.options != options:  # ALTER SOURCE, here or in another process
                conn.close()
                conn = None
            if conn is None:
                conn = self._connectors[rel.name] = make_connector(rel.name, rel.schema, options)
            return conn

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
