"""Reads served without a Spark job: a point query by key, and a plain scan streamed in Arrow.

Two shapes of `SELECT` are answered here on the driver, from the files the catalog lists at the
latest committed epoch, with exactly the rows, column names and types the Spark path
(`Session._do_query`) gives; any other query returns None and runs on Spark:

- **lookup**: `SELECT <columns or *> FROM r WHERE k1 = <literal> [AND k2 = <literal> ...]`, the
  conditions covering `r`'s whole key (visible columns only). The key's last write in the log
  `(c, e]` decides if there is one; the log is read once per listing and kept netted per key
  (`_overlay`). Otherwise the base's key index (`storage/key_index.py`) finds the row: the key's
  vnode is Spark's hash, computed here (`spark_vnode`). A base without an index, or a log too
  large to keep, is read by `storage/lookup.py: lookup`, as DML reads old rows.
- **scan**: `SELECT <columns or *> FROM r [LIMIT n]`, streamed: the base's files a batch at a time,
  less the keys the log `(c, e]` touched, then the log's live rows. The log is read whole, so a
  keyed relation whose log holds more than `SCAN_LOG_ROWS` rows is left to Spark, as is a float
  key with a log to overlay (Spark's key equality folds NaN and -0.0, Arrow's does not).

The shapes are found with sqlglot alone (`read_shape.py`), a prepared statement's once, at Parse,
its parameters filled in at each Execute (`fast_read_prepared`). Literals are taken only where their
meaning in Spark is plain: an integer for an integer key in its range, a string for a varchar key,
TRUE/FALSE for a boolean one. Spark's casts decide the rest ('5' or 5.0 against an integer, NULL,
decimals, dates, floats), so those fall back. Every read verifies page checksums and row counts
(`storage/integrity.py`) as the Spark path does.

Neither takes a lock. A scan opens every file it will read before it yields a row: retention may
forget and unlink them meanwhile (a compaction and `retention_seconds = 0`), but an open file stays
readable, so the read is whole; the listing is taken twice and must agree, so that it is one
catalog state and not half of a retention's. What a read reads of the catalog (the relation, the
committed epoch, the listing) is kept while the catalog's mark (`Catalog.changes`) holds: a point
query then makes two small SQLite queries, not a dozen, and a listing under an unchanged mark
agrees with itself."""

from __future__ import annotations

import struct
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlglot import exp

from sparkwave.core.catalog import Base, Catalog, Relation
from sparkwave.core.chunk import VNODES, Op
from sparkwave.core.errors import SparkwaveError
from sparkwave.core.schema import Column
from sparkwave.core.zset import ns_join
from sparkwave.frontend.read_shape import PreparedRead, ReadQuery, Resolved, key_values, shape
from sparkwave.storage import key_index
from sparkwave.storage.file_index import file_index
from sparkwave.storage.integrity import check_rows, parquet_file, reading, scan
from sparkwave.storage.lookup import lookup
from sparkwave.storage.table import base_arrow_schema, log_arrow_schema

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

    from sparkwave.frontend.session import Session

SCAN_BATCH_ROWS = 65_536
SCAN_LOG_ROWS = 1_000_000  # a keyed relation's log rows a read overlays in memory; more: Spark or `lookup`
CACHED_OVERLAY_ROWS = 200_000  # a log kept netted per key while its listing holds, for the next reads
CACHED_OVERLAYS_ROWS = 1_000_000  # the rows of all logs kept so (the least recently read go first)
_LIVE = (int(Op.INSERT), int(Op.UPDATE_INSERT))


@dataclass
class FastResult:
    """A query's result read without Spark: its columns (name, Spark type) as the Spark path names
    and types them, and its rows, produced as they are read (`batches.close()` stops the read)."""

    fields: list[tuple[str, DataType]]
    batches: Iterator[pa.RecordBatch]
    kind: Literal["lookup", "scan"]
    epoch: int


def fast_read(session: Session, ast: exp.Expr) -> FastResult | None:
    """`ast`'s result read on the driver, or None if it is not a lookup or a plain scan (see the
    module's docstring); raises what the Spark path raises for the relation it names."""
    session._check_open()
    query = shape(ast)
    return None if query is None else _read(session, query)


def fast_read_prepared(session: Session, read: PreparedRead, values: Mapping[int, exp.Expr]) -> FastResult | None:
    """As `fast_read` of the statement with each parameter `n` the node `values[n]`."""
    session._check_open()
    return _read(session, read.filled(values), read.resolved)


def _read(session: Session, query: ReadQuery, kept: list[Resolved] | None = None) -> FastResult | None:
    """The read of `query`; `kept` holds the last resolution of a query of the same columns."""
    catalog = session.catalog
    mark = catalog.changes()
    # an unknown, failed or creating relation: the Spark path's errors
    rel = _kept(catalog, mark, ("relation", query.table), lambda: session._readable(query.table))
    resolved = kept[0] if kept else None
    if resolved is None or (resolved.schema is not rel.schema and resolved.schema != rel.schema):
        resolved = Resolved.of(rel.schema, query)
        if kept is not None:
            kept[:] = [resolved]
    out, fields = resolved.out, resolved.fields
    if out is None:
        return None
    epoch = _kept(catalog, mark, ("epoch",), lambda: session.committed_epoch)
    if query.where:
        keys = key_values(rel.schema, query, resolved.where)
        if keys is None:
            return None
        rows = _lookup(session, rel, epoch, keys, mark)
        return FastResult(fields, _project([rows.to_batches()], out, query.limit), "lookup", epoch)
    reader = _ScanReader.open(session, rel, epoch)
    if reader is None:
        return None
    return FastResult(fields, _closing(_project([reader.batches([c.name for _, c in out])], out, query.limit), reader),
                      "scan", epoch)


# --- Spark's vnode of a key, on the driver -------------------------------------------------------
_P1, _P2, _P3, _P4, _P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161,
                           9650029242287828579, 2870177450012600261)
_M = (1 << 64) - 1
_SPARK_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def xxh64(data: bytes, seed: int) -> int:
    """XXH64 of `data` (unsigned), which Spark's `xxhash64` computes over a value's bytes."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M]
        while i <= n - 32:
            v = [_round(acc, struct.unpack_from("<Q", data, i + 8 * j)[0]) for j, acc in enumerate(v)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for acc in v:
            h = (((h ^ _round(0, acc)) * _P1) + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (struct.unpack_from("<I", data, i)[0] * _P1 & _M), 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * _P5 & _M), 11) * _P1) & _M
        i += 1
    h = ((h ^ (h >> 33)) * _P2) & _M
    h = ((h ^ (h >> 29)) * _P3) & _M
    return h ^ (h >> 32)


def spark_vnode(columns: Sequence[Column], values: Sequence[Any]) -> int:
    """`core/chunk.vnode` of one key: `pmod(xxhash64(k1, k2, ...), VNODES)` as Spark computes it,
    each value hashed as Spark hashes its type (an int-sized integer or boolean as 4 bytes, a bigint
    as 8, a string's UTF-8 bytes), chained through the seed; a NULL leaves the seed as it is. Only
    the key types `_literal` takes."""
    h = _SPARK_SEED
    for column, v in zip(columns, values, strict=True):
        if v is None:
            continue
        t = column.type.name
        if t == "bigint":
            data = struct.pack("<q", v)
        elif t in ("int", "smallint", "boolean"):
            data = struct.pack("<i", int(v))
        elif t == "varchar":
            data = v.encode()
        else:
            raise AssertionError(f"BUG: no vnode hash for a key of type {t}")
        h = xxh64(data, h)
    return h & (VNODES - 1)  # pmod of the signed hash by a power of two: its low bits


# --- the two reads ---------------------------------------------------------------------------------
_Listing = tuple[Base | None, Sequence[tuple[int, str]]]  # a base and the log files `(epoch, path)` over it


def _listing(catalog: Catalog, name: str, epoch: int) -> _Listing:
    base = catalog.base_at(name, epoch)
    return base, catalog.log_files(name, base.epoch if base else 0, epoch)


@dataclass(frozen=True)
class _Overlay:
    """A relation's log over its base netted per key: the last write (`| _op | _vnode | columns |`)
    of each key it touched. Its files never change, so it is kept for the listing it was read from."""

    listing: _Listing
    latest: pa.Table

    def live(self, names: list[str]) -> pa.Table:
        return self.latest.filter(pc.is_in(self.latest["_op"], pa.array(_LIVE, pa.int8()))).select(names)


_overlays: OrderedDict[tuple[str, str], _Overlay] = OrderedDict()
_overlays_lock = threading.Lock()


def _overlay(catalog: Catalog, rel: Relation, listing: _Listing) -> _Overlay | None:
    """The log of `listing` netted per key, read once per listing and kept (a log of at most
    `CACHED_OVERLAY_ROWS` rows, `CACHED_OVERLAYS_ROWS` in all), or None past `SCAN_LOG_ROWS` rows."""
    base, logs = listing
    cache_key = (str(catalog.path), rel.name)
    with _overlays_lock:
        found = _overlays.get(cache_key)
        if found is not None and found.listing == listing:
            _overlays.move_to_end(cache_key)
            return found
    rows = sum(n for _, n in catalog.log_file_rows(rel.name, base.epoch if base else 0, logs[-1][0])) if logs else 0
    if rows > SCAN_LOG_ROWS:
        return None
    check_rows(catalog, rel.name, None, logs)
    target = log_arrow_schema(rel.schema)
    log = scan([p for _, p in logs], target, None) if logs else target.empty_table()
    # The last write to a key wins: its greatest (epoch, seq).
    ordered = log.sort_by([("_epoch", "descending"), ("_seq", "descending")])
    ordered = ordered.append_column("_i", pa.array(range(ordered.num_rows), pa.int64()))
    first = ordered.group_by(list(rel.schema.key), use_threads=False).aggregate([("_i", "min")])["_i_min"]
    overlay = _Overlay(listing, ordered.take(first).select(["_op", *base_arrow_schema(rel.schema).names]))
    if rows <= CACHED_OVERLAY_ROWS:
        with _overlays_lock:
            _overlays[cache_key] = overlay
            _overlays.move_to_end(cache_key)
            while sum(o.latest.num_rows for o in _overlays.values()) > CACHED_OVERLAYS_ROWS:
                _overlays.popitem(last=False)
    return overlay


def _lookup(session: Session, rel: Relation, epoch: int, values: dict[str, Any], mark: tuple[int, int]) -> pa.Table:
    """The row of one key as of `epoch` (`| _vnode | columns |`): the log's last write of the key,
    from the overlay kept for that listing, else the key's row in the base (`_base_row`); a log
    too large to keep is read by `storage/lookup.py: lookup`, as DML reads old rows. The listing
    and the retention check are those kept under the catalog's `mark` while it holds."""
    schema, catalog = rel.schema, session.catalog
    key = [c for k in schema.key if (c := schema.column(k)) is not None]
    arrays = {"_vnode": pa.array([spark_vnode(key, [values[c.name] for c in key])], pa.int16())}
    arrays.update({c.name: pa.array([values[c.name]], c.type.arrow) for c in key})
    keys = pa.table(arrays)
    names = base_arrow_schema(schema).names
    for attempt in range(3):
        if attempt:
            mark = catalog.changes()
        listing = _kept(catalog, mark, ("listing", rel.name, epoch), lambda: _listing(catalog, rel.name, epoch))
        base = listing[0]
        try:
            overlay = _overlay(catalog, rel, listing)
            if overlay is None:
                rows = lookup(catalog, rel.name, schema, epoch, keys)
            else:
                written = overlay.latest
                for c in key:
                    written = written.filter(pc.equal(written[c.name], values[c.name]))
                if written.num_rows:  # the log's last write of the key decides
                    rows = _Overlay(listing, written).live(names)
                elif base is not None:
                    rows = _base_row(catalog, rel, base, keys, values)
                else:
                    rows = base_arrow_schema(schema).empty_table()
        except FileNotFoundError:  # retention removed a file after the listing: list again
            if attempt == 2:
                raise
            continue
        # Retention forgets files before it removes them: a listing that changed meanwhile (a newer
        # base) may have been read half before and half after; read it again. A catalog unchanged
        # since the listing's mark has the same listing.
        if (now := catalog.changes()) == mark or _listing(catalog, rel.name, epoch) == listing:
            break
    else:
        raise _changing(rel)
    _kept(catalog, now, ("retained", rel.name, epoch), lambda: session.rt.check_retained(rel, epoch))
    return rows


# What the fast path read of each catalog under its last mark (`Catalog.changes`), dropped when it changes
_kepts: weakref.WeakKeyDictionary[Catalog, tuple[tuple[int, int], dict[tuple[Any, ...], Any]]] = \
    weakref.WeakKeyDictionary()
_kepts_lock = threading.Lock()


def _kept(catalog: Catalog, mark: tuple[int, int], key: tuple[Any, ...], read: Callable[[], Any]) -> Any:
    """`read()`, a read of `catalog` alone, as it was when the catalog's mark was `mark`: kept if
    the catalog did not change while it ran, for the reads that come while the mark holds (a
    point query's relation, committed epoch and listing: a dozen SQLite queries under the catalog's
    lock otherwise, for every query). An error is not kept."""
    with _kepts_lock:
        found = _kepts.get(catalog)
        if found is not None and found[0] == mark and key in found[1]:
            return found[1][key]
    value = read()
    if catalog.changes() == mark:
        with _kepts_lock:
            found = _kepts.get(catalog)
            if found is None or found[0] != mark:
                _kepts[catalog] = found = (mark, {})
            found[1][key] = value
    return value


def _base_row(catalog: Catalog, rel: Relation, base: Base, keys: pa.Table, values: dict[str, Any]) -> pa.Table:
    """The key's row in `base`, through the key index of each of its files (`key_index.rows`: the
    rows of the key's vnode whose first key column matches, then the whole key); a file without
    an index sends the read to `lookup` as of the base's own epoch (no log), which reads its row
    groups. `lookup` itself is not the first choice: for one key, its Arrow join and group-by
    cost several times the index's search."""
    schema = rel.schema
    target = base_arrow_schema(schema)
    check_rows(catalog, rel.name, base, [])
    parts = []
    vnode = keys["_vnode"][0].as_py()
    for path in base.files:
        vnodes = file_index(path).column("_vnode")  # a compacted base's files hold disjoint vnode ranges
        if vnodes is not None and not any(lo <= vnode <= hi for lo, hi in zip(vnodes.mins, vnodes.maxs, strict=True)
                                          if lo is not None):
            continue
        found = key_index.rows(path, keys, list(schema.key), target)
        if found is None:
            return lookup(catalog, rel.name, schema, base.epoch, keys)
        for k, v in values.items():
            found = found.filter(pc.equal(found[k], v))
        parts.append(found)
    return pa.concat_tables(parts) if parts else target.empty_table()


def _changing(rel: Relation) -> SparkwaveError:
    return SparkwaveError(f"{rel.name!r} was compacted three times while it was being read; run the query again")


class _ScanReader:
    """A relation's snapshot at `epoch`, its files opened: the base's rows a batch at a time less
    the keys its log touched, then the log's live rows."""

    def __init__(self, rel: Relation, base: list[tuple[str, pq.ParquetFile]], log: pa.Table | None,
                 touched: pa.Table | None, logs: list[tuple[str, pq.ParquetFile]]) -> None:
        self.rel, self.base, self.log, self.touched, self.logs = rel, base, log, touched, logs

    @staticmethod
    def open(session: Session, rel: Relation, epoch: int) -> _ScanReader | None:
        """The files of the snapshot opened and its log overlaid, or None where Spark reads it
        better: a keyed log of more than `SCAN_LOG_ROWS` rows, or a float key with a log (Spark's
        key equality folds NaNs and -0.0, Arrow's does not)."""
        schema, catalog = rel.schema, session.catalog
        floats = any(pa.types.is_floating(c.type.arrow) for c in schema.columns if c.name in schema.key)
        for attempt in range(3):
            listing = _listing(catalog, rel.name, epoch)
            base, logs = listing
            keyed = bool(logs) and not schema.append_only
            if keyed and floats:
                return None
            opened: list[tuple[str, pq.ParquetFile]] = []  # the base's files, then an append-only log's
            try:
                check_rows(catalog, rel.name, base, [] if keyed else logs)  # a keyed log's: `_overlay`
                for f in [*(base.files if base else []), *([] if keyed else [p for _, p in logs])]:
                    opened.append((f, _open(f)))
                overlay = _overlay(catalog, rel, listing) if keyed else None
                if keyed and overlay is None:
                    _close(opened)
                    return None
                if _listing(catalog, rel.name, epoch) == listing:  # as in `_lookup`
                    session.rt.check_retained(rel, epoch)  # as the Spark path does after its listing
                    break
            except BaseException as e:
                _close(opened)
                if not isinstance(e, FileNotFoundError) or attempt == 2:
                    raise
                continue
            _close(opened)
        else:
            raise _changing(rel)
        n = len(base.files) if base else 0
        if overlay is None:
            return _ScanReader(rel, opened[:n], None, None, opened[n:])
        names = base_arrow_schema(schema).names
        return _ScanReader(rel, opened, overlay.live(names), overlay.latest.select(list(schema.key)), [])

    def batches(self, wanted: list[str]) -> Iterator[pa.RecordBatch]:
        """The snapshot's rows with the columns `wanted` (names of stored columns, repeats allowed)."""
        schema = self.rel.schema
        names = list(dict.fromkeys(wanted))
        target = pa.schema([base_arrow_schema(schema).field(n) for n in names])
        read = names if self.touched is None else list(dict.fromkeys([*names, *schema.key]))
        read_target = pa.schema([base_arrow_schema(schema).field(n) for n in read])
        for path, f in self.base:
            with reading(path):
                for batch in f.iter_batches(SCAN_BATCH_ROWS, columns=read, use_threads=False):
                    if batch.num_rows:
                        yield self._kept(batch.select(read).cast(read_target)).select(names)
        log_target = pa.schema([log_arrow_schema(schema).field(n) for n in ["_op", *names]])
        for path, f in self.logs:  # no overlay: append-only, every row an insert
            with reading(path):
                for batch in f.iter_batches(SCAN_BATCH_ROWS, columns=["_op", *names], use_threads=False):
                    batch = batch.select(["_op", *names]).cast(log_target)
                    inserts = batch.filter(pc.equal(batch["_op"], int(Op.INSERT)))
                    if inserts.num_rows:
                        yield inserts.select(names)
        if self.log is not None:
            for batch in self.log.select(names).cast(target).to_batches(SCAN_BATCH_ROWS):
                if batch.num_rows:
                    yield batch

    def _kept(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """`batch` less the rows of keys the log touched (NULL equal to NULL, as Spark's overlay)."""
        touched = self.touched
        if touched is None or touched.num_rows == 0:
            return batch
        key = list(self.rel.schema.key)
        if len(key) == 1:
            hit = pc.is_in(batch[key[0]], value_set=touched[key[0]].combine_chunks(), skip_nulls=False)
            return batch.filter(pc.invert(hit))
        kept = ns_join(pa.Table.from_batches([batch]), touched, key, "left anti")
        return kept.select(batch.schema.names).combine_chunks().to_batches()[0] if kept.num_rows else \
            batch.slice(0, 0)

    def close(self) -> None:
        _close([*self.base, *self.logs])


def _open(path: str) -> pq.ParquetFile:
    """`path` opened, its footer parsed (once per file: `file_index`), its pages to be verified."""
    with reading(path):
        return parquet_file(path, file_index(path).metadata)


def _close(files: list[tuple[str, pq.ParquetFile]]) -> None:
    for _, f in files:
        f.close()


def _project(sources: list[Iterator[pa.RecordBatch]], out: list[tuple[str, Column]],
             limit: int | None) -> Iterator[pa.RecordBatch]:
    """Batches of the stored columns as the output's columns (Spark's names, in its order, a
    column named twice given twice), at most `limit` rows."""
    names = [name for name, _ in out]
    target = pa.schema([pa.field(name, c.type.arrow) for name, c in out])
    left = limit
    for source in sources:
        for batch in source:
            if left is not None:
                if left == 0:
                    return
                batch = batch.slice(0, left)
                left -= batch.num_rows
            columns = [batch.column(batch.schema.get_field_index(c.name)) for _, c in out]
            yield pa.RecordBatch.from_arrays(columns, names=names).cast(target)


def _closing(batches: Iterator[pa.RecordBatch], reader: _ScanReader) -> Iterator[pa.RecordBatch]:
    """`batches`, the reader's files closed once they end, fail or are closed early."""
    try:
        yield from batches
    finally:
        if close := getattr(batches, "close", None):
            close()
        reader.close()
