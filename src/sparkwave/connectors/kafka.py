"""The Kafka connector, with RisingWave's options:

    CREATE TABLE t (...) [INCLUDE partition | offset | timestamp | key [AS name] ...]
      WITH (connector = 'kafka', topic = '...', properties.bootstrap.server = 'host:port',
            scan.startup.mode = 'earliest' | 'latest', scan.startup.timestamp.millis = '...',
            source_rate_limit = n, max.rows.per.epoch = n, properties.<librdkafka option> = '...')
      FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON [(ignore_key = 'true')]

FORMAT UPSERT and DEBEZIUM (`debezium.py`) need a PRIMARY KEY: their messages upsert and delete
rows by key. `ignore_key` (DEBEZIUM only, as in RisingWave) never reads the message key.

A split is a partition, an offset is Kafka's. The driver plans each epoch's range per partition
from the broker's watermarks (bounded, so a backlog is taken over several epochs); the ranges are
persisted with the epoch's plan and read by Spark tasks (`kafka_reader.py`), so a replay reads
the same messages. Partitions added to the topic are picked up at the next epoch, from their first
offset. A broker that cannot be reached makes the source skip epochs (the rest of the pipeline goes
on) and says why in `status`, until it is back."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import threading
import time
import weakref
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from sparkwave.connectors.base import ERROR, RAW, Connector, split_budget
from sparkwave.connectors.kafka_properties import CONSUMER, librdkafka
from sparkwave.connectors.kafka_reader import (
    FORMAT_NAME,
    SEQ_PARTITION_SHIFT,
    KafkaRangeSource,
    ReadSpec,
    consumer_config,
    read_range,
)
from sparkwave.connectors.options import Options, boolean, choice, integer, max_rows_per_epoch, rate_limit, text
from sparkwave.core import policy
from sparkwave.core.errors import SqlError
from sparkwave.core.local_frames import local_batches
from sparkwave.core.schema import Column, Schema, parse_type

log = logging.getLogger("sparkwave.kafka")

METADATA = {"partition": "int", "offset": "bigint", "timestamp": "timestamptz", "key": "varchar"}
TASK_OFFSETS = 250_000  # a longer range is read by several Spark tasks
BROKER_TIMEOUT_S = 3.0
OPTIONS = Options(
    "kafka",
    choice("connector", "kafka"),
    text("topic"),
    choice("scan.startup.mode", "earliest", "latest", default="earliest"),
    integer("scan.startup.timestamp.millis", 0, 2**62),
    rate_limit("source_rate_limit"),
    max_rows_per_epoch(),
    text("format"),
    text("encode"),
    boolean("format.ignore_key", default=False),  # FORMAT DEBEZIUM ENCODE JSON (ignore_key = 'true')
    *[text(f"include.{what}") for what in METADATA],
) + CONSUMER

_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()  # sessions the reader is registered with
_registered_lock = threading.Lock()


def unreachable(bootstrap: str) -> OSError | None:
    """Why none of the bootstrap servers accepts a TCP connection, or None if one does."""
    last: OSError | None = None
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host or "localhost", int(port or 9092)), timeout=BROKER_TIMEOUT_S):
                return None
        except (OSError, ValueError) as e:
            last = e if isinstance(e, OSError) else OSError(str(e))
    return last


class Kafka(Connector):
    has_bad_records = True
    OPTIONS = OPTIONS

    @property
    def where(self) -> str:
        return f"source {self.table!r}"

    @staticmethod
    def extra_columns(options: dict[str, str]) -> list[Column]:
        """A column per `INCLUDE partition | offset | timestamp | key [AS name]` (the statement names
        it `_rw_kafka_<what>` without AS), as in RisingWave: metadata is selectable once included."""
        return [Column(options[f"include.{what}"], parse_type(type_name))
                for what, type_name in METADATA.items() if f"include.{what}" in options]

    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        super().__init__(table, schema, options)
        where = self.where
        self.topic = options.get("topic") or ""
        if not self.topic:
            raise SqlError(f"{where}: the Kafka connector needs topic = '...'")
        self.bootstrap = options.get("properties.bootstrap.server") or options.get("properties.bootstrap.servers") or ""
        if not self.bootstrap:
            raise SqlError(f"{where}: the Kafka connector needs properties.bootstrap.server = 'host:port'")
        self.properties = librdkafka(options, self.values)
        self.mode = self.value("scan.startup.mode")
        startup = self.value("scan.startup.timestamp.millis")
        self.startup_ms = -1 if startup is None else startup
        fmt, enc = options.get("format", "plain").lower(), options.get("encode", "json").lower()
        if enc != "json":
            raise SqlError(f"{where}: ENCODE {enc.upper()} is not supported; supported: ENCODE JSON")
        if fmt not in ("plain", "upsert", "debezium"):
            raise SqlError(f"{where}: FORMAT {fmt.upper()} is not supported; supported: FORMAT PLAIN, FORMAT UPSERT, "
                           "FORMAT DEBEZIUM")
        self.upsert = fmt == "upsert"
        if fmt != "plain" and schema.append_only:
            raise SqlError(f"{where}: FORMAT {fmt.upper()} needs a PRIMARY KEY (the key its messages upsert and "
                           "delete by)")
        if fmt == "plain" and not schema.append_only:
            raise SqlError(f"{where}: a table with a PRIMARY KEY reads Kafka with FORMAT UPSERT or FORMAT DEBEZIUM "
                           "ENCODE JSON (FORMAT PLAIN is append-only)")
        if "format.ignore_key" in options and fmt != "debezium":
            raise SqlError(f"{where}: ignore_key is an option of FORMAT DEBEZIUM")
        roles = {options[f"include.{w}"]: w for w in METADATA if f"include.{w}" in options}
        if schema.append_only:
            roles["_row_id"] = "row_id"
        self.spec = ReadSpec(self.bootstrap, self.topic, self.properties,
                             [(c.name, c.type.name) for c in schema.columns], roles, list(schema.key), self.upsert,
                             debezium=fmt == "debezium", ignore_key=bool(self.value("format.ignore_key")))
        self._retry_at = 0.0
        self._failures = 0
        self._consumer: Any = None

    def in_background(self) -> Kafka:
        self.spec = dataclasses.replace(self.spec, background=True)
        return self

    # --- the broker, from the driver ------------------------------------------------------------
    def _client(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer
            self._consumer = Consumer(consumer_config(self.bootstrap, self.properties))
        return self._consumer

    def _check_reachable(self) -> None:
        """Raises SqlError unless one bootstrap server accepts a connection. (The client answers
        metadata and watermark requests from its cache while the broker is down, so a plan built on
        them alone would read ranges that no task can fetch.)"""
        if (why := unreachable(self.bootstrap)) is not None:
            raise SqlError(f"source {self.table!r}: Kafka broker {self.bootstrap} cannot be reached: {why}")

    def partitions(self) -> list[int]:
        """The topic's partitions; raises SqlError if the broker or the topic cannot be reached."""
        self._check_reachable()
        try:
            md = self._client().list_topics(self.topic, timeout=BROKER_TIMEOUT_S)
        except Exception as e:
            raise SqlError(f"source {self.table!r}: Kafka broker {self.bootstrap} cannot be reached: {e}") from None
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            reason = t.error.str() if t is not None and t.error is not None else "no partitions"
            raise SqlError(f"source {self.table!r}: Kafka topic {self.topic!r} on {self.bootstrap} is not "
                           f"usable: {reason}")
        return sorted(t.partitions)

    def watermarks(self, p: int) -> tuple[int, int]:
        from confluent_kafka import TopicPartition
        low, high = self._client().get_watermark_offsets(TopicPartition(self.topic, p),
                                                         timeout=BROKER_TIMEOUT_S, cached=False)
        return int(low), int(high)

    def initial_offsets(self) -> dict[str, int]:
        """Where each partition starts, decided at CREATE (later partitions start at their first
        offset): a CREATE fails here, with the reason, when the broker or topic is not there."""
        parts = self.partitions()
        if self.startup_ms >= 0:
            from confluent_kafka import TopicPartition
            found = self._client().offsets_for_times([TopicPartition(self.topic, p, self.startup_ms) for p in parts],
                                                     timeout=BROKER_TIMEOUT_S)
            return {str(tp.partition): (tp.offset if tp.offset >= 0 else self.watermarks(tp.partition)[1])
                    for tp in found}
        return {str(p): self.watermarks(p)[0 if self.mode == "earliest" else 1] for p in parts}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # --- planning and reading -------------------------------------------------------------------
    def positions(self, seq: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        s = seq.to_numpy()
        return (pa.array((s >> SEQ_PARTITION_SHIFT).astype(str)),
                pa.array(s & ((1 << SEQ_PARTITION_SHIFT) - 1)))

    def plan(self, committed: dict[str, int], elapsed_ms: float) -> dict[str, list[int]]:
        if self.paused() or time.time() < self._retry_at:
            return {}
        try:
            self._client().poll(0)  # serves the client's queued log lines (to Python logging), else they pile up
            parts = self.partitions()
            marks = {p: self.watermarks(p) for p in parts}
        except Exception as e:
            self._failures += 1
            self._retry_at = time.time() + min(30.0, 2.0 ** self._failures)
            reason = str(e).split(": ", 1)[-1] if isinstance(e, SqlError) else str(e)
            if self.status != reason:
                log.warning("source %r is not advancing: %s", self.table, reason)
            self.status = reason
            return {}
        self._failures, self.status = 0, None
        budget = self.budget(elapsed_ms)
        # Below `low`, retention removed them.
        starts = {p: max(committed.get(str(p), low), low) for p, (low, _) in marks.items()}
        take = split_budget(budget, {p: max(0, marks[p][1] - start) for p, start in starts.items()},
                            turn=sum(starts.values()))
        return {str(p): [starts[p], starts[p] + n] for p, n in take.items() if n > 0}

    def read(self, spark: SparkSession, ranges: dict[str, list[int]]) -> DataFrame:
        tasks = [[int(p), lo, min(hi, lo + TASK_OFFSETS)]
                 for p, (start, hi) in sorted(ranges.items(), key=lambda r: int(r[0]))
                 for lo in range(start, hi, TASK_OFFSETS)]
        ddl = ", ".join([f"`{c.name}` {c.type.spark}" for c in self.schema.columns]
                        + ["_op tinyint", "_seq bigint", f"{ERROR} string", f"{RAW} string"])
        if policy.kafka_on_driver(sum(hi - lo for _, lo, hi in tasks)):  # few: read here, no Python worker, no job
            return local_batches(spark, [b for p, lo, hi in tasks for b in read_range(self.spec, p, lo, hi)], ddl)
        with _registered_lock:
            if spark not in _registered:
                spark.dataSource.register(KafkaRangeSource)
                _registered.add(spark)
        return (spark.read.format(FORMAT_NAME).option("schema", ddl).option("spec", self.spec.to_json())
                .option("ranges", json.dumps(tasks)).load())
