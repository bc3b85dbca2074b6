"""What every planning pass shares: the statement (for errors that point into it), the catalog's
relations, the type oracle, and the counters that name operators and internal columns."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from sqlglot import exp

from sparkwave.core.catalog import Relation
from sparkwave.core.errors import SqlError
from sparkwave.frontend.plan.types import Columns, TypeOracle, UntypedError, readable, to_spark_sql
from sparkwave.frontend.statements import Statement
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.expressions import Expr, expr_or_none, exprs_of
from sparkwave.stream.join import Join
from sparkwave.stream.operator import Operator
from sparkwave.stream.project import Project
from sparkwave.stream.project_set import ProjectSet
from sparkwave.stream.scan import Scan
from sparkwave.stream.union import Union
from sparkwave.stream.values import Values


class PlanContext:
    def __init__(self, stmt: Statement, lookup: Callable[[str], Relation], types: TypeOracle) -> None:
        self.stmt = stmt
        self.lookup = lookup
        self.oracle = types
        self.ids = itertools.count(1)
        self._names = itertools.count(1)

    def err(self, message: str, keyword: str | None = None) -> SqlError:
        return self.stmt.error(message, keyword)

    def name(self, base: str) -> str:
        """A fresh internal column name, readable in a plan (`c3_price`)."""
        return f"c{next(self._names)}_{re.sub(r'[^a-z0-9_]', '_', base.lower())[:40]}"

    def next_id(self) -> int:
        return next(self.ids)

    def relation(self, name: str) -> Relation:
        return self.lookup(name)  # a creating one too: the session refuses it, naming its job

    # --- expressions and their types -----------------------------------------------------------
    def spark_sql(self, e: exp.Expr, columns: Columns) -> Expr:
        """`e`, over the internal `columns` (name, type), in Spark SQL with PostgreSQL's meaning."""
        return to_spark_sql(e, columns, self.oracle)

    def types(self, child: Operator, exprs: Columns, predicate: str | None, extra: Columns | None = None
              ) -> dict[str, str]:
        try:
            return self.oracle.expression_types(child.columns + (extra or []), exprs, predicate)
        except UntypedError as e:
            raise self.err(f"cannot evaluate the materialized view's query: {readable(str(e))}") from None

    def project(self, child: Operator, exprs: Columns, predicate: str | None, key: list[str]) -> Project:
        seen: set[str] = set()
        uniq = [(n, e) for n, e in exprs if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]
        types = self.types(child, uniq, predicate)
        return Project(self.next_id(), [(n, types[n]) for n, _ in uniq], list(key), input=child,
                       exprs=exprs_of(uniq), predicate=expr_or_none(predicate))

    def passthrough(self, node: Operator, *extra: tuple[str, str], predicate: str | None = None) -> Project:
        """`node`'s columns as they are, plus `extra` (name, Spark SQL), over rows passing `predicate`."""
        return self.project(node, [*[(n, f"`{n}`") for n in node.names], *extra], predicate, node.key)

    # --- facts about subtrees ------------------------------------------------------------------
    def append_only(self, op: Operator) -> bool:
        """Whether `op`'s output only ever gains rows: scans of append-only tables, the projections
        (and windows) over them, and inner joins of two such inputs."""
        if isinstance(op, Scan):
            return self.relation(op.relation).schema.append_only
        if isinstance(op, Project | ProjectSet):
            return self.append_only(op.input)
        if isinstance(op, Join):
            # (an inner ASOF join, `per_key`, retracts a match when a closer right row arrives)
            return op.join_type == "inner" and not op.per_key and self.append_only(op.left) \
                and self.append_only(op.right)
        if isinstance(op, Union):  # UNION ALL of inputs that only gain rows
            return all(self.append_only(p) for p in op.inputs)
        return isinstance(op, Values)

    def linkable(self, name: str) -> bool:
        """Whether a relation's snapshot files are its rows: an append-only table or MV (a source
        stores nothing)."""
        rel = self.relation(name)
        return rel.kind != "source" and rel.schema.append_only

    def one_row(self, op: Operator) -> bool:
        """Whether `op` always has exactly one row: an aggregate without GROUP BY, renamed."""
        if isinstance(op, Aggregate):
            return op.scalar
        if isinstance(op, Values):
            return len(op.rows) == 1  # its key, the row's ordinal, is 0
        return isinstance(op, Project) and op.predicate is None and self.one_row(op.input)
