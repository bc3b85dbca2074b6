"""The catalog on PostgreSQL: one database (or the schema its `search_path` names) per warehouse,
shared by the hosts that may own the warehouse one after another.

SQL: the catalog's modules write SQLite's dialect; `translate` turns each statement into
PostgreSQL's once (cached): `?` placeholders, `INSERT OR REPLACE` / `OR IGNORE` as `ON CONFLICT`
on the table's primary key (read from the database), `json_extract` as `->>`, `CAST(x AS
INTEGER)` as SQLite's lenient leading-integer parse, `RETURNING id` for `lastrowid`, and the
schema's types (`INTEGER` -> `BIGINT`, `REAL` -> `DOUBLE PRECISION`, `AUTOINCREMENT` -> `BIGSERIAL`).

Ownership and fencing (`meta/ownership.py` takes them): the owner holds a session-level advisory
lock on a connection of its own, which the server releases when that connection ends (the
owner's process died, or its host went away: the server's TCP keepalives are set short on it),
so another host's `sparkwave serve` takes over. A takeover increments the generation in the one
row of `sparkwave_owner`; every write transaction of an owner's catalog begins by updating that
row `WHERE generation = <its own>`. That UPDATE takes the row's lock, so writers serialise on it
as on SQLite's write lock, and a takeover's increment waits for a commit in flight; an owner
that lost its lock finds 0 rows and its transaction is refused (`OwnershipError`): an epoch it
computed after the takeover never commits. The same row's `changes` counter is `Catalog.changes()`."""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sparkwave.core.catalog.backend import CORE_TABLES, Backend, CatalogDb, DbIntegrityError
from sparkwave.core.errors import CatalogError, OwnershipError

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("sparkwave.catalog")
LOCK_CLASS = 0x5357  # the advisory lock's first key ("SW"); the second is the schema's hash
_LOCK_ARGS = f"{LOCK_CLASS}, hashtext(current_schema())"
_BOOTSTRAP_LOCK = 0x5358
_SERIAL_TABLES = ("dml", "pins", "jobs", "requests")  # their `id` is what `lastrowid` returns

_BOOTSTRAP = (
    "CREATE TABLE IF NOT EXISTS sparkwave_version (version BIGINT NOT NULL)",
    "INSERT INTO sparkwave_version SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM sparkwave_version)",
    """CREATE TABLE IF NOT EXISTS sparkwave_owner (
    id INTEGER PRIMARY KEY CHECK (id = 1), generation BIGINT NOT NULL, changes BIGINT NOT NULL,
    pid INTEGER, host TEXT, since TEXT)""",
    # (not ON CONFLICT: that waits for the row's lock, which a paused deposed owner may hold: `_next_generation`)
    "INSERT INTO sparkwave_owner SELECT 1, 0, 0, NULL, NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM sparkwave_owner)",
    # SQLite's CAST(text AS INTEGER): the leading integer, 0 if none (never an error)
    # (STRICT: NULL stays NULL, as SQLite's CAST(NULL AS INTEGER); a history floor depends on it)
    """CREATE OR REPLACE FUNCTION sparkwave_int(t TEXT) RETURNS BIGINT LANGUAGE sql IMMUTABLE STRICT AS
    $$ SELECT coalesce(substring(t from '^\\s*([+-]?[0-9]+)')::bigint, 0) $$""",
)


def _psycopg() -> Any:
    try:
        import psycopg
    except ModuleNotFoundError:
        raise CatalogError("a PostgreSQL catalog needs psycopg (pip install 'psycopg[binary]')") from None
    return psycopg


def redacted(dsn: str) -> str:
    """`dsn` without its password, as a libpq conninfo string: what is written down or logged."""
    conninfo = _psycopg().conninfo
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except Exception as e:  # psycopg.ProgrammingError; its text never echoes a password
        raise CatalogError(f"the catalog {_masked(dsn)!r} is not a PostgreSQL connection string ({e})") from None
    parts.pop("password", None)
    return str(conninfo.make_conninfo(**{k: str(v) for k, v in sorted(parts.items())}))  # one form per database


_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&]*)", re.I)


def _masked(dsn: str) -> str:
    """A connection string libpq cannot parse, as an error may show it: a URL's user info cut, every
    `password=` value (key=value or a URL parameter; quoted, even unterminated) replaced by ***."""
    shown = dsn.rsplit("@", 1)[-1] if "://" in dsn else dsn
    return _PASSWORD.sub(r"\1***", shown)


def describe(dsn: str) -> str:
    """How errors name the catalog: database, host and port (never the password)."""
    parts = _psycopg().conninfo.conninfo_to_dict(dsn)
    return (f"PostgreSQL catalog {parts.get('dbname') or parts.get('user') or '?'} on "
            f"{parts.get('host') or 'localhost'}:{parts.get('port') or 5432}")


def connect(dsn: str, where: str, **kwargs: Any) -> psycopg.Connection:
    """An autocommit connection to the catalog's database; a failure names the catalog, not the password."""
    pg = _psycopg()
    try:
        return pg.connect(dsn, autocommit=True, connect_timeout=10, **kwargs)
    except pg.Error as e:
        raise CatalogError(f"cannot connect to the {where}: {str(e).strip()}") from None


def _keepalive(conn: psycopg.Connection) -> None:
    """The server notices a vanished owner host within ~25 s and ends its session: its lock goes,
    and so does a transaction it left open, which a takeover's generation bump would wait for."""
    for name, value in (("tcp_keepalives_idle", 10), ("tcp_keepalives_interval", 5), ("tcp_keepalives_count", 3)):
        conn.execute(f"SET {name} = {value}")


# --- SQL translation ---------------------------------------------------------------------------
_OR = re.compile(r"^\s*INSERT OR (REPLACE|IGNORE) INTO (\w+)\s*(\(([^)]*)\))?", re.I)
_SELF_REF = re.compile(r"\b(\w+) = \1 ([-+])")
_JSON = re.compile(r"json_extract\(([\w.]+), '\$\.(\w+)'\)")
_CAST_INT = re.compile(r"CAST\(([\w.]+) AS INTEGER\)", re.I)
_INSERT = re.compile(r"^\s*INSERT INTO (\w+)", re.I)


def _ddl(sql: str) -> str:
    sql = re.sub(r"INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY", sql, flags=re.I)
    sql = re.sub(r"\bINTEGER\b", "BIGINT", sql)
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", sql)


def _upsert(sql: str, table_info: Any) -> str:
    """`INSERT OR REPLACE` / `OR IGNORE` as PostgreSQL's `ON CONFLICT` on the table's primary key."""
    m = _OR.match(sql)
    if m is None:
        return sql
    kind, table, listed = m.group(1).upper(), m.group(2), m.group(4)
    sql = f"INSERT INTO {table}{' (' + listed + ')' if listed else ''} " + sql[m.end():].lstrip()
    if kind == "IGNORE":
        return sql + " ON CONFLICT DO NOTHING"
    columns, key = table_info(table)
    if not key:
        raise CatalogError(f"BUG: INSERT OR REPLACE INTO {table}, which has no primary key")
    named = [c.strip().strip('"') for c in listed.split(",")] if listed else columns
    rest = [c for c in named if c not in key]
    conflict = ", ".join(f'"{c}"' for c in key)
    if not rest:
        return sql + f" ON CONFLICT ({conflict}) DO NOTHING"
    return sql + f" ON CONFLICT ({conflict}) DO UPDATE SET " + ", ".join(f'"{c}" = excluded."{c}"' for c in rest)


def translate(sql: str, table_info: Any) -> tuple[str, bool]:
    """PostgreSQL's text of one catalog statement, and whether it returns the new row's id."""
    if sql.lstrip().upper().startswith("CREATE TABLE"):
        sql = _ddl(sql)
    sql = _upsert(sql, table_info)
    if (at := sql.find("DO UPDATE SET")) >= 0 and (m := _INSERT.match(sql)):
        sql = sql[:at] + _SELF_REF.sub(lambda r: f"{r[1]} = {m[1]}.{r[1]} {r[2]}", sql[at:])
    sql = _CAST_INT.sub(r"sparkwave_int(\1)", _JSON.sub(r"(\1::jsonb ->> '\2')", sql))
    sql = sql.replace("%", "%%").replace("?", "%s")
    returning = bool((m := _INSERT.match(sql)) and m[1].lower() in _SERIAL_TABLES and "RETURNING" not in sql.upper())
    return (sql + " RETURNING id" if returning else sql), returning


class _Cursor:
    def __init__(self, cur: Any, returning: bool) -> None:
        self._cur = cur
        self.lastrowid: int | None = int(cur.fetchone()[0]) if returning else None

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cur.fetchall())


def _arg(a: Any) -> Any:
    if isinstance(a, bool):
        return int(a)  # SQLite's booleans are integers
    if isinstance(a, str) and "\x00" in a:
        # PostgreSQL's text cannot hold NUL (a bad Kafka record's payload can): written as the
        # escape its undecodable bytes get (`backslashreplace`), not an epoch refused on every retry
        return a.replace("\x00", "\\x00")
    return a


def _args(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(_arg(a) for a in args)


class PgDb:
    """A `CatalogDb` over a psycopg connection in autocommit mode (transactions are explicit). A
    connection the server dropped (a restart, a network cut) is opened again for the next read or
    transaction, never inside one: the transaction it held is gone, and its caller gets the error."""

    def __init__(self, open_connection: Callable[[], psycopg.Connection], where: str) -> None:
        self._open = open_connection
        self.conn = open_connection()
        self.where = where
        self._in_transaction = False
        self._tables: dict[str, tuple[list[str], list[str]]] = {}
        self._translate = lru_cache(maxsize=1024)(lambda sql: translate(sql, self._table_info))

    def _table_info(self, table: str) -> tuple[list[str], list[str]]:
        if table not in self._tables:
            cols = [r[0] for r in self.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = %s ORDER BY ordinal_position", (table,)).fetchall()]
            key = [r[0] for r in self.conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)", (table,)).fetchall()]
            self._tables[table] = (cols, key)
        return self._tables[table]

    def _connection(self) -> psycopg.Connection:
        if self.conn.broken and not self._in_transaction:
            self.conn = self._open()
        return self.conn

    def _failed(self, e: Exception) -> CatalogError:
        if self.conn.broken:
            self._in_transaction = False  # it went with the connection; the next statement opens a new one
        return CatalogError(f"the {self.where} failed: {str(e).strip()}")

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> _Cursor:
        text, returning = self._translate(sql)
        pg = _psycopg()
        try:
            cur = _Cursor(self._connection().execute(text, _args(parameters)), returning)
        except pg.IntegrityError as e:
            raise DbIntegrityError(f"{str(e).strip()} (in the {self.where})") from None
        except pg.OperationalError as e:
            raise self._failed(e) from e
        except pg.Error as e:  # a value or statement the database refused: named, as SQLite's errors are not
            raise CatalogError(f"the {self.where} refused {sql.split(None, 1)[0]}: {str(e).strip()}") from None
        if sql == "BEGIN":
            self._in_transaction = True
        elif sql in ("COMMIT", "ROLLBACK"):
            self._in_transaction = False
        return cur

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> None:
        rows = [_args(r) for r in parameters]
        if not rows:
            return
        text, _ = self._translate(sql.rstrip())
        pg = _psycopg()
        try:
            with self._connection().cursor() as cur:
                cur.executemany(text.removesuffix(" RETURNING id"), rows)
        except pg.IntegrityError as e:
            raise DbIntegrityError(f"{str(e).strip()} (in the {self.where})") from None
        except pg.OperationalError as e:
            raise self._failed(e) from e
        except pg.Error as e:
            raise CatalogError(f"the {self.where} refused {sql.split(None, 1)[0]}: {str(e).strip()}") from None


class PostgresBackend(Backend):
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.where = describe(dsn)

    def _tables(self) -> set[str]:
        with connect(self.dsn, self.where) as conn:
            return {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables "
                                               "WHERE table_schema = current_schema()").fetchall()}

    def exists(self) -> bool:
        return bool(self._tables())

    def problem(self) -> str | None:
        tables = self._tables()
        if not tables:
            return "is missing (the database has no tables)"
        if missing := [t for t in (*CORE_TABLES, "sparkwave_version") if t not in tables]:
            return f"is not a sparkwave catalog (it has no table {', '.join(missing)})"
        return None

    def stored_version(self) -> int:
        with connect(self.dsn, self.where) as conn:
            row = conn.execute("SELECT version FROM sparkwave_version").fetchone()
        return int(row[0]) if row else 0

    def connect(self, *, read_only: bool) -> CatalogDb:
        def open_connection() -> psycopg.Connection:
            conn = connect(self.dsn, self.where)
            try:
                if read_only:
                    conn.execute("SET default_transaction_read_only = on")
                else:
                    _keepalive(conn)
                    bootstrap(conn)
            except BaseException:
                conn.close()
                raise
            return conn

        return PgDb(open_connection, self.where)

    def rollback(self, db: CatalogDb) -> None:
        try:
            db.execute("ROLLBACK")
        except CatalogError:  # the connection broke: its transaction is gone with it
            pass

    def version(self, db: CatalogDb) -> int:
        return int(db.execute("SELECT version FROM sparkwave_version").fetchone()[0])

    def set_version(self, db: CatalogDb, version: int) -> None:
        db.execute("UPDATE sparkwave_version SET version = ?", (int(version),))

    def begin(self, db: CatalogDb, fence: int | None) -> None:
        db.execute("BEGIN")
        try:
            if fence is None:
                db.execute("UPDATE sparkwave_owner SET changes = changes + 1")
                return
            if db.execute("UPDATE sparkwave_owner SET changes = changes + 1 WHERE generation = ?",
                          (fence,)).rowcount != 1:
                owner = db.execute("SELECT generation, pid, host, since FROM sparkwave_owner").fetchone()
                raise OwnershipError(f"this process (generation {fence}) no longer owns the warehouse of the "
                                     f"{self.where}: process {owner[1]} on {owner[2]} took it over at {owner[3]} "
                                     f"(generation {owner[0]}); nothing was committed")
        except BaseException:
            self.rollback(db)
            raise

    def changes(self, db: CatalogDb) -> tuple[int, int]:
        return 0, int(db.execute("SELECT changes FROM sparkwave_owner").fetchone()[0])

    def close(self, db: CatalogDb) -> None:
        assert isinstance(db, PgDb)
        db.conn.close()


def bootstrap(conn: psycopg.Connection) -> None:
    """The tables of the version and the owner, made once (concurrent openers wait on a lock)."""
    with conn.transaction():
        conn.execute(f"SELECT pg_advisory_xact_lock({_BOOTSTRAP_LOCK})")
        for statement in _BOOTSTRAP:
            conn.execute(statement)


# --- ownership (meta/ownership.py) -------------------------------------------------------------
def _value(conn: psycopg.Connection, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    return None if row is None else row[0]


def take_ownership(dsn: str, where: str) -> tuple[psycopg.Connection, int] | None:
    """The owner's lock and a new generation, on a connection of its own that holds the lock for
    as long as it lives; None when another live connection holds it."""
    conn = connect(dsn, where)
    try:
        _keepalive(conn)
        bootstrap(conn)
        if not _value(conn, f"SELECT pg_try_advisory_lock({_LOCK_ARGS})"):
            conn.close()
            return None
        return conn, _next_generation(conn, where)
    except BaseException:
        conn.close()
        raise


# A write transaction of a deposed owner: it holds the owner row (`begin`); holding the lock, no one
# else may write it.
_DEPOSED_WRITERS = ("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'relation' AND relation = "
                    "'sparkwave_owner'::regclass AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid()")


def _next_generation(conn: psycopg.Connection, where: str) -> int:
    """Bumps the owner generation, on the lock's connection. A commit in flight is ordered before it
    (the bump waits for the row); but a deposed owner paused inside a write transaction (a stopped
    process, whose host still answers keepalives) would hold the row, and so the takeover, for as
    long as it stays paused: once the bump has waited a lock timeout, that session is ended."""
    pg = _psycopg()
    conn.execute("SET lock_timeout = '2s'")
    try:
        for attempt in range(30):
            if attempt:
                try:
                    conn.execute(_DEPOSED_WRITERS)
                except pg.Error as e:  # not allowed to end another role's session: the bump waits for it
                    log.warning("%s: could not end a deposed owner's session: %s", where, str(e).strip())
            try:
                row = conn.execute("UPDATE sparkwave_owner SET generation = generation + 1, pid = %s, host = %s, "
                                   "since = %s RETURNING generation",
                                   (os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%d %H:%M:%S"))).fetchone()
            except pg.errors.LockNotAvailable:
                continue
            assert row is not None, "BUG: sparkwave_owner has no row"
            return int(row[0])
        raise CatalogError(f"the {where}: another session holds the owner row and could not be ended; "
                           "end it (pg_terminate_backend) and open the warehouse again")
    finally:
        conn.execute("SET lock_timeout = 0")


def still_owner(conn: psycopg.Connection, dsn: str, where: str, generation: int) -> psycopg.Connection:
    """The owner's lock connection, checked: the generation must still be `generation`
    (`OwnershipError` once another owner took over). A lock whose session the server ended (a
    restart, a dropped connection) is taken again on a new connection if no one took over
    meanwhile: holding the lock, the generation cannot move under us."""
    pg = _psycopg()
    deposed = (f"this process (generation {generation}) no longer owns the warehouse of the {where}: "
               f"{{}} took it over")
    try:
        if not conn.broken:
            if _value(conn, "SELECT generation FROM sparkwave_owner") == generation:
                return conn
            raise OwnershipError(deposed.format(owner_of(dsn, where)))
    except pg.OperationalError:
        pass
    conn.close()
    new = connect(dsn, where)
    try:
        _keepalive(new)
        if not _value(new, f"SELECT pg_try_advisory_lock({_LOCK_ARGS})"):
            raise OwnershipError(deposed.format(owner_of(dsn, where)))
        if _value(new, "SELECT generation FROM sparkwave_owner") != generation:
            raise OwnershipError(deposed.format(owner_of(dsn, where)))
        return new
    except BaseException:
        new.close()  # the lock, if taken, goes with the session
        raise


def owner_of(dsn: str, where: str) -> str:
    """The last owner as recorded, for errors."""
    with connect(dsn, where) as conn:
        try:
            row = conn.execute("SELECT pid, host, since, generation FROM sparkwave_owner").fetchone()
        except _psycopg().Error:
            return "another process"
    return f"process {row[0]} on {row[1]} (since {row[2]}, generation {row[3]})" if row else "another process"


def is_locked(dsn: str, where: str) -> bool:
    """Whether a live connection holds the owner's lock (taken and released at once if free)."""
    with connect(dsn, where) as conn:
        if _value(conn, f"SELECT pg_try_advisory_lock({_LOCK_ARGS})"):
            conn.execute(f"SELECT pg_advisory_unlock({_LOCK_ARGS})")
            return False
    return True


def wait_for_owner(dsn: str, where: str, timeout_s: float | None = None) -> None:
    """Block until no owner holds the lock (a standby's wait; the lock is not kept), at most
    `timeout_s` (None: as long as it takes)."""
    pg = _psycopg()
    with connect(dsn, where) as conn:
        conn.execute(f"SET lock_timeout = {0 if timeout_s is None else max(1, int(timeout_s * 1000))}")
        try:
            conn.execute(f"SELECT pg_advisory_lock({_LOCK_ARGS})")
        except pg.errors.LockNotAvailable:
            raise OwnershipError(f"the warehouse of the {where} still has an owner after {timeout_s:g} s: "
                                 f"{owner_of(dsn, where)}") from None
        conn.execute(f"SELECT pg_advisory_unlock({_LOCK_ARGS})")
