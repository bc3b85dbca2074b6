"""RisingWave's clauses of event time that sqlglot's PostgreSQL reader does not know, taken off the
text before it parses the rest: `WATERMARK FOR col AS expr` in a CREATE TABLE's or SOURCE's column
list, and `EMIT ON WINDOW CLOSE` at the end of a materialized view's query."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from sparkwave.frontend.statements.nodes import Statement
from sparkwave.frontend.statements.sql import parse_sql

_WATERMARK = re.compile(r",?\s*\bWATERMARK\s+FOR\s+(\"?[A-Za-z_][A-Za-z0-9_]*\"?)\s+AS\s+", re.IGNORECASE)
_EOWC = re.compile(r"\bEMIT\s+ON\s+WINDOW\s+CLOSE\s*;?\s*$", re.IGNORECASE)
_EMIT = re.compile(r"\bEMIT\s+ON\b", re.IGNORECASE)


@dataclass(frozen=True)
class WatermarkClause:
    column: str  # as written, lower-cased
    expr: exp.Expr  # the expression, parsed and checked
    sql: str  # its text as written


def _clause_end(text: str, start: int) -> int:
    """Where an expression starting at `start` ends: the first `,` or `)` outside parentheses and quotes."""
    depth, i, quote = 0, start, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i
            depth -= 1
        elif c == "," and depth == 0:
            return i
        i += 1
    return i


def take_watermark(at: Statement, body: str) -> tuple[str, WatermarkClause | None]:
    """`body` without its `WATERMARK FOR col AS expr` element, and the clause (None: not written)."""
    m = _WATERMARK.search(body)
    if m is None:
        return body, None
    end = _clause_end(body, m.end())
    sql = body[m.end():end].strip()
    if not sql:
        raise at.error("WATERMARK FOR col AS needs an expression, e.g. col - INTERVAL '5' SECOND", "WATERMARK")
    select = parse_sql(at, f"SELECT {sql}")
    assert isinstance(select, exp.Select)
    after = end + 1 if not m.group(0).startswith(",") and body[end:end + 1] == "," else end  # first element
    rest = body[: m.start()] + body[after:]
    if _WATERMARK.search(rest):
        raise at.error("a relation has at most one WATERMARK", "WATERMARK")
    rest = re.sub(r"\(\s*\)\s*$", "", rest.rstrip())  # the only element: the connector names the columns
    return rest, WatermarkClause(m.group(1).strip('"').lower(), select.expressions[0], sql)


def take_emit(at: Statement, query: str) -> tuple[str, bool]:
    """The query without a trailing `EMIT ON WINDOW CLOSE`, and whether it had one."""
    if m := _EOWC.search(query):
        return query[: m.start()], True
    if _EMIT.search(query):
        raise at.error("the only EMIT clause is EMIT ON WINDOW CLOSE, at the end of the query", "EMIT")
    return query, False
