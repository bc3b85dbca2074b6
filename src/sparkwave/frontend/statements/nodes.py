"""The statements sparkwave runs, as typed nodes: one frozen dataclass per kind, holding what was
parsed (names, options, the sqlglot tree where there is one) and where the statement starts in the
submitted text, so that every error points into it. `Session.HANDLERS` dispatches on the node's
type; the server reads the command tag and whether rows come back from the class attributes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.meta.settings import SPECS, rate_limit

if TYPE_CHECKING:
    from sparkwave.frontend.statements.watermark import WatermarkClause


@dataclass(frozen=True)
class Statement:
    """A statement's text, where it starts in the submitted text, and errors that point into it.
    Every kind of statement below is one of these with its own fields."""

    text: str
    line: int
    col: int

    tag: ClassVar[str] = ""  # PostgreSQL's command tag (CommandComplete), before any row count
    returns_rows: ClassVar[bool] = False  # a result set (RowDescription, DataRows)
    timed: ClassVar[bool] = False  # computes in the caller, so `statement_timeout` bounds it
    ddl: ClassVar[bool] = False  # creates or drops a relation or a sink

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


# --- pipeline control ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Flush(Statement):
    """FLUSH: returns once an epoch holding every write made before it is committed."""

    tag = "FLUSH"


@dataclass(frozen=True)
class Wait(Statement):
    """WAIT: returns once every creating job has joined the main graph."""

    tag = "WAIT"


@dataclass(frozen=True)
class Cancel(Statement):
    """CANCEL JOBS id, ...: every id is checked before any job is cancelled."""

    ids: tuple[int, ...]
    tag = "CANCEL_COMMAND"


@dataclass(frozen=True)
class AlterBackfillRate(Statement):
    """ALTER MATERIALIZED VIEW name SET BACKFILL_RATE_LIMIT = n | DEFAULT: a creating job's rate."""

    name: str
    value: str  # as written; `rate_limit_value` reads it
    tag = "ALTER_MATERIALIZED_VIEW"


@dataclass(frozen=True)
class AlterSourceRate(Statement):
    """ALTER SOURCE | TABLE name SET SOURCE_RATE_LIMIT = n | DEFAULT: a connector's rate."""

    name: str
    value: str
    tag = "ALTER_SOURCE"


@dataclass(frozen=True)
class AlterSinkRate(Statement):
    """ALTER SINK name SET SINK_RATE_LIMIT = n | DEFAULT: a sink's delivery rate."""

    name: str
    value: str
    tag = "ALTER_SINK"


# --- settings and the catalog's view -------------------------------------------------------------
@dataclass(frozen=True)
class Set(Statement):
    """SET key = value | TO value: a sparkwave setting (statement_timeout: this session's only)."""

    key: str  # lower-cased
    value: str  # quotes removed
    tag = "SET"


@dataclass(frozen=True)
class Show(Statement):
    """SHOW TABLES | MATERIALIZED VIEWS | JOBS | SOURCES | SINKS | SOURCE ERRORS [FROM name]."""

    what: str  # upper-cased, words single-spaced: "MATERIALIZED VIEWS"
    name: str | None  # SOURCE ERRORS FROM name
    tag = "SHOW"
    returns_rows = True


@dataclass(frozen=True)
class Describe(Statement):
    """DESCRIBE | DESC [SINK] name: a relation's columns and state tables, or a sink's."""

    name: str
    sink: bool  # DESCRIBE SINK: a sink even if a relation has the name
    tag = "DESCRIBE"
    returns_rows = True


# --- DDL -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CreateTable(Statement):
    """CREATE TABLE name (column type, ... [, PRIMARY KEY (...)]) [APPEND ONLY] [ON CONFLICT ...]
    [INCLUDE ...] [WITH (connector options)] [FORMAT f ENCODE e]."""

    ast: exp.Create  # the CREATE TABLE sqlglot parsed, without RisingWave's clauses
    options: dict[str, str]  # WITH options, lower-cased keys; FORMAT/ENCODE and INCLUDE as options too
    append_only: bool
    on_conflict: str | None  # overwrite | ignore | update_if_not_null (None: not written)
    if_not_exists: bool
    watermark: WatermarkClause | None = None  # WATERMARK FOR col AS expr (`watermark.py`)
    proctime: tuple[str, ...] = ()  # its `col TIMESTAMPTZ AS PROCTIME()` columns (`plan/proctime.py`)
    generated: tuple[tuple[str, str], ...] = ()  # its `col type AS expr` columns, (name, expr) (`plan/generated.py`)
    relation_kind: ClassVar[str] = "table"
    tag = "CREATE_TABLE"
    ddl = True

    @property
    def name(self) -> str:
        """The table's name as written (`core/names.py` checks it when it is created)."""
        return str(self.ast.this.this.name)


@dataclass(frozen=True)
class CreateSource(CreateTable):
    """CREATE SOURCE name (...) WITH (connector = 'kafka', ...): declared as a table is, stores nothing."""

    relation_kind: ClassVar[str] = "source"
    tag = "CREATE_SOURCE"


@dataclass(frozen=True)
class CreateMaterializedView(Statement):
    """CREATE MATERIALIZED VIEW [IF NOT EXISTS] name [(columns)] [WITH (options)] AS query."""

    name: str  # lower-cased
    if_not_exists: bool
    options: dict[str, str]
    query: str  # the query's text as written (kept in the catalog)
    columns: tuple[str, ...]  # the column list, if written
    ast: exp.Expr  # the query, parsed and checked
    emit_on_window_close: bool = False  # EMIT ON WINDOW CLOSE: append-only, each window once when it closes
    tag = "CREATE_MATERIALIZED_VIEW"
    ddl = True


@dataclass(frozen=True)
class CreateSink(Statement):
    """CREATE SINK [IF NOT EXISTS] name FROM mv | AS query WITH (...) [FORMAT f ENCODE e]."""

    name: str
    if_not_exists: bool
    upstream: str | None  # FROM mv
    query: str | None  # AS query, as written
    options: dict[str, str]
    ast: exp.Query | None  # the AS query, parsed and checked
    tag = "CREATE_SINK"
    ddl = True


@dataclass(frozen=True)
class Drop(Statement):
    """DROP TABLE | SOURCE | SINK | MATERIALIZED VIEW [IF EXISTS] name [CASCADE | RESTRICT]: one
    kind below per thing it drops (an existing relation of another kind is an error)."""

    name: str  # lower-cased
    if_exists: bool
    cascade: bool
    what: ClassVar[str]  # the catalog's kind of what it drops: table | source | mv | sink
    ddl = True


@dataclass(frozen=True)
class DropTable(Drop):
    what = "table"
    tag = "DROP_TABLE"


@dataclass(frozen=True)
class DropSource(Drop):
    what = "source"
    tag = "DROP_SOURCE"


@dataclass(frozen=True)
class DropMaterializedView(Drop):
    what = "mv"
    tag = "DROP_MATERIALIZED_VIEW"


@dataclass(frozen=True)
class DropSink(Drop):
    what = "sink"
    tag = "DROP_SINK"


# --- DML and queries -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Insert(Statement):
    ast: exp.Insert
    tag = "INSERT"
    timed = True


@dataclass(frozen=True)
class Update(Statement):
    ast: exp.Update
    tag = "UPDATE"
    timed = True


@dataclass(frozen=True)
class Delete(Statement):
    ast: exp.Delete
    tag = "DELETE"
    timed = True


@dataclass(frozen=True)
class Query(Statement):
    """A query (SELECT, VALUES, a set operation, WITH ...), read as of one committed epoch."""

    ast: exp.Query
    tag = "SELECT"
    returns_rows = True
    timed = True


@dataclass(frozen=True)
class Explain(Statement):
    """EXPLAIN CREATE MATERIALIZED VIEW ... | EXPLAIN query | EXPLAIN name: the operator tree, nothing
    run or created. The inner statement's errors point into the same text."""

    target: CreateMaterializedView | Query | str  # a name: the relation (lower-cased) to explain
    tag = "EXPLAIN"
    returns_rows = True


def rate_limit_value(stmt: Statement, value: str) -> int | None:
    """A BACKFILL_, SINK_ or SOURCE_RATE_LIMIT value: rows per second (0 pauses), or None for
    DEFAULT (unlimited)."""
    try:
        return rate_limit(value)
    except ValueError:
        raise stmt.error(f"a rate limit must be {SPECS['backfill_rate_limit'].expects}, got {value!r}",
                         value) from None
