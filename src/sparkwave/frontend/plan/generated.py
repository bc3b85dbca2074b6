"""RisingWave's generated columns, `CREATE TABLE t (v1 int, v2 int AS v1 + 1)`: a stored column
whose value is computed from the row's other columns when the row is written.

The value is computed by the table's step (`stream/execute.py` `_intents`), from the intents of the
epoch, so every way a row arrives gets it -- INSERT, UPDATE (the new row is computed again) and a
connector's rows -- and a replayed epoch computes the same value. The expression is stored both as
written and as Spark SQL with PostgreSQL's meaning (`postgres.to_spark`), cast to the column's type
as PostgreSQL's assignment does. RisingWave's rules: the expression reads only the table's ordinary
columns (not another generated one), is not volatile (`now()`, `random()`: RisingWave "fails to
bind" them; `AS PROCTIME()` is the one impure generated column, `plan/proctime.py`), and the column
may be part of the primary key (a pure expression). INSERT leaves it out; UPDATE may not set it,
nor set a column a generated key column reads (that would change the row's key)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

if TYPE_CHECKING:  # the statements package parses CREATE TABLE with this module: no import at run time
    from pyspark.sql import SparkSession

    from sparkwave.core.errors import SqlError
    from sparkwave.core.schema import Column
    from sparkwave.frontend.statements.nodes import Statement

_ITEM = re.compile(r"^(\s*)(\"?[A-Za-z_][A-Za-z0-9_]*\"?)(\s+[A-Za-z][A-Za-z0-9_ ]*?(?:\s*\([0-9,\s]*\))?(?:\[\])?)"
                   r"\s+AS\s+(.+?)\s*$", re.IGNORECASE | re.DOTALL)
_VOLATILE = {"now", "current_timestamp", "localtimestamp", "current_date", "current_time", "proctime", "random",
             "rand", "uuid", "gen_random_uuid", "clock_timestamp", "statement_timestamp", "transaction_timestamp"}
# `postgres.size_guarded`'s failure of a row (repeat('x', 2000000000)): in a table's step it would fail
# every epoch, stopping the pipeline, so the value is NULL instead, as for any other error of the expression
_GUARD = re.compile(r"raise_error\('(?:[^'\\]|\\.)*'\)", re.IGNORECASE)
DESCRIBED = "generated: AS {}"  # DESCRIBE's words, with the expression as written


def _items(body: str) -> tuple[int, int, list[tuple[int, int]]] | None:
    """The (start, end) of each top-level item of the column list (the first parenthesis)."""
    start = body.find("(")
    if start < 0:
        return None
    depth, quote, spans, begin = 0, "", [], start + 1
    for i in range(start, len(body)):
        ch = body[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                spans.append((begin, i))
                return start, i, spans
        elif ch == "," and depth == 1:
            spans.append((begin, i))
            begin = i + 1
    return None


def take_generated_columns(at: Statement, body: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A CREATE TABLE's text with each `col type AS expr` an ordinary `col type` column (sqlglot
    reads only `AS (expr)`), and each such column's (name, expression as written)."""
    found = _items(body)
    if found is None:
        return body, ()
    out, last, columns = [], 0, []
    for lo, hi in found[2]:
        m = _ITEM.match(body[lo:hi])
        if m is None or m.group(2).upper() in ("PRIMARY", "CONSTRAINT", "WATERMARK"):
            continue
        name, written = m.group(2).strip('"').lower(), m.group(4).strip()
        if written.startswith("(") and written.endswith(")") and _items(written) == (0, len(written) - 1,
                                                                                     [(1, len(written) - 1)]):
            written = written[1:-1].strip()
        out += [body[last:lo], f"{m.group(1)}{m.group(2)}{m.group(3)}"]
        last = hi
        columns.append((name, written))
    return "".join(out) + body[last:], tuple(columns)


def parsed(stmt: Statement, name: str, written: str) -> exp.Expr:
    """A generated column's expression, checked: RisingWave's rules and sparkwave's functions."""
    from sparkwave.frontend.functions import check
    from sparkwave.frontend.plan.closed_world import check_closed

    try:
        e = sqlglot.parse_one(written, read="postgres")
    except (ParseError, TokenError) as err:
        raise stmt.error(f"generated column {name!r}: cannot read its expression {written!r}: "
                         f"{str(err).splitlines()[0]}", name) from None

    def error(message: str, near: str | None) -> SqlError:
        return stmt.error(f"generated column {name!r}: {message}", near or name)

    for node in e.walk():
        called = node.name.lower() if isinstance(node, exp.Anonymous) else (
            node.sql_name().lower() if isinstance(node, exp.Func) else "")
        if isinstance(node, exp.CurrentTimestamp | exp.CurrentDate | exp.CurrentTime | exp.Rand) or \
                called in _VOLATILE:
            raise error(f"Failed to bind expression: {node.sql(dialect='postgres')}: a generated column's "
                        "expression is computed once per row and must not be volatile (for the time a row is "
                        "applied, write col TIMESTAMPTZ AS PROCTIME())", None)
        if called == "raise_error":
            raise error("raise_error() would fail the write of the row at every epoch, stopping the pipeline; a "
                        "generated column's value is NULL where its expression fails", None)
        if isinstance(node, exp.Subquery | exp.Select | exp.AggFunc | exp.Window):
            raise error("a generated column's expression reads only the row's own columns (no subquery, "
                        "aggregate or window function)", None)
    check(e, written, error)
    check_closed(e, error)
    return e


def compiled(stmt: Statement, columns: list[Column], written: tuple[tuple[str, str], ...],
             proctime: tuple[str, ...], spark: SparkSession) -> dict[str, dict[str, str]]:
    """The definition's `generated`: each column's expression as written and in Spark SQL, cast to
    its type (the table's step computes it with `F.expr`)."""
    from sparkwave.frontend.postgres import to_spark

    generated = {n for n, _ in written} | set(proctime)
    by_name = {c.name: c for c in columns}
    typed = [(c.name, c.type.name) for c in columns if c.name not in generated]
    out: dict[str, dict[str, str]] = {}
    for name, text in written:
        e = parsed(stmt, name, text)
        for col in e.find_all(exp.Column):
            ref = col.name.lower()
            if ref in generated:
                raise stmt.error(f"generated column {name!r} reads generated column {ref!r}: a generated "
                                 "column reads only the table's ordinary columns", ref)
            if ref not in by_name or col.table:
                raise stmt.error(f"generated column {name!r} reads {col.sql(dialect='postgres')}, which is not a "
                                 f"column of the table (columns: {', '.join(n for n, _ in typed)})", col.name)
        target = by_name[name]
        cast = exp.Cast(this=e.copy(), to=exp.DataType.build(target.type.name, dialect="postgres"))
        try:
            out[name] = {"sql": text, "spark": _fitting(_GUARD.sub("NULL", to_spark(cast, typed, spark)),
                                                        target.type.spark)}
            empty = spark.createDataFrame([], ", ".join(f"`{n}` {by_name[n].type.spark}" for n, _ in typed))
            empty.selectExpr(out[name]["spark"]).schema  # noqa: B018 -- analysed now, not at the first epoch
            given = empty.selectExpr(to_spark(e, typed, spark)).schema.fields[0].dataType.simpleString()
        except Exception as err:
            raise stmt.error(f"generated column {name!r}: {str(err).splitlines()[0][:300]}", name) from None
        if given == "string" and target.type.spark != "string":  # PostgreSQL has no assignment cast from text
            raise stmt.error(f"generated column {name!r} is {target.type.name} but its expression is text: cast it, "
                             f"AS ({text})::{target.type.name}", name)
    return out


def _fitting(sql: str, spark_type: str) -> str:
    """The cast to an integer column as Spark's TRY_CAST: Spark's CAST (ANSI off) wraps 100000 into
    a smallint as -31072 and clamps a double; a value that does not fit is NULL instead, as any
    other error of the expression (RisingWave's non-strict streaming evaluation)."""
    if spark_type not in ("tinyint", "smallint", "int", "bigint"):
        return sql
    root = sqlglot.parse_one(sql, read="spark")  # (sqlglot reads Spark's CAST as a TryCast, writes it as CAST)
    if not isinstance(root, exp.Cast) or not sql.upper().startswith("CAST("):
        return sql
    return "TRY_" + sql  # the text itself: not written again by sqlglot


def expression_columns(definition: dict[str, object]) -> dict[str, dict[str, str]]:
    """A relation's generated columns other than PROCTIME() ones (its definition's `generated`)."""
    value = definition.get("generated")
    return value if isinstance(value, dict) else {}


def refuse_key_update(stmt: Statement, definition: dict[str, object], key: tuple[str, ...], column: str) -> None:
    """An UPDATE of a column a generated key column reads would change the row's key."""
    for name, g in expression_columns(definition).items():
        if name in key and column in {c.name.lower() for c in sqlglot.parse_one(g["sql"], read="postgres")
                                      .find_all(exp.Column)}:
            raise stmt.error(f"cannot UPDATE column {column!r}: primary key column {name!r} is generated from it "
                             "and would change; DELETE and INSERT instead", column)
