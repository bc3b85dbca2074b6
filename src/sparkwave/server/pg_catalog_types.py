"""PostgreSQL's built-in types as the emulated `pg_type` lists them, `format_type`, and the mapping
between sparkwave's (Spark) column types and PostgreSQL types (OID, typmod).

The OIDs are PostgreSQL's own (`pg_type.dat`), so a client that caches them by OID (psycopg,
asyncpg, JDBC) sees the same numbers as from a real server."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T

from sparkwave.server.pgtypes import pg_type


@dataclass(frozen=True)
class PgType:
    oid: int
    name: str
    length: int  # typlen: bytes, -1 variable, -2 C string
    category: str  # typcategory: B boolean, N numeric, S string, D date/time, U user, A array, ...
    array: int = 0  # typarray: the OID of its array type
    elem: int = 0  # typelem: an array's element type
    align: str = "i"
    preferred: bool = False

    @property
    def byval(self) -> bool:
        return 0 < self.length <= 8


_BASE = [
    PgType(16, "bool", 1, "B", 1000, align="c", preferred=True),
    PgType(17, "bytea", -1, "U", 1001),
    PgType(18, "char", 1, "Z", 1002, align="c"),
    PgType(19, "name", 64, "S", 1003, align="c"),
    PgType(20, "int8", 8, "N", 1016, align="d"),
    PgType(21, "int2", 2, "N", 1005, align="s"),
    PgType(22, "int2vector", -1, "A", 1006, elem=21),
    PgType(23, "int4", 4, "N", 1007),
    PgType(24, "regproc", 4, "N", 1008),
    PgType(25, "text", -1, "S", 1009, preferred=True),
    PgType(26, "oid", 4, "N", 1028, preferred=True),
    PgType(30, "oidvector", -1, "A", 1013, elem=26),
    PgType(114, "json", -1, "U", 199),
    PgType(194, "pg_node_tree", -1, "Z"),
    PgType(700, "float4", 4, "N", 1021),
    PgType(701, "float8", 8, "N", 1022, align="d", preferred=True),
    PgType(705, "unknown", -2, "X", align="c"),
    PgType(1033, "aclitem", 16, "U", 1034, align="d"),
    PgType(1042, "bpchar", -1, "S", 1014),
    PgType(1043, "varchar", -1, "S", 1015),
    PgType(1082, "date", 4, "D", 1182),
    PgType(1083, "time", 8, "D", 1183, align="d"),
    PgType(1114, "timestamp", 8, "D", 1115, align="d"),
    PgType(1184, "timestamptz", 8, "D", 1185, align="d", preferred=True),
    PgType(1186, "interval", 16, "T", 1187, align="d", preferred=True),
    PgType(1266, "timetz", 12, "D", 1270, align="d"),
    PgType(1700, "numeric", -1, "N", 1231),
    PgType(2205, "regclass", 4, "N", 2210),
    PgType(2206, "regtype", 4, "N", 2211),
    PgType(4089, "regnamespace", 4, "N", 4090),
    PgType(2249, "record", -1, "P", 2287, align="d"),
    PgType(2275, "cstring", -2, "P", 1263, align="c"),
    PgType(2276, "any", 4, "P"),
    PgType(2277, "anyarray", -1, "P", align="d"),
    PgType(2278, "void", 4, "P"),
    PgType(2950, "uuid", 16, "U", 2951, align="c"),
    PgType(3802, "jsonb", -1, "U", 3807),
]


def _arrays() -> list[PgType]:
    return [PgType(t.array, "_" + t.name, -1, "A", elem=t.oid, align="d" if t.align == "d" else "i")
            for t in _BASE if t.array]


TYPES: tuple[PgType, ...] = tuple(_BASE + _arrays())
BY_OID: dict[int, PgType] = {t.oid: t for t in TYPES}
BY_NAME: dict[str, PgType] = {t.name: t for t in TYPES}

# The names SQL spells (and format_type prints) for the internal names.
_SQL_NAMES = {
    "bool": "boolean", "int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
    "float8": "double precision", "varchar": "character varying", "bpchar": "character",
    "timestamp": "timestamp without time zone", "timestamptz": "timestamp with time zone",
    "time": "time without time zone", "timetz": "time with time zone", "char": '"char"',
}
ALIASES = {
    "boolean": "bool", "smallint": "int2", "integer": "int4", "int": "int4", "bigint": "int8", "real": "float4",
    "double precision": "float8", "double": "float8", "float": "float8", "character varying": "varchar",
    "character": "bpchar", "decimal": "numeric", "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz", "string": "text", '"char"': "char",
}


def type_by_name(name: str) -> PgType | None:
    """A type by any of its SQL spellings, `pg_catalog.` prefix and case ignored."""
    n = " ".join(name.lower().replace("pg_catalog.", "").split()).strip()
    if n.endswith("[]"):
        elem = type_by_name(n[:-2])
        return BY_OID.get(elem.array) if elem and elem.array else None
    n = n.split("(")[0].strip()
    return BY_NAME.get(ALIASES.get(n, n))


def format_type(oid: int | None, typmod: int | None) -> str | None:
    """PostgreSQL's `format_type(oid, typmod)`: `numeric(10,2)`, `character varying(20)`, `integer[]`."""
    if oid is None:
        return None
    t = BY_OID.get(int(oid))
    if t is None:
        return "???"
    if t.category == "A" and t.elem and t.name.startswith("_"):
        return f"{format_type(t.elem, typmod)}[]"
    name = _SQL_NAMES.get(t.name, t.name)
    mod = -1 if typmod is None else int(typmod)
    if mod >= 0:
        if t.name == "numeric" and mod >= 4:
            p, s = (mod - 4) >> 16, (mod - 4) & 0xFFFF
            return f"numeric({p},{s})"
        if t.name in ("varchar", "bpchar") and mod >= 4:
            return f"{name}({mod - 4})"
    return name


def pg_type_of(dtype: T.DataType) -> tuple[int, int]:
    """The (type OID, typmod) a column of Spark type `dtype` has in the catalog: the type its rows
    are sent as (`pgtypes.pg_type`), so `pg_attribute` and a query's RowDescription agree."""
    t = pg_type(dtype)
    return t.oid, t.typmod


def spark_type_of(oid: int) -> T.DataType:
    """The Spark type a catalog result column of PostgreSQL type `oid` is returned as (the wire
    encodes it from there): oid and int8 as bigint, name/char/text/regclass... as strings, arrays
    as Spark arrays of their element's type."""
    t = BY_OID.get(oid)
    if t is None:
        return T.StringType()
    if t.category == "A" and t.elem:
        return T.ArrayType(spark_type_of(t.elem))
    simple: dict[str, T.DataType] = {
        "bool": T.BooleanType(), "int2": T.ShortType(), "int4": T.IntegerType(), "int8": T.LongType(),
        "oid": T.LongType(), "float4": T.FloatType(), "float8": T.DoubleType(), "date": T.DateType(),
        "timestamp": T.TimestampNTZType(), "timestamptz": T.TimestampType(), "bytea": T.BinaryType(),
    }
    return simple.get(t.name, T.StringType())


def storage_of(oid: int) -> str:
    """attstorage/typstorage: plain for fixed-length types, extended for the variable ones."""
    t = BY_OID.get(oid)
    if t is None or t.length > 0:
        return "p"
    return "m" if t.name == "numeric" else "x"
