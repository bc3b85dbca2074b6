"""Spark types as PostgreSQL types: OID, size and modifier for RowDescription, and the encoders
of values into PostgreSQL's text output (exactly as PostgreSQL prints each type) and binary
format (for the drivers that ask binary: psycopg binary=True, asyncpg).

An encoder is chosen once per column (`column_encoder`) and then applied to whole batches
(`encode_batch`), column by column, so the per-value work is one call and a length prefix."""

from __future__ import annotations

import binascii
import json
import math
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from decimal import Decimal, localcontext
from functools import lru_cache
from operator import itemgetter
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyspark.sql.types as T

from sparkwave.server.protocol import NULL_VALUE

Encoder = Callable[[Any], bytes]


class UnsupportedFormat(Exception):
    """A column's type has no encoder in the format the client asked (SQLSTATE 0A000)."""


@dataclass(frozen=True)
class PgType:
    oid: int
    typlen: int
    typmod: int
    name: str


# OID, typlen, name of the scalar types; the array OID of each
BOOL, BYTEA, INT8, INT2, INT4, TEXT, JSON, FLOAT4, FLOAT8, UNKNOWN = 16, 17, 20, 21, 23, 25, 114, 700, 701, 705
BPCHAR, VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC, JSONB = (
    1042, 1043, 1082, 1083, 1114, 1184, 1186, 1700, 3802)
NAME, OID = 19, 26
ARRAY_OF = {BOOL: 1000, BYTEA: 1001, INT2: 1005, INT4: 1007, TEXT: 1009, BPCHAR: 1014, VARCHAR: 1015, INT8: 1016,
            FLOAT4: 1021, FLOAT8: 1022, DATE: 1182, TIME: 1183, TIMESTAMP: 1115, TIMESTAMPTZ: 1185,
            INTERVAL: 1187, NUMERIC: 1231, JSONB: 3807, JSON: 199, NAME: 1003, OID: 1028}
ELEMENT_OF = {a: e for e, a in ARRAY_OF.items()}
_SCALAR = {
    BOOL: (1, "boolean"), BYTEA: (-1, "bytea"), INT8: (8, "bigint"), INT2: (2, "smallint"), INT4: (4, "integer"),
    TEXT: (-1, "text"), JSON: (-1, "json"), FLOAT4: (4, "real"), FLOAT8: (8, "double precision"),
    BPCHAR: (-1, "character"), VARCHAR: (-1, "character varying"), DATE: (4, "date"),
    TIME: (8, "time without time zone"), TIMESTAMP: (8, "timestamp without time zone"),
    TIMESTAMPTZ: (8, "timestamp with time zone"), INTERVAL: (16, "interval"), NUMERIC: (-1, "numeric"),
    JSONB: (-1, "jsonb"), UNKNOWN: (-2, "unknown"), NAME: (64, "name"), OID: (4, "oid"),
}


def _scalar_oid(dt: T.DataType) -> tuple[int, int]:
    """(OID, typmod) of a non-array Spark type."""
    simple: list[tuple[type, int]] = [
        (T.BooleanType, BOOL), (T.ByteType, INT2), (T.ShortType, INT2), (T.IntegerType, INT4),
        (T.LongType, INT8), (T.FloatType, FLOAT4), (T.DoubleType, FLOAT8), (T.BinaryType, BYTEA),
        (T.DateType, DATE), (T.TimestampNTZType, TIMESTAMP), (T.TimestampType, TIMESTAMPTZ),
        (T.DayTimeIntervalType, INTERVAL), (T.YearMonthIntervalType, INTERVAL), (T.TimeType, TIME),
        (T.StructType, JSONB), (T.MapType, JSONB), (T.VariantType, JSONB),
    ]
    if isinstance(dt, T.DecimalType):
        return NUMERIC, ((dt.precision << 16) | dt.scale) + 4
    if isinstance(dt, T.VarcharType):
        return VARCHAR, dt.length + 4
    if isinstance(dt, T.CharType):
        return BPCHAR, dt.length + 4
    for cls, oid in simple:
        if isinstance(dt, cls):
            return oid, -1
    return VARCHAR, -1  # StringType, NullType and anything else print as text


def pg_type(dt: T.DataType) -> PgType:
    """The PostgreSQL type a column of Spark type `dt` is described as."""
    if isinstance(dt, T.ArrayType):
        elem = dt.elementType
        while isinstance(elem, T.ArrayType):  # PostgreSQL has no arrays of arrays: a multi-dimensional array
            elem = elem.elementType
        oid, _ = _scalar_oid(elem)
        return PgType(ARRAY_OF[oid], -1, -1, _SCALAR[oid][1] + "[]")
    oid, typmod = _scalar_oid(dt)
    return PgType(oid, _SCALAR[oid][0], typmod, _SCALAR[oid][1])


_OTHER_NAMES = {18: "\"char\"", 114: "json", 142: "xml", 650: "cidr", 790: "money", 829: "macaddr", 869: "inet",
                1266: "time with time zone", 1560: "bit", 1562: "bit varying", 2950: "uuid", 3614: "tsvector"}


def type_name(oid: int) -> str:
    """PostgreSQL's name of a type OID, for messages."""
    if oid in ELEMENT_OF:
        return type_name(ELEMENT_OF[oid]) + "[]"
    if oid in _SCALAR:
        return _SCALAR[oid][1]
    return _OTHER_NAMES.get(oid, f"with OID {oid}")


# ---- text output ------------------------------------------------------------------------------

def _text(v: Any) -> bytes:
    return v.encode() if type(v) is str else str(v).encode()


def _bool_text(v: Any) -> bytes:
    return b"t" if v else b"f"


def _int_text(v: Any) -> bytes:
    return b"%d" % v


def _split_digits(s: str) -> tuple[str, int]:
    """Decimal digits (no leading/trailing zeros) and the exponent of the first, from a repr."""
    mantissa, _, e = s.partition("e")
    whole, _, frac = mantissa.partition(".")
    all_digits = whole + frac
    stripped = all_digits.lstrip("0")
    lead = len(all_digits) - len(stripped)
    return (stripped.rstrip("0") or "0"), (int(e) if e else 0) + len(whole) - 1 - lead


def _pg_float(negative: bool, digits: str, exp: int, fixed_below: int) -> bytes:
    """PostgreSQL's ryu output: fixed notation for -4 <= exp < fixed_below, else d.ddde+XX."""
    sign = "-" if negative else ""
    if -4 <= exp < fixed_below:
        if exp < 0:
            return f"{sign}0.{'0' * (-exp - 1)}{digits}".encode()
        whole = digits[:exp + 1].ljust(exp + 1, "0")
        frac = digits[exp + 1:]
        return f"{sign}{whole}.{frac}".encode() if frac else f"{sign}{whole}".encode()
    mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}".encode()


def _special_float(v: float) -> bytes | None:
    if v != v:
        return b"NaN"
    if v in (math.inf, -math.inf):
        return b"Infinity" if v > 0 else b"-Infinity"
    return None


def _inside_bounds(v: float, digits: str, exp: int, below: float, above: float, max_digits: int) -> tuple[str, int]:
    """PostgreSQL's ryu does not accept the bounds of the rounding interval (Python's repr and
    numpy do, reading ties to even): when the shortest digits sit exactly on a bound, it prints the
    shortest correctly rounded digits strictly inside instead."""
    with localcontext() as ctx:
        ctx.prec = 1200
        exact = Decimal(v)
        lo, hi = (exact + Decimal(below)) / 2, (exact + Decimal(above)) / 2
        if Decimal(f"{digits}e{exp - len(digits) + 1}") not in (lo, hi):
            return digits, exp
        for p in range(len(digits) + 1, max_digits + 1):
            ctx.prec = p
            q = +exact  # rounded to p significant digits, half even
            ctx.prec = 1200
            if lo < q < hi:
                return _split_digits(f"{q:e}")
    return digits, exp


def float8_text(v: Any) -> bytes:
    """PostgreSQL 12+ float8out: the shortest string that reads back as the same double."""
    r = repr(v)
    if "e" not in r and "n" not in r and -1e15 < v < 1e15:  # the common case, as Python prints it
        return (r[:-2] if r[-2:] == ".0" else r).encode()
    v = float(v)
    special = _special_float(v)
    if special is not None:
        return special
    if v == 0:
        return b"-0" if math.copysign(1, v) < 0 else b"0"
    a = abs(v)
    digits, exp = _split_digits(repr(a))
    if a >= 2.0 ** 53:  # below that a bound of the interval never has the fewest digits
        digits, exp = _inside_bounds(a, digits, exp, math.nextafter(a, 0), math.nextafter(a, math.inf), 17)
    return _pg_float(v < 0, digits, exp, 15)


def float4_text(v: Any) -> bytes:
    """float4out: the shortest string that reads back as the same single-precision float."""
    import numpy as np

    v = float(v)
    special = _special_float(v)
    if special is not None:
        return special
    if v == 0:
        return b"-0" if math.copysign(1, v) < 0 else b"0"
    a = np.float32(abs(v))
    digits, exp = _split_digits(np.format_float_scientific(a, unique=True, trim="-"))
    if a >= 2.0 ** 24:
        with np.errstate(over="ignore"):  # the largest float's upper neighbour is infinity
            below, above = np.nextafter(a, np.float32(0)), np.nextafter(a, np.float32(np.inf))
        digits, exp = _inside_bounds(float(a), digits, exp, float(below), float(above), 9)
    return _pg_float(v < 0, digits, exp, 6)


class NumericText:
    """numeric's output at the column's scale (a class, so that `arrowrows` can see the scale)."""

    def __init__(self, scale: int) -> None:
        self.scale = scale
        self.quantum = Decimal(1).scaleb(-scale)

    def __call__(self, v: Any) -> bytes:
        if not isinstance(v, Decimal):
            v = Decimal(v) if not isinstance(v, float) else Decimal(repr(v))
        if not v.is_finite():
            return b"NaN" if v.is_nan() else (b"Infinity" if v > 0 else b"-Infinity")
        if v.as_tuple().exponent != -self.scale:
            with localcontext() as ctx:
                ctx.prec = 1000
                v = v.quantize(self.quantum)
        if v.is_zero() and v.is_signed():
            v = v.copy_abs()
        return format(v, "f").encode()


def _numeric_text(scale: int) -> Encoder:
    return NumericText(scale)


def _bytea_text(v: Any) -> bytes:
    return b"\\x" + binascii.hexlify(v)


def _date_text(v: Any) -> bytes:
    return v.isoformat().encode()


def _clock(v: datetime | time) -> str:
    s = f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}"
    if v.microsecond:
        s += f".{v.microsecond:06d}".rstrip("0")
    return s


def _timestamp_text(v: Any) -> bytes:
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d} {_clock(v)}".encode()


def _time_text(v: Any) -> bytes:
    return _clock(v).encode()


def _offset_text(seconds: int) -> str:
    sign = "-" if seconds < 0 else "+"
    h, rem = divmod(abs(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{sign}{h:02d}" + (f":{m:02d}" if m or s else "") + (f":{s:02d}" if s else "")


@lru_cache(maxsize=64)
def session_zone(name: str) -> tzinfo:
    """The tzinfo of a TimeZone setting (UTC for an unknown name: the backend validates SET)."""
    if name.upper() in ("UTC", "ETC/UTC", "GMT", "Z", "ZULU", "UCT", "UNIVERSAL"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


class TimestamptzText:
    """timestamptz's output in the session's zone (a class, so that `arrowrows` can see the zone)."""

    def __init__(self, zone: tzinfo) -> None:
        self.zone = zone

    def __call__(self, v: Any) -> bytes:
        if v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        if self.zone is UTC:
            v = v.astimezone(UTC)
            return f"{v.year:04d}-{v.month:02d}-{v.day:02d} {_clock(v)}+00".encode()
        local = v.astimezone(self.zone)
        off = local.utcoffset()
        secs = int(off.total_seconds()) if off is not None else 0
        return f"{local.year:04d}-{local.month:02d}-{local.day:02d} {_clock(local)}{_offset_text(secs)}".encode()


def _timestamptz_text(zone: tzinfo) -> Encoder:
    return TimestamptzText(zone)


def interval_parts(v: Any) -> tuple[int, int, int]:
    """(months, days, microseconds) of a Spark interval value: a timedelta (day-time, split as
    PostgreSQL keeps it: whole days, the rest in the time part, both with the value's sign) or
    an int of months (year-month)."""
    if isinstance(v, int):
        return v, 0, 0
    total = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    day = 86400 * 1_000_000
    days = abs(total) // day * (1 if total >= 0 else -1)
    return 0, days, total - days * day


def _interval_text(v: Any) -> bytes:
    """PostgreSQL's IntervalStyle postgres: `1 year 2 mons 3 days 04:05:06.7`."""
    months, days, micros = interval_parts(v)
    parts: list[str] = []
    before_negative = False
    years, mons = int(months / 12), months - int(months / 12) * 12
    for value, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        if value:
            plus = "+" if before_negative and value > 0 else ""
            parts.append(f"{plus}{value} {unit}{'s' if value != 1 else ''}")
            before_negative = value < 0
    if not parts or micros:
        minus = micros < 0
        secs, us = divmod(abs(micros), 1_000_000)
        h, rem = divmod(secs, 3600)
        m, s = divmod(rem, 60)
        clock = f"{'-' if minus else ('+' if before_negative else '')}{h:02d}:{m:02d}:{s:02d}"
        if us:
            clock += f".{us:06d}".rstrip("0")
        parts.append(clock)
    return " ".join(parts).encode()


_NEEDS_QUOTE = re.compile(rb'[{}",\\\s]|^$|^[Nn][Uu][Ll][Ll]$')


def _array_text(elem: Encoder, quote: bool) -> Encoder:
    def enc(v: Any) -> bytes:
        out = []
        for e in v:
            if e is None:
                out.append(b"NULL")
                continue
            s = elem(e)
            if quote and _NEEDS_QUOTE.search(s):
                s = b'"' + s.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
            out.append(s)
        return b"{" + b",".join(out) + b"}"

    return enc


def _jsonb_key(k: str) -> tuple[int, bytes]:
    b = k.encode()
    return len(b), b


def jsonb_text(v: Any) -> str:
    """jsonb's output: keys in jsonb's order (shorter first), `, ` and `: ` separators."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        special = _special_float(v)
        return json.dumps(special.decode()) if special else float8_text(v).decode()
    if isinstance(v, Decimal):
        return format(v, "f") if v.is_finite() else json.dumps(str(v))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bytes | bytearray):
        return json.dumps(_bytea_text(v).decode())
    if isinstance(v, datetime):
        return json.dumps(v.isoformat())
    if isinstance(v, date | time):
        return json.dumps(v.isoformat())
    if isinstance(v, timedelta):
        return json.dumps(_interval_text(v).decode())
    if isinstance(v, T.Row):
        v = dict(zip(v.__fields__, v, strict=False))  # a later duplicate name wins, as in jsonb
    if isinstance(v, dict):
        items = {str(k) if not isinstance(k, str) else k: x for k, x in v.items()}
        body = ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {jsonb_text(items[k])}"
                         for k in sorted(items, key=_jsonb_key))
        return "{" + body + "}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(jsonb_text(x) for x in v) + "]"
    to_json = getattr(v, "toJson", None)  # VariantVal
    if to_json is not None:
        return jsonb_text(json.loads(to_json()))
    return json.dumps(str(v), ensure_ascii=False)


def _jsonb_text_enc(v: Any) -> bytes:
    return jsonb_text(v).encode()


def text_encoder(dt: T.DataType, zone: tzinfo = UTC) -> Encoder:
    """The text-format encoder of non-NULL values of Spark type `dt`."""
    if isinstance(dt, T.ArrayType):
        elem_dt = dt.elementType
        quote = not isinstance(elem_dt, T.ArrayType | T.BooleanType | T.IntegralType | T.FloatType | T.DoubleType)
        return _array_text(text_encoder(elem_dt, zone), quote)
    if isinstance(dt, T.DecimalType):
        return _numeric_text(dt.scale)
    if isinstance(dt, T.TimestampType):
        return _timestamptz_text(zone)
    for cls, enc in _TEXT:
        if isinstance(dt, cls):
            return enc
    return _text


_TEXT: list[tuple[type, Encoder]] = [
    (T.BooleanType, _bool_text), (T.IntegralType, _int_text), (T.FloatType, float4_text),
    (T.DoubleType, float8_text), (T.BinaryType, _bytea_text), (T.DateType, _date_text),
    (T.TimestampNTZType, _timestamp_text), (T.DayTimeIntervalType, _interval_text),
    (T.YearMonthIntervalType, _interval_text), (T.TimeType, _time_text), (T.StructType, _jsonb_text_enc),
    (T.MapType, _jsonb_text_enc), (T.VariantType, _jsonb_text_enc),
]


# ---- binary output ----------------------------------------------------------------------------

_EPOCH_ORDINAL = date(2000, 1, 1).toordinal()
_q, _i, _h, _d, _f = (struct.Struct(f"!{c}").pack for c in "qihdf")
_NUMERIC_HEAD = struct.Struct("!hhHh").pack
_INTERVAL = struct.Struct("!qii").pack


def _numeric_binary(v: Any) -> bytes:
    """PostgreSQL's numeric send format: base-10000 digits with weight, sign and display scale."""
    if not isinstance(v, Decimal):
        v = Decimal(v) if not isinstance(v, float) else Decimal(repr(v))
    if v.is_nan():
        return _NUMERIC_HEAD(0, 0, 0xC000, 0)
    if v.is_infinite():
        return _NUMERIC_HEAD(0, 0, 0xD000 if v > 0 else 0xF000, 0)
    sign, _, exp = v.as_tuple()
    dscale = max(-int(exp), 0)
    whole, _, frac = format(v.copy_abs(), "f").partition(".")
    whole = whole.lstrip("0")
    whole = whole.rjust(-(-len(whole) // 4) * 4, "0")
    frac = frac.ljust(-(-len(frac) // 4) * 4, "0")
    groups = [int(s[i:i + 4]) for s in (whole, frac) for i in range(0, len(s), 4)]
    weight = len(whole) // 4 - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        return _NUMERIC_HEAD(0, 0, 0, dscale)
    return _NUMERIC_HEAD(len(groups), weight, 0x4000 if sign else 0, dscale) + struct.pack(f"!{len(groups)}h", *groups)


def _micros(v: datetime) -> int:
    days = v.toordinal() - _EPOCH_ORDINAL
    return ((days * 86400 + v.hour * 3600 + v.minute * 60 + v.second) * 1_000_000) + v.microsecond


def _date_binary(v: Any) -> bytes:
    return _i(v.toordinal() - _EPOCH_ORDINAL)


def _timestamp_binary(v: Any) -> bytes:
    return _q(_micros(v))


def _timestamptz_binary(v: Any) -> bytes:
    if v.tzinfo is not None:
        v = v.astimezone(UTC)
    return _q(_micros(v))


def _interval_binary(v: Any) -> bytes:
    months, days, micros = interval_parts(v)
    return _INTERVAL(micros, days, months)


def _time_binary(v: Any) -> bytes:
    return _q(((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond)


_ARRAY_HEAD = struct.Struct("!iiiii").pack
_EMPTY_ARRAY = struct.Struct("!iii").pack


def _array_binary(elem_oid: int, elem: Encoder) -> Encoder:
    def enc(v: Any) -> bytes:
        if not v:
            return _EMPTY_ARRAY(0, 0, elem_oid)
        parts = [b""]
        has_null = 0
        for e in v:
            if e is None:
                has_null = 1
                parts.append(NULL_VALUE)
            else:
                b = elem(e)
                parts.append(_i(len(b)) + b)
        parts[0] = _ARRAY_HEAD(1, has_null, elem_oid, len(v), 1)
        return b"".join(parts)

    return enc


def _bool_binary(v: Any) -> bytes:
    return b"\x01" if v else b"\x00"


_BINARY: list[tuple[type, Encoder]] = [
    (T.BooleanType, _bool_binary), (T.ByteType, _h), (T.ShortType, _h),
    (T.IntegerType, _i), (T.LongType, _q), (T.FloatType, _f), (T.DoubleType, _d),
    (T.DecimalType, _numeric_binary), (T.BinaryType, bytes), (T.DateType, _date_binary),
    (T.TimestampNTZType, _timestamp_binary), (T.TimestampType, _timestamptz_binary),
    (T.DayTimeIntervalType, _interval_binary), (T.YearMonthIntervalType, _interval_binary),
    (T.TimeType, _time_binary), (T.StructType, lambda v: b"\x01" + jsonb_text(v).encode()),
    (T.MapType, lambda v: b"\x01" + jsonb_text(v).encode()),
    (T.VariantType, lambda v: b"\x01" + jsonb_text(v).encode()),
    (T.StringType, _text), (T.VarcharType, _text), (T.CharType, _text), (T.NullType, _text),
]


def binary_encoder(dt: T.DataType) -> Encoder | None:
    """The binary-format encoder of Spark type `dt`, None when there is none (nested arrays)."""
    if isinstance(dt, T.ArrayType):
        if isinstance(dt.elementType, T.ArrayType):
            return None
        elem = binary_encoder(dt.elementType)
        if elem is None:
            return None
        return _array_binary(_scalar_oid(dt.elementType)[0], elem)
    for cls, enc in _BINARY:
        if isinstance(dt, cls):
            return enc
    return None


def column_encoder(dt: T.DataType, fmt: int, zone: tzinfo = UTC) -> Encoder:
    """The encoder of one result column in format `fmt` (0 text, 1 binary); raises
    UnsupportedFormat for a binary request on a type without a binary encoder."""
    if fmt == 0:
        return text_encoder(dt, zone)
    enc = binary_encoder(dt)
    if enc is None:
        raise UnsupportedFormat(f"binary output of type {pg_type(dt).name} ({dt.simpleString()}) is not supported")
    return enc


# ---- DataRow batches --------------------------------------------------------------------------

_ROW_HEAD = struct.Struct("!cih").pack


def _framed_column(enc: Encoder, col: Sequence[Any]) -> list[bytes]:
    pack = _i
    null = NULL_VALUE
    if enc is _int_text:
        return [null if v is None else pack(len(d := b"%d" % v)) + d for v in col]
    if enc is _text:
        return [null if v is None else pack(len(d := (v.encode() if type(v) is str else str(v).encode()))) + d
                for v in col]
    if enc is float8_text and col:
        reprs = list(map(repr, col))  # 'None' has an 'n': a column with NULLs takes the general path
        if not any("e" in r or "n" in r for r in reprs) and -1e15 < min(col) and max(col) < 1e15:
            return [pack(len(d := (r[:-2] if r[-2:] == ".0" else r).encode())) + d for r in reprs]
    return [null if v is None else pack(len(d := enc(v))) + d for v in col]


def batch_columns(batch: Any, width: int) -> list[list[Any]]:
    """The columns of a batch of rows."""
    if len(batch) and set(map(len, batch)) != {width}:
        raise ValueError(f"a batch has rows of {sorted(set(map(len, batch)))} columns where the result has {width}")
    return [list(map(itemgetter(i), batch)) for i in range(width)]


def encode_batch(encoders: Sequence[Encoder], batch: Any) -> tuple[bytes, int]:
    """All DataRow messages of one batch (rows, or a pyarrow.RecordBatch), and its row count."""
    if hasattr(batch, "num_rows") and hasattr(batch, "columns"):
        from sparkwave.server.arrowrows import encode_record_batch

        return encode_record_batch(encoders, batch)
    n = len(encoders)
    cols = batch_columns(batch, n)
    framed = [_framed_column(enc, col) for enc, col in zip(encoders, cols, strict=True)]
    if not framed:
        return _ROW_HEAD(b"D", 6, 0) * len(batch), len(batch)
    head = _ROW_HEAD
    if n == 1:
        out = [head(b"D", 6 + len(a), 1) + a for a in framed[0]]
    elif n == 2:
        out = [head(b"D", 6 + len(a) + len(b), 2) + a + b for a, b in zip(*framed, strict=True)]
    elif n == 3:
        out = [head(b"D", 6 + len(a) + len(b) + len(c), 3) + a + b + c for a, b, c in zip(*framed, strict=True)]
    else:
        out = [head(b"D", 6 + sum(map(len, parts)), n) + b"".join(parts) for parts in zip(*framed, strict=True)]
    return b"".join(out), len(out)
