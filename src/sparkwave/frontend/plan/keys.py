"""The MV's columns and key from its root projection: the key of the tree's root (a scan's upstream
key, a join's two keys, an aggregate's group). A key column the query selects as it is becomes the
MV's key column under its output name; one it does not select is kept as a hidden column, named
after the column it comes from."""

from __future__ import annotations

import itertools
import re

from sparkwave.core.schema import RESERVED_COLUMNS, Column, SqlType
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.statements import CreateMaterializedView
from sparkwave.stream.expressions import column_ref
from sparkwave.stream.project import Project

Outputs = list[tuple[str, str]]  # (MV column, internal column of the root)


def named_outputs(ctx: PlanContext, outputs: Outputs) -> Outputs:
    """The query's outputs under the names of `CREATE MATERIALIZED VIEW mv (a, b, ...)`, if given."""
    visible = list(outputs)
    if columns := (ctx.stmt.columns if isinstance(ctx.stmt, CreateMaterializedView) else ()):
        if len(columns) != len(visible):  # RisingWave's rule; PostgreSQL would name only the first outputs
            raise ctx.err(f"materialized view column list names {len(columns)} columns, but its query has "
                          f"{len(visible)}; name every column or none", "AS")
        if reserved := sorted(set(columns) & RESERVED_COLUMNS):
            raise ctx.err(f"column name(s) {', '.join(reserved)} in the materialized view's column list are "
                          "reserved for sparkwave's own columns; choose another name", reserved[0])
        visible = [(columns[j], i) for j, (_, i) in enumerate(visible)]
    names = [n for n, _ in visible]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ctx.err(f"duplicate output column name(s) {', '.join(dupes)} in materialized view; add aliases")
    return visible


def mv_key(root: Project, visible: Outputs) -> tuple[list[str], Outputs]:
    """The MV's key columns, and the hidden columns (name, internal) it needs for key columns the
    query does not select as they are."""
    exprs = dict(root.exprs)
    direct: dict[str, str] = {}  # key column -> an output that is that column as it is
    for n, i in visible:
        if i in exprs and (ref := column_ref(exprs[i])) in root.key:
            direct.setdefault(ref, n)
    key: list[str] = []
    hidden: Outputs = []
    taken = {n for n, _ in visible}
    for k in root.key:
        if k in direct:
            key.append(direct[k])
        else:
            hname = hidden_name(k, taken)
            taken.add(hname)
            hidden.append((hname, k))
            key.append(hname)
    return key, hidden


def mv_columns(root: Project, visible: Outputs, hidden: Outputs) -> list[Column]:
    types = dict(root.columns)
    return [Column(n, SqlType(types[i])) for n, i in visible] + \
        [Column(n, SqlType(types[i]), hidden=True) for n, i in hidden]


def hidden_name(internal: str, taken: set[str]) -> str:
    """A hidden key column's name: the column it comes from (`c3_id` -> `id`), or `_pk_id`,
    `_pk_id_2`, ... if an output already has that name."""
    base = re.sub(r"^c\d+_", "", internal)
    candidates = itertools.chain([base, f"_pk_{base}"], (f"_pk_{base}_{i}" for i in itertools.count(2)))
    return next(name for name in candidates if name not in taken)
