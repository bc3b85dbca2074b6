"""The FROM items a SELECT sees, and how a name in it resolves (sqlglot's `optimizer/scope.py` is the
model: a scope is its sources and the columns they offer; here each source is an operator already
planned, and a column resolves to that operator's internal column name).

Internal names (`c7_price`) are unique in the whole plan, so an expression resolved against a
scope is Spark SQL over the columns of the operator the scope's items were joined into."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from sparkwave.core.errors import CatalogError
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.stream.operator import Operator


@dataclass
class Item:
    """A FROM item in scope: its alias, node, and user-visible columns by name."""

    alias: str
    node: Operator
    cols: dict[str, str]  # column name -> internal name
    order: list[str] = field(default_factory=list)  # names in SELECT * order
    nullable: bool = False  # on the null-supplying side of an outer join
    # JOIN ... USING / NATURAL: columns that an unqualified name or `*` no longer means here (the
    # other side's stands for both), and, for a FULL join, the other side's internal name to
    # COALESCE this side's with
    merged: set[str] = field(default_factory=set)
    coalesce: dict[str, str] = field(default_factory=dict)
    pos: int = 0  # its place in FROM: `*` lists the items in that order


class Scope:
    """Name resolution over a list of items (the left side of a join so far, or one side)."""

    def __init__(self, ctx: PlanContext, items: list[Item]) -> None:
        self.ctx = ctx
        self.items = items

    def resolve(self, e: exp.Expr, where: str) -> str:
        """`e` in Spark SQL, with every column replaced by its internal name."""
        if e.find(exp.Subquery, exp.Exists):
            raise self.ctx.err(f"unsupported subquery in {where}; subqueries are supported in FROM", "SELECT")

        def swap(n: exp.Expr) -> exp.Expr:
            if not isinstance(n, exp.Column):
                return n
            if isinstance(n.this, exp.Star):
                raise self.ctx.err(f"* is not allowed in {where}")
            full = [it for it in self.items if not n.table and n.name.lower() in it.coalesce]
            if full:  # a FULL JOIN ... USING column: either side's
                name = n.name.lower()
                return exp.Coalesce(this=exp.column(full[0].cols[name], quoted=True),
                                    expressions=[exp.column(full[0].coalesce[name], quoted=True)])
            return exp.column(self.internal(n, where), quoted=True)

        return self.ctx.spark_sql(e.copy().transform(swap), [c for it in self.items for c in it.node.columns])

    def internal(self, col: exp.Column, where: str) -> str:
        """The internal name of the column `col` names."""
        name = col.name.lower()
        if col.table:
            return self._qualified(col, name, where)
        found = [it for it in self.items if name in it.cols and name not in it.merged]
        if found and name in found[0].coalesce:
            raise self.ctx.err(f"column {name!r} of a FULL JOIN ... USING cannot be used in {where}; write "
                               f"COALESCE({found[0].alias}.{name}, ...) or qualify it", col.name)
        if not found:
            known = ", ".join(f"{it.alias}.{c}" for it in self.items for c in it.order)
            raise CatalogError(f"unknown column {name!r} in {where} of materialized view (in scope: {known}) "
                               f"(at {self.ctx.stmt.where(col.name)})")
        if len(found) > 1:
            raise self.ctx.err(f"column {name!r} is ambiguous in {where}: it is in "
                               f"{', '.join(it.alias for it in found)}; qualify it", col.name)
        return found[0].cols[name]

    def _qualified(self, col: exp.Column, name: str, where: str) -> str:
        q = col.table.lower()
        found = [it for it in self.items if it.alias == q]
        if not found:
            raise self.ctx.err(f"unknown table {col.table!r} in column {col.sql()!r} ({where}); in scope: "
                               f"{', '.join(it.alias for it in self.items)}", col.table)
        if name not in found[0].cols:
            raise CatalogError(f"unknown column {col.sql()!r} in {where} (columns of {q!r}: "
                               f"{', '.join(found[0].order)}) (at {self.ctx.stmt.where(col.name)})")
        return found[0].cols[name]

    def owners(self, e: exp.Expr) -> set[int]:
        """The positions of the items whose columns `e` may use."""
        out = set()
        for col in e.find_all(exp.Column):
            name = col.name.lower()
            for idx, it in enumerate(self.items):
                if (not col.table or col.table.lower() == it.alias) and name in it.cols:
                    out.add(idx)
        return out

    def single_item(self, e: exp.Expr) -> Item | None:
        """The one item `e` uses the columns of, if only one."""
        owners = self.owners(e)
        return self.items[owners.pop()] if len(owners) == 1 else None

    def key_pair(self, c: exp.Expr, right: Item) -> tuple[tuple[str, exp.Column], tuple[str, exp.Column]] | None:
        """An equality between a column of this scope's items and one of `right`: each side's
        internal name and the column as written."""
        if not isinstance(c, exp.EQ | exp.NullSafeEQ) or not isinstance(c.this, exp.Column) \
                or not isinstance(c.expression, exp.Column):
            return None
        other = Scope(self.ctx, [right])
        for a, b in ((c.this, c.expression), (c.expression, c.this)):
            if self.owners(a) and not other.owners(a) and other.owners(b) and not self.owners(b):
                return (self.internal(a, "ON"), a), (other.internal(b, "ON"), b)
        return None

    def links(self, c: exp.Expr, right: Item) -> bool:
        return self.key_pair(c, right) is not None
