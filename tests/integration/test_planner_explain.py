"""EXPLAIN through the SQL surface (a real session): the operator tree as `QUERY PLAN` rows, nothing
created; and the clauses that were silently dropped, refused by name."""

from __future__ import annotations

import re

import pytest

from sparkwave.cli.nexmark_sql import QUERIES
from sparkwave.core.errors import CatalogError, SqlError

TABLES = """
CREATE TABLE person (id bigint PRIMARY KEY, name varchar, city varchar, state varchar);
CREATE TABLE auction (id bigint PRIMARY KEY, seller bigint, category bigint, date_time timestamp);
CREATE TABLE bid (auction bigint, bidder bigint, price bigint, date_time timestamp) APPEND ONLY;
"""


def _plan(s, sql: str) -> list[str]:
    df = s.sql(sql)
    assert df.columns == ["QUERY PLAN"]
    return [r[0] for r in df.collect()]


def _everything(s) -> tuple:
    """What a CREATE would change: relations (with state tables), jobs, the epoch, the folders."""
    return (sorted(r.name for r in s.catalog.relations(creating=True, internal=True)),
            [j.id for j in s.catalog.jobs()], s.catalog.committed_epoch(),
            sorted(p.name for p in s.warehouse.root.rglob("*") if p.is_dir()))


def _tree(lines: list[str]) -> list[str]:
    return lines[:next((i for i, ln in enumerate(lines) if ln.startswith("Backfill estimate")), len(lines))]


def test_explain_create_materialized_view_prints_the_tree_and_creates_nothing(session):
    s = session
    s.sql(TABLES)
    before = _everything(s)
    lines = _plan(s, f"EXPLAIN CREATE MATERIALIZED VIEW q3 AS {QUERIES['q3']}")
    assert lines[0].startswith("Materialize(q3, key: [id, _pk_id], columns: [name varchar, city varchar, state "
                               "varchar, id bigint, _pk_id bigint hidden]")
    join = next(ln for ln in lines if ln.strip().startswith("Join("))
    assert 'q3.j3l "the left side\'s auction rows by seller"' in join and "inner" in join, join
    assert "runs: driver (Arrow) up to 1,000,000 rows an epoch (big_epoch_rows), else executors" in join
    scans = [ln.strip() for ln in _tree(lines) if ln.strip().startswith("Scan(")]
    assert [sc.split(",")[1].strip() for sc in scans] == ["auction", "person"]
    assert "filter: category = 10" in scans[0]  # WHERE pushed into the scan
    assert all(ln.startswith("  " * (1 + i)) for i, ln in enumerate(lines[1:3]))  # each input indented once more
    assert _everything(s) == before
    assert s.catalog.relation("q3") is None


def test_explain_select_plans_the_query_as_an_mv(session):
    s = session
    s.sql(TABLES)
    lines = _plan(s, "EXPLAIN SELECT auction, count(*) AS n FROM bid GROUP BY auction")
    assert lines[0].startswith("Materialize(query, key: [auction]")
    agg = next(ln.strip() for ln in lines if ln.strip().startswith("Aggregate("))
    assert "calls: [count(*)]" in agg and '"count(*) per auction"' in agg, agg
    assert not any(ln.startswith("Backfill estimate") for ln in lines)  # a query has no backfill


def test_explain_create_estimates_the_backfill_and_explain_name_shows_the_stored_plan(session):
    s = session
    s.sql(TABLES + "SET big_epoch_rows = 50")
    s.sql("INSERT INTO auction VALUES " + ", ".join(f"({i}, {i % 10}, {i % 20}, TIMESTAMP '2024-01-01')"
                                                    for i in range(30)))
    s.sql("INSERT INTO person VALUES " + ", ".join(f"({i}, 'p', 'c', 'OR')" for i in range(10)))
    s.sql("INSERT INTO bid VALUES " + ", ".join(f"({i % 30}, 1, {i}, TIMESTAMP '2024-01-01')" for i in range(200)))
    s.flush()
    before = _everything(s)
    create = f"CREATE MATERIALIZED VIEW q3 AS {QUERIES['q3']}"
    lines = _plan(s, f"EXPLAIN {create}")
    est = lines[len(_tree(lines)):]
    assert est[0].startswith("Backfill estimate (strategy snapshot, as of epoch ") and "nothing is created" in est[0]
    assert est[1].startswith("  reads auction: 30 rows, ") and est[2].startswith("  reads person: 10 rows, "), est
    assert "  writes q3: at most 30 rows" in est[3], est  # an auction joins at most its seller (person's key)
    assert any(ln.startswith('  writes q3.j3r "the right side\'s person rows by person.id": at most 10 rows')
               for ln in est), est
    assert "on the driver (Arrow), as one epoch of inserts: 40 rows in all" in est[-2], est
    assert est[-1] == "  takes: no rate measured yet: no backfill on this warehouse has checkpointed", est
    assert _everything(s) == before  # nothing created, nothing written

    s.sql(create)  # a backfill: the warehouse's rate is measured from its checkpoints
    again = _plan(s, f"EXPLAIN {create.replace('q3', 'q3b', 1)}")
    assert re.fullmatch(r"  takes: (about .*|under a second) at [\d,]+ rows/s, the rate of the last 1 backfill on "
                        r"this warehouse", again[-1]), again[-1]
    stored = _plan(s, "EXPLAIN q3")  # an existing MV: the plan it runs, from its stored definition
    assert stored == _tree(lines) and not any(ln.startswith("Backfill") for ln in stored)
    with pytest.raises(CatalogError, match="'bid' is a table, not a materialized view"):
        s.sql("EXPLAIN bid")
    with pytest.raises(CatalogError, match="nope"):
        s.sql("EXPLAIN nope")


def test_explain_of_another_statement_is_refused(session):
    with pytest.raises(SqlError, match="EXPLAIN takes CREATE MATERIALIZED VIEW"):
        session.sql("EXPLAIN CREATE TABLE t (k int)")


def test_insert_returning_into_a_table_that_may_keep_its_row_is_refused_and_changes_nothing(session):
    """RETURNING works (tests/integration/test_sqlgaps.py); an INSERT into an ON CONFLICT DO NOTHING
    table could return a row the epoch then ignores, so it is refused by name."""
    s = session
    s.sql("CREATE TABLE t (k int PRIMARY KEY, v int) ON CONFLICT DO NOTHING; INSERT INTO t VALUES (1, 1)")
    s.flush()
    with pytest.raises(SqlError, match="RETURNING"):
        s.sql("INSERT INTO t VALUES (1, 2) RETURNING k")
    s.flush()
    assert [tuple(r) for r in s.table("t").collect()] == [(1, 1)]


def test_asof_join_in_a_query_is_refused_by_name(session):
    s = session
    s.sql(TABLES)
    with pytest.raises(SqlError, match="ASOF JOIN is not supported"):
        s.sql("SELECT * FROM bid ASOF JOIN auction ON bid.auction = auction.id AND bid.date_time >= auction.date_time")
