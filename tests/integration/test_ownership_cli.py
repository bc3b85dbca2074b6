"""One owner per warehouse; read-only inspection beside it; the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import sparkwave
from sparkwave import OwnershipError

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from sparkwave.meta.ownership import Ownership
from pathlib import Path
o = Ownership(Path(sys.argv[1]) / "OWNER"); o.acquire()
print("held", flush=True)
time.sleep(600)
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkwave.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})


def test_second_owner_gets_a_clear_error_and_a_killed_owner_is_taken_over(spark, tmp_path):
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, PRIMARY KEY (k)); INSERT INTO t VALUES (1)")
        s.flush()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(wh)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OwnershipError, match=f"process {holder.pid}"):
            sparkwave.connect(wh, spark=spark)
        jobs = cli("jobs", "--warehouse", str(wh))  # read-only inspection works beside the owner
        assert jobs.returncode == 0, jobs.stderr
        assert f"process {holder.pid}" in jobs.stdout and " t " in jobs.stdout
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:  # the dead owner's lock is free
        assert s.table("t").count() == 1


def test_cli_sql_runs_statements_and_prints_query_results(tmp_path):
    wh = str(tmp_path / "wh")  # statements with -e (a CLI process that starts Spark), then a file with -f
    r = cli("sql", "--warehouse", wh, "-e", "CREATE TABLE t (k int, v varchar, PRIMARY KEY (k)); "
                                            "INSERT INTO t VALUES (1, 'hello'), (2, 'world'); FLUSH; "
                                            "SELECT v FROM t WHERE k = 2")
    assert r.returncode == 0 and "world" in r.stdout and "hello" not in r.stdout, r.stdout + r.stderr
    f = tmp_path / "q.sql"
    f.write_text("CREATE TABLE u (k int);\nSELECT nope FROM u WHERE")  # malformed: nothing may run
    fresh = tmp_path / "fresh"
    r = cli("sql", "--warehouse", str(fresh), "-f", str(f))
    assert r.returncode == 1 and "syntax error at line 2" in r.stderr and "nope" in r.stderr, r.stdout + r.stderr
    assert not fresh.exists(), "the warehouse was opened (and Spark started) for a script that does not parse"


def test_control_statements_from_another_process_reach_the_owner(spark, tmp_path):
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, PRIMARY KEY (k)); INSERT INTO t VALUES (1), (2), (3)")
        s.flush()
        s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT k FROM t; "
              "CREATE MATERIALIZED VIEW n AS SELECT k FROM t WHERE k > 1")
        m_id, n_id = s.catalog.job_of("m").id, s.catalog.job_of("n").id

        jobs = cli("jobs", "--warehouse", str(wh))  # progress from another process
        assert jobs.returncode == 0 and " m " in jobs.stdout and "snapshot" in jobs.stdout, jobs.stdout
        other = cli("sql", "--warehouse", str(wh), "-e", "INSERT INTO t VALUES (9)")
        assert other.returncode == 1 and "owned by" in other.stdout, other.stdout
        bad = cli("sql", "--warehouse", str(wh), "-e", "ALTER MATERIALIZED VIEW nope SET BACKFILL_RATE_LIMIT = 1")
        assert bad.returncode == 1 and "nope" in bad.stdout, bad.stdout

        def through_owner(sql: str) -> str:
            proc = subprocess.Popen([sys.executable, "-m", "sparkwave.cli.main", "sql", "--warehouse", str(wh),
                                     "-e", sql], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            while proc.poll() is None:
                s.flush()  # the owner applies queued requests at its barriers
            out, err = proc.communicate()
            assert proc.returncode == 0, out + err
            return out

        assert "taken by the owner: applied" in through_owner(
            "ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
        s.creating.wait_created([m_id])
        assert s.table("m").count() == 3
        assert s.catalog.job(n_id).rate_limit == 0  # still paused
        assert "cancelling" in through_owner(f"CANCEL JOBS {n_id}")
        s.sql("WAIT")  # returns once the cancelled job has cleaned up
        assert s.catalog.relation("n") is None and s.catalog.job(n_id) is None
        assert [j.name for j in s.jobs()] == ["t", "m"]
