"""The rows of the emulated catalog tables for a list of `RelationInfo`s.

OIDs: PostgreSQL's own for built-in objects (types, pg_catalog, public, the catalog tables psql
and SQLAlchemy name by `'pg_class'::regclass`); a user relation's OID comes from its name (stable
across DDL of other relations, which a client holding an OID between two queries relies on), with
the next three numbers for its primary key index, its constraint and spare."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sparkwave.server.pg_catalog_schema import TABLES
from sparkwave.server.pg_catalog_types import BY_OID, TYPES, format_type, pg_type_of, storage_of, type_by_name
from sparkwave.server.pg_relations import RelationInfo

USER_OID = 10
DATABASE_OID = 16383
NS_PG_CATALOG, NS_PUBLIC, NS_INFORMATION_SCHEMA, NS_PG_TOAST = 11, 2200, 13183, 99
NAMESPACES = {NS_PG_CATALOG: "pg_catalog", NS_PUBLIC: "public", NS_INFORMATION_SCHEMA: "information_schema",
              NS_PG_TOAST: "pg_toast"}
HEAP_AM, BTREE_AM = 2, 403
DEFAULT_COLLATION = 100
FIRST_USER_OID = 16384
_NOT_NULL_OIDS = 3_000_000_000  # numbered per build: only ever read within one query
_RELKIND = {"table": "r", "mv": "m", "source": "s", "sink": "k"}  # RisingWave's letters for sources and sinks
_TABLE_TYPE = {"table": "BASE TABLE", "mv": "MATERIALIZED VIEW", "source": "SOURCE", "sink": "SINK"}
# PostgreSQL's OIDs of the catalog tables clients name with ::regclass
_KNOWN_TABLE_OIDS = {
    "pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255, "pg_class": 1259, "pg_database": 1262,
    "pg_attrdef": 2604, "pg_constraint": 2606, "pg_inherits": 2611, "pg_index": 2610, "pg_operator": 2617,
    "pg_description": 2609, "pg_namespace": 2615, "pg_am": 2601, "pg_trigger": 2620, "pg_rewrite": 2618,
    "pg_collation": 3456, "pg_extension": 3079, "pg_shdescription": 2396, "pg_tablespace": 1213,
}
_VIEWS = {"pg_roles", "pg_user", "pg_settings", "pg_matviews", "pg_views", "pg_tables", "pg_indexes",
          "pg_sequences", "pg_rules", "pg_user_mappings", "pg_stat_activity", "pg_locks", "pg_stat_user_tables",
          "pg_statio_user_tables", "pg_timezone_names", "pg_available_extensions"}


@dataclass
class Objects:
    """Name <-> OID of the relations and namespaces, for ::regclass, pg_table_is_visible, ..."""

    rel_oid: dict[tuple[str, str], int] = field(default_factory=dict)  # (schema, name) -> oid
    rel_name: dict[int, tuple[str, str]] = field(default_factory=dict)
    index_def: dict[int, str] = field(default_factory=dict)  # index oid -> CREATE INDEX ...
    constraint_def: dict[int, str] = field(default_factory=dict)  # constraint oid -> PRIMARY KEY (...)

    def add(self, schema: str, name: str, oid: int) -> None:
        self.rel_oid[(schema, name)] = oid
        self.rel_name[oid] = (schema, name)

    def lookup(self, text: str) -> int | None:
        """The OID of a relation named `text` ('orders', 'public.orders', 'pg_catalog.pg_class')."""
        parts = [p.strip('"') for p in text.split(".")]
        if len(parts) == 2:
            return self.rel_oid.get((parts[0], parts[1]))
        for schema in ("pg_catalog", "public", "information_schema"):
            if (oid := self.rel_oid.get((schema, parts[-1]))) is not None:
                return oid
        return None


def _user_oids(infos: Iterable[RelationInfo]) -> dict[str, int]:
    taken: set[int] = set()
    out = {}
    for info in infos:
        slot = zlib.crc32(info.name.encode()) % (1 << 28)
        while slot in taken:
            slot = (slot + 1) % (1 << 28)
        taken.add(slot)
        out[info.name] = FIRST_USER_OID + 4 * slot
    return out


def _j(values: Iterable[Any]) -> str:
    return json.dumps(list(values))


def build(infos: list[RelationInfo], database: str, user: str) -> tuple[dict[str, list[tuple]], Objects]:
    """The rows of every catalog table, by 'schema.table', and the name/OID maps."""
    rows: dict[str, list[tuple]] = {f"{s}.{t}": [] for s, tables in TABLES.items() for t in tables}
    objects = Objects()
    _fixed_rows(rows, database, user)
    _catalog_relations(rows, objects)
    oids = _user_oids(infos)
    for info in infos:
        _user_relation(rows, objects, info, oids[info.name], database, user)
    return rows, objects


def _fixed_rows(rows: dict[str, list[tuple]], database: str, user: str) -> None:
    for oid, name in NAMESPACES.items():
        rows["pg_catalog.pg_namespace"].append((oid, name, USER_OID, None))
    for t in TYPES:
        typtype = "p" if t.category == "P" else "b"
        collation = DEFAULT_COLLATION if t.name in ("text", "varchar", "bpchar") else 950 if t.name == "name" else 0
        storage = "x" if t.length < 0 else "p"
        rows["pg_catalog.pg_type"].append((
            t.oid, t.name, NS_PG_CATALOG, USER_OID, t.length, int(t.byval), typtype, t.category, int(t.preferred),
            1, ",", 0, "array_subscript_handler" if t.elem else "-", t.elem, t.array, f"{t.name}in",
            f"{t.name}out", f"{t.name}recv", f"{t.name}send", "-", "-", "-", t.align, storage, 0, 0, -1, 0,
            collation, None, None, None))
    rows["pg_catalog.pg_database"].append((
        DATABASE_OID, database, USER_OID, 6, "c", 0, 1, 0, -1, "730", "1", 1663, "C.UTF-8", "C.UTF-8", None,
        None, None, None))
    rows["pg_catalog.pg_roles"].append(
        (user, 1, 1, 1, 1, 1, 0, -1, "********", None, 1, None, USER_OID))
    rows["pg_catalog.pg_user"].append((user, USER_OID, 1, 1, 0, 1, "********", None, None))
    rows["pg_catalog.pg_am"] += [(HEAP_AM, "heap", "heap_tableam_handler", "t"),
                                 (BTREE_AM, "btree", "bthandler", "i")]
    rows["pg_catalog.pg_collation"] += [
        (DEFAULT_COLLATION, "default", NS_PG_CATALOG, USER_OID, "d", 1, -1, None, None, None, None, None),
        (950, "C", NS_PG_CATALOG, USER_OID, "c", 1, -1, "C", "C", None, None, None),
        (951, "POSIX", NS_PG_CATALOG, USER_OID, "c", 1, -1, "POSIX", "POSIX", None, None, None)]
    rows["pg_catalog.pg_tablespace"] += [(1663, "pg_default", USER_OID, None, None),
                                         (1664, "pg_global", USER_OID, None, None)]
    rows["pg_catalog.pg_language"] += [(12, "internal", USER_OID, 0, 0, 0, 0, 2246, None),
                                       (13, "c", USER_OID, 0, 0, 0, 0, 2247, None),
                                       (14, "sql", USER_OID, 0, 1, 0, 0, 2248, None)]
    for ns in ("pg_catalog", "public", "information_schema"):
        rows["information_schema.schemata"].append((database, ns, user, None, None, None, None))
    rows["information_schema.enabled_roles"].append((user,))
    rows["information_schema.character_sets"].append(
        (None, None, "UTF8", "UCS", "UTF8", database, "pg_catalog", "C.UTF-8"))


def _catalog_relations(rows: dict[str, list[tuple]], objects: Objects) -> None:
    """The catalog tables themselves, so that `\\d pg_class` and `'pg_constraint'::regclass` work."""
    next_oid = 12000
    for schema, tables in TABLES.items():
        ns = NS_PG_CATALOG if schema == "pg_catalog" else NS_INFORMATION_SCHEMA
        for name, cols in tables.items():
            oid = _KNOWN_TABLE_OIDS.get(name) if schema == "pg_catalog" else None
            if oid is None:
                oid, next_oid = next_oid, next_oid + 1
            objects.add(schema, name, oid)
            kind = "v" if schema == "information_schema" or name in _VIEWS else "r"
            rows["pg_catalog.pg_class"].append(_class_row(oid, name, ns, kind, len(cols), False))
            for num, (col, typ) in enumerate(cols, 1):
                t = type_by_name(typ)
                rows["pg_catalog.pg_attribute"].append(
                    _attribute_row(oid, col, num, t.oid if t else 25, -1, not_null=False))


def _class_row(oid: int, name: str, ns: int, kind: str, natts: int, has_index: bool) -> tuple:
    am = HEAP_AM if kind in ("r", "m") else BTREE_AM if kind == "i" else 0
    rules = int(kind == "m")  # a materialized view's _RETURN rule, as PostgreSQL has
    return (oid, name, ns, 0, 0, USER_OID, am, oid, 0, 0, -1.0, 0, 0, 0, int(has_index), 0, "p", kind, natts, 0,
            rules, 0, 0, 0, 0, 1, "d" if kind in ("r", "m") else "n", 0, 0, "0", "0", None, None, None)


def _attribute_row(relid: int, name: str, num: int, type_oid: int, typmod: int, *, not_null: bool) -> tuple:
    t = BY_OID[type_oid]
    collation = DEFAULT_COLLATION if t.name in ("text", "varchar", "bpchar") else 0
    return (relid, name, type_oid, t.length, num, -1, typmod, 1 if t.category == "A" else 0, int(t.byval),
            t.align, storage_of(type_oid), "", int(not_null), 0, 0, "", "", 0, 1, 0, collation, None, None,
            None, None, None)


def _user_relation(rows: dict[str, list[tuple]], objects: Objects, info: RelationInfo, oid: int,
                   database: str, user: str) -> None:
    kind = _RELKIND[info.kind]
    objects.add("public", info.name, oid)
    pk = info.primary_key
    rows["pg_catalog.pg_class"].append(_class_row(oid, info.name, NS_PUBLIC, kind, len(info.columns), bool(pk)))
    attnum = {}
    for num, (name, dtype, nullable) in enumerate(info.columns, 1):
        type_oid, typmod = pg_type_of(dtype)
        attnum[name] = num
        if not nullable and kind == "r":  # PostgreSQL 18 names each NOT NULL as a constraint (\d+ lists them)
            rows["pg_catalog.pg_constraint"].append((
                _NOT_NULL_OIDS + len(rows["pg_catalog.pg_constraint"]), f"{info.name}_{name}_not_null", NS_PUBLIC,
                "n", 0, 0, 1, 1, oid, 0, 0, 0, 0, " ", " ", " ", 1, 0, 0, 0, _j([num]), None, None, None, None, None,
                None, None))
        rows["pg_catalog.pg_attribute"].append(_attribute_row(oid, name, num, type_oid, typmod, not_null=not nullable))
        _information_column(rows, info, database, name, num, type_oid, typmod, nullable)
    rows["information_schema.tables"].append(
        (database, "public", info.name, _TABLE_TYPE[info.kind], None, None, None, None, None,
         "YES" if info.kind == "table" else "NO", "NO", None))
    if info.kind == "table":
        rows["pg_catalog.pg_tables"].append(("public", info.name, user, None, int(bool(pk)), 0, 0, 0))
    if info.kind == "mv":
        rows["pg_catalog.pg_matviews"].append(("public", info.name, user, None, 0, 1, info.definition_sql))
    if pk:
        _primary_key(rows, objects, info, oid, [attnum[c] for c in pk], database)


def _primary_key(rows: dict[str, list[tuple]], objects: Objects, info: RelationInfo, oid: int, keys: list[int],
                 database: str) -> None:
    index_oid, con_oid, name = oid + 1, oid + 2, f"{info.name}_pkey"
    cols = ", ".join(_ident(c) for c in info.primary_key)
    objects.add("public", name, index_oid)
    objects.index_def[index_oid] = (f"CREATE UNIQUE INDEX {_ident(name)} ON public.{_ident(info.name)} "
                                    f"USING btree ({cols})")
    objects.constraint_def[con_oid] = f"PRIMARY KEY ({cols})"
    rows["pg_catalog.pg_class"].append(_class_row(index_oid, name, NS_PUBLIC, "i", len(keys), False))
    types = {n: dtype for n, dtype, _ in info.columns}
    for num, col in enumerate(info.primary_key, 1):
        type_oid, typmod = pg_type_of(types[col])
        rows["pg_catalog.pg_attribute"].append(_attribute_row(index_oid, col, num, type_oid, typmod, not_null=True))
    zeros = _j(0 for _ in keys)
    rows["pg_catalog.pg_index"].append((
        index_oid, oid, len(keys), len(keys), 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 0, _j(keys), zeros, zeros, zeros,
        None, None))
    rows["pg_catalog.pg_constraint"].append((
        con_oid, name, NS_PUBLIC, "p", 0, 0, 1, 1, oid, 0, index_oid, 0, 0, " ", " ", " ", 1, 0, 1, 0, _j(keys),
        None, None, None, None, None, None, None))
    rows["pg_catalog.pg_indexes"].append(("public", info.name, name, None, objects.index_def[index_oid]))
    rows["information_schema.table_constraints"].append(
        (database, "public", name, database, "public", info.name, "PRIMARY KEY", "NO", "NO", "YES", None))
    for pos, col in enumerate(info.primary_key, 1):
        rows["information_schema.key_column_usage"].append(
            (database, "public", name, database, "public", info.name, col, pos, None))
        rows["information_schema.constraint_column_usage"].append(
            (database, "public", info.name, col, database, "public", name))


def _information_column(rows: dict[str, list[tuple]], info: RelationInfo, database: str, name: str, num: int,
                        type_oid: int, typmod: int, nullable: bool) -> None:
    t = BY_OID[type_oid]
    data_type = format_type(type_oid, -1) or "text"
    precision = scale = radix = dt_precision = None
    if t.name == "numeric":
        radix = 10
        if typmod >= 4:
            precision, scale = (typmod - 4) >> 16, (typmod - 4) & 0xFFFF
    elif t.name in ("int2", "int4", "int8"):
        precision, scale, radix = {"int2": 16, "int4": 32, "int8": 64}[t.name], 0, 2
    elif t.name in ("float4", "float8"):
        precision, radix = (24 if t.name == "float4" else 53), 2
    elif t.category == "D":
        dt_precision = 0 if t.name == "date" else 6
    octets = 1073741824 if t.name in ("varchar", "text") else None
    rows["information_schema.columns"].append((
        database, "public", info.name, name, num, None, "YES" if nullable else "NO", data_type, None, octets,
        precision, radix, scale, dt_precision, None, None, None, None, None, None, None, None, None, None, None,
        database, "pg_catalog", t.name, None, None, None, None, str(num), "NO", "NO", None, None, None, None, None,
        "NO", "NEVER", None, "YES" if info.kind == "table" else "NO"))


def _ident(name: str) -> str:
    """quote_ident: quoted unless a lower-case plain identifier."""
    if name and (name[0].isalpha() or name[0] == "_") and all(c.islower() or c.isdigit() or c == "_" for c in name):
        return name
    return '"' + name.replace('"', '""') + '"'


quote_ident = _ident
