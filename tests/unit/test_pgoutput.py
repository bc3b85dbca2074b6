"""The pgoutput decoder and the text-value parser of the postgres-cdc connector, on messages built
byte for byte as PostgreSQL's "Logical Replication Message Formats" (protocol 1) define them (the
integration tests decode a real server's)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest

from sparkwave.connectors.pgoutput import UNCHANGED, Decoder, PgoutputError
from sparkwave.connectors.postgres_cdc_values import RowParser, takes
from sparkwave.core.schema import parse_type


def s(text: str) -> bytes:
    return text.encode() + b"\0"


def tup(*values: object) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            data = str(v).encode()
            out += b"t" + struct.pack(">i", len(data)) + data
    return out


BEGIN = b"B" + struct.pack(">qqI", 0x1000, 0, 777)
COMMIT = b"C" + struct.pack(">bqqq", 0, 0x1000, 0x1040, 0)
RELATION = (b"R" + struct.pack(">I", 16384) + s("public") + s("t") + b"d" + struct.pack(">h", 2)
            + b"\x01" + s("id") + struct.pack(">Ii", 23, -1) + b"\x00" + s("big") + struct.pack(">Ii", 25, -1))


def test_a_transaction_decodes_in_order_with_its_positions():
    d = Decoder()
    assert d.feed(BEGIN) is None and d.feed(RELATION) is None
    d.feed(b"I" + struct.pack(">I", 16384) + b"N" + tup(1, "x"))
    d.feed(b"U" + struct.pack(">I", 16384) + b"O" + tup(1, "x") + b"N" + tup(2, UNCHANGED))
    d.feed(b"D" + struct.pack(">I", 16384) + b"K" + tup(2, None))
    txn = d.feed(COMMIT)
    assert (txn.xid, txn.commit_lsn, txn.end_lsn) == (777, 0x1000, 0x1040)
    assert [(c.kind, c.old, c.new) for c in txn.changes] == [
        ("I", None, ["1", "x"]), ("U", ["1", "x"], ["2", UNCHANGED]), ("D", ["2", None], None)]
    assert txn.changes[0].relation.columns[0] == ("id", 23, -1, True)
    assert [r.name for r in txn.described] == ["t"]


def test_a_later_transaction_keeps_the_session_s_relation():
    d = Decoder()
    for m in (BEGIN, RELATION, COMMIT):
        d.feed(m)
    d.feed(BEGIN)
    d.feed(b"I" + struct.pack(">I", 16384) + b"N" + tup(3, "y"))
    txn = d.feed(COMMIT)
    assert txn.changes[0].relation.name == "t" and txn.described == []


@pytest.mark.parametrize(("message", "why"), [
    (b"I" + struct.pack(">I", 1) + b"N" + tup(1), "outside a transaction"),
    (b"Z", "unknown message type"),
    (b"R" + struct.pack(">I", 1) + b"public", "without its terminating NUL"),
    (b"B" + struct.pack(">q", 1), "ends early"),
])
def test_a_malformed_message_is_an_error_naming_it(message, why):
    with pytest.raises(PgoutputError, match=why):
        Decoder().feed(message)


def test_text_values_parse_into_the_declared_types():
    cols = [(n, parse_type(t)) for n, t in [("b", "boolean"), ("i", "smallint"), ("d", "decimal(6,2)"),
                                              ("ts", "timestamptz"), ("t", "timestamp"), ("day", "date"),
                                              ("raw", "bytea"), ("f", "double")]]
    row = RowParser(cols).parse(["t", "-32768", "1234.565", "2026-01-02 03:04:05.5+02", "2026-01-02 03:04:05",
                                 "2026-01-02", "\\x00ff", "NaN"])
    assert row[:7] == [True, -32768, Decimal("1234.57"), dt.datetime(2026, 1, 2, 1, 4, 5, 500000, tzinfo=dt.UTC),
                       dt.datetime(2026, 1, 2, 3, 4, 5), dt.date(2026, 1, 2), b"\x00\xff"]
    for bad, why in [("32768", "out of range"), ("12345.6", "does not fit decimal")]:
        text = ["t", "1", "1", None, None, None, None, None]
        text[1 if "range" in why else 2] = bad
        with pytest.raises(ValueError, match=why):
            RowParser(cols).parse(text)


def test_declared_types_take_their_upstream_types():
    assert takes(parse_type("bigint"), "int4") and not takes(parse_type("int"), "int8")
    assert takes(parse_type("decimal(10,2)"), "numeric") and takes(parse_type("varchar"), "jsonb")
    assert not takes(parse_type("int"), "text")


def test_a_truncate_names_its_relations():
    d = Decoder()
    d.feed(BEGIN)
    d.feed(RELATION)
    d.feed(b"T" + struct.pack(">ibII", 2, 0, 16384, 99))
    txn = d.feed(COMMIT)
    assert [r.name if r else None for r in txn.truncated] == ["t", None]


def test_boolean_output_forms_convert_in_bulk_and_others_fall_back():
    """The backfill's COPY writes boolout's 't'/'f' (as pgoutput does): converted by the bulk path;
    any other form leaves the chunk to the row parser."""
    import pyarrow as pa

    from sparkwave.connectors.postgres_cdc_values import arrow_columns
    col = [("b", parse_type("boolean"))]
    out = arrow_columns(col, [pa.chunked_array([pa.array(["t", None, "f"])])])
    assert out is not None and out[0].to_pylist() == [True, None, False]
    assert arrow_columns(col, [pa.chunked_array([pa.array(["true"])])]) is None
    assert RowParser(col).parse(["f"]) == [False]


def test_generated_and_computed_columns_in_the_create_check():
    """An upstream generated column (never sent) need not be declared and may not be as a plain
    column; a column computed here is neither read nor looked for upstream; an enum is a varchar."""
    from sparkwave.connectors.postgres_cdc_check import column_problems
    declared = {"id": parse_type("int"), "y": parse_type("int")}
    upstream = [("id", "int4"), ("y", "int4"), ("e", "enum")]
    problems = column_problems(declared, set(), upstream, {"y", "e"})
    assert len(problems) == 1 and "'y' is a generated column upstream" in problems[0] and "y int AS" in problems[0]
    assert column_problems({"id": parse_type("int")}, {"z"}, [("id", "int4"), ("y", "int4")], {"y"}) == []
    assert column_problems({"id": parse_type("int"), "m": parse_type("varchar")}, set(),
                           [("id", "int4"), ("m", "enum")]) == []
