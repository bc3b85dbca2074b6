"""Retention: what is kept, and the removal of everything else. delta-rs's cleanup ignores our
readers, so this is ours.

For each relation the oldest epoch anyone needs is the minimum of its pins and of
`committed - retention window`. The newest base at or below that epoch, `b`, is kept with every
newer base; older bases, and log files of epochs `<= b`, are removed (the log files also from
the Delta table's current version). Time travel then works for every epoch `>= b`."""

from __future__ import annotations

import os
import time

from sparkwave.core.catalog import Relation
from sparkwave.core.epoch import epoch_from_ms
from sparkwave.storage.store import Store


def needed_from(rt: Store, rel: Relation, retention_seconds: float) -> int:
    committed = rt.catalog.committed_epoch()
    window = epoch_from_ms(int((time.time() - retention_seconds) * 1000))
    needed = min(committed, window)
    pin = rt.catalog.min_pin(rel.name)
    return needed if pin is None else min(needed, pin)


def apply_retention(rt: Store, rel: Relation, retention_seconds: float) -> int:
    """Remove what no reader needs; returns the number of files removed."""
    needed = needed_from(rt, rel, retention_seconds)
    keep = rt.catalog.base_at(rel.name, needed)
    if keep is None:
        return 0
    stored = rt.stored(rel)
    removed = 0
    old_logs = [p for _, p in rt.catalog.log_files(rel.name, -1, keep.epoch)]
    rt.catalog.retire(rel.name, keep.epoch, max(keep.epoch, rel.created_epoch))
    stored.retire_log_files([p for p in old_logs if os.path.exists(p)])
    live = {os.path.basename(f) for b in rt.catalog.bases(rel.name) for f in b.files}
    for p in old_logs:
        rt.warehouse.remove_file(p)
        removed += 1
    for name in os.listdir(stored.base_path):
        if name.endswith(".parquet") and name not in live:
            rt.warehouse.remove_file(stored.base_path / name)
            removed += 1
    return removed
