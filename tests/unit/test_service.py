"""The background-thread base of the loop, maintenance, the jobs' and the sinks' workers: start,
stop (the round in progress finishes), wake, sleep ended by a stop, back off after a failure and
recover. Synchronised on conditions and events; every wait has a deadline that fails the test
instead of hanging it, and no outcome depends on how long anything takes."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sparkwave.meta.service import Backoff, Bell, Service

DEADLINE = 60.0
LONG = Backoff(3600, 3600)  # a backoff only a retry or a stop ends within the test
Action = float | None | Exception | Callable[["Scripted"], "float | None | Exception"]


class Scripted(Service):
    """Each round takes the next action of its script: a wait to return, an error to raise, or a
    callable giving either (run on the service's thread). Without script it sleeps until woken."""

    def __init__(self, *script: Action, bell: Bell | None = None, backoff: Backoff = LONG,
                 first_wait: float = 0.0) -> None:
        super().__init__("scripted", bell, backoff=backoff, first_wait=first_wait)
        self.script = list(script)
        self.cond = threading.Condition()
        self.rounds = 0
        self.failed: list[str] = []
        self.interrupted = self.ended = False

    def _round(self) -> float | None:
        with self.cond:
            self.rounds += 1
            self.cond.notify_all()
            action = self.script.pop(0) if self.script else None
        outcome = action(self) if callable(action) else action
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _on_failure(self, e: Exception) -> None:
        with self.cond:
            self.failed.append(str(e))
            self.cond.notify_all()

    def _interrupt(self) -> None:
        self.interrupted = True

    def _end(self) -> None:
        self.ended = True

    def reached(self, condition: Callable[[], bool]) -> None:
        with self.cond:
            assert self.cond.wait_for(condition, timeout=DEADLINE), "the service never got there"


def _stopped_within_deadline(s: Service) -> bool:
    done = threading.Event()
    threading.Thread(target=lambda: (s.stop(), done.set()), daemon=True).start()
    return done.wait(DEADLINE)


def test_a_service_runs_a_round_when_woken_and_stops_between_rounds():
    s = Scripted()
    s.start()
    s.reached(lambda: s.rounds == 1)
    assert s.status.running and s.alive()
    s.wake()
    s.reached(lambda: s.rounds == 2)
    s.stop()
    assert not s.alive() and s.rounds == 2 and s.ended
    assert not s.status.running and s.status.failures == 0 and s.status.error is None


def test_a_stop_ends_a_sleep_at_once():
    s = Scripted(3600.0)
    s.start()
    s.reached(lambda: s.rounds == 1)
    assert _stopped_within_deadline(s) and s.rounds == 1
    before_first = Scripted(first_wait=3600.0)
    before_first.start()
    assert _stopped_within_deadline(before_first) and before_first.rounds == 0 and before_first.ended


def test_a_stop_lets_the_round_in_progress_finish_and_interrupts_it():
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def long_round(s: Scripted) -> float:
        started.set()
        assert release.wait(DEADLINE)
        finished.set()
        return 0.0  # another round at once, were it not stopping

    s = Scripted(long_round)
    s.start()
    assert started.wait(DEADLINE)
    s.request_stop()
    assert s.interrupted and s.alive() and not finished.is_set() and not s.status.running
    release.set()
    s.join()
    assert finished.is_set() and s.rounds == 1 and s.ended


def test_a_wake_while_a_round_runs_is_not_lost():
    in_round, release = threading.Event(), threading.Event()

    def blocked(s: Scripted) -> None:
        in_round.set()
        assert release.wait(DEADLINE)
        return None  # sleep until woken: by the wake that came while this round ran

    s = Scripted(blocked)
    s.start()
    assert in_round.wait(DEADLINE)
    s.wake()
    release.set()
    s.reached(lambda: s.rounds == 2)
    s.stop()


def test_a_failing_round_backs_off_until_a_retry_then_recovers_keeping_its_last_error():
    retried: list[bool] = []  # set by the test just before it asks for a retry
    seen: list[bool] = []

    def fail(s: Scripted) -> Exception:
        s.wake()  # an ordinary wake (a commit) while failing: it must not end the backoff
        return ConnectionError("target down")

    def after_backoff(s: Scripted) -> float | None:
        with s.cond:
            seen.append(bool(retried))
        return None

    s = Scripted(fail, after_backoff)
    s.start()
    s.reached(lambda: s.failed == ["target down"])
    status = s.status
    assert (status.running, status.failures, status.error) == (True, 1, "ConnectionError: target down")
    assert status.error_at is not None and s.backoff() == 3600  # at most its most
    with s.cond:
        retried.append(True)
    s.wake(retry=True)  # its settings changed: retry now
    s.reached(lambda: s.rounds == 2)
    s.reached(lambda: bool(seen))
    assert seen == [True], "the backoff ended before the retry was asked for"
    with s.bell.cond:  # (recorded after the round, under the bell)
        s.bell.cond.wait_for(lambda: s.failures == 0, timeout=DEADLINE)
    status = s.status
    assert (status.failures, status.error) == (0, "ConnectionError: target down")  # recovered, last error kept
    s.stop()


def test_a_stop_ends_a_backoff():
    s = Scripted(RuntimeError("boom"))
    s.start()
    s.reached(lambda: s.failed == ["boom"])
    assert _stopped_within_deadline(s) and s.rounds == 1


def test_backoff_doubles_per_failure_in_a_row_up_to_its_most():
    assert [Backoff(0.5, 30.0).after(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    s = Scripted(backoff=Backoff(0.2, 5.0))
    s.record_failure(OSError("one"))
    s.record_failure(OSError("two"))
    assert s.backoff() == 0.8 and s.status.error == "OSError: two"
    s.record_success()
    assert s.backoff() == 0.2 and s.status.failures == 0


def test_a_service_that_finishes_ends_after_that_round():
    s = Scripted(lambda s: s.finish() or 0.0)
    s.start()
    s.join()
    assert s.rounds == 1 and s.ended and not s.status.running


def test_a_shared_bell_wakes_every_service_on_it():
    bell = Bell()
    a, b = Scripted(bell=bell), Scripted(bell=bell)
    a.start()
    b.start()
    a.reached(lambda: a.rounds == 1)
    b.reached(lambda: b.rounds == 1)
    bell.ring()
    a.reached(lambda: a.rounds == 2)
    b.reached(lambda: b.rounds == 2)
    a.stop()
    b.stop()


def test_a_failure_that_cannot_be_recorded_does_not_end_the_service():
    """`_on_failure` writes where users see it (the catalog's job row): if that write fails too (the
    catalog busy), the service still backs off and retries rather than its thread dying silently."""

    class Unrecordable(Scripted):
        def _on_failure(self, e: Exception) -> None:
            super()._on_failure(e)
            raise OSError("catalog is busy")

    s = Unrecordable(RuntimeError("boom"), None)
    s.start()
    s.reached(lambda: s.failed == ["boom"])
    s.wake(retry=True)
    s.reached(lambda: s.rounds == 2)
    assert _stopped_within_deadline(s) and s.ended
