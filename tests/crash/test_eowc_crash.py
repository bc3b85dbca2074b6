"""Crash with EMIT ON WINDOW CLOSE beyond GROUP BY: SIGKILL before and after an epoch's catalog commit
and mid-execute; restart, and every EOWC MV (window functions ordered by the watermarked column, a
group top-n, a SELECT, one backfilled mid-stream) equals the oracle's final rows, has emitted each
row once (its log holds inserts only), and keeps running after the restart."""

from __future__ import annotations

from datetime import timedelta

import pyarrow.parquet as pq
import pytest

import sparkwave
from sparkwave.core.chunk import Op
from tests import eowc_crash_child as child
from tests.crash.test_crash import run_child
from tests.oracle import Model, multiset, rows_of, values_sql
from tests.oracle_eowc import expected
from tests.oracle_watermark import WatermarkModel

POINTS = ["mid_execute:7", pytest.param("before_catalog_commit:6", marks=pytest.mark.chaos),
          pytest.param("after_catalog_commit:6", marks=pytest.mark.chaos)]  # `make chaos` runs these


def _model(batches: list[int]) -> WatermarkModel:
    m = Model()
    m.table("ev", "k INTEGER, v INTEGER, ts TIMESTAMP", ["k", "v", "ts"], [])
    model = WatermarkModel(m, "ev", 2, 5)
    for i in batches:
        model.insert_epoch(child.batch(i))
    return model


def _check(s, model: WatermarkModel) -> None:
    assert multiset(rows_of(s.table("ev"))) == multiset(model.model.rows("ev"))
    epoch = s.catalog.committed_epoch()
    for name in child.FIRST + child.LATE:
        assert multiset(rows_of(s.table(name))) == multiset(expected(model, name)), name
        ops = {op for f in s.catalog.log_files(name, 0, epoch) for op in pq.read_table(f.path)["_op"].to_pylist()}
        assert ops <= {int(Op.INSERT)}, name


@pytest.mark.parametrize("crash_at", POINTS)
def test_eowc_over_windows_survive_a_sigkill(spark, tmp_path, crash_at):
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module="tests.eowc_crash_child")
    acked = [int(x) for x in progress.read_text().split()] if progress.exists() else []
    assert len(acked) >= 3, "the crash came before the watermark moved: the point was not exercised"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.flush()  # the replay of the planned epoch, if any
        s.sql("WAIT")
        model = _model(acked)
        _check(s, model)
        rows = [(k, 1, child.T0 + timedelta(seconds=6 * child.BATCHES + 40, microseconds=k)) for k in range(3)]
        s.sql(f"INSERT INTO ev VALUES {values_sql(rows)}")
        s.flush()
        model.insert_epoch(rows)
        _check(s, model)
