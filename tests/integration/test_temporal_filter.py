"""Temporal filters against the DuckDB oracle: after every committed epoch each MV equals its SQL
evaluated by DuckDB over the tables as of that epoch with NOW() read as the epoch's recorded time
(`Catalog.epoch_now`), under hypothesis-generated inserts, updates and deletes, with epochs that
carry no input at all (rows still leave or appear), MVs created mid-stream (both backfill
strategies), and big epochs on the executors. NOW() comes from a test clock (`core/clock.py`), set
before each flush: the outside world's timing, never a sleep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

import sparkwave
from sparkwave.core import clock
from sparkwave.core.errors import SparkwaveError
from tests.integration.test_oracle import FAST_PHASES
from tests.oracle import Model, duckdb_sql, multiset, rows_of, to_sql

T0 = datetime(2026, 1, 1)
T0_US = int((T0.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1_000_000

TABLES = [
    ("CREATE TABLE ev (id int, g int, v int, ts timestamptz, PRIMARY KEY (id))",
     "ev", "id INTEGER, g INTEGER, v INTEGER, ts TIMESTAMPTZ", ["id", "g", "v", "ts"], ["id"]),
    ("CREATE TABLE ap (g int, v int, ts timestamptz) APPEND ONLY", "ap", "g INTEGER, v INTEGER, ts TIMESTAMPTZ",
     ["g", "v", "ts"], []),
]
MVS = [
    ("t_recent", "SELECT id, v, ts FROM ev WHERE ts > NOW() - INTERVAL '20' SECOND"),
    ("t_delay", "SELECT id, g FROM ev WHERE v > 2 AND ts <= NOW()"),
    ("t_window", "SELECT id, v FROM ev WHERE NOW() - INTERVAL '30 seconds' <= ts AND ts < NOW() + INTERVAL '5' SECOND"),
    ("t_count", "SELECT g, count(*) AS n, sum(v) AS s FROM ap WHERE ts >= NOW() - INTERVAL '15' SECOND GROUP BY g"),
    ("t_join", "SELECT ev.id, ap.v AS av FROM ev JOIN ap ON ev.g = ap.g WHERE ev.ts > NOW() - INTERVAL '25' SECOND"),
    ("t_between", "SELECT id, g, ts FROM ev WHERE ts BETWEEN NOW() - INTERVAL '1 second' * 15 AND NOW() + "
                  "2 * INTERVAL '2 seconds' AND v IS NOT NULL"),  # two bounds, folded interval arithmetic
    ("t_late_recent", "SELECT id, g, ts FROM ev WHERE ts > NOW() - INTERVAL '10' SECOND AND g IS NOT NULL"),
    ("t_late_delay", "SELECT g, v FROM ap WHERE ts <= NOW() - INTERVAL '3' SECOND"),
]

ids = st.integers(0, 8)
groups = st.one_of(st.none(), st.integers(0, 2))
ints = st.one_of(st.none(), st.integers(0, 6))
offsets = st.one_of(st.none(), st.integers(-40, 40))  # seconds from the epoch's NOW()
stmt = st.one_of(
    st.tuples(st.just("insert"), st.just("ev"),
              st.lists(st.tuples(ids, groups, ints, offsets), min_size=1, max_size=4)),
    st.tuples(st.just("insert"), st.just("ap"), st.lists(st.tuples(groups, ints, offsets), min_size=1, max_size=4)),
    st.builds(lambda s, lo: ("update", "ev", {"ts": f"ts + INTERVAL '{s}' SECOND"}, f"id >= {lo}"),
              st.integers(-10, 12), ids),
    st.builds(lambda lo, hi: ("update", "ev", {"v": "v + 1"}, f"id BETWEEN {lo} AND {hi}"), ids, ids),
    st.builds(lambda lo, hi: ("delete", "ev", f"id BETWEEN {lo} AND {hi}"), ids, ids),
)
epoch_st = st.tuples(st.sampled_from([0, 1, 4, 9, 17]), st.lists(stmt, min_size=0, max_size=4))


@pytest.fixture
def fake_clock():
    now = [T0_US]
    clock.use(lambda: now[0])
    yield now
    clock.use(None)


def _timed(statement: tuple, now_us: int) -> tuple:
    """An insert's time offsets (seconds from NOW()) as timestamps."""
    if statement[0] != "insert":
        return statement
    base = datetime(1970, 1, 1) + timedelta(microseconds=now_us)
    rows = [(*r[:-1], None if r[-1] is None else base + timedelta(seconds=r[-1])) for r in statement[2]]
    return (*statement[:2], rows)


def oracle_rows(model: Model, sql: str, now_us: int) -> list[tuple]:
    """The MV's rows by DuckDB, NOW() being the epoch's recorded time."""
    tree = sqlglot.parse_one(sql, read="postgres")
    at = (datetime(1970, 1, 1) + timedelta(microseconds=now_us)).isoformat(sep=" ")
    for node in list(tree.find_all(exp.CurrentTimestamp)):
        node.replace(sqlglot.parse_one(f"CAST('{at}+00' AS TIMESTAMPTZ)", read="postgres"))
    return model.db.execute(duckdb_sql(tree.sql(dialect="postgres"), model.db)).fetchall()


def _utc(rows: list[tuple]) -> list[tuple]:
    return [tuple(v.astimezone(UTC).replace(tzinfo=None) if isinstance(v, datetime) and v.tzinfo else v for v in r)
            for r in rows]


def check(s: sparkwave.Session, model: Model, epoch: int, names: list[str]) -> None:
    now_us = s.catalog.epoch_now(epoch) if epoch else T0_US  # before the first epoch every table is empty
    assert now_us is not None, f"epoch {epoch} recorded no NOW()"
    sql = dict(MVS)
    for name in names:
        got = multiset(_utc(rows_of(s.table(name, as_of=epoch))))
        want = multiset(_utc(oracle_rows(model, sql[name], now_us)))
        assert got == want, f"MV {name} differs from DuckDB at epoch {epoch} (NOW() {now_us}): " \
                            f"extra {got - want}, missing {want - got}"


def run(spark, wh, fake_clock, epochs, late, strategy, *, big: bool = False) -> None:
    model = Model()
    model.db.execute("SET TimeZone = 'UTC'")
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        if big:
            s.sql("SET big_epoch_rows = 0")
        for ddl, name, duck, cols, key in TABLES:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        created = []
        for name, sql in MVS[:-2]:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            created.append(name)
        for i, (step, batch) in enumerate(epochs):
            if i == late:
                for name, sql in MVS[-2:]:
                    s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = '{strategy}') AS {sql}")
                    created.append(name)
                check(s, model, s.committed_epoch, created)
            fake_clock[0] += step * 1_000_000
            timed = [_timed(x, fake_clock[0]) for x in batch]
            for statement in timed:
                s.sql(to_sql(statement))
            model.apply_epoch(timed)
            check(s, model, s.flush(), created)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(epoch_st, min_size=4, max_size=8), late=st.integers(0, 3),
       strategy=st.sampled_from(["snapshot", "blocking"]))
def test_temporal_filters_equal_duckdb_at_every_epoch(spark, tmp_path_factory, fake_clock, epochs, late, strategy):
    run(spark, tmp_path_factory.mktemp("wh"), fake_clock, epochs, late, strategy)


BIG_EPOCHS = [
    (0, [("insert", "ev", [(1, 0, 3, -5), (2, 1, 4, 3), (3, 1, 1, -25), (4, None, 5, 8)]),
         ("insert", "ap", [(0, 1, -10), (1, 2, 2), (1, 3, -14)])]),
    (4, [("update", "ev", {"ts": "ts + INTERVAL '6' SECOND"}, "id >= 3"), ("insert", "ap", [(0, 5, 1)])]),
    (9, []),  # time alone: rows leave and appear
    (1, [("delete", "ev", "id BETWEEN 1 AND 2"), ("insert", "ev", [(5, 2, 6, 0), (6, 0, 0, 30)])]),
    (17, [("update", "ev", {"v": "v + 1"}, "id BETWEEN 0 AND 8")]),
]


def test_temporal_filters_in_big_epochs_on_the_executors(spark, tmp_path, fake_clock):
    """With `big_epoch_rows = 0` each changed step runs as Spark frames (`delta_frame`: the state's
    moved ranges read as a frame, the logs written by the executors): the same rows as DuckDB's."""
    run(spark, tmp_path / "wh", fake_clock, BIG_EPOCHS, 2, "snapshot", big=True)
    state = tmp_path / "wh" / "tables" / "t_recent" / "state" / "t2"
    logs = [f for f in state.rglob("e*.parquet") if f.parent.name == "log"]
    assert {pq.ParquetFile(f).metadata.created_by.split(" ")[0] for f in logs} >= {"parquet-mr"}, \
        "no state log written by the executors"


def test_rows_leave_in_epochs_without_input_and_their_state_goes(session, fake_clock):
    session.sql("CREATE TABLE ev (id int, ts timestamptz, PRIMARY KEY (id))")
    session.sql("CREATE MATERIALIZED VIEW recent AS SELECT id FROM ev WHERE ts > NOW() - INTERVAL '1 hour'")
    session.sql("INSERT INTO ev VALUES (1, TIMESTAMP '2025-12-31 23:30:00'), (2, TIMESTAMP '2025-12-31 23:50:00')")
    session.flush()
    assert sorted(r[0] for r in session.table("recent").collect()) == [1, 2]
    state = session.sql("DESCRIBE recent")
    assert any("temporal filter" in str(r) for r in state.collect()), "DESCRIBE names the filter's state"
    fake_clock[0] += 35 * 60 * 1_000_000  # 00:35: row 1 (23:30) is more than an hour old
    session.flush()
    assert [r[0] for r in session.table("recent").collect()] == [2]
    assert session.table("recent.t2").count() == 1  # its state row went with it
    fake_clock[0] += 20 * 60 * 1_000_000
    session.flush()
    assert session.table("recent").count() == 0 and session.table("recent.t2").count() == 0


def test_now_outside_a_temporal_filter_is_refused_saying_where_it_may_be(session):
    session.sql("CREATE TABLE ev (id int, ts timestamptz, PRIMARY KEY (id))")
    with pytest.raises(SparkwaveError, match="outside a temporal filter"):
        session.sql("CREATE MATERIALIZED VIEW bad AS SELECT id, NOW() AS t FROM ev")
