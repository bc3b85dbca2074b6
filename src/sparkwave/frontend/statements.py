"""Splitting SQL text into statements and recognising each one.

sqlglot (PostgreSQL dialect) parses the standard statements. The RisingWave ones it does not
know (`FLUSH`, `SHOW JOBS`, `APPEND ONLY`, connector `WITH (...)` options) are recognised here
first. Every error names the statement and its line and column in the submitted text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from sparkwave.core.errors import SqlError
from sparkwave.core.limits import MAX_STATEMENT_BYTES
from sparkwave.frontend.functions import check, check_nesting, too_deep
from sparkwave.frontend.plan.closed_world import check_dropped
from sparkwave.frontend.postgres import DIALECT
from sparkwave.meta.settings import SPECS, rate_limit


@dataclass(frozen=True)
class Statement:
    """One statement: its text, where it starts in the submitted text, and its parsed form."""

    text: str
    line: int
    col: int
    kind: str  # flush | wait | cancel | alter_rate | show | describe | set | create_table | create_mv | drop | ...
    ast: exp.Expr | None = None
    args: dict = field(default_factory=dict)

    def where(self, keyword: str | None = None) -> str:
        """'line L, column C' of the statement, or of `keyword` inside it."""
        line, col = self.at(keyword)
        return f"line {line}, column {col}"

    def at(self, keyword: str | None = None) -> tuple[int, int]:
        """(line, column) of the statement, or of `keyword` inside it."""
        line, col = self.line, self.col
        if keyword:
            m = re.search(r"\b" + r"\s+".join(map(re.escape, keyword.split())) + r"\b", self.text, re.IGNORECASE)
            if m:
                before = self.text[: m.start()]
                nl = before.count("\n")
                line = self.line + nl
                col = (len(before) - before.rfind("\n")) if nl else self.col + len(before)
        return line, col

    def error(self, message: str, keyword: str | None = None, sqlstate: str | None = None) -> SqlError:
        return SqlError(f"{message} (at {self.where(keyword)}: {self.snippet})", sqlstate=sqlstate,
                        at=self.at(keyword))

    @property
    def snippet(self) -> str:
        s = " ".join(self.text.split())
        return s if len(s) <= 80 else s[:77] + "..."


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


_NAME = r"([A-Za-z_][A-Za-z0-9_]*)"  # a relation's name is further checked by core/names.py
_OPTIONS = re.compile(r"\bWITH\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)
_FORMAT = re.compile(r"\bFORMAT\s+([A-Za-z_]+)\s+ENCODE\s+([A-Za-z_]+)\s*$", re.IGNORECASE)
# RisingWave's `ON CONFLICT` of a keyed table: what an INSERT of a key the table holds does
_ON_CONFLICT = re.compile(r"\bON\s+CONFLICT\s+(OVERWRITE|IGNORE|DO\s+NOTHING|DO\s+UPDATE\s+FULL|"
                          r"DO\s+UPDATE\s+IF\s+NOT\s+NULL)\s*$", re.IGNORECASE)
_CONFLICT_ACTIONS = {"OVERWRITE": "overwrite", "DO UPDATE FULL": "overwrite", "IGNORE": "ignore",
                     "DO NOTHING": "ignore", "DO UPDATE IF NOT NULL": "update_if_not_null"}
_INCLUDE = re.compile(r"\bINCLUDE\s+(partition|offset|timestamp|key)(?:\s+AS\s+" + _NAME + r")?\s*$", re.IGNORECASE)
_OPTION = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*('(?:[^']|'')*'|[-+]?[0-9.]+|[A-Za-z_]+)\s*(?:,|$)")


def parse_options(stmt_text: str, body: str) -> dict[str, str]:
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


def parse(text: str) -> list[Statement]:
    if len(text) > MAX_STATEMENT_BYTES // 4 and (size := len(text.encode())) > MAX_STATEMENT_BYTES:
        raise SqlError(f"the SQL text is {size:,} bytes, more than the limit of {MAX_STATEMENT_BYTES:,} bytes "
                       f"({MAX_STATEMENT_BYTES // 2**20} MiB) on one call; load large data with Session.insert")
    return [classify(t, line, col) for t, line, col in split(text)]


def classify(text: str, line: int, col: int) -> Statement:
    base = Statement(text, line, col, "")
    words = text.split()
    head = " ".join(words[:3]).upper()
    if re.fullmatch(r"FLUSH", text, re.IGNORECASE):
        return Statement(text, line, col, "flush")
    if re.fullmatch(r"WAIT", text, re.IGNORECASE):
        return Statement(text, line, col, "wait")
    m = re.fullmatch(r"CANCEL\s+JOBS?\s+(.+)", text, re.IGNORECASE | re.DOTALL)
    if m:
        ids = [i.strip() for i in m.group(1).split(",")]
        if not all(re.fullmatch(r"[0-9]+", i) for i in ids):
            raise base.error("CANCEL JOBS expects job ids, e.g. CANCEL JOBS 3, 4 (see SHOW JOBS)")
        return Statement(text, line, col, "cancel", args={"ids": [int(i) for i in ids]})
    m = re.fullmatch(r"ALTER\s+MATERIALIZED\s+VIEW\s+" + _NAME + r"\s+SET\s+" + _NAME + r"\s*(?:=|\bTO\b)\s*(\S+)",
                     text, re.IGNORECASE)
    if m:
        if m.group(2).lower() != "backfill_rate_limit":
            raise base.error(f"unsupported ALTER MATERIALIZED VIEW setting {m.group(2)!r}; supported: "
                             "BACKFILL_RATE_LIMIT", m.group(2))
        return Statement(text, line, col, "alter_rate", args={"name": m.group(1).lower(), "value": m.group(3)})
    m = re.fullmatch(r"ALTER\s+(?:SOURCE|TABLE)\s+" + _NAME + r"\s+SET\s+" + _NAME + r"\s*(?:=|\bTO\b)\s*(\S+)",
                     text, re.IGNORECASE)
    if m:
        if m.group(2).lower() != "source_rate_limit":
            raise base.error(f"unsupported ALTER SOURCE setting {m.group(2)!r}; supported: SOURCE_RATE_LIMIT",
                             m.group(2))
        return Statement(text, line, col, "alter_source_rate", args={"name": m.group(1).lower(),
                                                                     "value": m.group(3)})
    m = re.fullmatch(r"ALTER\s+SINK\s+" + _NAME + r"\s+SET\s+" + _NAME + r"\s*(?:=|\bTO\b)\s*(\S+)", text,
                     re.IGNORECASE)
    if m:
        if m.group(2).lower() != "sink_rate_limit":
            raise base.error(f"unsupported ALTER SINK setting {m.group(2)!r}; supported: SINK_RATE_LIMIT", m.group(2))
        return Statement(text, line, col, "alter_sink_rate", args={"name": m.group(1).lower(), "value": m.group(3)})
    if head.startswith("ALTER"):
        raise base.error("unsupported ALTER statement; supported: ALTER MATERIALIZED VIEW name SET "
                         "BACKFILL_RATE_LIMIT = n | DEFAULT, ALTER SOURCE name SET SOURCE_RATE_LIMIT = n | DEFAULT, "
                         "ALTER SINK name SET SINK_RATE_LIMIT = n | DEFAULT")
    m = re.fullmatch(r"SHOW\s+(TABLES|MATERIALIZED\s+VIEWS|JOBS|SOURCES|SINKS|SOURCE\s+ERRORS)"
                     r"(?:\s+FROM\s+" + _NAME + ")?", text, re.IGNORECASE)
    if m:
        what = " ".join(m.group(1).upper().split())
        if m.group(2) and what != "SOURCE ERRORS":
            raise base.error(f"SHOW {what} takes no FROM", "FROM")
        return Statement(text, line, col, "show", args={"what": what, "name": (m.group(2) or "").lower() or None})
    if head.startswith("SHOW"):
        raise base.error("unsupported SHOW statement; supported: SHOW TABLES, SHOW MATERIALIZED VIEWS, SHOW JOBS, "
                         "SHOW SOURCES, SHOW SINKS, SHOW SOURCE ERRORS [FROM name]")
    m = re.fullmatch(r"(?:DESCRIBE|DESC)\s+(SINK\s+)?" + _NAME, text, re.IGNORECASE)
    if m:
        return Statement(text, line, col, "describe", args={"name": m.group(2).lower(), "sink": bool(m.group(1))})
    m = re.fullmatch(r"SET\s+" + _NAME + r"\s*(?:=|\bTO\b)\s*(.+)", text, re.IGNORECASE | re.DOTALL)
    if m:
        value = m.group(2).strip()
        value = value[1:-1] if value.startswith("'") and value.endswith("'") else value
        return Statement(text, line, col, "set", args={"key": m.group(1).lower(), "value": value})
    if re.match(r"CREATE\s+TABLE\b", text, re.IGNORECASE):
        return _create_table(base)
    if re.match(r"CREATE\s+SOURCE\b", text, re.IGNORECASE):
        m = re.match(r"CREATE\s+SOURCE\b", text, re.IGNORECASE)
        assert m is not None
        # Parsed as the CREATE TABLE it resembles; sqlglot does not know CREATE SOURCE.
        stmt = _create_table(base, "CREATE TABLE" + text[m.end():])
        return Statement(text, line, col, "create_source", stmt.ast, stmt.args)
    m = re.match(r"CREATE\s+MATERIALIZED\s+VIEW\s+(IF\s+NOT\s+EXISTS\s+)?" + _NAME
                 + r"\s*(?:\(([^()]*)\)\s*)?(WITH\s*\((.*?)\)\s*)?AS\s+(.*)$", text, re.IGNORECASE | re.DOTALL)
    if m:
        options = parse_options(text, m.group(5)) if m.group(4) else {}
        query = _parse_sql(base, m.group(6))
        columns = [c.strip().strip('"').lower() for c in m.group(3).split(",")] if m.group(3) is not None else []
        if any(not re.fullmatch(r"[a-z_][a-z0-9_]*", c) for c in columns):
            raise base.error(f"bad column list ({m.group(3)}) of materialized view {m.group(2)}: expected names "
                             "separated by commas", "(")
        return Statement(text, line, col, "create_mv", query,
                         {"name": m.group(2).lower(), "if_not_exists": bool(m.group(1)), "options": options,
                          "query": m.group(6), "columns": columns})
    if re.match(r"CREATE\s+SINK\b", text, re.IGNORECASE):
        return _create_sink(base)
    m = re.fullmatch(r"DROP\s+(TABLE|SOURCE|SINK|MATERIALIZED\s+VIEW)\s+(IF\s+EXISTS\s+)?" + _NAME
                     + r"(\s+(?:CASCADE|RESTRICT))?", text, re.IGNORECASE)
    if m:
        kind = {"TABLE": "table", "SOURCE": "source", "SINK": "sink"}.get(m.group(1).upper(), "mv")
        return Statement(text, line, col, "drop", args={"kind": kind, "name": m.group(3).lower(),
                                                        "if_exists": bool(m.group(2)),
                                                        "cascade": (m.group(4) or "").strip().upper() == "CASCADE"})
    if m := re.match(r"EXPLAIN\s+", text, re.IGNORECASE):
        return _explain(base, m.end())
    ast = _parse_sql(base, text)
    if isinstance(ast, exp.Insert):
        return Statement(text, line, col, "insert", ast)
    if isinstance(ast, exp.Update):
        return Statement(text, line, col, "update", ast)
    if isinstance(ast, exp.Delete):
        return Statement(text, line, col, "delete", ast)
    if isinstance(ast, exp.Query):
        return Statement(text, line, col, "query", ast)
    raise base.error(f"unsupported statement {(words[0] if words else '').upper()} {type(ast).__name__}".strip(),
                     sqlstate="0A000")


def _explain(base: Statement, start: int) -> Statement:
    """`EXPLAIN CREATE MATERIALIZED VIEW ...` or `EXPLAIN SELECT ...`: the statement it explains
    (whose errors point into the same text) under `args["statement"]`; nothing is run."""
    before = base.text[:start]
    nl = before.count("\n")
    line = base.line + nl
    col = (start - before.rfind("\n")) if nl else base.col + start
    inner = classify(base.text[start:], line, col)
    if inner.kind not in ("create_mv", "query"):
        raise base.error("EXPLAIN takes CREATE MATERIALIZED VIEW name AS SELECT ... or a SELECT", "EXPLAIN")
    return Statement(base.text, base.line, base.col, "explain", inner.ast, {"statement": inner})


def _parse_sql(base: Statement, text: str) -> exp.Expr:
    """The one statement of `text`, checked (`functions.check`): every statement with expressions
    is parsed here, so none reaches Spark with a function outside the documented set."""
    dialect = sqlglot.Dialect.get_or_raise(DIALECT)
    try:
        tokens = dialect.tokenize(text)
        check_nesting(tokens, base.error)
        asts = dialect.parser().parse(tokens, text)
    except RecursionError:
        raise base.error(too_deep()) from None
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        line = base.line + err.get("line", 1) - 1
        col = err.get("col", 0) + (base.col - 1 if err.get("line", 1) == 1 else 0)
        raise SqlError(f"syntax error at line {line}, column {col}: {err.get('description', str(e))} "
                       f"near {err.get('highlight', '')!r} (in: {base.snippet})",
                       at=(line, max(1, col - len(err.get("highlight") or " ") + 1))) from None
    if len(asts) != 1 or asts[0] is None:
        raise base.error("expected exactly one statement")
    check_dropped(asts[0], base.error)  # clauses that would be dropped or read otherwise, refused by name
    check(asts[0], text, base.error)
    return asts[0]


def _create_table(base: Statement, text: str | None = None) -> Statement:
    text = text or base.text
    options: dict[str, str] = {}
    body = text
    m = _FORMAT.search(body)
    if m:
        options.update({"format": m.group(1).lower(), "encode": m.group(2).lower()})
        body = body[: m.start()]
    m = _OPTIONS.search(body)
    if m:
        options = {**parse_options(text, m.group(1)), **options}
        body = body[: m.start()]
    while m := _INCLUDE.search(body):  # RisingWave's INCLUDE clauses, last first
        what = m.group(1).lower()
        options[f"include.{what}"] = (m.group(2) or f"_rw_kafka_{what}").lower()
        body = body[: m.start()]
    on_conflict = None
    if m3 := _ON_CONFLICT.search(body):
        on_conflict = _CONFLICT_ACTIONS[" ".join(m3.group(1).upper().split())]
        body = body[: m3.start()]
    elif re.search(r"\bON\s+CONFLICT\b", body, re.IGNORECASE):
        raise base.error("ON CONFLICT takes OVERWRITE, IGNORE (or DO NOTHING), DO UPDATE FULL or DO UPDATE IF NOT "
                         "NULL", "ON CONFLICT")
    append_only = False
    m2 = re.search(r"\bAPPEND\s+ONLY\s*$", body.rstrip(), re.IGNORECASE)
    if m2:
        append_only = True
        body = body.rstrip()[: m2.start()]
    ast = _parse_sql(base, body)
    if not isinstance(ast, exp.Create) or not isinstance(ast.this, exp.Schema):
        raise base.error("expected CREATE TABLE name (column type, ..., [PRIMARY KEY (...)])")
    if ast.expression is not None:
        raise base.error("CREATE TABLE ... AS SELECT is not supported; use CREATE MATERIALIZED VIEW", "AS")
    return Statement(base.text, base.line, base.col, "create_table", ast,
                     {"append_only": append_only, "options": options, "on_conflict": on_conflict,
                      "if_not_exists": bool(ast.args.get("exists"))})


_SINK = re.compile(r"CREATE\s+SINK\s+(IF\s+NOT\s+EXISTS\s+)?" + _NAME + r"\s+(?:FROM\s+" + _NAME
                   + r"|AS\s+(.*?))\s*\bWITH\s*\((.*)\)\s*(?:FORMAT\s+([A-Za-z_]+)\s+ENCODE\s+([A-Za-z_]+)\s*)?$",
                   re.IGNORECASE | re.DOTALL)


def _create_sink(base: Statement) -> Statement:
    """`CREATE SINK name FROM mv | AS query WITH (...) [FORMAT f ENCODE e]`, RisingWave's syntax."""
    m = _SINK.fullmatch(base.text)
    if not m:
        raise base.error("expected CREATE SINK name FROM materialized_view | AS SELECT ... WITH (connector = '...', "
                         "...) [FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON]")
    options = parse_options(base.text, m.group(5))
    if m.group(6):
        options.update({"format": m.group(6).lower(), "encode": m.group(7).lower()})
    query = m.group(4)
    ast = _parse_sql(base, query) if query else None
    if ast is not None and not isinstance(ast, exp.Query):
        raise base.error("CREATE SINK ... AS needs a SELECT query", "AS")
    return Statement(base.text, base.line, base.col, "create_sink", ast,
                     {"name": m.group(2).lower(), "if_not_exists": bool(m.group(1)),
                      "from": (m.group(3) or "").lower() or None, "query": query, "options": options})


def rate_limit_value(stmt: Statement, value: str) -> int | None:
    """A BACKFILL_, SINK_ or SOURCE_RATE_LIMIT value: rows per second (0 pauses), or None for
    DEFAULT (unlimited)."""
    try:
        return rate_limit(value)
    except ValueError:
        raise stmt.error(f"a rate limit must be {SPECS['backfill_rate_limit'].expects}, got {value!r}",
                         value) from None
