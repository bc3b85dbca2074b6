"""Topics on the test broker, with every produced message remembered (partition, offset, key,
value), and the oracle of a Kafka relation: what it holds at an epoch is decided by the offsets
that epoch committed, and DuckDB evaluates the MVs from scratch on exactly those messages."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.oracle import connect, duckdb_sql, multiset, rows_of, sql_literal

QUIET = logging.getLogger("tests.kafka.client")  # the client's reconnect chatter, off stderr


@dataclass
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class Topic:
    bootstrap: str
    partitions: int
    name: str = field(default_factory=lambda: f"t_{uuid.uuid4().hex[:10]}")
    messages: list[Message] = field(default_factory=list)
    max_bytes: int | None = None  # the largest message the topic and its producer take (None: the broker's)

    def __post_init__(self) -> None:
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": QUIET})
        config = {} if self.max_bytes is None else {"max.message.bytes": str(self.max_bytes)}
        for f in self.admin.create_topics([NewTopic(self.name, num_partitions=self.partitions,
                                                    replication_factor=1, config=config)]).values():
            f.result()
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 1, "logger": QUIET,
                                  **({} if self.max_bytes is None else {"message.max.bytes": self.max_bytes})})

    def add_partitions(self, total: int) -> None:
        for f in self.admin.create_partitions([NewPartitions(self.name, total)]).values():
            f.result()
        self.partitions = total
        self.producer.flush()
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 1, "logger": QUIET})

    def produce(self, value: dict | bytes | None, partition: int, key: dict | int | bytes | None = None) -> None:
        v = json.dumps(value).encode() if isinstance(value, dict) else value
        k = key if isinstance(key, bytes) or key is None else json.dumps(key).encode()

        def done(err, msg) -> None:
            assert err is None, err
            self.messages.append(Message(msg.partition(), msg.offset(), k, v))
        self.producer.produce(self.name, value=v, key=k, partition=partition, on_delivery=done)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def options(self, **extra: str) -> str:
        opts = {"connector": "kafka", "topic": self.name, "properties.bootstrap.server": self.bootstrap, **extra}
        return ", ".join(f"{k} = '{v}'" for k, v in opts.items())


def offsets_at(session, relation: str, epoch: int) -> dict[int, int]:
    """The end offset (exclusive) of each partition that `relation` had read by `epoch`."""
    ends: dict[int, int] = {}
    for e, ranges in session.catalog.source_ranges(relation):
        if e > epoch:
            break
        for split, (_, end) in ranges.items():
            ends[int(split)] = end
    return ends


def read_by(topic: Topic, ends: dict[int, int]) -> list[Message]:
    return sorted((m for m in topic.messages if m.offset < ends.get(m.partition, 0)),
                  key=lambda m: (m.partition, m.offset))


def plain_rows(msgs: list[Message], columns: list[str], good=lambda obj: True) -> list[tuple]:
    """Rows of the good messages (a JSON object that `good` accepts), with partition and offset."""
    out = []
    for m in msgs:
        try:
            obj = json.loads(m.value) if m.value is not None else None
        except ValueError:
            continue
        if isinstance(obj, dict) and good(obj):
            out.append((*[obj.get(c) for c in columns], m.partition, m.offset))
    return out


def upsert_rows(msgs: list[Message], columns: list[str], key: str) -> list[tuple]:
    state: dict = {}
    for m in msgs:
        k = json.loads(m.key)
        k = k[key] if isinstance(k, dict) else k
        if m.value is None:
            state.pop(k, None)
        else:
            obj = json.loads(m.value)
            state[k] = tuple(obj.get(c) for c in columns)
    return list(state.values())


def check_epoch(session, epoch: int, tables: dict[str, tuple[str, list[tuple]]], mvs: dict[str, str]) -> None:
    """Every MV of `mvs` at `epoch` equals DuckDB's evaluation over `tables` {name: (DuckDB column
    list, rows)}: the exact multiset."""
    db = connect()
    for name, (ddl, rows) in tables.items():
        db.execute(f"CREATE TABLE {name} ({ddl})")
        if rows:
            db.execute(f"INSERT INTO {name} VALUES " + ", ".join(
                "(" + ", ".join(sql_literal(v) for v in r) + ")" for r in rows))
    for name, sql in mvs.items():
        expected = multiset(db.execute(duckdb_sql(sql, db)).fetchall())
        got = multiset(rows_of(session.table(name, as_of=epoch)))
        assert got == expected, f"{name} at epoch {epoch}: missing {expected - got}, extra {got - expected}"


# The events most Kafka tests use: `ev (id, name, price)` with partition and offset included.
EV_DDL = "id INTEGER, name VARCHAR, price DOUBLE, p INTEGER, o BIGINT"
EV_COLS = ["id", "name", "price"]


def event(i: int) -> dict:
    return {"id": i, "name": f"n{i % 7}", "price": (i * 37) % 100 + 0.5}


def good(obj: dict) -> bool:
    return isinstance(obj.get("id"), int) and not isinstance(obj.get("id"), bool)


def produce_events(topic: Topic, lo: int, hi: int, bad: bytes | None = None, every: int = 53) -> None:
    """Events `lo..hi-1` round-robin over the partitions; with `bad`, every `every`-th is that payload."""
    for i in range(lo, hi):
        topic.produce(event(i) if bad is None or i % every != 7 else bad, i % topic.partitions)
    topic.flush()


def ev_sql(topic: Topic, kind: str = "TABLE", **options: str) -> str:
    return (f"CREATE {kind} ev (id int, name varchar, price double) INCLUDE partition AS p INCLUDE offset AS o "
            f"WITH ({topic.options(**options)}) FORMAT PLAIN ENCODE JSON")
