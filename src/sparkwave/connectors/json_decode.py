"""Decoding JSON messages into typed rows, record by record, so that one bad record is set aside
with the reason rather than failing the batch (or, worse, becoming a row of NULLs).

A value is accepted when it converts without loss: an integer column takes JSON integers (and
integral floats) in range, a decimal column takes numbers or numeric strings that fit its precision,
timestamps take ISO 8601 strings or epoch milliseconds. A missing field is NULL. Runs inside Spark's
Python workers: it imports nothing from Spark."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
from collections.abc import Callable
from typing import Any

_INT_RANGE = {"smallint": 1 << 15, "int": 1 << 31, "bigint": 1 << 63}
_UTC = dt.UTC


class BadRecord(ValueError):
    """A message that cannot become a row: the reason names the column and the value."""


def _integer(kind: str) -> Callable[[Any], Any]:
    bound = _INT_RANGE[kind]

    def conv(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"expected an integer, got {_show(v)}")
        if isinstance(v, float):
            if not v.is_integer():
                raise ValueError(f"expected an integer, got {_show(v)}")
            v = int(v)
        if not -bound <= v < bound:
            raise ValueError(f"{v} is out of range for {kind}")
        return v
    return conv


def _floating(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"expected a number, got {_show(v)}")
    return float(v)


def _decimal(precision: int, scale: int) -> Callable[[Any], Any]:
    quantum = decimal.Decimal(1).scaleb(-scale)
    context = decimal.Context(prec=precision + 2)  # the default 28 digits would refuse decimal(38, s)

    def conv(v: Any) -> decimal.Decimal:
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            raise ValueError(f"expected a number, got {_show(v)}")
        try:
            d = decimal.Decimal(str(v)).quantize(quantum, rounding=decimal.ROUND_HALF_UP, context=context)
        except decimal.InvalidOperation:
            raise ValueError(f"expected a number, got {_show(v)}") from None
        if not d.is_finite() or len(d.as_tuple().digits) > precision:
            raise ValueError(f"{_show(v)} does not fit decimal({precision},{scale})")
        return d
    return conv


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {_show(v)}")
    return v


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {_show(v)}")
    return v


def _date(v: Any) -> dt.date:
    if not isinstance(v, str):
        raise ValueError(f"expected a date 'YYYY-MM-DD', got {_show(v)}")
    try:
        return dt.date.fromisoformat(v)
    except ValueError:
        raise ValueError(f"expected a date 'YYYY-MM-DD', got {_show(v)}") from None


def _timestamp(with_zone: bool) -> Callable[[Any], Any]:
    def conv(v: Any) -> dt.datetime:
        if isinstance(v, int) and not isinstance(v, bool):
            t = dt.datetime.fromtimestamp(v / 1000, _UTC)
        elif isinstance(v, str):
            try:
                t = dt.datetime.fromisoformat(v)
            except ValueError:
                raise ValueError(f"expected an ISO 8601 timestamp or epoch milliseconds, got {_show(v)}") from None
        else:
            raise ValueError(f"expected an ISO 8601 timestamp or epoch milliseconds, got {_show(v)}")
        if with_zone:  # an aware value is converted to UTC when it becomes Arrow's
            return t if t.tzinfo is not None else t.replace(tzinfo=_UTC)
        return t.astimezone(_UTC).replace(tzinfo=None) if t.tzinfo is not None else t
    return conv


def _bytea(v: Any) -> bytes:
    """Base64 text, as RisingWave's JSON encoder writes bytea."""
    if not isinstance(v, str):
        raise ValueError(f"expected base64 text for bytea, got {_show(v)}")
    try:
        return base64.b64decode(v, validate=True)
    except binascii.Error:
        raise ValueError(f"expected base64 text for bytea, got {_show(v)}") from None


def converter(type_name: str) -> Callable[[Any], Any]:
    """How a JSON value becomes a value of the SQL type `type_name` (core/schema.py's names)."""
    if type_name in _INT_RANGE:
        return _integer(type_name)
    if type_name in ("real", "double"):
        return _floating
    if type_name.startswith("decimal("):
        p, s = type_name[len("decimal("):-1].split(",")
        return _decimal(int(p), int(s))
    simple: dict[str, Callable[[Any], Any]] = {
        "boolean": _boolean, "varchar": _string, "date": _date,
        "timestamp": _timestamp(False), "timestamptz": _timestamp(True), "bytea": _bytea}
    return simple[type_name]


def _show(v: Any) -> str:
    s = json.dumps(v) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


class JsonDecoder:
    """Decodes a JSON object into the values of `columns` [(name, type name)], by field name
    (exact, else case-insensitive, as PostgreSQL folds unquoted names)."""

    def __init__(self, columns: list[tuple[str, str]]) -> None:
        self.columns = [(name, converter(t)) for name, t in columns]

    def decode(self, payload: bytes | str) -> list[Any]:
        try:
            obj = json.loads(payload)
        except (ValueError, RecursionError) as e:
            raise BadRecord(f"not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise BadRecord(f"expected a JSON object, got {type(obj).__name__}")
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
            except (ValueError, OverflowError) as e:
                raise BadRecord(f"column {name}: {e}") from None
        return out
