"""Debezium change events decoded into intents (connectors/debezium.py), without Spark: the
envelope with and without `schema`/`payload`, each `op`, tombstones, Debezium's encodings of time
and decimals, and a reason for everything that is not a row change."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwave.connectors.debezium import KEY_DELETE, UPSERT, DebeziumDecoder
from sparkwave.connectors.json_decode import BadRecord

COLUMNS = [("id", "int"), ("name", "varchar"), ("at", "timestamptz"), ("day", "date"), ("price", "decimal(10,2)"),
           ("ok", "boolean")]
D = DebeziumDecoder(COLUMNS, ["id"])
UTC = dt.UTC


def msg(obj) -> bytes:
    return json.dumps(obj).encode()


def with_schema(payload: dict, after_fields: list[dict], key_field: str = "after") -> bytes:
    """The `{"schema", "payload"}` envelope of Kafka Connect's JSON converter with `schemas.enable`."""
    struct = {"type": "struct", "optional": True, "fields": after_fields}
    return msg({"schema": {"type": "struct", "fields": [{**struct, "field": "before"}, {**struct, "field": "after"},
                                                        {"type": "string", "field": "op"}]},
                "payload": payload})


def test_each_op_becomes_an_upsert_or_a_key_delete_with_and_without_the_envelope():
    row = {"id": 1, "name": "a", "at": None, "day": None, "price": "1.5", "ok": True}
    expected = [1, "a", None, None, Decimal("1.50"), True]
    for op in ("c", "r", "u"):
        event = {"before": None if op != "u" else {**row, "name": "old"}, "after": row, "op": op, "source": {}}
        assert D.decode(msg(event), None) == (UPSERT, expected)
        assert D.decode(with_schema(event, []), None) == (UPSERT, expected)
        assert D.decode(msg({"payload": event}), None) == (UPSERT, expected)  # no schema, still enveloped
    delete = {"before": row, "after": None, "op": "d"}
    assert D.decode(msg(delete), None) == (KEY_DELETE, [1, None, None, None, None, None])
    assert D.decode(with_schema(delete, []), None) == (KEY_DELETE, [1, None, None, None, None, None])


def test_a_tombstone_is_ignored_and_a_delete_without_before_takes_the_message_key():
    assert D.decode(None, msg({"id": 1})) is None
    assert D.decode(msg({"schema": None, "payload": None}), msg({"id": 1})) is None
    gone = msg({"before": None, "after": None, "op": "d"})
    assert D.decode(gone, msg({"id": 7})) == (KEY_DELETE, [7, None, None, None, None, None])
    keyed = msg({"schema": {"type": "struct", "fields": [{"type": "int32", "field": "id"}]}, "payload": {"ID": 8}})
    assert D.decode(gone, keyed) == (KEY_DELETE, [8, None, None, None, None, None])
    with pytest.raises(BadRecord, match="deleted row's id in before; the message has no key"):
        D.decode(gone, None)
    with pytest.raises(BadRecord, match="deleted row's id in before; nor does the message key"):
        D.decode(gone, msg({"other": 1}))
    with pytest.raises(BadRecord, match="message key is not JSON"):
        D.decode(gone, b"not json")
    with pytest.raises(BadRecord, match="the message key is ignored"):
        DebeziumDecoder(COLUMNS, ["id"], ignore_key=True).decode(gone, msg({"id": 7}))


def test_names_match_exactly_else_case_insensitively():
    d = DebeziumDecoder([("L_ORDERKEY", "bigint"), ("l_comment", "varchar")], ["L_ORDERKEY"])
    event = {"after": {"L_ORDERKEY": 5, "L_COMMENT": "x"}, "op": "r"}
    assert d.decode(msg(event), None) == (UPSERT, [5, "x"])


def test_timestamps_take_their_unit_from_the_schema_else_from_their_magnitude():
    t = dt.datetime(2024, 4, 11, 2, 0, 0, 123456, tzinfo=UTC)
    micros = int(t.timestamp()) * 1_000_000 + 123456
    guessed = {micros // 10**6: t.replace(microsecond=0), micros // 1000: t.replace(microsecond=123000),
               micros: t, micros * 1000: t}
    for number, expected in guessed.items():
        assert D.decode(msg({"after": {"id": 1, "at": number}, "op": "c"}), None)[1][2] == expected
    fields = [{"type": "int64", "name": "io.debezium.time.Timestamp", "field": "at"}]
    ms = with_schema({"after": {"id": 1, "at": 100}, "op": "c"}, fields)
    assert D.decode(ms, None)[1][2] == dt.datetime(1970, 1, 1, 0, 0, 0, 100_000, tzinfo=UTC)  # not 100 s
    iso = {"after": {"id": 1, "at": "2024-04-11T02:00:00.123456Z"}, "op": "c"}
    assert D.decode(msg(iso), None)[1][2] == t
    naive = DebeziumDecoder([("id", "int"), ("at", "timestamp")], ["id"])
    micro = [{"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "at"}]
    assert naive.decode(with_schema({"after": {"id": 1, "at": 5}, "op": "c"}, micro), None)[1][1] == \
        dt.datetime(1970, 1, 1, 0, 0, 0, 5)
    with pytest.raises(BadRecord, match="column at: .*years 1-9999"):
        D.decode(with_schema({"after": {"id": 1, "at": 10**18}, "op": "c"},
                             [{"type": "int64", "name": "io.debezium.time.Timestamp", "field": "at"}]), None)


def test_dates_decimals_and_booleans_in_debeziums_encodings():
    assert D.decode(msg({"after": {"id": 1, "day": 19000}, "op": "c"}), None)[1][3] == dt.date(2022, 1, 8)
    assert D.decode(msg({"after": {"id": 1, "day": "2022-01-08"}, "op": "c"}), None)[1][3] == dt.date(2022, 1, 8)
    digits = base64.b64encode((-12345).to_bytes(2, "big", signed=True)).decode()
    variable = {"after": {"id": 1, "price": {"scale": 2, "value": digits}}, "op": "c"}
    assert D.decode(msg(variable), None)[1][4] == Decimal("-123.45")
    precise = [{"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "3"},
                "field": "price"}]
    assert D.decode(with_schema({"after": {"id": 1, "price": digits}, "op": "c"}, precise), None)[1][4] == \
        Decimal("-12.35")
    with pytest.raises(BadRecord, match="column price: .*needs the message's schema"):
        D.decode(msg({"after": {"id": 1, "price": digits}, "op": "c"}), None)
    assert D.decode(msg({"after": {"id": 1, "price": 12.5}, "op": "c"}), None)[1][4] == Decimal("12.50")
    assert D.decode(msg({"after": {"id": 1, "ok": 0}, "op": "c"}), None)[1][5] is False
    with pytest.raises(BadRecord, match="column ok"):
        D.decode(msg({"after": {"id": 1, "ok": 2}, "op": "c"}), None)


@pytest.mark.parametrize(("value", "reason"), [
    (b"{not json", "not valid JSON"),
    (b"[1]", "must be a JSON object"),
    (msg({"payload": 5}), "payload of the message must be a JSON object"),
    (msg({"after": {"id": 1}}), "no op field"),
    (msg({"after": {"id": 1}, "op": "x"}), "op 'x' is not a Debezium row change"),
    (msg({"after": {"id": 1}, "op": ["c"]}), "op an array is not a Debezium row change"),
    (msg({"before": None, "after": None, "op": "t"}), "TRUNCATE"),
    (msg({"status": "BEGIN", "id": "571:53195829", "event_count": None}), "transaction metadata"),
    (msg({"ddl": "ALTER TABLE t ADD c int", "tableChanges": []}), "schema change"),
    (msg({"after": None, "op": "c"}), "op 'c' needs the new row in after"),
    (msg({"after": {"name": "a"}, "op": "u"}), "after has no id"),
    (msg({"after": {"id": "one"}, "op": "c"}), "column id"),
    (msg({"after": {"id": 1, "name": 5}, "op": "c"}), "column name: expected a string"),
])
def test_anything_but_a_row_change_is_a_bad_record_that_says_why(value, reason):
    with pytest.raises(BadRecord, match=reason):
        D.decode(value, None)


_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8)
                     | st.sampled_from(["c", "u", "d", "r", "t", "1.5", "AAE=", "2024-01-01", "1e999"]),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["id", "ID", "name", "at", "day", "price", "ok", "scale", "value", "fields",
                                          "field", "name", "parameters", "before", "after", "op", "payload",
                                          "schema", "status"]), inner, max_size=5), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(value=_json, key=_json)
def test_any_json_message_is_a_change_a_tombstone_or_a_bad_record(value, key):
    """Whatever the message, the decoder answers with an intent and a row the columns can hold, or a
    BadRecord: nothing else escapes (the reader would still set it aside, but without a reason)."""
    for v in (value, {"payload": value, "schema": key}, {"op": "d", "before": value}, {"op": "u", "after": value}):
        try:
            out = D.decode(msg(v), msg(key))
        except BadRecord:
            continue
        if out is not None:
            op, row = out
            assert op in (UPSERT, KEY_DELETE) and len(row) == len(COLUMNS) and row[0] is not None
