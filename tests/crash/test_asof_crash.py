"""Crash with ASOF joins (`stream/asof_join.py`): SIGKILL in the main graph's steady state (join
state half-committed) and mid-way through the chunked snapshot backfill of two ASOF joins, restart,
and every MV equals the oracle (RisingWave's ranking in plain SQL) at the end and at every
committed epoch it is readable at."""

from __future__ import annotations

import pytest

from tests import asof_crash_child as child
from tests.crash.test_dataflow_crash import recovers_and_equals_the_oracle

POINTS = [  # the backfill points are the same code for every operator: `make chaos` runs them here
    "mid_commit:6",                 # steady state: some of an epoch's MV and state-table files gathered for its commit
    pytest.param("backfill_after_chunk_rows:3", marks=pytest.mark.chaos),  # a chunk's state files written, progress
    # not committed
    pytest.param("backfill_mid_log_store:2", marks=pytest.mark.chaos),  # a log-store checkpoint's logs in Delta, not
    # in the catalog
]


@pytest.mark.parametrize("crash_at", POINTS)
def test_asof_join_mvs_recover_after_sigkill_and_equal_the_oracle(spark, tmp_path, crash_at):
    recovers_and_equals_the_oracle(spark, tmp_path, crash_at, child, child.ORACLE)
