"""Bringing a relation's Delta log up to the catalog: the log files the catalog holds and the log
does not are added in one Delta version (`sync_log`), and the files retention forgot are removed
(`retire_delta`). The catalog alone says what is committed and sparkwave reads through its file
map; the Delta log is for readers outside sparkwave, a few epochs behind (`meta/delta_follower.py`
decides when). Every write holds the table's `log_lock`, and a dropped relation's table is closed
under it, so a DROP never races a commit into a folder it is removing."""

from __future__ import annotations

from sparkwave.core.crash import crash_point
from sparkwave.storage.store import Store


def sync_log(store: Store, name: str, since: int, upto: int) -> int | None:
    """Add relation `name`'s log files of epochs in `[since, upto]` that its Delta log lacks, as one
    Delta version, and record it in the catalog. Returns the version, or None if there was nothing
    to add (or the relation is gone: its files went with it)."""
    done = commit_pending(store, name, since, upto)
    if done is None:
        return None
    store.catalog.delta_recorded([done])
    return done[2]


def commit_pending(store: Store, name: str, since: int, upto: int) -> tuple[str, list[int], int] | None:
    """`sync_log` without the catalog's record, which the caller makes, for several relations at
    once: `(name, epochs, version)`. A record a crash loses is found again: the Delta log's
    transaction says it holds those epochs (`StoredTable.commit_logs`)."""
    rel = store.catalog.relation(name)
    if rel is None or rel.kind == "source":
        return None
    stored = store.stored(rel)
    with stored.log_lock:
        if stored.closed:
            return None
        pending = store.catalog.delta_pending(name, since, upto)  # read under the lock: one writer at a time
        if not pending:
            return None
        version = stored.commit_logs(pending)
    crash_point("mid_delta_sync")
    return name, [f.epoch for f in pending], version


def retire_delta(store: Store, name: str, keep: int) -> None:
    """Remove the files of epochs `<= keep`, which retention forgot, from relation `name`'s Delta log,
    then clear the catalog's note that this was still to do."""
    rel = store.catalog.relation(name)
    if rel is None:
        return
    stored = store.stored(rel)
    with stored.log_lock:
        if stored.closed:
            return
        stored.retire_log_files(keep)
    store.catalog.delta_retired(name, keep)
