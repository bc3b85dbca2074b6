"""A state table's base linked from another relation's files: the rows of an append-only table as
of an epoch, which a join side keeps as they are (`stream/table_side.py`), are the table's base
and log files of that snapshot. A backfill hard-links them into the state's base folder instead of
writing a copy: the state owns its links (removing one, by retention or DROP, leaves the table's
file), and a copied warehouse copies them as files. Where the folder cannot hold a hard link, the
file is copied, which is still cheaper than writing the rows again.

The linked files are in the table's order, not sorted by the state's key, and may hold columns the
state does not keep (readers select the state's columns by name) and rows with a NULL join key
(which never match). So the first compaction of the state is due at once (`is_linked`): it writes
the copy sorted by key that lookups prune row groups by. A table too big for that is not linked
(`policy.links_base`)."""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from sparkwave.core import policy
from sparkwave.core.catalog import Relation
from sparkwave.storage.store import Store
from sparkwave.storage.table import attempt_names

__all__ = ["LINKED", "Linked", "is_linked", "link_base_files", "small_enough_to_link"]

LINKED = "linked-"  # the name every linked base file starts with


@dataclass(frozen=True)
class Linked:
    """A state table's rows as `relation`'s snapshot files at `epoch` (a build's table, in place of
    a frame of rows)."""

    relation: str
    epoch: int


def link_base_files(rt: Store, rel: Relation, linked: Linked, staging_name: str,
                    prefix: str) -> tuple[list[str], list[int]]:
    """Link the files of `linked` into `rel`'s base folder as `linked-<prefix><attempt>-<i>.parquet`, through a
    staging folder (a crash leaves whole files or none), like `compaction.write_base_files`. An
    append-only table's log files hold inserts only (DML refuses the rest): they are rows as they
    are. The files are not part of any base until committed. The caller holds the snapshot (a creating
    job's pin on it); a file that the table's retention removed meanwhile (the table compacted at
    that very epoch) fails the link, and the chunk, retried, lists the files again."""
    source = rt.relation(linked.relation)
    assert source.schema.append_only and source.kind != "source", f"BUG: {source.name}'s files are not its rows"
    rt.check_retained(source, linked.epoch)
    base = rt.catalog.base_at(source.name, linked.epoch)
    paths = [*(base.files if base else []),
             *(p for _, p in rt.catalog.log_files(source.name, base.epoch if base else 0, linked.epoch))]
    stored = rt.stored(rel)
    stored.create()
    staging_name, prefix = attempt_names(staging_name, prefix)
    staging = stored.base_path / staging_name
    staging.mkdir(parents=True)
    try:  # a failed attempt leaves no staging folder
        files, rows = [], []
        for i, path in enumerate(paths):
            meta = pq.ParquetFile(path).metadata
            if meta.num_rows == 0:
                continue
            name = f"{LINKED}{prefix}{i}.parquet"
            _link(Path(path), staging / name)
            dest = stored.base_path / name
            os.replace(staging / name, dest)
            files.append(str(dest))
            rows.append(meta.num_rows)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return files, rows


def small_enough_to_link(rt: Store, relation: str, epoch: int) -> bool:
    """Whether a backfill at `epoch` links `relation`'s files rather than write a sorted copy: its
    snapshot is small enough (`policy.links_base`), its rows counted exactly from the catalog (an append-only
    table's files hold only inserts), so every chunk of the backfill, and a restart, decide alike."""
    base = rt.catalog.base_at(relation, epoch)
    logged = sum(n for _, n in rt.catalog.log_file_rows(relation, base.epoch if base else 0, epoch))
    return policy.links_base((base.rows if base else 0) + logged)


def _link(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError as e:
        if e.errno not in _NO_HARD_LINK:
            raise  # a file retention removed meanwhile fails the chunk, which is retried
        shutil.copyfile(source, dest)


# a folder on another device, one that holds no hard links, or a file with too many
_NO_HARD_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


def is_linked(files: list[str]) -> bool:
    """Whether a base is (partly) linked files, which its first compaction replaces by a sorted copy."""
    return any(os.path.basename(f).startswith(LINKED) for f in files)
