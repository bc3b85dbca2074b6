"""CREATE TABLE, SOURCE, MATERIALIZED VIEW and SINK: RisingWave's clauses sqlglot does not know
(`APPEND ONLY`, `ON CONFLICT`, `INCLUDE`, connector `WITH (...)` options, `FORMAT ... ENCODE ...`)
are taken off the end of the text first; sqlglot parses the rest. Each parser returns None for a
statement that is not its own."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.frontend.plan.generated import take_generated_columns
from sparkwave.frontend.plan.proctime import take_proctime_columns
from sparkwave.frontend.statements.nodes import CreateMaterializedView, CreateSink, CreateSource, CreateTable, Statement
from sparkwave.frontend.statements.sql import parse_sql
from sparkwave.frontend.statements.watermark import take_emit, take_watermark

NAME = r"([A-Za-z_][A-Za-z0-9_]*)"  # a relation's name is further checked by core/names.py
_OPTIONS = re.compile(r"\bWITH\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)
# RisingWave's `FORMAT f ENCODE e [(key = 'value', ...)]`: the parenthesised options become `format.<key>`
_FORMAT = re.compile(r"\bFORMAT\s+([A-Za-z_]+)\s+ENCODE\s+([A-Za-z_]+)\s*(?:\(([^()]*)\)\s*)?$", re.IGNORECASE)
# RisingWave's `ON CONFLICT` of a keyed table: what an INSERT of a key the table holds does
_ON_CONFLICT = re.compile(r"\bON\s+CONFLICT\s+(OVERWRITE|IGNORE|DO\s+NOTHING|DO\s+UPDATE\s+FULL|"
                          r"DO\s+UPDATE\s+IF\s+NOT\s+NULL)\s*$", re.IGNORECASE)
_CONFLICT_ACTIONS = {"OVERWRITE": "overwrite", "DO UPDATE FULL": "overwrite", "IGNORE": "ignore",
                     "DO NOTHING": "ignore", "DO UPDATE IF NOT NULL": "update_if_not_null"}
_INCLUDE = re.compile(r"\bINCLUDE\s+(partition|offset|timestamp|key)(?:\s+AS\s+" + NAME + r")?\s*$", re.IGNORECASE)
_OPTION = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*('(?:[^']|'')*'|[-+]?[0-9.]+|[A-Za-z_]+)\s*(?:,|$)")
_TABLE = re.compile(r"CREATE\s+TABLE\b", re.IGNORECASE)
_SOURCE = re.compile(r"CREATE\s+SOURCE\b", re.IGNORECASE)
_MV = re.compile(r"CREATE\s+MATERIALIZED\s+VIEW\s+(IF\s+NOT\s+EXISTS\s+)?" + NAME
                 + r"\s*(?:\(([^()]*)\)\s*)?(WITH\s*\((.*?)\)\s*)?AS\s+(.*)$", re.IGNORECASE | re.DOTALL)
_SINK_HEAD = re.compile(r"CREATE\s+SINK\b", re.IGNORECASE)
_SINK = re.compile(r"CREATE\s+SINK\s+(IF\s+NOT\s+EXISTS\s+)?" + NAME + r"\s+(?:FROM\s+" + NAME
                   + r"|AS\s+(.*?))\s*\bWITH\s*\((.*)\)\s*(?:FORMAT\s+([A-Za-z_]+)\s+ENCODE\s+([A-Za-z_]+)\s*)?$",
                   re.IGNORECASE | re.DOTALL)


def parse_options(stmt_text: str, body: str) -> dict[str, str]:
    """`key = 'value', ...` of a WITH (...), keys lower-cased, quotes removed."""
    options: dict[str, str] = {}
    pos = 0
    body = body.strip()
    while pos < len(body):
        m = _OPTION.match(body, pos)
        if not m:
            raise SqlError(f"cannot parse WITH option near {body[pos:pos + 30]!r}; expected key = 'value' "
                           f"(in: {' '.join(stmt_text.split())[:80]})")
        value = m.group(2)
        options[m.group(1).lower()] = value[1:-1].replace("''", "'") if value.startswith("'") else value
        pos = m.end()
    return options


@dataclass
class _TableClauses:
    """What the RisingWave clauses at the end of a CREATE TABLE say, and the text before them."""

    body: str
    options: dict[str, str]
    on_conflict: str | None
    append_only: bool


def _table_clauses(at: Statement, text: str) -> _TableClauses:
    """Take FORMAT, WITH, INCLUDE, ON CONFLICT and APPEND ONLY off the end of `text`, last first."""
    options: dict[str, str] = {}
    body = text
    if m := _FORMAT.search(body):
        options.update({"format": m.group(1).lower(), "encode": m.group(2).lower()})
        if m.group(3) is not None:
            options.update({f"format.{k}": v for k, v in parse_options(text, m.group(3)).items()})
        body = body[: m.start()]
    if m := _OPTIONS.search(body):
        options = {**parse_options(text, m.group(1)), **options}
        body = body[: m.start()]
    while m := _INCLUDE.search(body):  # RisingWave's INCLUDE clauses, last first
        what = m.group(1).lower()
        options[f"include.{what}"] = (m.group(2) or f"_rw_kafka_{what}").lower()
        body = body[: m.start()]
    on_conflict = None
    if m := _ON_CONFLICT.search(body):
        on_conflict = _CONFLICT_ACTIONS[" ".join(m.group(1).upper().split())]
        body = body[: m.start()]
    elif re.search(r"\bON\s+CONFLICT\b", body, re.IGNORECASE):
        raise at.error("ON CONFLICT takes OVERWRITE, IGNORE (or DO NOTHING), DO UPDATE FULL or DO UPDATE IF NOT "
                       "NULL", "ON CONFLICT")
    append_only = False
    if m := re.search(r"\bAPPEND\s+ONLY\s*$", body.rstrip(), re.IGNORECASE):
        append_only = True
        body = body.rstrip()[: m.start()]
    return _TableClauses(body, options, on_conflict, append_only)


def _table(at: Statement, text: str, node: type[CreateTable]) -> CreateTable:
    clauses = _table_clauses(at, text)
    body, watermark = take_watermark(at, clauses.body)
    body, proctime = take_proctime_columns(at, body)
    body, generated = take_generated_columns(at, body)
    ast = parse_sql(at, body)
    if isinstance(ast, exp.Create) and isinstance(ast.this, exp.Table) and clauses.options.get("connector"):
        ast.set("this", exp.Schema(this=ast.this, expressions=[]))  # no columns: the connector may know them
    if not isinstance(ast, exp.Create) or not isinstance(ast.this, exp.Schema):
        raise at.error("expected CREATE TABLE name (column type, ..., [PRIMARY KEY (...)])")
    if ast.expression is not None:
        raise at.error("CREATE TABLE ... AS SELECT is not supported; use CREATE MATERIALIZED VIEW", "AS")
    return node(at.text, at.line, at.col, ast=ast, options=clauses.options, append_only=clauses.append_only,
                on_conflict=clauses.on_conflict, if_not_exists=bool(ast.args.get("exists")), watermark=watermark,
                proctime=proctime, generated=generated)


def create_table(at: Statement) -> CreateTable | None:
    return _table(at, at.text, CreateTable) if _TABLE.match(at.text) else None


def create_source(at: Statement) -> CreateTable | None:
    """Parsed as the CREATE TABLE it resembles: sqlglot does not know CREATE SOURCE."""
    m = _SOURCE.match(at.text)
    if m:
        _no_proctime_column(at)
    return _table(at, "CREATE TABLE" + at.text[m.end():], CreateSource) if m else None


def _no_proctime_column(at: Statement) -> None:
    """A source's rows are not stored, so it has no `col TIMESTAMPTZ AS PROCTIME()` column (a table's
    is stored: `plan/proctime.py`); say what to write (sqlglot would report a syntax error at AS)."""
    if re.search(r"\bAS\s+PROCTIME\s*\(\s*\)", at.text, re.IGNORECASE):
        raise at.error("a source has no column AS PROCTIME(): its rows are not stored; create a TABLE with the "
                       "column instead, or join the source in a materialized view with FOR SYSTEM_TIME AS OF "
                       "PROCTIME()", "PROCTIME")


def create_mv(at: Statement) -> CreateMaterializedView | None:
    m = _MV.match(at.text)
    if not m:
        return None
    options = parse_options(at.text, m.group(5)) if m.group(4) else {}
    text, eowc = take_emit(at, m.group(6))
    query = parse_sql(at, text, planned=True)
    columns = [c.strip().strip('"').lower() for c in m.group(3).split(",")] if m.group(3) is not None else []
    if any(not re.fullmatch(r"[a-z_][a-z0-9_]*", c) for c in columns):
        raise at.error(f"bad column list ({m.group(3)}) of materialized view {m.group(2)}: expected names "
                       "separated by commas", "(")
    return CreateMaterializedView(at.text, at.line, at.col, name=m.group(2).lower(), if_not_exists=bool(m.group(1)),
                                  options=options, query=text, columns=tuple(columns), ast=query,
                                  emit_on_window_close=eowc)


def create_sink(at: Statement) -> CreateSink | None:
    """`CREATE SINK name FROM mv | AS query WITH (...) [FORMAT f ENCODE e]`, RisingWave's syntax."""
    if not _SINK_HEAD.match(at.text):
        return None
    m = _SINK.fullmatch(at.text)
    if not m:
        raise at.error("expected CREATE SINK name FROM materialized_view | AS SELECT ... WITH (connector = '...', "
                       "...) [FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON]")
    options = parse_options(at.text, m.group(5))
    if m.group(6):
        options.update({"format": m.group(6).lower(), "encode": m.group(7).lower()})
    query = m.group(4)
    ast = parse_sql(at, query) if query else None
    if ast is not None and not isinstance(ast, exp.Query):
        raise at.error("CREATE SINK ... AS needs a SELECT query", "AS")
    return CreateSink(at.text, at.line, at.col, name=m.group(2).lower(), if_not_exists=bool(m.group(1)),
                      upstream=(m.group(3) or "").lower() or None, query=query, options=options, ast=ast)
