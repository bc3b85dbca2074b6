"""SIGKILL during an Iceberg sink's delivery (a backfill chunk or a later epoch: before the
commit, inside it, after it), restart: the Iceberg tables, read back by pyiceberg and by DuckDB,
equal the oracle at the last epoch; nothing is lost, nothing doubled (an append-only sink would
double a delivery applied twice)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sparkwave
from tests.integration.test_sink_iceberg import duckdb_rows, iceberg_rows
from tests.integration.test_sinks import AGG_COLS
from tests.oracle import multiset
from tests.sink_util import MV_QUERIES, oracle

ROOT = Path(__file__).resolve().parents[2]
POINTS = [
    "sink_mid_iceberg_commit:5",  # a backfill chunk's metadata file written, the catalog row not moved
    "sink_after_iceberg_commit:3",  # a backfill chunk in the table, not in sparkwave's catalog
    pytest.param("sink_before_target_commit:6", marks=pytest.mark.chaos),  # data files written, no commit
    pytest.param("sink_mid_iceberg_commit:12", marks=pytest.mark.chaos),  # in the log phase
    pytest.param("sink_after_iceberg_commit:9", marks=pytest.mark.chaos),
]


@pytest.mark.parametrize("crash_at", POINTS)
def test_a_sigkill_in_an_iceberg_commit_loses_and_doubles_nothing(spark, tmp_path, crash_at):
    wh, lake, final = tmp_path / "wh", tmp_path / "lake", tmp_path / "final"
    child = [sys.executable, "-m", "tests.iceberg_sink_crash_child", str(wh), str(lake), str(final)]
    killed = subprocess.run(child, cwd=ROOT, env={**os.environ, "SPARKWAVE_CRASH_AT": crash_at},
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-3000:]
    done = subprocess.run(child, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    epoch = int(final.read_text())
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        expected = oracle(s, MV_QUERIES["agg"], epoch, {"t": ["k", "g", "v", "s"]})
        log_rows = multiset(tuple(r) for r in s.table("log", as_of=epoch).select("x", "y").collect())
    assert iceberg_rows(lake, "agg_out", AGG_COLS) == expected == duckdb_rows(lake, "agg_out", AGG_COLS)
    assert iceberg_rows(lake, "log_out", ["x", "y"]) == log_rows == duckdb_rows(lake, "log_out", ["x", "y"])
