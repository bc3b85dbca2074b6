"""Crash with watermarks: SIGKILL before and after an epoch's catalog commit (the watermark is in
the epoch's working state, then in the catalog) and mid-execute; restart, and the table holds exactly
the rows on time, the watermark and the late-row count are the oracle's (`tests/oracle_watermark.py`),
the EOWC MVs (one backfilled mid-stream) equal the closed windows, their buffers hold exactly the open
ones, and a row below the watermark from before the crash is still dropped after it."""

from __future__ import annotations

from datetime import timedelta

import pytest

import sparkwave
from tests import watermark_crash_child as child
from tests.crash.test_crash import run_child
from tests.oracle import Model, duckdb_sql, multiset, rows_of, values_sql
from tests.oracle_watermark import WatermarkModel, micros, tumble_start

POINTS = ["before_catalog_commit:6", "after_catalog_commit:6", "mid_execute:7"]


def _model(batches: list[int]) -> WatermarkModel:
    m = Model()
    m.table("ev", "k INTEGER, v INTEGER, ts TIMESTAMP", ["k", "v", "ts"], [])
    model = WatermarkModel(m, "ev", 2, 5)
    for i in batches:
        model.insert_epoch(child.batch(i))
    return model


def _check(s, model: WatermarkModel) -> None:
    assert multiset(rows_of(s.table("ev"))) == multiset(model.model.rows("ev"))
    assert s.catalog.watermark("ev", s.catalog.committed_epoch()) == model.watermark
    assert s.catalog.late_rows().get("ev", 0) == model.late
    windows = model.model.db.execute(duckdb_sql(child.TUMBLE, model.model.db)).fetchall()
    limit = tumble_start(model.watermark, 10)
    closed = [r for r in windows if micros(r[0]) < limit]
    assert multiset(rows_of(s.table("agg"))) == multiset(windows)
    epoch = s.catalog.committed_epoch()
    for name in ("eo", "eo_late"):
        assert multiset(rows_of(s.table(name))) == multiset(closed), name
        (buffer,) = [r for r in s.catalog.relations(internal=True) if r.definition.get("owner") == name
                     and r.name.split(".")[1].startswith("e")]
        assert s.rt.snapshot(buffer, epoch).count() == len(windows) - len(closed), name


@pytest.mark.parametrize("crash_at", POINTS)
def test_the_watermark_and_eowc_buffers_survive_a_sigkill(spark, tmp_path, crash_at):
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module="tests.watermark_crash_child")
    acked = [int(x) for x in progress.read_text().split()] if progress.exists() else []
    assert len(acked) >= 3, "the crash came before the watermark moved: the point was not exercised"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.flush()  # the replay of the planned epoch, if any
        s.sql("WAIT")
        model = _model(acked)
        assert model.late > 0, "no late row in the acknowledged batches: dropping was not exercised"
        _check(s, model)
        # The watermark from before the crash still drops a row below it, and counts it.
        late_ts = child.T0 + timedelta(microseconds=model.watermark - micros(child.T0) - 1)
        rows = [(1, 1, late_ts), (2, 2, late_ts + timedelta(seconds=30))]
        s.sql(f"INSERT INTO ev VALUES {values_sql(rows)}")
        s.flush()
        model.insert_epoch(rows)
        _check(s, model)
