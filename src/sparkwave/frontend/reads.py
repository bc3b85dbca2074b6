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

Literals are taken only where their meaning in Spark is plain: an integer for an integer key in its
range, a string for a varchar key, TRUE/FALSE for a boolean one. Spark's casts decide the rest
('5' or 5.0 against an integer, NULL, decimals, dates, floats), so those fall back. Every read
verifies page checksums and row counts (`storage/integrity.py`) as the Spark path does.

Neither takes a lock. A scan opens every file it will read before it yields a row: retention may
forget and unlink them meanwhile (a compaction and `retention_seconds = 0`), but an open file stays
readable, so the read is whole; the listing is taken twice and must agree, so that it is one
catalog state and not half of a retention's."""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlglot import exp

from sparkwave.core.catalog import Base, Catalog, Relation
from sparkwave.core.chunk import VNODES, Op
from sparkwave.core.errors import SparkwaveError
from sparkwave.core.schema import Column, Schema, to_spark_type
from sparkwave.core.zset import ns_join
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
_INT_RANGES = {"smallint": 2**15, "int": 2**31, "bigint": 2**63}
_MAX_LIMIT = 2**31 - 1  # Spark's LIMIT is an int


@dataclass
class FastResult:
    """A query's result read without Spark: its columns (name, Spark type) as the Spark path names
    and types them, and its rows, produced as they are read (`batches.close()` stops the read)."""

    fields: list[tuple[str, DataType]]
    batches: Iterator[pa.RecordBatch]
    kind: Literal["lookup", "scan"]
    epoch: int


@dataclass(frozen=True)
class _Query:
    """The parts of a query of a shape this module answers, as written."""

    table: str
    qualifier: str  # the name its columns may be qualified by: the alias, else the table's name
    items: list[tuple[str | None, exp.Column | None]]  # (alias, column); (None, None) is `*`
    where: list[tuple[exp.Column, exp.Expr]]  # column = value
    limit: int | None


def fast_read(session: Session, ast: exp.Expr) -> FastResult | None:
    """`ast`'s result read on the driver, or None if it is not a lookup or a plain scan (see the
    module's docstring); raises what the Spark path raises for the relation it names."""
    session._check_open()
    query = _shape(ast)
    if query is None:
        return None
    rel = session._readable(query.table)  # an unknown, failed or creating relation: the Spark path's errors
    out = _projection(rel.schema, query)
    if out is None:
        return None
    epoch = session.committed_epoch
    fields = [(name, to_spark_type(c.type)) for name, c in out]
    if query.where:
        keys = _key_values(rel.schema, query)
        if keys is None:
            return None
        rows = _lookup(session, rel, epoch, keys)
        return FastResult(fields, _project([rows.to_batches()], out, query.limit), "lookup", epoch)
    reader = _ScanReader.open(session, rel, epoch)
    if reader is None:
        return None
    return FastResult(fields, _closing(_project([reader.batches([c.name for _, c in out])], out, query.limit), reader),
                      "scan", epoch)


# --- the query's shape (sqlglot only) ------------------------------------------------------------
_SELECT_ARGS = {"expressions", "from_", "from", "where", "limit"}
_TABLE_ARGS = {"this", "alias"}


def _shape(ast: exp.Expr) -> _Query | None:
    if not isinstance(ast, exp.Select) or any(v for k, v in ast.args.items() if k not in _SELECT_ARGS):
        return None
    source = ast.args.get("from_") or ast.args.get("from")
    table = source.this if isinstance(source, exp.From) else None
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) \
            or any(v for k, v in table.args.items() if k not in _TABLE_ARGS):
        return None
    alias = table.args.get("alias")
    if alias is not None and (alias.args.get("columns") or not alias.name):
        return None
    items: list[tuple[str | None, exp.Column | None]] = []
    for e in ast.expressions:
        name = e.alias if isinstance(e, exp.Alias) else None
        e = e.this if isinstance(e, exp.Alias) else e
        if isinstance(e, exp.Star) and name is None:
            items.append((None, None))
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Identifier | exp.Star) and not e.args.get("db") \
                and not e.args.get("catalog") and not (isinstance(e.this, exp.Star) and name is not None):
            items.append((name, e))
        else:
            return None
    where = _conjuncts(ast.args["where"].this) if ast.args.get("where") else []
    limit = _limit(ast.args.get("limit"))
    if where is None or limit is False:
        return None
    return _Query(table.name.lower(), (alias.name if alias else table.name).lower(), items, where,
                  limit if isinstance(limit, int) and not isinstance(limit, bool) else None)


def _conjuncts(e: exp.Expr) -> list[tuple[exp.Column, exp.Expr]] | None:
    """`a = 1 AND (b = 'x')` as [(a, 1), (b, 'x')], or None for any other condition."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        left, right = _conjuncts(e.this), _conjuncts(e.expression)
        return None if left is None or right is None else left + right
    if not isinstance(e, exp.EQ):
        return None
    a, b = e.this, e.expression
    while isinstance(a, exp.Paren):
        a = a.this
    while isinstance(b, exp.Paren):
        b = b.this
    if isinstance(b, exp.Column) and not isinstance(a, exp.Column):
        a, b = b, a
    if not isinstance(a, exp.Column) or not isinstance(a.this, exp.Identifier) or a.args.get("db"):
        return None
    return [(a, b)]


def _limit(node: exp.Expr | None) -> int | None | bool:
    """The LIMIT's row count, None without one, False for one this module does not take."""
    if node is None:
        return None
    value = node.expression if isinstance(node, exp.Limit) else None
    if isinstance(value, exp.Literal) and value.is_int and 0 <= int(value.this) <= _MAX_LIMIT \
            and not any(v for k, v in node.args.items() if k != "expression"):
        return int(value.this)
    return False


def _column(schema: Schema, query: _Query, ref: exp.Column) -> Column | None:
    """The visible column `ref` names, resolved as Spark does (case-insensitively), or None."""
    if ref.table and ref.table.lower() != query.qualifier:
        return None
    found = [c for c in schema.visible if c.name.lower() == ref.name.lower()]
    return found[0] if len(found) == 1 else None


def _projection(schema: Schema, query: _Query) -> list[tuple[str, Column]] | None:
    """The output columns (the name Spark gives each, its stored column), or None."""
    out: list[tuple[str, Column]] = []
    for alias, ref in query.items:
        if ref is None or isinstance(ref.this, exp.Star):
            if ref is not None and ref.table and ref.table.lower() != query.qualifier:
                return None
            out.extend((c.name, c) for c in schema.visible)
            continue
        column = _column(schema, query, ref)
        if column is None:
            return None
        out.append((alias or ref.name, column))  # Spark names a column as the query spells it
    return out


def _key_values(schema: Schema, query: _Query) -> dict[str, Any] | None:
    """The key's value per key column, when the conditions name each key column once, each with a
    literal whose comparison Spark makes plainly (`_literal`); else None."""
    values: dict[str, Any] = {}
    for ref, value in query.where:
        column = _column(schema, query, ref)
        if column is None or column.name not in schema.key or column.name in values:
            return None
        v = _literal(column, value)
        if v is _NO:
            return None
        values[column.name] = v
    return values if len(values) == len(schema.key) else None


_NO = object()


def _literal(column: Column, e: exp.Expr) -> Any:
    """The value `e` stands for compared with `column`, or `_NO`."""
    t = column.type.name
    if t in _INT_RANGES:
        negative = isinstance(e, exp.Neg)
        lit = e.this if negative else e
        if isinstance(lit, exp.Literal) and lit.is_int:
            v = -int(lit.this) if negative else int(lit.this)
            return v if -_INT_RANGES[t] <= v < _INT_RANGES[t] else _NO
    elif t == "varchar" and isinstance(e, exp.Literal) and e.is_string:
        return e.this
    elif t == "boolean" and isinstance(e, exp.Boolean):
        return bool(e.this)
    return _NO


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


def _lookup(session: Session, rel: Relation, epoch: int, values: dict[str, Any]) -> pa.Table:
    """The row of one key as of `epoch` (`| _vnode | columns |`): the log's last write of the key,
    from the overlay kept for that listing, else the key's row in the base (`_base_row`); a log
    too large to keep is read by `storage/lookup.py: lookup`, as DML reads old rows."""
    schema, catalog = rel.schema, session.catalog
    key = [c for k in schema.key if (c := schema.column(k)) is not None]
    arrays = {"_vnode": pa.array([spark_vnode(key, [values[c.name] for c in key])], pa.int16())}
    arrays.update({c.name: pa.array([values[c.name]], c.type.arrow) for c in key})
    keys = pa.table(arrays)
    names = base_arrow_schema(schema).names
    for attempt in range(3):
        listing = _listing(catalog, rel.name, epoch)
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
        # base) may have been read half before and half after; read it again.
        if _listing(catalog, rel.name, epoch) == listing:
            break
    else:
        raise _changing(rel)
    session.rt.check_retained(rel, epoch)
    return rows


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
