"""Which path a small CREATE takes (`core/policy.py`): a stateless tree's snapshot built on the driver up
to `STATELESS_DRIVER_ROWS` (and never past `big_epoch_rows`), and the log caught up in band when at
most `CATCH_UP_EPOCHS` epochs of driver-sized rows are left."""

from __future__ import annotations

import pytest

from sparkwave.core import policy


def test_a_stateless_snapshot_is_built_on_the_driver_only_when_small():
    assert policy.builds_stateless_on_driver(10_000, policy.BIG_EPOCH_ROWS)
    assert policy.builds_stateless_on_driver(policy.STATELESS_DRIVER_ROWS, policy.BIG_EPOCH_ROWS)
    assert not policy.builds_stateless_on_driver(policy.STATELESS_DRIVER_ROWS + 1, policy.BIG_EPOCH_ROWS)
    assert not policy.builds_stateless_on_driver(1, 0)  # `SET big_epoch_rows = 0` sends every build to Spark


def test_the_log_is_caught_up_in_band_only_when_few_small_epochs_are_left(monkeypatch):
    assert policy.catches_up_in_band(0, 0, policy.BIG_EPOCH_ROWS)  # the running epoch alone
    assert policy.catches_up_in_band(policy.CATCH_UP_EPOCHS, 5_000, policy.BIG_EPOCH_ROWS)
    assert not policy.catches_up_in_band(policy.CATCH_UP_EPOCHS + 1, 5_000, policy.BIG_EPOCH_ROWS)
    assert not policy.catches_up_in_band(1, policy.BIG_EPOCH_ROWS + 1, policy.BIG_EPOCH_ROWS)
    monkeypatch.setattr(policy, "CATCH_UP_EPOCHS", 0)
    assert not policy.catches_up_in_band(0, 0, policy.BIG_EPOCH_ROWS)


@pytest.mark.parametrize("rows", [0, 1, 99_999])
def test_the_thresholds_are_consistent(rows):
    assert policy.builds_stateless_on_driver(rows, policy.BIG_EPOCH_ROWS) <= policy.builds_on_driver(
        rows, policy.BIG_EPOCH_ROWS)
