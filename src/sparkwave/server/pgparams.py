"""Bind parameters: PostgreSQL text and binary formats decoded into the Python values the backend
takes (the same values PySpark gives: int, float, Decimal, str, bytes, date, datetime, timedelta,
list), and the Spark type a client's parameter OID stands for."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

import pyspark.sql.types as T

from sparkwave.server import pgtypes as P
from sparkwave.server.backend import ServerError

_INT_RANGE = {P.INT2: (-(2 ** 15), 2 ** 15 - 1), P.INT4: (-(2 ** 31), 2 ** 31 - 1), P.INT8: (-(2 ** 63), 2 ** 63 - 1)}


def spark_type_for_oid(oid: int) -> T.DataType | None:
    """The Spark type of a parameter the client declared with `oid`; None for 0 (left open) and
    for a type sparkwave has no counterpart of."""
    simple: dict[int, T.DataType] = {
        P.BOOL: T.BooleanType(), P.INT2: T.ShortType(), P.INT4: T.IntegerType(), P.INT8: T.LongType(),
        P.FLOAT4: T.FloatType(), P.FLOAT8: T.DoubleType(), P.NUMERIC: T.DecimalType(38, 18),
        P.TEXT: T.StringType(), P.VARCHAR: T.StringType(), P.BPCHAR: T.StringType(), P.NAME: T.StringType(),
        P.UNKNOWN: T.StringType(), P.JSON: T.StringType(), P.JSONB: T.StringType(), P.BYTEA: T.BinaryType(),
        P.DATE: T.DateType(), P.TIMESTAMP: T.TimestampNTZType(), P.TIMESTAMPTZ: T.TimestampType(),
        P.INTERVAL: T.DayTimeIntervalType(), P.OID: T.LongType(),
    }
    if oid in P.ELEMENT_OF:
        elem = spark_type_for_oid(P.ELEMENT_OF[oid])
        return None if elem is None else T.ArrayType(elem)
    return simple.get(oid)


def _bad(oid: int, text: str, binary: bool = False) -> ServerError:
    if binary:
        return ServerError("22P03", f"incorrect binary data format in bind parameter of type {P.type_name(oid)}")
    return ServerError("22P02", f'invalid input syntax for type {P.type_name(oid)}: "{text[:200]}"')


_TRUE = {"t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"}
_FALSE = {"f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0"}


def _text_bool(s: str) -> bool:
    v = s.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(s)


def _bytea_from_text(s: str) -> bytes:
    if s.startswith("\\x"):
        return bytes.fromhex(s[2:])
    out = bytearray()
    i = 0
    while i < len(s):  # the escape format: \\ and \ooo
        c = s[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif s[i + 1:i + 2] == "\\":
            out.append(0x5C)
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", s[i + 1:i + 4]):
            out.append(int(s[i + 1:i + 4], 8))
            i += 4
        else:
            raise ValueError(s)
    return bytes(out)


def _timestamp_from_text(s: str, zone: tzinfo | None) -> datetime:
    v = s.strip()
    if v.endswith((" BC", " AD")):
        raise ValueError(s)
    dt = datetime.fromisoformat(v)
    if zone is None:  # timestamp without time zone: an offset given is ignored, as PostgreSQL does
        return dt.replace(tzinfo=None)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=zone)
    return dt.astimezone(UTC)


_INTERVAL_UNITS = {
    "microsecond": 1, "millisecond": 1000, "second": 1_000_000, "minute": 60_000_000, "hour": 3_600_000_000,
    "day": 86_400_000_000, "week": 7 * 86_400_000_000,
}
_INTERVAL_TOKEN = re.compile(r"\s*(?:([+-]?\d+(?:\.\d+)?)\s*([a-z]+)|([+-]?)(\d+):(\d\d)(?::(\d\d(?:\.\d+)?))?)",
                             re.IGNORECASE)


def _interval_from_text(s: str) -> timedelta:
    """The postgres and verbose interval styles with day-time units (no months: a Spark day-time
    interval has none)."""
    micros = 0
    pos = 0
    text = s.strip().lstrip("@")
    while pos < len(text):
        m = _INTERVAL_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(s)
        pos = m.end()
        if m.group(1) is not None:
            unit = m.group(2).lower().rstrip("s")
            unit = {"us": "microsecond", "usec": "microsecond", "m": "minute", "ms": "millisecond",
                    "msec": "millisecond", "sec": "second", "min": "minute", "h": "hour", "hr": "hour",
                    "d": "day", "mon": "month", "y": "year", "yr": "year"}.get(unit, unit)
            if unit not in _INTERVAL_UNITS:
                raise ValueError(s)
            micros += int(Decimal(m.group(1)) * _INTERVAL_UNITS[unit])
        else:
            sign = -1 if m.group(3) == "-" else 1
            secs = Decimal(m.group(6) or 0)
            part = int(m.group(4)) * 3_600_000_000 + int(m.group(5)) * 60_000_000 + int(secs * 1_000_000)
            micros += sign * part
        if text[pos:].strip().lower() == "ago":
            micros, pos = -micros, len(text)
    return timedelta(microseconds=micros)


_MAX_ARRAY_DIMS = 6  # PostgreSQL's MAXDIM


def _array_from_text(s: str, elem: Callable[[str], Any]) -> list[Any]:
    """`{1,2,NULL}` / `{"a b","c\\"d"}` (nested braces for multi-dimensional arrays)."""
    pos = 0
    depth = 0

    def parse() -> list[Any]:
        nonlocal pos, depth
        if s[pos] != "{":
            raise ValueError(s)
        depth += 1
        if depth > _MAX_ARRAY_DIMS:
            raise ValueError(f"more than {_MAX_ARRAY_DIMS} array dimensions")
        pos += 1
        out: list[Any] = []
        while True:
            if s[pos] == "}" and not out:
                pos += 1
                depth -= 1
                return out
            if s[pos] == "{":
                out.append(parse())
            elif s[pos] == '"':
                pos += 1
                buf = []
                while s[pos] != '"':
                    if s[pos] == "\\":
                        pos += 1
                    buf.append(s[pos])
                    pos += 1
                pos += 1
                out.append(elem("".join(buf)))
            else:
                end = pos
                while s[end] not in ",}":
                    end += 1
                raw = s[pos:end].strip()
                pos = end
                out.append(None if raw.upper() == "NULL" else elem(raw))
            if s[pos] == ",":
                pos += 1
            elif s[pos] == "}":
                pos += 1
                depth -= 1
                return out
            else:
                raise ValueError(s)

    s = s.strip()
    try:
        result = parse()
    except IndexError as e:
        raise ValueError(s) from e
    if pos != len(s):
        raise ValueError(s)
    return result


def _text_decoder(oid: int, zone: tzinfo) -> Callable[[str], Any]:
    if oid in _INT_RANGE:
        lo, hi = _INT_RANGE[oid]

        def dec_int(s: str) -> int:
            v = int(s.strip())
            if not lo <= v <= hi:
                raise ServerError("22003", f'value "{s}" is out of range for type {P.type_name(oid)}')
            return v
        return dec_int
    if oid in P.ELEMENT_OF:
        elem = _text_decoder(P.ELEMENT_OF[oid], zone)
        return lambda s: _array_from_text(s, elem)
    table: dict[int, Callable[[str], Any]] = {
        P.BOOL: _text_bool, P.FLOAT4: float, P.FLOAT8: float, P.NUMERIC: lambda s: Decimal(s.strip()),
        P.BYTEA: _bytea_from_text, P.DATE: lambda s: date.fromisoformat(s.strip()),
        P.TIMESTAMP: lambda s: _timestamp_from_text(s, None), P.TIMESTAMPTZ: lambda s: _timestamp_from_text(s, zone),
        P.INTERVAL: _interval_from_text, P.TIME: lambda s: time.fromisoformat(s.strip()), P.OID: int,
    }
    return table.get(oid, str)


_EPOCH = datetime(2000, 1, 1)
_EPOCH_DATE = date(2000, 1, 1)


def _numeric_from_binary(b: bytes) -> Decimal:
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", b)
    if len(b) != 8 + 2 * ndigits or ndigits < 0:
        raise ValueError("numeric")
    if sign == 0xC000:
        return Decimal("NaN")
    if sign in (0xD000, 0xF000):
        return Decimal("Infinity" if sign == 0xD000 else "-Infinity")
    digits = struct.unpack_from(f"!{ndigits}h", b, 8)
    if any(not 0 <= d < 10000 for d in digits) or sign not in (0, 0x4000):
        raise ValueError("numeric")
    with localcontext() as ctx:
        ctx.prec = 1000
        n = int("".join(f"{d:04d}" for d in digits) or "0")
        v = Decimal(n).scaleb(4 * (weight - ndigits + 1)).quantize(Decimal(1).scaleb(-dscale))
        return -v if sign == 0x4000 else v


def _array_from_binary(b: bytes, zone: tzinfo) -> list[Any]:
    ndim, _flags, elem_oid = struct.unpack_from("!iii", b)
    if ndim == 0:
        return []
    if ndim != 1:
        raise ServerError("0A000", "binary array parameters of more than one dimension are not supported")
    (n, _lower) = struct.unpack_from("!ii", b, 12)
    dec = _binary_decoder(elem_oid, zone)
    pos = 20
    out: list[Any] = []
    for _ in range(n):
        (length,) = struct.unpack_from("!i", b, pos)
        pos += 4
        if length == -1:
            out.append(None)
            continue
        if length < 0 or pos + length > len(b):
            raise ValueError("array")
        out.append(dec(b[pos:pos + length]))
        pos += length
    if pos != len(b):
        raise ValueError("array")
    return out


def _exact(fmt: str) -> Callable[[bytes], Any]:
    s = struct.Struct(fmt)

    def dec(b: bytes) -> Any:
        if len(b) != s.size:
            raise ValueError(fmt)
        return s.unpack(b)[0]
    return dec


def _binary_decoder(oid: int, zone: tzinfo) -> Callable[[bytes], Any]:
    if oid in P.ELEMENT_OF:
        return lambda b: _array_from_binary(b, zone)
    i8, i4 = _exact("!q"), _exact("!i")
    table: dict[int, Callable[[bytes], Any]] = {
        P.BOOL: lambda b: _exact("!?")(b), P.INT2: _exact("!h"), P.INT4: i4, P.INT8: i8, P.OID: _exact("!I"),
        P.FLOAT4: _exact("!f"), P.FLOAT8: _exact("!d"), P.NUMERIC: _numeric_from_binary, P.BYTEA: bytes,
        P.TEXT: lambda b: b.decode(), P.VARCHAR: lambda b: b.decode(), P.BPCHAR: lambda b: b.decode(),
        P.NAME: lambda b: b.decode(), P.UNKNOWN: lambda b: b.decode(), P.JSON: lambda b: b.decode(),
        P.JSONB: lambda b: b[1:].decode() if b[:1] == b"\x01" else _fail(),
        P.DATE: lambda b: _EPOCH_DATE + timedelta(days=i4(b)),
        P.TIMESTAMP: lambda b: _EPOCH + timedelta(microseconds=i8(b)),
        P.TIMESTAMPTZ: lambda b: (_EPOCH + timedelta(microseconds=i8(b))).replace(tzinfo=UTC),
        P.INTERVAL: _interval_from_binary,
    }
    if oid not in table:
        raise ServerError("0A000", f"binary format of parameters of type {P.type_name(oid)} is not supported")
    return table[oid]


def _fail() -> Any:
    raise ValueError("format")


def _interval_from_binary(b: bytes) -> timedelta:
    micros, days, months = struct.unpack("!qii", b)
    if months:
        raise ServerError("22015", "an interval parameter with months is not supported (day-time intervals only)")
    return timedelta(days=days, microseconds=micros)


def decode_param(oid: int, fmt: int, raw: bytes, zone: tzinfo) -> Any:
    """One Bind parameter of type `oid` in format `fmt` (0 text, 1 binary), as a Python value;
    a malformed one raises ServerError 22P02 / 22P03 naming the type."""
    if fmt == 1:
        dec = _binary_decoder(oid, zone)
        try:
            return _in_range(dec(raw))
        except ServerError:
            raise
        except (ValueError, struct.error, UnicodeDecodeError, OverflowError, IndexError, InvalidOperation) as e:
            raise _bad(oid, "", binary=True) from e
    try:
        text = raw.decode()
    except UnicodeDecodeError as e:
        raise ServerError("22021", "invalid byte sequence for encoding \"UTF8\" in a bind parameter") from e
    if "\x00" in text:
        raise ServerError("22021", "invalid byte sequence for encoding \"UTF8\": 0x00")
    try:
        return _in_range(_text_decoder(oid, zone)(text))
    except ServerError:
        raise
    except (ValueError, InvalidOperation, OverflowError, IndexError) as e:
        raise _bad(oid, text) from e


MAX_NUMERIC_EXPONENT = 1000  # past any Spark type (decimal(38), double's 1e±308): refused, not spelt out


def _in_range(value: Any) -> Any:
    """A numeric parameter's value is spelt out in full in the statement: `1e999999999` (12 bytes)
    would become a literal of a billion digits."""
    if isinstance(value, Decimal) and value.is_finite() and abs(value.adjusted()) > MAX_NUMERIC_EXPONENT:
        raise ServerError("22003", f"numeric parameter out of range: {str(value)[:40]} (sparkwave takes at most "
                                   f"{MAX_NUMERIC_EXPONENT} digits before or after the decimal point)")
    return value
