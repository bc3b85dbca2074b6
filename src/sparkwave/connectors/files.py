"""The posix_fs connector, with RisingWave's options: the files of a folder as a source.

    CREATE SOURCE s (...) WITH (connector = 'posix_fs', posix_fs.root = '/data/in',
        match_pattern = '*.csv', without_header = 'false', delimiter = ',',
        source_rate_limit = n, max.rows.per.epoch = n) FORMAT PLAIN ENCODE CSV | JSON | PARQUET

(RisingWave writes the CSV options inside `ENCODE CSV (...)`; here they are WITH options.)

A split is one file, named `<ordinal> <path>` (its place in the order files were taken, then its
path under the root); its offsets are its records (lines of a CSV or JSON-lines file, rows of a
Parquet file), counted when the epoch is planned. An epoch takes new files whole, in name order,
as many as its row budget holds (at least one); the ranges are persisted with the plan and committed
with the epoch, as Kafka's offsets are, so a file is read exactly once across crashes, and a file
that grows later is not read again. Files whose name starts with `.` or `_` are skipped (write
`.name.tmp`, then rename: a file must be whole when it appears under its name).

Nothing outside the root is read: the pattern is a glob relative to the root (no absolute path, no
`..`), the walk does not follow symlinked folders, and a file that resolves outside the root (a
symlink leading out) is skipped, named in the source's status; each read checks again."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import os
import threading
import weakref
from pathlib import PurePosixPath

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from sparkwave.connectors.base import ERROR, RAW, Connector
from sparkwave.connectors.file_reader import (
    FORMAT_NAME,
    FileRangeSource,
    OutsideRoot,
    ReadSpec,
    Task,
    inside,
    read_task,
    record_count,
)
from sparkwave.connectors.options import Options, boolean, choice, max_rows_per_epoch, rate_limit, text
from sparkwave.core import policy
from sparkwave.core.errors import SqlError
from sparkwave.core.local_frames import local_batches
from sparkwave.core.schema import Schema

log = logging.getLogger("sparkwave.files")
ORDINAL_SHIFT = 32  # `_seq` = ordinal << 32 | record: a file has at most 2^32 records
MAX_FILES_PER_EPOCH = 10_000
LOCAL_BYTES = 64 << 20  # the driver decodes an epoch's files itself only up to this many bytes

_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()  # sessions the reader is registered with
_registered_lock = threading.Lock()


def register(spark: SparkSession) -> None:
    """Registers the file reader's data source with `spark` once."""
    with _registered_lock:
        if spark not in _registered:
            spark.dataSource.register(FileRangeSource)
            _registered.add(spark)


def read_tasks(spark: SparkSession, spec: ReadSpec, tasks: list[Task], ddl: str) -> DataFrame:
    """The rows of `tasks`: read by the driver when they are few, else one Spark task per file."""
    if on_driver(tasks):
        return local_batches(spark, [b for t in tasks for b in read_task(spec, t)], ddl)
    register(spark)
    return (spark.read.format(FORMAT_NAME).option("schema", ddl).option("spec", spec.to_json())
            .option("tasks", json.dumps([t.__dict__ for t in tasks])).load())


def on_driver(tasks: list[Task]) -> bool:
    """Whether the driver decodes `tasks` itself: few records and few bytes (a task reads its whole
    file, and a few records may be long lines: those go to a Spark task, not the driver's memory)."""
    if not policy.runs_locally(sum(t.end - t.start for t in tasks)):
        return False
    try:
        return sum(os.path.getsize(t.path) for t in tasks) <= LOCAL_BYTES
    except OSError:  # the task's read says what is wrong with the file
        return False


def read_ddl(schema: Schema) -> str:
    return ", ".join([f"`{c.name}` {c.type.spark}" for c in schema.columns]
                     + ["_op tinyint", "_seq bigint", f"{ERROR} string", f"{RAW} string"])


def split_name(ordinal: int, path: str) -> str:
    return f"{ordinal:09d} {path}"


def split_path(split: str) -> tuple[int, str]:
    ordinal, _, path = split.partition(" ")
    return int(ordinal), path


class PosixFs(Connector):
    has_bad_records = True
    OPTIONS = Options(
        "posix_fs",
        choice("connector", "posix_fs"),
        text("posix_fs.root"),
        text("match_pattern", "*"),
        boolean("without_header", False),
        text("delimiter", ","),
        rate_limit("source_rate_limit"),
        max_rows_per_epoch(),
        choice("format", "plain", default="plain"),
        choice("encode", "csv", "json", "parquet"),
    )

    @property
    def where(self) -> str:
        return f"source {self.table!r}"

    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        super().__init__(table, schema, options)
        root = self.value("posix_fs.root")
        if not root or not os.path.isabs(root):
            raise SqlError(f"{self.where}: the posix_fs connector needs posix_fs.root = '/an/absolute/folder'")
        self.root = os.path.normpath(root)
        self.pattern = self.value("match_pattern")
        if problem := pattern_problem(self.pattern):
            raise SqlError(f"{self.where}: match_pattern {self.pattern!r} {problem}: it names files under "
                           f"posix_fs.root {self.root!r} and nothing outside it")
        encode = self.value("encode")
        if encode is None:
            raise SqlError(f"{self.where}: the posix_fs connector needs FORMAT PLAIN ENCODE CSV | JSON | PARQUET")
        delimiter = self.value("delimiter")
        if len(delimiter) != 1 or delimiter in "\"\r\n":
            raise SqlError(f"{self.where}: option delimiter must be one character (not a quote or a newline), "
                           f"got {delimiter!r}")
        row_id = "_row_id" if schema.append_only else None
        self.spec = ReadSpec([(c.name, c.type.name) for c in schema.columns], row_id, encode, self.root,
                             header=not self.value("without_header"), delimiter=delimiter,
                             key=() if schema.append_only else tuple(schema.key))
        self._names: dict[int, str] = {}  # ordinal -> split, of the ranges last read (`positions`)
        self._counts: dict[str, int] = {}  # records per file, counted once

    def initial_offsets(self) -> dict[str, int]:
        """Nothing consumed yet; a CREATE fails here when the root is not a folder."""
        if not os.path.isdir(self.root):
            raise SqlError(f"{self.where}: posix_fs.root {self.root!r} is not a folder")
        return {}

    def in_background(self) -> PosixFs:
        self.spec = dataclasses.replace(self.spec, background=True)
        return self

    # --- planning ---------------------------------------------------------------------------------
    def files(self) -> tuple[list[str], list[str], list[str]]:
        """The root's files the pattern matches (paths relative to the root, in name order), those
        skipped because they lead outside the root, and those whose names are not UTF-8 (a split's
        name is stored with the epoch's commit, which such a name would fail every time)."""
        found, outside, unnamed = [], [], []
        for folder, dirs, names in os.walk(self.root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            for name in names:
                if name.startswith((".", "_")):
                    continue
                full = os.path.join(folder, name)
                rel = PurePosixPath(os.path.relpath(full, self.root)).as_posix()
                if not fnmatch.fnmatchcase(rel, self.pattern):
                    continue
                if not _utf8(rel):
                    unnamed.append(repr(os.fsencode(rel))[2:-1])  # its bytes, as `ls -b` shows them
                    continue
                try:
                    if os.path.isfile(inside(self.root, full)):
                        found.append(rel)
                except OutsideRoot:
                    outside.append(rel)
        return sorted(found), sorted(outside), sorted(unnamed)

    def plan(self, committed: dict[str, int], elapsed_ms: float) -> dict[str, list[int]]:
        if self.paused():
            return {}
        taken_paths = {split_path(s)[1] for s in committed}
        ordinal = max((split_path(s)[0] for s in committed), default=-1) + 1
        try:
            files, outside, unnamed = self.files()
            budget = self.budget(elapsed_ms)
            out: dict[str, list[int]] = {}
            rows = 0
            for rel in files:
                if rel in taken_paths:
                    continue
                n = self._counts.get(rel)
                if n is None:
                    try:
                        n = self._counts[rel] = record_count(self.spec, os.path.join(self.root, rel))
                    except OSError:
                        if out:  # the files before it first; it stops the source at the next plan
                            break
                        raise
                if out and (rows + n > budget or len(out) >= MAX_FILES_PER_EPOCH):
                    break
                out[split_name(ordinal, rel)] = [0, n]
                ordinal, rows = ordinal + 1, rows + n
        except OSError as e:
            reason = f"posix_fs.root {self.root!r}: {e}"
            if self.status != reason:
                log.warning("source %r is not advancing: %s", self.table, reason)
            self.status = reason
            return {}
        skipped = ([f"skipped {len(outside)} file(s) that lead outside posix_fs.root {self.root!r}: "
                    + ", ".join(outside[:5])] if outside else []) + \
                  ([f"skipped {len(unnamed)} file(s) whose names are not UTF-8: " + ", ".join(unnamed[:5])]
                   if unnamed else [])
        self.status = "; ".join(skipped) or None
        for split in out:
            self._counts.pop(split_path(split)[1], None)
        return out

    # --- reading ----------------------------------------------------------------------------------
    def tasks(self, ranges: dict[str, list[int]]) -> list[Task]:
        tasks = []
        for split, (lo, hi) in sorted(ranges.items()):
            ordinal, rel = split_path(split)
            self._names[ordinal] = split
            if hi > lo:
                tasks.append(Task(os.path.join(self.root, rel), lo, hi, ordinal << ORDINAL_SHIFT,
                                  f"file {rel!r} under {self.root!r}"))
        return tasks

    def read(self, spark: SparkSession, ranges: dict[str, list[int]]) -> DataFrame:
        return read_tasks(spark, self.spec, self.tasks(ranges), read_ddl(self.schema))

    def positions(self, seq: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        s = seq.to_numpy()
        ordinals = (s >> ORDINAL_SHIFT).tolist()
        return (pa.array([self._names.get(o, str(o)) for o in ordinals], pa.string()),
                pa.array(s & ((1 << ORDINAL_SHIFT) - 1)))


def _utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:  # os.walk's surrogate escapes of bytes that are not UTF-8
        return False
    return True


def pattern_problem(pattern: str) -> str | None:
    """Why a match pattern could reach outside the root (None: it cannot)."""
    if not pattern or "\x00" in pattern:
        return "is empty or holds NUL"
    if pattern.startswith(("/", "\\")) or os.path.isabs(pattern):
        return "is an absolute path"
    if any(part == ".." for part in pattern.replace("\\", "/").split("/")):
        return "holds a '..' component"
    return None
