"""What a source's record or a sink's value may hold, without Spark: a message that a column cannot
hold is a bad record naming why (and its kept payload is always storable); no message fails its
batch; the PostgreSQL sink's rule for NUL."""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest

from sparkwave.connectors.json_decode import BadRecord, JsonDecoder
from sparkwave.connectors.kafka_reader import ERROR, RAW, RAW_KEPT, ReadSpec, _Batch
from sparkwave.connectors.sink_postgres import without_nul
from sparkwave.core.limits import MAX_VALUE_BYTES


class Msg:
    def __init__(self, offset: int, value: bytes | None, key: bytes | None = None) -> None:
        self.o, self.v, self.k = offset, value, key

    def offset(self) -> int:
        return self.o

    def value(self) -> bytes | None:
        return self.v

    def key(self) -> bytes | None:
        return self.k

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


def batch_of(spec: ReadSpec, messages: list[Msg]) -> dict[str, list]:
    batch = _Batch(spec, 0)
    for m in messages:
        batch.add(m)
    return batch.flush().to_pydict()


PLAIN = ReadSpec("b", "t", {}, [("s", "varchar"), ("k", "varchar"), ("_row_id", "bigint")],
                 {"_row_id": "row_id", "k": "key"}, ["_row_id"], False)


def test_a_lone_surrogate_anywhere_is_a_bad_record_and_the_batch_is_stored():
    out = batch_of(PLAIN, [Msg(0, json.dumps({"s": "\ud800"}).encode()), Msg(1, json.dumps({"\udbff": 1}).encode()),
                           Msg(2, b'{"s": "\\ud83d\\ude00"}'), Msg(3, b'{"s": "ok"}', b"\xff"),
                           Msg(4, b'{"s": "\xed\xa0\x80"}'), Msg(5, b'{"s": "a\\u0000b"}', b"key")])
    assert out["s"] == [None, None, "\U0001f600", None, None, "a\x00b"]  # a pair is one character; NUL is text
    assert out["k"] == [None, None, None, None, None, "key"]
    errors = out[ERROR]
    assert errors[0] == r"column s: '\ud800' holds a lone surrogate, which UTF-8 text cannot hold"
    assert "lone surrogate in its name" in errors[1] and errors[2] is None and errors[5] is None
    assert errors[3] == "the message key is not valid UTF-8: byte 0xff at position 0"
    assert errors[4].startswith("not valid UTF-8: byte 0xed")
    assert out[RAW][4] == '{"s": "\\xed\\xa0\\x80"}'  # bytes that are not UTF-8 kept escaped


def test_a_value_arrow_refuses_sets_its_row_aside_and_the_others_are_stored():
    """Whatever decoding lets through that Arrow cannot hold, the row is a bad record naming the
    column, not an epoch that fails (here a converter made to return a lone surrogate)."""
    batch = _Batch(PLAIN, 0)
    batch.decoder.columns = [("s", lambda v: v if v != "bad" else "x\udc80")]
    for i, v in enumerate([b'{"s": "a"}', b'{"s": "bad"}', b'{"s": "c"}']):
        batch.add(Msg(i, v))
    out = batch.flush().to_pydict()
    assert out["s"] == ["a", None, "c"] and out["_row_id"] == [0, 1, 2]
    assert out[ERROR][0] is None and out[ERROR][1].startswith("column s: cannot be stored as string")
    assert out[RAW][1] == '{"s": "bad"}'


def test_text_and_bytea_up_to_the_value_limit_and_not_beyond():
    d = JsonDecoder([("s", "varchar"), ("b", "bytea")])
    at = "é" * (MAX_VALUE_BYTES // 2)  # the limit counts UTF-8 bytes, not characters
    assert d.decode(json.dumps({"s": at}, ensure_ascii=False).encode())[0] == at
    with pytest.raises(BadRecord, match=f"column s: a string of {MAX_VALUE_BYTES + 1} bytes is larger than"):
        d.decode(json.dumps({"s": at + "x"}, ensure_ascii=False).encode())
    blob = b"\x00" * MAX_VALUE_BYTES
    assert d.decode(json.dumps({"b": base64.b64encode(blob).decode()}))[1] == blob
    with pytest.raises(BadRecord, match="column b: a bytea of about .* bytes is larger than"):
        d.decode(json.dumps({"b": base64.b64encode(blob + b"\x00" * 3).decode()}))


def test_numbers_are_exact_and_out_of_range_is_a_bad_record():
    d = JsonDecoder([("i", "int"), ("r", "real"), ("x", "double"), ("n", "decimal(38,2)")])
    assert d.decode(b'{"i": 4.0, "r": 1.5, "x": 5e-324, "n": 123456789012345678901234567890.125}') == [
        4, 1.5, 5e-324, __import__("decimal").Decimal("123456789012345678901234567890.13")]  # a number, not a float
    for bad, reason in [(b'{"i": 1e999999999}', "column i: 1E\\+999999999 is out of range for int"),
                        (b'{"x": 1e999}', "column x: 1E\\+999 is out of range for double"),
                        (b'{"x": -1e-999}', "out of range for double"), (b'{"r": 3.5e38}', "out of range for real"),
                        (b'{"r": 1e-46}', "out of range for real"), (b'{"x": Infinity}', "not valid JSON"),
                        (b'{"x": -NaN}', "not valid JSON"), (b'{"i": 1' + b"0" * 5000 + b"}", "out of range")]:
        with pytest.raises(BadRecord, match=reason):
            d.decode(bad)


def test_an_upsert_key_is_decoded_as_strictly_as_a_value():
    spec = ReadSpec("b", "t", {}, [("id", "varchar"), ("v", "int")], {}, ["id"], True)
    out = batch_of(spec, [Msg(0, None, b'"a"'), Msg(1, None, b"plain text"), Msg(2, None, b'"\\ud800"'),
                          Msg(3, None, b"\xc3"), Msg(4, b'{"v": 1}', b'{"id": "\\udc00"}'),
                          Msg(5, b"x" * (RAW_KEPT * 5), b"k")])
    assert out["id"][:2] == ["a", "plain text"] and out[ERROR][:2] == [None, None]
    assert out[ERROR][2] == r"the message key: field (the value): '\ud800' holds a lone surrogate, which UTF-8 " \
                            "text cannot hold"
    assert out[ERROR][3] == "the message key is not valid UTF-8: byte 0xc3 at position 0"
    assert out[ERROR][4].startswith("the message key: column id: '\\udc00'")
    assert out[RAW][5] == "x" * RAW_KEPT + "..."


def test_the_postgres_sink_removes_nul_from_values_and_leaves_out_rows_whose_key_holds_one():
    change = pa.table({"_op": pa.array([1, 1, 2, 1], pa.int8()), "k": ["a", "b\x00", "c\x00", "d"],
                       "v": ["x\x00y\x00", None, "z", "w"], "n": [1, 2, 3, 4]})
    out, note = without_nul(change, ("k",))
    assert out.to_pydict() == {"_op": [1, 1], "k": ["a", "d"], "v": ["xy", "w"], "n": [1, 4]}
    assert note is not None and note.startswith(
        "column k of the row with key (k = 'b\\x00') holds NUL (U+0000), which PostgreSQL text cannot hold: "
        "the row is not delivered")
    out, note = without_nul(change, ())  # no key: every value loses its NULs, every row is delivered
    assert out["k"].to_pylist() == ["a", "b", "c", "d"] and note.startswith("column k of a row holds NUL")
    clean = change.slice(3)
    assert without_nul(clean, ("k",)) == (clean, None)
