"""EXPLAIN through the SQL surface (a real session): the operator tree as `QUERY PLAN` rows, nothing
created; and the clauses that were silently dropped, refused by name."""

from __future__ import annotations

import pytest

from sparkwave.cli.nexmark_sql import QUERIES
from sparkwave.core.errors import SqlError

TABLES = """
CREATE TABLE person (id bigint PRIMARY KEY, name varchar, city varchar, state varchar);
CREATE TABLE auction (id bigint PRIMARY KEY, seller bigint, category bigint, date_time timestamp);
CREATE TABLE bid (auction bigint, bidder bigint, price bigint, date_time timestamp) APPEND ONLY;
"""


def _plan(s, sql: str) -> list[str]:
    df = s.sql(sql)
    assert df.columns == ["QUERY PLAN"]
    return [r[0] for r in df.collect()]


def test_explain_create_materialized_view_prints_the_tree_and_creates_nothing(session):
    s = session
    s.sql(TABLES)
    before = {r.name for r in s.catalog.relations(creating=True, internal=True)}
    lines = _plan(s, f"EXPLAIN CREATE MATERIALIZED VIEW q3 AS {QUERIES['q3']}")
    assert lines[0].startswith("Materialize(q3, key: [id, _pk_id], columns: [name varchar, city varchar, state "
                               "varchar, id bigint, _pk_id bigint hidden]")
    join = next(ln for ln in lines if ln.strip().startswith("Join("))
    assert 'q3.j3l "the join\'s left side rows by seller"' in join and "inner" in join
    scans = [ln.strip() for ln in lines if ln.strip().startswith("Scan(")]
    assert [sc.split(",")[1].strip() for sc in scans] == ["auction", "person"]
    assert "filter: c3_category = 10" in scans[0]  # WHERE pushed into the scan
    assert all(ln.startswith("  " * (1 + i)) for i, ln in enumerate(lines[1:3]))  # each input indented once more
    assert {r.name for r in s.catalog.relations(creating=True, internal=True)} == before
    assert s.catalog.relation("q3") is None


def test_explain_select_plans_the_query_as_an_mv(session):
    s = session
    s.sql(TABLES)
    lines = _plan(s, "EXPLAIN SELECT auction, count(*) AS n FROM bid GROUP BY auction")
    assert lines[0].startswith("Materialize(query, key: [auction]")
    agg = next(ln.strip() for ln in lines if ln.strip().startswith("Aggregate("))
    assert "calls: [" in agg and "count_star()" in agg and 'query.a' in agg and "partials by auction" in agg


def test_explain_of_another_statement_is_refused(session):
    with pytest.raises(SqlError, match="EXPLAIN takes CREATE MATERIALIZED VIEW"):
        session.sql("EXPLAIN CREATE TABLE t (k int)")


@pytest.mark.parametrize("statement", ["UPDATE t SET v = 2 WHERE k = 1 RETURNING *",
                                       "DELETE FROM t WHERE k = 1 RETURNING k",
                                       "INSERT INTO t VALUES (2, 2) RETURNING k"])
def test_returning_is_refused_by_name_and_changes_nothing(session, statement):
    s = session
    s.sql("CREATE TABLE t (k int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)")
    s.flush()
    with pytest.raises(SqlError, match="RETURNING is not supported"):
        s.sql(statement)
    s.flush()
    assert [tuple(r) for r in s.table("t").collect()] == [(1, 1)]


def test_asof_join_in_a_query_is_refused_by_name(session):
    s = session
    s.sql(TABLES)
    with pytest.raises(SqlError, match="ASOF JOIN is not supported"):
        s.sql("SELECT * FROM bid ASOF JOIN auction ON bid.auction = auction.id AND bid.date_time >= auction.date_time")
