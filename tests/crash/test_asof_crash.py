"""Crash with ASOF joins (`stream/asof_join.py`): SIGKILL in the main graph's steady state (join
state half-committed) and mid-way through the chunked snapshot backfill of two ASOF joins, restart,
and every MV equals the oracle (RisingWave's ranking in plain SQL) at the end and at every
committed epoch it is readable at."""

from __future__ import annotations

import pytest

import sparkwave
from sparkwave.core.catalog import Catalog
from tests import asof_crash_child as child
from tests.crash.test_backfill_crash import acked_statements, in_flight
from tests.crash.test_crash import run_child
from tests.oracle import Model, multiset, rows_of

POINTS = [  # the backfill points are the same code for every operator: `make chaos` runs them here
    "mid_commit:6",                 # steady state: some of an epoch's MV and state-table files gathered for its commit
    pytest.param("backfill_after_chunk_rows:3", marks=pytest.mark.chaos),  # a chunk's state files written, progress
    # not committed
    pytest.param("backfill_mid_log_store:2", marks=pytest.mark.chaos),  # a log-store checkpoint's logs in Delta, not
    # in the catalog
]


def _model() -> Model:
    m = Model()
    for t in child.TABLES:
        m.table(*t)
    return m


def _model_of(acked: dict[int, int]) -> Model:
    want = _model()
    want.apply_epoch([("insert", "f", child.F_SEED), ("insert", "dim", child.DIM_SEED)])
    for i, n in sorted(acked.items()):
        want.apply_epoch(child.batch(i)[:n])
    for name in child.MVS | child.JOBS:
        want.view(name, child.ORACLE[name])
    return want


@pytest.mark.parametrize("crash_at", POINTS)
def test_asof_join_mvs_recover_after_sigkill_and_equal_the_oracle(spark, tmp_path, crash_at):
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module="tests.asof_crash_child")
    acked = acked_statements(progress)
    assert acked, "the crash came before any batch was acknowledged: the point was not exercised"
    if crash_at.startswith("backfill"):
        catalog = Catalog(wh / "catalog.db", read_only=True)
        try:
            assert any(catalog.job_of(n).creating for n in child.JOBS), "no job was still creating"
        finally:
            catalog.close()

    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        for name in child.JOBS:  # the crash may have come before the child resumed its paused jobs
            if s.catalog.job_of(name).creating:
                s.sql(f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = DEFAULT")
        s.flush()
        s.wait()
        views = child.MVS | child.JOBS
        want = _model_of(acked)
        tables = {t: multiset(rows_of(s.table(t))) for t in ("f", "dim")}
        if crash_at.startswith("backfill") and any(tables[t] != multiset(want.rows(t)) for t in tables) and (
                nxt := in_flight(acked, child.batch, child.BATCHES)) is not None:
            want = _model_of({**acked, nxt[0]: nxt[1] + 1})  # it ran; its acknowledgement did not
        for t in ("f", "dim"):
            assert tables[t] == multiset(want.rows(t)), t
        for name in views:
            assert multiset(rows_of(s.table(name))) == multiset(want.rows(name)), name

        for epoch in s.catalog.committed_epochs(since=1):
            then = _model()
            for t, *_ in child.TABLES:
                rows = rows_of(s.table(t, as_of=epoch))
                if rows:
                    then.db.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(rows[0]))})", rows)
            for name in views:
                if s.catalog.relation(name).created_epoch <= epoch:
                    then.view(name, child.ORACLE[name])
                    assert multiset(rows_of(s.table(name, as_of=epoch))) == multiset(then.rows(name)), (name, epoch)
