"""PROCTIME() where it is not a function call: `FOR SYSTEM_TIME AS OF PROCTIME()` recognised in a
parsed query, with no planner import (the closed-world check, `closed_world.py`, run when a
statement is parsed, and the temporal join's planning, `temporal_join.py`, both read it); and
RisingWave's `col TIMESTAMPTZ AS PROCTIME()` table column.

Such a column is a stored generated column, as in RisingWave: its value is the processing time of
the epoch that applies the row -- the epoch's recorded NOW() (`plan["now"]`), filled in by the
table's step (`stream/execute.py`), so every row of an epoch has the same value, a later epoch's
rows a later one, and a replayed epoch the same one. INSERT leaves it out (a value for it is an
error), UPDATE may not set it (an updated row gets the time of the epoch that applies the update),
it is not part of a primary key, and INSERT/UPDATE ... RETURNING may not return it (the epoch that
applies the row has not run yet). A source's rows are not stored, so a source has no such column."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlglot import exp

if TYPE_CHECKING:  # the statements package parses CREATE TABLE with this module: no import at run time
    from sparkwave.frontend.statements.nodes import Statement

SHAPE = "[LEFT] JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k"
_COLUMN = re.compile(r"([(,]\s*)(\"?[A-Za-z_][A-Za-z0-9_]*\"?)(\s+[A-Za-z][A-Za-z ]*?)?\s+AS\s+PROCTIME\s*\(\s*\)",
                     re.IGNORECASE)
_TYPES = ("timestamptz", "timestamp with time zone")
DESCRIBED = "AS PROCTIME(): the recorded NOW() of the epoch that applied the row"  # DESCRIBE's words


def is_proctime(version: object) -> bool:
    """Whether a table's `version` (sqlglot's `FOR SYSTEM_TIME AS OF ...`) is `AS OF PROCTIME()`."""
    if not isinstance(version, exp.Version) or str(version.args.get("kind") or "").upper() != "AS OF":
        return False
    target = version.args.get("expression")
    return isinstance(target, exp.Anonymous) and target.name.lower() == "proctime" and not target.expressions


def take_proctime_columns(at: Statement, body: str) -> tuple[str, tuple[str, ...]]:
    """A CREATE TABLE's text with each `col [TIMESTAMPTZ] AS PROCTIME()` an ordinary `col
    TIMESTAMPTZ` column (sqlglot does not parse the clause), and the names of those columns."""
    names: list[str] = []

    def column(m: re.Match[str]) -> str:
        name = m.group(2).strip('"').lower()
        written = " ".join((m.group(3) or "timestamptz").split()).lower()
        if written not in _TYPES:
            raise at.error(f"column {name!r} AS PROCTIME() is a timestamptz (the time of the epoch that applies the "
                           f"row), not {written}: write {name} TIMESTAMPTZ AS PROCTIME()", "PROCTIME")
        names.append(name)
        return f"{m.group(1)}{m.group(2)} TIMESTAMPTZ"

    out = _COLUMN.sub(column, body)
    if re.search(r"\bAS\s+PROCTIME\b", out, re.IGNORECASE):
        raise at.error("a PROCTIME() generated column is written col TIMESTAMPTZ AS PROCTIME()", "PROCTIME")
    return out, tuple(names)


def check_key(stmt: Statement, columns: tuple[str, ...], key: list[str]) -> None:
    """RisingWave's rule: an impure generated column is not part of the primary key."""
    for name in columns:
        if name in key:
            raise stmt.error(f"column {name!r} AS PROCTIME() cannot be part of the primary key: its value is "
                             "given by the epoch that applies a row, so a row's key would change with an update",
                             name)


def generated(definition: dict[str, object]) -> list[str]:
    """A relation's generated columns: `AS PROCTIME()` ones (its definition's `proctime`), then
    `AS expr` ones (`generated`, `plan/generated.py`); no statement writes or returns them."""
    value, exprs = definition.get("proctime"), definition.get("generated")
    return ([str(c) for c in value] if isinstance(value, list) else []) + \
        ([str(c) for c in exprs] if isinstance(exprs, dict) else [])


def generated_as(definition: dict[str, object], name: str) -> str:
    """How column `name` is generated, in an error's words."""
    exprs = definition.get("generated")
    if isinstance(exprs, dict) and isinstance(g := exprs.get(name), dict):
        return f"generated AS {g.get('sql')} (computed when the row is written)"
    return "generated AS PROCTIME() (the time of the epoch that applies the row)"


def refuse_written(stmt: Statement, what: str, columns: list[str], generated_columns: list[str],
                   definition: dict[str, object] | None = None) -> None:
    """An INSERT's or UPDATE's column that is generated: an error saying to leave it out (RisingWave:
    "update modifying the generated column is unsupported")."""
    for name in columns:
        if name in generated_columns:
            raise stmt.error(f"cannot {what} column {name!r}: it is {generated_as(definition or {}, name)}; modifying "
                             "a generated column is unsupported, leave it out", name)
