"""Parts of committed Parquet files kept decoded in memory, for the lookups of every epoch.

A state lookup (an aggregate's groups, a join side's rows) reads the row groups of the state's base
that may hold its keys, then overlays every log file since the last compaction: with an epoch a
second and a compaction every few dozen epochs, the same row groups and log files are decoded, and
their pages' checksums verified, again by every lookup of every epoch, for each of an MV's state
tables. A committed file never changes (a name reused by a retried write has another size or time,
which the key holds), so each part is decoded and verified once and kept here, in a bounded
least-recently-used map: the epochs' lookups then filter rows already in memory. A log file this
process writes is kept as it is written (`remember`), so it is never decoded at all. A part bigger
than a quarter of the budget is not kept (a big epoch's log is read once, by Arrow's scan)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import pyarrow as pa
import pyarrow.parquet as pq

from sparkwave.storage.file_index import FileIndex
from sparkwave.storage.integrity import scan

BUDGET_BYTES = 256 << 20  # decoded bytes kept, for all relations of the process (the driver's memory)
WHOLE = -1  # the part that is a whole file

_Key = tuple[str, int, int, int]  # (path, size, mtime_ns, row group or WHOLE)
_lock = threading.Lock()
_kept: OrderedDict[_Key, pa.Table] = OrderedDict()
_size = 0


def read_logs(files: list[str], schema: pa.Schema) -> pa.Table:
    """The rows of the log `files`, as `schema`, checksums verified once per file."""
    parts = []
    for path in files:
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns, WHOLE)
        rows = _get(key, schema)
        if rows is None:
            rows = scan([path], schema, None)
            _keep(key, rows)
        parts.append(rows)
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def remember(path: str, rows: pa.Table) -> None:
    """Keep the rows just written as the log file `path` (as its log schema): the next epoch's
    lookups overlay them without decoding the file."""
    st = os.stat(path)
    _keep((path, st.st_size, st.st_mtime_ns, WHOLE), rows)


def read_groups(index: FileIndex, groups: list[int] | None, schema: pa.Schema) -> pa.Table:
    """Row groups `groups` of an indexed file (None: all of them), as `schema`, each decoded once."""
    st = os.stat(index.path)
    wanted = list(range(index.metadata.num_row_groups)) if groups is None else groups
    if not wanted:
        return schema.empty_table()
    keys = [(index.path, st.st_size, st.st_mtime_ns, g) for g in wanted]
    found = {k[3]: t for k in keys if (t := _get(k, schema)) is not None}
    missing = [g for g in wanted if g not in found]
    if missing:
        f = pq.ParquetFile(index.path, metadata=index.metadata, page_checksum_verification=True)
        for g in missing:  # one at a time: each kept part owns its buffers, so evicting it frees them
            found[g] = f.read_row_group(g).select(schema.names).cast(schema)
            _keep((index.path, st.st_size, st.st_mtime_ns, g), found[g])
    parts = [found[g] for g in wanted]
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def _get(key: _Key, schema: pa.Schema) -> pa.Table | None:
    with _lock:
        rows = _kept.get(key)
        if rows is None:
            return None
        _kept.move_to_end(key)
    return rows if rows.schema == schema else None


def _keep(key: _Key, rows: pa.Table) -> None:
    global _size
    size = rows.nbytes
    if size > BUDGET_BYTES // 4:
        return
    with _lock:
        old = _kept.pop(key, None)
        _size += size - (old.nbytes if old is not None else 0)
        _kept[key] = rows
        while _size > BUDGET_BYTES and _kept:
            _, dropped = _kept.popitem(last=False)
            _size -= dropped.nbytes
