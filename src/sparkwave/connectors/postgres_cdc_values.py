"""PostgreSQL values for the postgres-cdc connector: which upstream types a declared column takes,
and PostgreSQL's text output of a value parsed into the column's type.

Both paths of the connector read text: pgoutput (protocol 1) sends each value in its type's text
output form, and the CDC backfill's COPY writes the same form, so one parser serves both and a row reads the
same whether it came from the snapshot or the stream. The session that decodes or selects sets
TimeZone = UTC, DateStyle = ISO, bytea_output = hex and extra_float_digits = 3, which fixes the forms."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.connectors.base import ERROR, RAW
from sparkwave.core.schema import Schema, SqlType

SESSION_SETTINGS = {"TimeZone": "UTC", "DateStyle": "ISO, MDY", "bytea_output": "hex", "extra_float_digits": "3"}

# Upstream type name (pg_type.typname) -> the sparkwave types a column of it may be declared as.
_INTS = {"int2": ("smallint", "int", "bigint"), "int4": ("int", "bigint"), "int8": ("bigint",)}
_TEXTUAL = ("text", "varchar", "bpchar", "enum", "name", "uuid", "json", "jsonb", "xml", "citext", "time", "timetz",
            "inet", "cidr", "macaddr", "interval", "money", "bit", "varbit")
COMPATIBLE: dict[str, tuple[str, ...]] = {
    **_INTS, "bool": ("boolean",), "float4": ("real", "double"), "float8": ("double",), "numeric": ("decimal",),
    "date": ("date",), "timestamp": ("timestamp",), "timestamptz": ("timestamptz",), "bytea": ("bytea",),
    **{t: ("varchar",) for t in _TEXTUAL},
}
SUGGESTED = {"int2": "smallint", "int4": "int", "int8": "bigint", "bool": "boolean", "float4": "real",
             "float8": "double precision", "numeric": "decimal(p, s)", "date": "date", "timestamp": "timestamp",
             "timestamptz": "timestamptz", "bytea": "bytea"}


def takes(declared: SqlType, upstream: str) -> bool:
    """Whether a column declared `declared` can hold the upstream type `upstream` (typname) exactly."""
    kinds = COMPATIBLE.get(upstream, ())
    return declared.name in kinds or (declared.name.startswith("decimal") and "decimal" in kinds) or \
        (declared.name == "varchar" and upstream.startswith("_"))  # an array's text form


def suggested(upstream: str) -> str:
    return SUGGESTED.get(upstream, "varchar")


def _bool(text: str) -> bool:
    if text not in ("t", "f", "true", "false"):  # boolout's form, and the boolean-to-text cast's
        raise ValueError(f"not a boolean: {text!r}")
    return text[0] == "t"


def _date(text: str) -> dt.date:
    return dt.date.fromisoformat(text)  # 'infinity' and BC dates raise: no date type here holds them


def _timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def _timestamptz(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"a timestamptz without its offset: {text!r}")
    return value.astimezone(dt.UTC)


def _bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError("bytea not in hex form")
    return bytes.fromhex(text[2:])


def _decimal(scale: int, precision: int) -> Callable[[str], Decimal]:
    quantum = Decimal(1).scaleb(-scale)

    def parse(text: str) -> Decimal:
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise ValueError(f"not a number: {text!r}") from None
        if not value.is_finite():
            raise ValueError(f"{text} has no decimal value")
        value = value.quantize(quantum, rounding=ROUND_HALF_UP)
        if len(value.as_tuple().digits) > precision and value != 0:
            raise ValueError(f"{text} does not fit decimal({precision},{scale})")
        return value

    return parse


def parser(t: SqlType) -> Callable[[str], object]:
    """The function from a value's text output to the Python value of column type `t`."""
    if t.name.startswith("decimal"):
        arrow = t.arrow
        assert isinstance(arrow, pa.Decimal128Type)
        return _decimal(arrow.scale, arrow.precision)
    simple: dict[str, Callable[[str], object]] = {
        "boolean": _bool, "smallint": int, "int": int, "bigint": int, "real": float, "double": float,
        "varchar": str, "date": _date, "timestamp": _timestamp, "timestamptz": _timestamptz, "bytea": _bytea}
    return simple[t.name]


INT_RANGE = {"smallint": 1 << 15, "int": 1 << 31, "bigint": 1 << 63}


class RowParser:
    """Parses rows of text values into the columns' values; a value that does not parse or fit is a
    ValueError naming the column."""

    def __init__(self, columns: list[tuple[str, SqlType]]) -> None:
        self.columns = columns
        self.parsers = [parser(t) for _, t in columns]
        self.bounds = [INT_RANGE.get(t.name) for _, t in columns]

    def parse(self, texts: list[object]) -> list[object]:
        out: list[object] = []
        for (name, t), parse, bound, text in zip(self.columns, self.parsers, self.bounds, texts, strict=True):
            if text is None:
                out.append(None)
                continue
            try:
                value = parse(str(text))
            except (ValueError, OverflowError) as e:
                raise ValueError(f"column {name!r} ({t}): {e}") from None
            if bound is not None and not -bound <= value < bound:  # type: ignore[operator]
                raise ValueError(f"column {name!r} ({t}): {text} is out of range")
            out.append(value)
        return out


def raw_text(texts: dict[str, object]) -> str:
    """A bad row's payload as kept by SHOW SOURCE ERRORS: its text values as JSON."""
    return json.dumps({k: (None if v is None else str(v)) for k, v in texts.items()}, ensure_ascii=False)


UPSERT = 4  # core/chunk.py's intent: an insert or update of the row's key


def csv_texts(data: bytes, width: int) -> pa.Table:
    """`COPY ... TO STDOUT (FORMAT csv)` output as `width` string columns: PostgreSQL writes NULL
    unquoted and empty, an empty string quoted (`""`), and a value may span lines."""
    import pyarrow.csv as csv
    names = [f"_c{i}" for i in range(width)]
    if not data:
        return pa.table({n: pa.array([], pa.string()) for n in names})
    return csv.read_csv(pa.py_buffer(data), read_options=csv.ReadOptions(column_names=names),
                        parse_options=csv.ParseOptions(newlines_in_values=True),
                        convert_options=csv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()),
                                                           null_values=[""], strings_can_be_null=True,
                                                           quoted_strings_can_be_null=False))


def arrow_columns(columns: list[tuple[str, SqlType]], texts: list[pa.ChunkedArray]) -> list[pa.Array] | None:
    """A backfill chunk's text rows as Arrow columns, by Arrow's casts (the row parser's values, in
    bulk: integers in range, decimals without rounding, ISO dates and times with their offsets); None
    when a value does not convert so, and the row parser then reads the chunk row by row (rounding a
    decimal as it does, setting a bad row aside). Casting per column is what keeps a chunk's cost
    near the database's: the row parser takes ~20 us a row."""
    out = []
    for (_, t), values in zip(columns, texts, strict=True):
        arr = values.combine_chunks()
        try:
            if t.name == "bytea":
                out.append(pa.array([None if v is None else _bytea(str(v)) for v in arr.to_pylist()], pa.binary()))
            elif t.name == "varchar":
                out.append(arr)
            elif t.name == "boolean":  # boolout's 't' and 'f', which Arrow's cast does not read
                if pc.all(pc.is_in(pc.drop_null(arr), value_set=pa.array(["t", "f"]))).as_py() is False:
                    return None
                out.append(pc.equal(arr, "t"))
            else:
                out.append(pc.cast(arr, t.arrow))
        except (pa.ArrowException, ValueError):
            return None
    return out


class IntentRows:
    """An epoch's intents being built column by column (the connector's `_batch`)."""

    def __init__(self, width: int) -> None:
        self.values: list[list[Any]] = [[] for _ in range(width)]
        self.ops: list[int] = []
        self.errors: list[str | None] = []
        self.raws: list[str | None] = []
        self.positions: list[tuple[str, int]] = []

    def add(self, op: int, row: list[Any], where: tuple[str, int], error: str | None = None,
            raw: str | None = None) -> None:
        for col, v in zip(self.values, row, strict=True):
            col.append(v)
        self.ops.append(op)
        self.errors.append(error)
        self.raws.append(raw)
        self.positions.append(where)

    def bad(self, error: str, raw: str, where: tuple[str, int]) -> None:
        self.add(UPSERT, [None] * len(self.values), where, error, raw)

    def batch(self, schema: Schema, first: list[pa.Array] | None = None) -> pa.RecordBatch:
        """The intents: `first` (a chunk's columns, upserts) before the rows added."""
        n = len(self.ops)
        arrays: list[pa.Array] = [pa.array(v, c.type.arrow) for v, c in zip(self.values, schema.columns, strict=True)]
        ops, errors, raws = pa.array(self.ops, pa.int8()), pa.array(self.errors, pa.string()), \
            pa.array(self.raws, pa.string())
        if first:
            k = len(first[0])
            arrays = [pa.concat_arrays([f.cast(a.type), a]) for f, a in zip(first, arrays, strict=True)]
            ops = pa.concat_arrays([pa.array([UPSERT] * k, pa.int8()), ops])
            errors, raws = (pa.concat_arrays([pa.nulls(k, pa.string()), a]) for a in (errors, raws))
            n += k
        arrays += [ops, pa.array(range(n), pa.int64()), errors, raws]
        names = [*schema.names, "_op", "_seq", ERROR, RAW]
        return pa.RecordBatch.from_arrays(arrays, names=names)
