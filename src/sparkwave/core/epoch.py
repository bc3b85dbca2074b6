"""Epochs in RisingWave's format: physical milliseconds since 2025-01-01 in the high bits,
a 16-bit sequence in the low bits, strictly increasing even if the clock steps back."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

EPOCH_ORIGIN_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
SEQ_BITS = 16


def epoch_from_ms(unix_ms: int) -> int:
    return (unix_ms - EPOCH_ORIGIN_MS) << SEQ_BITS


def next_epoch(prev: int, now_ms: int | None = None) -> int:
    """The epoch after `prev`: now's physical time, or `prev + 1` if the clock has not moved on."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return max(epoch_from_ms(now_ms), prev + 1)


def epoch_ms(epoch: int) -> int:
    """Unix milliseconds of an epoch's physical part."""
    return (epoch >> SEQ_BITS) + EPOCH_ORIGIN_MS


def epoch_datetime(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms(epoch) / 1000, tz=UTC)


@dataclass(frozen=True)
class Lag:
    """How far the main graph is ahead of a creating job (the lag rule's input, meta/lag_rule.py)."""

    epochs: int  # main-graph epochs, planned or committed, after the job's consumed epoch
    ms: int  # physical time from the consumed epoch to the newest of them

    @property
    def seconds(self) -> float:
        return self.ms / 1000
