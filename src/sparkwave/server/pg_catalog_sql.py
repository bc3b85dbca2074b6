"""PostgreSQL catalog queries -> SQLite: parse with sqlglot (read='postgres'), rewrite what SQLite
lacks onto the functions of `pg_catalog_functions.py` (regex operators, ::regclass, arrays as JSON,
ANY, unnest and generate_subscripts, array_agg ... ORDER BY), and write SQLite SQL.

Only a single query (SELECT, UNION, WITH ... SELECT, VALUES) comes out: nothing the client sends
can become an ATTACH, a PRAGMA or a write, whatever its text."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from sparkwave.server.backend import ServerError
from sparkwave.server.pg_catalog_describe import (
    _OID_OUTPUT_TYPES,
    FUNCTION_TYPES,
    _column_type_by_name,
    describe,
    is_array_type,
    type_name,
)
from sparkwave.server.pg_catalog_schema import TABLES
from sparkwave.server.pg_catalog_types import type_by_name

_PARAM = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$(\d+)")
_ARRAY_CAST = re.compile(r"::\s*((?:pg_catalog\.)?\"?[A-Za-z_][\w ]*\"?)\s*\[\s*\]")
_SCHEMAS = ("pg_catalog", "information_schema")
_INT_TYPES = {"oid", "int2", "int4", "int8", "integer", "smallint", "bigint", "int", "xid", "regproc"}
_TEXT_TYPES = {"text", "varchar", "name", "char", "bpchar", "character varying", "character", "unknown",
               "pg_node_tree", "json", "jsonb"}



@dataclass(frozen=True)
class Translated:
    sqlite: str
    names: list[str] | None  # the result's column names (None: from SQLite, for SELECT *)
    types: list[str] | None  # their PostgreSQL type names


_LEXEMES = re.compile(r"--[^\n]*|/\*.*?\*/|\"(?:[^\"]|\"\")*\"|[Ee]'((?:[^'\\]|''|\\.)*)'|'((?:[^']|'')*)'|"
                      r"\$(\d+)", re.S)
_TYPED_LITERAL = re.compile(r"(?i)\b(interval|date|time|timestamp|timestamptz|timetz)\s*$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_MAX_PARAMETERS = 65_535  # as PostgreSQL, and params.MAX_PARAMETERS


def lift(sql: str, params: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """The query with its string literals turned into parameters after the client's own `$n`, and all
    the parameters' values (the client's, None for each when `params` is None: describing a statement
    before its parameters are known). The text without its literals is the same for psql's `\\d` of
    every relation (it spells OIDs and name patterns as literals), so its translation is cached once."""
    count = max((int(m.group(3)) for m in _LEXEMES.finditer(sql) if m.group(3)), default=0)
    if count > _MAX_PARAMETERS:  # `$99999999` would make a list of that many values
        raise ServerError("42P02", f"there is no parameter ${count}: a statement has at most {_MAX_PARAMETERS:,}")
    if params is not None and count > len(params):
        raise ServerError("08P01", f"there is no parameter ${count} (the statement got {len(params)})")
    values: list[Any] = list(params) if params is not None else [None] * count

    def replace(m: re.Match) -> str:
        escaped, plain = m.group(1), m.group(2)
        if m.group(3):
            return f" ${m.group(3)} "
        if escaped is None and plain is None or _TYPED_LITERAL.search(sql, 0, m.start()):
            return " " if m.group(0).startswith(("--", "/*")) else m.group(0)
        if escaped is not None:  # E'...': PostgreSQL's backslash escapes
            text = re.sub(r"\\(.)", lambda e: _ESCAPES.get(e.group(1), e.group(1)), escaped.replace("''", "'"))
        else:
            text = plain.replace("''", "'")
        values.append(text)
        return f" ${len(values)} "  # spaced: sqlglot reads "$1,$2" as a dollar-quoted string

    return _LEXEMES.sub(replace, sql), values


def sqlite_value(value: Any) -> Any:
    """A parameter's value as SQLite takes it: arrays as JSON text, booleans as 0/1."""
    if value is None or isinstance(value, int | float | str):
        return int(value) if isinstance(value, bool) else value
    if isinstance(value, list | tuple):
        import json

        return json.dumps(list(value), default=str)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


_PARAM_CAST = re.compile(r"\$(\d+)\s*::\s*((?:pg_catalog\.)?\"?[A-Za-z_][\w ]*?\"?(?:\s*\[\s*\])?)(?=[^\w\[]|$)")


def parameter_types(sql: str) -> dict[int, str]:
    """The PostgreSQL types the text gives its `$n` parameters by a cast (`$1::oid[]`, `$2::VARCHAR`),
    by number: what ParameterDescription says of a parameter the client left open."""
    out: dict[int, str] = {}
    for m in _PARAM_CAST.finditer(_PARAM.sub(lambda q: q.group(0) if q.group(1) else "''", sql)):
        t = type_by_name(m.group(2).strip())
        if t is not None:
            out.setdefault(int(m.group(1)), t.name)
    return out


@functools.lru_cache(maxsize=512)
def parse(sql: str) -> exp.Expr:
    """Cached (the same catalog queries come again and again): callers must not change the tree.
    The one query of `sql`, parsed as PostgreSQL. Array casts (`::oid[]`) are spelt `::_pgarray`
    first: sqlglot cannot parse them inside ANY(...), and SQLite keeps every array as JSON anyway."""
    text = _ARRAY_CAST.sub("::_pgarray", sql)
    try:
        statements = [s for s in sqlglot.parse(text, read="postgres") if s is not None]
    except sqlglot.errors.ParseError as e:
        raise ServerError("42601", f"syntax error in a catalog query: {_first_line(str(e))}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise ServerError("0A000", "only a single SELECT can be run against pg_catalog / information_schema")
    return statements[0]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


@functools.lru_cache(maxsize=512)
def translate_text(sql: str, user: str, database: str, version: str) -> Translated:
    """`translate` of a bound query's text, cached."""
    return translate(parse(sql), {"user": user, "database": database, "version": version})


def translate(tree: exp.Expr, session: dict[str, str]) -> Translated:
    """SQLite SQL for a parsed catalog query, and its result's names and PostgreSQL types."""
    _check_tables(tree)
    names, types = describe(tree)
    tree = _rewritten(tree.copy(), session)
    for select in list(tree.find_all(exp.Select)):
        _expand_set_returning(select)
    try:
        sql = tree.sql(dialect="sqlite", unsupported_level=sqlglot.ErrorLevel.RAISE)
    except sqlglot.errors.UnsupportedError as e:
        raise ServerError("0A000", f"the catalog emulation cannot run this query: {_first_line(str(e))}") from None
    return Translated(sql, names, types)


def _check_tables(tree: exp.Expr) -> None:
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a function in FROM: unnest, generate_series
        name, schema = table.name, table.db
        if schema and schema not in _SCHEMAS:
            raise ServerError("42P01", f'relation "{schema}.{name}" does not exist in the catalog emulation')
        if not schema and name in ctes:
            continue
        if not any(name in TABLES[s] for s in ([schema] if schema else _SCHEMAS)):
            what = f"{schema}.{name}" if schema else name
            raise ServerError("42P01", f'relation "{what}" does not exist: sparkwave emulates a part of pg_catalog '
                                       "and information_schema, and this table is not in it")


# --- rewriting ---------------------------------------------------------------------------------

def _fn(name: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _rewritten(tree: exp.Expr, session: dict[str, str]) -> exp.Expr:
    """Every rule applied top-down, into the nodes a rule builds too (sqlglot's transform does not
    descend into a replacement)."""
    def rule(node: exp.Expr) -> exp.Expr:
        new = _rewrite(node, session)
        return node if new is node else new.transform(rule, copy=False)
    return tree.transform(rule, copy=False)


def _rewrite(node: exp.Expr, session: dict[str, str]) -> exp.Expr:
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func) and node.this.name in _SCHEMAS:
        return _rewrite(node.expression, session)
    if isinstance(node, exp.Collate):
        return node.this
    if isinstance(node, exp.ByteString):
        return exp.Literal.string(node.this)
    if isinstance(node, exp.Cast):
        return _cast(node)
    if isinstance(node, exp.Operator):
        op = str(node.args.get("operator")).replace("pg_catalog.", "").strip()
        return _operator(op, node.this, node.expression)
    if isinstance(node, exp.RegexpLike):
        return _fn("pg_regex", node.this, node.expression, exp.Literal.string(""))
    if isinstance(node, exp.RegexpILike):
        return _fn("pg_regex", node.this, node.expression, exp.Literal.string("i"))
    if isinstance(node, exp.EQ | exp.NEQ) and isinstance(node.expression, exp.Any | exp.All):
        return _any(node)
    if isinstance(node, exp.DPipe) and (_is_array(node.this) or _is_array(node.expression)):
        return _fn("pg_array_cat", node.this, node.expression)
    if isinstance(node, exp.Array):
        return _array(node)
    if isinstance(node, exp.Bracket):
        return _subscript(node)
    if isinstance(node, exp.ArrayAgg | exp.GroupConcat):
        return _ordered_aggregate(node)
    if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier):
        return _table_function(node)
    if isinstance(node, exp.Unnest) and isinstance(node.parent, exp.From | exp.Join):
        return _unnest_table(node.expressions[0], node.args.get("alias"))
    return _rewrite_function(node, session)


def _rewrite_function(node: exp.Expr, session: dict[str, str]) -> exp.Expr:
    user, database = session.get("user", "root"), session.get("database", "dev")
    constants: dict[type, str] = {
        exp.CurrentSchema: "public", exp.CurrentUser: user, exp.SessionUser: user, exp.CurrentDatabase: database,
        exp.CurrentVersion: session.get("version", ""),
    }
    for cls, value in constants.items():
        if isinstance(node, cls):
            return exp.Literal.string(value)
    if isinstance(node, exp.CurrentSchemas):
        return exp.Literal.string('["pg_catalog", "public"]' if _is_true(node.this) else '["public"]')
    if isinstance(node, exp.Column) and not node.table and node.name.lower() == "user" and not node.this.quoted:
        return exp.Literal.string(user)
    renamed = {exp.ArrayToString: "array_to_string", exp.StringToArray: "string_to_array",
               exp.ArraySize: "array_length"}
    for cls, name in renamed.items():
        if isinstance(node, cls):
            return _fn(name, *[a for a in (node.this, *node.expressions, node.args.get("expression")) if a is not None])
    if isinstance(node, exp.Anonymous):
        name = str(node.this).lower()
        if name in CONSTANT_FUNCTIONS:
            return exp.Literal.string(session.get(CONSTANT_FUNCTIONS[name], ""))
        if re.fullmatch(r"pg_\w+_is_visible", name) and name not in FUNCTION_TYPES:
            return exp.Boolean(this=True)
        if name == "string_agg" and len(node.expressions) == 2:
            return _fn("pg_string_agg", node.expressions[0], node.expressions[1], exp.Literal.string(""))
        if name == "array_agg" and len(node.expressions) == 1:
            return _fn("pg_array_agg", node.expressions[0], exp.Literal.string(""))
        if name in ("bool_and", "bool_or", "every") and len(node.expressions) == 1:
            return _fn("min" if name != "bool_or" else "max", node.expressions[0])
        if name == "json_build_object":
            return _fn("json_object", *node.expressions)
        if name in ("unnest", "generate_subscripts"):
            return node  # handled per SELECT by _expand_set_returning
    return node


CONSTANT_FUNCTIONS = {"version": "version", "current_database": "database", "current_user": "user",
                       "session_user": "user", "current_role": "user", "current_catalog": "database",
                       "getpgusername": "user"}


def _is_true(e: exp.Expr | None) -> bool:
    return isinstance(e, exp.Boolean) and bool(e.this)


def _cast(node: exp.Cast) -> exp.Expr:
    t = type_name(node.to)
    inner = node.this
    if t in _OID_OUTPUT_TYPES:
        parent = node.parent
        as_name = (isinstance(parent, exp.Cast) or (isinstance(parent, exp.Anonymous) and parent.name == "pg_text")
                   or _is_output(node))
        return _fn(_OID_OUTPUT_TYPES[t], inner, exp.Literal.string("name" if as_name else "oid"))
    if t == "_pgarray":
        return _fn("pg_array", inner)
    if t in _INT_TYPES:
        return _fn("pg_int", inner)
    if t in _TEXT_TYPES:
        return _fn("pg_text", inner)
    if t == "bool":
        return _fn("pg_bool", inner)
    if t in ("float4", "float8", "numeric"):
        return _fn("pg_float", inner)
    return inner  # date/time, interval, json ...: SQLite keeps the value as it is


def _is_output(node: exp.Expr) -> bool:
    """Whether the value is shown (a projection or ORDER BY key), not compared: `oid::regclass`
    prints a name, `'orders'::regclass = c.oid` compares an OID."""
    parent = node.parent
    while isinstance(parent, exp.Alias | exp.Paren):
        parent = parent.parent
    return isinstance(parent, exp.Select | exp.Ordered)


def _operator(op: str, left: exp.Expr, right: exp.Expr) -> exp.Expr:
    flags = "i" if op.endswith("*") else ""
    if op in ("~", "~*", "!~", "!~*"):
        call = _fn("pg_regex", left, right, exp.Literal.string(flags))
        return exp.Not(this=call) if op.startswith("!") else call
    if op in ("=", "<>", "<", ">", "<=", ">="):
        cls = {"=": exp.EQ, "<>": exp.NEQ, "<": exp.LT, ">": exp.GT, "<=": exp.LTE, ">=": exp.GTE}[op]
        return cls(this=left, expression=right)
    if op in ("~~", "!~~"):
        like = exp.Like(this=left, expression=right)
        return exp.Not(this=like) if op.startswith("!") else like
    raise ServerError("42883", f"operator {op} is not supported by the catalog emulation")


def _any(node: exp.EQ | exp.NEQ) -> exp.Expr:
    quantified = node.expression
    arr = quantified.this
    if isinstance(arr, exp.Paren):
        arr = arr.this
    negate = isinstance(node, exp.NEQ)
    if isinstance(arr, exp.Array) and not any(isinstance(x, exp.Query) for x in arr.expressions):
        result: exp.Expr = exp.In(this=node.this, expressions=list(arr.expressions))
    elif isinstance(arr, exp.Query | exp.Subquery):
        result = exp.In(this=node.this, query=arr if isinstance(arr, exp.Subquery) else exp.Subquery(this=arr))
    else:
        result = _fn("pg_any_eq", node.this, arr)
    if isinstance(quantified, exp.All) != negate:
        raise ServerError("0A000", "only = ANY(...) and <> ALL(...) are supported by the catalog emulation")
    return exp.Not(this=result) if negate else result


def _is_array(e: exp.Expr) -> bool:
    """Whether `||` concatenates arrays here: an ARRAY[...]/ARRAY(...) or an array-typed catalog column."""
    if isinstance(e, exp.Array | exp.ArrayAgg):
        return True
    return isinstance(e, exp.Column) and is_array_type(_column_type_by_name(e.name))


def _array(node: exp.Array) -> exp.Expr:
    if len(node.expressions) == 1 and isinstance(node.expressions[0], exp.Query):
        inner = node.expressions[0].copy()
        first = inner.selects[0]
        name = first.alias if isinstance(first, exp.Alias) else first.name if isinstance(first, exp.Column) else ""
        if not name:
            name = "_v"
            first.replace(exp.alias_(first.copy(), name))
        col = exp.column(name, table="_a")
        agg = exp.select(_fn("json_group_array", col)).from_(exp.Subquery(this=inner, alias=exp.TableAlias(
            this=exp.to_identifier("_a"))))
        return _fn("coalesce", exp.Subquery(this=agg), exp.Literal.string("[]"))
    return _fn("json_array", *node.expressions)


def _subscript(node: exp.Bracket) -> exp.Expr:
    index = node.expressions[0]
    if not isinstance(index, exp.Literal):  # sqlglot shifts only literal subscripts to 0-based
        index = exp.Sub(this=index, expression=exp.Literal.number(1))
    return _fn("pg_subscript", node.this, index)


def _ordered_aggregate(node: exp.ArrayAgg | exp.GroupConcat) -> exp.Expr:
    arg = node.this
    keys: list[exp.Expr] = []
    directions = ""
    if isinstance(arg, exp.Order):
        for ordered in arg.expressions:
            keys.append(ordered.this)
            directions += "d" if ordered.args.get("desc") else "a"
        arg = arg.this
    if isinstance(arg, exp.Distinct):
        what = "array_agg" if isinstance(node, exp.ArrayAgg) else "string_agg"
        raise ServerError("0A000", f"{what}(DISTINCT ...) is not supported by the catalog emulation")
    if isinstance(node, exp.ArrayAgg):
        return _fn("pg_array_agg", arg, exp.Literal.string(directions), *keys)
    sep = node.args.get("separator") or exp.Literal.string(",")
    return _fn("pg_string_agg", arg, sep, exp.Literal.string(directions), *keys)


def _table_function(node: exp.Table) -> exp.Expr:
    func = node.this
    alias = node.args.get("alias")
    if isinstance(func, exp.Anonymous) and func.name == "json_each":
        return node  # built by _unnest_table
    if isinstance(func, exp.Explode | exp.Unnest):
        arg = func.this if isinstance(func, exp.Explode) else func.expressions[0]
        return _unnest_table(arg, alias)
    if isinstance(func, exp.ExplodingGenerateSeries | exp.GenerateSeries):
        series = _fn("pg_series", func.args["start"], func.args["end"], func.args.get("step") or exp.Literal.number(1))
        return _unnest_table(series, alias, default="generate_series")
    name = func.sql_name().lower() if isinstance(func, exp.Func) else str(func)
    if isinstance(func, exp.Anonymous):
        name = str(func.this).lower()
    if name in TABLES["pg_catalog"]:  # pg_available_extensions() and the like: their view's rows
        if alias is not None:
            alias = exp.TableAlias(this=alias.args.get("this"))  # its column names are the view's
        return exp.Table(this=exp.to_identifier(name), db=exp.to_identifier("pg_catalog"), alias=alias)
    if name in ("unnest", "generate_series", "generate_subscripts", "json_each", "jsonb_each", "regexp_matches"):
        raise ServerError("0A000", f"function {name}() in FROM is not supported by the catalog emulation")
    # a scalar function in FROM is a one-row table whose column is named after the alias
    table = alias.name if alias and alias.name else name
    cols = alias.args.get("columns") if alias else None
    inner = exp.select(exp.alias_(func, cols[0].name if cols else table))
    return exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(table)))


def _unnest_table(array: exp.Expr, alias: exp.TableAlias | None, default: str = "unnest") -> exp.Expr:
    """`unnest(arr) AS s` -> `(SELECT value AS s FROM json_each(arr)) AS s`: the column is named
    after the alias, as in PostgreSQL."""
    table = alias.name if alias and alias.name else default
    cols = alias.args.get("columns") if alias else None
    column = cols[0].name if cols else table
    each = exp.Table(this=_fn("json_each", _fn("pg_array", array)))
    inner = exp.select(exp.alias_(exp.column("value"), column)).from_(each)
    return exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(table)))


def _srf_name(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Explode):
        return "unnest"
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("unnest", "generate_subscripts"):
        return str(node.this).lower()
    return None


def _expand_set_returning(select: exp.Select) -> None:
    """`SELECT unnest(a) AS x, generate_subscripts(a, 1) AS i FROM t` (PostgreSQL zips the set-returning
    functions of one projection) -> `SELECT pg_subscript(a, _srf.key), _srf.key + 1 FROM t JOIN
    json_each(pg_array(a)) AS _srf`: one row per element of the first array."""
    calls = [n for e in select.expressions for n in e.walk() if _srf_name(n)]
    calls = [c for c in calls if c.find_ancestor(exp.Select) is select]
    if not calls:
        return
    if not select.args.get("from_"):
        raise ServerError("0A000", "a set-returning function without FROM is not supported by the catalog emulation")
    driver = calls[0].this if isinstance(calls[0], exp.Explode) else calls[0].expressions[0]
    key = exp.column("key", table="_srf")
    for call in calls:
        arr = call.this if isinstance(call, exp.Explode) else call.expressions[0]
        if _srf_name(call) == "unnest":
            call.replace(_fn("pg_subscript", arr.copy(), key.copy()))
        else:
            call.replace(exp.Add(this=key.copy(), expression=exp.Literal.number(1)))
    each = exp.Table(this=_fn("json_each", _fn("pg_array", driver.copy())),
                     alias=exp.TableAlias(this=exp.to_identifier("_srf")))
    select.append("joins", exp.Join(this=each))
