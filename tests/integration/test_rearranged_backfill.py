"""The rearranged strategy: the creating job advances one budgeted step per main-graph epoch (a
snapshot chunk of at most `backfill_chunk_rows` rows, or that many log rows), never holds the main
graph back, and merges once it has caught up; the MV equals the oracle at every epoch from its
snapshot epoch on."""

from __future__ import annotations

import random

from tests.integration.test_backfill import check_from_snapshot, job, seeded
from tests.oracle import multiset, rows_of, to_sql

AGG = ("ra", "SELECT b, count(*) AS n, sum(a) AS s, max(a) AS mx FROM t GROUP BY b")
PROJ = ("rp", "SELECT k, a * 2 AS a2, upper(b) AS ub FROM t WHERE a > 5")


def light_batch(rnd: random.Random) -> list[tuple]:
    """Fewer log rows per epoch than the job's budget, so that it catches up."""
    lo = rnd.randrange(300)
    return [("insert", "t", [(rnd.randrange(340), rnd.randint(-5, 30), rnd.choice(["x", "yy", None]))
                             for _ in range(rnd.randint(2, 6))]),
            ("update", "t", {"a": "a + 1"}, f"k BETWEEN {lo} AND {lo + 4}"),
            ("delete", "t", f"k = {rnd.randrange(340)}")]


def test_rearranged_jobs_step_once_per_epoch_never_hold_the_pipeline_and_equal_the_oracle(session):
    s = session
    model = seeded(s, 300)
    s.sql("SET background_ddl = true; SET backfill_chunk_rows = 60")
    for name, sql in (PROJ, AGG):
        s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = 'rearranged') AS {sql}")
        model.view(name, sql)
    assert job(s, "rp").strategy == "rearranged"
    rnd = random.Random(5)
    expected = {s.committed_epoch: {n: model.rows(n) for n in ("rp", "ra")}}
    for _ in range(40):
        stmts = light_batch(rnd)
        for st in stmts:
            s.sql(to_sql(st))
        model.apply_epoch(stmts)
        epoch = s.flush()
        expected[epoch] = {n: model.rows(n) for n in ("rp", "ra")}
        if not any(j.creating for j in s.jobs()):
            break
    assert not any(j.creating for j in s.jobs()), "the rearranged jobs did not finish"
    rp = s.catalog.job_of("rp")
    assert rp.held_back == 0 and s.catalog.job_of("ra").held_back == 0
    # one snapshot chunk (<= 60 rows) per main-graph epoch: 300 rows took at least 5 epochs
    chunks = [st for st in s.catalog.job_steps(rp.id) if st.phase == "snapshot"]
    assert len(chunks) >= 5 and all(st.rows <= 60 for st in chunks), chunks
    epochs = s.catalog.committed_epochs(since=rp.snapshot_epoch + 1)
    assert rp.merged_epoch is not None and len([e for e in epochs if e <= rp.merged_epoch]) >= len(chunks) - 1
    assert check_from_snapshot(s, expected, ["rp", "ra"]) >= 2 * 5
    s.sql("INSERT INTO t VALUES (5000, 9, 'zz')")  # maintained by the main graph from the merge on
    model.apply_epoch([("insert", "t", [(5000, 9, "zz")])])
    s.flush()
    for name in ("rp", "ra"):
        assert multiset(rows_of(s.table(name))) == multiset(model.rows(name)), name


def test_a_foreground_rearranged_create_drives_barriers_until_it_merges(session):
    s = session
    model = seeded(s, 120)
    s.sql("SET backfill_chunk_rows = 50")
    s.sql(f"CREATE MATERIALIZED VIEW rp WITH (backfill_strategy = 'rearranged') AS {PROJ[1]}")
    model.view(*PROJ)
    info = job(s, "rp")
    assert not info.creating and info.merged_epoch > info.created_epoch  # it took epochs of the main graph
    assert multiset(rows_of(s.table("rp"))) == multiset(model.rows("rp"))
