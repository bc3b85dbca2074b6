"""Parity of the temporal filter's three evaluations (`stream/temporal_filter.py`), as
`test_parity.py` proves the other stateful operators': the same epochs (the same changes, the same
recorded NOW() from a test clock) through a warehouse whose steps run in Arrow on the driver and
one whose steps run as Spark frames (`big_epoch_rows = 0`), then every MV built again from the
snapshots (a blocking backfill: `batch` at the last epoch's NOW()). Every MV and every state table
of the three must hold the same rows."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import sparkwave
from sparkwave.core import clock
from tests.integration.test_parity import tables
from tests.oracle import values_sql

T0 = datetime(2026, 1, 1)
T0_US = int((T0 - datetime(1970, 1, 1)).total_seconds()) * 1_000_000
MVS = {
    "f_lower": "SELECT id, k, ts FROM l WHERE ts > NOW() - INTERVAL '20' SECOND",
    "f_delay": "SELECT id, v FROM l WHERE v >= 0 AND ts <= NOW() + INTERVAL '2' SECOND",
    "f_both": "SELECT id FROM l WHERE ts >= NOW() - INTERVAL '30' SECOND AND ts < NOW()",
    "f_agg": "SELECT k, count(*) AS n, sum(v) AS s FROM e WHERE ts > NOW() - INTERVAL '25' SECOND GROUP BY k",
}


def batches(seed: int, n: int) -> list[tuple[int, list[str]]]:
    """(seconds the clock moves, statements) per epoch: rows around NOW(), updates moving them in time,
    deletes, and epochs with no statement at all."""
    rnd = random.Random(seed)
    out, now = [], 0
    for _ in range(n):
        step = rnd.choice([0, 3, 8, 15])
        now += step
        at = T0 + timedelta(seconds=now)
        sql = []
        if rnd.random() < 0.7:
            rows = [(rnd.randint(0, 12), rnd.choice([None, 0, 1, 2]), rnd.randint(-2, 9),
                     rnd.choice([None, at + timedelta(seconds=rnd.randint(-40, 20))]))
                    for _ in range(rnd.randint(1, 6))]
            sql.append(f"INSERT INTO l VALUES {values_sql(rows)}")
            sql.append(f"INSERT INTO e VALUES {values_sql([(k, v, ts) for _, k, v, ts in rows])}")
        if rnd.random() < 0.4:
            move = rnd.randint(-9, 9)
            sql.append(f"UPDATE l SET ts = ts + INTERVAL '{move}' SECOND WHERE id % 3 = {rnd.randrange(3)}")
        if rnd.random() < 0.3:
            sql.append(f"DELETE FROM l WHERE id % 4 = {rnd.randrange(4)}")
        out.append((step, sql))
    return out


def evaluate(spark, wh: Path, epochs: list[tuple[int, list[str]]], *, big: bool, built: bool):  # type: ignore[no-untyped-def]
    now = [T0_US]
    clock.use(lambda: now[0])
    try:
        with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
            s.sql(f"SET big_epoch_rows = {0 if big else 1_000_000}")
            s.sql("CREATE TABLE l (id int, k int, v int, ts timestamptz, PRIMARY KEY (id)); "
                  "CREATE TABLE e (k int, v int, ts timestamptz) APPEND ONLY")
            for name, sql in MVS.items():
                s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            for step, batch in epochs:
                now[0] += step * 1_000_000
                for sql in batch:
                    s.sql(sql)
                s.flush()
            stepped = tables(s, set(MVS))
            if not built:
                return stepped, {}
            for name, sql in MVS.items():
                s.sql(f"CREATE MATERIALIZED VIEW {name}_built WITH (backfill_strategy = 'blocking') AS {sql}")
            return stepped, tables(s, set(MVS), "_built")
    finally:
        clock.use(None)


def test_temporal_filters_agree_per_epoch_per_big_epoch_and_from_snapshots(spark, tmp_path):
    epochs = batches(48, 8)
    on_driver, _ = evaluate(spark, tmp_path / "a", epochs, big=False, built=False)
    on_executors, built = evaluate(spark, tmp_path / "b", epochs, big=True, built=True)
    assert {n for n in on_driver if "." in n} >= {f"{m}.t2" for m in MVS if m != "f_agg"}, sorted(on_driver)
    assert any(on_driver[n] for n in on_driver if "." in n), "every state is empty: the check tells nothing"
    for path, got in (("per big epoch", on_executors), ("from snapshots", built)):
        assert got.keys() == on_driver.keys(), f"{path}: other tables {sorted(got)} than {sorted(on_driver)}"
        for name, rows in on_driver.items():
            assert got[name] == rows, f"{name} {path} differs from per epoch in Arrow: extra {got[name] - rows}, " \
                                      f"missing {rows - got[name]}"
