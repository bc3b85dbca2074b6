"""EXPLAIN's words, without Spark: the Nexmark plans (the golden corpus's, planned with the static
type oracle) in the user's column names, every state table named with what it holds, where each
operator runs from `core/policy.py`'s thresholds, an existing MV's stored plan explained as it was
planned, and the bounds the backfill estimate gives."""

from __future__ import annotations

import re

import pytest

from sparkwave.core import policy
from sparkwave.core.catalog import Catalog, Relation
from sparkwave.core.errors import CatalogError
from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.frontend.explain_estimate import Rate, Read, _Bounds, _time, measured_rate, read
from sparkwave.frontend.plan.explain import explain, state_tables, stored_plan
from sparkwave.frontend.plan.planner import MvPlan
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.statements import CreateMaterializedView, Explain, parse
from tests.planner import golden

CASES = {c.name.split("/")[1]: c for c in golden.read(golden.HERE / "nexmark.plan")}
INTERNAL = re.compile(r"\bc\d+_(?!arg\b)\w+")  # a planner's name; an aggregate's long argument keeps `arg`


def plan_of(query: str) -> MvPlan:
    case = CASES[query]
    (stmt,) = parse(case.sql)
    return golden.catalog_of(case, StaticTypes()).plan(stmt)


def every_case() -> list[tuple[str, MvPlan]]:
    out = []
    for path in golden.files():
        for case in golden.read(path):
            if case.expected and not case.expected[0].startswith("ERROR"):
                (stmt,) = parse(case.sql)
                stmt = stmt.target if isinstance(stmt, Explain) else stmt
                name = stmt.name if isinstance(stmt, CreateMaterializedView) else "query"
                out.append((name, golden.catalog_of(case, StaticTypes()).plan(stmt)))
    return out


def test_nexmark_plans_read_in_the_users_column_names():
    q5 = explain("q5", plan_of("q5"))
    assert any('q5.a3 "count(*) per window_start, auction"' in ln for ln in q5), q5
    q7 = "\n".join(explain("q7", plan_of("q7")))
    # bid is scanned twice: its two price columns read apart, by scan
    assert "on: [bid#1.price = maxprice]" in q7 and "maxprice := max(bid#2.price)" in q7, q7
    q4 = "\n".join(explain("q4", plan_of("q4")))
    assert '"max(price) per id, category"' in q4 and "filter: (bid.date_time BETWEEN auction.date_time AND " \
        "expires)" in q4, q4


def test_no_planner_name_reaches_the_user_and_every_state_table_is_described():
    cases = every_case()
    assert len(cases) > 150
    for name, plan in cases:
        lines = explain(name, plan)
        assert not [ln for ln in lines if INTERNAL.search(ln)], (name, lines)
        tables = state_tables(name, plan)
        assert {t for t, _ in tables} == {f"{name}.{s}" for op in plan.root.walk() for s in op.state_tables()}
        for table, words in tables:
            assert words and f'{table} "{words}"' in "\n".join(lines), (table, lines)


def test_internal_names_are_kept_on_request():
    lines = explain("q3", plan_of("q3"), internal_names=True)
    assert INTERNAL.search("\n".join(lines))


def test_where_an_operator_runs_follows_the_policy_thresholds(monkeypatch):
    lines = explain("q4", plan_of("q4"), big_epoch_rows=5000)
    agg = next(ln for ln in lines if ln.strip().startswith("Aggregate("))
    assert "runs: driver (Arrow) up to 5,000 rows an epoch (big_epoch_rows), else executors" in agg
    monkeypatch.setattr(policy, "LOCAL_ROWS", 77)
    scan = next(ln for ln in explain("q4", plan_of("q4")) if ln.strip().startswith("Scan("))
    assert "runs: driver up to 77 rows an epoch, else executors" in scan


@pytest.mark.parametrize("query", sorted(CASES))
def test_an_existing_mv_is_explained_from_its_stored_plan_as_when_it_was_planned(query):
    plan = plan_of(query)
    states = [s for op in plan.root.walk() for s in op.state_tables()]
    rel = Relation(query, "mv", plan.schema, {"dataflow": plan.root.to_json(), "outputs": plan.outputs,
                                              "upstreams": plan.upstreams, "states": states}, 1)
    assert explain(query, stored_plan(rel)) == explain(query, plan)


def test_explaining_a_table_by_name_is_refused_naming_it():
    rel = Relation("t", "table", Schema((Column("k", SqlType("int")),), ("k",)), {}, 1)
    with pytest.raises(CatalogError, match="'t' is a table, not a materialized view"):
        stored_plan(rel)


def test_backfill_bounds():
    rows = {"auction": 300, "person": 100, "bid": 4600}
    q3 = plan_of("q3")
    assert _Bounds(rows).rows(q3.root) == 300  # each auction matches at most one person: its seller's key
    q5 = plan_of("q5")
    assert _Bounds(rows).rows(q5.root.walk()[0]) == 4600 * 5  # a hop of 10 s sliding by 2 s: 5 windows a row
    q4 = plan_of("q4")
    assert _Bounds(rows).rows(q4.root) == 4600  # a bid matches at most its auction (auction's key)
    q7 = plan_of("q7")
    assert _Bounds(rows).rows(q7.root) == 4600 * 4600  # price = maxprice: no side matched on its key


# --- the estimate's inputs, from a catalog (SQLite, no Spark) ---------------------------------------
def _job(catalog: Catalog, name: str, strategy: str, started: float, steps: list[tuple[int, str, float, int]]) -> None:
    rel = Relation(name, "mv", Schema((Column("k", SqlType("int")),), ("k",)), {"upstreams": ["t"]}, 1,
                   state="creating")
    with catalog.transaction() as db:
        job = catalog.add_relation(db, rel, strategy, "t")
        db.execute("UPDATE jobs SET started_at = ? WHERE id = ?", (started, job))
        db.executemany("INSERT INTO job_steps VALUES (?, ?, ?, ?, ?, 0, 0, 0, NULL)",
                       [(job, step, phase, at, rows) for step, phase, at, rows in steps])


def test_the_backfill_rate_is_measured_from_the_jobs_snapshot_checkpoints(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    assert measured_rate(catalog) is None
    assert _time(1000, None, None) == "no rate measured yet: no backfill on this warehouse has checkpointed"
    _job(catalog, "a", "snapshot", 1000.0, [(1, "snapshot", 1010.0, 500), (2, "snapshot", 1020.0, 500),
                                            (3, "log_store", 1500.0, 9999)])  # 1,000 rows in 20 s
    _job(catalog, "b", "snapshot", 2000.0, [(7, "snapshot", 2010.0, 300), (8, "snapshot", 2020.0, 300)])
    _job(catalog, "c", "sink", 3000.0, [(1, "snapshot", 3001.0, 10**6)])  # a sink's backfill: not an MV's
    # b's oldest kept checkpoint is where its measure starts: 300 rows in the 10 s after it
    assert measured_rate(catalog) == Rate((1000 + 300) / 30, 2)
    assert _time(1300, Rate(1300 / 30, 2), None) == \
        "about 30 s at 43 rows/s, the rate of the last 2 backfills on this warehouse"
    assert _time(1300, Rate(1300 / 30, 2), 10).startswith("about 2 min at 43 rows/s") and \
        "limited to 10 rows/s by backfill_rate_limit" in _time(1300, Rate(1300 / 30, 2), 10)
    assert _time(1300, None, 0) == "nothing until resumed: backfill_rate_limit is 0 (paused)"


def test_what_a_backfill_reads_of_a_table_and_of_a_source(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    files = []
    for i, size in enumerate((1000, 2345)):
        (path := tmp_path / f"part-{i}.parquet").write_bytes(b"x" * size)
        files.append(str(path))
    table = Relation("t", "table", Schema((Column("k", SqlType("int")),), ("k",)), {}, 1)
    source = Relation("s", "source", Schema((Column("k", SqlType("int")),), ()), {"startup_offsets": {"0": 5}}, 1)
    with catalog.transaction() as db:
        catalog.add_relation(db, table)
        catalog.add_relation(db, source)
        catalog.add_base(db, "t", 1, 0, 700, files)
        catalog.set_source_offsets(db, "s", {"0": 105, "1": 20})
    assert read(catalog, table, 1) == Read("t", 700, 3345, 2)
    assert str(read(catalog, table, 1)) == "reads t: 700 rows, 3.3 KB in 2 files"
    assert read(catalog, source, 1) == Read("s", 100 + 20, None, 0)
    assert str(read(catalog, source, 1)) == "reads s: 120 messages of the source's history, from Kafka"
