"""Crash around the Delta follower: a child running a pipeline is SIGKILLed between an epoch's
catalog commit and its Delta commits, in the middle of the follower's round (some relations' Delta
versions made, their catalog records not), and in the middle of retention (the catalog forgot log
files the Delta log still holds; or the Delta log dropped them and the files are still on disk).
After a restart every MV equals the oracle, and every relation's Delta log holds exactly the
catalog's log files: none missing, none added twice, no file removed that was never added."""

from __future__ import annotations

from collections import Counter

import pytest

import sparkwave
from tests import crash_child, delta_log_crash_child
from tests.crash.test_crash import model_after, run_child
from tests.delta_log_util import assert_delta_follows_catalog
from tests.oracle import Model, multiset, rows_of

POINTS = [
    "after_catalog_commit:4",       # the epoch is visible; no Delta log has it yet
    "mid_delta_sync:3",             # a follower's round: two relations' Delta versions made, the third's not recorded
    "retention_after_catalog:2",    # the catalog forgot the files; the Delta log still holds them
    "retention_after_delta:2",      # the Delta log dropped them; the files are still on disk
]


def model_with(acked: int, t_rows: Counter) -> Model:
    """The oracle after the acknowledged batches and the prefix of the next one whose table `t`
    reads `t_rows`: the follower's thread may be killed while the child stages the next batch's
    statements (staged, so committed by the restart's flush, but not acknowledged)."""
    following = crash_child.batch(acked) if acked < delta_log_crash_child.BATCHES else []
    for j in range(len(following) + 1):
        model = model_after(acked)
        if j:
            model.apply_epoch(following[:j])
        if multiset(model.rows("t")) == t_rows:
            return model
    raise AssertionError(f"t after {acked} acknowledged batches matches no prefix of the next: {t_rows}")


@pytest.mark.parametrize("crash_at", POINTS)
def test_delta_logs_hold_exactly_the_catalogs_files_after_a_crash(spark, tmp_path, crash_at):
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module="tests.delta_log_crash_child")
    acked = len(progress.read_text().split()) if progress.exists() else 0
    assert acked >= 1, "the crash came before any batch was acknowledged: the point was not exercised"

    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        assert not (wh / "lost+found").exists(), "recovery found files the catalog did not record as sparkwave's"
        s.flush()
        model = model_with(acked, multiset(rows_of(s.table("t"))))
        for name in ("m1", "m2"):
            assert multiset(rows_of(s.table(name))) == multiset(model.rows(name)), name
        offset = s.catalog.source_offsets("g")["0"]
        assert sorted(r[0] for r in rows_of(s.table("g").select("id"))) == list(range(offset))
        assert multiset(rows_of(s.table("mg"))) == multiset([r for r in rows_of(s.table("g")) if r[1] > 50])
        s.loop.committer.delta.drain()
        assert_delta_follows_catalog(s.catalog, s.warehouse)
        s.compact()  # retention again, over what the crash left
        s.sql("INSERT INTO t VALUES (100, 100, 'z')")
        s.flush()
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:  # close() drained the follower
        assert_delta_follows_catalog(s.catalog, s.warehouse)
