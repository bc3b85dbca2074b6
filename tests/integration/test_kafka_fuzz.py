"""A Kafka table fed a seeded mix of valid records and hostile ones (bytes that are not UTF-8, lone
surrogates in values and field names, deep nesting, numbers out of range, strings over the value
limit, wrong types, NULs, empty messages, JSON that is not an object): every valid record is in the
table exactly once, every hostile one in SHOW SOURCE ERRORS with its offset and a reason naming
what is wrong, MVs equal DuckDB over the valid rows, and the warehouse reopens and goes on."""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from decimal import Decimal

import pytest

import sparkwave
from sparkwave.core import policy
from sparkwave.core.limits import MAX_JSON_DEPTH, MAX_VALUE_BYTES
from tests.kafka_util import Topic, offsets_at
from tests.oracle import connect, duckdb_sql, multiset, rows_of, sql_literal

COLUMNS = ["id", "name", "price", "amount", "at", "blob", "flag"]
DDL = ("CREATE TABLE ev (id int, name varchar, price double, amount decimal(10,2), at timestamptz, blob bytea, "
       "flag boolean) INCLUDE partition AS p INCLUDE offset AS o INCLUDE key AS mk WITH ({options}) "
       "FORMAT PLAIN ENCODE JSON")
MVS = {
    "per_p": "SELECT p, count(*) AS n, sum(amount) AS amt, max(id) AS hi, min(price) AS lo, count(flag) AS flags "
             "FROM ev GROUP BY p",
    "flagged": "SELECT id, amount, p, o FROM ev WHERE flag",
}
ORACLE_DDL = "id INTEGER, price DOUBLE, amount DECIMAL(10,2), flag BOOLEAN, p INTEGER, o BIGINT"
PARTITIONS = 3
UTC = dt.UTC


def _text(rng: random.Random) -> str:
    """Text that JSON carries: ASCII, quotes and backslashes, NUL, accents, emoji (a surrogate pair
    once escaped), CJK."""
    alphabet = ["a", "Z", "7", " ", '"', "\\", "\x00", "\n", "é", "ß", "😀", "中", "\u2028", "\x7f"]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def _timestamp(rng: random.Random) -> tuple[object, dt.datetime]:
    """(how the message writes it, the instant stored)."""
    t = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=rng.randint(-10**12, 4 * 10**12))
    if rng.random() < 0.5:
        return int((t - dt.datetime(1970, 1, 1, tzinfo=UTC)) / dt.timedelta(milliseconds=1)), t
    zone = dt.timezone(dt.timedelta(minutes=rng.choice([-480, -90, 0, 60, 330])))
    return t.astimezone(zone).isoformat(), t


def valid(rng: random.Random) -> tuple[bytes, tuple]:
    """A valid message and the row it must become (the table's columns, in order)."""
    row: dict = {}
    obj: dict = {}
    if rng.random() < 0.95:
        row["id"] = obj["id"] = rng.choice([rng.randint(-1000, 1000), -2**31, 2**31 - 1])
    if rng.random() < 0.9:
        row["name"] = obj["name"] = _text(rng)
    if rng.random() < 0.9:
        row["price"] = obj["price"] = rng.choice([rng.uniform(-1e6, 1e6), 1.7976931348623157e308, 5e-324, -0.0, 0])
        row["price"] = float(row["price"])
    if rng.random() < 0.9:
        amount = Decimal(rng.randint(-9_999_999_999, 9_999_999_999)).scaleb(-2)
        row["amount"] = amount
        obj["amount"] = str(amount) if rng.random() < 0.5 else float(amount)  # float repr: the same digits
    if rng.random() < 0.8:
        obj["at"], row["at"] = _timestamp(rng)
    if rng.random() < 0.7:
        row["blob"] = rng.randbytes(rng.randint(0, 40))
        obj["blob"] = base64.b64encode(row["blob"]).decode()
    if rng.random() < 0.9:
        row["flag"] = obj["flag"] = rng.random() < 0.5
    if rng.random() < 0.2:
        obj["extra"] = {"nested": [1, {"x": None}], "ignored": "😀"}  # fields no column has: ignored
    if rng.random() < 0.1 and "id" in obj:
        obj["ID"] = obj.pop("id")  # an unquoted name folds, as in PostgreSQL
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    return text.encode("utf-8"), tuple(row.get(c) for c in COLUMNS)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# A hostile message: its value and what its reason must say.
HOSTILE = [
    (lambda r: b"\xff" + r.randbytes(r.randint(0, 30)), "not valid UTF-8"),
    (lambda r: b'{"id": 1, "name": "ab\xc3"}', "not valid UTF-8"),
    (lambda r: b'{"id": 1, "name": "\xed\xa0\x80"}', "not valid UTF-8"),  # a surrogate written as UTF-8 bytes
    (lambda r: json.dumps({"id": 1, "name": "x\ud800y"}).encode(), "column name"),
    (lambda r: json.dumps({"id": 1, "name": "\udfff"}).encode(), "lone surrogate"),
    (lambda r: json.dumps({"id": 1, "\ud800": 2}).encode(), "lone surrogate in its name"),
    (lambda r: json.dumps({"id": 1, "extra": {"a": ["\udc00"]}}).encode(), "field extra.a[0]"),
    (lambda r: f'{{"id": 1, "extra": {_nested(r.randint(MAX_JSON_DEPTH, 3000))}}}'.encode(), "nested deeper"),
    (lambda r: ('{"a":' * (d := r.randint(MAX_JSON_DEPTH + 1, 2000)) + "1" + "}" * d).encode(), "nested deeper"),
    (lambda r: b'{"id": 2147483648}', "out of range for int"),
    (lambda r: b'{"id": -2147483649}', "out of range for int"),
    (lambda r: b'{"id": 1e999}', "out of range for int"),
    (lambda r: ('{"id": ' + "9" * r.randint(100, 6000) + "}").encode(), "out of range for int"),
    (lambda r: b'{"id": 2.5}', "expected an integer"),
    (lambda r: b'{"price": 1e999}', "out of range for double"),
    (lambda r: b'{"price": -1e400}', "out of range for double"),
    (lambda r: b'{"price": 1e-400}', "out of range for double"),
    (lambda r: b'{"price": NaN}', "not valid JSON"),
    (lambda r: b'{"price": Infinity}', "not valid JSON"),
    (lambda r: b'{"amount": 123456789.5}', "decimal(10,2)"),
    (lambda r: b'{"amount": "1e9999999"}', "decimal(10,2)"),
    (lambda r: b'{"amount": "abc"}', "decimal(10,2)"),
    (lambda r: b'{"id": "seven"}', "column id"),
    (lambda r: b'{"id": true}', "column id"),
    (lambda r: b'{"name": 5}', "column name"),
    (lambda r: b'{"name": ["a"]}', "column name"),
    (lambda r: b'{"flag": 1}', "column flag"),
    (lambda r: b'{"blob": "***"}', "column blob"),
    (lambda r: b'{"at": true}', "column at"),
    (lambda r: b'{"at": "10000-01-01T00:00:00"}', "column at"),
    (lambda r: b'{"at": 99999999999999999}', "column at"),
    (lambda r: b'{"at": "0001-01-01T00:00:00+01:00"}', "column at"),
    (lambda r: b'{"at": "9999-12-31T23:30:00-01:00"}', "column at"),
    (lambda r: b'{"id": 1, "name": "a\x00b"}', "not valid JSON"),  # a raw control character in a string
    (lambda r: b"", "empty message"),
    (lambda r: b"  \n", "empty message"),
    (lambda r: b"[1, 2]", "expected a JSON object"),
    (lambda r: b"42", "expected a JSON object"),
    (lambda r: b"null", "expected a JSON object"),
    (lambda r: b'"text"', "expected a JSON object"),
    (lambda r: b'{"id": 1', "not valid JSON"),
    (lambda r: b'\xef\xbb\xbf{"id": 1}', "not valid JSON"),
]


def _over_limit() -> bytes:
    """A string of MAX_VALUE_BYTES + 1 bytes in UTF-8 (fewer characters than that)."""
    return json.dumps({"id": 5, "name": "é" * (MAX_VALUE_BYTES // 2) + "x"}, ensure_ascii=False).encode()


class Feed:
    """Produces the mix round-robin over the partitions and remembers what each message must become."""

    def __init__(self, topic: Topic, seed: int) -> None:
        self.topic = topic
        self.rng = random.Random(seed)
        self.hostile = 0
        self.sent: list[tuple[bytes | None, bytes | None, tuple | None, str | None]] = []  # by production order

    def produce(self, n: int, huge: bool = False) -> None:
        for i in range(n):
            key: bytes | None = self.rng.choice([None, b"k%d" % i, b'{"a": 1}', "ключ".encode()])
            if huge and i == n // 2:
                value, row, reason = _over_limit(), None, "larger than the limit"
            elif huge and i == n // 2 + 1:  # exactly at the limit: stored
                value = json.dumps({"id": 6, "name": "é" * (MAX_VALUE_BYTES // 2)}, ensure_ascii=False).encode()
                row, reason = (6, "é" * (MAX_VALUE_BYTES // 2), None, None, None, None, None), None
            elif self.rng.random() < 0.55:
                (value, row), reason = valid(self.rng), None
            elif self.rng.random() < 0.05:
                value, row, reason = None, None, "no value"  # a tombstone in a PLAIN table
            elif self.rng.random() < 0.05:
                (value, _), row, reason = valid(self.rng), None, "message key is not valid UTF-8"
                key = b"\xfe" + self.rng.randbytes(3)
            else:
                make, reason = HOSTILE[self.hostile % len(HOSTILE)]  # each kind in turn, at random places
                self.hostile += 1
                value, row = make(self.rng), None
            self.sent.append((value, key, row, reason))
            self.topic.produce(value, len(self.sent) % PARTITIONS, key)
        self.topic.flush()

    def outcomes(self) -> tuple[list[tuple], dict[tuple[int, int], str]]:
        """(the rows the table must hold: columns, mk, p, o; {(partition, offset): reason} of the bad)."""
        order: dict[int, list] = {}
        for m in self.topic.messages:  # delivery reports arrive in production order per partition
            order.setdefault(m.partition, []).append(m)
        produced = {p: iter(ms) for p, ms in order.items()}
        rows, bad = [], {}
        for i, (value, key, row, reason) in enumerate(self.sent, start=1):
            m = next(produced[i % PARTITIONS])
            assert (m.value, m.key) == (value, key), "delivery reports out of order"
            if row is not None:
                rows.append((*row, None if key is None else key.decode(), m.partition, m.offset))
            else:
                bad[(m.partition, m.offset)] = reason
        return rows, bad


def drain(s, topic: Topic) -> int:
    """Flushes until the table has read every message produced; the last epoch."""
    ends = {p: 1 + max(m.offset for m in topic.messages if m.partition == p) for p in range(PARTITIONS)}
    epoch = s.flush()
    while offsets_at(s, "ev", epoch) != ends:
        epoch = s.flush()
    return epoch


def check(s, feed: Feed) -> None:
    rows, bad = feed.outcomes()
    got = rows_of(s.table("ev").select(*COLUMNS, "mk", "p", "o"))
    assert multiset(got) == multiset(rows), "the table holds exactly the valid records, once each"
    errors = s.sql("SHOW SOURCE ERRORS FROM ev").collect()
    assert {(r.partition, r.offset) for r in errors} == set(bad) and len(errors) == len(bad)
    for r in errors:
        assert bad[(r.partition, r.offset)] in r.error, (r.error, bad[(r.partition, r.offset)], r.raw[:100])
        assert len(r.raw) <= 2003
    assert s.sql("SHOW SOURCES").collect()[0].bad_records == len(bad)
    db = connect()
    db.execute(f"CREATE TABLE ev ({ORACLE_DDL})")
    flat = [(r[0], r[2], r[3], r[6], r[8], r[9]) for r in rows]
    db.execute("INSERT INTO ev VALUES " + ", ".join(
        "(" + ", ".join(sql_literal(v) for v in r) + ")" for r in flat))
    for name, sql in MVS.items():
        expected = multiset(db.execute(duckdb_sql(sql, db)).fetchall())
        assert multiset(rows_of(s.table(name))) == expected, name


@pytest.mark.parametrize("reader", ["driver", "workers"])
def test_hostile_messages_are_bad_records_and_valid_ones_are_stored_exactly_once(spark, kafka, tmp_path, monkeypatch,
                                                                                reader):
    if reader == "workers":
        monkeypatch.setattr(policy, "KAFKA_DRIVER_ROWS", 0)
    topic = Topic(kafka.bootstrap, PARTITIONS, max_bytes=4 * MAX_VALUE_BYTES)
    feed = Feed(topic, seed=43 if reader == "driver" else 4343)
    feed.produce(400, huge=True)
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(DDL.format(options=topic.options(**{"max.rows.per.epoch": "90"})))
        s.sql("CREATE TABLE other (k int PRIMARY KEY)")
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        s.sql("INSERT INTO other VALUES (1)")
        drain(s, topic)
        assert [r.k for r in s.table("other").collect()] == [1]  # the rest of the pipeline went on
        assert {reason for _, _, _, reason in feed.sent} >= {reason for _, reason in HOSTILE}, "every kind was sent"
        check(s, feed)
    feed.produce(150)
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        drain(s, topic)
        s.sql("INSERT INTO other VALUES (2)")
        s.flush()
        assert sorted(r.k for r in s.table("other").collect()) == [1, 2]
        check(s, feed)
