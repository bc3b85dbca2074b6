"""Decoding JSON messages into typed rows, record by record, so that one bad record is set aside
with the reason rather than failing the batch (or, worse, becoming a row of NULLs).

A message is parsed strictly (`parse`): UTF-8, RFC 8259 JSON (no `NaN` or `Infinity`), no lone
surrogate (`"\\ud800"`, which no UTF-8 column can hold: PostgreSQL and RisingWave refuse it too),
at most `MAX_JSON_DEPTH` levels deep. A value is accepted when the column holds it without loss:
an integer column takes JSON integers (and integral numbers) in range, `real` and `double` take
numbers within their range (`1e999` is out of range, as in PostgreSQL, not infinity), a decimal
column takes numbers or numeric strings that fit its precision, timestamps take ISO 8601 strings or
epoch milliseconds within years 1-9999 (UTC), text and bytea at most `MAX_VALUE_BYTES` (text may
hold NUL, as INSERT's does). A missing field is NULL. Numbers are parsed exactly (as decimals), so
that no JSON number is rounded before its column decides. Runs inside Spark's Python workers: it
imports nothing from Spark."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from sparkwave.core.limits import MAX_JSON_DEPTH, MAX_VALUE_BYTES

_INT_RANGE = {"smallint": 1 << 15, "int": 1 << 31, "bigint": 1 << 63}
_FLOAT_RANGE = {"real": (3.4028234663852886e38, 1.401298464324817e-45),  # largest, smallest magnitude
                "double": (sys.float_info.max, 5e-324)}
_NUMBERS = frozenset((int, float, decimal.Decimal))
_UTC = dt.UTC
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_LONG_INT = 4000  # digits past which a JSON integer is parsed as a decimal (int() refuses 4300)


class BadRecord(ValueError):
    """A message that cannot become a row: the reason names the column and the value."""


class NotJson(BadRecord):
    """A message whose bytes are not JSON text at all."""


def _long_int(text: str) -> int | decimal.Decimal:
    return int(text) if len(text) <= _LONG_INT else decimal.Decimal(text)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Built once (json.loads with options builds a decoder per call). Python's int() refuses more than
# 4300 digits: such a message is parsed again with integers as decimals, so its column says why.
_JSON = json.JSONDecoder(parse_float=decimal.Decimal, parse_constant=_refuse_constant)
_JSON_LONG_INTS = json.JSONDecoder(parse_float=decimal.Decimal, parse_int=_long_int, parse_constant=_refuse_constant)


def parse(payload: bytes | str) -> Any:
    """A message's JSON value, strictly (the module's docstring); NotJson or BadRecord if not."""
    if isinstance(payload, bytes):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError as e:
            raise NotJson(f"not valid UTF-8: byte 0x{e.object[e.start]:02x} at position {e.start}") from None
    deep = payload.count("[") + payload.count("{") > MAX_JSON_DEPTH
    if deep and _nesting(payload) > MAX_JSON_DEPTH:  # before the decoder recurses that deep
        raise BadRecord(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        try:
            obj = _JSON.decode(payload)
        except ValueError as e:
            if "digits" not in str(e):
                raise
            obj = _JSON_LONG_INTS.decode(payload)
    except RecursionError:
        raise BadRecord(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
        raise NotJson("empty message" if not payload.strip() else f"not valid JSON: {e}") from None
    except decimal.InvalidOperation:  # an exponent beyond the decimal module's (about 10^18)
        raise NotJson("not valid JSON: a number's exponent is out of any column's range") from None
    surrogates = "\\u" in payload and _SURROGATE_ESCAPE.search(payload) is not None
    if surrogates:
        _check_tree(obj, surrogates)
    return obj


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _nesting(payload: str) -> int:
    """How deep `payload`'s arrays and objects nest, read from its brackets outside strings (regular
    expressions, not the recursive decoder: a hostile message must not recurse as deep as it nests)."""
    depth = deepest = 0
    for c in _NOT_BRACKET.sub("", _STRING.sub("", payload)):
        depth += 1 if c in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _check_tree(obj: Any, surrogates: bool) -> None:
    """Walks the value (without recursion: its depth is what is checked): BadRecord if it nests
    deeper than `MAX_JSON_DEPTH` or, with `surrogates`, a key or string holds a lone surrogate."""
    stack: list[tuple[Any, int, str]] = [(obj, 1, "")]
    while stack:
        v, depth, path = stack.pop()
        if isinstance(v, dict | list) and depth > MAX_JSON_DEPTH:
            raise BadRecord(f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(v, dict):
            for k, x in v.items():
                if surrogates and not _encodable(k):
                    raise BadRecord(f"the field named {show(k)} has a lone surrogate in its name, which UTF-8 "
                                    "text cannot hold")
                stack.append((x, depth + 1, f"{path}.{k}" if path else k))
        elif isinstance(v, list):
            stack.extend((x, depth + 1, f"{path}[{i}]") for i, x in enumerate(v))
        elif surrogates and isinstance(v, str) and not _encodable(v):
            where = f"column {path}" if depth == 2 and not path.startswith("[") else f"field {path or '(the value)'}"
            raise BadRecord(f"{where}: {show(v)} holds a lone surrogate, which UTF-8 text cannot hold")


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_number(v: Any) -> bool:
    return type(v) in _NUMBERS  # not a bool, which is an int


def _integer(kind: str) -> Callable[[Any], Any]:
    bound = _INT_RANGE[kind]

    def conv(v: Any) -> int:
        if type(v) is int and -bound <= v < bound:
            return v
        if not _is_number(v):
            raise ValueError(f"expected an integer, got {show(v)}")
        if not -bound <= v < bound:  # before int(): 1e999999 must not become a million digits
            raise ValueError(f"{show(v)} is out of range for {kind}")
        if isinstance(v, float | decimal.Decimal):
            if v != int(v):
                raise ValueError(f"expected an integer, got {show(v)}")
            v = int(v)
        return v
    return conv


def _floating(kind: str) -> Callable[[Any], Any]:
    largest, smallest = _FLOAT_RANGE[kind]

    def conv(v: Any) -> float:
        if not _is_number(v):
            raise ValueError(f"expected a number, got {show(v)}")
        f = float(v)  # a decimal beyond double's range becomes inf or 0.0, as PostgreSQL's strtod would
        if smallest <= abs(f) <= largest or v == 0:
            return f
        raise ValueError(f"{show(v)} is out of range for {kind}")
    return conv


def _decimal(precision: int, scale: int) -> Callable[[Any], Any]:
    quantum = decimal.Decimal(1).scaleb(-scale)
    context = decimal.Context(prec=precision + 2)  # the default 28 digits would refuse decimal(38, s)

    def conv(v: Any) -> decimal.Decimal:
        if not (_is_number(v) or isinstance(v, str)):
            raise ValueError(f"expected a number, got {show(v)}")
        try:
            d = decimal.Decimal(v if isinstance(v, str | decimal.Decimal) else str(v))
            d = d.quantize(quantum, rounding=decimal.ROUND_HALF_UP, context=context)
        except decimal.InvalidOperation:
            raise ValueError(f"{show(v)} does not fit decimal({precision},{scale})") from None
        if not d.is_finite() or len(d.as_tuple().digits) > precision:
            raise ValueError(f"{show(v)} does not fit decimal({precision},{scale})")
        return d
    return conv


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {show(v)}")
    return v


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {show(v)}")
    if len(v) > MAX_VALUE_BYTES // 4 and (size := len(v.encode("utf-8"))) > MAX_VALUE_BYTES:
        raise ValueError(f"a string of {size} bytes is larger than the limit of {MAX_VALUE_BYTES} bytes")
    return v


def _date(v: Any) -> dt.date:
    if not isinstance(v, str):
        raise ValueError(f"expected a date 'YYYY-MM-DD', got {show(v)}")
    try:
        return dt.date.fromisoformat(v)
    except ValueError:
        raise ValueError(f"expected a date 'YYYY-MM-DD' in years 1-9999, got {show(v)}") from None


def _timestamp(with_zone: bool) -> Callable[[Any], Any]:
    def conv(v: Any) -> dt.datetime:
        if isinstance(v, int) and not isinstance(v, bool):
            try:
                t = dt.datetime.fromtimestamp(v // 1000, _UTC).replace(microsecond=v % 1000 * 1000)
            except (OverflowError, OSError, ValueError):
                raise ValueError(f"{v} epoch milliseconds is outside years 1-9999") from None
        elif isinstance(v, str):
            try:
                t = dt.datetime.fromisoformat(v)
            except ValueError:
                raise ValueError(f"expected an ISO 8601 timestamp or epoch milliseconds, got {show(v)}") from None
        else:
            raise ValueError(f"expected an ISO 8601 timestamp or epoch milliseconds, got {show(v)}")
        if t.tzinfo is None:
            return t.replace(tzinfo=_UTC) if with_zone else t
        try:
            utc = t.astimezone(_UTC)  # an aware value is stored in UTC, which must be within years 1-9999 too
        except OverflowError:
            raise ValueError(f"{show(v)} is outside years 1-9999 in UTC") from None
        return utc if with_zone else utc.replace(tzinfo=None)
    return conv


def _bytea(v: Any) -> bytes:
    """Base64 text, as RisingWave's JSON encoder writes bytea."""
    if not isinstance(v, str):
        raise ValueError(f"expected base64 text for bytea, got {show(v)}")
    if len(v) // 4 * 3 > MAX_VALUE_BYTES + 2:
        raise ValueError(f"a bytea of about {len(v) // 4 * 3} bytes is larger than the limit of "
                         f"{MAX_VALUE_BYTES} bytes")
    try:
        out = base64.b64decode(v, validate=True)
    except binascii.Error:
        raise ValueError(f"expected base64 text for bytea, got {show(v)}") from None
    if len(out) > MAX_VALUE_BYTES:
        raise ValueError(f"a bytea of {len(out)} bytes is larger than the limit of {MAX_VALUE_BYTES} bytes")
    return out


def converter(type_name: str) -> Callable[[Any], Any]:
    """How a JSON value becomes a value of the SQL type `type_name` (core/schema.py's names)."""
    if type_name in _INT_RANGE:
        return _integer(type_name)
    if type_name in _FLOAT_RANGE:
        return _floating(type_name)
    if type_name.startswith("decimal("):
        p, s = type_name[len("decimal("):-1].split(",")
        return _decimal(int(p), int(s))
    simple: dict[str, Callable[[Any], Any]] = {
        "boolean": _boolean, "varchar": _string, "date": _date,
        "timestamp": _timestamp(False), "timestamptz": _timestamp(True), "bytea": _bytea}
    return simple[type_name]


def show(v: Any) -> str:
    """A value, short and always UTF-8 (a lone surrogate escaped), for a reason."""
    if isinstance(v, str):
        s = ascii(v[:40]) if not _encodable(v[:40]) else repr(v[:40])
    elif isinstance(v, decimal.Decimal):
        s = str(v)
    elif isinstance(v, dict | list):
        s = "an object" if isinstance(v, dict) else "an array"
    else:
        s = json.dumps(v)
    return s if len(s) <= 40 else s[:37] + "..."


class JsonDecoder:
    """Decodes a JSON object into the values of `columns` [(name, type name)], by field name
    (exact, else case-insensitive, as PostgreSQL folds unquoted names)."""

    def __init__(self, columns: list[tuple[str, str]]) -> None:
        self.columns = [(name, converter(t)) for name, t in columns]

    def decode(self, payload: bytes | str) -> list[Any]:
        obj = parse(payload)
        if not isinstance(obj, dict):
            raise BadRecord(f"expected a JSON object, got {kind_of(obj)}")
        return self.values(obj)

    def values(self, obj: dict[str, Any]) -> list[Any]:
        folded: dict[str, Any] | None = None
        out: list[Any] = []
        for name, conv in self.columns:
            if name in obj:
                v = obj[name]
            else:
                if folded is None:
                    folded = {k.lower(): x for k, x in obj.items()}
                v = folded.get(name)
            if v is None:
                out.append(None)
                continue
            try:
                out.append(conv(v))
            except (ValueError, ArithmeticError) as e:
                raise BadRecord(f"column {name}: {e}") from None
        return out


def kind_of(v: Any) -> str:
    """What a JSON value is, as a reason says it."""
    if v is None:
        return "null"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, bool):
        return "a boolean"
    return "a number"
