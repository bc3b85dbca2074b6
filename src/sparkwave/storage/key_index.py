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
while they match; a missing, stale or unreadable index sends the lookup to the Parquet file. It ends
with a CRC32 of its bytes (`_seal`), verified when it is opened: once per process and file, it reads
every page of the index (a 1M-row, 39 MB index: 15-25 ms, against under 1 ms to map it unverified).
An index that fails it, damaged anywhere (schema, data, footer, the checksum itself) or written
before indexes had one, is never served: it is built again from its Parquet file, whose pages are
verified in turn."""

from __future__ import annotations

import logging
import os
import struct
import threading
import uuid
import zlib
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
from sparkwave.storage.integrity import parquet_file

log = logging.getLogger(__name__)

_SOURCE = b"sparkwave.parquet"  # "<size> <rows>" of the Parquet file the index was built from
_BOUNDS = b"sparkwave.vnodes"  # int64 row offsets of vnodes 0..VNODES, so opening reads no column
_CACHED = 256  # open indexes kept memory-mapped (address space only: pages are the OS's cache)
_SEAL = b"SWX1"  # an index file is `| Arrow IPC file | crc32 of it (uint32, little-endian) | _SEAL |`
_SEAL_BYTES = 4 + len(_SEAL)


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
    f = parquet_file(base_file)
    counts = np.bincount(f.read(columns=["_vnode"])["_vnode"].to_numpy(), minlength=VNODES)
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    meta = {_SOURCE: _source_stamp(base_file), _BOUNDS: bounds.tobytes()}
    try:
        with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, f.schema_arrow, metadata=meta) as writer:
            for g in range(f.num_row_groups):
                writer.write_table(f.read_row_group(g))
        _seal(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _seal(path: Path) -> None:
    """Append the CRC32 of the file's bytes, which `_unsealed` verifies."""
    crc = 0
    with open(path, "r+b") as f:
        while chunk := f.read(16 << 20):
            crc = zlib.crc32(chunk, crc)
        f.write(struct.pack("<I", crc) + _SEAL)


def _unsealed(path: Path) -> pa.Buffer | None:
    """The Arrow IPC bytes of the index at `path`, memory-mapped, or None if they fail their CRC32."""
    data = pa.memory_map(str(path)).read_buffer()
    if data.size < _SEAL_BYTES or data.slice(data.size - len(_SEAL)).to_pybytes() != _SEAL:
        return None
    body = data.slice(0, data.size - _SEAL_BYTES)
    (crc,) = struct.unpack("<I", data.slice(body.size, 4).to_pybytes())
    return body if zlib.crc32(body) == crc else None


@dataclass(frozen=True)
class _Index:
    table: pa.Table  # memory-mapped, one record batch per row group of the Parquet file
    bounds: np.ndarray  # rows [bounds[v], bounds[v + 1]) hold vnode v
    offsets: np.ndarray  # first row of each record batch, and the row count at the end


_lock = threading.Lock()
_open: OrderedDict[tuple[str, int, int, int, int], _Index] = OrderedDict()


def _opened(base_file: str, rebuilt: bool = False) -> _Index | None:
    path = index_path(base_file)
    try:
        st, source = os.stat(path), os.stat(base_file)
        cache_key = (str(path), st.st_size, st.st_mtime_ns, source.st_size, source.st_mtime_ns)
        with _lock:
            found = _open.get(cache_key)
            if found is not None:
                _open.move_to_end(cache_key)  # least recently used first out
                return found
        body = _unsealed(path)
        if body is None:
            return None if rebuilt else _rebuild(base_file, path)
        reader = ipc.open_file(body)
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


def _rebuild(base_file: str, path: Path) -> _Index | None:
    """Replace an index that fails its checksum by one built again from its Parquet file (on the
    driver, once); None if that fails, and the lookup reads the file."""
    log.warning("key index %s fails its checksum (damaged, or written before indexes had one): building it "
                "again from %s", path, base_file)
    forget(path)
    try:
        build(base_file)
    except Exception:  # a damaged Parquet file too: the lookup's read of it raises, naming it
        log.exception("key index %s was not built again; lookups read %s", path, base_file)
        return None
    return _opened(base_file, rebuilt=True)


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
    if keys.num_rows == 1:  # a point query: its rows are one run of the index, sliced without a copy
        return _run(index, int(keys["_vnode"][0].as_py()), column, needles).select(schema.names).cast(schema)
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


def _run(index: _Index, vnode: int, column: pa.ChunkedArray, needle: pa.ChunkedArray) -> pa.Table:
    """The rows of `vnode` whose first key column equals the one value of `needle`."""
    lo, hi = int(index.bounds[vnode]), int(index.bounds[vnode + 1])
    if lo == hi:
        return index.table.slice(0, 0)
    segment = column.slice(lo, hi - lo)
    start = pc.search_sorted(segment, needle, side="left").to_numpy()[0]
    end = pc.search_sorted(segment, needle, side="right").to_numpy()[0]
    return index.table.slice(lo + int(start), int(end - start))
