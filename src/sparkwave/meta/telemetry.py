"""The main graph's recent history, for the dashboard and `/metrics`: each committed epoch of the
last `WINDOW_SECONDS` (its latency from barrier to catalog commit, its input rows, each relation's
change rows) and each failed attempt with the relation it names; plus totals since the session
opened (epochs committed and failed, rows per relation, the latency histogram's buckets), which
Prometheus' counters need and a window cannot give.

`Telemetry` is a commit listener and a failure listener of the barrier loop (`meta/pipeline.py`):
it is written on the loop's thread only and read from any thread, each read a consistent copy taken
under one lock, so a scrape's epoch count and histogram count always agree. It keeps the totals
itself rather than in `prometheus_client` objects: the meta layer stays free of the exposition, and
the histogram counts every epoch since the session opened, not since the first scrape."""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sparkwave.meta.barrier.failures import RelationFailed
from sparkwave.meta.pipeline import Commit

WINDOW_SECONDS = 15 * 60.0  # how long epochs and failures are kept
MAX_EPOCHS = 20_000  # and at most this many epochs (a 50 ms barrier for 15 minutes), whatever the clock says
MAX_FAILURES = 1_000
RATE_SECONDS = 10.0  # rows/s is measured over the epochs committed in this recent window
# The epoch-latency histogram's upper bounds, in seconds (Prometheus' `le`), then +Inf.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True)
class EpochSample:
    """One committed epoch of the main graph."""

    epoch: int
    started_at: float  # when its barrier started (seconds since the Unix epoch)
    committed_at: float  # when the catalog made it visible
    latency_seconds: float  # barrier start -> catalog commit
    rows_in: int  # the input rows it took (sources' and staged DML)
    rows: dict[str, int]  # each relation's change rows (a source's: the rows it read); unchanged ones absent


@dataclass(frozen=True)
class EpochFailure:
    """A failed attempt of an epoch; `relation` is the one it failed at, when it failed executing one."""

    at: float
    error: str
    relation: str | None = None
    kind: str | None = None  # the relation's: 'table' | 'source' | 'mv'
    epoch: int | None = None


@dataclass(frozen=True)
class Totals:
    """Since the session opened."""

    committed: int
    failed: int
    latency_sum: float
    latency_counts: tuple[int, ...]  # epochs per latency bucket (not cumulative), LATENCY_BUCKETS then +Inf
    rows_in: int  # input rows the epochs took
    rows: dict[str, int]  # change rows per relation

    def cumulative(self) -> list[tuple[float, int]]:
        """The histogram as Prometheus writes it: (upper bound, epochs at most that slow), ending at +Inf."""
        out, running = [], 0
        for bound, n in zip((*LATENCY_BUCKETS, math.inf), self.latency_counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass
class _Running:
    committed: int = 0
    failed: int = 0
    latency_sum: float = 0.0
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    rows_in: int = 0
    rows: dict[str, int] = field(default_factory=dict)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank `q`-quantile (0 < q <= 1) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _rows(chunk: object) -> int | None:
    n = getattr(chunk, "num_rows", None)  # an Arrow table, or a big epoch's `StagedLog`
    return int(n) if n is not None else None


class Telemetry:
    """The recent epochs and failures of the main graph, and totals since it started (see the module)."""

    def __init__(self, clock: Callable[[], float] = time.time, window_seconds: float = WINDOW_SECONDS,
                 max_epochs: int = MAX_EPOCHS) -> None:
        self.clock = clock
        self.window_seconds = window_seconds
        self.started_at = clock()
        self._lock = threading.Lock()
        self._epochs: deque[EpochSample] = deque(maxlen=max_epochs)
        self._failures: deque[EpochFailure] = deque(maxlen=MAX_FAILURES)
        self._totals = _Running()

    # --- written on the barrier loop's thread ---------------------------------------------------
    def on_commit(self, commit: Commit) -> None:
        committed_at = commit.committed_at or self.clock()
        latency = max(0.0, committed_at - commit.started_at) if commit.started_at else 0.0
        rows = {name: n for name, chunk in commit.chunks.items() if (n := _rows(chunk))}
        sample = EpochSample(commit.epoch, commit.started_at or committed_at, committed_at, latency, commit.rows_in,
                             rows)
        with self._lock:
            self._epochs.append(sample)
            t = self._totals
            t.committed += 1
            t.latency_sum += latency
            t.latency_counts[bisect.bisect_left(LATENCY_BUCKETS, latency)] += 1
            t.rows_in += commit.rows_in
            for name, n in rows.items():
                t.rows[name] = t.rows.get(name, 0) + n
            self._prune(committed_at)

    def on_failure(self, error: Exception) -> None:
        text = (str(error).strip().splitlines() or [type(error).__name__])[0][:500]
        failure = (EpochFailure(self.clock(), text, error.relation, error.kind, error.epoch)
                   if isinstance(error, RelationFailed) else EpochFailure(self.clock(), text))
        with self._lock:
            self._failures.append(failure)
            self._totals.failed += 1
            self._prune(failure.at)

    def _prune(self, now: float) -> None:
        horizon = now - self.window_seconds
        while self._epochs and self._epochs[0].committed_at <= horizon:
            self._epochs.popleft()
        while self._failures and self._failures[0].at <= horizon:
            self._failures.popleft()

    # --- read from any thread -------------------------------------------------------------------
    def epochs(self, since: float | None = None) -> list[EpochSample]:
        """The kept epochs committed after `since` (default: the window's start), oldest first."""
        horizon = (self.clock() - self.window_seconds) if since is None else since
        with self._lock:
            return [s for s in self._epochs if s.committed_at > horizon]

    def failures(self) -> list[EpochFailure]:
        """The failed attempts of the window, oldest first."""
        horizon = self.clock() - self.window_seconds
        with self._lock:
            return [f for f in self._failures if f.at > horizon]

    def last(self) -> EpochSample | None:
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    def totals(self) -> Totals:
        with self._lock:
            t = self._totals
            return Totals(t.committed, t.failed, t.latency_sum, tuple(t.latency_counts), t.rows_in, dict(t.rows))

    def latency_percentiles(self, *qs: float) -> list[float | None]:
        """Epoch latency quantiles (seconds) over the window, one per `q`."""
        latencies = [s.latency_seconds for s in self.epochs()]
        return [percentile(latencies, q) for q in qs]

    def rows_per_second(self, now: float | None = None) -> dict[str, float]:
        """Each relation's change rows per second over the epochs of the last `RATE_SECONDS` (over
        less while the session is younger than that)."""
        now = self.clock() if now is None else now
        span = max(1e-3, min(RATE_SECONDS, now - self.started_at))
        totals: dict[str, int] = {}
        for s in self.epochs(since=now - RATE_SECONDS):
            for name, n in s.rows.items():
                totals[name] = totals.get(name, 0) + n
        return {name: n / span for name, n in totals.items()}
