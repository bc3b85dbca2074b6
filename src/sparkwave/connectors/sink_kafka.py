"""The Kafka sink (confluent-kafka): one JSON message per changed row, keyed by the sink's key.

- `FORMAT UPSERT ENCODE JSON`: value = the row, or null (a tombstone) when the key goes.
- `FORMAT PLAIN ENCODE JSON` (append-only): value = each inserted row.
- `FORMAT DEBEZIUM ENCODE JSON`: value = `{"before", "after", "op": "c" | "u" | "d"}`.

Every message carries the epoch in the header `sparkwave_epoch`. **Exactly once** where the broker
offers transactions: a delivery's messages and a marker of the sink's position (a message keyed by
the sink's id on the topic `sparkwave_sink_progress`) commit in one Kafka transaction, under a
transactional id of the sink's, so a restart fences and aborts what a crash left open and reads the
position back from the last committed marker; consumers that read with `isolation.level =
read_committed` (librdkafka's default) see each delivery once. A broker without transactions
gets **at least once**: a delivery is flushed and confirmed before the sink records its position,
so a crash in between re-sends it with the same epoch headers (a consumer that keeps the newest
epoch per key drops the repeats)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa

from sparkwave.connectors.kafka import BROKER_TIMEOUT_S, unreachable
from sparkwave.connectors.kafka_properties import PRODUCER, librdkafka
from sparkwave.connectors.kafka_reader import consumer_config
from sparkwave.connectors.options import Options, text
from sparkwave.connectors.sink import (
    APPEND_ONLY,
    DEBEZIUM,
    Position,
    SinkSpec,
    SinkTarget,
    deletes_and_upserts,
    json_value,
)
from sparkwave.core.chunk import Op
from sparkwave.core.crash import crash_point

log = logging.getLogger("sparkwave.sinks.kafka")

EPOCH_HEADER = "sparkwave_epoch"
PROGRESS_TOPIC = "sparkwave_sink_progress"
PROGRESS_WINDOW = 1000  # markers read at a time, from the newest back, to find the sink's last one
FLUSH_TIMEOUT_S = 60.0
OPTIONS = Options("kafka", text("topic")) + PRODUCER


class KafkaSink(SinkTarget):
    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        values = spec.check_options(OPTIONS)
        self.topic = spec.required("topic", "the topic written to")
        self.bootstrap = (spec.option("properties.bootstrap.server") or spec.option("properties.bootstrap.servers")
                          or "")
        if not self.bootstrap:
            raise spec.error("the Kafka sink needs properties.bootstrap.server = 'host:port'")
        self.properties = librdkafka(spec.options, values)
        self._producer: Any = None
        self.exactly_once = False  # decided by `check()`: whether the broker takes transactions

    def _config(self) -> dict[str, Any]:
        config = consumer_config(self.bootstrap, self.properties)
        for k in ("group.id", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
                  "enable.partition.eof"):
            config.pop(k, None)
        return {"linger.ms": 5, **config}

    def _client(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer
            self._producer = Producer(self._config())
        return self._producer

    def _transactional(self) -> bool:
        """Replace the client by a transactional producer of the sink's own transactional id (which
        fences an older one and aborts the transaction a crash left open); False if the broker does
        not take transactions."""
        from confluent_kafka import KafkaException, Producer
        producer = Producer({**self._config(), "transactional.id": f"sparkwave-{self.spec.sink_id}"})
        try:
            producer.init_transactions(BROKER_TIMEOUT_S * 10)
        except KafkaException as e:
            log.info("sink %s: the broker does not take transactions (%s): at least once", self.spec.name, e)
            return False
        if self._producer is not None:
            self._producer.flush(5.0)
        self._producer = producer
        return True

    def check(self) -> None:
        if (why := unreachable(self.bootstrap)) is not None:
            raise self.spec.error(f"Kafka broker {self.bootstrap} cannot be reached: {why}")
        try:  # all topics: a metadata request naming one may create it on a broker that auto-creates
            md = self._client().list_topics(timeout=BROKER_TIMEOUT_S)
        except Exception as e:
            raise self.spec.error(f"Kafka broker {self.bootstrap} cannot be reached: {e}") from None
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            reason = t.error.str() if t is not None and t.error is not None else "no partitions"
            raise self.spec.error(f"Kafka topic {self.topic!r} on {self.bootstrap} is not usable: {reason}")
        if PROGRESS_TOPIC not in md.topics:
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient(self._config())
            for f in admin.create_topics([NewTopic(PROGRESS_TOPIC, num_partitions=1, replication_factor=1)]).values():
                try:
                    f.result(BROKER_TIMEOUT_S * 10)
                except Exception as e:  # created meanwhile by another sink: fine
                    if "exist" not in str(e).lower():
                        raise self.spec.error(f"cannot create topic {PROGRESS_TOPIC!r} on {self.bootstrap}: {e}") \
                            from None
        self.exactly_once = self._transactional()

    def progress(self) -> Position | None:
        """The position in the sink's last committed marker, read from the newest markers back."""
        if not self.exactly_once:
            return None
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        consumer = Consumer({**consumer_config(self.bootstrap, self.properties), "group.id": "sparkwave-progress",
                             "isolation.level": "read_committed", "enable.partition.eof": True})
        try:
            low, end = consumer.get_watermark_offsets(TopicPartition(PROGRESS_TOPIC, 0), timeout=BROKER_TIMEOUT_S * 10)
            mine = self.spec.sink_id.encode()
            while end > low:
                start = max(low, end - PROGRESS_WINDOW)
                consumer.assign([TopicPartition(PROGRESS_TOPIC, 0, start)])
                found = None
                while True:
                    m: Any = consumer.poll(BROKER_TIMEOUT_S * 10)
                    if m is None:
                        raise self.spec.error(f"cannot read the sink's progress from topic {PROGRESS_TOPIC!r}")
                    if (err := m.error()) is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            break
                        raise self.spec.error(f"cannot read topic {PROGRESS_TOPIC!r}: {err}")
                    if m.offset() >= end:
                        break
                    if m.key() == mine:
                        found = json.loads(m.value())
                if found is not None:
                    return Position(int(found["epoch"]), int(found["vnode"]))
                end = start
            return None
        finally:
            consumer.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None

    def write(self, change: pa.Table, to: Position) -> None:
        if (why := unreachable(self.bootstrap)) is not None:  # the client would only queue the messages
            raise self.spec.error(f"Kafka broker {self.bootstrap} cannot be reached: {why}")
        if not self.exactly_once:
            self._send(change, to)
            return
        producer = self._client()
        producer.begin_transaction()
        try:
            self._send(change, to, flush=False)
            producer.produce(PROGRESS_TOPIC, key=self.spec.sink_id.encode(),
                             value=json.dumps({"sink": self.spec.name, "epoch": to.epoch, "vnode": to.vnode}).encode())
            crash_point("sink_before_target_commit")
            producer.commit_transaction(FLUSH_TIMEOUT_S)
        except BaseException:
            try:
                producer.abort_transaction(BROKER_TIMEOUT_S * 10)
            except Exception:  # the next `check()` fences it anyway
                log.debug("sink %s: abort failed", self.spec.name, exc_info=True)
            raise

    def _send(self, change: pa.Table, to: Position, flush: bool = True) -> None:
        producer = self._client()
        headers = [(EPOCH_HEADER, str(to.epoch).encode())]
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        for key, value in self._messages(change):
            while True:
                try:
                    producer.produce(self.topic, key=key, value=value, headers=headers, on_delivery=delivered)
                    break
                except BufferError:  # the client's queue is full: let it drain
                    producer.poll(0.1)
        left = producer.flush(FLUSH_TIMEOUT_S) if flush else 0
        if failed or left:
            raise self.spec.error(f"Kafka did not confirm {len(failed) + left} message(s) to topic {self.topic!r}"
                                  f"{': ' + failed[0] if failed else ''}")

    def _messages(self, change: pa.Table) -> list[tuple[bytes | None, bytes | None]]:
        names = [c.name for c in self.spec.columns]
        key = list(self.spec.key)

        def encode(obj: Any) -> bytes:
            return json.dumps(obj, separators=(",", ":")).encode()

        def key_of(row: dict[str, Any]) -> bytes | None:
            return encode({k: json_value(row[k]) for k in key}) if key else None

        gone, new = deletes_and_upserts(change, self.spec.mode)
        if self.spec.mode == APPEND_ONLY:
            return [(key_of(r), encode({n: json_value(r[n]) for n in names})) for r in new.select(names).to_pylist()]
        if self.spec.mode == DEBEZIUM:
            return self._debezium(change, names, key_of, encode)
        new_keys = {key_of(r) for r in new.select(key).to_pylist()}
        out: list[tuple[bytes | None, bytes | None]] = [
            (k, None) for r in gone.select(key).to_pylist() if (k := key_of(r)) not in new_keys]
        out += [(key_of(r), encode({n: json_value(r[n]) for n in names})) for r in new.select(names).to_pylist()]
        return out

    def _debezium(self, change: pa.Table, names: list[str], key_of: Any, encode: Any) -> list[tuple[Any, Any]]:
        """One event per key: an update's old and new rows (-U, +U of one key) become one 'u'."""
        rows = change.select(["_op", *names]).to_pylist()
        before: dict[Any, dict] = {}
        after: dict[Any, dict] = {}
        order: list[Any] = []
        for r in rows:
            k = key_of(r)
            if k not in before and k not in after:
                order.append(k)
            side = before if r["_op"] in (int(Op.DELETE), int(Op.UPDATE_DELETE)) else after
            side[k] = {n: json_value(r[n]) for n in names}
        out = []
        for k in order:
            b, a = before.get(k), after.get(k)
            op = "u" if b is not None and a is not None else "d" if b is not None else "c"
            out.append((k, encode({"before": b, "after": a, "op": op, "source": {"sink": self.spec.name}})))
        return out
