"""Oracle for ASOF joins (`stream/asof_join.py`): after each committed epoch every MV equals DuckDB's
evaluation as an exact multiset of rows, under inserts, updates and deletes on both sides (right
rows moved in time and between keys, so that one right change re-decides many left rows' matches),
many ties of time, NULL keys and NULL times; MVs created mid-stream backfill with either strategy;
per small epoch in Arrow and per big epoch on the executors.

The expectation is RisingWave's semantics written as a ranking (`tests/asof_cases.py`): of the right
rows that satisfy the ON clause, the closest in time, a tie to the smallest right key (DuckDB's own
ASOF JOIN agrees but for ties: `tests/unit/test_asof_oracle.py`)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sparkwave
from sparkwave.core.errors import SqlError
from tests.asof_cases import MVS, TABLES
from tests.asof_cases import oracle as _oracle
from tests.integration.test_oracle import FAST_PHASES
from tests.oracle import Model, multiset, rows_of, to_sql

T0 = datetime(2026, 1, 1)
ids = st.integers(0, 7)
keys = st.one_of(st.none(), st.integers(0, 2))
small = st.one_of(st.none(), st.integers(0, 5))
times = st.one_of(st.none(), st.builds(lambda s: T0 + timedelta(seconds=s), st.integers(0, 6)))  # ties aplenty

stmt = st.one_of(
    st.tuples(st.just("insert"), st.just("q"), st.lists(st.tuples(ids, keys, times, small), min_size=1, max_size=5)),
    st.tuples(st.just("insert"), st.just("r"), st.lists(st.tuples(ids, keys, times, small), min_size=1, max_size=5)),
    st.builds(lambda s, lo: ("update", "r", {"ts": f"ts + INTERVAL '{s}' SECOND"}, f"id >= {lo}"),
              st.integers(-2, 2), ids),
    st.builds(lambda g, lo: ("update", "r", {"k": str(g)}, f"id <= {lo}"), st.integers(0, 2), ids),
    st.builds(lambda lo, hi: ("delete", "r", f"id BETWEEN {lo} AND {hi}"), ids, ids),
    st.builds(lambda s, lo: ("update", "q", {"ts": f"ts + INTERVAL '{s}' SECOND", "x": "x + 1"}, f"id >= {lo}"),
              st.integers(-2, 2), ids),
    st.builds(lambda lo, hi: ("delete", "q", f"id BETWEEN {lo} AND {hi}"), ids, ids),
)


def _run(spark, tmp_path_factory, epochs, late, strategy, *, big: bool = False) -> None:
    model = Model()
    late_mvs = ["a_left_lt", "a_gt_agg"]  # created mid-stream, over existing rows
    with sparkwave.connect(tmp_path_factory.mktemp("wh"), spark=spark, barrier_interval_ms=3_600_000) as s:
        if big:  # every step as Spark frames on the executors
            s.sql("SET big_epoch_rows = 0")
        for ddl, name, duck, cols, key in TABLES:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        created = []

        def create(name: str, with_: str = "") -> None:
            s.sql(f"CREATE MATERIALIZED VIEW {name} {with_} AS {MVS[name][0]}")
            model.view(name, _oracle(name))
            created.append(name)

        for name in MVS:
            if name not in late_mvs:
                create(name)
        for i, batch in enumerate(epochs):
            if i == late:
                for name in late_mvs:
                    create(name, f"WITH (backfill_strategy = '{strategy}')")
                _check(s, model, s.committed_epoch, created)
            for statement in batch:
                s.sql(to_sql(statement))
            model.apply_epoch(batch)
            _check(s, model, s.flush(), created)


def _check(session: sparkwave.Session, model: Model, epoch: int, names: list[str]) -> None:
    for name in names:
        got = multiset(rows_of(session.table(name, as_of=epoch)))
        want = multiset(model.rows(name))
        assert got == want, f"MV {name} differs from DuckDB at epoch {epoch}: extra {got - want}, missing {want - got}"


def _t(s: int) -> datetime:
    return T0 + timedelta(seconds=s)


# Ties decided by the right key, then the winner deleted, a smaller key tied in, rows moved in time and key.
TIES = [
    [("insert", "q", [(1, 0, _t(3), 1), (2, 0, _t(5), 2), (3, 1, _t(2), 3), (4, None, _t(1), 0), (5, 0, None, 4)]),
     ("insert", "r", [(1, 0, _t(2), 5), (2, 0, _t(2), 1), (3, 0, _t(4), 2), (4, 1, _t(2), 3), (5, 1, _t(2), 3),
                      (6, 0, _t(6), 9), (7, 1, None, 3)])],
    [("delete", "r", "id BETWEEN 1 AND 1"), ("insert", "r", [(0, 0, _t(2), 7)])],
    [("update", "r", {"ts": "ts + INTERVAL '1' SECOND"}, "id >= 3"), ("update", "r", {"k": "1"}, "id <= 0")],
    [("delete", "q", "id BETWEEN 1 AND 2"), ("insert", "q", [(6, 1, _t(2), 5), (7, 1, _t(3), 3)])],
]


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(st.lists(stmt, min_size=1, max_size=5), min_size=3, max_size=6),
       late=st.integers(0, 3), strategy=st.sampled_from(["snapshot", "blocking"]))
@example(epochs=TIES, late=1, strategy="snapshot")
@example(epochs=TIES, late=3, strategy="blocking")
def test_asof_joins_equal_duckdb_at_every_epoch(spark, tmp_path_factory, epochs, late, strategy):
    _run(spark, tmp_path_factory, epochs, late, strategy)


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(st.lists(stmt, min_size=2, max_size=5), min_size=3, max_size=4), late=st.integers(0, 2))
@example(epochs=TIES, late=2)
def test_asof_joins_per_big_epoch_on_the_executors_equal_duckdb(spark, tmp_path_factory, epochs, late):
    _run(spark, tmp_path_factory, epochs, late, "snapshot", big=True)


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT q.id FROM q ASOF JOIN r ON q.k = r.k", "ASOF JOIN needs exactly one inequality"),
    ("SELECT q.id FROM q ASOF JOIN r ON q.k = r.k AND q.ts >= r.ts AND q.x < r.v", "it has 2"),
    ("SELECT q.id FROM q ASOF JOIN r ON q.k = r.k AND q.ts >= r.ts + INTERVAL '1' SECOND",
     "as a column of its side in a subquery"),
    ("SELECT q.id FROM q ASOF JOIN r ON q.ts >= r.ts", "at least one equality"),
    ("SELECT q.id FROM q ASOF RIGHT JOIN r ON q.k = r.k AND q.ts >= r.ts", "swap the two sides"),
    ("SELECT q.id FROM q ASOF JOIN r ON q.k = r.k AND q.ts >= r.v", "cast one side's column"),
])
def test_an_asof_join_it_cannot_plan_says_what_to_write(session, query, message):
    session.sql(";".join(t[0] for t in TABLES))
    with pytest.raises(SqlError, match=message):
        session.sql(f"CREATE MATERIALIZED VIEW m AS {query}")
    with pytest.raises(SqlError, match="ASOF JOIN is not supported in a query"):
        session.sql("SELECT q.id FROM q ASOF JOIN r ON q.k = r.k AND q.ts >= r.ts")
