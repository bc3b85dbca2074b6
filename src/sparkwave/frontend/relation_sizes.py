"""How many rows a relation (or an operator state table) holds at the committed epoch and how many
bytes its files take, for the dashboard and `/metrics`, without Spark and without reading a row.

Rows: the base's row count (the catalog's) plus, per log file of `(base, epoch]`, its inserts less
its deletes (an update nets to zero), as `storage/snapshot.py: vnode_rows` counts them. A log file
never changes once committed, so its net count is read once (its `_op` column alone) and kept, for
at most `CACHED_FILES` files; an append-only relation's log needs no read at all (the catalog has
each file's rows). Bytes: the sizes of the base's files and those log files, as the filesystem
reports them now. A file retention removed meanwhile counts as nothing rather than fail a page."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow.compute as pc

from sparkwave.core.catalog import Catalog, Relation
from sparkwave.core.chunk import Op
from sparkwave.storage.integrity import read_table

CACHED_FILES = 50_000


@dataclass(frozen=True)
class Size:
    rows: int
    bytes: int


def _file_bytes(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class RelationSizes:
    """Sizes per relation, remembered per committed epoch (a dashboard polling twice a second reads
    the catalog once an epoch) and net rows per log file."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._lock = threading.Lock()
        self._net: OrderedDict[str, int] = OrderedDict()  # log file -> inserts less deletes
        self._sizes: dict[str, Size] = {}
        self._epoch = -1  # of `_sizes`

    def size(self, rel: Relation, epoch: int) -> Size:
        """`rel`'s rows and bytes as of `epoch` (the committed one: older epochs are not remembered)."""
        with self._lock:
            if epoch != self._epoch:
                self._sizes, self._epoch = {}, epoch
            if (known := self._sizes.get(rel.name)) is not None:
                return known
        size = self._measure(rel, epoch)
        with self._lock:
            if epoch == self._epoch:
                self._sizes[rel.name] = size
        return size

    def _measure(self, rel: Relation, epoch: int) -> Size:
        if rel.kind == "source":  # stores nothing
            return Size(0, 0)
        base = self.catalog.base_at(rel.name, epoch)
        after = base.epoch if base else 0
        rows = base.rows if base else 0
        size = sum(_file_bytes(f) for f in base.files) if base else 0
        if rel.schema.append_only:
            rows += sum(r.rows for r in self.catalog.log_file_rows(rel.name, after, epoch))
            return Size(rows, size + sum(_file_bytes(f.path) for f in self.catalog.log_files(rel.name, after, epoch)))
        for f in self.catalog.log_files(rel.name, after, epoch):
            rows += self._net_rows(f.path)
            size += _file_bytes(f.path)
        return Size(rows, size)

    def _net_rows(self, path: str) -> int:
        with self._lock:
            if (n := self._net.get(path)) is not None:
                self._net.move_to_end(path)
                return n
        try:
            ops = read_table(path, columns=["_op"])["_op"]
        except OSError:  # retention removed it after the listing: a newer base holds its rows
            return 0
        n = int(pc.sum(pc.equal(ops, int(Op.INSERT))).as_py() or 0) - \
            int(pc.sum(pc.equal(ops, int(Op.DELETE))).as_py() or 0)
        with self._lock:
            self._net[path] = n
            while len(self._net) > CACHED_FILES:
                self._net.popitem(last=False)
        return n
