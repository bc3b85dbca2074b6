"""Connectors that feed tables: datagen, Nexmark and Kafka."""

from __future__ import annotations

from sparkwave.connectors.base import Connector
from sparkwave.connectors.datagen import Datagen
from sparkwave.connectors.kafka import Kafka
from sparkwave.connectors.nexmark import Nexmark
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Schema

CONNECTORS: dict[str, type[Connector]] = {"datagen": Datagen, "nexmark": Nexmark, "kafka": Kafka}


def connector_class(table: str, options: dict[str, str]) -> type[Connector]:
    name = options.get("connector", "")
    if name not in CONNECTORS:
        raise SqlError(f"table {table!r}: unknown connector {name!r}; supported: {', '.join(CONNECTORS)}")
    return CONNECTORS[name]


def make_connector(table: str, schema: Schema, options: dict[str, str]) -> Connector:
    return connector_class(table, options)(table, schema, options)
