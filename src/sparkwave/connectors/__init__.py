"""Connectors that feed tables: datagen and Nexmark."""

from __future__ import annotations

from sparkwave.connectors.base import Connector
from sparkwave.connectors.datagen import Datagen
from sparkwave.connectors.nexmark import Nexmark
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Schema

CONNECTORS: dict[str, type[Connector]] = {"datagen": Datagen, "nexmark": Nexmark}


def make_connector(table: str, schema: Schema, options: dict[str, str]) -> Connector:
    name = options.get("connector", "")
    if name not in CONNECTORS:
        raise SqlError(f"table {table!r}: unknown connector {name!r}; supported: {', '.join(CONNECTORS)}")
    return CONNECTORS[name](table, schema, options)
