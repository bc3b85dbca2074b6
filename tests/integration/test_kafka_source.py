"""Kafka sources (CREATE SOURCE: they store nothing) and source backfill: an MV created on a
source that has been running reads the topic's history from Kafka in checkpointed chunks, then the
epochs committed meanwhile (again from Kafka, by the offsets each epoch committed), and merges at
an exact epoch. Every MV equals DuckDB over exactly the messages its epoch covers."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import InputPartition

import sparkwave
from sparkwave.connectors.kafka import Kafka
from sparkwave.connectors.kafka_reader import BACKGROUND_NICE, ReadSpec, _Reader
from sparkwave.core.errors import CatalogError, SqlError
from tests.kafka_util import (
    EV_COLS,
    EV_DDL,
    Topic,
    check_epoch,
    ev_sql,
    good,
    offsets_at,
    plain_rows,
    produce_events,
    read_by,
)

ROOT = Path(__file__).resolve().parents[2]
D_ROWS = [(0, "zero"), (1, "one"), (3, "three")]
MVS = {
    "cheap": "SELECT id, name, price FROM ev WHERE price < 20",
    "per_partition": "SELECT p, count(*) AS n, sum(price) AS total, max(o) AS last FROM ev GROUP BY p",
    "named": "SELECT ev.id, d.label FROM ev JOIN d ON ev.p = d.k",
    "by_name": "SELECT name, count(*) AS n, min(price) AS lo FROM ev GROUP BY name",
}


def source_sql(topic: Topic, per_epoch: int) -> str:
    return ev_sql(topic, "SOURCE", **{"max.rows.per.epoch": str(per_epoch)})


def produce(topic: Topic, lo: int, hi: int) -> None:
    produce_events(topic, lo, hi, bad=b"{oops")


def check_all(s, topic: Topic, names: list[str]) -> None:
    """Each MV at every committed epoch from its creation on."""
    for name in names:
        created = s.catalog.relation(name).created_epoch
        for epoch in s.catalog.committed_epochs(created):
            rows = plain_rows(read_by(topic, offsets_at(s, "ev", epoch)), EV_COLS, good)
            check_epoch(s, epoch, {"ev": (EV_DDL, rows), "d": ("k INTEGER, label VARCHAR", D_ROWS)},
                        {name: MVS[name]})


def test_mvs_created_early_and_late_on_a_source_equal_the_oracle(session, kafka):
    topic = Topic(kafka.bootstrap, 3)
    produce(topic, 0, 600)
    session.sql(source_sql(topic, 240))
    session.sql("CREATE TABLE d (k int PRIMARY KEY, label varchar)")
    session.sql("INSERT INTO d VALUES " + ", ".join(f"({k}, '{v}')" for k, v in D_ROWS))
    session.sql(f"CREATE MATERIALIZED VIEW cheap AS {MVS['cheap']}")
    for _ in range(3):
        session.flush()
    assert sum(offsets_at(session, "ev", session.committed_epoch).values()) == 600
    # Late, in the background, in chunks: they read the history from Kafka while the pipeline runs.
    # Paused until the pipeline has moved on, so that each has a log-store phase to go through.
    session.sql("SET backfill_chunk_rows = 150; SET background_ddl = true; SET backfill_rate_limit = 0")
    session.sql(f"CREATE MATERIALIZED VIEW per_partition AS {MVS['per_partition']}")
    session.sql(f"CREATE MATERIALIZED VIEW named AS {MVS['named']}")
    produce(topic, 600, 900)
    session.flush()
    topic.add_partitions(4)  # a partition added during the backfill needs none
    produce(topic, 900, 1200)
    session.sql(f"CREATE MATERIALIZED VIEW by_name AS {MVS['by_name']}")
    for _ in range(3):
        session.flush()
    for name in ("per_partition", "named", "by_name"):
        session.sql(f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = DEFAULT")
    session.wait()
    while sum(offsets_at(session, "ev", session.committed_epoch).values()) < 1200:
        session.flush()
    session.flush()
    jobs = {j.name: j for j in session.jobs()}
    assert all(jobs[n].phase == "created" for n in MVS)
    assert len(session.catalog.job_chunks(jobs["per_partition"].id)) >= 4, "the history was read in chunks"
    assert jobs["per_partition"].rows_total == 600  # the offsets its snapshot covered
    check_all(session, topic, list(MVS))
    errors = {(r.partition, r.offset) for r in session.sql("SHOW SOURCE ERRORS FROM ev").collect()}
    assert errors == {(m.partition, m.offset) for m in topic.messages if m.value == b"{oops"}
    assert not any((session.warehouse.relation_dir("ev") / "log").iterdir()), "a source keeps no rows"


def test_mvs_over_sources_computed_with_the_sources_read(session, kafka, monkeypatch):
    """The MVs' scans and projections over a source are computed by the job that reads it
    (`stream/fusion.py`), and the source's rows are written to a file only for an MV that reads the
    file. Two sources over one topic, an MV joining both (each source's read computes its side),
    and an MV whose epoch is big (over `big_epoch_rows`: the executors read the source's file)
    equal the oracle. An expression that fails on one message fails only its own MV, which is taken
    out of the pipeline (at its first failure here: `test_barrier` counts the attempts)."""
    import sparkwave.meta.barrier.failures as barrier

    monkeypatch.setattr(barrier, "MAX_ATTEMPTS", 1)
    topic = Topic(kafka.bootstrap, 3)
    produce(topic, 0, 120)
    session.sql(source_sql(topic, 1000))
    session.sql(source_sql(topic, 1000).replace("CREATE SOURCE ev ", "CREATE SOURCE ev2 "))
    session.sql("CREATE TABLE d (k int PRIMARY KEY, label varchar); SET big_epoch_rows = 150")
    session.sql("INSERT INTO d VALUES " + ", ".join(f"({k}, 'l{k}')" for k in range(100)))
    mvs = {**MVS, "both": "SELECT ev.id, ev2.name FROM ev JOIN ev2 ON ev.id = ev2.id WHERE ev2.price > 30"}
    for name, q in mvs.items():
        session.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    session.sql("CREATE MATERIALIZED VIEW bad AS SELECT id, CASE WHEN id <> 150 THEN price "
                "ELSE raise_error('message 150 is not welcome') END AS price FROM ev")
    session.flush()  # 120 messages and 100 rows of d: `named`'s epoch is big, the sources' are not
    assert session.catalog.relation("bad").state == "created"  # message 150 is not read yet
    produce(topic, 120, 200)
    while sum(offsets_at(session, "ev", session.committed_epoch).values()) < 200:
        session.flush()
    with pytest.raises(CatalogError, match=r"'bad' is stopped.*failed 1 times at epoch \d+: .*message 150"):
        session.table("bad")
    d = ("k INTEGER, label VARCHAR", [(k, f"l{k}") for k in range(100)])
    for epoch in session.catalog.committed_epochs(session.catalog.relation("cheap").created_epoch):
        rows = plain_rows(read_by(topic, offsets_at(session, "ev", epoch)), EV_COLS, good)
        rows2 = plain_rows(read_by(topic, offsets_at(session, "ev2", epoch)), EV_COLS, good)
        check_epoch(session, epoch, {"ev": (EV_DDL, rows), "ev2": (EV_DDL, rows2), "d": d}, mvs)
    assert not any((session.warehouse.relation_dir("ev") / "log").iterdir()), "a source keeps no rows"


def test_a_source_stores_nothing_and_says_so(session, kafka):
    topic = Topic(kafka.bootstrap, 1)
    session.sql(source_sql(topic, 100))
    session.sql(f"CREATE MATERIALIZED VIEW cheap AS {MVS['cheap']}")
    with pytest.raises(CatalogError, match="is a source: it stores nothing"):
        session.sql("SELECT * FROM ev")
    with pytest.raises(CatalogError, match="depend on it"):
        session.sql("DROP SOURCE ev")
    with pytest.raises(SqlError, match="it is a source"):
        session.sql("DROP TABLE ev")
    with pytest.raises(SqlError, match="append-only"):
        session.sql(f"CREATE SOURCE kv (k int PRIMARY KEY, v int) WITH ({topic.options()}) FORMAT UPSERT ENCODE JSON")
    with pytest.raises(SqlError, match="connector = 'kafka'"):
        session.sql("CREATE SOURCE g (v int) WITH (connector = 'datagen')")
    session.sql("DROP MATERIALIZED VIEW cheap")
    session.sql("DROP SOURCE ev")
    assert session.catalog.relation("ev") is None


@pytest.mark.parametrize("crash_at", [
    "backfill_mid_chunk:2", pytest.param("backfill_between_phases", marks=pytest.mark.chaos),
    # (make chaos; `make test` kills a snapshot backfill's log-store phase in test_dataflow_crash.py)
    pytest.param("backfill_mid_log_store:2", marks=pytest.mark.chaos),
    pytest.param("backfill_mid_merge", marks=pytest.mark.chaos),
])
def test_a_source_backfill_killed_in_each_phase_resumes_exactly(spark, kafka, tmp_path, crash_at):
    from tests import kafka_source_crash_child as child

    topic = Topic(kafka.bootstrap, 2)
    produce(topic, 0, child.MESSAGES)
    wh = tmp_path / "wh"
    env = {**os.environ, "SPARKWAVE_CRASH_AT": crash_at}
    proc = subprocess.run([sys.executable, "-m", "tests.kafka_source_crash_child", str(wh), kafka.bootstrap,
                           topic.name], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.wait()
        while sum(offsets_at(s, "ev", s.committed_epoch).values()) < child.MESSAGES:
            s.flush()
        s.flush()
        assert s.catalog.job_of("per_partition").phase.value == "created"
        check_all(s, topic, ["cheap", "per_partition"])


def test_show_jobs_gives_a_source_backfill_s_progress_per_partition(session, kafka):
    topic = Topic(kafka.bootstrap, 2)
    produce(topic, 0, 400)
    session.sql(source_sql(topic, 1000))
    session.flush()
    session.sql("SET backfill_chunk_rows = 100; SET background_ddl = true; SET backfill_rate_limit = 0")
    session.sql(f"CREATE MATERIALIZED VIEW per_partition AS {MVS['per_partition']}")
    job = next(j for j in session.jobs() if j.name == "per_partition")
    (up,) = job.upstreams
    assert (up.relation, up.rows_done, up.rows_total, up.offsets) == ("ev", 0, 400, (("0", 0, 200), ("1", 0, 200)))
    assert "ev 0/400 p0 0/200 p1 0/200" in session.sql("SHOW JOBS").collect()[-1].upstreams
    session.sql("ALTER MATERIALIZED VIEW per_partition SET BACKFILL_RATE_LIMIT = DEFAULT")
    session.wait()
    (up,) = next(j for j in session.jobs() if j.name == "per_partition").upstreams
    assert up.offsets == (("0", 200, 200), ("1", 200, 200))


def _read_in_a_child(spec: ReadSpec, n: int, out: Any) -> None:
    """A Spark worker's read of partition 0's offsets [0, n), in a process of its own: its rows and
    the process's niceness after it."""
    rows = sum(b.num_rows for b in _Reader(spec, [[0, 0, n]]).read(InputPartition((0, 0, n))))
    out.put((rows, os.nice(0)))


def test_a_creating_jobs_reads_yield_the_cpu_to_the_pipelines(session, kafka):
    """A creating job's Kafka reads (a source backfill: decoding the history is most of its work)
    run in workers of lower CPU priority, so that on cores the pipeline also needs, the OS runs the
    pipeline's first (p99 impact: bench/RESULTS.md). The pipeline's own reads keep theirs."""
    topic = Topic(kafka.bootstrap, 1)
    produce_events(topic, 0, 30)
    session.sql(source_sql(topic, 100))
    rel = session.catalog.relation("ev")
    pipeline, job = session.rt.connector(rel), session.rt._reader(rel)
    assert isinstance(pipeline, Kafka) and isinstance(job, Kafka)
    ctx = multiprocessing.get_context("spawn")  # not a fork of a process running a JVM bridge
    mine = os.nice(0)
    for spec, niceness in ((pipeline.spec, mine), (job.spec, max(mine, BACKGROUND_NICE))):
        out = ctx.Queue()
        child = ctx.Process(target=_read_in_a_child, args=(spec, 30, out))
        child.start()
        assert out.get(timeout=120) == (30, niceness)
        child.join()
    assert os.nice(0) == mine
