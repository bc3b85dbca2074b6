"""A background thread of the owner: the barrier loop, the Delta follower, maintenance, each creating
job's worker and each sink's worker. One way to start one, stop it (the round in progress finishes first), wake
it, let it sleep until woken or stopped, and back it off after failures; `status` says how it is
doing (the dashboard shows it).

A service runs **rounds** (`_round`: a checkpoint, a delivery, a compaction pass) until stopped,
each returning how long to sleep before the next. A round that raises is a failure: the service
records it, says so (`_on_failure`) and backs off, doubling the wait per failure in a row; a backoff
ends early only at a stop or `wake(retry=True)` (its settings changed, so the failure may be
gone), not at every ordinary wake (a target that is down is not retried at every barrier). A
service with a pacing of its own (the barrier loop) overrides `_run` and uses the same parts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkwave.core import spark_features

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("sparkwave.service")


def error_text(e: BaseException) -> str:
    """An error as the catalog and a service's status keep it: its type and its first 500 characters."""
    return f"{type(e).__name__}: {str(e).strip()[:500]}"


@dataclass(frozen=True)
class Backoff:
    """The wait after the n-th failure in a row: `first * 2**n`, at most `most` seconds."""

    first: float
    most: float

    def after(self, failures: int) -> float:
        return min(self.most, self.first * 2 ** failures)


@dataclass(frozen=True)
class ServiceStatus:
    """A copy of how a service is doing, for the dashboard and SHOW statements."""

    name: str
    running: bool  # its thread is alive and was not asked to stop
    failures: int  # failed rounds in a row: 0 once a round succeeds
    error: str | None  # the last failure's text (`error_text`), kept after a recovery
    error_at: float | None  # when it failed (`time.time()`)


class Bell:
    """A condition and a count of its rings. A service notes the count before a round and sleeps
    until it changes, so a wake that arrives while the round runs is not lost. Services may share
    one bell (the creating jobs' workers: any job's progress, or a commit, wakes them all), and a
    bell may wrap a condition others wait on too (the barrier loop's doorbell)."""

    def __init__(self, cond: threading.Condition | None = None) -> None:
        self.cond = cond if cond is not None else threading.Condition()
        self.rings = 0

    def ring(self) -> None:
        with self.cond:
            self.rings += 1
            self.cond.notify_all()

    def wait(self, since: int, timeout: float | None) -> None:
        """Until a ring after the count `since` (or `timeout` seconds; None: no limit)."""
        with self.cond:
            self.cond.wait_for(lambda: self.rings != since, timeout=timeout)


class Service:
    """A named daemon thread running rounds (see the module docstring). Subclasses give `_round`,
    and may give `_begin` / `_end` (on the thread, around all rounds), `_on_failure` (after a round
    failed, inside its `except`) and `_interrupt` (on the stopping thread: make a round in progress
    end sooner). `first_wait`: the sleep before the first round."""

    def __init__(self, name: str, bell: Bell | None = None, *, backoff: Backoff = Backoff(0.5, 30.0),
                 first_wait: float = 0.0) -> None:
        self.name = name
        self.bell = bell if bell is not None else Bell()
        self._backoff = backoff
        self._first_wait = first_wait
        self._stopping = False
        self._retries = 0  # `wake(retry=True)` calls: a backoff ends when it changes
        self._thread: threading.Thread | None = None
        self.failures = 0  # failed rounds in a row; the next waits `backoff()`
        self.error: BaseException | None = None  # the last failure, kept after a recovery
        self.error_at = 0.0

    # --- control, from other threads ------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the service to stop once its round in progress ends; returns at once."""
        with self.bell.cond:
            self._stopping = True
            self.bell.cond.notify_all()
        self._interrupt()

    def join(self) -> None:
        """Wait for the thread to end (not from the thread itself, which has nothing to wait for)."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def stop(self) -> None:
        """Ask the thread to stop and wait for it (its round in progress finishes first)."""
        self.request_stop()
        self.join()

    def wake(self, *, retry: bool = False) -> None:
        """End a sleep between rounds: there may be work. `retry`: end a backoff too."""
        with self.bell.cond:
            if retry:
                self._retries += 1
            self.bell.rings += 1
            self.bell.cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def status(self) -> ServiceStatus:
        with self.bell.cond:  # failures and error change together, under it
            error = self.error
            return ServiceStatus(self.name, self.alive() and not self._stopping, self.failures,
                                 None if error is None else error_text(error), None if error is None else self.error_at)

    # --- on the service's thread ---------------------------------------------------------------
    def sleep(self, seconds: float | None, until: Callable[[], bool] | None = None, *,
              since: int | None = None) -> bool:
        """Until `seconds` pass (None: no limit), a ring after `since` (default: from now), `until()`
        holds, or a stop; False once stopping."""
        with self.bell.cond:
            rang = self.bell.rings if since is None else since
            done = until if until is not None else (lambda: False)
            self.bell.cond.wait_for(lambda: self._stopping or self.bell.rings != rang or done(), timeout=seconds)
            return not self._stopping

    def finish(self) -> None:
        """The round in progress is the last: the service has nothing more to do (a merged job)."""
        with self.bell.cond:
            self._stopping = True

    def backoff(self) -> float:
        """The wait after the `failures`-th failure in a row."""
        return self._backoff.after(self.failures)

    def record_failure(self, e: BaseException) -> None:
        with self.bell.cond:
            self.failures += 1
            self.error, self.error_at = e, time.time()

    def record_success(self) -> None:
        with self.bell.cond:
            self.failures = 0

    def _pause(self, wait: float | None, rang: int) -> bool:
        """Between rounds: sleep `wait` unless it is 0; False once stopping."""
        return self.sleep(wait, since=rang) if wait != 0 else not self._stopping

    def _back_off(self, retries: int) -> bool:
        """Sleep `backoff()`, ended early only by a stop or a `wake(retry=True)` after the count
        `retries`; False once stopping."""
        with self.bell.cond:
            self.bell.cond.wait_for(lambda: self._stopping or self._retries != retries, timeout=self.backoff())
            return not self._stopping

    def _run(self) -> None:
        self._begin()
        try:
            wait: float | None = self._first_wait
            rang, retries = self.bell.rings, self._retries
            while self._pause(wait, rang):
                rang, retries = self.bell.rings, self._retries  # a wake from here on ends the next sleep
                try:
                    wait = self._round()
                except Exception as e:  # the service survives; the round is retried after a backoff
                    if self._stopping:  # (a stop cancels its work: that is no failure)
                        break
                    self.record_failure(e)
                    try:
                        self._on_failure(e)
                    except Exception:  # (the catalog busy, say): the service must outlive it and retry
                        log.exception("%s: recording a failure failed", self.name)
                    if not self._back_off(retries):
                        break
                    wait = 0.0
                    continue
                self.record_success()
        finally:
            self._end()

    # --- what a subclass gives -----------------------------------------------------------------
    def _round(self) -> float | None:
        """One round's work; returns the seconds to sleep before the next (0: none; None: until woken)."""
        raise NotImplementedError

    def _begin(self) -> None:
        pass

    def _end(self) -> None:
        pass

    def _on_failure(self, e: Exception) -> None:
        pass

    def _interrupt(self) -> None:
        pass


class SparkGroupService(Service):
    """A service whose Spark jobs run in scheduler pool `pool` under a job group named as the
    service, so that stopping it cancels them (the creating jobs' and the sinks' workers)."""

    def __init__(self, name: str, spark: SparkSession, pool: str, description: str, bell: Bell | None = None, *,
                 backoff: Backoff = Backoff(0.5, 30.0)) -> None:
        super().__init__(name, bell, backoff=backoff)
        self.spark = spark
        self.pool = pool
        self.description = description

    @property
    def group(self) -> str:
        return self.name

    def _begin(self) -> None:
        spark_features.join_group(self.spark, self.group, pool=self.pool, description=self.description)

    def _interrupt(self) -> None:
        spark_features.cancel_group(self.spark, self.group)
