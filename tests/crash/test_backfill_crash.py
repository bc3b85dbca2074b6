"""Crash during a snapshot backfill: SIGKILL at each named point of the creating job, restart,
and the job resumes from its committed progress, re-reading at most the chunk that was in flight,
and ends equal to the oracle at every epoch it is readable at."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import sparkwave
from sparkwave.core.catalog import Catalog
from tests import backfill_crash_child as child
from tests.crash.test_crash import run_child
from tests.oracle import Model, multiset, rows_of

POINTS = [
    # reading the second chunk (make chaos)
    pytest.param("backfill_mid_chunk:2", marks=pytest.mark.chaos),
    # the third chunk's files written, its progress not committed (make chaos; `make test` kills a
    # stateful tree's chunk at the same point in test_dataflow_crash.py)
    pytest.param("backfill_after_chunk_rows:3", marks=pytest.mark.chaos),
    "backfill_between_phases",      # the base as of S committed to Delta, the phase switch not in the catalog
    # a log-store checkpoint in Delta, not in the catalog (make chaos; as above)
    pytest.param("backfill_mid_log_store", marks=pytest.mark.chaos),
    "backfill_mid_merge",           # holding the main graph between two epochs, before the merge commits
]


def acked_statements(progress) -> dict[int, int]:
    """batch -> how many of its statements were acknowledged."""
    acked: dict[int, int] = {}
    for line in (progress.read_text().splitlines() if progress.exists() else []):
        i, j = map(int, line.split())
        acked[i] = max(acked.get(i, 0), j + 1)
    return acked


def in_flight(acked: dict[int, int], batch: Callable[[int], list[tuple]] = child.batch,
              batches: int = child.BATCHES) -> tuple[int, int] | None:
    """The statement after the last acknowledged one: the SIGKILL comes from the job's thread, so it
    may land after that statement ran and before the child wrote its acknowledgement."""
    if not acked:
        return 0, 0
    i = max(acked)
    return (i, acked[i]) if acked[i] < len(batch(i)) else (i + 1, 0) if i + 1 < batches else None


def model_of(acked: dict[int, int]) -> Model:
    model = Model()
    model.table("t", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
    model.apply_epoch([("insert", "t", child.SEED)])
    for name, sql in child.MVS.items():
        model.view(name, sql)
    model.view(*child.JOB)
    for i, n in sorted(acked.items()):
        model.apply_epoch(child.batch(i)[:n])
    return model


@pytest.mark.parametrize("crash_at", POINTS)
def test_backfill_resumes_after_sigkill_and_equals_the_oracle(spark, tmp_path, crash_at):
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module="tests.backfill_crash_child")
    acked = acked_statements(progress)
    name = child.JOB[0]
    # Read before the restart: once started, the resumed job may merge before any check could look.
    catalog = Catalog(wh / "catalog.db", read_only=True)
    try:
        assert catalog.job_of(name).creating, "the crash came after the job finished: the point was not exercised"
    finally:
        catalog.close()

    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.flush()  # pending DML lands
        s.wait()  # the job resumes from its committed progress and merges
        model = model_of(acked)
        table = multiset(rows_of(s.table("t")))
        if table != multiset(model.rows("t")) and (nxt := in_flight(acked)) is not None:
            model = model_of({**acked, nxt[0]: nxt[1] + 1})  # it ran; its acknowledgement did not
        assert table == multiset(model.rows("t"))
        for mv in [*child.MVS, name]:
            assert multiset(rows_of(s.table(mv))) == multiset(model.rows(mv)), mv

        job = s.catalog.job_of(name)
        chunks = s.catalog.job_chunks(job.id)
        assert chunks and all(c.state == "done" for c in chunks)
        assert [(c.lo, c.hi) for c in chunks] == sorted((c.lo, c.hi) for c in chunks)
        assert chunks[-1].hi == 256 and all(a.hi == b.lo for a, b in zip(chunks, chunks[1:], strict=False))
        reread = sum(c.attempts - 1 for c in chunks)
        assert reread <= 1, f"re-read {reread} chunks; only the one in flight may be re-read: {chunks}"
        assert sum(map(sum, (job.vnode_rows or {}).values())) == job.rows_total == job.rows_done
        info = next(j for j in s.jobs() if j.name == name)
        done = [(u.relation, u.rows_done, u.rows_total) for u in info.upstreams]
        assert done == [("t", job.rows_total, job.rows_total)]
        assert [(c.lo, c.hi, c.rows) for c in info.chunks] == [(c.lo, c.hi, c.rows) for c in chunks]

        # every committed epoch the MV is readable at equals its query on t as of then
        for epoch in s.catalog.committed_epochs(since=s.catalog.relation(name).created_epoch):
            check = Model()
            check.table("t", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
            t_rows = rows_of(s.table("t", as_of=epoch))
            if t_rows:
                check.db.executemany("INSERT INTO t VALUES (?, ?, ?)", t_rows)
            check.view(*child.JOB)
            assert multiset(rows_of(s.table(name, as_of=epoch))) == multiset(check.rows(name)), epoch
