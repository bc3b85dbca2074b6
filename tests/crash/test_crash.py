"""Crash: a child process running a pipeline is SIGKILLed at each named point; after a restart
every MV equals the oracle with no row lost or duplicated, and the datagen table holds exactly
the rows of its committed offsets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import sparkwave
from tests import crash_child
from tests.oracle import Model, multiset, rows_of

ROOT = Path(__file__).resolve().parents[2]

POINTS = [
    # after the plan is persisted (make chaos)
    pytest.param("after_plan:4", marks=pytest.mark.chaos),
    # during execution (make chaos)
    pytest.param("mid_execute:4", marks=pytest.mark.chaos),
    "mid_commit:5",             # some but not all of an epoch's log files gathered for its catalog commit
    # executed, before the catalog commit (make chaos; `make test` kills a Kafka
    # table's epoch at this point in test_kafka.py)
    pytest.param("before_catalog_commit:4", marks=pytest.mark.chaos),
    # compaction: base files written, Delta commit not yet made (make chaos)
    pytest.param("mid_compaction:2", marks=pytest.mark.chaos),
    "mid_compaction_after_delta:2",  # compaction: Delta commit made, catalog not yet
    "mid_backfill",             # during the blocking backfill of the late MV (the only blocking one)
]


def run_child(warehouse: Path, progress: Path, crash_at: str, module: str = "tests.crash_child") -> int:
    env = {**os.environ, "SPARKWAVE_CRASH_AT": crash_at}
    proc = subprocess.run([sys.executable, "-m", module, str(warehouse), str(progress)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, f"child was not killed at {crash_at}: rc={proc.returncode}\n" \
                                               f"{proc.stderr[-3000:]}"
    return proc.returncode


def model_after(acked: int) -> Model:
    model = Model()
    model.table("t", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
    for name, sql in crash_child.MVS.items():
        model.view(name, sql)
    for i in range(acked):
        model.apply_epoch(crash_child.batch(i))
    return model


@pytest.mark.parametrize("crash_at", POINTS)
def test_restart_after_sigkill_loses_and_duplicates_nothing(spark, tmp_path, crash_at):
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at)
    acked = len(progress.read_text().split()) if progress.exists() else 0
    assert acked >= 1, "the crash came before any batch was acknowledged: the point was not exercised"

    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        assert not (wh / "lost+found").exists(), "recovery found files the catalog did not record as sparkwave's"
        s.flush()  # recovery replayed the uncommitted plan; pending DML lands now
        model = model_after(acked)
        assert multiset(rows_of(s.table("t"))) == multiset(model.rows("t"))
        for name in crash_child.MVS:
            assert multiset(rows_of(s.table(name))) == multiset(model.rows(name)), name

        # datagen: exactly the rows of the committed offsets, none lost or doubled
        offset = s.catalog.source_offsets("g")["0"]
        ids = sorted(r[0] for r in rows_of(s.table("g").select("id")))
        assert ids == list(range(offset))
        g_rows = rows_of(s.table("g"))
        assert multiset(rows_of(s.table("mg"))) == multiset([r for r in g_rows if r[1] > 50])

        # every retained committed epoch is consistent: each MV equals its query on its inputs then
        for epoch in s.catalog.committed_epochs(since=1):
            check = Model()
            check.table("t", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
            t_rows = rows_of(s.table("t", as_of=epoch))
            if t_rows:
                check.db.executemany("INSERT INTO t VALUES (?, ?, ?)", t_rows)
            for name, sql in crash_child.MVS.items():
                check.view(name, sql)
                if s.catalog.relation(name).created_epoch <= epoch:
                    assert multiset(rows_of(s.table(name, as_of=epoch))) == multiset(check.rows(name)), (name, epoch)

        # the MV whose blocking backfill may have been killed: gone entirely, or complete
        late, late_sql = crash_child.LATE_MV
        if s.catalog.relation(late) is None:
            assert late not in os.listdir(wh / "tables"), "a killed backfill left its files behind"
            s.sql(f"CREATE MATERIALIZED VIEW {late} AS {late_sql}")
        model.view(late, late_sql)
        assert multiset(rows_of(s.table(late))) == multiset(model.rows(late))
