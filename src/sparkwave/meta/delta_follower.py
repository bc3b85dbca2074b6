"""The Delta follower: the relations' Delta logs follow the catalog, a few epochs behind it.

An epoch is committed by the catalog alone (`meta/barrier/commit.py`), and sparkwave reads through
the catalog's file map, never a Delta log; the logs are for readers outside sparkwave. So the
barrier loop does not wait for Delta: it records each changed relation's log file as not yet in
Delta (`NOT_IN_DELTA`) and tells the follower, a `Service` thread that adds each relation's waiting
files, all its pending epochs at once, as ONE Delta version tagged with the newest of them
(`storage/delta_log.py`), then records the version in the catalog.

- **When**: once `group` epochs wait (half the bound `lag_epochs`, the setting `delta_lag_epochs`),
  or the oldest has waited `MAX_DELAY_SECONDS` (an idle pipeline's Delta logs catch up), or at once
  when someone waits for it (the bound, a drain).
- **The bound**: before the catalog commits an epoch, the barrier loop waits (`hold`) until at most
  `lag_epochs - 1` committed epochs wait for Delta, so a Delta reader is never more than
  `lag_epochs` epochs behind the catalog. A follower that keeps failing stops the pipeline there
  with its error (the loop retries), rather than letting the lag grow without end.
- **After a crash**: what the catalog committed and Delta lacks is in the catalog (`NOT_IN_DELTA`),
  read by the first round (`_load`) and committed at once, beside the barrier loop; a Delta commit
  whose catalog record a crash lost is found by its transaction (`commit_logs`) and recorded, never
  made twice. Retention's cuts a crash left unapplied to a Delta log are applied too.
- **close()**: the thread stops after its round, then `drain` adds everything still waiting, so a
  closed warehouse's Delta logs hold every committed epoch."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sparkwave.core.errors import PipelineError
from sparkwave.meta.service import Backoff, Service, error_text
from sparkwave.storage.delta_log import commit_pending, retire_delta, sync_log
from sparkwave.storage.store import Store

log = logging.getLogger("sparkwave.delta")
MAX_DELAY_SECONDS = 5.0  # the longest a committed epoch's log files wait for a group to fill


class DeltaFollower(Service):
    """Commits the catalog's log files to the relations' Delta logs behind the barrier loop.
    `lag_epochs()`: the bound K (read per epoch: `SET delta_lag_epochs` applies at the next)."""

    def __init__(self, store: Store, lag_epochs: Callable[[], int]) -> None:
        super().__init__("sparkwave-delta-follower", backoff=Backoff(0.2, 5.0))
        self.store = store
        self.lag_epochs = lag_epochs
        # Under `bell.cond`: committed epochs whose files some Delta log lacks (-> when committed),
        # and each relation's oldest and newest such epoch.
        self._behind: dict[int, float] = {}
        self._oldest: dict[str, int] = {}
        self._newest: dict[str, int] = {}
        self._loaded = False
        self._urgent = False  # someone waits: commit now, whatever the group's size

    # --- from the barrier loop ------------------------------------------------------------------
    def committed(self, epoch: int, relations: list[str]) -> None:
        """The catalog committed `epoch` with log files of `relations` that no Delta log holds yet."""
        if not relations:
            return
        group = self._group()
        with self.bell.cond:
            self._behind[epoch] = time.time()
            for name in relations:
                self._oldest.setdefault(name, epoch)
                self._newest[name] = epoch
            wake = len(self._behind) in (1, group)  # the first starts the delay's clock
        if wake:
            self.wake()

    @property
    def lag(self) -> int:
        """Committed epochs with log files some Delta log lacks (as far as this process knows)."""
        with self.bell.cond:
            return len(self._behind)

    def hold(self, limit: int) -> None:
        """Return once at most `limit` committed epochs wait for Delta (the barrier loop, before a
        catalog commit). Raises if the follower fails meanwhile: the epoch is retried later."""
        with self.bell.cond:
            if len(self._behind) <= limit:
                return
            if self.alive() and not self.stopping:
                failures = self.failures
                self._urgent = True
                self.bell.rings += 1
                self.bell.cond.notify_all()
                while not self.bell.cond.wait_for(lambda: len(self._behind) <= limit or self.failures > failures
                                                  or self.stopping, timeout=1.0):
                    if not self.alive():  # its thread died without a stop: commit here, below
                        break
                if len(self._behind) <= limit:
                    return
                if not self.stopping and self.alive():
                    raise PipelineError(f"the relations' Delta logs are {len(self._behind)} epochs behind the "
                                        f"catalog, as far as delta_lag_epochs = {limit + 1} lets them fall, and "
                                        f"committing to them fails: {self.error}") from self.error
        self.drain()  # driven by hand, or stopped: commit here

    def drain(self) -> None:
        """Add every file still waiting to its Delta log, on the caller's thread (close, a test, a
        stopped follower). Raises the first failure, after trying every relation."""
        self._load()
        self._sync()

    # --- on the service's thread --------------------------------------------------------------
    def _round(self) -> float | None:
        self._load()
        group = self._group()
        with self.bell.cond:
            if not self._behind:
                return None
            waited = time.time() - min(self._behind.values())
            if not (self._urgent or len(self._behind) >= group or waited >= MAX_DELAY_SECONDS):
                return MAX_DELAY_SECONDS - waited
            self._urgent = False
        self._sync()
        return 0.0  # epochs committed meanwhile may already fill a group

    def _on_failure(self, e: Exception) -> None:
        log.exception("committing log files to Delta failed; retried after a backoff")
        with self.bell.cond:
            self.bell.cond.notify_all()  # a `hold` waiting for this round gives up

    # --- the work ---------------------------------------------------------------------------------
    def _group(self) -> int:
        return max(1, (self.lag_epochs() + 1) // 2)

    def _load(self) -> None:
        """Once: what the catalog committed and no Delta log holds (a crash came first), and the
        retention cuts it left unapplied to Delta logs."""
        if self._loaded:
            return
        backlog = self.store.catalog.delta_backlog()
        with self.bell.cond:
            for name, epoch in backlog:
                self._behind.setdefault(epoch, 0.0)  # due at once
                self._oldest[name] = min(epoch, self._oldest.get(name, epoch))
                self._newest[name] = max(epoch, self._newest.get(name, epoch))
        for name, keep in self.store.catalog.delta_retires().items():
            sync_log(self.store, name, -1, keep)  # never a RemoveAction for a file the log was not given
            retire_delta(self.store, name, keep)
        self._loaded = True

    def _sync(self) -> None:
        """Commit every relation's files of the epochs waiting now, one Delta version per relation."""
        with self.bell.cond:
            if not self._behind:
                return
            upto = max(self._behind)
            todo = list(self._oldest.items())
        error: Exception | None = None
        done: list[tuple[str, list[int], int]] = []
        synced = []
        for name, since in todo:
            try:
                if (one := commit_pending(self.store, name, since, upto)) is not None:
                    done.append(one)
            except Exception as e:  # the others still get theirs; this one is retried
                if error is None:
                    error = PipelineError(f"committing log files of {name!r} to its Delta log failed: {error_text(e)}")
                    error.__cause__ = e
                continue
            synced.append(name)
        if done:  # one catalog transaction for the round (a crash before it: `commit_logs` finds them)
            self.store.catalog.delta_recorded(done)
        with self.bell.cond:
            for name in synced:
                newest = self._newest.get(name)
                if newest is not None and newest <= upto:
                    del self._oldest[name], self._newest[name]
                elif newest is not None:  # committed again meanwhile, after `upto`
                    self._oldest[name] = upto + 1
                # (None: a drain on another thread did it)
        if error is not None:
            raise error
        with self.bell.cond:
            for epoch in [e for e in self._behind if e <= upto]:
                del self._behind[epoch]
            self.bell.cond.notify_all()  # a `hold` may go on
