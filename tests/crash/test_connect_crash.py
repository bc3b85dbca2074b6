"""Crash on Spark Connect: the sparkwave process (a Connect client, no JVM of its own) is SIGKILLed at a
named point while the Connect server keeps running, with whatever operations the dead client had
under way; a new process on a new Connect session recovers, and every MV equals the oracle with no
row lost or duplicated (the pipeline of `tests/crash_child.py`).

Run as a child: python -m tests.crash.test_connect_crash run|check WAREHOUSE FILE URL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FULL = os.environ.get("SPARKWAVE_TEST_CONNECT_FULL") == "1"

POINTS = [
    "mid_commit:5",  # the client killed between its operations: nothing of its own runs on the server
    "mid_execute:4",  # killed while the epoch's operations may still run on the server
    pytest.param("mid_backfill", marks=pytest.mark.skipif(not FULL, reason="make test-cluster")),
]


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    from sparkwave.devtools.spark_connect import ConnectServer

    with ConnectServer(tmp_path_factory.mktemp("connect")) as server:
        yield server


def _child(mode: str, wh: Path, out: Path, url: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARKWAVE_CRASH_AT"}
    if crash_at:
        env["SPARKWAVE_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "tests.crash.test_connect_crash", mode, str(wh), str(out), url],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("crash_at", POINTS)
def test_restart_after_sigkill_on_connect_loses_and_duplicates_nothing(connect_server, tmp_path, crash_at):
    from tests import crash_child
    from tests.crash.test_crash import model_after
    from tests.oracle import multiset

    wh, progress, dump = tmp_path / "wh", tmp_path / "progress", tmp_path / "rows.json"
    run = _child("run", wh, progress, connect_server.url, crash_at)
    assert run.returncode == -signal.SIGKILL, f"child was not killed at {crash_at}: rc={run.returncode}\n" \
                                              f"{run.stderr[-3000:]}"
    assert connect_server.proc is not None and connect_server.proc.poll() is None, "the Connect server stopped"
    acked = len(progress.read_text().split()) if progress.exists() else 0
    assert acked >= 1, "the crash came before any batch was acknowledged: the point was not exercised"

    check = _child("check", wh, dump, connect_server.url, None)
    assert check.returncode == 0, check.stderr[-3000:]
    got = json.loads(dump.read_text())
    model = model_after(acked)
    assert multiset(got["t"]) == multiset(model.rows("t"))
    for name in crash_child.MVS:
        assert multiset(got[name]) == multiset(model.rows(name)), name
    late, late_sql = crash_child.LATE_MV
    model.view(late, late_sql)
    assert multiset(got[late]) == multiset(model.rows(late)), late
    assert sorted(got["g_ids"]) == list(range(got["g_offset"])), "datagen rows lost or doubled"
    assert multiset(got["mg"]) == multiset([r for r in got["g"] if r[1] > 50])


# --- the child -----------------------------------------------------------------------------------

def _run(wh: str, progress: str, url: str) -> None:
    import sparkwave
    from sparkwave.core.spark import connect_spark
    from tests.crash_child import run

    with sparkwave.connect(wh, spark=connect_spark(url), barrier_interval_ms=3_600_000) as s:
        run(s, progress)


def _check(wh: str, out: str, url: str) -> None:
    """Recover on a new session, then every relation's rows (the late MV created if the crash undid it)."""
    import sparkwave
    from sparkwave.core.spark import connect_spark
    from tests.crash_child import LATE_MV, MVS
    from tests.oracle import rows_of

    with sparkwave.connect(wh, spark=connect_spark(url), barrier_interval_ms=3_600_000) as s:
        s.flush()  # recovery replayed the uncommitted plan; pending DML lands now
        if s.catalog.relation(LATE_MV[0]) is None:
            assert LATE_MV[0] not in os.listdir(Path(wh) / "tables"), "a killed backfill left its files behind"
            s.sql(f"CREATE MATERIALIZED VIEW {LATE_MV[0]} AS {LATE_MV[1]}")
        rows = {name: rows_of(s.table(name)) for name in ["t", *MVS, LATE_MV[0], "g", "mg"]}
        rows["g_ids"] = [r[0] for r in rows["g"]]
        Path(out).write_text(json.dumps({**rows, "g_offset": s.catalog.source_offsets("g")["0"]}, default=str))


if __name__ == "__main__":
    mode, warehouse, file, remote = sys.argv[1:5]
    (_run if mode == "run" else _check)(warehouse, file, remote)
