"""Crash during a small CREATE (issue 47): its snapshot built on the driver in one chunk, its log
consumed in band. SIGKILL at each named point of the creating job, restart: the job resumes from
its committed progress and the MV ends equal to the oracle at every epoch it is readable at."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import sparkwave
from sparkwave.core.catalog import Catalog
from tests import small_create_crash_child as child
from tests.crash.test_backfill_crash import acked_statements, in_flight
from tests.crash.test_crash import run_child
from tests.oracle import Model, multiset, rows_of

CASES = [
    ("stateless", "backfill_after_chunk_rows:1"),  # the driver-built files written, the chunk not recorded done
    ("stateless", "backfill_mid_log_store"),  # a log-store checkpoint in Delta, not in the catalog
    ("stateless", "backfill_mid_merge"),  # holding the main graph between two epochs, before the merge commits
    ("stateful", "backfill_after_chunk_rows:1"),
    ("stateful", "backfill_mid_merge"),
]


def model_of(acked: dict[int, int], name: str, sql: str) -> Model:
    model = Model()
    model.table("t", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
    model.apply_epoch([("insert", "t", child.SEED)])
    model.view(name, sql)
    for i, n in sorted(acked.items()):
        model.apply_epoch(child.batch(i)[:n])
    return model


@pytest.mark.parametrize(("tree", "crash_at"), CASES)
def test_a_small_create_resumes_after_sigkill_and_equals_the_oracle(spark, tmp_path, monkeypatch, tree, crash_at):
    monkeypatch.setenv("SPARKWAVE_SMALL_JOB", tree)
    name, sql = child.job()
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module="tests.small_create_crash_child")
    acked = acked_statements(progress)
    catalog = Catalog(wh / "catalog.db", read_only=True)
    try:
        assert catalog.job_of(name).creating, "the crash came after the job finished: the point was not exercised"
    finally:
        catalog.close()

    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.flush()  # pending DML lands
        s.wait()  # the job resumes from its committed progress and merges
        model = model_of(acked, name, sql)
        table = multiset(rows_of(s.table("t")))
        nxt = in_flight(acked, child.batch, child.BATCHES)
        if table != multiset(model.rows("t")) and nxt is not None:
            model = model_of({**acked, nxt[0]: nxt[1] + 1}, name, sql)  # it ran; its acknowledgement did not
        assert table == multiset(model.rows("t"))
        assert multiset(rows_of(s.table(name))) == multiset(model.rows(name))

        job = s.catalog.job_of(name)
        chunks = s.catalog.job_chunks(job.id)
        assert [(c.lo, c.hi, c.state) for c in chunks] == [(0, 256, "done")], chunks  # one chunk
        base = s.catalog.base_at(name, job.snapshot_epoch)
        assert base is not None and {pq.ParquetFile(f).metadata.created_by.split(" ")[0] for f in base.files} == \
            {"parquet-cpp-arrow"}, "the snapshot was not built on the driver"
        for epoch in s.catalog.committed_epochs(since=s.catalog.relation(name).created_epoch):
            check = Model()
            check.table("t", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
            t_rows = rows_of(s.table("t", as_of=epoch))
            if t_rows:
                check.db.executemany("INSERT INTO t VALUES (?, ?, ?)", t_rows)
            check.view(name, sql)
            assert multiset(rows_of(s.table(name, as_of=epoch))) == multiset(check.rows(name)), epoch
