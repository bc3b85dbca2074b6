"""The Kafka sink (confluent-kafka): one JSON message per changed row, keyed by the sink's key.

- `FORMAT UPSERT ENCODE JSON`: value = the row, or null (a tombstone) when the key goes.
- `FORMAT PLAIN ENCODE JSON` (append-only): value = each inserted row.
- `FORMAT DEBEZIUM ENCODE JSON`: value = `{"before", "after", "op": "c" | "u" | "d"}`.

Every message carries the epoch in the header `sparkwave_epoch`. At least once: a delivery is
flushed and confirmed by the broker before the sink records its position, so a crash in between
re-sends that delivery (the same epoch headers: a consumer that keeps the highest epoch per key
drops the repeats). The broker's transactions would make it exactly once; the local broker the
tests use (noida-db) does not offer them."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sparkwave.connectors.kafka import BROKER_TIMEOUT_S, unreachable
from sparkwave.connectors.kafka_reader import consumer_config
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

EPOCH_HEADER = "sparkwave_epoch"
FLUSH_TIMEOUT_S = 60.0
KNOWN = {"topic", "properties.bootstrap.server", "properties.bootstrap.servers"}


class KafkaSink(SinkTarget):
    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        spec.check_options(KNOWN, ("properties.",))
        self.topic = spec.required("topic", "the topic written to")
        self.bootstrap = (spec.option("properties.bootstrap.server") or spec.option("properties.bootstrap.servers")
                          or "")
        if not self.bootstrap:
            raise spec.error("the Kafka sink needs properties.bootstrap.server = 'host:port'")
        self.properties = {k[len("properties."):]: v for k, v in spec.options.items()
                           if k.startswith("properties.") and not k.startswith("properties.bootstrap.")}
        self._producer: Any = None

    def _client(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer
            config = consumer_config(self.bootstrap, self.properties)
            for k in ("group.id", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
                      "enable.partition.eof"):
                config.pop(k, None)
            self._producer = Producer({**config, "linger.ms": 5, "enable.idempotence": False})
        return self._producer

    def check(self) -> None:
        if (why := unreachable(self.bootstrap)) is not None:
            raise self.spec.error(f"Kafka broker {self.bootstrap} cannot be reached: {why}")
        try:
            md = self._client().list_topics(self.topic, timeout=BROKER_TIMEOUT_S)
        except Exception as e:
            raise self.spec.error(f"Kafka broker {self.bootstrap} cannot be reached: {e}") from None
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            reason = t.error.str() if t is not None and t.error is not None else "no partitions"
            raise self.spec.error(f"Kafka topic {self.topic!r} on {self.bootstrap} is not usable: {reason}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None

    def write(self, change: pa.Table, to: Position) -> None:
        if (why := unreachable(self.bootstrap)) is not None:  # the client would only queue the messages
            raise self.spec.error(f"Kafka broker {self.bootstrap} cannot be reached: {why}")
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
        left = producer.flush(FLUSH_TIMEOUT_S)
        if failed or left:
            raise self.spec.error(f"Kafka did not confirm {len(failed) + left} message(s) to topic {self.topic!r}"
                                  f"{': ' + failed[0] if failed else ''}")

    def _messages(self, change: pa.Table) -> list[tuple[bytes | None, bytes | None]]:
        names = [c.name for c in self.spec.columns]
        key = list(self.spec.key)

        def encode(obj: Any) -> bytes:
            return json.dumps(obj, default=json_value, separators=(",", ":")).encode()

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
