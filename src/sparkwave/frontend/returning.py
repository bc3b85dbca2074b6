"""`INSERT / UPDATE / DELETE ... RETURNING`: the rows a statement stages, with its RETURNING list
evaluated over them, as PostgreSQL returns them (an INSERT's and an UPDATE's new rows, a DELETE's
old ones).

A change is applied at the next epoch, so the rows are those the statement stages, computed
against the committed epoch it read (`dml.py`): collected on the driver, staged from there and
returned from there, so the rows returned are exactly the rows staged. What the guarantee is:
each returned row is the statement's write of its key. Another statement's change staged before
it and not yet applied is not seen (the statement reads the last committed epoch, as every
UPDATE and DELETE does); an UPDATE's row then overwrites that change's row of the key, and a
DELETE deletes the key whatever that change wrote. An INSERT into a table whose `ON CONFLICT` rule
is not `OVERWRITE`, or that has a WATERMARK, is refused with RETURNING: whether its row is kept
is decided only when the epoch applies it (`check_insert`)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from sqlglot import exp

from sparkwave.core.catalog import Relation
from sparkwave.core.errors import SqlError
from sparkwave.core.local_frames import local_frame, to_arrow
from sparkwave.frontend.plan import proctime
from sparkwave.frontend.postgres import to_spark
from sparkwave.frontend.statements import Delete, Insert, Statement, Update
from sparkwave.meta.runtime import Runtime
from sparkwave.stream.watermark import Declared


def returning_list(stmt: Statement) -> list[exp.Expr] | None:
    """The statement's RETURNING items, or None without RETURNING."""
    if not isinstance(stmt, Insert | Update | Delete):
        return None
    r = stmt.ast.args.get("returning")
    return list(r.expressions) if r is not None else None


def check_insert(stmt: Statement, rel: Relation) -> None:
    """Refuse RETURNING where the rows returned could differ from the rows kept: whether a row is
    kept is decided only when the next epoch applies it, by the table's ON CONFLICT rule or by its
    watermark (a row below the watermark of the epoch before is dropped as late; that watermark may
    still rise before the epoch that applies the row, so no row can be promised at INSERT time)."""
    if rel.spec.on_conflict != "overwrite":
        raise stmt.error(f"INSERT ... RETURNING into {rel.name!r} is not supported: its ON CONFLICT "
                         f"{rel.spec.on_conflict.upper().replace('_', ' ')} rule decides only when the next epoch "
                         "applies the row whether it is kept; INSERT, FLUSH, then SELECT the rows", "RETURNING")
    if (decl := Declared.of(rel.definition)) is not None:
        raise stmt.error(f"INSERT ... RETURNING into {rel.name!r} is not supported: its WATERMARK FOR {decl.column} "
                         "decides only when the next epoch applies a row whether it is late (dropped and counted); "
                         "INSERT, FLUSH, then SELECT the rows", "RETURNING")


def staged_rows(df: DataFrame, rel: Relation) -> pa.Table:
    """`df`'s rows (the table's columns it has) on the driver, in the table's types."""
    cols = [c for c in rel.schema.columns if c.name in df.columns]
    return to_arrow(df, pa.schema([pa.field(c.name, c.type.arrow) for c in cols]))


def returned(rt: Runtime, stmt: Statement, rel: Relation, rows: pa.Table) -> DataFrame:
    """The RETURNING list over `rows` (the staged rows, a table's columns: absent ones NULL)."""
    items = returning_list(stmt)
    assert items is not None, "BUG: a statement without RETURNING"
    visible = rel.schema.visible
    data = pa.table({c.name: rows[c.name].cast(c.type.arrow) if c.name in rows.column_names
                     else pa.nulls(rows.num_rows, c.type.arrow) for c in visible})
    frame = local_frame(rt.spark, data, ", ".join(f"`{c.name}` {c.type.spark}" for c in visible))
    typed = [(c.name, c.type.name) for c in rel.schema.columns]
    exprs: list[str] = []
    for item in items:
        inner = item.unalias() if isinstance(item, exp.Alias) else item
        _no_proctime(stmt, rel, inner)
        if isinstance(inner, exp.Star) or (isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star)):
            exprs += [f"`{c.name}`" for c in visible]
            continue
        for col in inner.find_all(exp.Column):
            if (c := rel.schema.column(col.name.lower())) is None or c.hidden:
                raise SqlError(f"unknown column {col.name!r} in RETURNING of {stmt.tag} {rel.name} (columns: "
                               f"{', '.join(c.name for c in visible)}) (at {stmt.where(col.name)})", sqlstate="42703",
                               at=stmt.at(col.name))
        name = _name(item).replace("`", "``")
        exprs.append(f"{to_spark(inner, typed, rt.spark)} AS `{name}`")
    try:
        return frame.selectExpr(*exprs)
    except Exception as e:
        raise SqlError(f"RETURNING of {stmt.tag} {rel.name}: {str(e).splitlines()[0][:300]} "
                       f"(at {stmt.where('RETURNING')})") from None


def _no_proctime(stmt: Statement, rel: Relation, item: exp.Expr) -> None:
    """An INSERT's or UPDATE's RETURNING of a `col AS PROCTIME()` column (also by `*`) is refused:
    the value is the time of the epoch that applies the row, which has not run yet."""
    generated = proctime.generated(rel.definition)
    if not generated or isinstance(stmt, Delete):
        return
    star = isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star))
    named = [c.name.lower() for c in item.find_all(exp.Column) if c.name.lower() in generated]
    if star or named:
        name = named[0] if named else generated[0]
        raise stmt.error(f"{stmt.tag} ... RETURNING cannot return column {name!r} of {rel.name!r}: it is "
                         f"{proctime.generated_as(rel.definition, name)}, by the epoch that applies the row, which "
                         "has not run yet; return the "
                         "other columns by name, or SELECT the rows after FLUSH", "RETURNING")


def described(rt: Runtime, stmt: Insert | Update | Delete) -> DataFrame:
    """The RETURNING list's columns, over no rows (a Describe before the statement runs)."""
    target = stmt.ast.this
    if isinstance(target, exp.Schema):
        target = target.this
    if not isinstance(target, exp.Table):
        raise stmt.error("expected a table name")
    rel = rt.relation(target.name.lower())
    return returned(rt, stmt, rel, pa.table({c.name: pa.array([], c.type.arrow) for c in rel.schema.columns}))


def _name(item: exp.Expr) -> str:
    """PostgreSQL's name of a RETURNING item: its alias, column or function, else `?column?`."""
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, exp.Column):
        return item.name.lower()
    if isinstance(item, exp.Cast) and isinstance(item.this, exp.Column):
        return item.this.name.lower()
    if isinstance(item, exp.Anonymous):
        return item.name.lower()
    if isinstance(item, exp.Func):
        return (item.sql_name() or "?column?").lower()
    return "?column?"
