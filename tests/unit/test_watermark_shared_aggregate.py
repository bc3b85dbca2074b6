"""An aggregate whose state two joins read as a side (a CTE joined twice) is not cleaned by one
join's watermarked keys (`frontend/plan/watermarks.py: _clean_borrowed`): the other join's other side
may have no watermark and still look up the groups below it (found in review: `t JOIN g` lost its
rows for groups `g JOIN s` had cleaned). An aggregate only one inner join reads still is."""

from __future__ import annotations

from sparkwave.frontend.plan.static_catalog import StaticCatalog
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.statements import parse
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.join import Join

TABLES = """
CREATE TABLE ev (k bigint, v int) APPEND ONLY;
CREATE TABLE s (k bigint, w int) APPEND ONLY;
CREATE TABLE t (k bigint PRIMARY KEY, x int);
"""
CTE = "WITH g AS (SELECT k, count(*) AS c FROM ev GROUP BY k) "


def _aggregates(query: str) -> tuple[list[Aggregate], list[Join]]:
    catalog = StaticCatalog(StaticTypes())
    catalog.run(TABLES)
    for name in ("ev", "s"):
        catalog.relations[name].definition["watermark"] = {"column": "k", "delay": 5, "sql": "k - 5"}
    (stmt,) = parse(f"CREATE MATERIALIZED VIEW m AS {query}")
    ops = list(catalog.plan(stmt).root.walk())
    return [op for op in ops if isinstance(op, Aggregate)], [op for op in ops if isinstance(op, Join)]


def test_an_aggregate_two_joins_read_is_not_cleaned_by_one_of_them() -> None:
    aggs, joins = _aggregates(
        CTE + "SELECT a.k, a.c, a.w, b.x FROM (SELECT g.k, g.c, s.w FROM g JOIN s ON g.k = s.k) a "
              "JOIN (SELECT g.k, t.x, g.c FROM t JOIN g ON t.k = g.k) b ON a.k = b.k AND a.c = b.c")
    (agg,) = aggs
    assert sum(1 for j in joins if any(a.agg.id == agg.id for a in j.aggregate_sides.values())) == 2
    assert agg.cleaning is None


def test_an_aggregate_one_inner_join_reads_is_cleaned_by_its_keys() -> None:
    (agg,), (join,) = _aggregates(CTE + "SELECT g.k, g.c, s.w FROM g JOIN s ON g.k = s.k")
    assert join.aggregate_sides and agg.cleaning is not None
    assert {t.relation for t in agg.cleaning.watermark.terms} == {"ev", "s"}
