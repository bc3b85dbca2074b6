"""The wall clock an epoch's `NOW()` is read from (`meta/barrier/plan.py` records it in the plan).

One function, so that tests can stand in for the outside world's timing (`use`) and drive `NOW()`
epoch by epoch, never by sleeping. Microseconds since the Unix epoch, UTC: the unit of Arrow's and
Spark's timestamps."""

from __future__ import annotations

import time
from collections.abc import Callable

_clock: Callable[[], int] | None = None


def now_micros() -> int:
    """The current time in microseconds since 1970-01-01 UTC (a test's clock if one is in `use`)."""
    return _clock() if _clock is not None else time.time_ns() // 1000


def use(clock: Callable[[], int] | None) -> None:
    """Read the time from `clock` (microseconds) from now on; None: the system clock again."""
    global _clock
    _clock = clock
