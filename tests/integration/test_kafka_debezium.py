"""Kafka tables in FORMAT DEBEZIUM ENCODE JSON on a real broker (noida-db): RisingWave's own e2e
events give RisingWave's answers, and under creates, updates, deletes, tombstones and bad records
over several partitions every MV equals DuckDB over exactly the events its epoch's committed offsets
cover -- an MV created mid-stream too."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest
from confluent_kafka import Consumer, TopicPartition

from sparkwave.core import policy
from sparkwave.core.errors import SqlError
from tests.kafka_util import Message, Topic, check_epoch, offsets_at, read_by

CUSTOMERS = "id integer, first_name varchar, last_name varchar, email varchar, PRIMARY KEY (id)"
_EPOCH = dt.datetime(1970, 1, 1)


def customer(i: int, first: str, last: str, email: str) -> dict:
    return {"id": i, "first_name": first, "last_name": last, "email": email}


# RisingWave's e2e_test/source_legacy/basic/scripts/test_data/debezium_log.1 (Apache License 2.0,
# Copyright RisingWave Labs): a MySQL customers table's snapshot, then creates, updates and a delete.
SALLY, GEORGE = customer(1001, "Sally", "Thomas", "sally.thomas@acme.com"), customer(1002, "George", "Bailey",
                                                                                   "gbailey@foobar.com")
EDWARD, ANNE = customer(1003, "Edward", "Walker", "ed@walker.com"), customer(1004, "Anne", "Kretchmar",
                                                                             "annek@noanswer.org")
ADD, ADD1 = customer(1005, "add", "add", "add"), customer(1006, "add1", "add1", "add1")
DEBEZIUM_LOG = [("r", None, SALLY), ("r", None, GEORGE), ("r", None, EDWARD), ("r", None, ANNE), ("c", None, ADD),
                ("u", ANNE, {**ANNE, "first_name": "Anne1"}), ("c", None, ADD1),
                ("u", ADD, {**ADD, "last_name": "add2"}), ("u", ADD1, {**ADD1, "last_name": "add2"}),
                ("d", {**ADD1, "last_name": "add2"}, None)]
MYSQL_SCHEMA = {"type": "struct", "optional": False, "name": "dbserver1.inventory.customers.Envelope", "fields": [
    *({"type": "struct", "optional": True, "field": part, "name": "dbserver1.inventory.customers.Value",
       "fields": [{"type": "int32", "optional": False, "field": "id"},
                  *({"type": "string", "optional": False, "field": f} for f in ("first_name", "last_name", "email"))]}
      for part in ("before", "after")),
    {"type": "string", "optional": False, "field": "op"}, {"type": "int64", "optional": True, "field": "ts_ms"}]}


def dbz_event(op: str, before: dict | None, after: dict | None, schema: dict | None = None) -> dict:
    payload = {"before": before, "after": after, "op": op, "ts_ms": 1661327688868,
               "source": {"version": "1.9.5.Final", "connector": "mysql", "db": "inventory", "table": "customers"}}
    return payload if schema is None else {"schema": schema, "payload": payload}


def test_risingwaves_debezium_events_give_risingwaves_answers(session, kafka):
    """RisingWave's kafka.slt: tables s8 (with the schema) and s8_no_schema_field (without) hold
    1001-1005 with Anne1 and add2; dbz_ignore_case_json matches upper-case fields to its columns."""
    with_schema, without = Topic(kafka.bootstrap, 1), Topic(kafka.bootstrap, 1)
    for op, before, after in DEBEZIUM_LOG:
        key = {"id": (after or before)["id"]}
        with_schema.produce(dbz_event(op, before, after, MYSQL_SCHEMA), 0, key=key)
        without.produce(dbz_event(op, before, after), 0, key=key)
        if op == "d":  # Debezium's tombstone after a delete
            with_schema.produce(None, 0, key=key)
            without.produce(None, 0, key=key)
    lineitem = Topic(kafka.bootstrap, 1)
    for key, line in [(56165, 1), (56166, 1), (56166, 2)]:
        lineitem.produce({"payload": dbz_event("r", None, {"L_ORDERKEY": key, "L_LINENUMBER": line, "L_QUANTITY": 39.0,
                                                           "L_SHIPDATE": "1992-06-22", "L_COMMENT": "s."})}, 0)
    mess_key = Topic(kafka.bootstrap, 1)  # debezium_mess_key.1: keys that are not JSON, ignored
    for order, op in [(1, "r"), (2, "r"), (3, "r"), (1, "u")]:
        mess_key.produce(dbz_event(op, None, {"order_id": order, "order_date": 1558430840000 + order}), 0,
                         key=b"****")
    for t in (with_schema, without, lineitem, mess_key):
        t.flush()
    session.sql(f"CREATE TABLE s8 ({CUSTOMERS}) WITH ({with_schema.options()}) FORMAT DEBEZIUM ENCODE JSON")
    session.sql(f"CREATE TABLE s8_no_schema_field ({CUSTOMERS}) WITH ({without.options()}) "
                "FORMAT DEBEZIUM ENCODE JSON")
    session.sql("CREATE TABLE dbz_ignore_case_json (L_ORDERKEY BIGINT, L_LINENUMBER BIGINT, L_QUANTITY DECIMAL, "
                "L_SHIPDATE DATE, L_COMMENT VARCHAR, PRIMARY KEY (L_ORDERKEY, L_LINENUMBER)) "
                f"WITH ({lineitem.options()}) FORMAT DEBEZIUM ENCODE JSON")
    session.sql(f"CREATE TABLE debezium_ignore_key (order_id int PRIMARY KEY) WITH ({mess_key.options()}) "
                "FORMAT DEBEZIUM ENCODE JSON (ignore_key = 'true')")
    session.flush()
    assert session.sql("SELECT count(order_id) AS n FROM debezium_ignore_key").collect()[0].n == 3
    expected = [(1001, "Sally", "Thomas", "sally.thomas@acme.com"), (1002, "George", "Bailey", "gbailey@foobar.com"),
                (1003, "Edward", "Walker", "ed@walker.com"), (1004, "Anne1", "Kretchmar", "annek@noanswer.org"),
                (1005, "add", "add2", "add")]
    for table in ("s8", "s8_no_schema_field"):
        got = session.sql(f"SELECT id, first_name, last_name, email FROM {table} ORDER BY id").collect()
        assert [tuple(r) for r in got] == expected, table
    got = session.sql("SELECT L_ORDERKEY, L_LINENUMBER, L_SHIPDATE FROM dbz_ignore_case_json "
                      "ORDER BY L_ORDERKEY, L_LINENUMBER").collect()
    assert [tuple(r) for r in got] == [(56165, 1, dt.date(1992, 6, 22)), (56166, 1, dt.date(1992, 6, 22)),
                                       (56166, 2, dt.date(1992, 6, 22))]
    assert [r.bad_records for r in session.sql("SHOW SOURCES").collect()] == [0, 0, 0, 0]


# The oracle test's table: `ts` in microseconds (Debezium's MicroTimestamp), `amount` as Debezium's
# variable-scale decimal or as text, some events with the schema, some without.
DDL = "id int, name varchar, amount decimal(10,2), ts timestamp, PRIMARY KEY (id)"
DUCK_DDL = "id INTEGER, name VARCHAR, amount DECIMAL(10,2), ts TIMESTAMP"
FIELDS = [{"type": "int32", "field": "id"}, {"type": "string", "field": "name"},
          {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "field": "amount"},
          {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "ts"}]
SCHEMA = {"type": "struct", "fields": [{"type": "struct", "optional": True, "field": p, "fields": FIELDS}
                                       for p in ("before", "after")] + [{"type": "string", "field": "op"}]}
MVS = {
    "per_name": "SELECT name, count(*) AS n, sum(amount) AS total, max(ts) AS last FROM dbz GROUP BY name",
    "big": "SELECT id, name, amount FROM dbz WHERE amount > 50",
}
LATE_MV = ("everything", "SELECT count(*) AS n, sum(amount) AS total, min(ts) AS first FROM dbz")


def encoded_row(i: int, version: int) -> dict:
    cents = (i * 731 + version * 97) % 10_000
    micros = 1_700_000_000_000_000 + i * 1_000_003 + version
    amount = ({"scale": 2, "value": base64.b64encode(cents.to_bytes(3, "big", signed=True)).decode()}
              if (i + version) % 2 else f"{cents / 100:.2f}")
    return {"id": i, "name": f"n{(i + version) % 4}", "amount": amount, "ts": micros}


def decoded(row: dict) -> tuple:
    """The oracle's own reading of `encoded_row`'s encodings."""
    amount = row["amount"]
    if isinstance(amount, dict):
        amount = Decimal(int.from_bytes(base64.b64decode(amount["value"]), "big", signed=True)).scaleb(-2)
    return (row["id"], row["name"], Decimal(amount), _EPOCH + dt.timedelta(microseconds=row["ts"]))


def replay(msgs: list[Message]) -> tuple[list[tuple], list[Message]]:
    """The table's rows after `msgs` in order (a key's events are all on its partition), and the
    messages that are not row changes (the bad records)."""
    state: dict[int, tuple] = {}
    bad = []
    for m in msgs:
        if m.value is None:
            continue
        try:
            event = json.loads(m.value)
        except ValueError:
            bad.append(m)
            continue
        event = event.get("payload", event) if isinstance(event, dict) and "op" not in event else event
        op = event.get("op") if isinstance(event, dict) else None
        if op in ("c", "r", "u"):
            try:
                state[event["after"]["id"]] = decoded(event["after"])
            except (ArithmeticError, ValueError, KeyError, TypeError):
                bad.append(m)
        elif op == "d":
            state.pop((event.get("before") or json.loads(m.key))["id"], None)
        else:
            bad.append(m)
    return list(state.values()), bad


def produce_round(topic: Topic, r: int, live: dict[int, int]) -> None:
    """Creates, updates and deletes (a delete followed by its tombstone) over 24 keys, with the
    schema or without, by key onto 3 partitions; a few messages that are no row change."""
    for j in range(30):
        i = (j * 7 + r * 5) % 24
        p, key = i % 3, {"id": i}
        schema = SCHEMA if (i + r) % 3 == 0 else None
        if i in live and (j + r) % 5 == 0:
            before = encoded_row(i, live.pop(i))
            topic.produce(dbz_event("d", before if (i + r) % 2 else None, None, schema), p, key=key)
            topic.produce(None, p, key=key)
        else:
            version = live.get(i, -1) + 1
            before = encoded_row(i, version - 1) if i in live else None
            topic.produce(dbz_event("u" if i in live else "c", before, encoded_row(i, version), schema), p, key=key)
            live[i] = version
    if r == 1:
        topic.produce(b"{not json", 0)
        topic.produce({"payload": {"status": "BEGIN", "id": "571:53195829"}}, 1)
        topic.produce(dbz_event("c", None, {"id": 1, "name": "x", "amount": "lots", "ts": 0}), 1, key={"id": 1})
    topic.flush()


@pytest.mark.parametrize("reader", ["driver", "workers"])
def test_a_debezium_table_and_its_mvs_equal_the_oracle_at_every_epoch(session, kafka, monkeypatch, reader):
    """Either reader: the driver decodes a small range itself, Spark's Python workers a large one."""
    if reader == "workers":
        monkeypatch.setattr(policy, "KAFKA_DRIVER_ROWS", 0)
    topic = Topic(kafka.bootstrap, 3)
    session.sql(f"CREATE TABLE dbz ({DDL}) WITH ({topic.options(**{'max.rows.per.epoch': '40'})}) "
                "FORMAT DEBEZIUM ENCODE JSON")
    for name, sql in MVS.items():
        session.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    live: dict[int, int] = {}
    epochs, late_from = [], None
    for r in range(4):
        produce_round(topic, r, live)
        epochs += [session.flush(), session.flush()]
        if r == 1:
            session.sql(f"CREATE MATERIALIZED VIEW {LATE_MV[0]} AS {LATE_MV[1]}")  # a snapshot backfill mid-stream
            late_from = session.flush()
            epochs.append(late_from)
    ends = {p: 1 + max(m.offset for m in topic.messages if m.partition == p) for p in range(3)}
    while offsets_at(session, "dbz", epochs[-1]) != ends:
        epochs.append(session.flush())
    for epoch in sorted(set(epochs)):
        rows, _ = replay(read_by(topic, offsets_at(session, "dbz", epoch)))
        mvs = {**MVS, **({LATE_MV[0]: LATE_MV[1]} if epoch >= late_from else {})}
        check_epoch(session, epoch, {"dbz": (DUCK_DDL, rows)}, mvs)
    rows, bad = replay(read_by(topic, ends))
    got = sorted(tuple(r) for r in session.sql("SELECT id, name, amount, ts FROM dbz").collect())
    assert got == sorted(rows)
    errors = session.sql("SHOW SOURCE ERRORS FROM dbz").collect()
    assert sorted((r.partition, r.offset) for r in errors) == sorted((m.partition, m.offset) for m in bad)
    reasons = sorted(r.error for r in errors)
    assert any("not valid JSON" in e for e in reasons) and any("transaction metadata" in e for e in reasons)
    assert any(e.startswith("column amount") for e in reasons), reasons
    assert [r.bad_records for r in session.sql("SHOW SOURCES").collect()] == [3]


def test_a_debezium_create_that_cannot_work_says_why(session, kafka):
    topic = Topic(kafka.bootstrap, 1)
    with pytest.raises(SqlError, match="FORMAT DEBEZIUM needs a PRIMARY KEY"):
        session.sql(f"CREATE TABLE bad (id int) WITH ({topic.options()}) FORMAT DEBEZIUM ENCODE JSON")
    with pytest.raises(SqlError, match="DEBEZIUM"):
        session.sql(f"CREATE SOURCE bad (id int) WITH ({topic.options()}) FORMAT DEBEZIUM ENCODE JSON")
    with pytest.raises(SqlError, match="ignore_key is an option of FORMAT DEBEZIUM"):
        session.sql(f"CREATE TABLE bad (id int PRIMARY KEY) WITH ({topic.options()}) "
                    "FORMAT UPSERT ENCODE JSON (ignore_key = 'true')")
    with pytest.raises(SqlError, match="format.ignore_key must be"):
        session.sql(f"CREATE TABLE bad (id int PRIMARY KEY) WITH ({topic.options()}) "
                    "FORMAT DEBEZIUM ENCODE JSON (ignore_key = 'sometimes')")
    with pytest.raises(SqlError, match="format.timestamptz.handling.mode is not allowed"):
        session.sql(f"CREATE TABLE bad (id int PRIMARY KEY) WITH ({topic.options()}) "
                    "FORMAT DEBEZIUM ENCODE JSON (timestamptz.handling.mode = 'milli')")
    with pytest.raises(SqlError, match="FORMAT UPSERT or FORMAT DEBEZIUM"):
        session.sql(f"CREATE TABLE bad (id int PRIMARY KEY) WITH ({topic.options()}) FORMAT PLAIN ENCODE JSON")
    assert session.catalog.relation("bad") is None


def test_a_debezium_sinks_topic_read_back_by_a_debezium_table_equals_the_mv(session, kafka):
    """sparkwave's own Debezium sink (c, u and d events, timestamps in ISO 8601, decimals as text,
    bytea in base64) read back by a Debezium table: the table equals the MV that the sink delivered."""
    topic = Topic(kafka.bootstrap, 1)
    session.sql("CREATE TABLE t (k int PRIMARY KEY, g int, amount decimal(12,2), at timestamptz, b bytea)")
    mv = ("SELECT g, count(*) AS n, sum(amount) AS total, max(at) AS last, min(b) AS first_b FROM t GROUP BY g")
    session.sql(f"CREATE MATERIALIZED VIEW agg AS {mv}")
    session.sql(f"CREATE SINK kd FROM agg WITH (connector = 'kafka', properties.bootstrap.server = "
                f"'{kafka.bootstrap}', topic = '{topic.name}') FORMAT DEBEZIUM ENCODE JSON")
    session.sql(f"CREATE TABLE back (g int PRIMARY KEY, n bigint, total decimal(22,2), last timestamptz, "
                f"first_b bytea) WITH ({topic.options()}) FORMAT DEBEZIUM ENCODE JSON")
    for r in range(2):
        session.sql("INSERT INTO t VALUES " + ", ".join(
            f"({k}, {(k + r) % 5}, {k * 1.25 + r}, TIMESTAMPTZ '2024-01-0{1 + r} 10:00:{k % 60:02d}+00', "
            f"'\\x{k:04x}')" for k in range(r * 7, r * 7 + 20)))
        session.sql(f"DELETE FROM t WHERE k % 6 = {r}")
        session.flush()
    session.sql("DELETE FROM t WHERE g = 4")  # a group gone: a 'd' event
    epoch = session.flush()
    session.sinks.wait_until("kd", epoch, 120.0)  # then its messages are all in the topic
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "check"})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic.name, 0), timeout=10)[1]
    finally:
        consumer.close()
    last = session.flush()
    while offsets_at(session, "back", last).get(0, 0) < end:
        last = session.flush()
    expected = sorted(tuple(r) for r in session.table("agg", as_of=epoch).collect())
    assert len(expected) == 4 and sorted(tuple(r) for r in session.table("back").collect()) == expected
    assert [r.bad_records for r in session.sql("SHOW SOURCES").collect()] == [0]
