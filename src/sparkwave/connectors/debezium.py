"""`FORMAT DEBEZIUM ENCODE JSON`: a Kafka message is a Debezium change event, decoded into the
table's intent for its primary key, as RisingWave's Debezium parser does:

- `op` `c` (create), `r` (a snapshot read) and `u` (update): an upsert of `after`;
- `op` `d` (delete): a delete of the key, read from `before` (else from the message key);
- a tombstone (a message without a value, which Debezium writes after each delete so that Kafka
  compaction can drop the key): ignored -- its delete event came just before it.

The event is `{"before", "after", "op", ...}` as is, or inside the envelope that Kafka Connect's
JSON converter writes with `schemas.enable`: `{"schema": ..., "payload": {...}}`. When the schema is
there, it says what a number means (`io.debezium.time.MicroTimestamp` is microseconds,
`io.debezium.time.Date` is days, a `org.apache.kafka.connect.data.Decimal` is base64 bytes at the
scale its parameters give); without it, a timestamp's unit is guessed from its magnitude (seconds,
milliseconds, microseconds or nanoseconds: RisingWave's rule, exact for years 1973 to 5138), a date
number is days, and a decimal must be a number or numeric text (`decimal.handling.mode = string` or
`double`) or `{"scale", "value"}` (Debezium's variable-scale decimal). Anything else -- a value the
column cannot hold, an event without `op`, a transaction or schema-change message, a TRUNCATE --
is a bad record naming why. With `ignore_key` the message key is never read. Field names match
exactly, else case-insensitively. Runs inside Spark's Python workers: it imports nothing from Spark."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

from sparkwave.connectors.json_decode import BadRecord, NotJson, converter, kind_of, parse, show

UPSERT, KEY_DELETE = 4, 5  # core/chunk.py's intents
UPSERT_OPS = frozenset(("c", "r", "u"))
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)
# What each Debezium / Kafka Connect semantic type's number counts, per second (a Date: days).
_UNITS = {"io.debezium.time.Timestamp": 1_000, "org.apache.kafka.connect.data.Timestamp": 1_000,
          "io.debezium.time.MicroTimestamp": 1_000_000, "io.debezium.time.NanoTimestamp": 1_000_000_000}
_DAY_TYPES = frozenset(("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"))
_DECIMAL_TYPE = "org.apache.kafka.connect.data.Decimal"

Field = dict[str, Any]  # a field's schema: {"field", "type", "name"?, "parameters"?}
Convert = Callable[[Any, Field | None], Any]


class DebeziumDecoder:
    """Decodes a message (value, key) into `(intent, row)` over `columns` [(name, type name)], or
    None for a tombstone; raises BadRecord for anything else. `key` names the primary key's columns
    among `columns` (a key column the message's metadata fills, INCLUDE key, is not among them)."""

    def __init__(self, columns: list[tuple[str, str]], key: list[str], ignore_key: bool = False) -> None:
        self.ignore_key = ignore_key  # RisingWave's `ignore_key`: the message key is never read
        self.names = [n for n, _ in columns]
        self.convert = [_converter(t) for _, t in columns]
        self.key = [k for k in key if k in self.names]
        self.key_slots = [self.names.index(k) for k in self.key]

    def decode(self, value: bytes | None, key: bytes | None) -> tuple[int, list[Any]] | None:
        if value is None:
            return None
        schema, event = _unwrap(parse(value), "the message")
        if event is None:  # `{"schema": ..., "payload": null}`: a tombstone as the JSON converter writes one
            return None
        op = event.get("op")
        if isinstance(op, str) and op in UPSERT_OPS:
            after = event.get("after")
            if not isinstance(after, dict):
                raise BadRecord(f"op {op!r} needs the new row in after, got {kind_of(after)}")
            row = self._values(after, _fields(schema, "after"), range(len(self.names)))
            if missing := [k for k, i in zip(self.key, self.key_slots, strict=True) if row[i] is None]:
                raise BadRecord(f"after has no {', '.join(missing)} (the primary key)")
            return UPSERT, row
        if op == "d":
            return KEY_DELETE, self._deleted_key(event.get("before"), _fields(schema, "before"), key)
        raise BadRecord(_not_a_change(event, op))

    def _deleted_key(self, before: Any, fields: dict[str, Field], key: bytes | None) -> list[Any]:
        """A row of NULLs but for the deleted key: from `before`, else from the message key."""
        row: list[Any] = [None] * len(self.names)
        if isinstance(before, dict):
            row = self._values(before, fields, self.key_slots)
        if any(row[i] is None for i in self.key_slots) and not self.ignore_key:
            from_key = self._key_row(key)
            row = [v if v is not None else from_key[i] for i, v in enumerate(row)]
        if missing := [k for k, i in zip(self.key, self.key_slots, strict=True) if row[i] is None]:
            where = "the message key is ignored (ignore_key)" if self.ignore_key else \
                "the message has no key" if key is None else "nor does the message key"
            raise BadRecord(f"op 'd' needs the deleted row's {', '.join(missing)} in before; {where}")
        return row

    def _key_row(self, key: bytes | None) -> list[Any]:
        """The key columns found in the message key (`{"id": ..}` or `{"schema", "payload"}`)."""
        if key is None:
            return [None] * len(self.names)
        try:
            schema, obj = _unwrap(parse(key), "the message key")
        except NotJson:
            raise BadRecord("op 'd' has no before, and the message key is not JSON") from None
        return self._values(obj or {}, _top_fields(schema), self.key_slots)

    def _values(self, obj: dict[str, Any], fields: dict[str, Field], slots: Any) -> list[Any]:
        """The values of the columns at `slots` (the rest NULL), by field name: exact, else
        case-insensitive (RisingWave's `ignoring_keycase`)."""
        out: list[Any] = [None] * len(self.names)
        folded: dict[str, Any] | None = None
        for i in slots:
            name = self.names[i]
            if name in obj:
                v = obj[name]
            else:
                if folded is None:
                    folded = {k.lower(): x for k, x in obj.items()}
                v = folded.get(name.lower())
            if v is None:
                continue
            try:
                out[i] = self.convert[i](v, fields.get(name.lower()))
            except (ValueError, ArithmeticError) as e:
                raise BadRecord(f"column {name}: {e}") from None
        return out


def _unwrap(obj: Any, what: str) -> tuple[Any, dict[str, Any] | None]:
    """(schema, the event) of a message: `{"schema", "payload"}` taken apart, else the object as is."""
    if not isinstance(obj, dict):
        raise BadRecord(f"{what} must be a JSON object, got {kind_of(obj)}")
    if "payload" in obj and "op" not in obj:
        schema, payload = obj.get("schema"), obj["payload"]
        if payload is not None and not isinstance(payload, dict):
            raise BadRecord(f"the payload of {what} must be a JSON object, got {kind_of(payload)}")
        return schema, payload
    return None, obj


def _not_a_change(event: dict[str, Any], op: Any) -> str:
    if op == "t":
        return "op 't' (a TRUNCATE upstream) is not applied: delete the rows another way, or recreate the table"
    if op is not None:
        return f"op {show(op)} is not a Debezium row change (c, r, u or d)"
    if "status" in event and "id" in event:
        return f"a Debezium transaction metadata event (status {show(event['status'])}), not a row change"
    if "ddl" in event or "tableChanges" in event:
        return "a Debezium schema change event, not a row change"
    return "not a Debezium change event: it has no op field"


def _top_fields(schema: Any) -> dict[str, Field]:
    """A struct schema's fields by (lower-case) name; {} for anything else."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list):
        return {}
    return {f["field"].lower(): f for f in fields if isinstance(f, dict) and isinstance(f.get("field"), str)}


def _fields(schema: Any, part: str) -> dict[str, Field]:
    """The fields of the envelope schema's `before` or `after` struct."""
    return _top_fields(_top_fields(schema).get(part))


def _semantic(field: Field | None) -> str | None:
    name = field.get("name") if field is not None else None
    return name if isinstance(name, str) else None


def _converter(type_name: str) -> Convert:
    """How a Debezium JSON value (with its field's schema, if the message has one) becomes a value of
    the SQL type `type_name`: json_decode's rules, with Debezium's encodings of time and decimals."""
    plain = converter(type_name)
    if type_name in ("timestamp", "timestamptz"):
        return _timestamp(plain, type_name == "timestamptz")
    if type_name == "date":
        return _date(plain)
    if type_name.startswith("decimal("):
        return _decimal(plain)
    if type_name == "boolean":
        return _boolean
    return lambda v, _field: plain(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _timestamp(plain: Callable[[Any], Any], with_zone: bool) -> Convert:
    def conv(v: Any, field: Field | None) -> Any:
        if not _is_int(v):
            return plain(v)  # ISO 8601 text (io.debezium.time.ZonedTimestamp, time.precision.mode = ...)
        semantic = _semantic(field)
        if semantic in _DAY_TYPES:
            t = _from_epoch(v * 86_400, 1)
        else:
            t = _from_epoch(v, _UNITS[semantic] if semantic in _UNITS else _guess_unit(v))
        return t if with_zone else t.replace(tzinfo=None)
    return conv


def _guess_unit(v: int) -> int:
    """RisingWave's `i64_to_timestamptz`: [0, 1e11) seconds, [1e11, 1e14) ms, [1e14, 1e17) us, else ns."""
    magnitude = abs(v)
    return 1 if magnitude < 10**11 else 1_000 if magnitude < 10**14 else 1_000_000 if magnitude < 10**17 \
        else 1_000_000_000


def _from_epoch(v: int, per_second: int) -> dt.datetime:
    try:
        return _EPOCH + dt.timedelta(microseconds=v * 1_000_000 // per_second)
    except OverflowError:
        raise ValueError(f"{v} (1/{per_second} s since 1970) is outside years 1-9999") from None


def _date(plain: Callable[[Any], Any]) -> Convert:
    def conv(v: Any, field: Field | None) -> Any:
        if not _is_int(v):
            return plain(v)
        try:
            return _EPOCH_DATE + dt.timedelta(days=v)  # io.debezium.time.Date: days since 1970-01-01
        except OverflowError:
            raise ValueError(f"{v} days since 1970-01-01 is outside years 1-9999") from None
    return conv


def _decimal(plain: Callable[[Any], Any]) -> Convert:
    def conv(v: Any, field: Field | None) -> Any:
        if isinstance(v, dict):  # io.debezium.data.VariableScaleDecimal
            scale, digits = v.get("scale"), v.get("value")
            if not isinstance(scale, int) or isinstance(scale, bool) or not isinstance(digits, str):
                raise ValueError("expected a number, or {\"scale\": int, \"value\": base64}, got an object")
            return plain(_unscaled(digits).scaleb(-scale))
        if isinstance(v, str) and _semantic(field) == _DECIMAL_TYPE:  # decimal.handling.mode = precise
            params = field.get("parameters") if field is not None else None
            declared = params.get("scale") if isinstance(params, dict) else None
            try:
                return plain(_unscaled(v).scaleb(-int(declared if declared is not None else 0)))
            except (TypeError, ValueError) as e:
                raise ValueError(f"a Debezium decimal {show(v)} (scale {show(declared)}): {e}") from None
        try:
            return plain(v)
        except ValueError as e:
            if not isinstance(v, str):
                raise
            raise ValueError(f"{e} (a Debezium decimal in base64 needs the message's schema, or "
                             "decimal.handling.mode = string)") from None
    return conv


def _unscaled(text: str) -> decimal.Decimal:
    """A Kafka Connect decimal's digits: base64 of the big-endian two's complement unscaled value."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError(f"expected base64 digits, got {show(text)}") from None
    if len(raw) > 32:  # beyond any decimal(38, s) column
        raise ValueError(f"a decimal of {len(raw)} bytes does not fit any decimal column")
    return decimal.Decimal(int.from_bytes(raw, "big", signed=True))


def _boolean(v: Any, _field: Field | None) -> bool:
    """true or false, or 0 or 1 (MySQL's tinyint(1), as RisingWave's relaxed Debezium booleans)."""
    if isinstance(v, bool):
        return v
    if _is_int(v) and v in (0, 1):
        return bool(v)
    raise ValueError(f"expected true or false (or 0 or 1), got {show(v)}")
