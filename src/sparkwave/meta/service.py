"""A background thread of the owner (the barrier loop, maintenance): started once, stopped once,
woken early, and backing off after failures. What each one does per round is its own `_run`."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Service:
    """A named daemon thread running `_run`, which sleeps through `sleep` so that `stop` (and
    `wake`) end a sleep at once. `cond` may be shared with whoever wakes the service."""

    def __init__(self, name: str, cond: threading.Condition | None = None) -> None:
        self.name = name
        self._wake = cond if cond is not None else threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.failures = 0  # consecutive failed rounds; the next waits `backoff()`

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop and wait for it (its round in progress finishes first)."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        with self._wake:
            self._wake.notify_all()

    def sleep(self, seconds: float | None, until: Callable[[], bool] = lambda: False) -> bool:
        """Until `seconds` pass (None: until woken), `until()` holds or a stop; False once stopping."""
        with self._wake:
            self._wake.wait_for(lambda: self._stopping or until(), timeout=seconds)
        return not self._stopping

    def backoff(self, first: float, most: float) -> float:
        """The wait after the `failures`-th failure in a row: doubling from `first`, at most `most`."""
        return min(most, first * 2 ** self.failures)

    def _run(self) -> None:
        raise NotImplementedError
