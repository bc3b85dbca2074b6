"""Connectors: sources that feed tables (datagen, Nexmark, Kafka) and sink targets (PostgreSQL,
Kafka, Delta Lake, Iceberg)."""

from __future__ import annotations

from collections.abc import Iterable

from sparkwave.connectors.base import Connector
from sparkwave.connectors.datagen import Datagen
from sparkwave.connectors.delta_source import DeltaSource
from sparkwave.connectors.files import PosixFs
from sparkwave.connectors.kafka import Kafka
from sparkwave.connectors.nexmark import Nexmark
from sparkwave.connectors.postgres_cdc import PostgresCdc
from sparkwave.connectors.sink import SinkSpec, SinkTarget
from sparkwave.connectors.sink_delta import DeltaSink
from sparkwave.connectors.sink_iceberg import IcebergSink
from sparkwave.connectors.sink_kafka import KafkaSink
from sparkwave.connectors.sink_postgres import PostgresSink
from sparkwave.core.catalog import Relation
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Schema

CONNECTORS: dict[str, type[Connector]] = {"datagen": Datagen, "nexmark": Nexmark, "kafka": Kafka,
                                           "deltalake": DeltaSource, "posix_fs": PosixFs, "postgres-cdc": PostgresCdc}
SOURCE_CONNECTORS = ("kafka", "deltalake", "posix_fs")  # those whose history can be read again (CREATE SOURCE)
SINKS: dict[str, type[SinkTarget]] = {"postgres": PostgresSink, "kafka": KafkaSink, "deltalake": DeltaSink,
                                      "iceberg": IcebergSink}


def connector_class(table: str, options: dict[str, str]) -> type[Connector]:
    name = options.get("connector", "")
    if name not in CONNECTORS:
        raise SqlError(f"table {table!r}: unknown connector {name!r}; supported: {', '.join(CONNECTORS)}")
    return CONNECTORS[name]


def make_connector(table: str, schema: Schema, options: dict[str, str], computed: Iterable[str] = ()) -> Connector:
    """`computed`: the table's generated columns (its definition's `generated`), not read by the connector."""
    conn = connector_class(table, options)(table, schema, options)
    conn.computed = frozenset(computed)
    return conn


def refuse_shared(conn: Connector, others: Iterable[Relation]) -> None:
    """CREATE refuses a connector naming what another relation's reads alone (a replication slot:
    two readers would each advance it past the other's changes)."""
    mine = set(conn.exclusive())
    for rel in others if mine else ():
        options = rel.spec.connector or {}
        if rel.name == conn.table or options.get("connector") != conn.options.get("connector"):
            continue
        try:
            theirs = set(make_connector(rel.name, rel.schema, options).exclusive())
        except SqlError:  # options no longer valid (an older version's): that relation reads nothing
            continue
        for clash in mine & theirs:
            raise SqlError(f"{conn.where}: {clash} is read by table {rel.name!r}; name another")


def make_sink(spec: SinkSpec) -> SinkTarget:
    name = spec.options.get("connector", "")
    if name not in SINKS:
        raise spec.error(f"unknown connector {name!r}; supported sink connectors: {', '.join(SINKS)}")
    return SINKS[name](spec)
