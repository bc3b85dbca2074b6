"""The deltalake connector as a source: an external Delta table (written by another job) read
version by version.

    CREATE SOURCE s (...) WITH (connector = 'deltalake', location = '/path/to/table',
        scan.startup.mode = 'earliest' | 'latest', source_rate_limit = n, max.rows.per.epoch = n)
    CREATE TABLE t (..., PRIMARY KEY (k)) WITH (connector = 'deltalake', location = '...')

One split ("0"); an offset is a Delta version, so exactly once is by version: an epoch's plan takes
versions `[start, end)` and commits `end`. A version's rows are read from its commit file in the
table's `_delta_log`:
- its change-data files (`cdc` actions) when it has them: `insert` and `update_postimage` rows are
  upserts, `delete` rows delete their key, pre-images are dropped (a TABLE with a PRIMARY KEY; an
  append-only relation takes only inserts and names the version that does more);
- otherwise the files it added (`add` with `dataChange`): an append;
- with the feed on but no change files (delta-rs writes none for an overwrite), the protocol's
  changes: the removed files' rows delete their keys, then the added files' rows (a key's delete
  sorts before its insert within a version, by `_seq`);
- a version that removes files with `dataChange` while the feed is off (an UPDATE, DELETE or
  overwrite without `delta.enableChangeDataFeed`) stops the source at that version, with an error
  naming it (in SHOW JOBS and SHOW SOURCES): its changes cannot be known without reading the
  whole table again. A version that only rearranges files (OPTIMIZE: no `dataChange`) adds nothing.

`scan.startup.mode = 'earliest'` starts at version 0 (the table's whole history, so the rows an MV
over the source sees are the table as of each version), `'latest'` after the version current at
CREATE. A source backfill reads the versions up to its snapshot epoch's, then the versions after it.
The rate limit counts a version's rows (its files' record counts); an epoch takes at least one
version. Files are read as the posix_fs connector reads Parquet (`file_reader.py`), and never from
outside the table's folder. Deletion vectors and column mapping are refused by name."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from sparkwave.connectors.base import Connector
from sparkwave.connectors.file_reader import OutsideRoot, ReadSpec, Task, inside, open_inside
from sparkwave.connectors.files import read_ddl, read_tasks
from sparkwave.connectors.options import Options, choice, max_rows_per_epoch, rate_limit, text
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Column, Schema, parse_type

VERSION_SHIFT = 40  # `_seq` = version << 40 | upsert << 39 | row within the version
UPSERT_BIT = 1 << 39
MAX_VERSION = 1 << (63 - VERSION_SHIFT)
CACHED_VERSIONS = 256

OPTIONS = Options(
    "deltalake",
    choice("connector", "deltalake"),
    text("location"),
    choice("scan.startup.mode", "earliest", "latest", default="earliest"),
    rate_limit("source_rate_limit"),
    max_rows_per_epoch(),
)


APPEND_ONLY = ("and the relation is append-only (a SOURCE, or a TABLE without a PRIMARY KEY): create a TABLE with "
               "the Delta table's key as its PRIMARY KEY to take updates and deletes")


class DeltaVersionError(SqlError):
    """A version the source cannot read as a change (it names the version and why)."""


@dataclass
class Version:
    """What one commit of the table changed, as the source reads it."""

    number: int
    operation: str
    files: list[dict[str, Any]] = field(default_factory=list)  # add or cdc actions read, in commit order
    change_feed: bool = False
    rows: int = 0


def table_path(location: str) -> str:
    """A local Delta table's folder from `location` (a path or a file:// URL)."""
    if location.startswith("file:"):
        location = unquote(urlparse(location).path)
    if not os.path.isabs(location):
        raise ValueError("must be an absolute path or a file:// URL (only local tables are read)")
    return os.path.normpath(location)


def log_path(root: str, version: int) -> str:
    return os.path.join(root, "_delta_log", f"{version:020d}.json")


def latest_version(root: str) -> int:
    """The newest committed version (-1: none), from the commit files in `_delta_log`."""
    versions = [int(n[:20]) for n in os.listdir(os.path.join(root, "_delta_log"))
                if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()]
    return max(versions, default=-1)


def arrow_sql_type(t: pa.DataType) -> str | None:
    """The SQL type a Delta column's Arrow type maps to (None: none does)."""
    simple = [(pa.types.is_int8, "smallint"), (pa.types.is_int16, "smallint"), (pa.types.is_int32, "int"),
              (pa.types.is_int64, "bigint"), (pa.types.is_float32, "real"), (pa.types.is_float64, "double"),
              (pa.types.is_boolean, "boolean"), (pa.types.is_date32, "date"), (pa.types.is_binary, "bytea"),
              (pa.types.is_large_binary, "bytea"), (pa.types.is_string, "varchar"),
              (pa.types.is_large_string, "varchar"), (pa.types.is_string_view, "varchar")]
    for test, name in simple:
        if test(t):
            return name
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    return None


class DeltaSource(Connector):
    has_bad_records = True
    OPTIONS = OPTIONS

    @property
    def where(self) -> str:
        return f"source {self.table!r}"

    @staticmethod
    def table_columns(options: dict[str, str]) -> list[Column]:
        """The Delta table's columns as SQL columns (a CREATE that declares none takes them)."""
        from deltalake import DeltaTable
        try:
            root = table_path(options.get("location", ""))
            schema = pa.schema(DeltaTable(root).schema().to_arrow())
        except Exception as e:  # no such table, not a Delta table, a damaged log: nothing is created
            raise SqlError(f"the columns of Delta table {options.get('location', '')!r} cannot be read ({e}); "
                           "declare them, or name a Delta table") from None
        out = []
        for f in schema:
            name = arrow_sql_type(f.type)
            if name is None:
                raise SqlError(f"Delta table {root!r}: column {f.name!r} of type {f.type} has no SQL type here; "
                               "declare the columns to read")
            out.append(Column(f.name.lower(), parse_type(name)))
        return out

    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        super().__init__(table, schema, options)
        try:
            self.root = table_path(self.value("location") or "")
        except ValueError as e:
            raise SqlError(f"{self.where}: option location {e}") from None
        row_id = "_row_id" if schema.append_only else None
        self.spec = ReadSpec([(c.name, c.type.name) for c in schema.columns], row_id, "parquet", self.root,
                             append_only=schema.append_only, key=() if schema.append_only else tuple(schema.key))
        self._versions: dict[int, Version] = {}

    def _table_error(self, what: str) -> SqlError:
        return SqlError(f"{self.where}: Delta table {self.root!r}: {what}")

    def initial_offsets(self) -> dict[str, int]:
        """Where the source starts (version 0, or after the current one); a CREATE fails here when
        the location holds no Delta table."""
        if not os.path.isdir(os.path.join(self.root, "_delta_log")):
            raise self._table_error("no Delta table there (no _delta_log folder)")
        latest = latest_version(self.root)
        if self.value("scan.startup.mode") == "latest":
            return {"0": latest + 1}
        if latest >= 0 and not os.path.exists(log_path(self.root, 0)):
            raise self._table_error("version 0 is no longer in the Delta log (its commits were cleaned up); "
                                    "read from the current version on with scan.startup.mode = 'latest'")
        return {"0": 0}

    def in_background(self) -> DeltaSource:
        self.spec = dataclasses.replace(self.spec, background=True)
        return self

    # --- the log ----------------------------------------------------------------------------------
    def version(self, v: int) -> Version:
        """Version `v` as the source reads it; DeltaVersionError if it cannot be read as a change."""
        if (cached := self._versions.get(v)) is not None:
            return cached
        try:
            with open(log_path(self.root, v), "rb") as log:
                actions = [json.loads(line) for line in log if line.strip()]
        except FileNotFoundError:
            raise DeltaVersionError(f"{self.where}: version {v} of Delta table {self.root!r} is no longer in its "
                                    "log (cleaned up after a checkpoint)") from None
        except ValueError as e:  # not JSON lines (UnicodeDecodeError too): the source stops here, saying why
            raise DeltaVersionError(f"{self.where}: version {v} of Delta table {self.root!r}: its commit file "
                                    f"{log_path(self.root, v)!r} cannot be read: {e}") from None
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        out = Version(v, str(info.get("operation", "?")))
        adds = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
        removes = [a["remove"] for a in actions if "remove" in a and a["remove"].get("dataChange", True)]
        cdcs = [a["cdc"] for a in actions if "cdc" in a]
        named = f"{self.where}: version {v} of Delta table {self.root!r} ({out.operation})"
        if any(a.get("deletionVector") for a in adds):
            raise DeltaVersionError(f"{named} uses deletion vectors, which this reader does not apply")
        meta: dict[str, Any] = next((a["metaData"] for a in actions if "metaData" in a), {})
        if meta.get("configuration", {}).get("delta.columnMapping.mode", "none") != "none":
            raise DeltaVersionError(f"{named} uses column mapping, which this reader does not apply")
        if cdcs:
            if removes and self.schema.append_only:
                raise DeltaVersionError(f"{named} updates or deletes rows, {APPEND_ONLY}")
            out.files, out.change_feed = cdcs, True
        elif removes and not self._feed_enabled(v):
            raise DeltaVersionError(f"{named} rewrites files without a change data feed, so its updates and deletes "
                                    "cannot be read; set TBLPROPERTIES (delta.enableChangeDataFeed = true) on the "
                                    "table before changing rows, or recreate the source after this version "
                                    "(scan.startup.mode = 'latest')")
        elif removes and self.schema.append_only:
            raise DeltaVersionError(f"{named} removes files (their rows are deleted), {APPEND_ONLY}")
        else:  # with the feed enabled and no change files, the protocol's changes: removed rows, then added rows
            out.files = [{**r, "_deletes": True} for r in removes] + adds
        for f in out.files:
            f["_rows"] = self._records(f, named)
        out.rows = sum(f["_rows"] for f in out.files)
        if len(self._versions) >= CACHED_VERSIONS:
            self._versions.pop(next(iter(self._versions)))
        self._versions[v] = out
        return out

    def _feed_enabled(self, v: int) -> bool:
        """Whether the table's change data feed is on at version `v` (its configuration as of `v`)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError
        try:
            config = DeltaTable(self.root, version=v).metadata().configuration
        except DeltaError as e:  # a log delta-rs cannot read as of `v`: the source stops here, saying why
            raise DeltaVersionError(f"{self.where}: version {v} of Delta table {self.root!r} cannot be read: "
                                    f"{e}") from None
        return str(config.get("delta.enableChangeDataFeed", "false")).lower() == "true"

    def _path(self, action: dict[str, Any], named: str) -> str:
        """A data file's path, which must lie inside the table's folder."""
        raw = action["path"]
        parsed = urlparse(raw)
        path = unquote(parsed.path) if parsed.scheme in ("file", "") else None
        if path is None:
            raise DeltaVersionError(f"{named}: file {raw!r} is not a local file")
        full = path if os.path.isabs(path) else os.path.join(self.root, path)
        try:
            inside(self.root, full)
        except OutsideRoot:
            raise DeltaVersionError(f"{named}: file {raw!r} lies outside the table's folder") from None
        return full

    def _records(self, action: dict[str, Any], named: str) -> int:
        """A file's record count: its statistics, else its footer."""
        stats = action.get("stats")
        if stats:
            n = json.loads(stats).get("numRecords")
            if isinstance(n, int):
                return n
        path = self._path(action, named)
        try:
            with open_inside(self.root, path) as f:
                return int(pq.ParquetFile(f).metadata.num_rows)
        except (OSError, pa.ArrowException) as e:  # (ArrowInvalid: not Parquet)
            raise DeltaVersionError(f"{named}: file {action['path']!r} cannot be read: {e}") from None

    # --- planning and reading ---------------------------------------------------------------------
    def plan(self, committed: dict[str, int], elapsed_ms: float) -> dict[str, list[int]]:
        if self.paused():
            return {}
        start = committed.get("0", 0)
        try:
            latest = latest_version(self.root)
            budget, rows, end = self.budget(elapsed_ms), 0, start
            while end <= latest:
                try:
                    n = self.version(end).rows
                except SqlError:
                    if end > start:
                        break  # the versions before it first; it stops the source at the next plan
                    raise
                if end > start and rows + n > budget:
                    break
                rows, end = rows + n, end + 1
        except (SqlError, OSError) as e:
            self.status = str(e) if isinstance(e, SqlError) else f"Delta table {self.root!r}: {e}"
            return {}
        self.status = None
        return {"0": [start, end]} if end > start else {}

    def tasks(self, ranges: dict[str, list[int]]) -> list[Task]:
        tasks = []
        for _, (lo, hi) in ranges.items():
            for v in range(lo, hi):
                if v >= MAX_VERSION:
                    raise DeltaVersionError(f"{self.where}: Delta table {self.root!r} has passed version "
                                            f"{MAX_VERSION - 1}, the last this source can number its rows by")
                version, base = self.version(v), 0
                named = f"version {v} of Delta table {self.root!r}"
                for f in version.files:
                    if f["_rows"]:
                        tasks.append(Task(self._path(f, named), 0, f["_rows"], (v << VERSION_SHIFT) + base,
                                          f"{named}, file {f['path']!r}", f.get("partitionValues") or {},
                                          version.change_feed, UPSERT_BIT, bool(f.get("_deletes"))))
                    base += f["_rows"]
                if base >= UPSERT_BIT:
                    raise DeltaVersionError(f"{self.where}: {named} has {base} rows, more than one version can "
                                            f"hold here ({UPSERT_BIT})")
        return tasks

    def read(self, spark: SparkSession, ranges: dict[str, list[int]]) -> DataFrame:
        return read_tasks(spark, self.spec, self.tasks(ranges), read_ddl(self.schema))

    def positions(self, seq: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        s = seq.to_numpy()
        return pa.array(["0"] * len(s), pa.string()), pa.array(s >> VERSION_SHIFT)

