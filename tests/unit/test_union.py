"""Spark-free tests of `UNION ALL`'s operator (`stream/union.py`: its JSON, pruning, a shared input)
and of the planner's set operations and grouping sets (`frontend/plan/setops.py`,
`frontend/plan/grouping_sets.py`): the branches each query makes, the MV's key that keeps equal
rows of two branches apart, PostgreSQL's column names and types. The rows themselves are checked
against DuckDB in tests/integration/test_set_operations.py."""

from __future__ import annotations

import pytest

from sparkwave.core.errors import SqlError
from sparkwave.frontend.common_subplans import share_common_subplans
from sparkwave.frontend.plan.static_catalog import StaticCatalog
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.statements import parse
from sparkwave.stream.aggregate import Agg, Aggregate
from sparkwave.stream.plan import OPERATORS, from_json
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan
from sparkwave.stream.share import Share
from sparkwave.stream.union import Union

TABLES = """
CREATE TABLE l (id int PRIMARY KEY, g int, v int);
CREATE TABLE r (id int PRIMARY KEY, g int, w bigint);
CREATE TABLE e (g int, v int) APPEND ONLY;
"""


def _union() -> Union:
    a = Scan(1, [("a_id", "int"), ("a_v", "int")], ["a_id"], relation="l", exprs=[("a_id", "`id`"), ("a_v", "`v`")])
    b = Scan(2, [("b_id", "int"), ("b_v", "int")], ["b_id"], relation="r", exprs=[("b_id", "`id`"), ("b_v", "`g`")])
    pa_ = Project(3, [("p_v", "int"), ("p_t", "int"), ("p_k", "int")], ["p_t", "p_k"], input=a,
                  exprs=[("p_v", "`a_v`"), ("p_t", "0"), ("p_k", "`a_id`")])
    pb = Project(4, [("q_v", "int"), ("q_t", "int"), ("q_k", "int")], ["q_t", "q_k"], input=b,
                 exprs=[("q_v", "`b_v`"), ("q_t", "1"), ("q_k", "`b_id`")])
    return Union(5, [("v", "int"), ("t", "int"), ("k", "int")], ["t", "k"], parts=[pa_, pb],
                 branches=[["p_v", "p_t", "p_k"], ["q_v", "q_t", "q_k"]])


def test_a_union_is_stored_as_json_and_read_back_the_same() -> None:
    u = _union()
    assert OPERATORS["union"] is Union
    stored = u.to_json()
    assert stored["op"] == "union" and stored["branches"] == [["p_v", "p_t", "p_k"], ["q_v", "q_t", "q_k"]]
    back = from_json(stored)
    assert isinstance(back, Union) and back.to_json() == stored
    assert back.stateless and back.upstreams() == ["l", "r"] and back.state_tables() == {}


def test_pruning_keeps_the_key_and_each_branchs_matching_column() -> None:
    u = _union()
    u.prune({"t"})
    assert u.names == ["t", "k"] and u.branches == [["p_t", "p_k"], ["q_t", "q_k"]]
    assert [p.names for p in u.parts] == [["p_t", "p_k"], ["q_t", "q_k"]]


def test_a_subplan_shared_by_two_branches_is_read_from_one_share() -> None:
    """Two branches that are the same aggregate: one becomes a share, the other a renaming
    projection of it, in the union's list of inputs."""
    def agg(i: int) -> Aggregate:
        scan = Scan(10 * i, [(f"g{i}", "int")], [], relation="l", exprs=[(f"g{i}", "`g`")])
        return Aggregate(10 * i + 1, [(f"g{i}", "int"), (f"n{i}", "bigint")], [f"g{i}"], input=scan,
                         group=[f"g{i}"], aggs=[Agg("count_star", None, f"n{i}", "bigint")])

    first, second = agg(1), agg(2)
    u = Union(99, [("g", "int"), ("n", "bigint")], ["g"], parts=[first, second],
              branches=[["g1", "n1"], ["g2", "n2"]])
    share_common_subplans(u, iter(range(100, 200)))
    shared, renamed = u.parts
    assert isinstance(shared, Share) and shared.input is first
    assert isinstance(renamed, Project) and renamed.input is shared and renamed.names == ["g2", "n2"]


def _plan(sql: str):  # type: ignore[no-untyped-def]
    catalog = StaticCatalog(StaticTypes())
    catalog.run(TABLES)
    (stmt,) = parse(f"CREATE MATERIALIZED VIEW m AS {sql}")
    return catalog.plan(stmt)


def _branches(sql: str) -> int:
    return next(len(op.inputs) for op in _plan(sql).root.walk() if isinstance(op, Union))


@pytest.mark.parametrize(("group_by", "sets"), [
    ("ROLLUP (g, v)", 3), ("CUBE (g, v)", 4), ("GROUPING SETS ((g), (v), ())", 3), ("g, ROLLUP (v)", 2),
    ("GROUPING SETS (g, ROLLUP (g, v))", 4), ("CUBE (g), CUBE (v)", 4), ("GROUPING SETS ((g, v), (v, g))", 2),
])
def test_grouping_sets_expand_as_postgresql(group_by: str, sets: int) -> None:
    assert _branches(f"SELECT g, v, count(*) AS n FROM l GROUP BY {group_by}") == sets


def test_a_union_alls_chain_is_one_union_with_postgresqls_names_and_types() -> None:
    plan = _plan("SELECT g, v FROM l UNION ALL SELECT g, w FROM r UNION ALL (SELECT g AS x, v AS y FROM e)")
    assert _branches("SELECT g, v FROM l UNION ALL SELECT g, w FROM r UNION ALL SELECT g, v FROM e") == 3
    assert [(c.name, c.type.name) for c in plan.schema.visible] == [("g", "int"), ("v", "bigint")]
    hidden = [c.name for c in plan.schema.columns if c.hidden]
    assert "branch" in hidden and set(hidden) <= set(plan.schema.key), "the branch tag keys equal rows apart"


def test_union_intersect_and_except_group_by_every_column() -> None:
    for op in ("UNION", "INTERSECT", "EXCEPT"):
        plan = _plan(f"SELECT g, v FROM l {op} SELECT g, w FROM r")
        assert plan.schema.key == ("g", "v") and not any(c.hidden for c in plan.schema.columns), op
    for op in ("INTERSECT ALL", "EXCEPT ALL"):  # each copy of a row numbered: a hidden key column
        plan = _plan(f"SELECT g FROM l {op} SELECT g FROM r")
        assert [c.name for c in plan.schema.columns if c.hidden] == ["copy"] and "copy" in plan.schema.key, op


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT g FROM l UNION SELECT g, w FROM r", "each UNION query must have the same number of columns: the first "
                                                 "query has 1, query 2 has 2"),
    ("SELECT v FROM l UNION ALL SELECT 'x'", "UNION ALL types integer and text cannot be matched (column 'v')"),
    ("SELECT g, GROUPING(id) AS x FROM l GROUP BY CUBE (g)", "arguments to GROUPING must be grouping expressions"),
    ("SELECT g FROM l UNION ALL SELECT g FROM r ORDER BY 3 LIMIT 1", "ORDER BY position 3 is not in the select list"),
    ("SELECT g, count(*) FROM l GROUP BY CUBE (g, v, id, g, v, id, g, v, id)", "CUBE of 9 elements"),
])
def test_what_a_set_operation_cannot_be_is_an_error_naming_it(sql: str, words: str) -> None:
    with pytest.raises(SqlError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _plan(sql)
