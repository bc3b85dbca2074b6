"""Key indexes of table bases: an upsert's old-row lookup reads the rows of its keys only.

A table's base files are Parquet in large row groups, which Spark scans fast, but 1k random keys
land in every row group, so a lookup pruned by row-group statistics still read the whole base
(10M rows: about 0.9 s per epoch). Beside each base file of a keyed table, compaction writes the
same rows in the same (vnode, key) order as an uncompressed Arrow IPC file, `index/<file>.arrow`.
The driver memory-maps it: a lookup finds the vnode's rows (the file is sorted by vnode), binary-
searches the first key column within them and takes the matching rows, so it touches only the pages
of those rows (1k keys in 10M rows: under 10 ms). The price is disk: uncompressed, the index is
about 3.7x the size of its Parquet file.

An index is a cache of its Parquet file: it records that file's size and row count and is used only
while they match; a missing, stale or unreadable index sends the lookup to the Parquet file."""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from sparkwave.core.chunk import VNODES
from sparkwave.core.schema import Schema

_SOURCE = b"sparkwave.parquet"  # "<size> <rows>" of the Parquet file the index was built from
_BOUNDS = b"sparkwave.vnodes"  # int64 row offsets of vnodes 0..VNODES, so opening reads no column
_CACHED = 256  # open indexes kept memory-mapped (address space only: pages are the OS's cache)


def index_path(base_file: str | os.PathLike[str]) -> Path:
    """`<relation>/base/<name>.parquet` -> `<relation>/index/<name>.arrow`, outside the Delta table."""
    p = Path(base_file)
    return p.parent.parent / "index" / (p.stem + ".arrow")


def indexable(schema: Schema) -> bool:
    """Whether lookups by `schema`'s key can use an index: a keyed, updatable table whose first key
    column orders the same in Spark's sort and Arrow's search (integers, strings, dates, timestamps)."""
    first = schema.column(schema.key[0]) if schema.key else None
    if schema.append_only or first is None:
        return False
    t = first.type.arrow
    return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_date(t) or pa.types.is_timestamp(t))


def _source_stamp(base_file: str) -> bytes:
    return f"{os.path.getsize(base_file)} {pq.read_metadata(base_file).num_rows}".encode()


def build(base_file: str) -> None:
    """Write `base_file`'s index (a sorted Parquet file `| _vnode | columns |`), one row group at a
    time, through a temporary file of its own: a crash leaves no index or a whole one. Runs on an
    executor."""
    out = index_path(base_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{uuid.uuid4().hex}.tmp")
    f = pq.ParquetFile(base_file)
    counts = np.bincount(f.read(columns=["_vnode"])["_vnode"].to_numpy(), minlength=VNODES)
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    meta = {_SOURCE: _source_stamp(base_file), _BOUNDS: bounds.tobytes()}
    try:
        with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, f.schema_arrow, metadata=meta) as writer:
            for g in range(f.num_row_groups):
                writer.write_table(f.read_row_group(g))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale(base_dir: Path, prefix: str) -> None:
    """Remove the indexes of base files named `<prefix>*` before such files are written again (a
    retried compaction of the same epoch), so that no index outlives the file it was built from."""
    d = base_dir.parent / "index"
    for name in os.listdir(d) if d.exists() else []:
        if name.startswith(prefix):
            forget(d / name)
            os.remove(d / name)


@dataclass(frozen=True)
class _Index:
    table: pa.Table  # memory-mapped, one record batch per row group of the Parquet file
    bounds: np.ndarray  # rows [bounds[v], bounds[v + 1]) hold vnode v
    offsets: np.ndarray  # first row of each record batch, and the row count at the end


_lock = threading.Lock()
_open: OrderedDict[tuple[str, int, int, int, int], _Index] = OrderedDict()


def _opened(base_file: str) -> _Index | None:
    path = index_path(base_file)
    try:
        st, source = os.stat(path), os.stat(base_file)
        cache_key = (str(path), st.st_size, st.st_mtime_ns, source.st_size, source.st_mtime_ns)
        with _lock:
            found = _open.get(cache_key)
            if found is not None:
                _open.move_to_end(cache_key)  # least recently used first out
                return found
        reader = ipc.open_file(pa.memory_map(str(path)))
        meta = reader.metadata or {}
        if meta.get(_SOURCE) != _source_stamp(base_file):
            return None
        table = reader.read_all()
        sizes = [b.num_rows for b in table.to_batches()]
        index = _Index(table, np.frombuffer(meta[_BOUNDS], dtype=np.int64),
                       np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]))
    except (OSError, pa.ArrowException, KeyError, ValueError):
        return None
    with _lock:
        _open[cache_key] = index
        _open.move_to_end(cache_key)
        while len(_open) > _CACHED:
            _open.popitem(last=False)
    return index


def forget(path: str | os.PathLike[str]) -> None:
    """Unmap an index about to be removed (retention), so that its disk space is freed."""
    with _lock:
        for k in [k for k in _open if k[0] == str(path)]:
            del _open[k]


def rows(base_file: str, keys: pa.Table, key: list[str], schema: pa.Schema) -> pa.Table | None:
    """Rows of `base_file` (as `schema`) whose first key column equals that of a row of `keys`
    (`| _vnode | key columns |`) in the same vnode, or None if the file has no usable index. With
    a multi-column key these are candidates: the caller matches the whole key."""
    index = _opened(base_file)
    first = keys[key[0]]
    if index is None or first.null_count:
        return None
    if keys.num_rows == 0:
        return schema.empty_table()
    column = index.table[key[0]]
    try:
        needles = first.cast(column.type)
    except pa.ArrowException:
        return None
    vn = keys["_vnode"].to_numpy()
    order = np.argsort(vn, kind="stable")
    needles = needles.take(pa.array(order))
    vn = vn[order]
    present, starts = np.unique(vn, return_index=True)
    ends = np.append(starts[1:], len(vn))
    los, his = [], []
    for v, s, e in zip(present, starts, ends, strict=True):
        lo, hi = int(index.bounds[v]), int(index.bounds[v + 1])
        if lo == hi:
            continue
        segment, wanted = column.slice(lo, hi - lo), needles.slice(s, e - s)
        los.append(pc.search_sorted(segment, wanted, side="left").to_numpy().astype(np.int64) + lo)
        his.append(pc.search_sorted(segment, wanted, side="right").to_numpy().astype(np.int64) + lo)
    if not los:
        return schema.empty_table()
    lo_all, hi_all = np.concatenate(los), np.concatenate(his)
    counts = hi_all - lo_all
    at = np.unique(np.repeat(lo_all - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum())))
    parts = []
    # A take across record batches would concatenate them (copying the file): take batch by batch.
    for b, batch in enumerate(index.table.to_batches()):
        lo, hi = np.searchsorted(at, index.offsets[b:b + 2])
        if hi > lo:
            parts.append(batch.take(pa.array(at[lo:hi] - index.offsets[b])))
    if not parts:
        return schema.empty_table()
    return pa.Table.from_batches(parts).select(schema.names).cast(schema)
