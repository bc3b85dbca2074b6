"""Crash with temporal filters: SIGKILL after an epoch's plan (and its NOW()) is persisted, mid
execute and before the catalog commit; the restart runs with a clock a day later, and the replayed
epoch uses the NOW() its plan recorded: every MV at every committed epoch equals its filter over the
table as of that epoch at that epoch's recorded NOW(); and every row an epoch wrote into a table's
`AS PROCTIME()` column holds that epoch's recorded NOW() (the replayed one included)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import sparkwave
from sparkwave.core import clock
from sparkwave.core.catalog import Catalog
from tests import temporal_crash_child as child
from tests.crash.test_crash import run_child
from tests.oracle import multiset, rows_of

POINTS = ["after_plan:5", "mid_execute:6", "before_catalog_commit:7"]


def expected(table: list[tuple], window: tuple[int | None, int | None], now_us: int) -> list[tuple]:
    now = datetime(1970, 1, 1) + timedelta(microseconds=now_us)
    after, upto = window
    return [(i, ts) for i, ts in table if ts is not None
            and (after is None or ts > now + timedelta(seconds=after))
            and (upto is None or ts <= now + timedelta(seconds=upto))]


def naive(rows: list[tuple]) -> list[tuple]:
    return [tuple(v.astimezone(UTC).replace(tzinfo=None) if isinstance(v, datetime) and v.tzinfo else v for v in r)
            for r in rows]


def check_proctime(s: sparkwave.Session, replayed: int) -> None:
    """At every committed epoch, `pt`'s rows that the epoch wrote (new or changed since the epoch
    before) hold its recorded NOW() in `p`, the others keep theirs, and the MV `ptimes` equals `pt`."""
    before: set[tuple] = set()
    wrote_replayed = False
    for epoch in s.catalog.committed_epochs(since=1):
        now = datetime(1970, 1, 1) + timedelta(microseconds=s.catalog.epoch_now(epoch))
        rows = set(naive(rows_of(s.table("pt", as_of=epoch))))
        written = rows - before
        assert all(p == now for _, _, p in written), f"pt at epoch {epoch}: {written} not all at NOW() {now}"
        assert multiset(naive(rows_of(s.table("ptimes", as_of=epoch)))) == multiset(rows), f"ptimes at {epoch}"
        wrote_replayed |= epoch == replayed and bool(written)
        before = rows
    assert wrote_replayed, "the replayed epoch wrote no row of pt: the check could not tell the clocks apart"


@pytest.mark.parametrize("crash_at", POINTS)
def test_a_replayed_epoch_uses_the_now_its_plan_recorded(spark, tmp_path, crash_at):
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module="tests.temporal_crash_child")
    catalog = Catalog(wh / "catalog.db", read_only=True)
    try:
        pending = catalog.uncommitted_plan()
    finally:
        catalog.close()
    assert pending is not None and "now" in pending.plan, f"no planned epoch to replay at {crash_at}"

    clock.use(lambda: child.T0_US + 86_400 * 1_000_000)  # a day later: a re-read clock would show
    try:
        with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
            s.flush()  # the replay, then an epoch at the new time
            assert s.catalog.epoch_now(pending.epoch) == pending.plan["now"], "the replay read the clock again"
            s.sql("WAIT")
            checked = 0
            for epoch in s.catalog.committed_epochs(since=1):
                now_us = s.catalog.epoch_now(epoch)
                table = naive(rows_of(s.table("ev", as_of=epoch)))
                for name, window in child.WINDOWS.items():
                    rel = s.catalog.relation(name)
                    if rel is None or rel.created_epoch > epoch or (name == "late" and s.catalog.job_of(name).creating):
                        continue
                    got = multiset(naive(rows_of(s.table(name, as_of=epoch))))
                    want = multiset(expected(table, window, now_us))
                    assert got == want, f"{name} at epoch {epoch}: extra {got - want}, missing {want - got}"
                    checked += 1
            assert checked, "no MV was checked"
            replayed = naive(rows_of(s.table("recent", as_of=pending.epoch)))
            assert replayed, "the replayed epoch's recent rows are empty: the check could not tell the clocks apart"
            check_proctime(s, pending.epoch)
    finally:
        clock.use(None)
