"""Retention: what is kept, and the removal of everything else. delta-rs's cleanup ignores our
readers, so this is ours.

For each relation the oldest epoch anyone needs is the minimum of its pins and of the epoch that
was current `retention_seconds` ago: an epoch stays readable for that long after it is superseded,
measured by the wall time recorded at each commit (`Catalog.committed_by`), not by the epochs'
numbers, which a forward clock jump leaves stamped in the future. The newest base at or below that
epoch, `b`, is kept with every newer base; older bases, and log files of epochs `<= b`, are removed
(the log files also from the Delta table's current version). Time travel then works for every
epoch `>= b`.

The Delta log is kept in step in this order, each step safe to crash after: the log gets every file
of the cut the catalog holds and it lacks (`sync_log`: never a RemoveAction for a file it was never
given), the catalog forgets the files (and notes the cut for the Delta log), the Delta log drops them
(`retire_delta`, from its own list of files, so a repeat finds them gone; the follower finishes a
cut a crash left noted), and only then are the files deleted: a Delta reader never meets a
missing file."""

from __future__ import annotations

import os
import time

from sparkwave.core.catalog import Relation
from sparkwave.core.crash import crash_point
from sparkwave.storage import key_index
from sparkwave.storage.delta_log import retire_delta, sync_log
from sparkwave.storage.store import Store
from sparkwave.storage.table import log_file_epoch


def needed_from(rt: Store, rel: Relation, retention_seconds: float) -> int:
    current = rt.catalog.committed_by(time.time() - retention_seconds)
    needed = -1 if current is None else current  # none committed that long ago: every epoch is needed
    pin = rt.catalog.min_pin(rel.name)
    return needed if pin is None else min(needed, pin)


def apply_retention(rt: Store, rel: Relation, retention_seconds: float) -> int:
    """Remove what no reader needs; returns the number of files removed. The catalog forgets files
    before they are removed, so a crash in between leaves files no one references: each run also
    sweeps those (a log file of an epoch at or below the cut, a base file of no base, the staging
    folder of a compaction or backfill chunk that crashed), so none is left for good."""
    needed = needed_from(rt, rel, retention_seconds)
    keep = rt.catalog.base_at(rel.name, needed)
    if keep is None:
        return 0
    stored = rt.stored(rel)
    sync_log(rt, rel.name, -1, keep.epoch)
    rt.catalog.retire(rel.name, keep.epoch, max(keep.epoch, rel.created_epoch))
    crash_point("retention_after_catalog")
    retire_delta(rt, rel.name, keep.epoch)
    crash_point("retention_after_delta")
    live_logs = {os.path.basename(p) for _, p in rt.catalog.log_files(rel.name, -1, keep.epoch)}
    live = {os.path.basename(f) for b in rt.catalog.bases(rel.name) for f in b.files}
    live |= stored.base_file_names()  # a base committed to Delta by a crashed attempt is adopted by the next
    removed = 0
    fs = rt.warehouse.fs
    for name in fs.list(stored.log_path):
        epoch = log_file_epoch(name)
        if epoch is not None and epoch <= keep.epoch and name not in live_logs or _staging_epoch(name) <= keep.epoch:
            rt.warehouse.remove_file(stored.log_path / name)
            removed += 1
    for name in fs.list(stored.base_path):
        if (name.endswith(".parquet") and name not in live) or name.startswith(("_staging_", "_backfill_")):
            rt.warehouse.remove_file(stored.base_path / name)
            removed += 1
    # Lookups read the newest base only (as of the previous epoch): older bases keep no index.
    bases = rt.catalog.bases(rel.name)
    indexed = {os.path.basename(f) for f in bases[-1].files} if bases else set()
    indexes = stored.root / "index"
    for name in fs.list(indexes):
        if name.endswith(".tmp") or name.removesuffix(".arrow") + ".parquet" not in indexed:
            key_index.forget(indexes / name)
            rt.warehouse.remove_file(indexes / name)
            removed += 1
    return removed


def _staging_epoch(name: str) -> float:
    """The epoch of a big epoch's staging folder (`_staging_e<epoch>-<writer>`, or `_staging_e<epoch>`
    of an earlier release, left by a crash), else inf."""
    rest = name.removeprefix("_staging_e").split("-", 1)[0]
    return int(rest) if rest != name and rest.isdigit() else float("inf")

