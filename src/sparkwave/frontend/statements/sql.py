"""Statements sqlglot parses (PostgreSQL dialect), checked before anything runs: a syntax error
points into the submitted text, a clause the planner would drop is refused by name
(`plan/closed_world.py`), and a function outside the documented set is refused
(`functions.check`), so none reaches Spark."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from sparkwave.core.errors import SqlError
from sparkwave.frontend.constants import check_interval_literals
from sparkwave.frontend.functions import check, check_nesting, too_deep
from sparkwave.frontend.plan.closed_world import check_dropped
from sparkwave.frontend.postgres import DIALECT
from sparkwave.frontend.statements.nodes import Statement


def split(text: str) -> list[tuple[str, int, int]]:
    """Statements of `text` as (text, line, column), split on top-level semicolons."""
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text)
    except TokenError as e:
        raise SqlError(f"cannot tokenize SQL: {e}") from None
    out, start = [], 0
    for t in [*tokens, None]:
        end = t.start if t is not None and t.token_type == TokenType.SEMICOLON else (len(text) if t is None else -1)
        if end < 0:
            continue
        chunk = text[start:end]
        stripped = chunk.strip()
        if stripped:
            offset = start + (len(chunk) - len(chunk.lstrip()))
            line = text.count("\n", 0, offset) + 1
            col = offset - (text.rfind("\n", 0, offset) + 1) + 1
            out.append((stripped, line, col))
        if t is not None:
            start = t.end + 1
    return out


def is_identifier(text: str) -> bool:
    """Whether `text` is one bare name (not a keyword such as SELECT)."""
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text)
    except TokenError:
        return False
    return len(tokens) == 1 and tokens[0].token_type == TokenType.VAR


def parse_sql(at: Statement, text: str, *, planned: bool = False) -> exp.Expr:
    """The one statement of `text`, checked; errors name `at` (the statement `text` is part of).
    `planned`: a materialized view's query, which the planner plans (`check_dropped`)."""
    dialect = sqlglot.Dialect.get_or_raise(DIALECT)
    try:
        tokens = dialect.tokenize(text)
        check_nesting(tokens, at.error)
        check_interval_literals(tokens, at.error)  # before sqlglot's parser drops a part of one
        asts = dialect.parser().parse(tokens, text)
    except RecursionError:
        raise at.error(too_deep()) from None
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        line = at.line + err.get("line", 1) - 1
        col = err.get("col", 0) + (at.col - 1 if err.get("line", 1) == 1 else 0)
        raise SqlError(f"syntax error at line {line}, column {col}: {err.get('description', str(e))} "
                       f"near {err.get('highlight', '')!r} (in: {at.snippet})",
                       at=(line, max(1, col - len(err.get("highlight") or " ") + 1))) from None
    if len(asts) != 1 or asts[0] is None:
        raise at.error("expected exactly one statement")
    check_dropped(asts[0], at.error, planned=planned)  # clauses dropped or read otherwise, refused by name
    check(asts[0], text, at.error)
    return asts[0]
