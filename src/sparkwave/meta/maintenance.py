"""Maintenance: when to compact a relation's log into a new base, apply retention and checkpoint
its Delta tables, and prune the catalog's history, in a background thread of the owner (and on
demand), so that a long run keeps its per-epoch cost and its disk use flat."""

from __future__ import annotations

import logging

from sparkwave.core.catalog import Relation
from sparkwave.meta.locks import Locks
from sparkwave.meta.service import Backoff, Service
from sparkwave.meta.settings import Settings
from sparkwave.storage.compaction import compact
from sparkwave.storage.links import is_linked
from sparkwave.storage.retention import apply_retention
from sparkwave.storage.store import Store

log = logging.getLogger("sparkwave.maintenance")


class Maintenance(Service):
    def __init__(self, store: Store, locks: Locks, interval_s: float) -> None:
        # a failed pass is retried at the next interval, as a pass is
        super().__init__("sparkwave-compactor", backoff=Backoff(interval_s, interval_s), first_wait=interval_s)
        self.store = store
        self.locks = locks
        self.interval_s = interval_s

    def run(self, rel: Relation, epoch: int) -> bool:
        """Compact `rel` at `epoch` and apply retention; returns whether it compacted. Under the ddl
        lock, so that a DROP waits; retention also between two epochs, so that no epoch is reading
        the files it removes (lock order: ddl, then epoch; see meta/locks.py)."""
        if rel.kind == "source":  # stores nothing
            return False
        with self.locks.ddl:
            if self.store.catalog.relation(rel.name) is None:  # dropped meanwhile
                return False
            compacted = compact(self.store, rel, epoch)
            with self.locks.epoch:
                apply_retention(self.store, rel, Settings(self.store.catalog).retention_seconds)
                self.store.stored(rel).checkpoint()
        return compacted

    def _round(self) -> float:
        """One pass over every relation, then the catalog's history; the next in `interval_s`."""
        catalog = self.store.catalog
        threshold = Settings(catalog).compaction_epochs
        epoch = catalog.committed_epoch()
        for rel in catalog.relations(internal=True):
            if self.stopping:
                return self.interval_s
            base = catalog.base_at(rel.name, epoch)
            n = catalog.log_rows_since(rel.name, base.epoch if base else 0).files
            if n >= threshold or (base is not None and base.epoch < epoch and is_linked(base.files)):
                self.run(rel, epoch)  # a linked base: lookups wait for its sorted copy
        catalog.prune_history()
        return self.interval_s

    def _on_failure(self, e: Exception) -> None:
        log.exception("compaction failed; it will be retried")
