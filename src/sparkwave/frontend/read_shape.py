"""The shapes of `SELECT` that `frontend/reads.py` answers without Spark, found with sqlglot alone:
a query's table, output columns, `key = literal` conditions and LIMIT (`shape`), resolved against a
relation's schema as Spark resolves them (`Resolved`), and the key values its literals stand for
(`key_values`). A prepared statement's read is found once, at Parse, its parameters left open as
values of its conditions (`PreparedRead`), and filled at each Execute."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from sparkwave.core.schema import Column, Schema, to_spark_type

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

_INT_RANGES = {"smallint": 2**15, "int": 2**31, "bigint": 2**63}
_MAX_LIMIT = 2**31 - 1  # Spark's LIMIT is an int


@dataclass(frozen=True)
class ReadQuery:
    """The parts of a query of a shape `reads.py` answers, as written."""

    table: str
    qualifier: str  # the name its columns may be qualified by: the alias, else the table's name
    items: list[tuple[str | None, exp.Column | None]]  # (alias, column); (None, None) is `*`
    where: list[tuple[exp.Column, exp.Expr]]  # column = value
    limit: int | None


@dataclass(frozen=True)
class PreparedRead:
    """A prepared statement's read, its shape found once (at Parse): the values of some of its
    conditions are parameters (`slots`: the condition's place -> the parameter's number)."""

    query: ReadQuery
    slots: dict[int, int]
    resolved: list[Resolved] = field(default_factory=list, compare=False)  # the last, against its schema

    def filled(self, values: Mapping[int, exp.Expr]) -> ReadQuery:
        """The query with each parameter `n` the node `values[n]` (the node its literal parses to)."""
        if not self.slots:
            return self.query
        return replace(self.query, where=[(ref, values[self.slots[i]] if i in self.slots else value)
                                          for i, (ref, value) in enumerate(self.query.where)])


def prepared_read(ast: exp.Expr, slot_of: Callable[[exp.Expr], int | None]) -> PreparedRead | None:
    """`ast`'s read with its parameters left open, or None if it is no read of this module's shapes
    or a parameter stands anywhere but as a whole condition's value. `slot_of(node)` is the
    parameter number a node stands for, or None."""
    query = shape(ast)
    if query is None:
        return None
    slots = {i: n for i, (_, value) in enumerate(query.where) if (n := slot_of(value)) is not None}
    if sum(1 for node in ast.walk() if slot_of(node) is not None) != len(slots):
        return None
    return PreparedRead(query, slots)


@dataclass(frozen=True)
class Resolved:
    """A query's columns resolved against a relation's schema: the output's (`projection`), their
    names and Spark types, and the column each condition names."""

    schema: Schema
    out: list[tuple[str, Column]] | None
    fields: list[tuple[str, DataType]]
    where: list[Column | None]

    @staticmethod
    def of(schema: Schema, query: ReadQuery) -> Resolved:
        out = projection(schema, query)
        return Resolved(schema, out, [(name, to_spark_type(c.type)) for name, c in out or []],
                        [column_of(schema, query, ref) for ref, _ in query.where])


_SELECT_ARGS = {"expressions", "from_", "from", "where", "limit"}
_TABLE_ARGS = {"this", "alias"}


def shape(ast: exp.Expr) -> ReadQuery | None:
    """`ast`'s parts if it is a lookup's or a scan's shape (`reads.py`), else None."""
    if not isinstance(ast, exp.Select) or any(v for k, v in ast.args.items() if k not in _SELECT_ARGS):
        return None
    source = ast.args.get("from_") or ast.args.get("from")
    table = source.this if isinstance(source, exp.From) else None
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) \
            or any(v for k, v in table.args.items() if k not in _TABLE_ARGS):
        return None
    alias = table.args.get("alias")
    if alias is not None and (alias.args.get("columns") or not alias.name):
        return None
    items: list[tuple[str | None, exp.Column | None]] = []
    for e in ast.expressions:
        name = e.alias if isinstance(e, exp.Alias) else None
        e = e.this if isinstance(e, exp.Alias) else e
        if isinstance(e, exp.Star) and name is None:
            items.append((None, None))
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Identifier | exp.Star) and not e.args.get("db") \
                and not e.args.get("catalog") and not (isinstance(e.this, exp.Star) and name is not None):
            items.append((name, e))
        else:
            return None
    where = _conjuncts(ast.args["where"].this) if ast.args.get("where") else []
    limit = _limit(ast.args.get("limit"))
    if where is None or limit is False:
        return None
    return ReadQuery(table.name.lower(), (alias.name if alias else table.name).lower(), items, where,
                  limit if isinstance(limit, int) and not isinstance(limit, bool) else None)


def _conjuncts(e: exp.Expr) -> list[tuple[exp.Column, exp.Expr]] | None:
    """`a = 1 AND (b = 'x')` as [(a, 1), (b, 'x')], or None for any other condition."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        left, right = _conjuncts(e.this), _conjuncts(e.expression)
        return None if left is None or right is None else left + right
    if not isinstance(e, exp.EQ):
        return None
    a, b = e.this, e.expression
    while isinstance(a, exp.Paren):
        a = a.this
    while isinstance(b, exp.Paren):
        b = b.this
    if isinstance(b, exp.Column) and not isinstance(a, exp.Column):
        a, b = b, a
    if not isinstance(a, exp.Column) or not isinstance(a.this, exp.Identifier) or a.args.get("db"):
        return None
    return [(a, b)]


def _limit(node: exp.Expr | None) -> int | None | bool:
    """The LIMIT's row count, None without one, False for one this module does not take."""
    if node is None:
        return None
    value = node.expression if isinstance(node, exp.Limit) else None
    if isinstance(value, exp.Literal) and value.is_int and 0 <= int(value.this) <= _MAX_LIMIT \
            and not any(v for k, v in node.args.items() if k != "expression"):
        return int(value.this)
    return False


def column_of(schema: Schema, query: ReadQuery, ref: exp.Column) -> Column | None:
    """The visible column `ref` names, resolved as Spark does (case-insensitively), or None."""
    if ref.table and ref.table.lower() != query.qualifier:
        return None
    found = [c for c in schema.visible if c.name.lower() == ref.name.lower()]
    return found[0] if len(found) == 1 else None


def projection(schema: Schema, query: ReadQuery) -> list[tuple[str, Column]] | None:
    """The output columns (the name Spark gives each, its stored column), or None."""
    out: list[tuple[str, Column]] = []
    for alias, ref in query.items:
        if ref is None or isinstance(ref.this, exp.Star):
            if ref is not None and ref.table and ref.table.lower() != query.qualifier:
                return None
            out.extend((c.name, c) for c in schema.visible)
            continue
        column = column_of(schema, query, ref)
        if column is None:
            return None
        out.append((alias or ref.name, column))  # Spark names a column as the query spells it
    return out


def key_values(schema: Schema, query: ReadQuery, columns: Sequence[Column | None]) -> dict[str, Any] | None:
    """The key's value per key column, when the conditions name each key column once (`columns`:
    the one each names), each with a literal whose comparison Spark makes plainly (`_literal`);
    else None."""
    values: dict[str, Any] = {}
    for (_, value), column in zip(query.where, columns, strict=True):
        if column is None or column.name not in schema.key or column.name in values:
            return None
        v = _literal(column, value)
        if v is _NO:
            return None
        values[column.name] = v
    return values if len(values) == len(schema.key) else None


_NO = object()


def _literal(column: Column, e: exp.Expr) -> Any:
    """The value `e` stands for compared with `column`, or `_NO`."""
    t = column.type.name
    if t in _INT_RANGES:
        negative = isinstance(e, exp.Neg)
        lit = e.this if negative else e
        if isinstance(lit, exp.Literal) and lit.is_int:
            v = -int(lit.this) if negative else int(lit.this)
            return v if -_INT_RANGES[t] <= v < _INT_RANGES[t] else _NO
    elif t == "varchar" and isinstance(e, exp.Literal) and e.is_string:
        return e.this
    elif t == "boolean" and isinstance(e, exp.Boolean):
        return bool(e.this)
    return _NO
