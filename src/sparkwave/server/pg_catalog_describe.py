"""The names and PostgreSQL types of a catalog query's result columns, read from its PostgreSQL
syntax tree (before the rewrite for SQLite): what RowDescription says, and how the values SQLite
returns are decoded (0/1 as booleans, JSON text as arrays)."""

from __future__ import annotations

import re

from sqlglot import exp

from sparkwave.server.pg_catalog_schema import column_types
from sparkwave.server.pg_catalog_types import BY_NAME, type_by_name

_COLUMN_TYPES = column_types()
_OID_OUTPUT_TYPES = {"regclass": "pg_regclass", "regtype": "pg_regtype", "regnamespace": "pg_regnamespace",
                     "regproc": "pg_regproc", "regprocedure": "pg_regproc", "regrole": "pg_regrole"}
# PostgreSQL function -> (SQLite function registered by pg_catalog_functions, result type)
FUNCTION_TYPES: dict[str, str] = {
    "format_type": "text", "pg_get_userbyid": "name", "pg_table_is_visible": "bool", "pg_type_is_visible": "bool",
    "pg_function_is_visible": "bool", "pg_collation_is_visible": "bool", "pg_get_expr": "text",
    "pg_get_indexdef": "text", "pg_get_constraintdef": "text", "pg_get_viewdef": "text",
    "pg_get_functiondef": "text", "pg_get_triggerdef": "text", "pg_get_ruledef": "text",
    "pg_get_statisticsobjdef_columns": "text", "pg_get_serial_sequence": "text", "pg_get_partkeydef": "text",
    "obj_description": "text", "col_description": "text", "shobj_description": "text",
    "pg_encoding_to_char": "name", "quote_ident": "text", "quote_literal": "text", "has_table_privilege": "bool",
    "has_schema_privilege": "bool", "has_database_privilege": "bool", "has_column_privilege": "bool",
    "has_any_column_privilege": "bool", "has_function_privilege": "bool", "has_sequence_privilege": "bool",
    "pg_has_role": "bool", "pg_relation_size": "int8", "pg_total_relation_size": "int8", "pg_table_size": "int8",
    "pg_indexes_size": "int8", "pg_size_pretty": "text", "pg_relation_is_publishable": "bool",
    "pg_partition_ancestors": "regclass", "pg_backend_pid": "int4", "pg_is_in_recovery": "bool",
    "pg_postmaster_start_time": "timestamptz", "current_setting": "text", "set_config": "text",
    "to_regtype": "regtype", "to_regclass": "regclass", "to_regnamespace": "regnamespace", "to_regproc": "regproc",
    "array_to_string": "text", "array_length": "int4", "array_upper": "int4", "array_lower": "int4",
    "cardinality": "int4", "string_to_array": "_text", "array_position": "int4", "pg_any_eq": "bool",
    "pg_regex": "bool", "pg_array": "_text", "pg_subscript": "text", "pg_series": "_int4", "pg_bool": "bool",
    "pg_char_to_encoding": "int4", "pg_get_keywords": "text", "inet_server_addr": "text",
    "inet_server_port": "int4", "txid_current": "int8", "pg_current_xact_id": "int8", "json_object": "json",
    "pg_array_agg": "_text", "pg_array_cat": "_text", "pg_int": "int8", "pg_float": "float8", "pg_text": "text",
    "pg_string_agg": "text",
    "pg_listening_channels": "text", "pg_jit_available": "bool",
}


def type_name(dt: exp.DataType) -> str:
    text = dt.sql("postgres").lower().replace("pg_catalog.", "").replace('"', "").strip()
    if text.endswith("[]") or text == "_pgarray" or dt.this == exp.DataType.Type.ARRAY:
        return "_pgarray"
    text = re.sub(r"\(.*\)$", "", text).strip()
    return {"decimal": "numeric", "double precision": "float8", "double": "float8", "real": "float4",
            "boolean": "bool", "smallint": "int2", "int": "int4", "integer": "int4", "bigint": "int8",
            "timestamptz": "timestamptz", "timestamp": "timestamp"}.get(text, text)


def is_array_type(name: str) -> bool:
    return name.startswith("_") or name in ("int2vector", "oidvector")


def describe(tree: exp.Expr) -> tuple[list[str] | None, list[str] | None]:
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    if isinstance(select, exp.Subquery):
        select = select.unnest()
    if not isinstance(select, exp.Select):
        return None, None
    if any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
           for e in select.expressions):
        return None, None
    aliases = _aliases(tree)
    names = [_column_name(e) for e in select.expressions]
    types = [infer(e.unalias() if isinstance(e, exp.Alias) else e, aliases) for e in select.expressions]
    return names, types


def _aliases(tree: exp.Expr) -> dict[str, str]:
    out = {}
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and table.name in _COLUMN_TYPES:
            out[table.alias_or_name] = table.name
            out[table.name] = table.name
    return out


def _column_name(e: exp.Expr) -> str:
    """PostgreSQL's name for a result column (FigureColname): its alias, else a column's or a
    function's name, a cast's argument's (else its type's), a CASE's ELSE branch's, else ?column?."""
    if isinstance(e, exp.Alias):
        ident = e.args.get("alias")
        return e.alias if isinstance(ident, exp.Identifier) and ident.quoted else e.alias.lower()
    name, strength = _figure(e)
    return name if strength > 0 else "?column?"


_SPECIAL_NAMES = {exp.CurrentSchema: "current_schema", exp.CurrentUser: "current_user", exp.CurrentVersion: "version",
                  exp.CurrentDatabase: "current_database", exp.SessionUser: "session_user",
                  exp.CurrentSchemas: "current_schemas", exp.ArrayAgg: "array_agg", exp.GroupConcat: "string_agg",
                  exp.Count: "count", exp.ArrayToString: "array_to_string", exp.CurrentTimestamp: "now",
                  exp.Coalesce: "coalesce", exp.Nullif: "nullif", exp.Greatest: "greatest", exp.Least: "least",
                  exp.LogicalAnd: "bool_and", exp.LogicalOr: "bool_or", exp.ArraySize: "array_length",
                  exp.StringToArray: "string_to_array", exp.Explode: "unnest"}


def _figure(e: exp.Expr) -> tuple[str, int]:
    """(name, strength) as PostgreSQL's FigureColnameInternal: 2 for a column or function, 1 for a
    type name or "case", 0 for nothing."""
    if isinstance(e, exp.Paren | exp.Collate):
        return _figure(e.this)
    if isinstance(e, exp.Dot) and isinstance(e.expression, exp.Func):
        return _figure(e.expression)
    if isinstance(e, exp.Column):
        return (e.name if e.this.quoted else e.name.lower()), 2
    if isinstance(e, exp.Cast):
        name, strength = _figure(e.this)
        if strength <= 1:
            t = type_name(e.to)
            return (t, 1) if t != "_pgarray" else (name, strength)
        return name, strength
    if isinstance(e, exp.Case):
        default = e.args.get("default")
        name, strength = _figure(default) if default is not None else ("", 0)
        return (name, strength) if strength > 1 else ("case", 1)
    if isinstance(e, exp.Subquery):
        inner = e.unnest()
        if isinstance(inner, exp.Select) and inner.expressions:
            first = inner.expressions[0]
            return (_column_name(first), 2) if isinstance(first, exp.Alias) else _figure(first)
        return "", 0
    if isinstance(e, exp.Exists):
        return "exists", 2
    if isinstance(e, exp.Array):
        return "array", 2
    if isinstance(e, exp.Anonymous):
        return str(e.this).lower(), 2
    for cls, special in _SPECIAL_NAMES.items():
        if isinstance(e, cls):
            return special, 2
    if isinstance(e, exp.Func) and not isinstance(e, exp.Binary | exp.Predicate | exp.Connector):
        return e.sql_name().lower(), 2
    return "", 0


def infer(e: exp.Expr, aliases: dict[str, str]) -> str:
    """The PostgreSQL type of an output expression: what RowDescription says and how values decode."""
    e = e.unalias() if isinstance(e, exp.Alias) else e
    if isinstance(e, exp.Paren | exp.Collate):
        return infer(e.this, aliases)
    if isinstance(e, exp.Dot) and isinstance(e.expression, exp.Func):
        return infer(e.expression, aliases)
    if isinstance(e, exp.Column):
        table = aliases.get(e.table) if e.table else None
        if table and e.name in _COLUMN_TYPES[table]:
            return _COLUMN_TYPES[table][e.name]
        return _column_type_by_name(e.name)
    if isinstance(e, exp.Cast):
        t = type_name(e.to)
        if t == "_pgarray":
            inner = e.to.sql("postgres").lower().replace("pg_catalog.", "").rstrip("[]").strip()
            elem = type_by_name(inner)
            return "_" + elem.name if elem and ("_" + elem.name) in BY_NAME else "_text"
        return t if t in BY_NAME or t in _OID_OUTPUT_TYPES else "text"
    t = _infer_other(e, aliases)
    return "text" if t == UNKNOWN else t


def _infer_other(e: exp.Expr, aliases: dict[str, str]) -> str:
    if isinstance(e, exp.Boolean | exp.Predicate | exp.Not | exp.And | exp.Or | exp.Exists | exp.RegexpLike
                  | exp.RegexpILike | exp.LogicalAnd | exp.LogicalOr | exp.Operator):
        return "bool"
    if isinstance(e, exp.Literal):
        return "text" if e.is_string else ("int4" if e.is_int else "numeric")
    if isinstance(e, exp.Null):
        return "text"
    if isinstance(e, exp.Count):
        return "int8"
    if isinstance(e, exp.Case):
        for branch in e.args.get("ifs") or []:
            return infer(branch.args["true"], aliases)
        return "text"
    if isinstance(e, exp.Coalesce | exp.Min | exp.Max | exp.Nullif | exp.Greatest | exp.Least):
        t = infer(e.this, aliases)
        return UNKNOWN if t == "text" and isinstance(e.this, exp.Column) else t
    if isinstance(e, exp.Sum):
        return "int8" if infer(e.this, aliases) in ("int2", "int4") else "numeric"
    if isinstance(e, exp.Add | exp.Sub | exp.Mul):
        t = infer(e.this, aliases)
        return t if t in ("int2", "int4", "int8", "float4", "float8", "numeric") else "int4"
    if isinstance(e, exp.ArrayAgg):
        inner = e.this.this if isinstance(e.this, exp.Order | exp.Distinct) else e.this
        if isinstance(e.this, exp.Distinct):
            inner = e.this.expressions[0]
        elem = infer(inner, aliases)
        return "_" + elem if "_" + elem in BY_NAME else "_text"
    if isinstance(e, exp.Subquery):
        inner = e.unnest()
        if isinstance(inner, exp.Select) and inner.expressions:
            return infer(inner.expressions[0], {**aliases, **_aliases(inner)})
        return "text"
    if isinstance(e, exp.Array):
        first = e.expressions[0] if e.expressions else None
        if isinstance(first, exp.Select) and first.expressions:
            elem = infer(first.expressions[0], {**aliases, **_aliases(first)})
            return "_" + elem if "_" + elem in BY_NAME else "_text"
        return "_text"
    if isinstance(e, exp.CurrentSchemas | exp.StringToArray):
        return "_name" if isinstance(e, exp.CurrentSchemas) else "_text"
    if isinstance(e, exp.CurrentSchema | exp.CurrentUser | exp.SessionUser | exp.CurrentDatabase):
        return "name"
    if isinstance(e, exp.Anonymous):
        return FUNCTION_TYPES.get(str(e.this).lower(), "text")
    if isinstance(e, exp.ArraySize | exp.Length | exp.StrPosition):
        return "int4"
    if isinstance(e, exp.CurrentTimestamp):
        return "timestamptz"
    return "text"


def _column_type_by_name(name: str) -> str:
    found = {cols[name] for cols in _COLUMN_TYPES.values() if name in cols}
    return found.pop() if len(found) == 1 else UNKNOWN


UNKNOWN = "?"  # a column of a CTE or subquery the inference cannot see into: typed by its values
