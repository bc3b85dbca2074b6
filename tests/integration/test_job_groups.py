"""Spark's job groups belong to the SparkContext, and a group cancelled with its future jobs (an
epoch a DROP abandons) stays cancelled for good. Two sessions on one Spark (two warehouses of one
process, or the tests of one worker) must not share a group: one's abandoned epoch would cancel
the other's epoch of the same attempt number, which then fails and is retried."""

from __future__ import annotations

import logging

import sparkwave
from tests.oracle import rows_of


def test_an_epoch_abandoned_by_one_session_cancels_nothing_of_another(spark, tmp_path, caplog) -> None:
    with sparkwave.connect(tmp_path / "a", spark=spark, barrier_interval_ms=3_600_000) as a, \
            sparkwave.connect(tmp_path / "b", spark=spark, barrier_interval_ms=3_600_000) as b:
        for s in (a, b):
            s.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
        for i in range(3):
            a.sql(f"INSERT INTO t VALUES ({i}, {i})")
            a.flush()
        a.loop.abandon()  # as a DROP does: the attempt's group is cancelled, with its future jobs
        a.loop.resume()
        caplog.set_level(logging.ERROR, logger="sparkwave.barrier")
        for i in range(8):
            b.sql(f"INSERT INTO t VALUES ({i}, {i * 10})")
            b.flush()
        assert not [r.getMessage() for r in caplog.records if "epoch failed" in r.getMessage()]
        assert sorted(rows_of(b.table("t"))) == [(i, i * 10) for i in range(8)]
        a.sql("INSERT INTO t VALUES (9, 9)")
        a.flush()  # the abandoning session goes on too
        assert sorted(rows_of(a.table("t"))) == [(0, 0), (1, 1), (2, 2), (9, 9)]
