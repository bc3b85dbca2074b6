"""Takeover: a warehouse whose catalog is in PostgreSQL is owned by one process at a time. When
its owner dies (SIGKILL), another takes over and continues exactly: every MV equals the DuckDB
oracle, no row lost or doubled. When its owner is alive but has lost its lock (its connection
ended, as when its host is cut off), the new owner takes over and the old one's commit of the
epoch it was executing is refused: it commits nothing after the takeover."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psycopg

import sparkwave
from sparkwave.core.catalog import location
from sparkwave.core.catalog.postgres import LOCK_CLASS, describe, wait_for_owner
from tests import crash_child
from tests.crash.test_crash import model_after
from tests.oracle import multiset, rows_of, to_sql

ROOT = Path(__file__).resolve().parents[2]
CRASH_AT = "before_catalog_commit:5"  # an epoch of the batches, executed, its catalog commit not made


def _child(wh: Path, progress: Path, dsn: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.takeover_child", str(wh), str(progress)], cwd=ROOT,
                            env={**os.environ, "SPARKWAVE_CRASH_AT": CRASH_AT, "SPARKWAVE_TEST_CATALOG": dsn, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


class _Log(threading.Thread):
    """Reads a child's stderr (so it never blocks on a full pipe) and tells when a line holds `needle`."""

    def __init__(self, stream, needle: str) -> None:
        super().__init__(daemon=True)
        self.stream, self.needle, self.lines, self.seen = stream, needle, [], threading.Event()

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line)
            if self.needle in line:
                self.seen.set()

    def tail(self) -> str:
        return "".join(self.lines[-60:])


def _acked(progress: Path) -> int:
    acked = len(progress.read_text().split()) if progress.exists() else 0
    assert acked >= 1, "the owner stopped before any batch was acknowledged: the point was not exercised"
    return acked


def _check(s, acked: int) -> None:
    model = model_after(acked)
    assert multiset(rows_of(s.table("t"))) == multiset(model.rows("t"))
    for name in crash_child.MVS:
        assert multiset(rows_of(s.table(name))) == multiset(model.rows(name)), name
    offset = s.catalog.source_offsets("g")["0"]  # datagen: exactly the rows of the committed offsets
    assert sorted(r[0] for r in rows_of(s.table("g").select("id"))) == list(range(offset))


def _continue(s, acked: int) -> None:
    """The new owner runs the rest of the batches; the result is as if one owner had run them all."""
    for i in range(acked, crash_child.BATCHES):
        for st in crash_child.batch(i):
            s.sql(to_sql(st))
        s.flush()
    _check(s, crash_child.BATCHES)


def test_a_killed_owner_is_taken_over_and_the_pipeline_continues_exactly(request, tmp_path, postgres) -> None:
    dsn = postgres.create_database("takeover_killed")
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    child = _child(wh, progress, dsn)
    log = _Log(child.stderr, "")
    log.start()
    assert child.wait(timeout=600) == -signal.SIGKILL, f"the owner was not killed at {CRASH_AT}:\n{log.tail()}"
    acked = _acked(progress)

    location.remember(dsn)
    wait_for_owner(dsn, describe(dsn), timeout_s=60)  # the server ended the dead owner's session
    spark = request.getfixturevalue("spark")  # started after the child's JVM is gone
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000, catalog=dsn) as s:
        assert s._ownership.generation == 2
        assert not (wh / "lost+found").exists(), "recovery found files the catalog did not record as sparkwave's"
        s.flush()  # the killed owner's planned epoch is replayed; staged DML lands
        _check(s, acked)
        _continue(s, acked)


def test_an_owner_that_lost_its_lock_cannot_commit_after_the_takeover(request, tmp_path, postgres) -> None:
    dsn = postgres.create_database("takeover_fenced")
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    child = _child(wh, progress, dsn, SPARKWAVE_CRASH_SIGNAL="STOP")
    log = _Log(child.stderr, "no longer owns the warehouse")
    log.start()
    try:
        _, status = os.waitpid(child.pid, os.WUNTRACED)  # the old owner stops before its catalog commit
        assert os.WIFSTOPPED(status), f"the owner did not stop at {CRASH_AT}:\n{log.tail()}"
        acked = _acked(progress)
        with psycopg.connect(dsn, autocommit=True) as admin:  # its lock's session ends; the process lives on
            (pid,), = admin.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                                    "AND granted", (LOCK_CLASS,)).fetchall()
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        location.remember(dsn)
        wait_for_owner(dsn, describe(dsn), timeout_s=60)

        spark = request.getfixturevalue("spark")
        with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000, catalog=dsn) as s:
            assert s._ownership.generation == 2
            s.flush()  # the new owner replays the old one's planned epoch and commits it
            committed = s.committed_epoch
            os.kill(child.pid, signal.SIGCONT)  # the old owner goes on to its catalog commit
            assert log.seen.wait(120), f"the old owner's commit was not refused:\n{log.tail()}"
            child.kill()
            child.wait(timeout=60)
            assert s.committed_epoch == committed and s.catalog.uncommitted_plan() is None
            _check(s, acked)
            _continue(s, acked)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=60)
