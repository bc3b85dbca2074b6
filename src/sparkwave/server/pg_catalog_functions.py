"""PostgreSQL's catalog functions as Python functions on the SQLite connection of the emulated
catalog (`pg_catalog.py`). Arrays are JSON text; `Context` holds the catalog's name/OID maps and the
session of the query running (current_setting reads it)."""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.server.pg_catalog_rows import NAMESPACES, USER_OID, Objects, quote_ident
from sparkwave.server.pg_catalog_types import BY_OID, format_type, type_by_name

_MAX_SERIES = 100_000


@dataclass
class Context:
    objects: Objects
    user: str = "root"
    settings: dict[str, str] = field(default_factory=dict)  # the running query's session parameters
    error: Exception | None = None  # what a function raised: SQLite reports only that one did


def to_array(value: Any) -> list | None:
    """A stored or client array (JSON text, PostgreSQL's '{a,b}' text, a list) as a list."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return list(value)
    text = str(value).strip()
    if text.startswith("["):
        return list(json.loads(text))
    if text.startswith("{") and text.endswith("}"):
        body = text[1:-1].strip()
        if not body:
            return []
        items = [m.group(1).replace('\\"', '"') if m.group(1) is not None else m.group(2)
                 for m in re.finditer(r'"((?:[^"\\]|\\.)*)"|([^,]+)', body)]
        return [None if i == "NULL" else int(i) if re.fullmatch(r"-?\d+", i or "") else i for i in items]
    if re.fullmatch(r"-?\d+( -?\d+)*", text):  # int2vector / oidvector text
        return [int(x) for x in text.split()]
    return [value]


def _json(value: list | None) -> str | None:
    return None if value is None else json.dumps(value)


def _regex(value: Any, pattern: Any, flags: str) -> int | None:
    """`~` by RE2 (Arrow's), linear in the text: Python's `re` backtracks without bound while holding
    the GIL, so one client's `'aaaa…!' ~ '(a+)+$'` would freeze every thread of the server."""
    if value is None or pattern is None:
        return None
    try:
        found = pc.match_substring_regex(pa.array([str(value)], pa.string()), pattern=str(pattern),
                                         ignore_case="i" in flags)
    except pa.ArrowInvalid as e:
        raise ValueError(f"invalid regular expression {pattern!r}: {e}") from None
    return int(bool(found[0].as_py()))


def _any_eq(value: Any, array: Any) -> int | None:
    items = to_array(array)
    if value is None or items is None:
        return None
    return int(any(_same(value, i) for i in items))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) or isinstance(b, int | float):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return str(a) == str(b)


def _subscript(array: Any, index: Any) -> Any:
    items = to_array(array)
    if items is None or index is None:
        return None
    i = int(index)
    return items[i] if 0 <= i < len(items) else None


def _array_cat(a: Any, b: Any) -> str | None:
    left, right = to_array(a), to_array(b)
    if left is None and right is None:
        return None
    return _json((left or []) + (right or []))


def _bool(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return int(bool(value))
    text = str(value).strip().lower()
    if text in ("t", "true", "y", "yes", "on", "1"):
        return 1
    if text in ("f", "false", "n", "no", "off", "0"):
        return 0
    raise ValueError(f'invalid input syntax for type boolean: "{value}"')


def _int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(f'invalid input syntax for type integer: "{value}"')
        return int(text)
    return int(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _sort_key(pos: int, item: tuple[tuple, Any]) -> tuple[bool, Any]:
    key = item[0][pos]
    return key is None, key if key is not None else 0


class _ArrayAgg:
    """array_agg(x ORDER BY k1 [DESC], ...): SQLite 3.40 has no ORDER BY inside an aggregate."""

    def __init__(self) -> None:
        self.items: list[tuple[tuple, Any]] = []
        self.directions = ""

    def step(self, value: Any, directions: str, *keys: Any) -> None:
        self.directions = directions or ""
        self.items.append((keys, value))

    def _ordered(self) -> list[Any]:
        items = self.items
        for pos in reversed(range(len(self.directions))):
            items = sorted(items, key=functools.partial(_sort_key, pos), reverse=self.directions[pos] == "d")
        return [v for _, v in items]

    def finalize(self) -> str | None:
        return _json(self._ordered()) if self.items else None


class _StringAgg(_ArrayAgg):
    def __init__(self) -> None:
        super().__init__()
        self.sep = ","

    def step(self, value: Any, sep: Any, directions: str, *keys: Any) -> None:  # type: ignore[override]
        self.sep = "" if sep is None else str(sep)
        if value is not None:
            super().step(value, directions, *keys)

    def finalize(self) -> str | None:
        return self.sep.join(str(v) for v in self._ordered()) if self.items else None


def register(db: sqlite3.Connection, ctx: Context) -> None:
    """Every function the translated queries call (see `pg_catalog_sql.FUNCTION_TYPES`)."""
    for name, (n, fn) in _functions(ctx).items():
        db.create_function(name, n, keeping_error(ctx, fn), deterministic=False)
    db.create_aggregate("pg_array_agg", -1, _ArrayAgg)  # type: ignore[arg-type]
    db.create_aggregate("pg_string_agg", -1, _StringAgg)  # type: ignore[arg-type]


def keeping_error(ctx: Context, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:
            ctx.error = e
            raise
    return call


def _functions(ctx: Context) -> dict[str, tuple[int, Callable[..., Any]]]:
    objects = ctx.objects

    def regclass(value: Any, mode: str = "oid") -> Any:
        if value is None:
            return None
        oid = int(value) if _is_number(value) else objects.lookup(str(value))
        if oid == 0 and mode == "name":
            return "-"
        if oid is None:
            raise ValueError(f'relation "{value}" does not exist')
        if mode == "name":
            schema, name = objects.rel_name.get(oid, ("", str(oid)))
            return quote_ident(name) if schema in ("public", "pg_catalog") else f"{schema}.{quote_ident(name)}"
        return oid

    def to_regclass(value: Any) -> int | None:
        return objects.lookup(str(value)) if value is not None else None

    def table_is_visible(oid: Any) -> int:
        return int(objects.rel_name.get(int(oid or 0), ("",))[0] in ("public", "pg_catalog"))

    def get_indexdef(oid: Any, column: Any = 0, pretty: Any = None) -> str | None:
        definition = objects.index_def.get(int(oid or 0))
        if definition is None or not column:  # pretty: the relation unqualified where visible, as psql shows
            return definition.replace(" ON public.", " ON ", 1) if definition and _bool(pretty) else definition
        cols = definition.rsplit("(", 1)[1].rstrip(")").split(", ")
        return cols[int(column) - 1] if 0 < int(column) <= len(cols) else None

    def current_setting(name: Any, missing_ok: Any = False) -> str | None:
        key = str(name).lower()
        if key in ctx.settings:
            return ctx.settings[key]
        if _bool(missing_ok):
            return None
        raise ValueError(f'unrecognized configuration parameter "{name}"')

    def userbyid(oid: Any) -> str:
        return ctx.user if oid is not None and int(oid) == USER_OID else f"unknown (OID={oid})"

    return {
        **_PURE,
        "pg_regclass": (2, regclass),
        "pg_regrole": (2, lambda v, m: (ctx.user if m == "name" else USER_OID) if v is not None else None),
        "to_regclass": (1, to_regclass), "pg_get_userbyid": (1, userbyid),
        "pg_table_is_visible": (1, table_is_visible), "pg_get_indexdef": (-1, get_indexdef),
        "pg_get_constraintdef": (-1, lambda oid, *a: objects.constraint_def.get(int(oid or 0))),
        "current_setting": (-1, current_setting),
    }


def _regtype(value: Any, mode: str = "oid") -> Any:
    if value is None:
        return None
    t = BY_OID.get(int(value)) if _is_number(value) else type_by_name(str(value))
    if t is None and mode == "name" and _is_number(value) and int(value) == 0:
        return "-"
    if t is None:
        if mode == "name" and _is_number(value):
            return str(value)
        raise ValueError(f'type "{value}" does not exist')
    return format_type(t.oid, -1) if mode == "name" else t.oid


def _to_regtype(value: Any) -> int | None:
    t = type_by_name(str(value)) if value is not None else None
    return t.oid if t else None


def _regnamespace(value: Any, mode: str = "oid") -> Any:
    if value is None:
        return None
    if _is_number(value):
        return NAMESPACES.get(int(value), str(value)) if mode == "name" else int(value)
    oid = next((o for o, n in NAMESPACES.items() if n == str(value)), None)
    if oid is None:
        raise ValueError(f'schema "{value}" does not exist')
    return value if mode == "name" else oid


def _array_length(arr: Any, dim: Any = 1) -> int | None:
    items = to_array(arr)
    return len(items) if items and int(dim or 1) == 1 else None


def _array_lower(arr: Any, dim: Any = 1) -> int | None:
    return 1 if to_array(arr) and int(dim or 1) == 1 else None


def _array_to_string(arr: Any, sep: Any, null: Any = None) -> str | None:
    items = to_array(arr)
    if items is None:
        return None
    return str(sep).join(str(i) if i is not None else str(null) for i in items if i is not None or null is not None)


def _string_to_array(text: Any, sep: Any, null: Any = None) -> str | None:
    if text is None:
        return None
    parts = str(text).split(str(sep)) if sep is not None else list(str(text))
    return _json([None if null is not None and p == null else p for p in parts])


def _series(start: Any, stop: Any, step: Any = 1) -> str | None:
    if start is None or stop is None:
        return None
    values = range(int(start), int(stop) + (1 if int(step) > 0 else -1), int(step))
    if len(values) > _MAX_SERIES:
        raise ValueError(f"generate_series of more than {_MAX_SERIES} rows in a catalog query")
    return _json(list(values))


def _array_position(arr: Any, value: Any) -> int | None:
    items = to_array(arr) or []
    return next((i + 1 for i, v in enumerate(items) if _same(v, value)), None)


def _size_pretty(n: Any) -> str | None:
    if n is None:
        return None
    value, unit = float(n), "bytes"
    for next_unit in ("kB", "MB", "GB", "TB"):
        if abs(value) < 10240:
            break
        value, unit = value / 1024, next_unit
    return f"{int(round(value))} {unit}"


_none: Callable[..., Any] = lambda *a: None  # noqa: E731
_true: Callable[..., Any] = lambda *a: 1  # noqa: E731
_zero: Callable[..., Any] = lambda *a: 0  # noqa: E731


# The functions that need no query's context.
_PURE: dict[str, tuple[int, Callable[..., Any]]] = {
    "pg_regex": (3, _regex), "pg_any_eq": (2, _any_eq), "pg_subscript": (2, _subscript),
    "pg_array": (1, lambda v: _json(to_array(v))), "pg_bool": (1, _bool), "pg_text": (1, _text),
    "pg_series": (3, _series), "pg_regtype": (2, _regtype), "pg_regnamespace": (2, _regnamespace),
    "pg_regproc": (2, lambda v, m: _text(v)), "to_regtype": (1, _to_regtype),
    "to_regnamespace": (1, lambda v: _regnamespace(v) if v in NAMESPACES.values() else None),
    "to_regproc": (1, _none), "format_type": (2, format_type), "pg_type_is_visible": (1, _true),
    "pg_function_is_visible": (1, _true), "pg_collation_is_visible": (1, _true),
    "pg_get_expr": (-1, lambda expr, *a: expr), "pg_get_viewdef": (-1, _none), "pg_get_functiondef": (1, _none),
    "pg_get_triggerdef": (-1, _none), "pg_get_ruledef": (-1, _none), "pg_get_statisticsobjdef_columns": (1, _none),
    "pg_get_serial_sequence": (2, _none), "pg_get_partkeydef": (1, _none), "obj_description": (-1, _none),
    "col_description": (2, _none), "shobj_description": (2, _none),
    "pg_encoding_to_char": (1, lambda e: "UTF8" if e == 6 else "SQL_ASCII" if e == 0 else ""),
    "pg_char_to_encoding": (1, lambda n: 6 if str(n).upper() in ("UTF8", "UTF-8") else -1),
    "quote_ident": (1, lambda v: None if v is None else quote_ident(str(v))),
    "quote_literal": (1, lambda v: None if v is None else "'" + str(v).replace("'", "''") + "'"),
    "has_table_privilege": (-1, _true), "has_schema_privilege": (-1, _true), "has_database_privilege": (-1, _true),
    "has_column_privilege": (-1, _true), "has_any_column_privilege": (-1, _true),
    "has_function_privilege": (-1, _true), "has_sequence_privilege": (-1, _true), "pg_has_role": (-1, _true),
    "pg_relation_size": (-1, _zero), "pg_total_relation_size": (1, _zero), "pg_table_size": (1, _zero),
    "pg_indexes_size": (1, _zero), "pg_size_pretty": (1, _size_pretty), "pg_relation_is_publishable": (1, _zero),
    "pg_partition_ancestors": (1, _none), "pg_backend_pid": (0, _zero), "pg_is_in_recovery": (0, _zero),
    "pg_jit_available": (0, _zero), "array_to_string": (-1, _array_to_string),
    "string_to_array": (-1, _string_to_array), "array_length": (-1, _array_length),
    "array_upper": (-1, _array_length), "array_lower": (-1, _array_lower),
    "cardinality": (1, lambda a: len(to_array(a) or [])), "array_position": (2, _array_position),
    "inet_server_addr": (0, _none), "inet_server_port": (0, _none), "txid_current": (0, _zero),
    "pg_current_xact_id": (0, _zero), "pg_array_cat": (2, _array_cat), "pg_int": (1, _int), "pg_float": (1, _float),
    "pg_get_function_result": (1, _none), "pg_get_function_arguments": (1, _none),
    "pg_get_function_identity_arguments": (1, _none), "pg_tablespace_location": (1, lambda oid: ""),
    "pg_get_viewdef_name": (-1, _none), "pg_stat_get_numscans": (1, _zero), "pg_describe_object": (3, _none),
    "pg_identify_object": (3, _none), "pg_get_function_sqlbody": (1, _none), "pg_get_publication_tables": (-1, _none),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) or (isinstance(value, str) and value.strip().lstrip("-").isdigit())
