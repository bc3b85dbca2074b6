"""Crash with aggregates and joins: SIGKILL in the main graph's steady state (operator state
half-committed) and during the snapshot backfill of an aggregate and a join, restart, and every MV
equals the oracle at the end and at every committed epoch it is readable at."""

from __future__ import annotations

from types import ModuleType

import pytest

import sparkwave
from sparkwave.core.catalog import Catalog
from tests import dataflow_crash_child as child
from tests.crash.test_backfill_crash import acked_statements, in_flight
from tests.crash.test_crash import run_child
from tests.oracle import Model, multiset, rows_of

POINTS = [
    "mid_commit:6",                 # steady state: some of an epoch's MV and state-table files gathered for its commit
    # steady state: the epoch executed, its catalog commit not made (make chaos)
    pytest.param("before_catalog_commit:4", marks=pytest.mark.chaos),
    "backfill_after_chunk_rows:3",  # mid-table: a chunk's state and partial files written, progress not committed
    # the merge chunk's files written, progress not committed (make chaos)
    pytest.param("backfill_after_merge_chunk", marks=pytest.mark.chaos),
    # bases as of S committed to Delta, the phase switch not in the catalog (make chaos)
    pytest.param("backfill_between_phases", marks=pytest.mark.chaos),
    "backfill_mid_log_store:2",     # a log-store checkpoint's MV and state logs in Delta, not in the catalog
]


def model(mod: ModuleType = child) -> Model:
    m = Model()
    for t in mod.TABLES:
        m.table(*t)
    return m


def model_of(acked: dict[int, int], mod: ModuleType = child, oracle: dict[str, str] | None = None) -> Model:
    """The oracle after the seed and the acknowledged statements, with every MV (each as its SQL, or
    as `oracle` gives it where DuckDB would answer the MV's own SQL otherwise)."""
    want = model(mod)
    want.apply_epoch([("insert", "f", mod.F_SEED), ("insert", "dim", mod.DIM_SEED)])
    for i, n in sorted(acked.items()):
        want.apply_epoch(mod.batch(i)[:n])
    for name, sql in (mod.MVS | mod.JOBS).items():
        want.view(name, (oracle or {}).get(name, sql))
    return want


@pytest.mark.parametrize("crash_at", POINTS)
def test_dataflow_mvs_recover_after_sigkill_and_equal_the_oracle(spark, tmp_path, crash_at):
    recovers_and_equals_the_oracle(spark, tmp_path, crash_at, child)


def recovers_and_equals_the_oracle(spark, tmp_path, crash_at: str, mod: ModuleType,
                                   oracle: dict[str, str] | None = None) -> None:
    """Run `mod` as a child killed at `crash_at`, restart, and check every table and MV against the
    oracle at the end and at every committed epoch it is readable at."""
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module=mod.__name__)
    acked = acked_statements(progress)
    assert acked, "the crash came before any batch was acknowledged: the point was not exercised"

    if crash_at.startswith("backfill"):  # read before the restart, which may finish the jobs at once
        catalog = Catalog(wh / "catalog.db", read_only=True)
        try:
            assert any(catalog.job_of(n).creating for n in mod.JOBS), "no job was still creating"
        finally:
            catalog.close()

    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        for name in mod.JOBS:  # the crash may have come before the child resumed its paused jobs
            if s.catalog.job_of(name).creating:
                s.sql(f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = DEFAULT")
        s.flush()  # pending DML lands
        s.wait()
        views = mod.MVS | mod.JOBS
        want = model_of(acked, mod, oracle)
        tables = {t: multiset(rows_of(s.table(t))) for t in ("f", "dim")}
        if crash_at.startswith("backfill") and any(tables[t] != multiset(want.rows(t)) for t in tables) and (
                nxt := in_flight(acked, mod.batch, mod.BATCHES)) is not None:
            want = model_of({**acked, nxt[0]: nxt[1] + 1}, mod, oracle)  # it ran; its acknowledgement did not
        for t in ("f", "dim"):
            assert tables[t] == multiset(want.rows(t)), t
        for name in views:
            assert multiset(rows_of(s.table(name))) == multiset(want.rows(name)), name

        for epoch in s.catalog.committed_epochs(since=1):
            then = model(mod)
            for t, *_ in mod.TABLES:
                rows = rows_of(s.table(t, as_of=epoch))
                if rows:
                    then.db.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(rows[0]))})", rows)
            for name, sql in views.items():
                if s.catalog.relation(name).created_epoch <= epoch:
                    then.view(name, (oracle or {}).get(name, sql))
                    assert multiset(rows_of(s.table(name, as_of=epoch))) == multiset(then.rows(name)), (name, epoch)
