"""Small changes without Spark jobs (`core/local_frames.py`): a frame over a local relation is
collected by the optimizer with Spark's own expressions, and a small epoch of generated sources and
MVs over them runs no Spark job at all and stays exact."""

from __future__ import annotations

import os
import time
from datetime import UTC, date, datetime
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

import sparkwave
from sparkwave.core import policy
from sparkwave.core.local_frames import local_frame, offsets, to_arrow
from tests.oracle import multiset, rows_of


def _jobs(spark) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


@pytest.fixture
def los_angeles():
    """The Python process's local time zone with a daylight saving fold (PySpark hands TIMESTAMPs
    back in local time)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "America/Los_Angeles"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_a_local_frame_is_collected_without_a_job_as_arrow_transfer_would(spark, los_angeles):
    fold = datetime(2025, 11, 2, 8, 30, tzinfo=UTC)  # 01:30 PDT; 09:30 UTC is 01:30 PST
    rows = pa.table({
        "i": pa.array([1, None, -7, 2**40], pa.int64()),
        "s": pa.array(["é", None, "", "x y"]),
        "d": pa.array([Decimal("1.25"), None, Decimal("-0.01"), Decimal("12345678.90")], pa.decimal128(10, 2)),
        "f": pa.array([0.5, None, float("nan"), -0.0]),
        "b": pa.array([True, None, False, True]),
        "day": pa.array([date(2024, 2, 29), None, date(1970, 1, 1), date(1969, 12, 31)]),
        "ts": pa.array([fold, fold.replace(hour=9), None, datetime(1969, 12, 31, 23, 59, 59, 999999,
                                                                   tzinfo=UTC)], pa.timestamp("us", "UTC")),
    })
    ddl = "i bigint, s string, d decimal(10,2), f double, b boolean, day date, ts timestamp"
    frame = local_frame(spark, rows, ddl).selectExpr(
        "i * 2 AS i2", "upper(s) AS s", "d * 3 AS d3", "f", "NOT b AS nb", "date_add(day, 1) AS day",
        "ts + INTERVAL 1 MINUTE AS ts").where("i IS NULL OR i <> -7")
    before = _jobs(spark)
    got = to_arrow(frame)
    assert _jobs(spark) == before, "a projection and filter of a local relation ran a Spark job"
    assert got.equals(frame.toArrow())
    assert got.num_rows == 3 and got["ts"][0].as_py() == fold.replace(minute=31)
    # The first instant is in year 0 in Los Angeles, which Python's datetime cannot hold: Arrow's way.
    edge = pa.table({"ts": pa.array([datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC)],
                                    pa.timestamp("us", "UTC"))})
    frame = local_frame(spark, edge, "ts timestamp")
    assert to_arrow(frame).equals(edge)


def test_a_frame_past_the_local_size_goes_to_the_executors(spark):
    frame = offsets(spark, 0, policy.LOCAL_ROWS + 1).selectExpr("id * 2 AS x")
    before = _jobs(spark)
    got = to_arrow(frame)
    assert _jobs(spark) != before
    assert got.num_rows == policy.LOCAL_ROWS + 1 and got["x"][-1].as_py() == 2 * policy.LOCAL_ROWS


MVS = {
    "evens": "SELECT id, v * 2 + 1 AS v2 FROM a WHERE v % 2 = 0",
    "per_v": "SELECT v, count(*) AS n, sum(id) * 2 AS s2 FROM a GROUP BY v",
    "joined": "SELECT a.id, a.v, b.w FROM a JOIN b ON a.v = b.id",
}


def test_a_small_epoch_runs_no_spark_job_and_stays_exact(spark, tmp_path):
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        s.loop.stop()
        for t, col in (("a", "v"), ("b", "w")):
            s.sql(f"CREATE TABLE {t} (id int, {col} int, PRIMARY KEY (id)) WITH (connector = 'datagen', "
                  f"fields.id.kind = 'sequence', fields.id.start = '0', fields.{col}.min = '0', "
                  f"fields.{col}.max = '9', datagen.rows.per.second = '500')")
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        s.loop.run_epoch()  # the first epoch after CREATE: the MVs' first changes
        before = _jobs(spark)
        reports = [s.loop.run_epoch() for _ in range(3)]
        assert _jobs(spark) == before, "a small epoch ran Spark jobs"
        assert all(r is not None and r.rows_in > 0 for r in reports)
        epoch = reports[-1].epoch
        db = duckdb.connect()
        for t in ("a", "b"):
            db.register(t, s.table(t, as_of=epoch).toArrow())
        for name, sql in MVS.items():
            want = multiset(db.execute(sql).fetchall())
            assert want, f"{name} is empty: the test checks nothing"
            assert multiset(rows_of(s.table(name, as_of=epoch))) == want, f"MV {name} differs from DuckDB"


DML = [
    "UPDATE {t} SET v = v * 3 + 1, s = upper(s), d = d / 4 WHERE k % 7 = 2",
    "UPDATE {t} SET ts = ts + INTERVAL '1 hour', s = NULL WHERE v > 20 AND s IS NOT NULL",
    "DELETE FROM {t} WHERE k BETWEEN 40 AND 90 OR d < 0",
    "UPDATE {t} SET d = -d WHERE k IN (1, 2, 3, 500)",
    "DELETE FROM {t} WHERE k = 5 OR v = 7",
]


def test_a_small_tables_update_and_delete_run_no_spark_job_and_equal_sparks(session, monkeypatch):
    """UPDATE and DELETE by predicate on a small table are read and computed on the driver and staged
    from Arrow, with no Spark job: they leave the table as the same statements read and written by
    Spark leave its twin, and as DuckDB says; a value that does not fit fails both alike, with nothing
    staged."""
    from sparkwave.core.errors import DataError

    s = session
    rows = [(k, k % 31, f"s{k % 5}", f"{k * 1.25 - 30:.2f}", f"2026-11-{1 + k % 28:02d} 10:00:00+00")
            for k in range(300)]
    values = ", ".join(f"({k}, {v}, '{x}', {d}, TIMESTAMPTZ '{ts}')" for k, v, x, d, ts in rows)
    db = duckdb.connect()
    for t in ("t", "twin"):
        s.sql(f"CREATE TABLE {t} (k int, v int, s text, d decimal(10, 2), ts timestamptz, PRIMARY KEY (k)); "
              f"INSERT INTO {t} VALUES {values}")
        db.execute(f"SET TimeZone = 'UTC'; CREATE TABLE {t} (k INTEGER PRIMARY KEY, v INTEGER, s VARCHAR, "
                   f"d DECIMAL(10, 2), ts TIMESTAMPTZ); INSERT INTO {t} VALUES {values.replace('TIMESTAMPTZ ', '')}")
    s.flush()
    for st in DML:
        before = _jobs(s.spark)
        s.sql(st.format(t="t"))
        assert _jobs(s.spark) == before, f"{st} ran a Spark job"
        with monkeypatch.context() as m:
            m.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)
            before = _jobs(s.spark)
            s.sql(st.format(t="twin"))
            assert _jobs(s.spark) != before, "the twin's statement did not go through Spark"
        db.execute(st.format(t="t").replace("INTERVAL '1 hour'", "INTERVAL 1 HOUR"))
        s.flush()
    got = multiset(rows_of(s.table("t")))
    assert got == multiset(rows_of(s.table("twin")))
    assert got == multiset(db.execute("SELECT * FROM t").fetchall())
    assert len(got) < 300 and any(r[2] is None for r in got)
    for t in ("t", "twin"):
        with monkeypatch.context() as m:
            if t == "twin":
                m.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)
            with pytest.raises(DataError, match=r"value .* does not fit column 'v'"):
                s.sql(f"UPDATE {t} SET v = v + 3000000000 WHERE k = 299")
    s.flush()
    assert multiset(rows_of(s.table("t"))) == got == multiset(rows_of(s.table("twin")))


def test_a_small_keyless_tables_update_and_delete_on_the_driver_equal_sparks(session, monkeypatch, los_angeles):
    """The same for a table without a primary key (its rows keyed by a hidden row id), with dates,
    timestamps and reals, read back in a local time zone with a daylight saving fold."""

    s = session
    values = ", ".join(f"({k % 4}, {k * 0.5}, DATE '2025-11-{1 + k % 9:02d}', "
                       f"TIMESTAMP '2025-11-02 01:{k % 60:02d}:00')" for k in range(120))
    for t in ("n", "ntwin"):
        s.sql(f"CREATE TABLE {t} (a int, r real, day date, at timestamp); INSERT INTO {t} VALUES {values}")
    s.flush()
    for st in ("UPDATE {t} SET r = r * 2, day = day + 1 WHERE a = 1", "DELETE FROM {t} WHERE day > DATE '2025-11-07'",
               "UPDATE {t} SET at = at + INTERVAL '30 minutes', a = a + 10 WHERE r < 20"):
        before = _jobs(s.spark)
        s.sql(st.format(t="n"))
        assert _jobs(s.spark) == before, f"{st} ran a Spark job"
        with monkeypatch.context() as m:
            m.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)
            s.sql(st.format(t="ntwin"))
        s.flush()
    got = multiset(rows_of(s.table("n")))
    assert got == multiset(rows_of(s.table("ntwin")))
    assert 0 < len(got) < 120 and any(r[0] >= 10 for r in got)
