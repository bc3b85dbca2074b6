"""From SQL text to typed statements: split on top-level semicolons, then each statement's leading
keyword picks its parsers from one table (`_PARSERS`), tried in order; a parser returns None for a
statement that is not its own, and what no parser takes is sqlglot's to parse (INSERT, UPDATE,
DELETE, queries). Every error names the statement and its line and column in the submitted text."""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.core.limits import MAX_STATEMENT_BYTES
from sparkwave.frontend.statements.create import NAME, create_mv, create_sink, create_source, create_table
from sparkwave.frontend.statements.nodes import (
    AlterBackfillRate,
    AlterSinkRate,
    AlterSourceRate,
    Cancel,
    CreateMaterializedView,
    Delete,
    Describe,
    DropMaterializedView,
    DropSink,
    DropSource,
    DropTable,
    Explain,
    Flush,
    Insert,
    Query,
    Set,
    Show,
    Statement,
    Update,
    Wait,
)
from sparkwave.frontend.statements.sql import is_identifier, parse_sql, split

Parser = Callable[[Statement], Statement | None]


def parse(text: str) -> list[Statement]:
    if len(text) > MAX_STATEMENT_BYTES // 4 and (size := len(text.encode())) > MAX_STATEMENT_BYTES:
        raise SqlError(f"the SQL text is {size:,} bytes, more than the limit of {MAX_STATEMENT_BYTES:,} bytes "
                       f"({MAX_STATEMENT_BYTES // 2**20} MiB) on one call; load large data with Session.insert")
    return [parse_one(t, line, col) for t, line, col in split(text)]


def parse_one(text: str, line: int, col: int) -> Statement:
    """One statement (as `split` gives it: stripped, no `;`) starting at `line`, `col`."""
    at = Statement(text, line, col)
    m = _LEADING.match(text)
    for parser in _PARSERS[m.group(0).upper()] if m else ():
        if (stmt := parser(at)) is not None:
            return stmt
    return _sql(at)


def _flush(at: Statement) -> Flush | None:
    return Flush(at.text, at.line, at.col) if re.fullmatch(r"FLUSH", at.text, re.IGNORECASE) else None


def _wait(at: Statement) -> Wait | None:
    return Wait(at.text, at.line, at.col) if re.fullmatch(r"WAIT", at.text, re.IGNORECASE) else None


def _cancel(at: Statement) -> Cancel | None:
    m = re.fullmatch(r"CANCEL\s+JOBS?\s+(.+)", at.text, re.IGNORECASE | re.DOTALL)
    if not m:
        return None
    ids = [i.strip() for i in m.group(1).split(",")]
    if not all(re.fullmatch(r"[0-9]+", i) for i in ids):
        raise at.error("CANCEL JOBS expects job ids, e.g. CANCEL JOBS 3, 4 (see SHOW JOBS)")
    return Cancel(at.text, at.line, at.col, ids=tuple(int(i) for i in ids))


# ALTER <object> name SET <setting> = value: (the object's words, as errors name it, its one setting, node)
_ALTERS = ((r"MATERIALIZED\s+VIEW", "MATERIALIZED VIEW", "backfill_rate_limit", AlterBackfillRate),
           (r"(?:SOURCE|TABLE)", "SOURCE", "source_rate_limit", AlterSourceRate),
           (r"SINK", "SINK", "sink_rate_limit", AlterSinkRate))


def _alter(at: Statement) -> Statement:
    for words, what, setting, node in _ALTERS:
        m = re.fullmatch(r"ALTER\s+" + words + r"\s+" + NAME + r"\s+SET\s+" + NAME + r"\s*(?:=|\bTO\b)\s*(\S+)",
                         at.text, re.IGNORECASE)
        if m:
            if m.group(2).lower() != setting:
                raise at.error(f"unsupported ALTER {what} setting {m.group(2)!r}; supported: {setting.upper()}",
                               m.group(2))
            return node(at.text, at.line, at.col, name=m.group(1).lower(), value=m.group(3))
    raise at.error("unsupported ALTER statement; supported: ALTER MATERIALIZED VIEW name SET "
                   "BACKFILL_RATE_LIMIT = n | DEFAULT, ALTER SOURCE name SET SOURCE_RATE_LIMIT = n | DEFAULT, "
                   "ALTER SINK name SET SINK_RATE_LIMIT = n | DEFAULT")


def _show(at: Statement) -> Show:
    m = re.fullmatch(r"SHOW\s+(TABLES|MATERIALIZED\s+VIEWS|JOBS|SOURCES|SINKS|SOURCE\s+ERRORS)"
                     r"(?:\s+FROM\s+" + NAME + ")?", at.text, re.IGNORECASE)
    if not m:
        raise at.error("unsupported SHOW statement; supported: SHOW TABLES, SHOW MATERIALIZED VIEWS, SHOW JOBS, "
                       "SHOW SOURCES, SHOW SINKS, SHOW SOURCE ERRORS [FROM name]")
    what = " ".join(m.group(1).upper().split())
    if m.group(2) and what != "SOURCE ERRORS":
        raise at.error(f"SHOW {what} takes no FROM", "FROM")
    return Show(at.text, at.line, at.col, what=what, name=(m.group(2) or "").lower() or None)


def _describe(at: Statement) -> Describe | None:
    m = re.fullmatch(r"(?:DESCRIBE|DESC)\s+(SINK\s+)?" + NAME, at.text, re.IGNORECASE)
    return Describe(at.text, at.line, at.col, name=m.group(2).lower(), sink=bool(m.group(1))) if m else None


def _set(at: Statement) -> Set | None:
    m = re.fullmatch(r"SET\s+" + NAME + r"\s*(?:=|\bTO\b)\s*(.+)", at.text, re.IGNORECASE | re.DOTALL)
    if not m:
        return None
    value = m.group(2).strip()
    value = value[1:-1] if value.startswith("'") and value.endswith("'") else value
    return Set(at.text, at.line, at.col, key=m.group(1).lower(), value=value)


_DROPS = {"TABLE": DropTable, "SOURCE": DropSource, "SINK": DropSink, "MATERIALIZED VIEW": DropMaterializedView}


def _drop(at: Statement) -> Statement | None:
    m = re.fullmatch(r"DROP\s+(TABLE|SOURCE|SINK|MATERIALIZED\s+VIEW)\s+(IF\s+EXISTS\s+)?" + NAME
                     + r"(\s+(?:CASCADE|RESTRICT))?", at.text, re.IGNORECASE)
    if not m:
        return None
    node = _DROPS[" ".join(m.group(1).upper().split())]
    return node(at.text, at.line, at.col, name=m.group(3).lower(), if_exists=bool(m.group(2)),
                cascade=(m.group(4) or "").strip().upper() == "CASCADE")


_QUERY_WORDS = frozenset({"SELECT", "VALUES", "TABLE", "WITH", "CREATE"})


def _explain(at: Statement) -> Explain | None:
    """`EXPLAIN CREATE MATERIALIZED VIEW ...`, `EXPLAIN SELECT ...` (the inner statement's errors
    point into the same text) or `EXPLAIN name` (a materialized view's); nothing is run."""
    if not (m := re.match(r"EXPLAIN\s+", at.text, re.IGNORECASE)):
        return None
    rest = at.text[m.end():]
    # one bare word is never a query: a name, even one sqlglot knows as a keyword (an MV may be
    # named `first` or `comment`), unless it is a query's first word (`EXPLAIN select` is a query's error)
    if re.fullmatch(NAME, rest) and (is_identifier(rest) or rest.upper() not in _QUERY_WORDS):
        return Explain(at.text, at.line, at.col, target=rest.lower())
    before = at.text[:m.end()]
    nl = before.count("\n")
    line = at.line + nl
    col = (m.end() - before.rfind("\n")) if nl else at.col + m.end()
    inner = parse_one(rest, line, col)
    if not isinstance(inner, CreateMaterializedView | Query):
        raise at.error("EXPLAIN takes CREATE MATERIALIZED VIEW name AS SELECT ..., a SELECT or the name of a "
                       "materialized view", "EXPLAIN")
    return Explain(at.text, at.line, at.col, target=inner)


# A statement sqlglot parses, by the class of its tree (exp.Query: SELECT, VALUES, UNION, ...).
_BY_TREE: tuple[tuple[type[exp.Expr], Callable[..., Statement]], ...] = (
    (exp.Insert, Insert), (exp.Update, Update), (exp.Delete, Delete), (exp.Query, Query))


def _sql(at: Statement) -> Statement:
    ast = parse_sql(at, at.text)
    for tree, node in _BY_TREE:
        if isinstance(ast, tree):
            return node(at.text, at.line, at.col, ast=ast)
    words = at.text.split()
    raise at.error(f"unsupported statement {(words[0] if words else '').upper()} {type(ast).__name__}".strip(),
                   sqlstate="0A000")


# The parsers of a statement by its leading keyword, tried in order. The keyword is matched as a
# prefix (`SHOWS` is SHOW's to refuse, as `ALTERX` is ALTER's).
_PARSERS: dict[str, tuple[Parser, ...]] = {
    "FLUSH": (_flush,), "WAIT": (_wait,), "CANCEL": (_cancel,), "ALTER": (_alter,), "SHOW": (_show,),
    "DESCRIBE": (_describe,), "DESC": (_describe,), "SET": (_set,),
    "CREATE": (create_table, create_source, create_mv, create_sink), "DROP": (_drop,), "EXPLAIN": (_explain,),
}
_LEADING = re.compile("|".join(sorted(_PARSERS, key=len, reverse=True)), re.IGNORECASE)
