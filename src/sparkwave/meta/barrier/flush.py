"""Flush tickets: what `flush()` waits for.

A flush takes the next ticket; an epoch is planned under the newest ticket taken before it read its
input, so an epoch planned under ticket k holds every DML statement staged before flush k. A flush
returns once an epoch planned under its ticket (or a later one) has committed: a sequence, not a
clock, so DML staged while an epoch was being planned is not missed."""

from __future__ import annotations

import threading
from collections.abc import Callable


class FlushTickets:
    def __init__(self) -> None:
        self._committed = threading.Condition()  # guards the counters; notified at commits and failures
        self._ticket = 0
        self._planned_under: dict[int, int] = {}  # epoch -> ticket it was planned under
        self._done = 0  # the newest ticket whose epoch has committed

    def take(self) -> int:
        """A flush's ticket."""
        with self._committed:
            self._ticket += 1
            return self._ticket

    def newest(self) -> int:
        """The ticket an epoch about to read its input is planned under."""
        with self._committed:
            return self._ticket

    def done(self) -> int:
        """The newest ticket answered: an epoch that leaves DML behind answers no new flush."""
        with self._committed:
            return self._done

    def planned(self, epoch: int, ticket: int) -> None:
        with self._committed:
            self._planned_under[epoch] = ticket

    def committed(self, epoch: int) -> None:
        """Epoch `epoch` committed: the flushes its ticket answers return."""
        with self._committed:
            self._done = max(self._done, self._planned_under.pop(epoch, 0))
            self._committed.notify_all()

    def failed(self) -> None:
        """An attempt failed: waiting flushes look whether to report it."""
        with self._committed:
            self._committed.notify_all()

    def wait(self, ticket: int, failing: Callable[[], None], closed: Callable[[], None]) -> None:
        """Until `ticket` is answered. `failing` raises to end the wait when the pipeline keeps
        failing (checked first, then at least once a second); `closed` when it has stopped (checked
        after each wait)."""
        with self._committed:
            while True:
                failing()
                if self._done >= ticket:
                    return
                self._committed.wait(1.0)
                closed()
