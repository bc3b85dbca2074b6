"""Closed world, without Spark: every sqlglot expression class is either consumed by the planner
(with the args it consumes, `closed_world.HANDLED`; a function of the documented set) or refused by
name, and so is every arg of a handled class that the planner does not consume. ASOF JOIN,
FOR SYSTEM_TIME AS OF (which were silently dropped: wrong answers) are refused by name in a query;
an MV plans ASOF JOIN."""

from __future__ import annotations

import inspect

import pytest
from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.frontend.functions import FUNCTIONS
from sparkwave.frontend.plan import closed_world as cw
from sparkwave.frontend.plan.static_catalog import StaticCatalog
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.statements import parse

CLASSES = sorted((c for c in vars(exp).values() if inspect.isclass(c) and issubclass(c, exp.Expression)
                  and c is not exp.Expression), key=lambda c: c.__name__)


def _error(message: str, keyword: str | None) -> SqlError:
    return SqlError(message)


def _refusal(node: exp.Expr) -> str | None:
    try:
        cw.check_closed(node, _error)
    except SqlError as e:
        return str(e)
    return None


def _dummy(cls: type[exp.Expr], arg: str) -> object:
    return "ASOF" if (cls, arg) == (exp.Join, "method") else exp.Var(this="x")


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_expression_class_is_handled_or_refused_by_name(cls: type[exp.Expr]) -> None:
    node = cls() if cls is not exp.Anonymous else exp.Anonymous(this="no_such_function")
    refused = _refusal(node)
    if cls in cw.HANDLED or (issubclass(cls, exp.Func) and cls in FUNCTIONS):
        assert refused is None, f"{cls.__name__} is handled, yet refused: {refused}"
        handled = cw.HANDLED.get(cls, cw.ALL)
        dropped = set(cw._FUNCTION_ARGS_REFUSED.get(cls, ())) if cls not in cw.HANDLED else (
            set() if handled is cw.ALL else set(cls.arg_types) - handled - {"from", "with"})
        for arg in sorted(dropped):  # an arg nothing consumes, when set, is refused by name
            node = cls()
            node.set(arg, _dummy(cls, arg))
            message = _refusal(node)
            assert message is not None and cw.arg_name(cls, arg) in message and "is not supported" in message, \
                f"{cls.__name__}.{arg} set: {message}"
    else:
        assert refused is not None and "is not supported" in refused, f"{cls.__name__} passes unrefused"
        name = cw.refused_class(cls)
        assert (name is not None and name in refused) or (issubclass(cls, exp.Func) and "function" in refused)


CATALOG_SQL = """
CREATE TABLE a (k bigint PRIMARY KEY, t timestamp, v int);
CREATE TABLE b (k bigint PRIMARY KEY, t timestamp, w int);
"""


def _plan_error(query: str) -> str:
    catalog = StaticCatalog(StaticTypes())
    catalog.run(CATALOG_SQL)
    with pytest.raises(SqlError) as e:  # when parsed or when planned
        (stmt,) = parse(f"CREATE MATERIALIZED VIEW m AS {query}")
        catalog.plan(stmt)
    return str(e.value)


@pytest.mark.parametrize(("query", "name"), [
    ("SELECT a.k, b.w FROM a JOIN b FOR SYSTEM_TIME AS OF now() ON a.k = b.k",
     "FOR SYSTEM_TIME AS OF is not supported"),
    ("SELECT k, count(*) AS n FROM a GROUP BY ALL", "GROUP BY ALL is not supported"),
    ("SELECT k FROM a UNION ALL BY NAME SELECT k FROM b", "UNION ALL BY NAME is not supported"),
    ("SELECT k, sum(v) OVER w AS s FROM a WINDOW w AS (PARTITION BY k)", "the WINDOW clause is not supported"),
    ("SELECT k FROM a TABLESAMPLE SYSTEM (10)", "TABLESAMPLE is not supported"),
])
def test_a_clause_the_planner_would_drop_is_refused_by_name(query: str, name: str) -> None:
    assert name in _plan_error(query)


def test_what_the_planner_consumes_still_plans() -> None:
    catalog = StaticCatalog(StaticTypes())
    catalog.run(CATALOG_SQL + "CREATE MATERIALIZED VIEW m AS SELECT a.k, b.w FROM a NATURAL JOIN b "
                              "WHERE a.v > 1 ORDER BY a.k;")
    assert "m" in catalog.relations


def test_an_asof_join_plans_in_a_materialized_view() -> None:
    """ASOF JOIN was planned as a plain join (wrong answers), then refused; now the planner consumes
    it (`frontend/plan/asof.py`), in an MV only: a query runs on Spark, which has no ASOF join."""
    catalog = StaticCatalog(StaticTypes())
    (plan,) = catalog.run(CATALOG_SQL + "CREATE MATERIALIZED VIEW m AS SELECT a.k, b.w FROM a ASOF LEFT JOIN b "
                                        "ON a.v = b.w AND a.t >= b.t;")
    assert [op.op for op in plan.root.walk()].count("asof_join") == 1


@pytest.mark.parametrize(("query", "name"), [
    ("SELECT * FROM a ASOF JOIN b ON a.k = b.k AND a.t >= b.t", "ASOF JOIN is not supported"),
    ("SELECT * FROM a JOIN b FOR SYSTEM_TIME AS OF PROCTIME() ON a.k = b.k", "FOR SYSTEM_TIME AS OF is not supported"),
])
def test_a_query_spark_would_read_otherwise_is_refused_when_parsed(query: str, name: str) -> None:
    with pytest.raises(SqlError, match=name):
        parse(query)


def test_a_from_items_column_list_renames_its_columns_as_in_postgresql() -> None:
    """`AS q(a, b)` was dropped (the columns kept their old names: a swap gave wrong answers)."""
    catalog = StaticCatalog(StaticTypes())
    catalog.run(CATALOG_SQL + "CREATE MATERIALIZED VIEW m AS SELECT * FROM (SELECT v, t FROM a) q(t, v);"
                              "CREATE MATERIALIZED VIEW n AS SELECT kk FROM b AS r(kk);")
    assert [(c.name, c.type.name) for c in catalog.relations["m"].schema.visible] == [("t", "int"),
                                                                                      ("v", "timestamp")]
    assert [c.name for c in catalog.relations["n"].schema.visible] == ["kk"]
    assert "3 columns available but 4 columns specified" in _plan_error("SELECT * FROM a AS x(p, q, r, s)")
