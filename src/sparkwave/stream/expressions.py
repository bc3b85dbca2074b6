"""The operators' Spark SQL expressions read as sqlglot trees: which internal columns one refers to,
whether it is a bare column, and the same expression over renamed columns, decided on the parsed
tree (a backtick inside a string constant is not a column).

Stored plans hold Spark SQL text; a text is parsed once (`parsed` caches it: a dataflow is rebuilt
from its JSON every epoch, with the same texts). `SparkExpr` is Spark's dialect except a few calls
that sqlglot's Spark reader would rewrite into something else (`to_char(x, '9990.00')` into a cast
that drops the pattern, `to_utc_timestamp(ts, tz)` with an added cast of a timestamp without time
zone): they are kept as written, so that text -> tree -> text keeps its meaning
(`tests/unit/test_expressions.py` proves it over every expression of the golden plans).

An operator holds each expression as an `Expr`: its Spark SQL text (what Spark evaluates and the
catalog stores, so stored plans keep their JSON) with its tree, read from that text on first use
and shared through `parsed`'s cache. The planner hands its translated trees (`Expr.of_tree`): the
text is generated once, there; the tree an analysis sees is always the text read back, the meaning
Spark will evaluate (the planner's own tree can hold nodes, e.g. `exp.ToChar`, that this dialect
would write as something else)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark

_KEPT = ("TO_CHAR", "TO_UTC_TIMESTAMP", "FROM_UTC_TIMESTAMP", "UNIX_DATE", "UNIX_MICROS", "DATE_FORMAT")
_INTERNAL = re.compile(r"c\d+_[a-z0-9_]*")  # an internal column's name, as the planner makes it


def _kept(name: str) -> Callable[[list[exp.Expr]], exp.Expr]:
    return lambda args: exp.Anonymous(this=name, expressions=args)


class SparkExpr(Spark):
    """Spark SQL as the operators hold it; see the module's docstring."""

    class Parser(Spark.Parser):  # type: ignore[valid-type,misc]
        FUNCTIONS = {**Spark.Parser.FUNCTIONS, **{name: _kept(name) for name in _KEPT}}


DIALECT = "sparkexpr"  # the name sqlglot registers `SparkExpr` under


class Expr(str):
    """An operator's expression: Spark SQL text and its tree (`tree`). A `str`, so that Spark
    (`selectExpr`, `where`) and the stored JSON take it as the text it is; immutable."""

    @classmethod
    def of_text(cls, sql: str) -> Expr:
        """A stored (or written) Spark SQL text; nothing is parsed until an analysis asks."""
        return sql if isinstance(sql, Expr) else cls(sql)

    @classmethod
    def of_tree(cls, tree: exp.Expr, dialect: str = "spark") -> Expr:
        """A tree the planner made, written once as Spark SQL (by Spark's generator, as plans always
        were: the golden plans and stored JSON keep their texts)."""
        return cls(tree.sql(dialect=dialect))

    @property
    def tree(self) -> exp.Expr:
        """The text read back as Spark SQL (shared: never modify it, `.copy()` first)."""
        return parsed(self.sql())

    def sql(self) -> str:
        """The Spark SQL text, as a plain `str`."""
        return str.__str__(self)


def exprs_of(pairs: Iterable[Sequence[str]]) -> list[tuple[str, Expr]]:
    """(column, Spark SQL) pairs, stored or written, as (column, `Expr`)."""
    return [(n, Expr.of_text(e)) for n, e in pairs]


def expr_or_none(sql: str | None) -> Expr | None:
    return None if sql is None else Expr.of_text(sql)


def parsed(sql: str) -> exp.Expr:
    """`sql` as a tree, shared by every caller: never modify it (`.copy()` first)."""
    return _parsed(str(sql))  # the caches' keys are plain `str`s: lru_cache keys an `Expr` apart


@functools.lru_cache(maxsize=16_384)
def _parsed(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read=DIALECT)


def spark_sql(e: exp.Expr) -> str:
    """A tree as Spark SQL text."""
    return e.sql(dialect=DIALECT)


def canonical(sql: str) -> str:
    """`sql` as the generator writes it: two texts of one tree compare equal."""
    return _canonical(str(sql))


@functools.lru_cache(maxsize=16_384)
def _canonical(sql: str) -> str:
    return spark_sql(parsed(sql))


def _internal(e: exp.Expr) -> list[exp.Identifier]:
    """The quoted identifiers of internal columns in `e` (a struct field's too: `c3_s`.f)."""
    return [i for i in e.find_all(exp.Identifier) if i.quoted and _INTERNAL.fullmatch(i.name)
            and isinstance(i.parent, exp.Column | exp.Dot)]


def references(*sql: str | None) -> set[str]:
    """The internal columns (`c<n>_<name>`) that Spark SQL expressions refer to."""
    return {name for text in sql if text for name in _references(str(text))}


@functools.lru_cache(maxsize=16_384)
def _references(sql: str) -> frozenset[str]:
    return frozenset(i.name for i in _internal(parsed(sql)))


def column_ref(sql: str) -> str | None:
    """The column a Spark SQL expression is, if it is a bare reference (`` `name` ``)."""
    e = parsed(sql)
    if isinstance(e, exp.Column) and not e.table and isinstance(e.this, exp.Identifier) and e.this.quoted:
        return e.this.name
    return None


def renamed(sql: str, names: dict[str, str]) -> Expr | None:
    """A Spark SQL expression with its internal columns renamed by `names`; None if it refers to one
    that `names` lacks."""
    refs = _references(str(sql))
    if not refs <= names.keys():
        return None
    return Expr.of_text(_renamed(str(sql), tuple(sorted((r, names[r]) for r in refs))))


@functools.lru_cache(maxsize=16_384)
def _renamed(sql: str, pairs: tuple[tuple[str, str], ...]) -> str:
    names = dict(pairs)
    tree = parsed(sql).copy()
    for i in _internal(tree):
        i.replace(exp.to_identifier(names[i.name], quoted=True))
    return spark_sql(tree)
