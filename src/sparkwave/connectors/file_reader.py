"""Reading files planned by a connector (`files.py`: CSV, JSON lines, Parquet in a folder;
`delta_source.py`: a Delta table's data and change-data files) into the rows of a relation, on the
driver for a small read or as a Python data source on Spark (one task per file).

Each task names one file, the records of it to read (`[start, end)`: lines of a text file, rows of
a Parquet file, fixed when the epoch was planned, so a replay reads the same records), and the
`_seq` of its first record. A record that cannot become a row (a line that is not JSON, a CSV field
that is not its column's type, a value its column cannot hold) becomes a bad record (`_error` set,
its text kept in `_raw`), as the Kafka reader's: one bad line never fails the epoch nor is lost.

Rows carry the stored columns of the relation, in order, then `_op`, `_seq`, `_error`, `_raw`.
Runs inside Spark's Python workers: it imports nothing from Spark but its data source API."""

from __future__ import annotations

import csv
import decimal
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sparkwave.connectors.base import ERROR, RAW
from sparkwave.connectors.json_decode import BadRecord, JsonDecoder, converter
from sparkwave.connectors.kafka_reader import background
from sparkwave.core.schema import SqlType

FORMAT_NAME = "sparkwave_files"
BATCH_ROWS = 8192
MAX_LINE_BYTES = 16 << 20  # a longer line of a text file is a bad record (a task holds one line at a time)
COUNT_BLOCK = 1 << 20  # bytes read at a time when counting a text file's lines on the driver
RAW_KEPT = 2000  # characters of a bad record's text kept in the error table
UPSERT, KEY_DELETE = 4, 5  # core/chunk.py's intents (an append-only relation logs every upsert as an insert)
CHANGE_OPS = {"insert": UPSERT, "update_postimage": UPSERT, "delete": KEY_DELETE}  # Delta's `_change_type`


class UnreadableFile(OSError):
    """A file whose records cannot be counted (a Parquet file without its footer)."""


class OutsideRoot(OSError):
    """A path that resolves outside the folder it must stay in (a symlink leading out)."""


@dataclass(frozen=True)
class ReadSpec:
    """What a task needs to decode: travels to the workers as the data source's options."""

    columns: list[tuple[str, str]]  # stored columns (name, type) in order
    row_id: str | None  # the hidden `_row_id` column of an append-only relation (= `_seq`)
    encode: str  # csv | json | parquet (Delta's files are Parquet)
    root: str  # every file read must resolve inside this folder
    header: bool = True  # CSV: the first line names the columns
    delimiter: str = ","
    append_only: bool = True  # a Delta delete or update is an error, not a row
    background: bool = False  # a creating job's read: its worker yields the CPU to the pipeline's
    key: tuple[str, ...] = ()  # a keyed relation's primary key: a row without one is a bad record

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @staticmethod
    def from_json(s: str) -> ReadSpec:
        d = json.loads(s)
        d["columns"] = [tuple(c) for c in d["columns"]]
        d["key"] = tuple(d["key"])
        return ReadSpec(**d)


@dataclass(frozen=True)
class Task:
    """One file's records `[start, end)`, the `_seq` of record 0, and how errors name the file."""

    path: str
    start: int
    end: int
    seq: int
    where: str
    partition: dict[str, str | None] = field(default_factory=dict)  # Delta's partition values
    change_feed: bool = False  # a Delta change-data file (`_change_type` per row)
    upsert_bit: int = 0  # added to an upsert's `_seq`, so that a key's delete sorts first within a version
    deletes: bool = False  # every row deletes its key (a file a Delta version removed)


class FileRangeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return self.options["schema"]

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(ReadSpec.from_json(self.options["spec"]), json.loads(self.options["tasks"]))


class _Reader(DataSourceReader):
    def __init__(self, spec: ReadSpec, tasks: list[dict[str, Any]]) -> None:
        self.spec = spec
        self.tasks = tasks

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(json.dumps(t)) for t in self.tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.spec.background:
            background()
        yield from read_task(self.spec, Task(**json.loads(partition.value)))


def inside(root: str, path: str) -> str:
    """`path` resolved (symlinks followed), if that is strictly inside `root` resolved; OutsideRoot if not."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root or real == real_root:
        raise OutsideRoot(f"{path!r} resolves to {real!r}, outside {root!r}")
    return real


def open_inside(root: str, path: str) -> BinaryIO:
    """The file opened for reading, refusing one that resolves outside `root` (its resolved path is
    opened without following a symlink, should one replace it in between)."""
    return os.fdopen(os.open(inside(root, path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb")


def text_records(root: str, path: str, start: int, end: int) -> Iterator[tuple[int, bytes, bool]]:
    """A text file's lines `[start, end)`: (number, line, whether whole), read a line at a time (a task
    holds a batch of rows, not the file) and at most `MAX_LINE_BYTES` of a line (the rest is skipped:
    not whole). A last line without a newline is a line; a carriage return ending one goes."""
    limit = MAX_LINE_BYTES
    with open_inside(root, path) as f:
        for i in range(end):
            line = f.readline(limit + 1)
            if not line:
                return
            whole = line.endswith(b"\n") or len(line) <= limit
            if not whole:  # skip to the line's end, a block at a time
                while (rest := f.readline(COUNT_BLOCK)) and not rest.endswith(b"\n"):
                    pass
            if i >= start:
                line = line[:-1] if line.endswith(b"\n") else line
                yield i, line[:-1] if line.endswith(b"\r") else line, whole


def record_count(spec: ReadSpec, path: str) -> int:
    """The records of a file as its tasks count them: lines of a text file, rows of a Parquet file."""
    if spec.encode == "parquet":
        with open_inside(spec.root, path) as f:
            try:
                return int(pq.ParquetFile(f).metadata.num_rows)
            except pa.ArrowException as e:  # not Parquet, or not whole yet: an OSError, as a file that cannot be read
                raise UnreadableFile(f"file {os.path.relpath(path, spec.root)!r} is not a Parquet file "
                                     f"({e})") from None
    lines, last = 0, b"\n"
    with open_inside(spec.root, path) as f:  # a block at a time: the driver never holds the file
        while block := f.read(COUNT_BLOCK):
            lines, last = lines + block.count(b"\n"), block[-1:]
    return lines + (0 if last == b"\n" else 1)


def read_task(spec: ReadSpec, task: Task) -> Iterator[pa.RecordBatch]:
    """The rows of one task's records, in record order, in batches."""
    if spec.encode == "parquet":
        yield from _parquet(spec, task)
        return
    batch = _Batch(spec, task)
    header = spec.encode == "csv" and spec.header
    first = next((line for _, line, _ in text_records(spec.root, task.path, 0, 1)), None) if header else None
    decode = _json_decoder(spec) if spec.encode == "json" else _CsvDecoder(spec, first)
    for i, line, whole in text_records(spec.root, task.path, task.start, task.end):
        if not line.strip() or (header and i == 0):
            continue
        if not whole:
            batch.bad(i, f"the line is longer than {MAX_LINE_BYTES} bytes", line)
        else:
            try:
                batch.add(i, _keyed(spec, decode(line)), UPSERT)
            except BadRecord as e:
                batch.bad(i, str(e), line)
            except Exception as e:  # whatever else a line makes the decoder raise is still that line's fault
                batch.bad(i, f"cannot decode: {type(e).__name__}: {e}", line)
        if batch.rows >= BATCH_ROWS:
            yield batch.flush()
    if batch.rows:
        yield batch.flush()


def _keyed(spec: ReadSpec, row: list[Any]) -> list[Any]:
    """The row, if it has its whole primary key (a keyed relation's); BadRecord naming the column if not."""
    for name, v in zip([n for n, _ in spec.columns if n != spec.row_id], row, strict=True):
        if v is None and name in spec.key:
            raise BadRecord(f"column {name}: the primary key is NULL")
    return row


def _json_decoder(spec: ReadSpec) -> Any:
    return JsonDecoder([(n, t) for n, t in spec.columns if n != spec.row_id]).decode


class _CsvDecoder:
    """A CSV line into the values of the columns: by the header's names, else by position. An
    empty field is NULL; a field is converted as its JSON counterpart would be (`json_decode.py`)."""

    def __init__(self, spec: ReadSpec, first: bytes | None) -> None:
        self.spec = spec
        names = [n for n, _ in spec.columns if n != spec.row_id]
        types = dict(spec.columns)
        self.width = len(names)
        if spec.header:
            if first is None:  # an empty file
                self.slots: list[int | None] = []
            else:
                header = [h.strip().lower() for h in next(csv.reader([first.decode("utf-8-sig", "replace")],
                                                                       delimiter=spec.delimiter))]
                self.width = len(header)
                self.slots = [header.index(n) if n in header else None for n in names]
        else:
            self.slots = list(range(len(names)))
        self.convs = [(n, types[n], converter(types[n])) for n in names]

    def __call__(self, line: bytes) -> list[Any]:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadRecord(f"not valid UTF-8: byte 0x{line[e.start]:02x} at position {e.start}") from None
        try:
            fields = next(csv.reader([text], delimiter=self.spec.delimiter, strict=True))
        except csv.Error as e:
            raise BadRecord(f"not a CSV record: {e}") from None
        if len(fields) != self.width:
            raise BadRecord(f"expected {self.width} fields, got {len(fields)}")
        out: list[Any] = []
        for (name, type_name, conv), slot in zip(self.convs, self.slots, strict=True):
            raw = None if slot is None else fields[slot]
            if raw is None or raw == "":
                out.append(None)
                continue
            try:
                out.append(conv(_csv_value(raw, type_name)))
            except (ValueError, ArithmeticError) as e:
                raise BadRecord(f"column {name}: {e}") from None
        return out


def _csv_value(raw: str, type_name: str) -> Any:
    """A CSV field as the JSON value its column's converter takes."""
    s = raw.strip()
    if type_name in ("smallint", "int", "bigint", "real", "double"):
        try:
            return int(s) if len(s) < 40 and s.lstrip("+-").isdigit() else decimal.Decimal(s)
        except decimal.InvalidOperation:
            raise ValueError(f"expected a number, got {raw[:40]!r}") from None
    if type_name == "boolean":
        lowered = s.lower()
        if lowered in ("t", "true", "1", "yes", "y", "on"):
            return True
        if lowered in ("f", "false", "0", "no", "n", "off"):
            return False
        raise ValueError(f"expected true or false, got {raw[:40]!r}")
    return raw if type_name in ("varchar", "bytea") or type_name.startswith("decimal") else s


def _parquet(spec: ReadSpec, task: Task) -> Iterator[pa.RecordBatch]:
    """A Parquet file's rows `[start, end)`, column by column: columns by name (case-insensitive),
    cast to their types (a value its column cannot hold makes its row a bad record); a partition
    column from the task's values; a Delta change file's `_change_type` as ops (a pre-image dropped)."""
    with open_inside(spec.root, task.path) as f:
        table = pq.read_table(f)
    table = table.slice(task.start, max(0, task.end - task.start))
    n = table.num_rows
    by_name = {c.lower(): c for c in table.column_names}
    partition = {k.lower(): v for k, v in task.partition.items()}
    records = pa.array(np.arange(task.start, task.start + n, dtype=np.int64))
    ops, keep = _ops(spec, task, table.column(by_name["_change_type"]) if task.change_feed else None, n)
    seq = pc.add(records, pa.scalar(task.seq, pa.int64()))
    if task.upsert_bit:  # a key's delete sorts before its insert within a version
        seq = pc.if_else(pc.equal(ops, pa.scalar(UPSERT, pa.int8())),
                         pc.add(seq, pa.scalar(task.upsert_bit, pa.int64())), seq)
    errors: list[str | None] = [None] * n
    arrays, sources = [], {}
    for name, type_name in spec.columns:
        target = SqlType(type_name).arrow
        if name == spec.row_id:
            arrays.append(seq)
            continue
        if name in partition:
            source: pa.Array | pa.ChunkedArray = pa.array([partition[name]] * n, pa.string())
        elif name in by_name:
            source = table.column(by_name[name])
        else:
            source = pa.nulls(n, target)
        sources[name] = source
        arrays.append(_cast(source, target, name, errors, task, records))
    for name, a in zip([c for c, _ in spec.columns], arrays, strict=True):
        if name in spec.key and a.null_count:
            for i in pc.indices_nonzero(pc.is_null(a)).to_pylist():
                errors[i] = errors[i] or f"{task.where}, record {task.start + i + 1}: column {name}: the primary " \
                                         "key is NULL"
    raws: list[str | None] = [None] * n
    if any(e is not None for e in errors):
        bad = pa.array([e is not None for e in errors])
        for i, e in enumerate(errors):
            if e is not None:
                raws[i] = _raw(json.dumps({c: v[i].as_py() for c, v in sources.items()}, default=str).encode())
        arrays = [a if name == spec.row_id else pc.if_else(bad, pa.nulls(n, a.type), a)
                  for a, (name, _) in zip(arrays, spec.columns, strict=True)]
    error_col, raw_col = pa.array(errors, pa.string()), pa.array(raws, pa.string())
    out = pa.table(arrays + [ops, seq, error_col, raw_col], schema=_schema(spec))
    if keep is not None:
        out = out.filter(keep)
    yield from out.to_batches(max_chunksize=BATCH_ROWS * 8)


def _ops(spec: ReadSpec, task: Task, kinds: pa.ChunkedArray | None, n: int) -> tuple[pa.Array, pa.Array | None]:
    """Each row's intent, and which rows to keep (a Delta change file's pre-images are dropped)."""
    if kinds is None:
        return pa.array(np.full(n, KEY_DELETE if task.deletes else UPSERT, dtype=np.int8)), None
    if not pc.all(pc.is_in(kinds, pa.array([*CHANGE_OPS, "update_preimage"]))).as_py():
        raise ValueError(f"{task.where}: a _change_type other than {', '.join(CHANGE_OPS)}, update_preimage")
    if spec.append_only and pc.any(pc.not_equal(kinds, "insert")).as_py():
        raise ValueError(f"{task.where} deletes or updates rows, and the relation is append-only (a SOURCE, "
                         "or a TABLE without a PRIMARY KEY): create a TABLE with the Delta table's key as its "
                         "PRIMARY KEY to take updates and deletes")  # delta_source.py names it at plan time
    ops = pc.if_else(pc.equal(kinds, "delete"), pa.scalar(KEY_DELETE, pa.int8()), pa.scalar(UPSERT, pa.int8()))
    return ops.combine_chunks() if isinstance(ops, pa.ChunkedArray) else ops, \
        pc.not_equal(kinds, "update_preimage")


def _cast(source: pa.Array | pa.ChunkedArray, target: pa.DataType, name: str, errors: list[str | None],
          task: Task, records: pa.Array) -> pa.Array:
    """`source` as `target`; a value that does not fit (safe casting) becomes NULL and its row's error."""
    if isinstance(source, pa.ChunkedArray):
        source = source.combine_chunks()
    try:
        return source.cast(target)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        pass
    out: list[Any] = []
    for i, v in enumerate(source.to_pylist()):
        try:
            out.append(pa.array([v], source.type).cast(target)[0].as_py())
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            out.append(None)
            if errors[i] is None:
                errors[i] = _storable(f"{task.where}, record {records[i].as_py() + 1}: column {name}: "
                                      f"{str(v)[:40]!r} cannot be stored as {target}: {e}")
    return pa.array(out, target)


def _schema(spec: ReadSpec) -> pa.Schema:
    return pa.schema([*(pa.field(n, SqlType(t).arrow) for n, t in spec.columns),
                      pa.field("_op", pa.int8()), pa.field("_seq", pa.int64()),
                      pa.field(ERROR, pa.string()), pa.field(RAW, pa.string())])


def _storable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _raw(data: bytes) -> str:
    text = data[:RAW_KEPT * 4].decode("utf-8", "backslashreplace")
    return text if len(text) <= RAW_KEPT and len(data) <= RAW_KEPT * 4 else text[:RAW_KEPT] + "..."


class _Batch:
    """Rows of one task being decoded, column by column, flushed as Arrow record batches. No record
    fails the batch: a value Arrow refuses sets its row aside (naming the column) at flush."""

    def __init__(self, spec: ReadSpec, task: Task) -> None:
        self.spec = spec
        self.task = task
        self.names = [n for n, _ in spec.columns if n != spec.row_id]
        self.schema = _schema(spec)
        self.types = {f.name: f.type for f in self.schema}
        self._reset()

    def _reset(self) -> None:
        self.values: list[list[Any]] = [[] for _ in self.names]
        self.records: list[int] = []
        self.ops: list[int] = []
        self.errors: list[str | None] = []
        self.raws: list[str | None] = []

    @property
    def rows(self) -> int:
        return len(self.records)

    def add(self, record: int, row: list[Any], op: int) -> None:
        for col, v in zip(self.values, row, strict=True):
            col.append(v)
        self.records.append(record)
        self.ops.append(op)
        self.errors.append(None)
        self.raws.append(None)

    def bad(self, record: int, error: str, raw: bytes) -> None:
        self.add(record, [None] * len(self.names), UPSERT)
        self.errors[-1] = _storable(f"{self.task.where}, record {record + 1}: {error}")
        self.raws[-1] = _raw(raw)

    def flush(self) -> pa.RecordBatch:
        try:
            out = self._record_batch()
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            self._set_aside_unstorable()
            out = self._record_batch()
        self._reset()
        return out

    def _record_batch(self) -> pa.RecordBatch:
        seq = pc.add(pa.array(self.records, pa.int64()), pa.scalar(self.task.seq, pa.int64()))
        by_name = dict(zip(self.names, self.values, strict=True))
        arrays = [seq if name == self.spec.row_id else pa.array(by_name[name], self.types[name])
                  for name, _ in self.spec.columns]
        arrays += [pa.array(self.ops, pa.int8()), seq, pa.array(self.errors, pa.string()),
                   pa.array(self.raws, pa.string())]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _set_aside_unstorable(self) -> None:
        for name, col in zip(self.names, self.values, strict=True):
            for i, v in enumerate(col):
                if v is None:
                    continue
                try:
                    pa.array([v], self.types[name])
                except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
                    for other in self.values:
                        other[i] = None
                    self.errors[i] = _storable(f"{self.task.where}, record {self.records[i] + 1}: column {name}: "
                                               f"cannot be stored as {self.types[name]}: {e}")
                    self.raws[i] = _raw(str(v).encode())
