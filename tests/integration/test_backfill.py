"""Online snapshot backfill: equivalence with the oracle under continuous DML, isolation of the
main graph, convergence of the log-store phase, retention, control and progress."""

from __future__ import annotations

import random
import threading

import duckdb
import pytest

import sparkwave
from sparkwave import CatalogError
from tests.oracle import Model, multiset, rows_of, to_sql, values_sql

T = "CREATE TABLE t (k int, a int, b varchar, PRIMARY KEY (k))"
EV = "CREATE TABLE ev (id int, v int) APPEND ONLY"
LIVE = ("live", "SELECT k, a + 1 AS a1 FROM t WHERE a % 3 <> 0")  # in the main graph all along
JOBS = {
    "b1": "SELECT k, a * 2 AS a2, upper(b) AS ub FROM t WHERE a > 5",
    "b2": "SELECT b, a FROM t WHERE b IS NOT NULL",
    "b3": "SELECT id, v * 10 AS v10 FROM ev WHERE v % 2 = 0",
    "b4": "SELECT k, coalesce(b, '-') AS b FROM t",  # created paused, resumed rate-limited, then unlimited
    "b5": "SELECT a2 + 1 AS a3, ub FROM live2 WHERE a2 < 40",  # on an MV that was itself backfilled
}


def batch(rnd: random.Random, keys: int) -> list[tuple]:
    """Inserts of new and existing keys, updates and deletes of rows the snapshot already holds."""
    out: list[tuple] = [
        ("insert", "t", [(rnd.randrange(keys + 40), rnd.randint(-5, 30), rnd.choice(["x", "yy", None]))
                         for _ in range(rnd.randint(3, 12))]),
        ("insert", "ev", [(rnd.randrange(1000), rnd.randint(0, 9)) for _ in range(rnd.randint(1, 6))]),
        ("update", "t", {"a": f"a + {rnd.randint(-4, 4)}"}, f"k % 7 = {rnd.randrange(7)}"),
    ]
    if rnd.random() < 0.7:
        lo = rnd.randrange(keys)
        out.append(("delete", "t", f"k BETWEEN {lo} AND {lo + rnd.randint(0, 15)}"))
    return out


def model_with(seed_rows: list[tuple], ev_rows: list[tuple]) -> Model:
    model = Model()
    model.table("t", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
    model.table("ev", "id INTEGER, v INTEGER", ["id", "v"], [])
    model.apply_epoch([("insert", "t", seed_rows), ("insert", "ev", ev_rows)])
    return model


def seeded(s: sparkwave.Session, n: int = 300) -> Model:
    rnd = random.Random(1)
    rows = [(k, rnd.randint(-5, 30), rnd.choice(["x", "yy", "zzz", None])) for k in range(n)]
    ev = [(i, rnd.randint(0, 9)) for i in range(n // 3)]
    s.sql(";".join([T, EV]))
    s.sql(f"INSERT INTO t VALUES {values_sql(rows)}; INSERT INTO ev VALUES {values_sql(ev)}")
    s.flush()
    return model_with(rows, ev)


def job(s: sparkwave.Session, name: str) -> sparkwave.JobInfo:
    return next(j for j in s.jobs() if j.name == name)


def check_from_snapshot(s: sparkwave.Session, expected: dict[int, dict[str, list]], names: list[str]) -> int:
    """Every MV equals the oracle at every recorded epoch it is readable at (from its snapshot
    epoch S on, so also at every epoch >= its merge epoch M). Returns the comparisons made."""
    compared = 0
    for name in names:
        info = job(s, name)
        assert not info.creating, f"{name} is still creating"
        assert info.merged_epoch is not None and info.merged_epoch >= info.created_epoch
        for epoch, want in expected.items():
            if epoch >= info.created_epoch:
                got = multiset(rows_of(s.table(name, as_of=epoch)))
                assert got == multiset(want[name]), f"{name} differs from DuckDB at epoch {epoch} (merged at " \
                                                    f"{info.merged_epoch}): extra {got - multiset(want[name])}, " \
                                                    f"missing {multiset(want[name]) - got}"
                compared += 1
    return compared


def test_concurrent_backfills_equal_the_oracle_under_continuous_dml(session):
    s = session
    model = seeded(s)
    s.sql(f"CREATE MATERIALIZED VIEW {LIVE[0]} AS {LIVE[1]}")  # foreground: returns once merged
    model.view(*LIVE)
    s.sql("CREATE MATERIALIZED VIEW live2 AS SELECT k, a * 2 AS a2, b AS ub FROM t")
    model.view("live2", "SELECT k, a * 2 AS a2, b AS ub FROM t")
    s.sql("SET backfill_chunk_rows = 40; SET background_ddl = true")
    for name in ("b1", "b2", "b3", "b5"):
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {JOBS[name]}")
    s.sql("SET backfill_rate_limit = 0")
    s.sql(f"CREATE MATERIALIZED VIEW b4 AS {JOBS['b4']}")
    s.sql("SET backfill_rate_limit = default")
    for name, sql in JOBS.items():
        model.view(name, sql)
    assert job(s, "b1").created_epoch == job(s, "b2").created_epoch  # two jobs on t share one snapshot epoch
    with pytest.raises(CatalogError, match="still being created"):
        s.table("b1")

    rnd = random.Random(7)
    expected: dict[int, dict[str, list]] = {s.committed_epoch: {n: model.rows(n) for n in [*JOBS, "live"]}}
    for i in range(60):
        if i == 2:
            b4 = job(s, "b4")  # paused: it has not read a row while the others ran
            assert b4.phase == "snapshot" and b4.rows_done == 0 and b4.rate_limit == 0
            s.sql("ALTER MATERIALIZED VIEW b4 SET BACKFILL_RATE_LIMIT = 30")
        if i == 5 and job(s, "b4").creating:
            s.sql("ALTER MATERIALIZED VIEW b4 SET BACKFILL_RATE_LIMIT = DEFAULT")
        stmts = batch(rnd, 300)
        for st in stmts:
            s.sql(to_sql(st))
        model.apply_epoch(stmts)
        epoch = s.flush()
        expected[epoch] = {n: model.rows(n) for n in [*JOBS, "live"]}
        assert multiset(rows_of(s.table("live", as_of=epoch))) == multiset(model.rows("live"))
        if i >= 6 and not any(j.creating for j in s.jobs()):
            break
    assert not any(j.creating for j in s.jobs()), "the creating jobs did not finish while DML ran"
    assert check_from_snapshot(s, expected, list(JOBS)) >= 5 * 6


def test_main_graph_commits_while_a_backfill_is_mid_chunk(session):
    """Isolation, by behaviour: the job's first chunk read is held open; the main graph meanwhile
    commits epochs and keeps its MVs equal to the oracle."""
    s = session
    model = seeded(s)
    s.sql(f"CREATE MATERIALIZED VIEW {LIVE[0]} AS {LIVE[1]}")
    model.view(*LIVE)
    entered, release = threading.Event(), threading.Event()

    def slow_chunk(lo: int, hi: int) -> None:
        entered.set()
        release.wait()

    s.creating.chunk_hook = slow_chunk
    s.sql("SET background_ddl = true; SET backfill_chunk_rows = 100")
    s.sql(f"CREATE MATERIALIZED VIEW b1 AS {JOBS['b1']}")
    model.view("b1", JOBS["b1"])
    assert entered.wait(120), "the creating job never started its first chunk"
    rnd = random.Random(3)
    expected = {s.committed_epoch: {"b1": model.rows("b1")}}
    for _ in range(3):
        stmts = batch(rnd, 300)
        for st in stmts:
            s.sql(to_sql(st))
        model.apply_epoch(stmts)
        epoch = s.flush()  # commits although the creating job is inside a chunk
        expected[epoch] = {"b1": model.rows("b1")}
        assert multiset(rows_of(s.table("live", as_of=epoch))) == multiset(model.rows("live"))
        assert multiset(rows_of(s.table("t", as_of=epoch))) == multiset(model.rows("t"))
        b1 = job(s, "b1")
        assert b1.phase == "snapshot" and b1.rows_done == 0 and b1.lag_epochs >= 1
    release.set()
    s.sql("WAIT")
    assert check_from_snapshot(s, expected, ["b1"]) >= 3


def test_log_store_lag_never_grows_and_the_job_merges_while_the_upstream_writes(spark, tmp_path):
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=100) as s:
        s.sql("CREATE TABLE g (id bigint, v int) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
              "fields.id.start = '0', fields.v.min = '0', fields.v.max = '99', fields.v.seed = '5', "
              "datagen.rows.per.second = '3000')")
        for _ in range(3):
            s.flush()
        s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT id, v + 1 AS v1 FROM g WHERE v < 50")
        paused = job(s, "m")
        for _ in range(12):  # the upstream keeps writing; the paused job falls behind
            s.flush()
        assert job(s, "m").lag_epochs >= 12
        s.sql("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
        s.sql("WAIT")
        info = job(s, "m")
        steps = s.catalog.job_steps(paused.id)
        lags = [lag for _, phase, _, _, _, lag, _, _ in steps if phase == "log_store"]
        assert len(lags) >= 2 and lags[0] >= 12, f"the log-store phase was not exercised: {lags}"
        assert all(b <= a for a, b in zip(lags, lags[1:], strict=False)), f"lag grew: {lags}"
        # the upstream wrote during the log-store phase and went on after the merge
        s.flush()
        after = [e for e in s.catalog.committed_epochs(since=info.merged_epoch + 1)
                 if s.catalog.log_files("g", e - 1, e)]
        assert after, "the upstream did not write after the merge"
        for epoch in (info.merged_epoch, s.committed_epoch):
            g = rows_of(s.table("g", as_of=epoch))
            db = duckdb.connect()
            db.execute("CREATE TABLE g (id BIGINT, v INTEGER)")
            db.executemany("INSERT INTO g VALUES (?, ?)", g)
            want = db.execute("SELECT id, v + 1 AS v1 FROM g WHERE v < 50").fetchall()
            assert multiset(rows_of(s.table("m", as_of=epoch))) == multiset(want), epoch


def test_retention_keeps_what_a_creating_job_needs_and_cancel_releases_it(session):
    s = session
    model = seeded(s, 120)
    s.compact()  # a base at c0
    rnd = random.Random(11)

    def epoch_of_dml() -> int:
        stmts = batch(rnd, 120)
        for st in stmts:
            s.sql(to_sql(st))
        model.apply_epoch(stmts)
        return s.flush()

    for _ in range(2):
        epoch_of_dml()  # log epochs between c0 and S
    s.sql("SET retention_seconds = 0; SET background_ddl = true; SET backfill_rate_limit = 0")
    s.sql(f"CREATE MATERIALIZED VIEW b1 AS {JOBS['b1']}")
    s.sql(f"CREATE MATERIALIZED VIEW b2 AS {JOBS['b2']}")
    model.view("b1", JOBS["b1"])
    snapshot_epoch = job(s, "b1").created_epoch
    for _ in range(3):
        epoch_of_dml()
    c0 = s.catalog.base_at("t", snapshot_epoch).epoch
    needed = s.catalog.log_files("t", c0, s.committed_epoch)  # S's snapshot (base c0 + log) and the log after S
    assert s.catalog.log_files("t", 0, c0), "the test needs log files that no one needs any more"
    s.compact()  # compaction + retention at the newest epoch, while both jobs pin S
    assert s.catalog.log_files("t", 0, c0) == [], "retention did not truncate below the pinned snapshot's base"
    assert s.catalog.log_files("t", c0, s.committed_epoch) == needed, "retention removed what S still needs"
    assert s.catalog.base_at("t", snapshot_epoch).epoch == c0
    assert s.table("t", as_of=snapshot_epoch).count() > 0  # time travel to the pinned epoch still works

    s.sql(f"CANCEL JOBS {job(s, 'b2').id}")
    assert "b2" not in [j.name for j in s.jobs()] and s.catalog.relation("b2") is None
    assert not (s.warehouse.relation_dir("b2")).exists()
    assert len({h for h in _pin_holders(s)}) == 1  # b2's pin is gone, b1's stays

    s.sql("ALTER MATERIALIZED VIEW b1 SET BACKFILL_RATE_LIMIT = DEFAULT")
    s.sql("WAIT")
    assert _pin_holders(s) == []  # the merged job released its pin
    final = epoch_of_dml()
    assert multiset(rows_of(s.table("b1"))) == multiset(model.rows("b1"))
    s.compact()
    assert [e for e, _ in s.catalog.log_files("t", 0, final)] == [], "nothing pins the log any more: truncated"
    assert multiset(rows_of(s.table("b1"))) == multiset(model.rows("b1"))
    assert multiset(rows_of(s.table("t", as_of=final))) == multiset(model.rows("t"))


def _pin_holders(s: sparkwave.Session) -> list[str]:
    return [r[0] for r in s.catalog._all("SELECT holder FROM pins")]


def test_progress_is_structured_and_shown_by_show_jobs(session):
    s = session
    seeded(s, 200)
    s.sql("SET background_ddl = true; SET backfill_rate_limit = 0; SET backfill_chunk_rows = 50")
    s.sql("CREATE MATERIALIZED VIEW b4 AS SELECT k, a FROM t")
    s.sql("CREATE MATERIALIZED VIEW bj AS SELECT t.k, ev.v FROM t JOIN ev ON t.a = ev.v")
    s.flush()
    s.flush()
    info = job(s, "b4")
    joined = job(s, "bj")
    assert {(u.relation, u.rows_done, u.rows_total) for u in joined.upstreams} == {("t", 0, 200), ("ev", 0, 66)}
    assert joined.rows_total == 266 and joined.chunks == ()
    assert (info.strategy, info.phase, info.rate_limit, info.rows_done) == ("snapshot", "snapshot", 0, 0)
    worker = s.creating._workers[info.id]
    steps: list[int] = []
    inner = worker.backfill.step
    worker.backfill.step = lambda: steps.append(1) or inner()
    for _ in range(3):
        s.flush()
    assert len(steps) <= 12, f"a paused job spins instead of sleeping until woken: {len(steps)} checkpoints"
    assert info.kind == "materialized view" and info.lag_epochs == 2 and info.lag_seconds >= 0
    shown = {r["name"]: r for r in (row.asDict() for row in s.sql("SHOW JOBS").collect())}
    assert shown["b4"]["phase"] == "snapshot" and shown["b4"]["rate_limit"] == 0
    assert shown["b4"]["upstreams"] == "t 0/200" and sorted(shown["bj"]["upstreams"].split("; ")) == [
        "ev 0/66", "t 0/200"]
    assert shown["t"]["phase"] == "created"
    s.sql("ALTER MATERIALIZED VIEW b4 SET BACKFILL_RATE_LIMIT = DEFAULT")
    s.sql("ALTER MATERIALIZED VIEW bj SET BACKFILL_RATE_LIMIT = DEFAULT")
    s.sql("WAIT")
    info = job(s, "b4")
    assert (info.phase, info.rows_done, info.rows_total, info.percent) == ("created", 200, 200, 100.0)
    assert [(u.relation, u.rows_done, u.rows_total) for u in info.upstreams] == [("t", 200, 200)]
    assert [(c.lo, c.state, c.attempts) for c in info.chunks][0] == (0, "done", 1) and info.chunks[-1].hi == 256
    assert sum(c.rows for c in info.chunks) == 200 and len(info.chunks) >= 4
    joined = job(s, "bj")
    assert {(u.relation, u.rows_done, u.rows_total) for u in joined.upstreams} == {("t", 200, 200), ("ev", 66, 66)}
    steps = s.catalog.job_steps(info.id)
    assert sum(1 for st in steps if st[1] == "snapshot") >= 4  # 200 rows in chunks of about 50
    assert s.table("b4").count() == 200


def test_failing_checkpoints_are_retried_shown_and_a_foreground_create_gives_up(session):
    s = session
    model = seeded(s, 100)
    calls: list[str | None] = []

    def flaky(lo: int, hi: int) -> None:  # stands in for a storage hiccup on the first two reads
        calls.append(job(s, "b1").error)
        if len(calls) <= 2:
            raise OSError("disk hiccup")

    s.creating.chunk_hook = flaky
    s.sql("SET background_ddl = true")
    s.sql(f"CREATE MATERIALIZED VIEW b1 AS {JOBS['b1']}")
    s.sql("WAIT")
    assert calls[0] is None and "disk hiccup" in (calls[2] or ""), calls  # the error was visible while retrying
    model.view("b1", JOBS["b1"])
    assert job(s, "b1").error is None
    assert multiset(rows_of(s.table("b1"))) == multiset(model.rows("b1"))

    def broken(lo: int, hi: int) -> None:
        raise OSError("disk on fire")

    s.creating.chunk_hook = broken
    s.sql("SET background_ddl = false")
    with pytest.raises(sparkwave.core.errors.PipelineError, match="disk on fire"):
        s.sql(f"CREATE MATERIALIZED VIEW b2 AS {JOBS['b2']}")
    assert s.catalog.relation("b2") is None and _pin_holders(s) == []  # given up: cancelled, nothing left
    s.sql("INSERT INTO t VALUES (1000, 50, 'z')")
    s.flush()
    model.apply_epoch([("insert", "t", [(1000, 50, "z")])])
    assert multiset(rows_of(s.table("b1"))) == multiset(model.rows("b1"))  # the pipeline is unaffected


def test_progress_bars_show_each_creating_job(session):
    import io

    from rich.console import Console

    from sparkwave.frontend.progress_bars import JobBars

    s = session
    seeded(s, 50)
    s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
    s.sql("CREATE MATERIALIZED VIEW b4 AS SELECT k, a FROM t")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with JobBars(console) as bars:
        bars.update([j for j in s.jobs() if j.creating])
        bars.progress.refresh()
    text = out.getvalue()
    assert "b4" in text and "snapshot" in text and "paused" in text and "lag 0 epochs" in text, text


@pytest.mark.parametrize("strategy", ["snapshot", "rearranged", "blocking"])
def test_a_global_aggregate_created_over_an_empty_table_has_its_one_row(session, strategy):
    s = session
    s.sql("CREATE TABLE e (k int, v int, PRIMARY KEY (k))")
    s.sql(f"CREATE MATERIALIZED VIEW g WITH (backfill_strategy = '{strategy}') AS "
          "SELECT count(*) AS n, sum(v) AS s FROM e")
    assert rows_of(s.table("g")) == [(0, None)]
    s.sql("INSERT INTO e VALUES (1, 5), (2, 7)")
    s.flush()
    assert rows_of(s.table("g")) == [(2, 12)]


@pytest.mark.parametrize("strategy", ["snapshot", "blocking"])
def test_a_backfilled_aggregate_retracts_its_null_groups(session, strategy):
    """Groups `(1, NULL)` and `(NULL, 0)` written by the backfill into one row group of the state's
    base file: updating the NULL group's only row retracts it (it was once pruned as a group of one
    `g` value and kept)."""
    s = session
    s.sql("CREATE TABLE l (id int, g int, v int, PRIMARY KEY (id))")
    s.sql("INSERT INTO l VALUES (3, NULL, 0), (4, 1, NULL), (5, 1, NULL)")
    s.flush()
    s.sql(f"CREATE MATERIALIZED VIEW gv WITH (backfill_strategy = '{strategy}') AS "
          "SELECT g, v, count(*) AS n FROM l GROUP BY g, v")
    s.sql("UPDATE l SET v = v + 1 WHERE id = 3")
    s.flush()
    assert sorted(rows_of(s.table("gv")), key=str) == [(1, None, 2), (None, 1, 1)]
