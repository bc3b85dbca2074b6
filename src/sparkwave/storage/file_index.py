"""Row-group indexes of immutable Parquet files, for point lookups whose cost follows the number
of keys rather than the size of the table.

A base file is sorted (state tables by their key, tables by vnode then key) and written in small row
groups, so each group's min/max statistics bound a narrow key range. The footer is parsed once per
file and kept (files never change in place; the cache key includes size and mtime in case a retried
write reuses a name). A lookup then reads only the row groups whose ranges contain a wanted key."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


@dataclass(frozen=True)
class _Column:
    mins: np.ndarray
    maxs: np.ndarray
    nulls: np.ndarray  # bool: the group may hold NULLs

    @cached_property
    def single(self) -> np.ndarray:
        """bool: the group holds one value only, and no NULL (so a next sort column's range is tight
        within it; a NULL beside the value sorts apart, with next-column values of its own)."""
        return np.array([a is not None and a == b and not n
                         for a, b, n in zip(self.mins, self.maxs, self.nulls, strict=True)], dtype=bool)


@dataclass
class FileIndex:
    path: str
    metadata: pq.FileMetaData
    _columns: dict[str, _Column | None] = field(default_factory=dict)

    def column(self, name: str) -> _Column | None:
        """The column's statistics per row group (None if some group lacks them), built on first use."""
        if name not in self._columns:
            self._columns[name] = self._build(name)
        return self._columns[name]

    def _build(self, name: str) -> _Column | None:
        meta = self.metadata
        c = next((i for i in range(meta.num_columns) if meta.schema.column(i).name == name), None)
        if c is None:
            return None
        mins: list[object] = []
        maxs: list[object] = []
        nulls: list[bool] = []
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            st = rg.column(c).statistics
            if st is None or not st.has_min_max:
                if rg.num_rows and (st is None or st.null_count != rg.num_rows):
                    return None
                mins.append(None)
                maxs.append(None)
                nulls.append(True)
                continue
            mins.append(st.min)
            maxs.append(st.max)
            nulls.append(not st.has_null_count or st.null_count > 0)
        return _Column(_values(mins), _values(maxs), np.array(nulls, dtype=bool))


def _values(v: list) -> np.ndarray:
    arr = np.empty(len(v), dtype=object)
    arr[:] = v
    return arr


@lru_cache(maxsize=512)
def _load(path: str, size: int, mtime: int) -> FileIndex:
    return FileIndex(path, pq.read_metadata(path))


def file_index(path: str) -> FileIndex:
    st = os.stat(path)
    return _load(path, st.st_size, st.st_mtime_ns)


def _hits(col: _Column, wanted: list, want_null: bool) -> np.ndarray:
    """Groups whose [min, max] contains one of the sorted, non-null `wanted` values."""
    present = np.array([m is not None for m in col.mins], dtype=bool)
    hit = np.zeros(len(col.mins), dtype=bool)
    if wanted and present.any():
        keys = _values(wanted)
        lo = np.searchsorted(keys, col.mins[present], side="left")
        hi = np.searchsorted(keys, col.maxs[present], side="right")
        hit[present] = lo < hi
    if want_null:
        hit |= col.nulls
    return hit


def candidate_groups(index: FileIndex, keys: pa.Table, by: list[str]) -> list[int] | None:
    """The row groups that may hold a row matching `keys` on the first indexed `by` column (then
    refined by the second within groups of one first-column value), or None to read them all."""
    col = index.column(by[0])
    if col is None:
        return None
    try:
        first = keys[by[0]]
        wanted = sorted(v for v in pc.unique(first).to_pylist() if v is not None)
        hit = _hits(col, wanted, first.null_count > 0)
        second = index.column(by[1]) if len(by) > 1 else None
        if second is not None and hit.any():
            single = col.single
            for value in {col.mins[g] for g in np.flatnonzero(hit & single)}:
                rows = keys.filter(pc.equal(first, pa.scalar(value, first.type)))[by[1]]
                inner = sorted(v for v in pc.unique(rows).to_pylist() if v is not None)
                groups = np.flatnonzero(hit & single & (col.mins == value))
                sub = _Column(second.mins[groups], second.maxs[groups], second.nulls[groups])
                hit[groups] = _hits(sub, inner, rows.null_count > 0)
    except (TypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # statistics of a type that does not compare with the keys: read everything
    return [int(g) for g in np.flatnonzero(hit)]
