"""A log-structured table on Delta Lake: an append-only per-epoch **log** plus a compacted **base**.

Log rows: `| _epoch | _seq | _op | _vnode | columns... |`, one Parquet file per epoch
(`log/e<epoch>.parquet`). The catalog makes an epoch's files visible; the log's Delta table follows
it, one version per group of epochs carrying `Transaction(APP_ID, <newest epoch of the group>)`
(`commit_logs`, the Delta follower's; a creating job's `commit_log` / `commit_log_batch`).
Base rows: `| _vnode | columns... |` as of a compaction epoch `c`, sorted by (vnode, key), written by
Spark and committed as an overwrite carrying `Transaction(BASE_APP_ID, c)`.

File names are deterministic in the epoch, so a replayed epoch rewrites the same file and a commit
that already happened is found by `transaction_version` (delta-rs records app transactions but does
not enforce them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.schema import Schema
from sparkwave.storage import decoded
from sparkwave.storage.integrity import write_table

# Commits of the Delta log older than this, and covered by a checkpoint, are cleaned up
# (`checkpoint`); reads never go through the Delta log (the catalog maps epochs to files).
LOG_RETENTION = {"delta.logRetentionDuration": "interval 1 hours"}
CHECKPOINT_EVERY = 100  # Delta versions between two checkpoints
APP_ID = "sparkwave-log"
BASE_APP_ID = "sparkwave-base"


def log_file_epoch(name: str) -> int | None:
    """The epoch of a log file's name (`e<epoch>.parquet`), or None for any other file."""
    if name.startswith("e") and name.endswith(".parquet") and name[1:-8].isdigit():
        return int(name[1:-8])
    return None


def log_arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([("_epoch", pa.int64()), ("_seq", pa.int64()), ("_op", pa.int8()), ("_vnode", pa.int16()),
                      *[(c.name, c.type.arrow) for c in schema.columns]])


def log_rows(rows: pa.Table, schema: Schema, epoch: int) -> pa.Table:
    """`| _seq | _op | _vnode | columns |` rows as the relation's log rows of `epoch`."""
    target = log_arrow_schema(schema)
    rows = rows.append_column("_epoch", pa.array([epoch] * rows.num_rows, pa.int64()))
    return rows.select(target.names).cast(target)


@dataclass(frozen=True)
class StagedLog:
    """An epoch's log rows that executors wrote (a big epoch): the driver knows the file and its
    row count, never the rows."""

    path: str
    num_rows: int


def attempt_names(staging_name: str, prefix: str) -> tuple[str, str]:
    """A write's staging folder and file prefix, unique to this attempt: a retried write, or
    another owner's still running after a takeover, never replaces files one of them committed."""
    attempt = uuid.uuid4().hex[:8]
    return f"{staging_name}-{attempt}", f"{prefix}{attempt}-"


def _written_order(path: str) -> list[str | int]:
    """A base file's name with its numbers as numbers (`s5-v064-t0-<attempt>-10.parquet`): the order
    the chunks and their writes produced the files in."""
    return [int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", os.path.basename(path)))]


def base_arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([("_vnode", pa.int16()), *[(c.name, c.type.arrow) for c in schema.columns]])


def log_spark_ddl(schema: Schema) -> str:
    return "_epoch bigint, _seq bigint, _op tinyint, _vnode smallint, " + schema.spark_ddl()


def base_spark_ddl(schema: Schema) -> str:
    return "_vnode smallint, " + schema.spark_ddl()


class StoredTable:
    """The two Delta tables of one relation. Which files hold which epoch is in the catalog."""

    def __init__(self, root: Path, name: str, schema: Schema) -> None:
        self.name = name
        self.schema = schema
        self.root = root
        self.log_path = root / "log"
        self.base_path = root / "base"
        self._log: DeltaTable | None = None
        self._base: DeltaTable | None = None
        # One writer of the log's Delta table at a time (the Delta follower, retention, a checkpoint);
        # `closed` (a DROP, under it) tells a writer that took the table before that it is gone.
        self.log_lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        """The relation is being dropped: once this returns, no writer touches its Delta log again."""
        with self.log_lock:
            self.closed = True

    def create(self) -> None:
        """Create both Delta tables (idempotent)."""
        for path, schema in ((self.log_path, log_arrow_schema(self.schema)),
                             (self.base_path, base_arrow_schema(self.schema))):
            if not DeltaTable.is_deltatable(str(path)):
                path.mkdir(parents=True, exist_ok=True)
                DeltaTable.create(str(path), schema=schema, mode="ignore", name=self.name,
                                  configuration=LOG_RETENTION)

    @property
    def log(self) -> DeltaTable:
        if self._log is None:
            self._log = DeltaTable(str(self.log_path))
        return self._log

    @property
    def base(self) -> DeltaTable:
        if self._base is None:
            self._base = DeltaTable(str(self.base_path))
        return self._base

    def log_file_path(self, epoch: int) -> str:
        return str(self.log_path / f"e{epoch}.parquet")

    def log_committed(self, epoch: int) -> bool:
        done = self.log.transaction_version(APP_ID)
        return done is not None and done >= epoch

    def stage_log(self, epoch: int, chunk: pa.Table, *, transient: bool = False) -> str:
        """Write one epoch's change rows, uncommitted: downstream jobs of the same epoch read the file
        with Spark's native reader. A replay overwrites it with the same rows.

        Only the columns likely to repeat are dictionary-encoded (strings, the epoch, op and vnode):
        a numeric column's dictionary is mostly built to be dropped, costing time and size. A
        `transient` file (a source's, written only for an MV that reads it, and removed with the
        epoch) is written plain, neither encoded nor compressed: it is read once."""
        path = self.log_file_path(epoch)
        target = log_arrow_schema(self.schema)
        rows = chunk.select(target.names).cast(target)
        if transient:
            write_table(rows, path, row_group_size=64 * 1024, use_dictionary=False, compression="none")
        else:
            repeating = [f.name for f in target if f.name in ("_epoch", "_op", "_vnode")
                         or pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
            write_table(rows, path, row_group_size=64 * 1024, use_dictionary=repeating)
            decoded.remember(path, rows)
        return path

    def stage_log_frame(self, epoch: int, rows: DataFrame) -> StagedLog:
        """Write one epoch's change rows `| _seq | _op | _vnode | columns |` from the executors, as
        the same one file `stage_log` writes (through a staging folder, so the file is whole or
        absent). No file when there are no rows."""
        path = self.log_file_path(epoch)
        # A folder of this writer's own: an owner fenced out mid-epoch may write the same epoch at
        # once, and a shared folder's cleanup removed the other's rows before they were listed
        staging = self.log_path / f"_staging_e{epoch}-{uuid.uuid4().hex[:12]}"
        types = {"_seq": "bigint", "_op": "tinyint", "_vnode": "smallint",
                 **{c.name: c.type.spark for c in self.schema.columns}}
        out = rows.select(F.lit(epoch).cast("bigint").alias("_epoch"),
                          *[F.col(f"`{n}`").cast(t).alias(n) for n, t in types.items()])
        out.repartition(1).write.mode("overwrite").option("maxRecordsPerFile", 0) \
            .option("parquet.block.size", 64 << 20).parquet(str(staging))
        parts = [staging / f for f in os.listdir(staging) if f.endswith(".parquet")]
        n = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
        if n:
            (part,) = parts
            os.replace(part, path)
        elif os.path.exists(path) and not self.log_committed(epoch):  # a file Delta holds stays
            os.remove(path)
        shutil.rmtree(staging, ignore_errors=True)
        return StagedLog(path, n)

    def commit_log(self, epoch: int) -> tuple[str, int, int]:
        """Commit the staged file of `epoch` as one Delta version (a creating job's stateful step).
        Returns (path, rows, version).

        If the log already holds this epoch (a replay after a crash between the Delta commit and the
        catalog commit), nothing is committed and the existing commit is returned."""
        path = self.log_file_path(epoch)
        rows = pq.ParquetFile(path).metadata.num_rows
        with self.log_lock:
            if not self.log_committed(epoch):
                self._commit_files(self.log, [path], [rows], mode="append", schema=log_arrow_schema(self.schema),
                                   app=APP_ID, version=epoch,
                                   stats=[{"minValues": {"_epoch": epoch}, "maxValues": {"_epoch": epoch}}])
            return path, rows, self.log.version()

    def commit_logs(self, files: Sequence[tuple[int, str, int]]) -> int:
        """Add the log files `(epoch, path, rows)` (oldest first), which the catalog holds, to the
        Delta log as one version tagged with their newest epoch; those of epochs the log holds
        already are skipped (its commit landed, the catalog's record of it did not). Returns the
        version that holds them all. The caller holds `log_lock`."""
        self.log.update_incremental()
        done = self.log.transaction_version(APP_ID)
        new = [f for f in files if done is None or f[0] > done]
        if new:
            self._commit_files(self.log, [p for _, p, _ in new], [n for *_, n in new], mode="append",
                               schema=log_arrow_schema(self.schema), app=APP_ID, version=new[-1][0],
                               stats=[{"minValues": {"_epoch": e}, "maxValues": {"_epoch": e}} for e, *_ in new])
        return self.log.version()

    def commit_log_batch(self, epochs: list[int], through: int) -> tuple[list[tuple[int, str, int]], int]:
        """Commit the staged files of `epochs` as one Delta version tagged `through` (a creating
        job's checkpoint covers several upstream epochs). Returns ((epoch, path, rows), version);
        nothing is committed again if the log already holds `through`."""
        done = self.staged_logs(epochs)
        with self.log_lock:
            self.log.update_incremental()
            if done and not self.log_committed(through):
                self._commit_files(self.log, [p for _, p, _ in done], [n for *_, n in done], mode="append",
                                   schema=log_arrow_schema(self.schema), app=APP_ID, version=through,
                                   stats=[{"minValues": {"_epoch": e}, "maxValues": {"_epoch": e}} for e, *_ in done])
            return done, self.log.version()

    def staged_logs(self, epochs: list[int]) -> list[tuple[int, str, int]]:
        """(epoch, path, rows) of the log files that exist among `epochs`."""
        paths = [(e, self.log_file_path(e)) for e in epochs]
        return [(e, p, pq.ParquetFile(p).metadata.num_rows) for e, p in paths if os.path.exists(p)]

    def log_txn(self) -> int | None:
        """The newest epoch whose log commit Delta holds."""
        self.log.update_incremental()
        return self.log.transaction_version(APP_ID)

    def staged(self, epoch: int, rows: int | None = None) -> StagedLog:
        """The log file of `epoch` (written before), without reading its rows: its footer's count, or
        `rows` if the caller knows them (the file is then only checked to exist)."""
        path = self.log_file_path(epoch)
        if rows is not None:
            os.stat(path)
            return StagedLog(path, rows)
        return StagedLog(path, pq.ParquetFile(path).metadata.num_rows)

    def commit_base(self, epoch: int, files: list[str], rows: list[int]) -> tuple[int, list[str], list[int]]:
        """Make `files` (already inside base/) the base as of `epoch`, unless an earlier attempt at
        `epoch` committed its own (a crash after its commit, or another owner's compaction in flight
        at a takeover): its files hold the same rows, so they are adopted and `files` left to
        retention. Returns the Delta version and the base's files and row counts."""
        self.base.update_incremental()
        done = self.base.transaction_version(BASE_APP_ID)
        if done is not None and done > epoch:
            raise RuntimeError(f"the base of {self.name} at epoch {epoch} is superseded: "
                               f"its Delta table already holds the base of epoch {done}")
        if done == epoch and (committed := self.committed_base_files()) is not None:
            return self.base.version(), *committed
        self._commit_files(self.base, files, rows, mode="overwrite", schema=base_arrow_schema(self.schema),
                           app=BASE_APP_ID, version=epoch, stats=None)
        return self.base.version(), files, rows

    def base_file_names(self) -> set[str]:
        """The names of the files in the base Delta table's current version."""
        self.base.update_incremental()
        return {os.path.basename(p) for p in self.base.file_uris()}

    def committed_base_files(self) -> tuple[list[str], list[int]] | None:
        """The files of the base Delta table's current version, in the order they were written, and
        their row counts; None if one is missing (a sweep after a crash removed it)."""
        actions = pa.table(self.base.get_add_actions(flatten=True))
        named = sorted(zip(actions.column("path").to_pylist(), actions.column("num_records").to_pylist(),
                           strict=True), key=lambda f: _written_order(f[0]))
        files = [str(self.base_path / os.path.basename(p)) for p, _ in named]
        if not all(os.path.exists(f) for f in files):
            return None
        return files, [int(n) for _, n in named]

    def checkpoint(self) -> None:
        """Checkpoint each Delta table every `CHECKPOINT_EVERY` versions and clean up the commits
        the checkpoint covers, so opening one reads a bounded log and its folder stops growing."""
        with self.log_lock:
            self._checkpoint(self.log, self.log_path)
        self._checkpoint(self.base, self.base_path)

    @staticmethod
    def _checkpoint(dt: DeltaTable, path: Path) -> None:
        dt.update_incremental()
        marker = path / "_delta_log" / "_last_checkpoint"
        done = json.loads(marker.read_text())["version"] if marker.exists() else -1
        if dt.version() - done < CHECKPOINT_EVERY:
            return
        if dt.metadata().configuration.get("delta.logRetentionDuration") != LOG_RETENTION[
                "delta.logRetentionDuration"]:  # a table created before the setting
            dt.alter.set_table_properties(LOG_RETENTION)
            dt.update_incremental()
        dt.create_checkpoint()
        dt.cleanup_metadata()

    def base_file_prefix(self, epoch: int) -> str:
        return f"c{epoch}-"

    def retire_log_files(self, through: int) -> None:
        """Remove the files of epochs `<= through` from the Delta log's current version (retention),
        as many as it holds: the same after a crash that came before or after this commit. The
        caller holds `log_lock`."""
        self.log.update_incremental()
        now = int(time.time() * 1000)
        actions: list[AddAction | RemoveAction] = [
            RemoveAction(name, True, now, os.path.getsize(p) if os.path.exists(p) else 0)
            for p in self.log.file_uris() if (e := log_file_epoch(name := os.path.basename(p))) is not None
            and e <= through]
        if actions:
            self.log.create_write_transaction(actions, mode="append", schema=log_arrow_schema(self.schema))
            self.log.update_incremental()

    def _commit_files(self, dt: DeltaTable, files: list[str], rows: list[int], *, mode: str, schema: pa.Schema,
                      app: str, version: int, stats: list[dict] | None) -> None:
        actions: list[AddAction | RemoveAction] = []
        for i, (f, n) in enumerate(zip(files, rows, strict=True)):
            st = os.stat(f)
            s = {"numRecords": n, **(stats[i] if stats else {})}
            actions.append(AddAction(os.path.basename(f), st.st_size, {},
                                     int(st.st_mtime * 1000), True, json.dumps(s)))
        dt.create_write_transaction(actions, mode=mode, schema=schema,
                                    commit_properties=CommitProperties(
                                        app_transactions=[Transaction(app, version)]))
        dt.update_incremental()
