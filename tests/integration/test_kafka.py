"""Kafka tables on a real Kafka-protocol broker (noida-db, started by the test setup): every MV
equals DuckDB over exactly the messages its epoch's committed offsets cover, bad records are set
aside with their partition and offset, and a broker that goes away stops only its source."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import sparkwave
import sparkwave.connectors.kafka as kafka_connector
from sparkwave.connectors.kafka_reader import read_range
from sparkwave.core import policy
from sparkwave.core.errors import SqlError
from sparkwave.devtools.kafka_broker import Broker, free_port
from tests.kafka_util import (
    EV_COLS,
    EV_DDL,
    Topic,
    check_epoch,
    ev_sql,
    event,
    good,
    offsets_at,
    plain_rows,
    produce_events,
    read_by,
    upsert_rows,
)

ROOT = Path(__file__).resolve().parents[2]
MVS = {
    "cheap": "SELECT id, name, price FROM ev WHERE price < 50",
    "per_partition": "SELECT p, count(*) AS n, sum(price) AS total, max(o) AS last FROM ev GROUP BY p",
    "named": "SELECT ev.id, d.label FROM ev JOIN d ON ev.p = d.k",
}


@pytest.mark.parametrize("reader", ["driver", "workers"])
def test_a_kafka_table_and_its_mvs_equal_the_oracle_at_every_epoch(session, kafka, monkeypatch, reader):
    """Either reader: the driver reads a small range itself, Spark's Python workers a large one."""
    if reader == "workers":
        monkeypatch.setattr(policy, "KAFKA_DRIVER_ROWS", 0)
    on_driver = []
    monkeypatch.setattr(kafka_connector, "read_range", lambda *a: on_driver.append(a) or read_range(*a))
    topic = Topic(kafka.bootstrap, 3)
    produce_events(topic, 0, 30)
    session.sql(ev_sql(topic, **{"max.rows.per.epoch": "45"}))
    session.sql("CREATE TABLE d (k int PRIMARY KEY, label varchar)")
    session.sql("INSERT INTO d VALUES (0, 'zero'), (1, 'one'), (3, 'three')")
    for name, sql in MVS.items():
        session.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    epochs = [session.flush()]
    for r in range(4):
        for i in range(100 * r, 100 * r + 70):
            topic.produce(event(i + 1000), i % 3)
        if r == 1:  # bad records interleaved with good ones
            topic.produce(b"{not json", 1)
            topic.produce({"id": "seven", "name": "x", "price": 1.0}, 2)
            topic.produce(b"[1, 2]", 0)
        topic.flush()
        epochs += [session.flush(), session.flush()]
    while offsets_at(session, "ev", epochs[-1]) != {p: 1 + max(m.offset for m in topic.messages if m.partition == p)
                                                   for p in range(3)}:
        epochs.append(session.flush())
    sizes = [sum(end - start for start, end in ranges.values()) for _, ranges in session.catalog.source_ranges("ev")]
    assert max(sizes) <= 45 and len(sizes) >= 8, f"an epoch must read at most max.rows.per.epoch: {sizes}"
    for epoch in sorted(set(epochs)):
        rows = plain_rows(read_by(topic, offsets_at(session, "ev", epoch)), EV_COLS, good)
        check_epoch(session, epoch, {"ev": (EV_DDL, rows), "d": ("k INTEGER, label VARCHAR",
                                                                [(0, "zero"), (1, "one"), (3, "three")])}, MVS)
    errors = session.sql("SHOW SOURCE ERRORS FROM ev").collect()
    assert sorted((r.partition, r.offset, r.raw) for r in errors) == sorted(
        (m.partition, m.offset, m.value.decode()) for m in topic.messages
        if m.value in (b"{not json", b"[1, 2]") or b'"seven"' in m.value)
    reasons = {r.raw: r.error for r in errors}
    assert "not valid JSON" in reasons["{not json"]
    assert "column id" in reasons['{"id": "seven", "name": "x", "price": 1.0}']
    src = session.sql("SHOW SOURCES").collect()
    assert [(r.name, r.splits, r.bad_records, r.status) for r in src] == [("ev", 3, 3, None)]
    assert bool(on_driver) == (reader == "driver"), "the ranges were read by the other reader"


def test_an_upsert_table_applies_updates_and_tombstones_by_key(session, kafka):
    topic = Topic(kafka.bootstrap, 2)
    session.sql(f"CREATE TABLE kv (k int PRIMARY KEY, v int, tag varchar) INCLUDE key AS raw_key "
                f"INCLUDE timestamp WITH ({topic.options()}) FORMAT UPSERT ENCODE JSON")
    session.sql("CREATE MATERIALIZED VIEW tags AS SELECT tag, count(*) AS n, sum(v) AS total FROM kv GROUP BY tag")
    session.sql("CREATE MATERIALIZED VIEW kv_cols AS SELECT k, v, tag FROM kv")
    epochs = []
    for r in range(4):
        for i in range(12):
            k = (i * 5 + r) % 9
            if (i + r) % 4 == 3:
                topic.produce(None, k % 2, key={"k": k})  # a tombstone deletes the key
            else:
                topic.produce({"k": k, "v": i * r, "tag": f"t{(i + k) % 3}"}, k % 2, key={"k": k})
        topic.flush()
        epochs.append(session.flush())
    for epoch in epochs:
        rows = upsert_rows(read_by(topic, offsets_at(session, "kv", epoch)), ["k", "v", "tag"], "k")
        check_epoch(session, epoch, {"kv": ("k INTEGER, v INTEGER, tag VARCHAR", rows)},
                    {"kv_cols": "SELECT k, v, tag FROM kv",
                     "tags": "SELECT tag, count(*) AS n, sum(v) AS total FROM kv GROUP BY tag"})
    meta = session.sql("SELECT k, raw_key, _rw_kafka_timestamp AS ts FROM kv").collect()
    assert meta and all(r.raw_key == json.dumps({"k": r.k}) and r.ts is not None for r in meta)


def test_new_partitions_are_read_from_their_first_offset_and_latest_skips_history(session, kafka):
    topic = Topic(kafka.bootstrap, 2)
    produce_events(topic, 0, 10)
    session.sql(ev_sql(topic, **{"scan.startup.mode": "latest"}))
    session.sql(f"CREATE MATERIALIZED VIEW {'per_partition'} AS {MVS['per_partition']}")
    topic.add_partitions(3)
    for i in range(10, 40):
        topic.produce(event(i), i % 3)
    topic.flush()
    epoch = session.flush()
    ids = sorted(r.id for r in session.table("ev").collect())
    assert ids == list(range(10, 40)), "latest: the history before CREATE is skipped; partition 2 read from 0"
    rows = [r for r in plain_rows(read_by(topic, offsets_at(session, "ev", epoch)), EV_COLS) if r[0] >= 10]
    check_epoch(session, epoch, {"ev": (EV_DDL, rows)}, {"per_partition": MVS["per_partition"]})


def test_a_kafka_create_that_cannot_work_says_why_and_creates_nothing(session, kafka):
    topic = Topic(kafka.bootstrap, 1)
    cases = [
        (f"WITH (connector = 'kafka', topic = '{topic.name}', properties.bootstrap.server = '127.0.0.1:{free_port()}') "
         "FORMAT PLAIN ENCODE JSON", "cannot be reached"),
        (f"WITH ({topic.options(topic='no_such_topic')}) FORMAT PLAIN ENCODE JSON", "no_such_topic"),
        (f"WITH ({topic.options(**{'scan.startup.mode': 'sometime'})}) FORMAT PLAIN ENCODE JSON", "scan.startup.mode"),
        (f"WITH ({topic.options(**{'propertie.x': '1'})}) FORMAT PLAIN ENCODE JSON", "propertie.x"),
        (f"WITH ({topic.options()}) FORMAT UPSERT ENCODE JSON", "PRIMARY KEY"),
        (f"WITH ({topic.options()}) FORMAT PLAIN ENCODE AVRO", "ENCODE AVRO"),
    ]
    for clause, reason in cases:
        with pytest.raises(SqlError, match=reason):
            session.sql(f"CREATE TABLE bad (id int) {clause}")
        assert session.catalog.relation("bad") is None
    with pytest.raises(SqlError, match="_rw_kafka_partition"):
        session.sql(f"CREATE TABLE bad (id int, _rw_kafka_partition int) INCLUDE partition WITH ({topic.options()}) "
                    "FORMAT PLAIN ENCODE JSON")


def test_a_broker_that_goes_away_stops_only_its_source_which_resumes_exactly(spark, tmp_path):
    broker = Broker(tmp_path / "broker").start()
    try:
        topic = Topic(broker.bootstrap, 2)
        with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
            s.sql(ev_sql(topic))
            s.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
            s.sql(f"CREATE MATERIALIZED VIEW per_partition AS {MVS['per_partition']}")
            for i in range(20):
                topic.produce(event(i), i % 2)
            topic.flush()
            s.flush()
            broker.stop()
            s.sql("INSERT INTO t VALUES (1, 10)")
            s.flush()  # the pipeline goes on without the source
            assert [r.v for r in s.table("t").collect()] == [10]
            status = s.sql("SHOW SOURCES").collect()[0].status
            assert status is not None and "cannot be reached" in status, status
            assert next(j for j in s.jobs() if j.name == "ev").error == status  # SHOW JOBS says it too
            broker.start()
            for i in range(20, 50):
                topic.produce(event(i), i % 2)
            topic.flush()
            epochs = [s.flush()]  # until the source's retry comes (a backoff of 2 s) and it has read all
            while sum(offsets_at(s, "ev", epochs[-1]).values()) < 50:
                epochs.append(s.flush())
            assert s.sql("SHOW SOURCES").collect()[0].status is None
            assert next(j for j in s.jobs() if j.name == "ev").error is None
            read = {e for e, _ in s.catalog.source_ranges("ev")}
            for epoch in sorted({e for e in epochs if e in read} | {epochs[-1]}):
                rows = plain_rows(read_by(topic, offsets_at(s, "ev", epoch)), EV_COLS)
                check_epoch(s, epoch, {"ev": (EV_DDL, rows)}, {"per_partition": MVS["per_partition"]})
    finally:
        broker.stop()


def test_a_json_decoder_takes_what_fits_and_names_what_does_not():
    from sparkwave.connectors.json_decode import BadRecord, JsonDecoder

    d = JsonDecoder([("a", "int"), ("b", "decimal(5,2)"), ("c", "timestamptz"), ("d", "boolean"), ("e", "varchar")])
    assert d.decode(json.dumps({"A": 3.0, "b": "12.345", "c": "2025-01-01T01:00:00+01:00", "d": True}))[:4] == [
        3, __import__("decimal").Decimal("12.35"), __import__("datetime").datetime(
            2025, 1, 1, tzinfo=__import__("datetime").UTC), True]
    for bad, reason in [({"a": 1.5}, "column a"), ({"a": 2 ** 31}, "out of range"), ({"b": 12345.0}, "decimal"),
                        ({"d": 1}, "true or false"), ({"e": 5}, "string"), ({"c": "noon"}, "ISO 8601")]:
        with pytest.raises(BadRecord, match=reason):
            d.decode(json.dumps(bad))


def test_an_epoch_takes_its_whole_budget_over_partitions_of_any_backlog():
    split = kafka_connector.split_budget
    assert split(1_000_000, {0: 333_334, 1: 333_333, 2: 333_333}) == {0: 333_334, 1: 333_333, 2: 333_333}
    assert split(90, {0: 10, 1: 100, 2: 100}) == {0: 10, 1: 40, 2: 40}  # a short partition's share goes on
    assert split(91, {0: 0, 1: 100, 2: 7}) == {0: 0, 1: 84, 2: 7}
    assert split(45, {0: 5, 1: 6, 2: 7}) == {0: 5, 1: 6, 2: 7}  # less than the budget: all of it
    assert split(2, {0: 9, 1: 9, 2: 9}) == {0: 1, 1: 1, 2: 0}  # never more than the budget
    assert split(10, {}) == {}
    assert split(200_000, {0: 10**6, 1: 10**6, 2: 10**6}) == {0: 66_667, 1: 66_667, 2: 66_666}
    assert split(90, {0: 10, 1: 35, 2: 100}) == {0: 10, 1: 35, 2: 45}  # spread again as partitions run out
    assert split(2, {0: 9, 1: 0, 2: 0}) == {0: 2, 1: 0, 2: 0}
    # What does not divide evenly goes round the partitions as the source reads on.
    drained = {0: 0, 1: 0, 2: 0}
    for _ in range(3):
        for p, n in split(4, {p: 100 - n for p, n in drained.items()}, turn=sum(drained.values())).items():
            drained[p] += n
    assert drained == {0: 4, 1: 4, 2: 4}
    served = [split(1, {0: 9, 1: 9, 2: 9}, turn=t) for t in range(3)]  # a rate limit's row per epoch
    assert served == [{0: 1, 1: 0, 2: 0}, {0: 0, 1: 1, 2: 0}, {0: 0, 1: 0, 2: 1}]


@pytest.mark.parametrize("crash_at", [
    pytest.param("mid_execute:3", marks=pytest.mark.chaos), pytest.param("mid_commit:3", marks=pytest.mark.chaos),
    "before_catalog_commit:3",  # executed, not committed: replayed from its plan, its bad records set aside again
])
def test_a_sigkill_mid_epoch_replays_the_same_offsets(spark, kafka, tmp_path, crash_at):
    """Killed during an epoch that read from Kafka, the restarted pipeline reads the same ranges:
    no message lost or doubled in the table, the MV or the bad records."""
    from tests import kafka_crash_child as child

    topic = Topic(kafka.bootstrap, 2)
    for i in range(150):
        topic.produce(event(i) if i % 37 else b"{bad", i % 2)
    topic.flush()
    wh = tmp_path / "wh"
    env = {**os.environ, "SPARKWAVE_CRASH_AT": crash_at}
    proc = subprocess.run([sys.executable, "-m", "tests.kafka_crash_child", str(wh), kafka.bootstrap, topic.name],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        epochs = [s.flush()]
        while sum(offsets_at(s, "ev", epochs[-1]).values()) < 150:
            epochs.append(s.flush())
        assert len(s.catalog.source_ranges("ev")) >= 150 // child.PER_EPOCH
        for epoch, _ in s.catalog.source_ranges("ev"):
            rows = plain_rows(read_by(topic, offsets_at(s, "ev", epoch)), EV_COLS)
            check_epoch(s, epoch, {"ev": (EV_DDL, rows)}, {"per_partition": child.MV, "ev": "SELECT * FROM ev"})
        assert sorted((r.partition, r.offset) for r in s.sql("SHOW SOURCE ERRORS").collect()) == sorted(
            (m.partition, m.offset) for m in topic.messages if m.value == b"{bad")


def test_alter_source_rate_limit_pauses_and_releases_the_source(session, kafka):
    topic = Topic(kafka.bootstrap, 2)
    session.sql(f"CREATE TABLE ev (id int, name varchar, price double) WITH ({topic.options()}) "
                "FORMAT PLAIN ENCODE JSON")
    session.sql("CREATE TABLE t (k int PRIMARY KEY)")
    session.sql("ALTER SOURCE ev SET SOURCE_RATE_LIMIT = 0")
    for i in range(40):
        topic.produce(event(i), i % 2)
    topic.flush()
    session.sql("INSERT INTO t VALUES (1)")
    session.flush()
    assert session.table("ev").count() == 0 and session.table("t").count() == 1  # only the source waits
    assert session.sql("SHOW SOURCES").collect()[0].status == "paused (source_rate_limit = 0)"
    assert next(j for j in session.jobs() if j.name == "ev").error == "paused (source_rate_limit = 0)"
    session.sql("ALTER TABLE ev SET source_rate_limit TO DEFAULT")
    session.flush()
    assert sorted(r.id for r in session.table("ev").collect()) == list(range(40))
    assert next(j for j in session.jobs() if j.name == "ev").error is None  # the pause no longer said
    with pytest.raises(SqlError, match="not fed by a connector"):
        session.sql("ALTER SOURCE t SET SOURCE_RATE_LIMIT = 5")


def test_the_decoder_turns_any_failure_of_a_message_into_a_bad_record():
    from sparkwave.connectors.json_decode import BadRecord, JsonDecoder
    from sparkwave.connectors.kafka_reader import ERROR, ReadSpec, _Batch

    d = JsonDecoder([("n", "decimal(38,2)"), ("t", "timestamp")])
    assert str(d.decode(json.dumps({"n": "123456789012345678901234567890.125"}))[0]) == \
        "123456789012345678901234567890.13"  # 38 digits fit, beyond the default context's 28
    with pytest.raises(BadRecord, match="column t"):
        d.decode(json.dumps({"t": "0001-01-01T00:00:00+01:00"}))  # before year 1 in UTC
    with pytest.raises(BadRecord, match="nested deeper than 128 levels"):
        d.decode("[" * 100_000)

    class Msg:
        def __init__(self, offset: int, value: bytes) -> None:
            self.o, self.v = offset, value

        def offset(self) -> int:
            return self.o

        def value(self) -> bytes:
            return self.v

        def key(self) -> None:
            return None

        def timestamp(self) -> tuple[int, int]:
            return (1, 1_700_000_000_000)

    spec = ReadSpec("b", "t", {}, [("n", "decimal(38,2)"), ("_row_id", "bigint")], {"_row_id": "row_id"},
                    ["_row_id"], False)
    batch = _Batch(spec, 0)
    for i, v in enumerate([b'{"n": 1}', b"{" * 5000, b'{"n": 2}']):
        batch.add(Msg(i, v))
    out = batch.flush().to_pydict()
    assert [e is None for e in out[ERROR]] == [True, False, True] and out["_row_id"] == [0, 1, 2]


@pytest.mark.parametrize("big", [False, True], ids=["driver", "executors"])
def test_bad_records_beyond_the_kept_bound_are_counted(session, kafka, monkeypatch, big):
    """A schema that fits no message must not pour every payload into the catalog: an epoch keeps
    a bounded number per relation, and counts them all, on either path of the table's step."""
    import sparkwave.stream.bad_records as barrier

    monkeypatch.setattr(barrier, "MAX_BAD_RECORDS_KEPT", 3)
    session.sql(f"SET big_epoch_rows = {0 if big else 1000000}")
    topic = Topic(kafka.bootstrap, 1)
    for i in range(20):
        topic.produce(b"nope" if i < 8 else event(i), 0)
    topic.flush()
    session.sql(ev_sql(topic))
    session.flush()
    assert [r.offset for r in session.sql("SHOW SOURCE ERRORS FROM ev").collect()] == [0, 1, 2]
    assert session.sql("SHOW SOURCES").collect()[0].bad_records == 8
    assert sorted(r.id for r in session.table("ev").collect()) == list(range(8, 20))
    logs = session.rt.stored(session.rt.relation("ev")).log_path.glob("e*.parquet")
    writers = {pq.ParquetFile(f).metadata.created_by.split(" ")[0] for f in logs}
    assert writers == {"parquet-mr" if big else "parquet-cpp-arrow"}, writers  # who wrote the epoch's log
