"""The lag rule: how a creating job in its log-store phase is guaranteed to catch up with the main
graph, after the seed's `max_pending_epoch_lag`. One object, used by the job's checkpoints, by the
main graph's admission of a new epoch, and by `SHOW JOBS`.

**Lag** counts the main graph's epochs (planned or committed) after the epoch the job has consumed
up to, and the physical time between that epoch and the newest of them.

**Allowed lag.** The main graph may plan a new epoch only while `lag < allowed`. `allowed` starts at
the lag when the log-store phase begins; each checkpoint that consumes `k` epochs sets

    allowed := max(0, min(lag + 1, allowed - k / 2))

with `lag` as of that commit. So `allowed` falls by at least half an epoch per checkpoint and
reaches 0 after at most `2 * allowed` checkpoints: then the main graph waits until the job has
consumed everything and merges. Meanwhile the upstream advances at most one epoch per checkpoint
and at most half as many epochs as the job consumes, so the lag recorded at each checkpoint never
increases. A job that reads faster than the upstream writes catches up in a few checkpoints and
holds the main graph back for at most the last of them.

**Who may hold the main graph back.** Only a job running unthrottled, in its log-store phase, with
a live worker whose checkpoints are not failing. A rate-limited job (or a paused one) never does:
its limit slows the job, not the pipeline; it merges once its rate outpaces the upstream's. And
each epoch is held back at most `MAX_HOLD_SECONDS` (plus the barrier loop's one-second re-check):
then it is admitted anyway, so a job whose single checkpoint is slower than that cannot stall the
pipeline; it goes on catching up and the rule holds the next epoch again."""

from __future__ import annotations

from sparkwave.core.catalog import Catalog
from sparkwave.core.epoch import Lag, epoch_ms

MAX_HOLD_SECONDS = 10.0  # the longest the lag rule holds one epoch of the main graph back


class LagRule:
    @staticmethod
    def lag(catalog: Catalog, consumed: int) -> Lag:
        pending = catalog.epochs_between(consumed)
        if not pending:
            return Lag(0, 0)
        return Lag(len(pending), max(0, epoch_ms(pending[-1]) - epoch_ms(consumed)) if consumed else 0)

    @staticmethod
    def start(lag: Lag) -> float:
        """The allowed lag when a log-store phase begins (or resumes after a pause)."""
        return float(lag.epochs)

    @staticmethod
    def after_checkpoint(allowed: float | None, lag: Lag, consumed_epochs: int) -> float:
        previous = float(lag.epochs) if allowed is None else allowed
        return max(0.0, min(lag.epochs + 1, previous - consumed_epochs / 2))

    @staticmethod
    def holds(allowed: float, lag: Lag, held_for: float = 0.0) -> bool:
        """Whether the job holds the main graph back from planning another epoch, which it has held
        back for `held_for` seconds so far."""
        return lag.epochs >= allowed and held_for < MAX_HOLD_SECONDS
