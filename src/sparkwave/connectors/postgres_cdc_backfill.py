"""The CDC backfill's chunks: the upstream table's rows of a primary-key range, read at one snapshot.

A chunk is every row whose key lies in a key range at the snapshot S of a REPEATABLE READ
transaction; the connector writes its WAL mark after S (`postgres_cdc.py` says why that is exact).
Keys whose columns all have an order Python can repeat exactly, integers and uuids (PostgreSQL
orders a uuid by its 16 bytes), are ordered here: a position is the next key to read, the range
`[pos, next)`. Any other key (text in its collation, numeric, a date, an enum ...) is compared
upstream: a position is the last key read, the range `(pos, last]`, and PostgreSQL says which of an
epoch's changed keys lie at or below it (`ChunkReader.passed`), in the column's own collation
(`postgres_cdc_position.py` holds both in the offsets). A composite key is read by row-value
comparison, `(a, b) >= (p, q) ORDER BY a, b LIMIT n`, which PostgreSQL answers from the key's index
when the key is declared in the index's column order.

A single integer key is read by several connections at once, all at S: the first exports its
snapshot (`pg_export_snapshot()`), the others adopt it (`SET TRANSACTION SNAPSHOT`), and each reads
one part of the key range, parses its CSV and converts it by Arrow's casts. The parts are cut by key
value from the keys per row the last chunk found (no scan to find them): a part that meets more rows
than expected stops at its LIMIT, and the chunk then ends at the last row kept, so a chunk is still
one contiguous key range read whole at S, of at most `limit` rows.

The next chunk is read while the epoch that took this one runs (`Prefetch`), from the position that
epoch will commit; the next plan takes it if that epoch committed as planned. Its snapshot is taken
after this epoch's stream range ended, so it must see every transaction committed before that end:
a transaction of the range still in progress in the snapshot (its commit record written, the commit
not yet visible: a synchronous standby's wait) fails the check and the chunk is read again at the
plan."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkwave.connectors.pg_copy import copy_out
from sparkwave.connectors.postgres_cdc_check import KeyColumn
from sparkwave.connectors.postgres_cdc_position import Key, ordered_splits, text_position, text_splits
from sparkwave.connectors.postgres_cdc_values import arrow_columns, csv_texts
from sparkwave.core.schema import SqlType

log = logging.getLogger("sparkwave.postgres_cdc")
Parts = tuple[int, ...]  # a key ordered here
# A position past every transaction committed (visible) so far, flushed: the end of a WAL record written now
# (a logical message no publication decodes, flushed by the call). The WAL insert position would do, but
# waiting for its flush may never end while the server is idle (at a page boundary it lies past the last record).
MARK = "SELECT (pg_logical_emit_message(false, 'sparkwave', '', true) - '0/0')::bigint"
INT_BITS = {"smallint": 15, "int": 31, "bigint": 63}
UUID_BITS = (63, 63)  # a uuid's 128 bits, as two signed 64-bit parts in its byte order
_HALF = 1 << 63
PART_ROWS = 20_000  # a part smaller than this is not worth a connection of its own
LAST = (1 << 63) - 1  # the greatest position a split can hold


@dataclass
class Chunk:
    rows: pa.Table  # text values (strings), in the read columns' order
    values: list[pa.Array] | None  # the rows by Arrow's casts; None: a value needs the row parser
    next: Key  # the backfill's position after it
    wal: int  # a WAL position written after its snapshot (`MARK`)
    done: bool  # the last chunk


@dataclass
class _Part:
    rows: pa.Table
    values: list[pa.Array] | None
    full: bool  # it stopped at its LIMIT: keys past its last row were not read


def key_parts(declared: SqlType, upstream: str) -> tuple[int, ...] | None:
    """The bits of the integer parts a key column's value is held in, in PostgreSQL's order of the
    column (`upstream`: its type there); None where that order is a collation's."""
    if declared.name in INT_BITS:
        return (INT_BITS[declared.name],)
    return UUID_BITS if upstream == "uuid" else None


def uuid_parts(text: str) -> tuple[int, int]:
    n = uuid.UUID(text).int
    return (n >> 64) - _HALF, (n & ((1 << 64) - 1)) - _HALF


def uuid_text(hi: int, lo: int) -> str:
    return str(uuid.UUID(int=((hi + _HALF) << 64) | (lo + _HALF)))


class ChunkReader:
    """Reads chunks of one upstream table; `open_conn` makes a connection with the connector's settings,
    `upstream` describes the key columns upstream (a uuid is declared varchar here; a key compared
    upstream is cast to its columns' types there): every column of a key other than integers."""

    def __init__(self, table: Any, columns: list[tuple[str, SqlType]], key: list[str], parallelism: int,
                 open_conn: Callable[[], Any], upstream: Mapping[str, KeyColumn] | None = None) -> None:
        types, upstream = dict(columns), upstream or {}
        parts = [key_parts(types[k], upstream[k].type if k in upstream else "") for k in key]
        self.table, self.columns, self.key, self.upstream = table, columns, key, upstream
        self.compared = not all(p is not None for p in parts)  # else ordered here
        if self.compared and (missing := [k for k in key if k not in upstream]):
            raise ValueError(f"key column(s) {', '.join(missing)}: their type upstream is needed")
        self.uuids = [p == UUID_BITS for p in parts]  # per key column
        self.bits = [] if self.compared else [b for p in parts for b in (p or ())]  # per part of an ordered position
        self.slots = [[n for n, _ in columns].index(k) for k in key]
        self.parallelism = parallelism if len(self.bits) == 1 else 1
        self.open_conn = open_conn
        self.keys_per_row = 1.0  # an integer key has at least one value per row: the first guess never overshoots
        self._extra: list[Any] = []

    def close(self) -> None:
        for conn in self._extra:
            conn.close()
        self._extra = []

    # --- SQL ---------------------------------------------------------------------------------------
    def _cols(self) -> Any:
        from psycopg import sql
        # Output names of their own: ORDER BY a bare name would sort by the output column. Each value in
        # its type's output form, as pgoutput sends it (a `::text` cast is not: it trims char(n)'s padding).
        return sql.SQL(", ").join(sql.SQL("{} AS {}").format(sql.Identifier(n), sql.Identifier(f"_c{i}"))
                                  for i, (n, _) in enumerate(self.columns))

    def _keys(self) -> Any:
        from psycopg import sql
        names = sql.SQL(", ").join(sql.Identifier(k) for k in self.key)
        return names if len(self.key) == 1 else sql.SQL("({})").format(names)

    def _typed(self, value: Any, column: str) -> Any:
        """A compared key column's text `value` (SQL) as the column's type, in the column's collation:
        explicit, so that it orders the comparison whatever the type's own (a domain's) would."""
        from psycopg import sql
        c = self.upstream[column]
        if c.collation is None:
            return sql.SQL("({}::{})").format(value, sql.SQL(c.cast))
        return sql.SQL("({}::{} COLLATE {})").format(value, sql.SQL(c.cast), sql.Identifier(*c.collation))

    def _cmp(self, op: str, key: Key) -> Any:
        """`key-columns op key` (a row-value comparison for a composite key), with literals: COPY takes
        no parameters."""
        from psycopg import sql
        literals: list[Any]
        if self.compared:
            literals = [self._typed(sql.Literal(v), k) for v, k in zip(key, self.key, strict=True)]
        else:
            literals = [sql.SQL("{}::uuid").format(sql.Literal(v)) if is_uuid else sql.Literal(v)
                        for v, is_uuid in zip(self.values_of(key), self.uuids, strict=True)]
        values = sql.SQL(", ").join(literals)
        return sql.SQL("{} {} {}").format(self._keys(), sql.SQL(op),
                                          values if len(self.key) == 1 else sql.SQL("({})").format(values))

    def _query(self, conds: list[Any], limit: int | None) -> Any:
        from psycopg import sql
        query = sql.SQL("SELECT {} FROM {}").format(self._cols(), self.table)
        if conds:
            query += sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds)
        query += sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(sql.Identifier(k) for k in self.key))
        if limit is not None:
            query += sql.SQL(" LIMIT {}").format(sql.Literal(limit))
        return query

    # --- keys --------------------------------------------------------------------------------------
    def first_key(self, conn: Any) -> Key:
        """The backfill's first position: the least key ordered here (zeros where the table is empty),
        or no key read for a compared key."""
        from psycopg import sql
        if self.compared:
            return ()
        order = sql.SQL(", ").join(sql.Identifier(k) for k in self.key)
        row = conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY {} LIMIT 1").format(order, self.table, order)).fetchone()
        return (0,) * len(self.bits) if row is None else self.parts_of([str(v) for v in row])

    def successor(self, key: Parts) -> Parts | None:
        """The next key after `key` in the key's order (integers: the last column plus one, carried
        into the column before at its type's bound); None past the greatest."""
        out = list(key)
        for i in range(len(out) - 1, -1, -1):
            if out[i] < (1 << self.bits[i]) - 1:
                out[i] += 1
                return tuple(out)
            out[i] = -(1 << self.bits[i])
        return None

    def after(self, rows: pa.Table, i: int) -> Key | None:
        """The position once row `i` is read: its key, compared upstream, or the next key ordered here
        (None past the greatest)."""
        texts = tuple(rows.column(s)[i].as_py() for s in self.slots)
        return texts if self.compared else self.successor(self.parts_of(list(texts)))

    def splits(self, pos: Key) -> dict[str, int]:
        """The offsets that hold position `pos` (`postgres_cdc_position.py`)."""
        if self.compared:
            return text_splits(pos)
        return {s: int(v) for s, v in zip(ordered_splits(len(self.bits)), pos, strict=True)}

    def position(self, offsets: Mapping[str, int]) -> Key:
        """The position `offsets` hold. A table made before its key had the splits it has now (read in one
        chunk then) starts from the least key: no key read, compared, or the least any could have."""
        if self.compared:
            return text_position(offsets)
        names = ordered_splits(len(self.bits))
        if all(s in offsets for s in names):
            return tuple(offsets[s] for s in names)
        return tuple(-(1 << b) for b in self.bits)

    def parts_of(self, texts: list[str]) -> Parts:
        """A key's position from its columns' text forms (ValueError if one is not such a value)."""
        out: list[int] = []
        for text, is_uuid in zip(texts, self.uuids, strict=True):
            out.extend(uuid_parts(text) if is_uuid else (int(text),))
        return tuple(out)

    def values_of(self, key: Key) -> list[int | str]:
        """The key columns' values of a position (a uuid as its text)."""
        out: list[int | str] = []
        parts = iter(key)
        for is_uuid in self.uuids:
            out.append(uuid_text(int(next(parts)), int(next(parts))) if is_uuid else next(parts))
        return out

    def passed(self, conn: Any, keys: Iterable[tuple[str, ...]], pos: Key) -> Callable[[tuple[str, ...]], bool]:
        """Whether a key (its columns' text forms, as pgoutput sends them) is one the backfill at `pos`
        has read: ordered here, or asked of PostgreSQL for all of `keys` at once, a compared key."""
        if not self.compared:
            def ordered(texts: tuple[str, ...]) -> bool:
                try:
                    return self.parts_of([str(t) for t in texts]) < pos  # PostgreSQL's row order
                except ValueError:
                    return True  # set aside by the parse, which names the value
            return ordered
        distinct = list({k for k in keys if all(isinstance(v, str) for v in k)}) if pos else []  # (not NULL, sent)
        if not distinct:
            return lambda texts: False
        below = {distinct[i - 1] for (i,) in conn.execute(self._passed_query(), [
            *([k[c] for k in distinct] for c in range(len(self.key))), *pos]).fetchall()}
        return below.__contains__

    def _passed_query(self) -> Any:
        """The ordinals of the keys (a text array a column) at or below a position (a text a column), each
        column cast to its type and compared in its collation."""
        from psycopg import sql
        names = [sql.Identifier(f"k{i}") for i in range(len(self.key))]
        return sql.SQL("SELECT i FROM unnest({}) WITH ORDINALITY AS u({}, i) WHERE ({}) <= ({})").format(
            sql.SQL(", ").join(sql.SQL("%s::text[]") for _ in self.key), sql.SQL(", ").join(names),
            sql.SQL(", ").join(self._typed(n, k) for n, k in zip(names, self.key, strict=True)),
            sql.SQL(", ").join(self._typed(sql.SQL("%s"), k) for k in self.key))

    # --- reading -----------------------------------------------------------------------------------
    def read(self, conn: Any, pos: Key, end: Key | None, limit: int | None) -> tuple[pa.Table, list[pa.Array] | None,
                                                                                     Key, bool]:
        """The rows of keys from `pos` to `end` (`_range`; `end` None: at most `limit`), in the transaction
        `conn` has begun (REPEATABLE READ, its snapshot not yet taken): the rows, their Arrow values,
        the next position and whether no key is left past it."""
        parts = 1 if end is not None or limit is None else max(1, min(self.parallelism, limit // PART_ROWS))
        if parts > 1:
            return self._parallel(conn, pos, limit or 0, parts)
        conn.execute("SELECT pg_current_snapshot()")  # the snapshot is taken here, by the first statement
        conds = self._range(pos, end)
        if end is None and limit is not None and len(self.bits) != 1 and \
                (last := self._nth_key(conn, conds, limit)) is not None:
            conds.append(self._cmp("<=", last))
        part = self._part(conn, self._query(conds, limit), limit)
        if end is not None:
            return part.rows, part.values, end, False
        if not part.rows.num_rows:
            return part.rows, part.values, pos, True
        after = self.after(part.rows, part.rows.num_rows - 1)
        done = not part.full or after is None
        return part.rows, part.values, _stored(after, pos), done

    def _nth_key(self, conn: Any, conds: list[Any], n: int) -> Key | None:
        """The `n`-th key of those meeting `conds` (None: fewer), from the key's index alone. Bounded by it,
        the chunk is a key range PostgreSQL may read in the heap's order and sort, where the key's order is
        not the heap's (a random uuid, a hash): about 3x faster than an index scan at 500k rows. (A single
        integer key, often in the heap's order, has its parts read by several connections instead.)"""
        from psycopg import sql
        # Output names of their own, as `_cols`: ORDER BY a bare name would sort by the text
        texts = sql.SQL(", ").join(sql.SQL("{}::text AS {}").format(sql.Identifier(k), sql.Identifier(f"_k{i}"))
                                   for i, k in enumerate(self.key))
        query = sql.SQL("SELECT {} FROM {}").format(texts, self.table)
        if conds:
            query += sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds)
        query += sql.SQL(" ORDER BY {} OFFSET {} LIMIT 1").format(
            sql.SQL(", ").join(sql.Identifier(k) for k in self.key), sql.Literal(n - 1))
        row = conn.execute(query).fetchone()
        if row is None:
            return None
        return tuple(row) if self.compared else self.parts_of([str(v) for v in row])

    def _range(self, pos: Key, end: Key | None) -> list[Any]:
        """The conditions of the keys from `pos` to `end` (None: no end): `[pos, end)` ordered here,
        `(pos, end]` compared (an empty position: no key read yet)."""
        from psycopg import sql
        if not self.compared:
            return [self._cmp(">=", pos)] + ([self._cmp("<", end)] if end is not None else [])
        if end is not None and not end:
            return [sql.SQL("false")]
        return ([self._cmp(">", pos)] if pos else []) + ([self._cmp("<=", end)] if end else [])

    def _part(self, conn: Any, query: Any, limit: int | None) -> _Part:
        from psycopg import sql
        # COPY's CSV into Arrow: ~10x a fetch of Python rows
        rows = csv_texts(copy_out(conn, sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(query)), len(self.columns))
        values = arrow_columns(self.columns, rows.columns) if rows.num_rows else None
        return _Part(rows, values, limit is not None and rows.num_rows >= limit)

    def _connections(self, n: int) -> list[Any]:
        self._extra = [c for c in self._extra if not c.closed]
        while len(self._extra) < n:
            self._extra.append(self.open_conn())
        return self._extra[:n]

    def _parallel(self, conn: Any, pos: Key, limit: int, parts: int) -> tuple[pa.Table, list[pa.Array] | None,
                                                                                Key, bool]:
        """One chunk read in `parts` key ranges by as many connections at `conn`'s snapshot."""
        from psycopg import sql
        snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]  # takes the snapshot
        k = sql.Identifier(self.key[0])
        first, top = conn.execute(sql.SQL("SELECT min({}), max({}) FROM {} WHERE {} >= {}").format(
            k, k, self.table, k, sql.Literal(pos[0]))).fetchone()
        if first is None:
            return csv_texts(b"", len(self.columns)), None, pos, True
        span = max(parts, int(self.keys_per_row * limit))
        bounds = sorted({min(first + span * i // parts, top + 1) for i in range(parts + 1)})
        others = self._connections(len(bounds) - 2)
        began = []
        try:
            for c in others:
                c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                began.append(c)
                c.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            results = self._read_parts([conn, *others], bounds, top, limit)
        except BaseException:
            self.close()  # a connection in an unknown state is not used again
            raise
        finally:
            for c in began:
                if not c.closed:
                    c.execute("COMMIT")
        return self._assemble(results, bounds[-1], top, limit, first)

    def _read_parts(self, conns: list[Any], bounds: list[int], top: int, limit: int) -> list[_Part]:
        from psycopg import sql
        k = sql.Identifier(self.key[0])
        results: list[_Part | BaseException | None] = [None] * len(conns)

        def run(i: int) -> None:
            lo, hi = bounds[i], bounds[i + 1]
            upper = sql.SQL("{} <= {}").format(k, sql.Literal(top)) if hi > top else \
                sql.SQL("{} < {}").format(k, sql.Literal(hi))
            try:
                results[i] = self._part(conns[i], self._query([sql.SQL("{} >= {}").format(k, sql.Literal(lo)), upper],
                                                              limit), limit)
            except BaseException as e:  # raised by the caller's thread
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,), name=f"cdc-chunk-{i}") for i in range(1, len(conns))]
        for t in threads:
            t.start()
        run(0)
        for t in threads:
            t.join()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [r for r in results if isinstance(r, _Part)]

    def _assemble(self, parts: list[_Part], span_end: int, top: int, limit: int, first: int) -> tuple[
            pa.Table, list[pa.Array] | None, Key, bool]:
        """The parts' rows in key order up to `limit` rows or the first part cut by its LIMIT; the
        chunk ends after its last row then, else where the parts' ranges end."""
        kept: list[_Part] = []
        total, cut = 0, False
        for part in parts:
            n = part.rows.num_rows
            if total + n > limit:
                n = limit - total
                part = _Part(part.rows.slice(0, n), None if part.values is None else [v.slice(0, n) for v in
                                                                                       part.values], True)
            if n:
                kept.append(part)
            total += n
            if part.full or total >= limit:
                cut = True
                break
        rows = pa.concat_tables([p.rows for p in kept]) if kept else csv_texts(b"", len(self.columns))
        converted = [p.values for p in kept if p.values is not None]
        values = None if not kept or len(converted) < len(kept) else \
            [pa.concat_arrays([v[i] for v in converted]) for i in range(len(self.columns))]
        if cut and total:
            after = self.after(rows, total - 1)
            nxt, done = (int(after[0]), False) if after is not None else (LAST, True)
        else:
            nxt, done = min(span_end, LAST), span_end > top
        if total:
            self.keys_per_row = max(1.0, (nxt - first) / total)
        return rows, values, (nxt,), done


def _stored(key: Key | None, pos: Key) -> Key:
    """A position a split can hold: past the greatest key (None), the greatest storable."""
    return key if key is not None else tuple(LAST for _ in pos)


def read_chunk(conn: Any, reader: ChunkReader, pos: Key, end: Key | None, limit: int | None,
               committed_before: Iterable[int] = ()) -> Chunk | None:
    """A chunk in one REPEATABLE READ transaction, then a WAL mark written after its snapshot (`MARK`:
    written by the same connection). None if a transaction of `committed_before` (xids of transactions whose
    commit lies before the epoch's start) is not visible to the snapshot: its rows would miss it."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        rows, values, after, done = reader.read(conn, pos, end, limit)
        snapshot = str(conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0])  # the transaction's
    finally:
        if not conn.closed:  # (a read stopped mid-COPY closed it: its error is the one to raise)
            conn.execute("COMMIT")
    if any(not visible(snapshot, xid) for xid in committed_before):
        return None
    wal = int(conn.execute(MARK).fetchone()[0])
    if done:
        reader.close()  # the other connections are not needed again
    return Chunk(rows, values, after, wal, done)


def visible(snapshot: str, xid: int) -> bool:
    """Whether a finished transaction `xid` (32 bits, as pgoutput sends it) is seen by `snapshot`
    (`xmin:xmax:xip,...`, 64-bit xids): neither running then (`xip`) nor begun at or after `xmax`."""
    _, xmax, running = snapshot.split(":")
    xid &= 0xFFFFFFFF
    if xid in {int(x) & 0xFFFFFFFF for x in running.split(",") if x}:
        return False
    return (xid - int(xmax)) & 0xFFFFFFFF >= 1 << 31  # before xmax, in the circular order of 32-bit xids


class Prefetch:
    """The next chunk, read on a connection of its own while the epoch runs; one read at a time with
    the connector's own (`take` and `wait` join it first)."""

    def __init__(self, reader: ChunkReader, open_conn: Callable[[], Any]) -> None:
        self.reader, self.open_conn = reader, open_conn
        self._conn: Any = None
        self._thread: threading.Thread | None = None
        self._result: tuple[Key, int, Chunk | None] | None = None

    def start(self, pos: Key, start: int, limit: int, committed_before: Iterable[int]) -> None:
        """Reads the chunk from `pos` for the plan whose stream starts at `start`."""
        self.wait()
        xids = list(committed_before)

        def run() -> None:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self.open_conn()
                self._result = (pos, start, read_chunk(self._conn, self.reader, pos, None, limit, xids))
            except Exception as e:  # the plan reads the chunk itself, and reports what fails then
                log.debug("reading the next chunk ahead failed: %s", e)
                self._result = None
                self.close_conn()

        self._thread = threading.Thread(target=run, name="cdc-prefetch", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def take(self, pos: Key, start: int, limit: int) -> Chunk | None:
        """The chunk read ahead, if it is the one this plan reads: from `pos`, for a stream from
        `start`; its first `limit` rows where it has more (still a whole key range at its snapshot)."""
        self.wait()
        result, self._result = self._result, None
        if result is None or result[:2] != (pos, start) or (chunk := result[2]) is None:
            return None
        if chunk.rows.num_rows <= limit:
            return chunk
        after = self.reader.after(chunk.rows, limit - 1) if limit > 0 else None
        if after is None:
            return None
        values = None if chunk.values is None else [v.slice(0, limit) for v in chunk.values]
        return Chunk(chunk.rows.slice(0, limit), values, after, chunk.wal, False)

    def close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self.wait()
        self._result = None
        self.close_conn()
