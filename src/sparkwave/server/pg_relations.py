"""What the emulated `pg_catalog` shows of a warehouse: one `RelationInfo` per table, materialized
view, source and sink, read from sparkwave's catalog (read-only) without Spark."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.types import DataType

if TYPE_CHECKING:
    from sparkwave.core.catalog import Catalog

KINDS = ("table", "mv", "source", "sink")
_MV_QUERY = re.compile(r"^\s*create\s+materialized\s+view\s+(?:if\s+not\s+exists\s+)?\S+\s+as\s+(.*)$",
                       re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class RelationInfo:
    """A relation as a PostgreSQL client sees it. `columns` are (name, Spark type, nullable), visible
    ones only; `primary_key` is empty where sparkwave keys rows by a hidden `_row_id` (append-only
    tables, sources) or where the key is not declared (MVs); `definition_sql` is an MV's SELECT."""

    name: str
    kind: str  # 'table' | 'mv' | 'source' | 'sink'
    columns: tuple[tuple[str, DataType, bool], ...]
    primary_key: tuple[str, ...] = ()
    definition_sql: str | None = None

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"BUG: relation kind {self.kind!r}"


def mv_query(create_sql: str | None) -> str | None:
    """The SELECT of a CREATE MATERIALIZED VIEW statement (what pg_matviews.definition shows)."""
    if not create_sql:
        return None
    m = _MV_QUERY.match(create_sql)
    return (m.group(1) if m else create_sql).strip().rstrip(";")


def relation_infos(catalog: Catalog) -> list[RelationInfo]:
    """The created tables, MVs and sources (in creation order), then the sinks. Reads the catalog only.
    Table and source definitions are not shown: their WITH options may hold credentials."""
    from sparkwave.core.schema import to_spark_type

    out: list[RelationInfo] = []
    by_name = {}
    for rel in catalog.relations():
        if rel.kind not in ("table", "mv", "source"):
            continue
        visible = {c.name for c in rel.schema.visible}
        key = tuple(rel.schema.key) if rel.kind == "table" and set(rel.schema.key) <= visible else ()
        cols = tuple((c.name, to_spark_type(c.type), c.name not in key) for c in rel.schema.visible)
        info = RelationInfo(rel.name, rel.kind, cols, key,
                            mv_query(rel.definition.get("sql")) if rel.kind == "mv" else None)
        by_name[rel.name] = info
        out.append(info)
    for sink in catalog.sinks():
        mv = by_name.get(sink.mv)
        out.append(RelationInfo(sink.name, "sink", tuple((n, t, True) for n, t, _ in mv.columns) if mv else ()))
    return out
