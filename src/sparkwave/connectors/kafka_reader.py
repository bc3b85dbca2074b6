"""Reading planned Kafka offset ranges on Spark: a Python data source whose partitions are
`(partition, start, end)` ranges, read by Spark's Python workers with `confluent-kafka`.

Exactly once comes from the plan, not from Kafka: the driver decides each range and persists it
with the epoch, a task reads exactly `[start, end)` and nothing else, and no consumer-group offset
is committed or trusted. Each message becomes a row (decoded from JSON) or a bad record (`_error`
set, the raw payload kept), so one malformed message never fails the epoch nor is lost (a
Debezium tombstone becomes nothing: `debezium.py`).

Rows carry the stored columns of the relation, in order, then `_op`, `_seq`, `_error`, `_raw`."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sparkwave.connectors.base import ERROR, RAW
from sparkwave.connectors.debezium import DebeziumDecoder
from sparkwave.connectors.json_decode import BadRecord, JsonDecoder, NotJson, parse
from sparkwave.connectors.kafka_properties import unsafe
from sparkwave.core.errors import SqlError
from sparkwave.core.limits import MAX_VALUE_BYTES
from sparkwave.core.schema import SqlType

FORMAT_NAME = "sparkwave_kafka"
SEQ_PARTITION_SHIFT = 40  # `_seq` and `_row_id` = partition << 40 | offset: unique and replayable
BATCH_ROWS = 8192
RAW_KEPT = 2000  # characters of a bad record's payload kept in the error table
IDLE_CHECK_S = 2.0  # no message for this long: ask the broker whether the range still exists
READ_TIMEOUT_S = 60.0  # ... and give up (the epoch fails and is replayed) after this long
BACKGROUND_NICE = 10  # a creating job's read workers' niceness (`background`)
UPSERT, KEY_DELETE = 4, 5  # core/chunk.py's intents; append-only tables log every row as an insert

@dataclass(frozen=True)
class ReadSpec:
    """What a task needs to read and decode: travels to the workers as the data source's options."""

    bootstrap: str
    topic: str
    properties: dict[str, str]
    columns: list[tuple[str, str]]  # stored columns (name, type) in order
    roles: dict[str, str]  # column -> 'row_id' | 'partition' | 'offset' | 'timestamp' | 'key'
    key: list[str]  # the primary key (upsert format)
    upsert: bool
    background: bool = False  # a creating job's read: its worker yields the CPU to the pipeline's
    debezium: bool = False  # FORMAT DEBEZIUM: a message is a change event (connectors/debezium.py)
    ignore_key: bool = False  # ... whose message key is never read

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @staticmethod
    def from_json(s: str) -> ReadSpec:
        d = json.loads(s)
        d["columns"] = [tuple(c) for c in d["columns"]]
        return ReadSpec(**d)


class KafkaRangeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return self.options["schema"]

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(ReadSpec.from_json(self.options["spec"]), json.loads(self.options["ranges"]))


class _Reader(DataSourceReader):
    def __init__(self, spec: ReadSpec, ranges: list[list[int]]) -> None:
        self.spec = spec
        self.ranges = ranges

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(tuple(r)) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.spec.background:
            background()
        p, start, end = partition.value
        yield from read_range(self.spec, p, start, end)


def background() -> None:
    """Lower this Python worker's CPU priority to `BACKGROUND_NICE`: decoding a backfill's history
    is most of its work, and on a machine whose cores the pipeline also needs, the OS then runs the
    pipeline's processes first. A worker that Spark reuses keeps the priority (it cannot be raised
    again), which matters only while something else competes for the CPU."""
    now = os.nice(0)
    if now < BACKGROUND_NICE:
        os.nice(BACKGROUND_NICE - now)


def consumer_config(bootstrap: str, properties: dict[str, str]) -> dict[str, Any]:
    """A consumer that commits nothing to the broker; its client logs go to Python logging (what
    matters reaches the user as an error or a source's status), not to stderr. No librdkafka setting
    outside the allowlist reaches a client, whatever a stored definition holds."""
    if refused := unsafe(properties):
        raise SqlError(f"Kafka properties {', '.join(refused)} are not allowed (see the Kafka connector's options)")
    return {"bootstrap.servers": bootstrap, "group.id": "sparkwave", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "logger": logging.getLogger("sparkwave.kafka.client"), **properties}


def read_range(spec: ReadSpec, p: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """The decoded rows of offsets `[start, end)` of partition `p`, in offset order. Offsets the
    broker no longer has (retention, compaction) are skipped; a range the broker cannot serve at all
    raises, so the epoch fails and is replayed rather than committed half-read."""
    from confluent_kafka import Consumer, TopicPartition

    batch = _Batch(spec, p)
    consumer = Consumer(consumer_config(spec.bootstrap, spec.properties))
    try:
        consumer.assign([TopicPartition(spec.topic, p, start)])
        pos, idle_since, last_error = start, time.monotonic(), ""
        while pos < end:
            msgs = consumer.consume(min(BATCH_ROWS, end - pos), timeout=0.5)
            for m in msgs:
                if m.error() is not None:
                    last_error = str(m.error())
                    continue
                offset = m.offset() or 0
                if offset < pos:  # before the range: the consumer was reset to an earlier offset
                    continue
                if offset >= end:
                    pos = end
                    break
                pos = offset + 1
                batch.add(m)
            if msgs:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > IDLE_CHECK_S and pos < end:
                pos = _skip_missing(consumer, TopicPartition(spec.topic, p), pos, end, idle_since, last_error)
            if batch.rows >= BATCH_ROWS:
                yield batch.flush()
        if batch.rows:
            yield batch.flush()
    finally:
        consumer.close()


def _skip_missing(consumer: Any, tp: Any, pos: int, end: int, idle_since: float, last_error: str) -> int:
    """Where reading goes on after a silence: past the range if the broker has dropped the rest of
    it, else where it was; raises once the silence has lasted `READ_TIMEOUT_S`."""
    try:
        low, _high = consumer.get_watermark_offsets(tp, timeout=5.0, cached=False)
        position = consumer.position([tp])[0].offset
    except Exception as e:  # the broker is unreachable: wait for it up to the timeout
        low, position, last_error = -1, -1, str(e)
    if low >= end or position >= end:
        return end
    if time.monotonic() - idle_since > READ_TIMEOUT_S:
        raise RuntimeError(f"Kafka topic {tp.topic!r} partition {tp.partition}: offsets {pos}..{end - 1} "
                           f"could not be read within {READ_TIMEOUT_S:.0f} s"
                           + (f" ({last_error})" if last_error else ""))
    return pos


class _Batch:
    """Rows of one partition being decoded, kept column by column, flushed as Arrow record batches;
    metadata columns (row id, partition, offset, timestamp) are built per batch, not per row.

    No message can fail the batch: whatever decoding raises makes the message a bad record, and a
    value that Arrow still refuses (which decoding should have caught) sets its row aside at flush."""

    def __init__(self, spec: ReadSpec, partition: int) -> None:
        self.spec = spec
        self.partition = partition
        self.value_names = [n for n, _ in spec.columns if n not in spec.roles]
        self.decoder = JsonDecoder([(n, t) for n, t in spec.columns if n not in spec.roles])
        self.key_decoder = JsonDecoder([(n, t) for n, t in spec.columns if n in spec.key])
        self.key_slots = [self.value_names.index(k) for k in spec.key if k in self.value_names]
        self.debezium = DebeziumDecoder([(n, t) for n, t in spec.columns if n not in spec.roles], spec.key,
                                        spec.ignore_key) if spec.debezium else None
        self.include_key = "key" in spec.roles.values()
        self.schema = pa.schema([*(pa.field(n, SqlType(t).arrow) for n, t in spec.columns),
                                 pa.field("_op", pa.int8()), pa.field("_seq", pa.int64()),
                                 pa.field(ERROR, pa.string()), pa.field(RAW, pa.string())])
        self.null_row: list[Any] = [None] * len(self.value_names)
        self._reset()

    def _reset(self) -> None:
        self.values: list[list[Any]] = [[] for _ in self.value_names]
        self.offsets: list[int] = []
        self.times: list[int | None] = []
        self.payloads: list[tuple[bytes | None, bytes | None]] = []  # (value, key): a row set aside at flush
        self.key_texts: list[str | None] = []  # INCLUDE key
        self.ops: list[int] = []
        self.errors: list[str | None] = []
        self.raws: list[str | None] = []
        self.bad = False

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def add(self, m: Any) -> None:
        value, key = m.value(), m.key()
        op, error, key_text = UPSERT, None, None
        try:
            if self.include_key and key is not None:
                key_text = _key_text(key)
            if self.debezium is not None:
                decoded = self.debezium.decode(value, key)
                if decoded is None:
                    return  # a tombstone: the delete event just before it did the delete
                op, row = decoded
            elif value is None:
                if not self.spec.upsert:
                    raise BadRecord("message has no value (a tombstone) but the format is PLAIN")
                op, row = KEY_DELETE, self._key_row(key)
            else:
                row = self.decoder.decode(value)
                if self.spec.upsert and any(row[i] is None for i in self.key_slots):
                    from_key = self._key_row(key)
                    row = [v if v is not None else from_key[i] for i, v in enumerate(row)]
        except BadRecord as e:
            error = str(e)
        except Exception as e:  # whatever else a message makes the decoder raise is still that message's fault
            error = f"cannot decode: {type(e).__name__}: {e}"
        if error is not None:
            row, key_text, self.bad = self.null_row, None, True
        for col, v in zip(self.values, row, strict=True):
            col.append(v)
        ts_type, ts_ms = m.timestamp()
        self.offsets.append(m.offset())
        self.times.append(ts_ms if ts_type and ts_ms >= 0 else None)
        self.payloads.append((value, key))
        self.key_texts.append(key_text)
        self.ops.append(op)
        self.errors.append(None if error is None else _storable(error))
        self.raws.append(None if error is None else _raw(value, key))

    def _key_row(self, key: bytes | None) -> list[Any]:
        """A row of NULLs but for the primary key, decoded from the message key (JSON, else its text)."""
        if key is None:
            raise BadRecord("an upsert message needs a key (the primary key)")
        try:
            obj = parse(key)
        except NotJson:
            obj = _key_text(key)
        except BadRecord as e:
            raise BadRecord(f"the message key: {e}") from None
        if not isinstance(obj, dict):
            if len(self.spec.key) != 1:
                raise BadRecord(f"the message key must be a JSON object with {', '.join(self.spec.key)}")
            obj = {self.spec.key[0]: obj}
        found = dict(zip(self.spec.key, self.key_decoder.values(obj), strict=True))
        missing = [k for k, v in found.items() if v is None]
        if missing:
            raise BadRecord(f"the message key has no {', '.join(missing)}")
        return [found.get(n) for n in self.value_names]

    def flush(self) -> pa.RecordBatch:
        try:
            out = self._record_batch()
        except (pa.ArrowException, ValueError, TypeError, OverflowError):  # UnicodeEncodeError is a ValueError
            self._set_aside_unstorable()
            out = self._record_batch()
        self._reset()
        return out

    def _record_batch(self) -> pa.RecordBatch:
        n = self.rows
        offsets = pa.array(self.offsets, pa.int64())
        row_id = pc.bit_wise_or(offsets, pa.scalar(self.partition << SEQ_PARTITION_SHIFT, pa.int64()))
        meta = {"row_id": row_id, "partition": pa.array([self.partition] * n, pa.int32()), "offset": offsets,
                "timestamp": pa.array(self.times, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                "key": pa.array(self.key_texts, pa.string())}
        by_name = dict(zip(self.value_names, self.values, strict=True))
        arrays = [meta[self.spec.roles[f.name]] if f.name in self.spec.roles else pa.array(by_name[f.name], f.type)
                  for f in self.schema if f.name not in ("_op", "_seq", ERROR, RAW)]
        arrays = [a.cast(f.type) for a, f in zip(arrays, self.schema, strict=False)]
        clean = [None] * n
        arrays += [pa.array(self.ops, pa.int8()), row_id, pa.array(self.errors if self.bad else clean, pa.string()),
                   pa.array(self.raws if self.bad else clean, pa.string())]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _set_aside_unstorable(self) -> None:
        """Makes each row holding a value its column's Arrow type refuses a bad record naming the
        column, so that the others are stored."""
        types = {f.name: f.type for f in self.schema}
        for name, col in zip(self.value_names, self.values, strict=True):
            for i, v in enumerate(col):
                if v is None:
                    continue
                try:
                    pa.array([v], types[name])
                except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
                    for other in self.values:
                        other[i] = None
                    self.key_texts[i] = None
                    self.errors[i] = _storable(f"column {name}: cannot be stored as {types[name]}: {e}")
                    self.raws[i] = _raw(*self.payloads[i])
                    self.bad = True


def _key_text(key: bytes) -> str:
    """The message key as text (INCLUDE key, a key that is not JSON): UTF-8 within the value limit."""
    if len(key) > MAX_VALUE_BYTES:
        raise BadRecord(f"the message key of {len(key)} bytes is larger than the limit of {MAX_VALUE_BYTES} bytes")
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRecord(f"the message key is not valid UTF-8: byte 0x{key[e.start]:02x} at position {e.start}") \
            from None


def _storable(text: str) -> str:
    """`text` as UTF-8 can hold it (a lone surrogate escaped)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _raw(value: bytes | None, key: bytes | None) -> str:
    """A bad record's payload as kept: text, bytes that are not UTF-8 escaped (`\\xff`), cut at
    `RAW_KEPT` characters."""
    data = value if value is not None else None if key is None else b"key: " + key
    if data is None:
        return ""
    text = data[:RAW_KEPT * 4].decode("utf-8", "backslashreplace")
    return text if len(text) <= RAW_KEPT and len(data) <= RAW_KEPT * 4 else text[:RAW_KEPT] + "..."
