"""Answers the `pg_catalog` / `information_schema` queries PostgreSQL clients send (psql's `\\d`,
SQLAlchemy's inspector, psycopg's and asyncpg's type probes, JDBC metadata, BI tools), Spark-free.

A snapshot of sparkwave's relations (`RelationInfo`s) becomes an in-memory SQLite database with
the catalog tables (`pg_catalog_schema.py`, rows from `pg_catalog_rows.py`) in two attached
databases named `pg_catalog` and `information_schema`; a client's query is parsed as PostgreSQL
by sqlglot, rewritten where SQLite differs (`pg_catalog_sql.py`) and run there with Python versions
of PostgreSQL's catalog functions (`pg_catalog_functions.py`). Why SQLite and not Spark: a client
sends a dozen of these per `\\d` and expects milliseconds; they need joins, subqueries, CASE,
recursive CTEs (asyncpg), which SQLite has, and the catalog is small.

Defence in depth: only a single query comes out of the translation, and an authorizer lets the
connection read and call functions, nothing else (no ATTACH, PRAGMA or write); a progress handler
stops a query that runs away (a recursive CTE)."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import DataType, StringType
from sqlglot import exp

from sparkwave.server import pg_catalog_describe as tdesc
from sparkwave.server import pg_catalog_sql as tsql
from sparkwave.server.backend import Field, Outcome, ServerError
from sparkwave.server.pg_catalog_functions import Context, keeping_error, register, to_array
from sparkwave.server.pg_catalog_rows import build
from sparkwave.server.pg_catalog_schema import TABLES, sqlite_type
from sparkwave.server.pg_catalog_types import BY_NAME, spark_type_of
from sparkwave.server.pg_relations import RelationInfo, relation_infos
from sparkwave.server.session_sql import SessionSettings, canonical, session_rows, version_string

__all__ = ["CatalogResult", "PgCatalog", "RelationInfo", "catalog_for", "is_catalog_query", "parameter_types",
           "relation_infos"]

QUERY_SECONDS = 5.0  # a catalog query taking longer is cancelled (57014)
_CACHE_SIZE = 4
_HINT = re.compile(r"pg_|information_schema|version|current_|session_user|set_config|has_\w{1,40}?_privilege|"
                   r"to_reg|format_type|obj_description|quote_ident", re.IGNORECASE)
_STRING = re.compile(r"'(?:[^']|'')*'")
# no two quantifiers here may match the same characters: backtracking between them would be cubic in
# the query's length, with the GIL held (a 5 kB `select   …(` took minutes)
_CONSTANTS = re.compile(r"\s*select\s[\w\s,'\"]*(?:;\s*)?$", re.I)
_CATALOG_FUNCTIONS = frozenset(tdesc.FUNCTION_TYPES) | frozenset(tsql.CONSTANT_FUNCTIONS) - {
    "pg_any_eq", "pg_regex", "pg_array", "pg_subscript", "pg_series", "pg_bool", "pg_array_agg", "pg_string_agg",
    "array_to_string", "array_length", "array_upper", "array_lower", "cardinality", "string_to_array",
    "array_position", "json_object", "quote_literal", "pg_size_pretty"}
_CATALOG_NODES = (exp.CurrentVersion, exp.CurrentSchema, exp.CurrentSchemas, exp.CurrentDatabase, exp.CurrentUser,
                  exp.SessionUser)
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
# SQLite functions no catalog query needs and a client could use to reach files or to make memory
# (zeroblob(10^9)): refused by the authorizer
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "zeroblob", "randomblob", "printf", "format",
                               "fts3_tokenizer", "edit", "sqlite_compileoption_get", "sqlite_compileoption_used",
                               "sqlite_offset", "sqlite_source_id", "sqlite_version"})
MAX_VALUE_BYTES = 1 << 20  # SQLite's limit on one string or blob of a catalog query (its default is 10^9)
MAX_RESULT_BYTES = 64 << 20  # a catalog query's result, roughly: more is refused (54000), not held


@dataclass
class CatalogResult:
    """A catalog query's rows with their fields (Spark types the wire encodes: oid and int8 as
    bigint, name/char/text as strings, bool as boolean, arrays as Spark arrays of Python lists)."""

    fields: list[Field]
    rows: list[tuple]
    pg_types: list[str]  # the PostgreSQL type names behind the fields, for tests and notes

    def outcome(self) -> Outcome:
        return Outcome(f"SELECT {len(self.rows)}", self.fields, iter([self.rows]))


def is_catalog_query(sql: str) -> bool:
    """Whether `sql` (one statement) is for the catalog emulation: a SELECT that reads pg_catalog or
    information_schema, or calls version(), current_schema(), current_setting(), set_config(),
    has_*_privilege() ...; or a SELECT of constants without FROM (`SELECT 1`, a pool's ping), which
    the emulation answers exactly and at once. Never raises."""
    if not _HINT.search(_STRING.sub("''", sql)) and not _CONSTANTS.match(sql):
        return False
    try:
        tree = tsql.parse(tsql.lift(sql, None)[0])
    except ServerError:
        return False
    except Exception:  # noqa: BLE001 - a parser bug must not break the routing of a query
        return False
    return _reads_catalog(tree) or _is_constant_select(tree)


def parameter_types(sql: str, count: int) -> list[DataType]:
    """The Spark types of a catalog query's `count` parameters the client left open, from their casts
    in the text (`$1::oid[]` -> array of bigint, as asyncpg must send a list); text where none."""
    hints = tsql.parameter_types(sql)
    return [spark_type_of(BY_NAME[hints[n]].oid) if n in hints else StringType() for n in range(1, count + 1)]


def _reads_catalog(tree: exp.Expr) -> bool:
    for table in tree.find_all(exp.Table):
        if table.db in TABLES or (not table.db and table.name.startswith("pg_") and table.name in TABLES["pg_catalog"]):
            return True
    for dot in tree.find_all(exp.Dot):
        if isinstance(dot.this, exp.Identifier) and dot.this.name in TABLES and isinstance(dot.expression, exp.Func):
            return True  # pg_catalog.version(), pg_catalog.format_type(...)
    for node in tree.find_all(exp.Func):
        if isinstance(node, _CATALOG_NODES):
            return True
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in _CATALOG_FUNCTIONS:
            return True
    return False


def _is_constant_select(tree: exp.Expr) -> bool:
    if not isinstance(tree, exp.Select) or any(v for k, v in tree.args.items() if k != "expressions"):
        return False
    for e in tree.expressions:
        e = e.unalias() if isinstance(e, exp.Alias) else e
        if not (isinstance(e, exp.Boolean | exp.Null | exp.Parameter)  # a lifted string literal
                or (isinstance(e, exp.Literal) and (e.is_string or e.is_int))):
            return False
    return bool(tree.expressions)


class PgCatalog:
    """The emulated catalog of one snapshot of the warehouse's relations. Thread-safe (one lock:
    a catalog query takes microseconds to milliseconds)."""

    def __init__(self, infos: list[RelationInfo], database: str = "dev", user: str = "root") -> None:
        rows, objects = build(infos, database, user)
        self.database, self.user = database, user
        self._ctx = Context(objects, user)
        self._lock = threading.Lock()
        self._writing = True
        self._deadline = 0.0
        self._session: SessionSettings | None = None
        db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        for schema, tables in TABLES.items():
            db.execute(f"ATTACH DATABASE ':memory:' AS {schema}")
            for name, cols in tables.items():
                db.execute(f"CREATE TABLE {schema}.{name} ({', '.join(f'{c} {sqlite_type(t)}' for c, t in cols)})")
                if data := rows[f"{schema}.{name}"]:
                    db.executemany(f"INSERT INTO {schema}.{name} VALUES ({', '.join('?' * len(cols))})", data)
        db.execute("PRAGMA case_sensitive_like = ON")  # PostgreSQL's LIKE is; ILIKE becomes lower() LIKE lower()
        register(db, self._ctx)
        db.create_function("set_config", 3, keeping_error(self._ctx, self._set_config))
        db.create_function("pg_advisory_unlock_all", 0, lambda: None)
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        db.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000)
        db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, len(TABLES))
        db.set_authorizer(self._authorize)
        db.set_progress_handler(self._progress, 10_000)
        self._db = db
        self._writing = False

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, dbname: str | None,
                   source: str | None) -> int:
        if self._writing:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and source is None:
            return sqlite3.SQLITE_OK  # json_each declaring its virtual table (sqlite_master is read-only anyway)
        return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        return int(time.monotonic() > self._deadline)

    def _set_config(self, name: Any, value: Any, is_local: Any) -> Any:
        session = self._session
        if session is None or name is None:
            return value
        key = canonical(str(name))
        if key is None and "." not in str(name):
            raise ValueError(f'unrecognized configuration parameter "{name}"')
        session.set(str(name), None if value is None else str(value))
        return value

    def describe(self, sql: str) -> list[Field]:
        """The fields `sql` returns, before its `$n` parameters are known (Parse/Describe)."""
        return self.run(sql, None).fields

    def run(self, sql: str, params: Sequence[Any] | None = (),
            settings: SessionSettings | None = None) -> CatalogResult:
        """Run one catalog query with its parameters (None: each parameter NULL, to describe it)."""
        session = settings or SessionSettings(self.user, self.database)
        template, values = tsql.lift(sql, params)
        try:
            translated = tsql.translate_text(template, session.user, session.database, _VERSION)
        except ServerError:
            raise
        except Exception as e:  # noqa: BLE001 - a query the rewrite does not foresee must not crash the server
            raise ServerError("0A000", f"the catalog emulation cannot run this query ({type(e).__name__}: "
                                       f"{str(e)[:200]})") from None
        bound = {str(n): tsql.sqlite_value(v) for n, v in enumerate(values, 1)}
        with self._lock:
            self._session, self._ctx.settings = session, session.lowercase()
            try:
                if "pg_settings" in translated.sqlite:
                    self._refresh_settings(session)
                self._deadline = time.monotonic() + QUERY_SECONDS
                cursor = self._db.execute(translated.sqlite, bound)
                raw = _fetch(cursor)
                described = [d[0] for d in cursor.description or []]
            except sqlite3.Error as e:
                raise _error(e, self._ctx) from None
            finally:
                self._session = None
        names = translated.names if translated.names and len(translated.names) == len(described) else described
        types = list(translated.types) if translated.types and len(translated.types) == len(described) else [
            tdesc.infer(exp.column(n), {}) for n in described]
        return _result(names, types, raw)

    def _refresh_settings(self, session: SessionSettings) -> None:
        self._writing = True
        try:
            self._db.execute("DELETE FROM pg_catalog.pg_settings")
            cols = len(TABLES["pg_catalog"]["pg_settings"])
            self._db.executemany(f"INSERT INTO pg_catalog.pg_settings VALUES ({', '.join('?' * cols)})",
                                 session_rows(session))
        finally:
            self._writing = False


def _fetch(cursor: sqlite3.Cursor) -> list[tuple]:
    """The rows, refused past MAX_RESULT_BYTES: a cross join of the catalog with itself makes rows
    faster than the 5 s deadline can stop them piling up."""
    rows: list[tuple] = []
    size = 0
    while chunk := cursor.fetchmany(1000):
        rows += chunk
        size += sum(len(v) if isinstance(v, str | bytes) else 8 for row in chunk for v in row) + 56 * len(chunk)
        if size > MAX_RESULT_BYTES:
            raise ServerError("54000", f"the catalog query's result is larger than {MAX_RESULT_BYTES >> 20} MB: "
                                       "the catalog emulation answers catalog queries, not bulk reads")
    return rows


def _error(e: sqlite3.Error, ctx: Context) -> ServerError:
    text = str(e)
    if ctx.error is not None:
        err, ctx.error = ctx.error, None
        code = "42P01" if "does not exist" in str(err) and "relation" in str(err) else "22023"
        if "configuration parameter" in str(err):
            code = "42704"
        return ServerError(code, str(err))
    if m := re.match(r"no such function: (\w+)", text):
        return ServerError("42883", f"function {m.group(1).lower()}() does not exist: sparkwave's catalog emulation "
                                    "does not have it")
    if m := re.match(r"no such table: ([\w.]+)", text):
        return ServerError("42P01", f'relation "{m.group(1)}" does not exist in the catalog emulation')
    if m := re.match(r"no such column: ([\w.]+)", text):
        return ServerError("42703", f'column "{m.group(1)}" does not exist in the catalog emulation')
    if text == "string or blob too big":
        return ServerError("54000", f"a value of the catalog query is larger than {MAX_VALUE_BYTES >> 20} MB")
    if text == "interrupted":
        return ServerError("57014", f"canceling statement: the catalog query ran longer than {QUERY_SECONDS:g} s")
    if "not authorized" in text:
        return ServerError("42501", "the catalog emulation runs queries only")
    return ServerError("0A000", f"the catalog emulation cannot run this query: {text}")


def _result(names: list[str], types: list[str], raw: list[tuple]) -> CatalogResult:
    columns = [list(col) for col in zip(*raw, strict=True)] if raw else [[] for _ in names]
    for i, t in enumerate(types):
        if t == tdesc.UNKNOWN:
            t = types[i] = _type_of_values(columns[i])
        try:
            columns[i] = [_convert(v, t) for v in columns[i]]
        except (TypeError, ValueError):  # a value the inferred type does not fit: show it as text
            types[i] = "text"
            columns[i] = [_convert(v, "text") for v in columns[i]]
    fields = [Field(n, spark_type_of(BY_NAME[t].oid if t in BY_NAME else 25))
              for n, t in zip(names, types, strict=True)]
    rows = list(zip(*columns, strict=True)) if raw else []
    return CatalogResult(fields, rows, types)


def _type_of_values(values: list[Any]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) for v in present):
        return "int8"
    if present and all(isinstance(v, int | float) for v in present):
        return "float8"
    return "text"


def _convert(value: Any, pg_type: str) -> Any:
    if value is None:
        return None
    t = BY_NAME.get(pg_type)
    if t is None or t.name in ("text", "name", "char", "varchar", "bpchar", "regclass", "regtype", "regnamespace",
                               "regproc", "json", "jsonb", "pg_node_tree", "unknown"):
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return value if isinstance(value, str) else str(value)
    if t.category == "A" and t.elem:
        items = to_array(value) or []
        return [_convert(i, BY_OID_NAME.get(t.elem, "text")) for i in items]
    if t.name == "bool":
        if isinstance(value, str):
            raise ValueError(value)
        return bool(value)
    if t.name in ("int2", "int4", "int8", "oid"):
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            raise ValueError(value)
        return int(value)
    if t.name in ("float4", "float8"):
        return float(value)
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, list) else value


BY_OID_NAME = {t.oid: t.name for t in BY_NAME.values()}

_VERSION = version_string()
_cache: OrderedDict[tuple, PgCatalog] = OrderedDict()
_cache_lock = threading.Lock()


def catalog_for(version: Hashable, relations: Callable[[], list[RelationInfo]], *, database: str = "dev",
                user: str = "root") -> PgCatalog:
    """The emulated catalog for the warehouse as of `version` (e.g. (committed epoch, DDL count)):
    built once (`relations()` is called only then), kept for the next queries of any client."""
    key = (version, database, user)
    with _cache_lock:
        if (hit := _cache.get(key)) is not None:
            _cache.move_to_end(key)
            return hit
    built = PgCatalog(relations(), database, user)
    with _cache_lock:
        _cache[key] = built
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return built
