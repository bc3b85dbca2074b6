"""Issue 48's leftovers (sqlrest): a `col TIMESTAMPTZ AS PROCTIME()` table column (the recorded NOW()
of the epoch that applies the row), numeric input rounded as real PostgreSQL rounds it, SHOW
MATERIALIZED VIEWS' append_only over the API and the protocol, and INSERT ... RETURNING refused
where the epoch, not the statement, decides whether a row is kept (a watermarked table). NOW()
comes from a test clock (`core/clock.py`), set before each flush: never a sleep."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import psycopg
import pytest

from sparkwave.core import clock
from sparkwave.core.errors import SparkwaveError
from sparkwave.frontend.plan import proctime
from sparkwave.server.listener import Listener
from sparkwave.server.session_backend import SessionBackend
from tests.oracle import rows_of

T0 = 1_767_225_600_000_000  # 2026-01-01 00:00 UTC, in microseconds
MINUTE = 60_000_000


@pytest.fixture
def fake_clock():
    now = [T0]
    clock.use(lambda: now[0])
    yield now
    clock.use(None)


def _us(v: datetime | None) -> int | None:
    """A timestamptz value as microseconds since 1970 (a naive one is UTC, the session's zone)."""
    if v is None:
        return None
    v = v if v.tzinfo else v.replace(tzinfo=UTC)
    delta = v - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _times(s, name: str) -> dict[int, int | None]:
    return {k: _us(p) for k, p in rows_of(s.sql(f"SELECT k, p FROM {name}"))}


@pytest.mark.parametrize("big", [False, True], ids=["driver", "executors"])
def test_a_proctime_column_is_the_recorded_now_of_the_epoch_that_applies_the_row(session, fake_clock, big):
    """Every row of an epoch gets its recorded NOW(), in the table, the MVs over it (one created
    later, by snapshot backfill) and a temporal filter over the column; in small epochs (Arrow, on
    the driver) and big ones (Spark, the executors writing the log)."""
    s = session
    if big:
        s.sql("SET big_epoch_rows = 0")
    s.sql("CREATE TABLE pt (k int PRIMARY KEY, v int, p TIMESTAMPTZ AS PROCTIME())")
    described = [(r[0], r[1], r[4]) for r in rows_of(s.sql("DESCRIBE pt"))][:3]
    assert described == [("k", "int", None), ("v", "int", None), ("p", "timestamptz", proctime.DESCRIBED)]
    s.sql("CREATE MATERIALIZED VIEW everything AS SELECT k, v, p FROM pt")
    s.sql("CREATE MATERIALIZED VIEW recent AS SELECT k, p FROM pt WHERE p > NOW() - INTERVAL '1 minute' * 10")
    s.sql("INSERT INTO pt VALUES (1, 10), (2, 20)")
    e1 = s.flush()
    now1 = s.catalog.epoch_now(e1)
    assert now1 is not None and now1 >= T0
    assert _times(s, "pt") == {1: now1, 2: now1}  # one value for every row of an epoch
    fake_clock[0] += 5 * MINUTE
    s.sql("INSERT INTO pt (k, v) VALUES (3, 30)")
    s.sql("UPDATE pt SET v = 11 WHERE k = 1")  # the updated row is applied by the next epoch: its time
    e2 = s.flush()
    now2 = s.catalog.epoch_now(e2)
    assert now2 is not None and now2 >= now1 + 5 * MINUTE
    assert _times(s, "pt") == {1: now2, 2: now1, 3: now2}
    assert sorted(rows_of(s.sql("SELECT k, v FROM pt"))) == [(1, 11), (2, 20), (3, 30)]
    assert _times(s, "everything") == _times(s, "pt") == _times(s, "recent")
    fake_clock[0] += 7 * MINUTE  # row 2 is now 12 minutes old: it leaves the temporal filter, with no input
    e3 = s.flush()
    assert e3 > e2 and _times(s, "recent") == {1: now2, 3: now2}
    s.sql("CREATE MATERIALIZED VIEW later AS SELECT k, p FROM pt")  # a snapshot backfill reads the stored times
    assert _times(s, "later") == _times(s, "pt") == {1: now2, 2: now1, 3: now2}
    gone = s.sql("DELETE FROM pt WHERE k = 2 RETURNING k, p")  # a DELETE's old row has its time
    assert [(k, _us(p)) for k, p in rows_of(gone)] == [(2, now1)]
    ret = s.sql("INSERT INTO pt VALUES (4, 40) RETURNING k, v")
    assert rows_of(ret) == [(4, 40)]


@pytest.mark.parametrize("sql, words", [
    ("INSERT INTO pt (k, v, p) VALUES (5, 1, '2026-01-01 00:00:00+00')", "cannot INSERT into column 'p'"),
    ("INSERT INTO pt VALUES (5, 1, '2026-01-01 00:00:00+00')", "row 1 has 3 values for 2 columns"),
    ("UPDATE pt SET p = '2026-01-01 00:00:00+00' WHERE k = 1", "cannot UPDATE column 'p'"),
    ("INSERT INTO pt VALUES (5, 1) RETURNING *", "RETURNING cannot return column 'p'"),
    ("UPDATE pt SET v = 2 RETURNING k, p", "RETURNING cannot return column 'p'"),
    ("CREATE TABLE bad (k int, p TIMESTAMPTZ AS PROCTIME(), PRIMARY KEY (k, p))", "cannot be part of the primary key"),
])
def test_a_proctime_column_is_not_written_by_statements(session, sql: str, words: str) -> None:
    session.sql("CREATE TABLE pt (k int PRIMARY KEY, v int, p TIMESTAMPTZ AS PROCTIME())")
    with pytest.raises(SparkwaveError, match=words):
        session.sql(sql)


def test_numeric_input_is_rounded_as_postgresql_rounds_it(session, postgres):
    """The same INSERTs into real PostgreSQL and into sparkwave give the same rows: quoted and
    unquoted numbers mixed in a column, more digits than the scale (half away from zero), spaces
    around a quoted number, and a computed value (Spark's path)."""
    tables = ["CREATE TABLE n (k int PRIMARY KEY, x numeric(10,2))", "CREATE TABLE i (k int PRIMARY KEY, x int)"]
    inserts = ["INSERT INTO n VALUES (1, 1.234), (2, '5'), (3, '1.235'), (4, -1.235), (5, ' 2.005 ')",
               "INSERT INTO n VALUES (6, 1.005), (7, 99999999.994)",
               "INSERT INTO n VALUES (8, 1.005 + 0), (9, '7.125')",
               "INSERT INTO n VALUES (10, 9.9995), (11, -99.995)",  # rounding makes a digit more: 10.00
               "INSERT INTO i VALUES (1, ' 5'), (2, 7), (3, '8 ')"]
    with psycopg.connect(postgres.create_database("sqlrest_numeric"), autocommit=True) as pg:
        for sql in [*(f"DROP TABLE IF EXISTS {t}" for t in "ni"), *tables, *inserts]:
            pg.execute(sql)
        want = {t: sorted(pg.execute(f"SELECT k, x FROM {t}").fetchall()) for t in "ni"}
    for sql in [*tables, *inserts]:
        session.sql(sql)
    session.flush()
    got = {t: sorted(rows_of(session.sql(f"SELECT k, x FROM {t}"))) for t in "ni"}
    assert got == want
    assert want["n"][:2] == [(1, Decimal("1.23")), (2, Decimal("5.00"))]
    with pytest.raises(SparkwaveError, match="does not fit column 'x'"):  # PostgreSQL: numeric field overflow
        session.sql("INSERT INTO n VALUES (12, 99999999.995)")


def test_show_materialized_views_says_which_are_append_only_over_the_api_and_the_protocol(session):
    s = session
    s.sql("CREATE TABLE ev (k int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY")
    s.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
    s.sql("CREATE MATERIALIZED VIEW closed AS SELECT window_start, count(*) AS n "
          "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE")
    s.sql("CREATE MATERIALIZED VIEW open AS SELECT window_start, count(*) AS n "
          "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start")
    s.sql("CREATE MATERIALIZED VIEW copied AS SELECT k, ts FROM ev WHERE k > 0")
    s.sql("CREATE MATERIALIZED VIEW keyed AS SELECT k, v FROM t")
    want = [("closed", True), ("copied", True), ("keyed", False), ("open", False)]
    shown = s.sql("SHOW MATERIALIZED VIEWS")
    assert shown.columns == ["name", "definition", "append_only"]
    assert sorted((r[0], r[2]) for r in rows_of(shown)) == want
    backend = SessionBackend(s)
    listener = Listener(backend, host="127.0.0.1", port=0).start()
    host, port = listener.address
    try:
        with psycopg.connect(f"host={host} port={port} user=tester dbname=dev", autocommit=True) as conn:
            cur = conn.execute("SHOW MATERIALIZED VIEWS")
            assert [d.name for d in cur.description] == ["name", "definition", "append_only"]
            assert sorted((r[0], r[2]) for r in cur.fetchall()) == want
    finally:
        backend.close()
        listener.stop(timeout=10)


def test_insert_returning_into_a_watermarked_table_is_refused_saying_what_to_write(session):
    """A row below the watermark is dropped by the epoch that applies it, and that watermark may
    still rise before then: the statement cannot know which rows are kept, so it returns none."""
    s = session
    s.sql("CREATE TABLE ev (k int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY")
    with pytest.raises(SparkwaveError, match="WATERMARK FOR ts decides only when the next epoch applies a row "
                                             "whether it is late.*INSERT, FLUSH, then SELECT the rows"):
        s.sql("INSERT INTO ev VALUES (1, '2026-01-01 00:00:10') RETURNING *")
    s.sql("INSERT INTO ev VALUES (1, '2026-01-01 00:00:10')")  # without RETURNING, as before
    s.flush()
    assert rows_of(s.sql("SELECT k FROM ev")) == [(1,)]


def test_percentile_fractions_given_as_expressions_or_null_equal_postgresql(session, postgres):
    """The fraction of percentile_cont/disc folded (`0.2 + 0.3`, `1 - 0.75`) or NULL (NULL out), in
    an MV and an ad-hoc query alike, equal to real PostgreSQL's answers after inserts, an update
    and a delete."""
    select = ("SELECT g, percentile_cont(0.2 + 0.3) WITHIN GROUP (ORDER BY a) AS c, "
              "percentile_disc(1 - 0.75) WITHIN GROUP (ORDER BY a DESC) AS d, "
              "percentile_cont(NULL) WITHIN GROUP (ORDER BY a) AS cn, "
              "percentile_disc(0.3 + NULL) WITHIN GROUP (ORDER BY a) AS dn, "
              # a cast decides the value: 0.6::int is 1, 3::numeric / 4 is 0.75 (not integer division)
              "percentile_disc(CAST(0.6 AS int)) WITHIN GROUP (ORDER BY a) AS di, "
              "percentile_cont(CAST(3 AS numeric) / 4) WITHIN GROUP (ORDER BY a) AS cq FROM t GROUP BY g")
    epochs = [["INSERT INTO t VALUES (1, 1, 10), (2, 1, 40), (3, 1, 25), (4, 2, 7), (5, 2, NULL), (6, 3, 1)"],
              ["UPDATE t SET a = 100 WHERE k = 3", "DELETE FROM t WHERE k = 6", "INSERT INTO t VALUES (7, 2, 8)"]]
    s = session
    s.sql("CREATE TABLE t (k int PRIMARY KEY, g int, a int)")
    s.sql(f"CREATE MATERIALIZED VIEW pct AS {select}")
    with psycopg.connect(postgres.create_database("sqlrest_percentile"), autocommit=True) as pg:
        pg.execute("DROP TABLE IF EXISTS t")
        pg.execute("CREATE TABLE t (k int PRIMARY KEY, g int, a int)")
        for epoch in epochs:
            for sql in epoch:
                pg.execute(sql)
                s.sql(sql)
            s.flush()
            want = sorted(pg.execute(select).fetchall())
            assert sorted(rows_of(s.sql("SELECT * FROM pct"))) == want
            assert sorted(rows_of(s.sql(select))) == want
            assert all(r[3] is None and r[4] is None for r in want)
