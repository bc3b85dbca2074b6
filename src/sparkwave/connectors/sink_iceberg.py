"""The Iceberg sink (pyiceberg's SQL catalog, on SQLite or PostgreSQL): an Iceberg table kept
equal to the MV (upsert) or receiving its inserts (append-only).

Exactly once: each delivery is one catalog commit (one pyiceberg transaction) whose snapshots
carry the sink's position in their summary (`sparkwave.sink-id`, `sparkwave.epoch`,
`sparkwave.vnode`). `progress()` finds the newest snapshot of this sink among the current
snapshot's ancestors, and `write()` looks again right before it commits, so a delivery the table
already holds is never appended twice; the commit itself asserts the table's snapshot has not
moved since (the catalog's compare-and-swap of the metadata location), so a second writer of the
same delivery fails instead of doubling it.

Upsert is copy-on-write: the transaction deletes the rows of every key the delivery changes (a
key filter; pyiceberg rewrites the data files holding them) and appends the new rows. pyiceberg
0.12 writes neither equality nor position deletes (its merge-on-read setting falls back to
copy-on-write), and its `upsert()` takes no deletes, so this is the way it allows. A delivery of
inserts only (+I: keys the MV did not hold, e.g. every sink-backfill chunk) is a plain append,
unless the table held rows when the sink first delivered to it (a sink created again over a
table it filled before): then a key it inserts may be there, and is deleted first."""

from __future__ import annotations

import logging
import os
import posixpath
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.connectors.options import Options, boolean, choice, text
from sparkwave.connectors.sink import APPEND_ONLY, Position, SinkSpec, SinkTarget, deletes_and_upserts
from sparkwave.connectors.sink_delta import local_path
from sparkwave.core.chunk import Op
from sparkwave.core.crash import crash_point
from sparkwave.core.errors import SqlError

log = logging.getLogger("sparkwave.sinks")
SINK_ID, EPOCH, VNODE = "sparkwave.sink-id", "sparkwave.epoch", "sparkwave.vnode"
SHARED = "sparkwave.shared"  # "true": the table held rows when the sink first delivered to it
MARKER = "SPARKWAVE_WAREHOUSE"  # storage/warehouse.py's MARKER (a sideways import; a test checks they agree)
CONNECT_TIMEOUT_S = 10
# A streaming sink commits every few seconds: past this many snapshots the oldest are expired
# (metadata only: every commit rewrites the metadata file, which would grow without end), down to
# half of it; a table the sink creates keeps few old metadata files. Only in a table the sink
# created (EXPIRES set): another's table keeps the history its owner keeps (they may set EXPIRES).
MAX_SNAPSHOTS = 200
EXPIRES = "sparkwave.expire-snapshots"
CREATED_PROPERTIES = {"write.metadata.delete-after-commit.enabled": "true",
                      "write.metadata.previous-versions-max": "20", EXPIRES: "true"}
OPTIONS = Options(
    "iceberg", text("warehouse.path"), text("database.name"), text("table.name"),
    choice("catalog.type", "sql", "jdbc", default="sql"), text("catalog.uri"), text("catalog.name", "default"),
    text("catalog.jdbc.user"), text("catalog.jdbc.password", secret=True), boolean("create_table_if_not_exists", False),
)
# Our types and the Iceberg types (str of pyiceberg's type) a column of them may land in.
_FITS = {
    "boolean": ("boolean",), "smallint": ("int", "long"), "int": ("int", "long"), "bigint": ("long",),
    "real": ("float", "double"), "double": ("double",), "varchar": ("string",), "date": ("date",),
    "timestamp": ("timestamp",), "timestamptz": ("timestamptz",), "bytea": ("binary",),
}
_POSTGRES = ("postgresql", "postgres", "postgresql+psycopg")
_SQLITE = ("sqlite", "sqlite+pysqlite")


def catalog_url(uri: str, user: str | None, password: str | None) -> str:
    """The SQLAlchemy URL of the catalog database `catalog.uri` names (RisingWave's `jdbc:` prefix
    taken): SQLite by an absolute file path, or PostgreSQL through psycopg 3 by host name.
    ValueError completing "option catalog.uri ..." if it is refused: another database, an in-memory
    SQLite (the sink's progress would go with the process), a password or parameters in the URI
    (kept in the catalog's SQL text; give catalog.jdbc.user/password), a Unix-socket host."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    try:
        url = make_url(uri.removeprefix("jdbc:"))
    except ArgumentError:
        raise ValueError(f"{uri!r} is not a database URL (sqlite:////path/catalog.db or "
                         "postgresql://host:port/database)") from None
    if url.drivername in _SQLITE:
        if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
            raise ValueError("must name a SQLite file (sqlite:////path/catalog.db): an in-memory catalog would lose "
                             "the table and the sink's progress with the process")
        if url.query:
            raise ValueError("takes no parameters for SQLite")
        return str(url.set(drivername="sqlite", database=str(Path(url.database).resolve())))
    if url.drivername not in _POSTGRES:
        raise ValueError(f"names a {url.get_backend_name()} database; supported: sqlite:////path/catalog.db, "
                         "postgresql://host:port/database")
    if url.password is not None or url.query:
        raise ValueError("must not carry a password or parameters: give them as catalog.jdbc.user and "
                         "catalog.jdbc.password")
    if not url.host or url.host.startswith(("/", "@")):
        raise ValueError("must name the PostgreSQL host: a Unix-socket directory is refused (the owner would "
                         "connect as its own operating-system user)")
    url = url.set(drivername="postgresql+psycopg", username=user or url.username, password=password or None)
    # psycopg takes libpq's parameters from the query: never the owner's ~/.pgpass, never wait forever
    url = url.update_query_dict({"passfile": os.devnull, "connect_timeout": str(CONNECT_TIMEOUT_S)})
    return url.render_as_string(hide_password=False)


def normalised(options: dict[str, str], warehouse: Path) -> dict[str, str]:
    """The options as stored at CREATE SINK: `warehouse.path` and a SQLite catalog's file absolute
    (a later session may run elsewhere), neither inside sparkwave's own `warehouse`. ValueError
    starting with the option's name if one is refused."""
    options = dict(options)
    root = warehouse.resolve()
    if path := options.get("warehouse.path"):
        try:
            local = local_path(path)
        except ValueError as e:
            raise ValueError(f"warehouse.path {path!r} {e}") from None
        if local is None:
            raise ValueError(f"warehouse.path {path!r} is remote; the Iceberg sink writes to a local path or file:// "
                             "URL (no s3.* options yet)")
        if local == root or root in local.parents:
            raise ValueError(f"warehouse.path {path!r} is inside the warehouse {root}; the Iceberg sink writes "
                             "outside it")
        # a new table's files go to warehouse.path/<database.name>/<table.name> (pyiceberg's default)
        table = local / options.get("database.name", "") / options.get("table.name", "")
        if table == root or root in table.parents or table in root.parents:
            raise ValueError(f"warehouse.path {path!r} with database.name {options.get('database.name')!r} puts the "
                             f"table's files at {table}, which holds or is inside the warehouse {root}; the Iceberg "
                             "sink writes outside it")
        options["warehouse.path"] = str(local)
    if (uri := options.get("catalog.uri")) and uri.removeprefix("jdbc:").startswith("sqlite"):
        try:
            url = catalog_url(uri, None, None)
        except ValueError as e:
            raise ValueError(f"catalog.uri {uri!r} {e}") from None
        db = Path(url.split(":///", 1)[1])
        if db == root or root in db.parents:
            raise ValueError(f"catalog.uri {uri!r} is inside the warehouse {root}")
        options["catalog.uri"] = url
    return options


def _catalog_class() -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    class Catalog(SqlCatalog):
        """pyiceberg's SQL catalog with a crash point inside a commit: the new metadata file is
        written and the catalog row does not point at it yet."""

        @staticmethod
        def _write_metadata(metadata: Any, io: Any, metadata_path: str) -> None:
            SqlCatalog._write_metadata(metadata, io, metadata_path)
            crash_point("sink_mid_iceberg_commit")

        @staticmethod
        def _delete_old_metadata(io: Any, base: Any, metadata: Any) -> None:
            """After a commit pyiceberg deletes the files the table's metadata log no longer names
            (write.metadata.delete-after-commit.enabled). The log is the table's JSON, written by
            whoever wrote the table: only files in the table's own metadata folder are deleted."""
            own = [e for e in base.metadata_log if _inside(e.metadata_file, f"{metadata.location}/metadata")]
            SqlCatalog._delete_old_metadata(io, base.model_copy(update={"metadata_log": own}), metadata)

    return Catalog


def _inside(path: str, folder: str) -> bool:
    """Whether the file `path` (a URL or a path) lies in `folder`, `..` resolved."""
    a, b = urlsplit(path), urlsplit(folder)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc) and posixpath.normpath(a.path).startswith(
        posixpath.normpath(b.path) + "/")


def key_filter(keys: pa.Table, key: list[str]) -> Any:
    """An Iceberg filter matching exactly the rows of these keys (NULL equal to NULL: an MV's group
    may be NULL), as a balanced tree (no deep recursion in pyiceberg's visitors). Each comparison
    is guarded by NOT NULL, so the filter is never NULL: pyiceberg keeps a row only where the
    filter's negation is true, and would drop a row with a NULL key column that a comparison
    left NULL."""
    import pyiceberg.expressions
    ex: Any = pyiceberg.expressions  # pydantic models: mypy's plugin does not see their positional constructors
    unique = keys.group_by(key).aggregate([])
    parts: list[Any]
    if len(key) == 1:
        values = unique[key[0]]
        parts = [ex.And(ex.NotNull(key[0]), ex.In(key[0], values.drop_null().to_pylist()))] \
            if len(values) > values.null_count else []
        parts += [ex.IsNull(key[0])] if values.null_count else []
    else:
        parts = []
        for row in unique.to_pylist():
            terms: list[Any] = [ex.IsNull(k) if row[k] is None else ex.And(ex.NotNull(k), ex.EqualTo(k, row[k]))
                                for k in key]
            parts.append(terms[0] if len(terms) == 1 else ex.And(*terms))
    if not parts:
        return ex.AlwaysFalse()
    while len(parts) > 1:
        parts = [ex.Or(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


class IcebergSink(SinkTarget):
    exactly_once = True

    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        values = spec.check_options(OPTIONS)
        self.warehouse = spec.required("warehouse.path", "the folder new Iceberg tables are created in")
        namespace = spec.required("database.name", "the Iceberg namespace")
        table = spec.required("table.name", "the Iceberg table")
        uri = spec.required("catalog.uri", "the SQL catalog's database: sqlite:////path/catalog.db or "
                                           "postgresql://host:port/database")
        try:
            self.url = catalog_url(uri, spec.option("catalog.jdbc.user"), spec.option("catalog.jdbc.password"))
        except ValueError as e:
            raise spec.error(f"option catalog.uri {e}") from None
        try:
            local = local_path(self.warehouse)
        except ValueError as e:
            raise spec.error(f"option warehouse.path {e}") from None
        if local is None:
            raise spec.error(f"warehouse.path {self.warehouse!r} is remote; the Iceberg sink writes to a local path")
        self.warehouse_uri = local.as_uri()
        self.catalog_name = OPTIONS.value(values, "catalog.name")
        self.create = OPTIONS.value(values, "create_table_if_not_exists")
        self.ident = (*namespace.split("."), table)
        for part in self.ident:  # the table's files go to warehouse.path/<namespace>.db/<table>: nowhere else
            if not part.strip() or part in (".", "..") or any(c in part for c in "/\\\0"):
                raise spec.error(f"database.name {namespace!r} and table.name {table!r} must be plain names "
                                 f"(no '/', '\\' or '..': {part!r}); the table's files are written under "
                                 "warehouse.path")
        self.where = f"Iceberg table {namespace}.{table} in catalog {self.catalog_name!r}"
        self.arrow = pa.schema([pa.field(c.name, c.type.arrow) for c in spec.columns])
        self._catalog: Any = None

    def _connect(self) -> Any:
        if self._catalog is None:
            self._catalog = _catalog_class()(self.catalog_name, uri=self.url, warehouse=self.warehouse_uri)
        return self._catalog

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.engine.dispose()
            self._catalog = None

    def check(self) -> None:
        """The table exists (or is created with `create_table_if_not_exists`) and holds every column
        of the sink, optional, in a type that fits."""
        from pyiceberg.exceptions import NoSuchTableError
        try:
            catalog = self._connect()
            try:
                table = catalog.load_table(self.ident)
            except NoSuchTableError:
                if not self.create:
                    raise self.spec.error(f"{self.where} does not exist (create_table_if_not_exists = 'true' "
                                          "creates it)") from None
                catalog.create_namespace_if_not_exists(self.ident[:-1])
                catalog.create_table_if_not_exists(self.ident, schema=self.arrow, properties=CREATED_PROPERTIES)
                return
        except SqlError:
            raise
        except Exception as e:
            raise self.spec.error(f"cannot use the {self.where}: {' '.join(str(e).split())[:300]}") from None
        self._outside_warehouses(table.location())
        self._check_columns(table.schema())

    def _outside_warehouses(self, location: str) -> None:
        """An existing table's location is its writer's choice (or its namespace's): the sink never
        writes files into a sparkwave warehouse (a folder holding its marker), this one or another."""
        try:
            local = local_path(location)
        except ValueError as e:
            raise self.spec.error(f"the {self.where} is at {location!r}, which {e}") from None
        for folder in (local, *local.parents) if local is not None else ():
            if (folder / MARKER).exists():
                raise self.spec.error(f"the {self.where} is at {local}, inside the sparkwave warehouse {folder}; "
                                      "the Iceberg sink writes outside it")

    def _check_columns(self, schema: Any) -> None:
        mine = {c.name for c in self.spec.columns}
        for f in schema.fields:
            if f.required and f.name not in mine:
                raise self.spec.error(f"{self.where} has a required column {f.name!r} the sink does not deliver")
        for c in self.spec.columns:
            try:
                f = schema.find_field(c.name)
            except ValueError:
                raise self.spec.error(f"column {c.name!r} ({c.type.name}) is missing from the {self.where}") from None
            have = str(f.field_type)
            fits = (have.startswith("decimal(") and c.type.arrow.scale == f.field_type.scale
                    and c.type.arrow.precision <= f.field_type.precision) if c.type.name.startswith(
                "decimal") else have in _FITS.get(c.type.name, ())
            if not fits:
                raise self.spec.error(f"column {c.name!r} is {c.type.name} in the sink but {have} in the {self.where}")
            if f.required:
                raise self.spec.error(f"column {c.name!r} is required in the {self.where}; the sink's columns may "
                                      "hold NULL, so it writes to optional columns only")

    def _held(self, table: Any) -> tuple[Position | None, bool]:
        """The position of this sink's newest snapshot in the table's current lineage, and whether
        the table is shared: it held rows before the sink's first delivery (then an insert may
        meet a row of its key, and no delivery takes the inserts-only path)."""
        from pyiceberg.table.snapshots import ancestors_of
        current = table.current_snapshot()
        for snap in ancestors_of(current, table.metadata):
            summary = snap.summary
            if summary is not None and summary[SINK_ID] == self.spec.sink_id:
                return Position(int(summary[EPOCH] or 0), int(summary[VNODE] or 0)), summary[SHARED] != "false"
        return None, current is not None and (current.summary is None or current.summary["total-records"] != "0")

    def progress(self) -> Position | None:
        return self._held(self._connect().load_table(self.ident))[0]

    def write(self, change: pa.Table, to: Position) -> None:
        table = self._connect().load_table(self.ident)
        self._outside_warehouses(table.location())  # a few stat calls: the table may have moved since CREATE
        held, shared = self._held(table)
        if held is not None and held >= to:  # committed before a crash, the catalog not told: not again
            log.info("sink %s: the %s already holds %s; delivery to %s skipped", self.spec.name, self.where, held, to)
            return
        names = [c.name for c in self.spec.columns]
        gone, new = deletes_and_upserts(change, self.spec.mode, self.spec.key)
        props = {SINK_ID: self.spec.sink_id, EPOCH: str(to.epoch), VNODE: str(to.vnode),
                 SHARED: str(shared).lower(), "sparkwave.sink": self.spec.name}
        tx = table.transaction()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Delete operation did not match any records" is no news here
            all_inserts = pc.all(pc.equal(new["_op"], int(Op.INSERT))).as_py() is not False
            inserts_only = not shared and not gone.num_rows and all_inserts
            if self.spec.mode != APPEND_ONLY and self.spec.key and not inserts_only:
                key = list(self.spec.key)
                tx.delete(key_filter(pa.concat_tables([gone.select(key), new.select(key)]), key),
                          snapshot_properties=props)
            # always an append, if empty: the last snapshot carries the position (a delete that
            # matches nothing makes none)
            tx.append(new.select(names).cast(self.arrow), snapshot_properties=props)
        crash_point("sink_before_target_commit")
        from pyiceberg.exceptions import CommitFailedException
        try:
            tx.commit_transaction()
        except CommitFailedException as e:
            raise self.spec.error(f"the {self.where} moved while the sink committed to it (another writer?): "
                                  f"{e}; the delivery is retried from the position the table holds") from None
        self._expire(tx.table_metadata)

    def _expire(self, metadata: Any) -> None:
        """Expire the oldest snapshots past `MAX_SNAPSHOTS` of a table the sink created (best effort:
        the delivery is committed).
        The newest kept are the sink's latest, so `progress()` still finds its position."""
        if len(metadata.snapshots) <= MAX_SNAPSHOTS or metadata.properties.get(EXPIRES) != "true":
            return
        oldest = sorted(metadata.snapshots, key=lambda snap: (snap.sequence_number or 0, snap.timestamp_ms))
        # a branch's or tag's snapshot cannot be expired (pyiceberg refuses the whole call): kept
        held = {metadata.current_snapshot_id, *(ref.snapshot_id for ref in metadata.refs.values())}
        ids = [snap.snapshot_id for snap in oldest[:len(oldest) - MAX_SNAPSHOTS // 2] if snap.snapshot_id not in held]
        try:
            self._connect().load_table(self.ident).maintenance.expire_snapshots().by_ids(ids).commit()
        except Exception as e:  # the next commit tries again
            log.warning("sink %s: expiring %d old snapshots of the %s failed: %s", self.spec.name, len(ids),
                        self.where, e)

