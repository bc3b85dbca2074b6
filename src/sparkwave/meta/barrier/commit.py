"""Committing an epoch: the catalog's commit of each changed relation's log file, the source offsets
and the bad records, which alone makes the epoch visible; then the tidying of what the epoch
consumed and the commit's listeners (`meta/pipeline.py`). The relations' Delta logs follow behind
(`meta/delta_follower.py`): the files are recorded as not in Delta yet and the follower is told; an
epoch commits only while Delta trails by fewer than `delta_lag_epochs` epochs. Named crash points
sit between the steps; a crash before the catalog commit is recovered by replaying the persisted
plan, one after it by the follower's catching up."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from sparkwave.core.catalog import NOT_IN_DELTA
from sparkwave.core.crash import crash_point
from sparkwave.meta.delta_follower import DeltaFollower
from sparkwave.meta.pipeline import Commit, CommitListener
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.settings import Settings
from sparkwave.storage.table import StagedLog
from sparkwave.stream.epoch_work import EpochWork


@dataclass
class EpochReport:
    epoch: int
    rows_in: int
    rows_out: dict[str, int]
    latency_ms: float
    step_ms: dict[str, float] = field(default_factory=dict)  # execute time per relation
    replayed: bool = False  # a persisted plan run again after a crash or a failed attempt


class Committer:
    def __init__(self, rt: Runtime, listeners: Sequence[CommitListener]) -> None:
        self.rt = rt
        self.listeners = tuple(listeners)
        self.delta = DeltaFollower(rt, lambda: Settings(rt.catalog).delta_lag_epochs)

    def start(self) -> None:
        self.delta.start()

    def close(self) -> None:
        """Stop the Delta follower and add what still waits: a closed warehouse's Delta logs hold
        every committed epoch."""
        self.delta.stop()
        self.delta.drain()

    def commit(self, e: EpochWork, pool: ThreadPoolExecutor, rows_in: int, t0: float,
               step_ms: dict[str, float]) -> EpochReport:
        """Commit the executed epoch `e`, tidy up, and tell the listeners (`pool`: unused since the
        Delta commits left the epoch)."""
        self.delta.hold(Settings(self.rt.catalog).delta_lag_epochs - 1)
        sources = {r.name for r in e.relations if r.kind == "source"}
        changed = [name for name, chunk in e.chunks.items()  # a source's rows are not kept
                   if chunk is not None and chunk.num_rows > 0 and name not in sources]
        logs = [(name, *self._log_file(name, e.epoch, e.chunks[name])) for name in changed]
        crash_point("before_catalog_commit")
        names = {r.name for r in e.relations}  # a source dropped since the plan keeps no offsets
        offsets = {rel: {s: end for s, (_, end) in splits.items()}
                   for rel, splits in e.plan.get("sources", {}).items() if rel in names}
        latency = (time.time() - t0) * 1000
        self.rt.catalog.commit_epoch(e.epoch, logs, offsets, rows_in, latency, e.bad.rows, e.bad.counts,
                                     e.moved_watermarks, e.late, e.judged)
        committed_at = time.time()
        crash_point("after_catalog_commit")
        self.delta.committed(e.epoch, changed)
        for name in sources:
            self.rt.warehouse.remove_file(self.rt.stored(self.rt.relation(name)).log_file_path(e.epoch))
        self._forget_consumed_dml()  # before waking flush(): what it waited for is committed and tidied
        commit = Commit(e.epoch, e.chunks, t0, committed_at, rows_in)
        for listener in self.listeners:  # before waking flush(): a coupled sink has the epoch when it returns
            listener.on_commit(commit)
        return EpochReport(e.epoch, rows_in, {r: n for r, _, n, _ in logs}, latency, step_ms)

    def _log_file(self, name: str, epoch: int, rows: pa.Table | StagedLog | None) -> tuple[str, int, int]:
        """The relation's staged log file of `epoch` as the catalog records it: (path, rows, NOT_IN_DELTA).
        The rows are the step's (a file written from them holds as many)."""
        staged = self.rt.stored_of(name).staged(epoch, rows.num_rows if rows is not None else None)
        crash_point("mid_commit")  # some of the epoch's files gathered, the catalog not committed
        return staged.path, staged.num_rows, NOT_IN_DELTA

    def _forget_consumed_dml(self) -> None:
        consumed = self.rt.catalog.consumed_dml()
        for _, path in consumed:
            self.rt.warehouse.remove_file(path)
        if consumed:
            self.rt.catalog.forget_dml([i for i, _ in consumed])
