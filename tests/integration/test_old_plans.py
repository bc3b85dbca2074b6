"""A warehouse's stored plans keep running: the plans written by the code of 84a0f4f (operators'
expressions held as Spark SQL text, `tests/fixtures/plans_84a0f4f.json`) drive an MV's epochs today,
each of the expression-valued fields among them (a scan's and a projection's expressions and
predicate, a window operator's calls, constant rows)."""

from __future__ import annotations

import json
from pathlib import Path

import sparkwave
from tests.oracle import multiset, rows_of

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "plans_84a0f4f.json").read_text())


def _same_as_queries(s: sparkwave.Session) -> None:
    for name, mv in FIXTURE["mvs"].items():
        assert multiset(rows_of(s.table(name))) == multiset(rows_of(s.sql(mv["query"]))), name


def test_plans_stored_before_expressions_were_trees_run_epochs(session: sparkwave.Session) -> None:
    for table in FIXTURE["tables"]:
        session.sql(table)
    for name, mv in FIXTURE["mvs"].items():
        session.sql(f"CREATE MATERIALIZED VIEW {name} AS {mv['query']}")
        definition = session.catalog.relation(name).definition
        session.catalog.set_definition(name, {**definition, "dataflow": mv["dataflow"]})
        assert session.catalog.relation(name).definition["dataflow"] == mv["dataflow"]
    session.sql("INSERT INTO t VALUES (1, 'a', 1.50, TIMESTAMP '2026-01-01 10:20:00'), "
                "(2, 'b', 0.25, TIMESTAMP '2026-01-01 11:59:59'), (3, 'a', -7.13, NULL), "
                "(4, 'skip', 9.00, TIMESTAMP '2026-01-02 00:00:00'), (5, NULL, 12345.67, NULL)")
    session.flush()
    _same_as_queries(session)
    session.sql("UPDATE t SET x = 3.00, v = 'b' WHERE k = 2")
    session.sql("DELETE FROM t WHERE k = 1")
    session.sql("INSERT INTO t VALUES (6, 'a', 2.00, TIMESTAMP '2026-03-01 23:00:00')")
    session.flush()
    _same_as_queries(session)
    assert session.table("old_scan").count() > 0 and session.table("old_values").count() > 0
