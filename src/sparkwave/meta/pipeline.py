"""Where the barrier loop and what rides on its barriers meet, so that neither holds the other.

The creating jobs ring the loop's doorbell (`Barriers`: ask for a barrier, nudge one the lag rule
held back, see whether the main graph is busy); the loop plans with the jobs (`JobControl`) and
hands each committed epoch to its listeners (`CommitListener`: the sinks' log stores, the jobs).
`Barriers` is made first, then the sinks, the jobs, and the loop, each given what it needs in its
constructor (`frontend/session.py`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from sparkwave.storage.table import StagedLog


@dataclass(frozen=True)
class Commit:
    """An epoch the catalog has just made visible, and each relation's log rows of it (in memory,
    or a big epoch's file the executors wrote)."""

    epoch: int
    chunks: Mapping[str, pa.Table | StagedLog | None]
    started_at: float = 0.0  # when its barrier started (`time.time()`): latency is `committed_at - started_at`
    committed_at: float = 0.0  # when the catalog made it visible
    rows_in: int = 0  # the input rows it took (sources' and staged DML)


class CommitListener(Protocol):
    """Told of every commit on the barrier loop's thread, under `locks.epoch`, before a `flush()`
    waiting for the epoch returns (a coupled sink has the epoch by then)."""

    def on_commit(self, commit: Commit) -> None: ...


class FailureListener(Protocol):
    """Told of every failed attempt of an epoch, on the barrier loop's thread (a `RelationFailed`
    names the relation, `meta/barrier/failures.py`)."""

    def on_failure(self, error: Exception) -> None: ...


class JobControl(Protocol):
    """The creating jobs as the barrier loop plans an epoch with them."""

    def apply_requests(self) -> None:
        """Control requests from other processes (rate limits, cancels), before a barrier."""

    def admit(self) -> bool:
        """Whether the lag rule lets the main graph plan another epoch (called under `locks.gate`)."""

    def cancel(self, job_id: int, *, wait: bool = True) -> None:
        """Stop a creating job whose upstream left the main graph."""


class SinkControl(Protocol):
    """The sinks as the creating jobs control a sink's job (strategy `sink`)."""

    def set_rate_limit(self, name: str, limit: int | None) -> None: ...

    def drop(self, name: str) -> None: ...


class Barriers:
    """The barrier loop's doorbell: a flush or a waiting creating job asks for a barrier now, a
    moving creating job nudges a barrier its lag rule held back, and both ask whether the main
    graph has had input lately. The loop sleeps on `cond` between barriers."""

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self.cond = threading.Condition()
        self.flush_requests = 0
        self._nudged = False
        self.busy_at = 0.0  # when an epoch last carried input

    def request_barrier(self) -> None:
        """Run the next epoch now rather than at the interval, without waiting for it."""
        with self.cond:
            self.flush_requests += 1
            self.cond.notify_all()

    def nudge(self) -> None:
        """A creating job moved: a barrier held back by the lag rule may be admitted now."""
        with self.cond:
            self._nudged = True
            self.cond.notify_all()

    def busy(self) -> bool:
        """Whether the main graph has had input lately (within two barrier intervals, 1 to 5 s)."""
        return time.time() - self.busy_at < min(5.0, max(1.0, 2 * self.interval_ms / 1000))

    def carried_input(self) -> None:
        self.busy_at = time.time()

    def wait(self, held: bool, timeout: float, stopped: Callable[[], bool]) -> bool:
        """Until the next barrier is due: `timeout` passed, a flush asked, `stopped()`, or, while the
        last barrier was held back (`held`), a creating job moved. Clears the requests it answers;
        False when stopped."""
        with self.cond:
            self.cond.wait_for(lambda: stopped() or self.flush_requests > 0 or (held and self._nudged),
                               timeout=timeout)
            if stopped():
                return False
            self.flush_requests = 0
            self._nudged = False
            return True
