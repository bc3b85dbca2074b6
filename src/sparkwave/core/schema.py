"""Column types and relation schemas, with their Arrow, Spark and DuckDB spellings.

A relation's stored row is its visible columns plus hidden ones (`_row_id`, or the upstream key
columns an MV keeps so that its own key derives from its upstream's)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from sparkwave.core.errors import SqlError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

# Column names sparkwave gives its own columns (log rows, change chunks, Z-sets, a keyless table's
# row id): no user column or MV output may take them.
RESERVED_COLUMNS = frozenset({"_epoch", "_seq", "_op", "_vnode", "_w", "_row_id", "_rn"})
MAX_COLUMN_NAME = 63  # PostgreSQL's NAMEDATALEN - 1, as for relation names (core/names.py)


def column_name_problem(name: str) -> str | None:
    """What `name` breaks of the rule for a stored column's name, or None. sparkwave quotes a
    column for Spark in backticks (`F.col(f"`{name}`")`), which cannot hold a backtick; control
    characters and outer spaces make names that look alike and stall clients; sparkwave's own
    columns are reserved. Quoted names otherwise keep their spaces and case."""
    if "`" in name:
        return "contains a backtick (`), which Spark cannot quote"
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        return "contains a control character (NUL, tab, newline ...)"
    if not name.strip():
        return "is empty or only spaces"
    if name != name.strip():
        return "has leading or trailing spaces"
    if len(name) > MAX_COLUMN_NAME:
        return f"is longer than {MAX_COLUMN_NAME} characters ({len(name)})"
    if name in RESERVED_COLUMNS:
        return "is reserved for sparkwave's own columns"
    return None

_ALIASES = {
    "bool": "boolean", "boolean": "boolean",
    "smallint": "smallint", "int2": "smallint",
    "int": "int", "integer": "int", "int4": "int",
    "bigint": "bigint", "int8": "bigint",
    "real": "real", "float4": "real",
    "double": "double", "double precision": "double", "float8": "double", "float": "double",
    "varchar": "varchar", "text": "varchar", "string": "varchar", "character varying": "varchar",
    "date": "date",
    "timestamp": "timestamp", "timestamp without time zone": "timestamp",
    "timestamptz": "timestamptz", "timestamp with time zone": "timestamptz",
    "bytea": "bytea", "varbinary": "bytea", "binary": "bytea",
}
_NO_INTERVAL = ("{what} cannot be stored: Delta Lake and Parquet have no interval type. Store the length as a "
                "number, e.g. extract(epoch FROM b - a) for seconds, or the two timestamps; INTERVAL in expressions "
                "(ts + INTERVAL '1' HOUR, windows) works")
_DECIMAL = re.compile(r"^(?:decimal|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")
_VARCHAR_N = re.compile(r"^(?:varchar|character varying)\s*\(\s*\d+\s*\)$")


@dataclass(frozen=True)
class SqlType:
    """A column type by its canonical name: boolean, smallint, int, bigint, real, double,
    decimal(p,s), varchar, date, timestamp, timestamptz, bytea."""

    name: str

    @property
    def arrow(self) -> pa.DataType:
        if self.name.startswith("decimal"):
            p, s = _decimal_ps(self.name)
            return pa.decimal128(p, s)
        return _ARROW[self.name]

    @property
    def spark(self) -> str:
        if self.name.startswith("decimal"):
            return self.name
        return _SPARK[self.name]

    @property
    def is_numeric(self) -> bool:
        return self.name in ("smallint", "int", "bigint", "real", "double") or self.name.startswith("decimal")

    def __str__(self) -> str:
        return self.name


_ARROW = {
    "boolean": pa.bool_(), "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(),
    "real": pa.float32(), "double": pa.float64(), "varchar": pa.string(), "date": pa.date32(),
    "timestamp": pa.timestamp("us"), "timestamptz": pa.timestamp("us", tz="UTC"), "bytea": pa.binary(),
}
_SPARK = {
    "boolean": "boolean", "smallint": "smallint", "int": "int", "bigint": "bigint", "real": "float",
    "double": "double", "varchar": "string", "date": "date", "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp", "bytea": "binary",
}


def _decimal_ps(name: str) -> tuple[int, int]:
    m = re.match(r"decimal\((\d+),(\d+)\)", name)
    assert m, f"BUG: malformed decimal type {name!r}"
    return int(m.group(1)), int(m.group(2))


def parse_type(text: str) -> SqlType:
    """Parse a SQL type name; raises SqlError naming the type if unsupported."""
    t = " ".join(text.strip().lower().split())
    if t in _ALIASES:
        return SqlType(_ALIASES[t])
    if _VARCHAR_N.match(t):
        return SqlType("varchar")
    m = _DECIMAL.match(t)
    if m:
        p = int(m.group(1) or 38)
        s = int(m.group(2) or (0 if m.group(1) else 10))
        if not 1 <= p <= 38 or not 0 <= s <= p:
            raise SqlError(f"invalid decimal precision/scale in type {text!r}")
        return SqlType(f"decimal({p},{s})")
    if t.startswith("interval"):
        raise SqlError(_NO_INTERVAL.format(what=f"column type {text!r}"))
    if t.endswith("[]") or t.startswith("array"):
        raise SqlError(f"unsupported column type {text!r}: arrays are not a column type in sparkwave (left out on "
                       "purpose); store the elements as rows, or as text (string_agg)")
    raise SqlError(
        f"unsupported column type {text!r}; supported: boolean, smallint, int, bigint, real, "
        "double precision, decimal(p,s), varchar/text, date, timestamp, timestamptz, bytea"
    )


def _spark_classes() -> dict[type, str]:
    """Spark's DataType classes and our type names (ByteType first: ShortType is smallint's own)."""
    from pyspark.sql import types as T

    return {
        T.BooleanType: "boolean", T.ByteType: "smallint", T.ShortType: "smallint", T.IntegerType: "int",
        T.LongType: "bigint", T.FloatType: "real", T.DoubleType: "double", T.StringType: "varchar",
        T.DateType: "date", T.TimestampNTZType: "timestamp", T.TimestampType: "timestamptz",
        T.BinaryType: "bytea",
    }


def to_spark_type(t: SqlType) -> DataType:
    """The Spark DataType of a SqlType (no JVM round trip, unlike parsing `t.spark`)."""
    from pyspark.sql import types as T

    if t.name.startswith("decimal"):
        return T.DecimalType(*_decimal_ps(t.name))
    cls = next(c for c, name in reversed(list(_spark_classes().items())) if name == t.name)
    return cls()


def from_spark(dtype: DataType) -> SqlType:
    """The SqlType of a Spark DataType (the result type of an MV's expression)."""
    from pyspark.sql import types as T

    for cls, name in _spark_classes().items():
        if isinstance(dtype, cls):
            return SqlType(name)
    if isinstance(dtype, T.DecimalType):
        return SqlType(f"decimal({dtype.precision},{dtype.scale})")
    if isinstance(dtype, T.NullType):
        return SqlType("varchar")
    if isinstance(dtype, T.DayTimeIntervalType | T.YearMonthIntervalType | T.CalendarIntervalType):
        raise SqlError(_NO_INTERVAL.format(what="an expression of type interval"))
    if isinstance(dtype, T.ArrayType):
        raise SqlError(f"an expression of type {dtype.simpleString()} cannot be stored: arrays are not a column "
                       "type in sparkwave (left out on purpose); use string_agg, or keep the elements as rows")
    raise SqlError(f"expressions of type {dtype.simpleString()} cannot be stored in a materialized view")


@dataclass(frozen=True)
class Column:
    name: str
    type: SqlType
    hidden: bool = False

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type.name, "hidden": self.hidden}

    @staticmethod
    def from_json(d: dict) -> Column:
        return Column(d["name"], SqlType(d["type"]), d.get("hidden", False))


@dataclass(frozen=True)
class Schema:
    """A relation's stored columns (visible and hidden) and its key.

    `append_only` relations only ever receive inserts; their key is a hidden `_row_id`."""

    columns: tuple[Column, ...]
    key: tuple[str, ...]
    append_only: bool = False
    _by_name: dict[str, Column] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {c.name: c for c in self.columns})

    def column(self, name: str) -> Column | None:
        return self._by_name.get(name)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def visible(self) -> list[Column]:
        return [c for c in self.columns if not c.hidden]

    @property
    def values(self) -> list[str]:
        """Non-key column names."""
        return [c.name for c in self.columns if c.name not in self.key]

    def arrow(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type.arrow) for c in self.columns])

    def spark_ddl(self) -> str:
        return ", ".join(f"`{c.name}` {c.type.spark}" for c in self.columns)

    def to_json(self) -> dict:
        return {"columns": [c.to_json() for c in self.columns], "key": list(self.key),
                "append_only": self.append_only}

    @staticmethod
    def from_json(d: dict) -> Schema:
        return Schema(tuple(Column.from_json(c) for c in d["columns"]), tuple(d["key"]), d["append_only"])
