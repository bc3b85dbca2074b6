"""The PostgreSQL sink (psycopg 3): exactly once by committing each delivery's rows and the sink's
position in one PostgreSQL transaction.

A delivery COPYs its change (CSV, written by Arrow) into a temporary table, deletes the target's
rows of every key it changes and inserts the new rows (an append-only sink COPYs straight into the
target), and upserts `(sink_id, epoch, vnode)` into `sparkwave_sink_progress` in the same
database. After a crash the sink reads that row and skips what PostgreSQL already has: no
reliance on idempotence, deletes included (RisingWave's JDBC sink met duplicate keys after
recovery, RW #10251)."""

from __future__ import annotations

import functools
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from sparkwave.connectors.options import Options, boolean, integer, text
from sparkwave.connectors.sink import APPEND_ONLY, Position, SinkSpec, SinkTarget, deletes_and_upserts
from sparkwave.core.crash import crash_point
from sparkwave.core.schema import SqlType

PROGRESS_TABLE = "sparkwave_sink_progress"
CONNECT_TIMEOUT_S = 10
OPTIONS = Options("postgres", text("host", "localhost"), integer("port", 1, 65535, 5432), text("user"),
                  text("password", secret=True), text("database"), text("table"), text("schema"),
                  boolean("auto.create", False))

# Our types and the PostgreSQL types (information_schema's `data_type`) a column of them may land
# in: the same type, or a wider one.
_FITS = {
    "boolean": ("boolean",),
    "smallint": ("smallint", "integer", "bigint", "numeric"),
    "int": ("integer", "bigint", "numeric"),
    "bigint": ("bigint", "numeric"),
    "real": ("real", "double precision"),
    "double": ("double precision",),
    "varchar": ("text", "character varying"),
    "date": ("date",),
    "timestamp": ("timestamp without time zone",),
    "timestamptz": ("timestamp with time zone",),
    "bytea": ("bytea",),
}
_CREATE = {"int": "integer", "double": "double precision", "varchar": "text",
           "timestamp": "timestamp without time zone", "timestamptz": "timestamp with time zone"}


def pg_type(t: SqlType) -> str:
    """The PostgreSQL type a column of ours is created as (`auto.create`)."""
    if t.name.startswith("decimal"):
        return "numeric" + t.name[len("decimal"):]
    return _CREATE.get(t.name, t.name)


def without_nul(change: pa.Table, key: tuple[str, ...]) -> tuple[pa.Table, str | None]:
    """PostgreSQL text cannot hold NUL (U+0000), which sparkwave's can: the sink removes it from
    text values, and does not deliver a row whose key holds one (no PostgreSQL row can stand for
    that key; removing it could land on another key's row). Returns the change as delivered and,
    if it had any NUL, a note naming the first column and key."""
    hits = {}
    for name in change.column_names:
        if pa.types.is_string(change.schema.field(name).type):
            has = pc.fill_null(pc.match_substring(change[name], "\x00"), False)
            if pc.any(has).as_py():
                hits[name] = has
    if not hits:
        return change, None
    name = next(iter(hits))
    first = pc.index(hits[name], True).as_py()
    row = "a row" if not key else "the row with key (" + ", ".join(
        f"{k} = {change[k][first].as_py()!r}" for k in key) + ")"
    note = (f"column {name} of {row} holds NUL (U+0000), which PostgreSQL text cannot hold: "
            + ("the row is not delivered" if name in key else "removed from the value")
            + " (the sink removes NUL from text values and does not deliver rows whose key holds one)")
    if in_key := [hits[k] for k in key if k in hits]:
        change = change.filter(pc.invert(functools.reduce(pc.or_, in_key)))
    for n in hits:
        if n not in key:
            change = change.set_column(change.schema.get_field_index(n), n,
                                       pc.replace_substring(change[n], "\x00", ""))
    return change, note


class PostgresSink(SinkTarget):
    exactly_once = True

    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        values = spec.check_options(OPTIONS)
        self.host = OPTIONS.value(values, "host") or "localhost"
        if any(h.strip().startswith(("/", "@")) for h in self.host.split(",")):
            raise spec.error(f"option host must be host names or addresses, got {self.host!r}: a Unix-socket directory "
                             "is refused (the owner would connect as its own operating-system user)")
        self.port = OPTIONS.value(values, "port")
        self.user = spec.required("user", "the PostgreSQL role")
        self.password = spec.option("password", "") or ""
        self.database = spec.required("database", "the database")
        table = spec.required("table", "the target table")
        schema, _, name = table.rpartition(".")
        self.schema = spec.option("schema") or schema or "public"
        self.table = name
        self.auto_create = OPTIONS.value(values, "auto.create")
        self._conn: Any = None
        self._staged = False
        # The target has a unique index on exactly the key: a delivery of new keys may be COPYed straight
        # in (a key it already holds fails the COPY, which then goes the general way).
        self._unique = False

    @property
    def where(self) -> str:
        return f"{self.schema}.{self.table} in database {self.database} at {self.host}:{self.port}"

    # --- connection -----------------------------------------------------------------------------
    def _connect(self) -> Any:
        import psycopg
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self.close()
        try:
            self._conn = psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                                         passfile=os.devnull,  # the owner's ~/.pgpass is not the sink's
                                         dbname=self.database, connect_timeout=CONNECT_TIMEOUT_S,
                                         application_name=f"sparkwave-sink-{self.spec.name}")
        except psycopg.Error as e:
            reason = " ".join(str(e).split())[:300]
            raise self.spec.error(f"cannot connect to PostgreSQL at {self.host}:{self.port} as {self.user!r} "
                                  f"(database {self.database!r}): {reason}") from None
        self._staged = False
        return self._conn

    def cancel(self) -> None:
        """Interrupt a statement in flight (a COPY or DELETE waiting on a lock): DROP SINK and close
        must not wait for the target."""
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                conn.cancel_safe(timeout=5.0)
            except Exception:  # the connection is going anyway
                return

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _ident(self) -> Any:
        from psycopg import sql
        return sql.Identifier(self.schema, self.table)

    # --- CREATE ---------------------------------------------------------------------------------
    def check(self) -> None:
        """The progress table exists; the target table exists (or is created with `auto.create`) and
        holds every column of the sink in a type that fits."""
        import psycopg
        try:
            self._check()
        except psycopg.Error as e:
            raise self.spec.error(f"PostgreSQL refused the sink's checks on {self.where}: "
                                  f"{' '.join(str(e).split())[:300]}") from None

    def _progress_table(self) -> Any:
        from psycopg import sql
        return sql.Identifier(self.schema, PROGRESS_TABLE)

    def _check(self) -> None:
        from psycopg import sql
        conn = self._connect()
        with conn.transaction():
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (sink_id text PRIMARY KEY, sink text NOT NULL, "
                                 "epoch bigint NOT NULL, vnode integer NOT NULL, "
                                 "updated_at timestamptz NOT NULL DEFAULT now())").format(self._progress_table()))
            found = dict(conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s AND "
                "table_name = %s", (self.schema, self.table)).fetchall())
            if not found:
                if not self.auto_create:
                    raise self.spec.error(f"table {self.where} does not exist (auto.create = 'true' creates it)")
                cols = [sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(pg_type(c.type)))
                        for c in self.spec.columns]
                if self.spec.key:  # NULLS NOT DISTINCT: an MV's key may hold a NULL (a group of NULLs)
                    cols.append(sql.SQL("UNIQUE NULLS NOT DISTINCT ({})").format(
                        sql.SQL(", ").join(map(sql.Identifier, self.spec.key))))
                conn.execute(sql.SQL("CREATE TABLE {} ({})").format(self._ident(), sql.SQL(", ").join(cols)))
                self._unique = bool(self.spec.key)
                return
            self._unique = bool(self.spec.key) and conn.execute(
                "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON "
                "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND "
                "i.indpred IS NULL AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a "
                "WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey)) = %s::text[]",
                (self.schema, self.table, sorted(self.spec.key))).fetchone() is not None
        for c in self.spec.columns:
            have = found.get(c.name)
            if have is None:
                raise self.spec.error(f"column {c.name!r} ({c.type.name}) is missing from table {self.where}")
            fits = ("numeric",) if c.type.name.startswith("decimal") else _FITS.get(c.type.name, (c.type.name,))
            if have not in fits:
                raise self.spec.error(f"column {c.name!r} is {c.type.name} in the sink but {have} in table "
                                      f"{self.where}")

    # --- delivery -------------------------------------------------------------------------------
    def progress(self) -> Position | None:
        from psycopg import sql
        conn = self._connect()
        with conn.transaction():
            row = conn.execute(sql.SQL("SELECT epoch, vnode FROM {} WHERE sink_id = %s").format(
                self._progress_table()), (self.spec.sink_id,)).fetchone()
        return Position(int(row[0]), int(row[1])) if row else None

    def write(self, change: pa.Table, to: Position) -> None:
        from psycopg import sql
        conn = self._connect()
        names = [c.name for c in self.spec.columns]
        cols = sql.SQL(", ").join(map(sql.Identifier, names))
        change, note = without_nul(change, self.spec.key)
        self.note = self.note or note
        gone, new = deletes_and_upserts(change, self.spec.mode, self.spec.key)
        with conn.transaction():
            if self.spec.mode == APPEND_ONLY or not self.spec.key:
                self._copy(conn, sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(self._ident(), cols),
                           new.select(names))
            elif self._unique and not gone.num_rows and self._insert_only(conn, cols, new.select(names)):
                pass
            else:
                stage = sql.Identifier("_sparkwave_stage")
                if not self._staged:  # one per connection, emptied at each commit
                    conn.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} AS SELECT true AS _new, {} FROM {} "
                                         "WITH NO DATA").format(stage, cols, self._ident()))
                    conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(stage))
                    self._staged = True
                conn.execute(sql.SQL("TRUNCATE {}").format(stage))
                rows = pa.concat_tables([
                    gone.select(names).add_column(0, "_new", pa.array([False] * gone.num_rows, pa.bool_())),
                    new.select(names).add_column(0, "_new", pa.array([True] * new.num_rows, pa.bool_()))])
                self._copy(conn, sql.SQL("COPY {} (_new, {}) FROM STDIN (FORMAT csv)").format(stage, cols), rows)
                match = sql.SQL(" AND ").join(sql.SQL("t.{k} = s.{k}").format(k=sql.Identifier(k))
                                              for k in self.spec.key)
                conn.execute(sql.SQL("DELETE FROM {} t USING {} s WHERE {}").format(self._ident(), stage, match))
                if any(rows[k].null_count for k in self.spec.key):  # `=` misses NULL keys: those by row
                    null_key = sql.SQL(" OR ").join(sql.SQL("s.{} IS NULL").format(sql.Identifier(k))
                                                    for k in self.spec.key)
                    same = sql.SQL(" AND ").join(sql.SQL("t.{k} IS NOT DISTINCT FROM s.{k}").format(
                        k=sql.Identifier(k)) for k in self.spec.key)
                    conn.execute(sql.SQL("DELETE FROM {} t USING {} s WHERE ({}) AND {}").format(
                        self._ident(), stage, null_key, same))
                conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE _new").format(
                    self._ident(), cols, cols, stage))
            conn.execute(sql.SQL("INSERT INTO {} (sink_id, sink, epoch, vnode) VALUES (%s, %s, %s, %s) "
                                 "ON CONFLICT (sink_id) DO UPDATE SET epoch = excluded.epoch, vnode = excluded.vnode, "
                                 "updated_at = now()").format(self._progress_table()),
                         (self.spec.sink_id, self.spec.name, to.epoch, to.vnode))
            crash_point("sink_before_target_commit")

    def _insert_only(self, conn: Any, cols: Any, rows: pa.Table) -> bool:
        """A delivery of new keys only (a backfill chunk, an append): COPY straight into the target,
        which holds exactly the MV's rows, so none of these keys is there; should the table hold a
        row of its own under one of them, the unique violation sends the delivery the general way."""
        import psycopg
        from psycopg import sql
        try:
            with conn.transaction():  # a savepoint
                self._copy(conn, sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(self._ident(), cols), rows)
        except psycopg.errors.UniqueViolation:
            return False
        return True

    @staticmethod
    def _copy(conn: Any, statement: Any, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        for i, f in enumerate(rows.schema):
            if pa.types.is_binary(f.type):  # COPY reads bytea as PostgreSQL's hex text
                hexed = pa.array([None if v is None else "\\x" + v.hex() for v in rows.column(i).to_pylist()],
                                 pa.string())
                rows = rows.set_column(i, f.name, hexed)
        sink = pa.BufferOutputStream()
        pacsv.write_csv(rows.combine_chunks(), sink, pacsv.WriteOptions(include_header=False))
        data = sink.getvalue().to_pybytes()
        with conn.cursor() as cur, cur.copy(statement) as copy:
            half = len(data) // 2
            copy.write(data[:half])
            crash_point("sink_mid_copy")
            copy.write(data[half:])
