"""Set-returning functions (`stream/project_set.py`, `frontend/plan/project_set.py`): `generate_series`
and `unnest` in SELECT lists and in FROM (alone, or over the FROM items before them, WITH ORDINALITY).
After each committed epoch every MV equals DuckDB's evaluation of its SQL as an exact multiset, under
hypothesis-generated inserts, updates and deletes (an input row's deletion retracts its series, NULL
arguments, empty and reversed series); half the MVs are created mid-stream over existing rows
(snapshot or blocking backfill); and the three evaluations (per epoch on the driver, per big epoch on
the executors, from snapshots) give the same MVs and state tables."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkwave
from sparkwave.core.errors import SqlError
from tests.integration.test_oracle import FAST_PHASES
from tests.integration.test_parity import tables
from tests.oracle import Model, check_views, rows_of, run_with_late_views, to_sql

TABLES = [
    ("CREATE TABLE t (id int, a int, b int, s varchar, PRIMARY KEY (id))", "t",
     "id INTEGER, a INTEGER, b INTEGER, s VARCHAR", ["id", "a", "b", "s"], ["id"]),
    ("CREATE TABLE e (a int, b int) APPEND ONLY", "e", "a INTEGER, b INTEGER", ["a", "b"], []),
]

MVS = [
    ("sel_series", "SELECT id, generate_series(a, b) AS g FROM t WHERE id > 0"),
    # two calls in lockstep, the shorter padded with NULL; a NULL argument makes no rows
    ("sel_zip", "SELECT id, generate_series(1, a) AS g, unnest(ARRAY[b, a, NULL]) AS u FROM t"),
    ("sel_expr", "SELECT id, generate_series(b, a, -1) * 2 AS g FROM t"),  # a call inside an expression
    ("from_lateral", "SELECT t.id, x FROM t, unnest(ARRAY[t.a, t.b]) AS u(x) WHERE x IS NOT NULL"),
    ("from_ordinality", "SELECT t.id, g, o FROM t CROSS JOIN LATERAL generate_series(1, t.a) WITH ORDINALITY "
                        "AS g(g, o)"),
    ("from_const", "SELECT g FROM generate_series(1, 3) AS g"),
    ("agg_over", "SELECT g, count(*) AS n FROM (SELECT generate_series(a, b) AS g FROM t) q GROUP BY g"),
    # over a join (the project set's input is an Arrow Z-set, not a scan's chain)
    ("over_join", "SELECT x, count(*) AS n FROM (SELECT t.id, e.b FROM t JOIN e ON t.a = e.a) j, "
                  "generate_series(1, j.b) AS x GROUP BY x"),
    ("append", "SELECT a, unnest(ARRAY[a, b]) AS x FROM e"),
    ("texts", "SELECT id, s, unnest(ARRAY['p', s]) FROM t"),
]

ids = st.integers(0, 8)
small = st.one_of(st.none(), st.integers(-1, 4))
texts = st.one_of(st.none(), st.sampled_from(["p", "q"]))
stmt = st.one_of(
    st.tuples(st.just("insert"), st.just("t"), st.lists(st.tuples(ids, small, small, texts), min_size=1, max_size=5)),
    st.tuples(st.just("insert"), st.just("e"), st.lists(st.tuples(small, small), min_size=1, max_size=4)),
    st.builds(lambda lo, hi: ("update", "t", {"b": "b + 1"}, f"id BETWEEN {lo} AND {hi}"), ids, ids),
    st.builds(lambda lo: ("update", "t", {"a": "b", "s": "'q'"}, f"id >= {lo}"), ids),
    st.builds(lambda lo, hi: ("delete", "t", f"id BETWEEN {lo} AND {hi}"), ids, ids),
)


epochs_of = st.lists(st.lists(stmt, min_size=1, max_size=5), min_size=3, max_size=4)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=epochs_of, late=st.integers(1, 2), strategy=st.sampled_from(["snapshot", "blocking"]),
       compact_at=st.one_of(st.none(), st.integers(0, 4)))
def test_set_returning_functions_equal_duckdb_at_every_epoch(spark, tmp_path_factory, epochs, late, strategy,
                                                             compact_at):
    run_with_late_views(spark, tmp_path_factory.mktemp("wh"), TABLES, MVS, epochs, late, strategy,
                        append_only="append", compact_at=compact_at)


SEED = [("insert", "t", [(i, i % 5 - 1 if i % 7 else None, (i * 3) % 5, "p" if i % 2 else None) for i in range(30)]),
        ("insert", "e", [(i % 4, i % 3) for i in range(20)] + [(None, 2)])]
AFTER = [[("update", "t", {"b": "b + 1"}, "id % 3 = 0"), ("delete", "t", "id > 25"), ("insert", "e", [(1, 4)])],
         [("delete", "t", "a = 2"), ("insert", "t", [(40, 1, 4, "q"), (41, None, 1, None)]),
          ("update", "t", {"a": "b", "s": "'q'"}, "id <= 9")]]
PARITY = [MVS[1], MVS[3], MVS[4], MVS[6], MVS[7]]


def _evaluate(spark, wh: Path, *, big: bool) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """Every MV's and state table's rows after the seed and two epochs of changes (every step on
    the executors if `big`), then the MVs built again from snapshots (`<mv>_built`, blocking)."""
    mvs = dict(PARITY)
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(f"SET big_epoch_rows = {0 if big else 1_000_000}")
        for ddl, *_ in TABLES:
            s.sql(ddl)
        for name, sql in mvs.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        for batch in [SEED, *AFTER]:
            for statement in batch:
                s.sql(to_sql(statement))
            s.flush()
        stepped = tables(s, set(mvs))
        for name, sql in mvs.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name}_built WITH (backfill_strategy = 'blocking') AS {sql}")
        return stepped, tables(s, set(mvs), "_built")


def test_a_project_sets_three_evaluations_agree(spark, tmp_path_factory):
    """Per epoch on the driver, per big epoch as Spark frames (`big_epoch_rows = 0`) and from
    snapshots: the same MV rows and the same state tables (the aggregates' and joins' around it)."""
    on_driver, built = _evaluate(spark, tmp_path_factory.mktemp("wh"), big=False)
    on_executors, _ = _evaluate(spark, tmp_path_factory.mktemp("wh"), big=True)
    assert set(on_driver) > {n for n, _ in PARITY}, sorted(on_driver)
    for path, got in (("per big epoch", on_executors), ("from snapshots", built)):
        assert got.keys() == on_driver.keys(), f"{path}: other tables {sorted(got)} than {sorted(on_driver)}"
        for name, rows in on_driver.items():
            assert got[name] == rows, f"{name} {path} differs: extra {got[name] - rows}, missing {rows - got[name]}"


CHUNKED = [MVS[0], MVS[1], MVS[3], MVS[4], MVS[5], MVS[6], MVS[7]]


def test_a_chunked_backfill_and_the_log_store_phase_add_up(spark, tmp_path_factory):
    """Backfills in chunks of 10 rows (each input row's series in the chunk of its vnode; constant
    rows once), then paused after their CREATE while the main graph commits epochs: their log-store
    phase consumes the upstreams' logs; every MV equals DuckDB's rows."""
    model = Model()
    with sparkwave.connect(tmp_path_factory.mktemp("wh"), spark=spark, barrier_interval_ms=3_600_000) as s:
        for ddl, name, duck, cols, key in TABLES:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        for statement in SEED:
            s.sql(to_sql(statement))
        model.apply_epoch(SEED)
        s.flush()
        s.sql("SET backfill_chunk_rows = 10")
        for name, sql in CHUNKED:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
        chunked = [j.name for j in s.jobs() if len(s.catalog.job_chunks(j.id)) > 2]
        assert "sel_series" in chunked, f"sel_series was built in one chunk (chunked: {chunked})"
        names = [n for n, _ in CHUNKED]
        check_views(s, model, s.committed_epoch, names)
        s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
        late = [(f"{n}_late", sql) for n, sql in CHUNKED[:4]]
        for name, sql in late:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
        for batch in AFTER:
            for statement in batch:
                s.sql(to_sql(statement))
            model.apply_epoch(batch)
            s.flush()
        paused = {j.name: j.id for j in s.jobs()}
        for name, _ in late:
            s.sql(f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = DEFAULT")
        s.sql("WAIT")
        for name, _ in late:
            phases = {step[1] for step in s.catalog.job_steps(paused[name])}
            assert "log_store" in phases, f"{name}: the log-store phase was not exercised ({phases})"
        check_views(s, model, s.committed_epoch, names + [n for n, _ in late])


def test_timestamp_series_with_an_interval_step(session):
    """generate_series(timestamp, timestamp, interval): PostgreSQL's rows, each retracted with its row."""
    session.sql("CREATE TABLE ev (id int, start_at timestamp, hours int, PRIMARY KEY (id))")
    session.sql("CREATE MATERIALIZED VIEW slots AS SELECT id, slot FROM ev CROSS JOIN LATERAL generate_series("
                "ev.start_at, ev.start_at + INTERVAL '1 hour' * ev.hours, INTERVAL '30 minutes') AS slot")
    session.sql("INSERT INTO ev VALUES (1, TIMESTAMP '2024-01-01 10:00:00', 1), "
                "(2, TIMESTAMP '2024-01-02 00:00:00', 0), (3, TIMESTAMP '2024-01-03 00:00:00', -1), (4, NULL, 2)")
    session.flush()
    at = datetime.fromisoformat
    assert sorted(rows_of(session.table("slots"))) == [
        (1, at("2024-01-01 10:00:00")), (1, at("2024-01-01 10:30:00")), (1, at("2024-01-01 11:00:00")),
        (2, at("2024-01-02 00:00:00"))]
    session.sql("DELETE FROM ev WHERE id = 1")
    session.flush()
    assert sorted(rows_of(session.table("slots"))) == [(2, at("2024-01-02 00:00:00"))]


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT id FROM t WHERE generate_series(1, a) > 1", ["not allowed in WHERE"]),
    ("SELECT count(*), unnest(ARRAY[a]) FROM t", ["with GROUP BY, DISTINCT, aggregates", "subquery"]),
    ("SELECT unnest(s) FROM t", ["unnest() takes an array constructor", "ARRAY[a, b, ...]"]),
    ("SELECT generate_series(1.5, 3) FROM t", ["generate_series() of decimal(11,1) is not supported", "cast"]),
    ("SELECT * FROM generate_series(1, t.a) g, t", ["only as one of the last FROM items", "FROM t, unnest"]),
    ("SELECT * FROM t LEFT JOIN LATERAL generate_series(1, t.a) g ON true", ["write a comma or CROSS JOIN"]),
    ("SELECT generate_series(1, generate_series(1, a)) FROM t", ["may not be nested"]),
    ("SELECT * FROM t WITH ORDINALITY", ["WITH ORDINALITY applies to a set-returning function"]),
])
def test_what_a_set_returning_call_cannot_be_is_an_error_naming_it(session, sql, words):
    for ddl, *_ in TABLES:
        session.sql(ddl)
    with pytest.raises(SqlError) as info:
        session.sql(f"CREATE MATERIALIZED VIEW bad AS {sql}")
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"


@pytest.mark.parametrize("sql", [
    "SELECT generate_series(3, a) FROM t",  # over a table's columns: a query runs constant calls only (query_sets)
    "SELECT unnest(ARRAY[a, 2]) AS x FROM t",
    "INSERT INTO e VALUES (generate_series(1, 2), 1)",
    "DELETE FROM t WHERE a = generate_series(1, 2)",
    "UPDATE t SET a = generate_series(1, 2)",
])
def test_queries_and_dml_refuse_set_returning_calls(session, sql):
    """A materialized view plans them (a project set), a query runs calls of constants
    (`frontend/query_sets.py`, tested in test_query_sets.py); the rest is refused, never run as Spark's explode."""
    for ddl, *_ in TABLES:
        session.sql(ddl)
    with pytest.raises(SqlError, match="set-returning functions"):
        session.sql(sql)



def test_a_timestamp_series_past_the_bound_fails_its_view_not_the_jvm(session) -> None:
    """86.4 million elements from one row (a day by milliseconds) would fill the JVM's memory: the
    row's error names the bound, as an integer series', and the table's rows stay committed."""
    from sparkwave.frontend import overview

    s = session
    s.sql("CREATE TABLE tsb (k int PRIMARY KEY, ts timestamp)")
    s.sql("CREATE MATERIALIZED VIEW tsb_series AS SELECT k, generate_series(ts, ts + INTERVAL '1 day', "
          "INTERVAL '1 millisecond') AS g FROM tsb")
    s.sql("INSERT INTO tsb VALUES (1, TIMESTAMP '2024-01-01 00:00:00')")
    s.flush()  # returns once the view is taken out, after its failed attempts
    failures = overview.epochs(s).failures
    assert failures and "would make more than 10000000 rows from one row" in failures[-1].error
    assert {n.name: n.status for n in overview.graph(s)}["tsb_series"] == "failed"
    assert s.table("tsb").count() == 1
