"""Committing an epoch: each changed relation's log as one Delta version tagged
`Transaction(app, epoch)` (skipped if Delta already holds it; the relations' commits at once), then
the catalog's commit with the source offsets, which alone makes the epoch visible; then the tidying
of what the epoch consumed and the commit's listeners (`meta/pipeline.py`). Named crash points sit
between the steps; a crash anywhere is recovered by replaying the persisted plan."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sparkwave.core.crash import crash_point
from sparkwave.meta.pipeline import Commit, CommitListener
from sparkwave.meta.runtime import Runtime
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

    def commit(self, e: EpochWork, pool: ThreadPoolExecutor, rows_in: int, t0: float,
               step_ms: dict[str, float]) -> EpochReport:
        """Commit the executed epoch `e` (its logs on `pool`), tidy up, and tell the listeners."""
        sources = {r.name for r in e.relations if r.kind == "source"}
        changed = [name for name, chunk in e.chunks.items()  # a source's rows are not kept
                   if chunk is not None and chunk.num_rows > 0 and name not in sources]
        logs = list(pool.map(lambda name: (name, *self._commit_log(name, e.epoch)), changed))
        crash_point("before_catalog_commit")
        names = {r.name for r in e.relations}  # a source dropped since the plan keeps no offsets
        offsets = {rel: {s: end for s, (_, end) in splits.items()}
                   for rel, splits in e.plan.get("sources", {}).items() if rel in names}
        latency = (time.time() - t0) * 1000
        self.rt.catalog.commit_epoch(e.epoch, logs, offsets, rows_in, latency, e.bad.rows, e.bad.counts)
        committed_at = time.time()
        for name in sources:
            self.rt.warehouse.remove_file(self.rt.stored(self.rt.relation(name)).log_file_path(e.epoch))
        self._forget_consumed_dml()  # before waking flush(): what it waited for is committed and tidied
        commit = Commit(e.epoch, e.chunks, t0, committed_at, rows_in)
        for listener in self.listeners:  # before waking flush(): a coupled sink has the epoch when it returns
            listener.on_commit(commit)
        return EpochReport(e.epoch, rows_in, {r: n for r, _, n, _ in logs}, latency, step_ms)

    def _commit_log(self, name: str, epoch: int) -> tuple[str, int, int]:
        out = self.rt.stored(self.rt.relation(name)).commit_log(epoch)
        crash_point("mid_commit")
        return out

    def _forget_consumed_dml(self) -> None:
        consumed = self.rt.catalog.consumed_dml()
        for _, path in consumed:
            self.rt.warehouse.remove_file(path)
        if consumed:
            self.rt.catalog.forget_dml([i for i, _ in consumed])
