"""The postgres-cdc connector, with RisingWave's options: a PostgreSQL table's rows, then its changes.

    CREATE TABLE t (id int PRIMARY KEY, ...) WITH (connector = 'postgres-cdc', hostname = 'host' | '/socket/dir',
        port = '5432', username = '...', password = '...', database.name = '...', schema.name = 'public',
        table.name = '...' [, slot.name = '...', publication.name = '...', snapshot = 'true',
        snapshot.batch_size = n, snapshot.parallelism = n, source_rate_limit = n, max.rows.per.epoch = n])

At CREATE a publication of the table (created if absent) and a logical replication slot (`pgoutput`,
created if absent) are made; the slot's position is where the stream starts. Two splits:
- `lsn`: the stream's position. An epoch takes the upstream transactions whose commit record lies in
  `[start, end)`, whole, read with `pg_logical_slot_peek_binary_changes` (which does not consume) and
  decoded by `pgoutput.py`. The end is committed with the epoch; the slot is advanced to the committed
  position (`pg_replication_slot_advance`) only at the next plan, after that commit, so a crash
  anywhere replays from the slot, and transactions before the committed position are filtered out.
- `backfill` (and more splits, `postgres_cdc_position.py`): the position, the next primary-key value
  to read for integer and uuid keys, the last one read for any other (its order is PostgreSQL's: a
  text key's is its collation's). An epoch of the backfill reads one chunk, `WHERE k >= pos ORDER BY k
  LIMIT n` (`k > pos`), in a REPEATABLE READ transaction, then a WAL position X written after its
  snapshot (a flushed logical message no publication decodes); the epoch's stream range ends at X or
  later (`postgres_cdc_backfill.py` reads a chunk by several connections at one snapshot, and reads
  the next one while the epoch runs). Stream changes of keys the backfill has not read yet are left
  out (the chunk that reads them later has them); those it has, the chunk's included, are applied
  after the chunk's rows in commit order. Whether a key has been read is asked of PostgreSQL, one
  query an epoch, where Python cannot repeat the key's order.

Why that is exact: every change is a full row image of its key (an insert or update carries the new
row, a delete removes the key), so the last change of a key in `[start, X)` is its row at X,
whatever the chunk saw; a key without one keeps the chunk's row, which is its row at X because the
chunk's snapshot sees every transaction committed before `start` (it was taken after the previous
epoch's plan, and a transaction of a range since the last chunk not yet visible to it fails the chunk) and
none committed at or after X (X was read after the snapshot). A TOASTed value an
update left unchanged is not sent: it is taken from the old row (REPLICA IDENTITY FULL), else the
change is set aside as a bad record naming the fix. After a crash a replayed backfill epoch reads
its chunk's key range again at a newer snapshot: its keys may run ahead of the epoch's position
until the stream passes the replay's, and nothing is lost or doubled (full images again).

A changed upstream table (the Relation message differs from the declared columns) or a TRUNCATE
stops the source at that transaction, saying so in SHOW JOBS and SHOW SOURCES. DROP TABLE drops the
slot and the publication its CREATE made (never those the user named that existed before), so no
slot of ours holds WAL forever (a DROP killed before the slot's drop, or whose upstream was down:
the next open drops it, `postgres_cdc_release.py`); CREATE refuses a slot another table of the warehouse reads. A
`hostname` (any host of a list) that is a Unix-socket directory connects only where the server asks for the password
(libpq's require_auth): a socket that trusts the peer would let a CREATE act as the owner's own
operating-system user, which the PostgreSQL sink refuses for the same reason."""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from sparkwave.connectors.base import Connector
from sparkwave.connectors.files import read_ddl
from sparkwave.connectors.options import Options, boolean, choice, integer, max_rows_per_epoch, rate_limit, text
from sparkwave.connectors.pgoutput import UNCHANGED, Change, Decoder, PgoutputError, RelationInfo, Txn
from sparkwave.connectors.postgres_cdc_backfill import INT_BITS, Chunk, ChunkReader, Prefetch, read_chunk
from sparkwave.connectors.postgres_cdc_check import (
    KeyColumn,
    column_problems,
    estimate,
    key_columns,
    publish,
    slot_position,
    type_name,
    upstream_columns,
)
from sparkwave.connectors.postgres_cdc_position import BACKFILL, Key, span
from sparkwave.connectors.postgres_cdc_values import SESSION_SETTINGS, UPSERT, IntentRows, RowParser, raw_text
from sparkwave.core.crash import crash_point
from sparkwave.core.errors import SqlError
from sparkwave.core.local_frames import local_batches
from sparkwave.core.schema import Schema, SqlType

log = logging.getLogger("sparkwave.postgres_cdc")
LSN, BACKFILLED = "lsn", "backfilled"
# The backfill's progress (SHOW JOBS, the dashboard: `meta/cdc_progress.py`): rows read so far (a split each
# chunk's epoch advances by its rows), and, set at CREATE, the upstream's estimated rows and when it began.
ROWS_READ, ROWS_ESTIMATE, STARTED = "backfill_rows", "rows_estimate", "backfill_started"
# Set at CREATE: what the CREATE made upstream (OWN_SLOT | OWN_PUBLICATION), which DROP alone drops.
MADE, OWN_SLOT, OWN_PUBLICATION = "made", 1, 2
KEY_DELETE = 5  # core/chunk.py's intents (UPSERT: 4)
IDLE_ADVANCE_BYTES = 1 << 20  # with no change of the table, the position moves once the WAL moved this far
STATEMENT_TIMEOUT_MS = 120_000
_NAME = re.compile(r"[a-z0-9_]{1,63}")

OPTIONS = Options(
    "postgres-cdc",
    choice("connector", "postgres-cdc"),
    text("hostname"),
    integer("port", 1, 65535, 5432),
    text("username"),
    text("password", secret=True),
    text("database.name"),
    text("schema.name", "public"),
    text("table.name"),
    text("slot.name"),
    text("publication.name"),
    boolean("snapshot", True),
    integer("snapshot.batch_size", 1, 10**7, 10_000),
    integer("snapshot.parallelism", 1, 16, 4),  # connections reading a chunk of a single integer key at once
    rate_limit("source_rate_limit"),
    max_rows_per_epoch(),
)


class CdcStopped(SqlError):
    """The stream cannot go past a transaction (a schema change, a TRUNCATE): it names it and why."""


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class PostgresCdc(Connector):
    has_bad_records = True
    holds_rows = True  # a chunk is read at the plan (`_planned`)
    OPTIONS = OPTIONS

    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        super().__init__(table, schema, options)
        if schema.append_only:
            raise SqlError(f"{self.where}: a postgres-cdc table needs the upstream table's PRIMARY KEY")
        for opt in ("hostname", "username", "database.name", "table.name"):
            if not self.value(opt):
                raise SqlError(f"{self.where}: the postgres-cdc connector needs {opt} = '...'")
        self.upstream = (self.value("schema.name"), self.value("table.name"))
        self.slot = self.value("slot.name") or f"sparkwave_{table}"
        self.own_publication = not self.value("publication.name")
        self.publication = self.value("publication.name") or f"sparkwave_{table}"
        for what, name in (("slot.name", self.slot), ("publication.name", self.publication)):
            if not _NAME.fullmatch(name):
                raise SqlError(f"{self.where}: {what} {name!r} must be 1 to 63 lower-case letters, digits or "
                               "underscores (PostgreSQL's rule for slot names)")
        self.key = list(schema.key)
        self._conn: Any = None
        self._types: dict[int, str] = {}
        self._planned: dict[str, pa.RecordBatch] = {}
        self._positions: list[tuple[str, int]] = []
        self._retry_at = 0.0
        self._failures = 0
        # The last planned stream range's end, and the xids of the ranges since the last chunk taken
        self._decoded: tuple[int, list[int]] = (-1, [])

    @functools.cached_property
    def columns(self) -> list[tuple[str, SqlType]]:
        """The declared columns read from upstream: the table's generated ones are computed by its step."""
        if computed_key := self.computed & set(self.key):
            raise SqlError(f"{self.where}: the primary key is read from upstream: {', '.join(sorted(computed_key))} "
                           "cannot be a generated column")
        return [(c.name, c.type) for c in self.schema.columns if c.name not in self.computed]

    @functools.cached_property
    def reader(self) -> ChunkReader:
        return ChunkReader(self._ident(), self.columns, self.key, self.int_option("snapshot.parallelism"),
                           self._open, self._key_types())

    def _key_types(self) -> dict[str, KeyColumn]:
        """The key columns upstream, where one is declared other than as an integer (a uuid's order is
        its bytes', any other's PostgreSQL's: `key_parts`)."""
        declared = dict(self.columns)
        if all(declared[k].name in INT_BITS for k in self.key):
            return {}
        found = key_columns(self._connect(), self._regclass(), self.key)
        if missing := [k for k in self.key if k not in found]:
            raise SqlError(f"{self.where}: upstream table {self.qualified} has no column {missing[0]!r} of the "
                           "declared primary key")
        return found

    @functools.cached_property
    def prefetch(self) -> Prefetch:
        return Prefetch(self.reader, self._open)

    @property
    def int_key(self) -> bool:
        """A single integer key: its chunks' keys known absent from the table are a range (`absent_keys`)."""
        return len(self.reader.bits) == 1

    @functools.cached_property
    def parser(self) -> RowParser:
        return RowParser(self.columns)

    @functools.cached_property
    def _read_schema(self) -> Schema:
        return Schema(tuple(c for c in self.schema.columns if c.name not in self.computed), self.schema.key)

    @property
    def address(self) -> str:
        host = self.value("hostname")
        return f"PostgreSQL {host}" + ("" if self._socket() else f":{self.value('port')}")

    def _socket(self) -> bool:
        """Whether any host of the (libpq: comma-separated) host list is a Unix-socket directory."""
        return any(h.strip().startswith(("/", "@")) for h in self.value("hostname").split(","))

    def exclusive(self) -> list[str]:
        return [f"replication slot {self.slot!r} of database {self.value('database.name')!r} at {self.address}"]

    @property
    def qualified(self) -> str:
        return ".".join(self.upstream)

    # --- the connection ----------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self._open()
        return self._conn

    def _open(self) -> Any:
        """A new connection to the upstream with the session's settings (the chunk reads' too)."""
        import psycopg
        settings = " ".join(f"-c {k}={v.replace(' ', '')}" for k, v in SESSION_SETTINGS.items())
        # Over a Unix socket the server may trust the peer's operating-system user: the connection
        # must then prove the password, or a CREATE could act as the owner's own user (issue 43's rule
        # for the PostgreSQL sink, which refuses sockets). libpq refuses a server that does not ask.
        # Any host of a list: libpq falls back to the next host when one fails.
        extra: dict[str, Any] = {"require_auth": "password,md5,scram-sha-256"} if self._socket() else {}
        return psycopg.connect(
            host=self.value("hostname"), port=self.value("port"), user=self.value("username"),
            password=self.value("password") or "", dbname=self.value("database.name"), autocommit=True,
            connect_timeout=5, application_name="sparkwave-cdc",
            options=f"{settings} -c statement_timeout={STATEMENT_TIMEOUT_MS}", **extra)

    def close(self) -> None:
        if "prefetch" in self.__dict__:
            self.prefetch.close()
        if "reader" in self.__dict__:
            self.reader.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _one(self, query: Any, params: tuple = ()) -> Any:
        row = self._connect().execute(query, params).fetchone()
        return None if row is None else row[0]

    def _ident(self) -> Any:
        from psycopg import sql
        return sql.Identifier(*self.upstream)

    # --- CREATE and DROP ---------------------------------------------------------------------------
    def initial_offsets(self) -> dict[str, int]:
        """Checks the upstream table against the declared columns and key, makes the publication and
        the slot (each if absent); the stream starts at the slot's position. Any error creates nothing."""
        import psycopg
        try:
            return self._prepare()
        except psycopg.Error as e:
            raise SqlError(f"{self.where}: {self.address}: {str(e).strip()}") from None

    def _prepare(self) -> dict[str, int]:
        level = self._one("SHOW wal_level")
        if level != "logical":
            raise SqlError(f"{self.where}: {self.address} has wal_level = {level}; CDC needs wal_level = logical "
                           "(ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)")
        self._check_columns()
        conn, named = self._connect(), self.value("slot.name")
        made = OWN_PUBLICATION if publish(conn, self.where, self.publication, self._ident(), self.upstream) else 0
        lsn, slot_made = slot_position(conn, self.where, self.slot, bool(named), self.value("database.name"))
        made |= OWN_SLOT if slot_made else 0
        if not self.value("snapshot"):
            return {LSN: int(lsn), BACKFILLED: 1, MADE: made}
        first = self.reader.splits(self.reader.first_key(conn))
        return {LSN: int(lsn), **first, ROWS_READ: 0, ROWS_ESTIMATE: estimate(conn, self._ident()),
                STARTED: int(time.time()), MADE: made}

    def _regclass(self) -> str:
        return str(self._ident().as_string(self._connect()))

    def _check_columns(self) -> None:
        conn = self._connect()
        rows = upstream_columns(conn, self._regclass())
        if not rows:
            raise SqlError(f"{self.where}: {self.address} has no table {self.qualified} in database "
                           f"{self.value('database.name')!r}")
        generated = {n for n, _, _, g in rows if g}
        problems = self._column_problems([(n, self._type_name(t)) for n, t, _, _ in rows], generated)
        if problems:
            raise SqlError(f"{self.where}: the columns do not match upstream table {self.qualified}: "
                           + "; ".join(problems))
        upstream_key = sorted(n for n, _, k, _ in rows if k)
        if upstream_key != sorted(self.key):
            raise SqlError(f"{self.where}: PRIMARY KEY ({', '.join(self.key)}) is not upstream table "
                           f"{self.qualified}'s ({', '.join(upstream_key) or 'none'}); declare the same key")

    def _column_problems(self, upstream: list[tuple[str, str]], generated: set[str] | None = None) -> list[str]:
        """What differs between the upstream columns (name, resolved type) and the declared ones."""
        return column_problems(dict(self.columns), self.computed, upstream, generated or set())

    def release(self, startup: dict[str, int]) -> None:
        """DROP TABLE: the slot goes (it would hold WAL forever) and the publication, each only if the
        CREATE made it (`startup`, its offsets, say which; a slot or publication the user named that
        existed before is someone else's). Tables created before that was recorded: if not named."""
        from psycopg import sql
        named = (0 if self.value("slot.name") else OWN_SLOT) | (OWN_PUBLICATION if self.own_publication else 0)
        made = startup.get(MADE, named)
        conn = self._connect()
        # A slot is briefly active while a peek that just ended lets go of it.
        for attempt in range(50 if made & OWN_SLOT else 0):
            try:
                if self._one("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)):
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
                break
            except Exception:
                if attempt == 49:
                    raise
                time.sleep(0.1)
        if made & OWN_PUBLICATION:
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(self.publication)))
        self.close()

    # --- the stream --------------------------------------------------------------------------------
    def _advance(self, lsn: int) -> None:
        """Moves the slot to the committed position (never back: advancing to an earlier one is a no-op)."""
        at = self._one("SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = %s",
                       (self.slot,))
        if at is None:
            raise CdcStopped(f"{self.where}: replication slot {self.slot!r} no longer exists on {self.address} "
                             "(dropped outside sparkwave): the changes since cannot be read; DROP and CREATE the "
                             "table again")
        if int(at) < lsn:
            crash_point("cdc_before_slot_advance")
            self._connect().execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, lsn_text(lsn)))

    def _wal_position(self) -> int:
        """The WAL flush position: decoding reads only flushed WAL, and a stream range needs no more
        than a well-defined end (a transaction committed after it goes to the next epoch)."""
        return int(self._one("SELECT (pg_current_wal_flush_lsn() - '0/0')::bigint"))

    def _changes(self, start: int, upto: int, limit: int | None) -> tuple[list[Txn], bool, CdcStopped | None]:
        """The table's transactions committed in `[start, upto)`, whole, at most `limit` changes (at
        least one transaction); whether they are all of them; and why the stream stops after them."""
        # The peek counts messages (Begin, Relation, Commit too: three for a transaction of one change)
        # and stops after the transaction that passes the count.
        nchanges = None if limit is None else 3 * limit + 8
        rows = self._connect().execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, 'proto_version', '1', "
            "'publication_names', %s)", (self.slot, lsn_text(upto), nchanges, self.publication)).fetchall()
        decoder, out, total = Decoder(), list[Txn](), 0
        complete = nchanges is None or len(rows) < nchanges
        for (data,) in rows:
            try:
                txn = decoder.feed(bytes(data))
            except PgoutputError as e:
                raise SqlError(f"{self.where}: a pgoutput message cannot be read: {e}") from None
            if txn is None or not start <= txn.commit_lsn < upto:
                continue
            if (stop := self._stops(txn)) is not None:
                return out, False, stop
            if limit is not None and out and total + len(txn.changes) > limit:
                return out, False, None
            out.append(txn)
            total += len(txn.changes)
        return out, complete, None

    def _ours(self, info: RelationInfo) -> bool:
        return (info.namespace, info.name) == self.upstream

    def _stops(self, txn: Txn) -> CdcStopped | None:
        """Why the stream cannot take `txn`: the table truncated, or its columns changed."""
        at = f"the transaction committed at LSN {lsn_text(txn.commit_lsn)} (xid {txn.xid})"
        if any(info is None or self._ours(info) for info in txn.truncated):
            return CdcStopped(f"{self.where}: {at} truncated upstream table {self.qualified}, which a CDC table "
                              "cannot apply; the source stops here: DROP the table and CREATE it again"
                              f" (until then, replication slot {self.slot!r} holds the upstream's WAL)")
        for info in txn.described:
            if self._ours(info):
                problems = self._column_problems([(n, self._type_name(oid)) for n, oid, _, _ in info.columns])
                if problems:
                    return CdcStopped(f"{self.where}: upstream table {self.qualified} changed at {at}: "
                                      + "; ".join(problems) + ". The source stops before it: DROP the table and "
                                      "CREATE it again with the new columns (until then, replication slot "
                                      f"{self.slot!r} holds the upstream's WAL)")
        return None

    def _type_name(self, oid: int) -> str:
        if oid not in self._types:
            self._types[oid] = type_name(self._connect(), oid)
        return self._types[oid]

    # --- the backfill ------------------------------------------------------------------------------
    def _read_chunk(self, pos: Key, end: Key | None, limit: int | None, prior: list[int] | None = None) -> Chunk | None:
        """The rows of keys from `pos` to `end` (`ChunkReader._range`; `end` None: at most `limit`), in one
        REPEATABLE READ transaction (`postgres_cdc_backfill.py`), and the WAL position after its
        snapshot; None if a transaction of `prior` (committed before the stream's start) is not visible."""
        self.prefetch.wait()  # the reader's connections are one reader's at a time
        return read_chunk(self._connect(), self.reader, pos, end, limit, prior or ())

    # --- planning and reading ----------------------------------------------------------------------
    def plan(self, committed: dict[str, int], elapsed_ms: float) -> dict[str, list[int]]:
        if self.paused() or time.time() < self._retry_at:
            return {}
        import psycopg
        try:
            ranges = self._plan(committed, self.budget(elapsed_ms))
        except Exception as e:  # whatever the upstream does, this source waits and says why; the pipeline goes on
            if not isinstance(e, (SqlError, psycopg.Error, OSError)):
                log.exception("%s: planning failed", self.where)
            if isinstance(e, psycopg.Error):
                self.close()
            self._failures += 1
            self._retry_at = time.time() + min(30.0, 0.5 * 2.0 ** self._failures)
            reason = str(e) if isinstance(e, SqlError) else f"{self.where}: {self.address}: {str(e).strip()}"
            if self.status != reason:
                log.warning("%s", reason)
            self.status = reason
            return {}
        self._failures = 0
        return ranges

    def _plan(self, committed: dict[str, int], budget: int) -> dict[str, list[int]]:
        start, pos, done = committed.get(LSN, 0), self.reader.position(committed), BACKFILLED in committed
        if self._decoded[0] != start and not done:  # a restart, or a connector replaced by an ALTER: the last
            # committed range is still in the slot (advanced below), its transactions for the next chunk's check
            self._decoded = (start, [t.xid for t in self._changes(0, start, None)[0]])
        self._advance(start)
        target = self._wal_position()
        txns, complete, stop = self._changes(start, target, budget)
        chunk = None
        room = budget - sum(len(t.changes) for t in txns)
        limit = min(room, self.int_option("snapshot.batch_size"))
        if complete and not done and room > 0:
            prior = self._decoded[1] if self._decoded[0] == start else []  # the xids since the last chunk
            chunk = self.prefetch.take(pos, start, limit) or self._read_chunk(pos, None, limit, prior)
            crash_point("cdc_after_chunk_read")
            # The range must end after the chunk's snapshot; a chunk read ahead was, before `target`.
            if chunk is not None and chunk.wal > target:
                target = chunk.wal
                txns, complete, stop = self._changes(start, target, None)
            if stop is not None:  # the chunk may have seen past where the stream stops: it is not taken
                chunk = None
        end = target if complete else (txns[-1].end_lsn if txns else start)
        self.status = None if stop is None else str(stop)
        ranges: dict[str, list[int]] = {}
        if end > start and (txns or chunk is not None or end - start >= IDLE_ADVANCE_BYTES):
            ranges[LSN] = [start, end]
        if chunk is not None:
            last = () if chunk.done and self.reader.compared else chunk.next  # no key's bytes kept once done
            ranges.update(span(self.reader.splits(pos), self.reader.splits(last)))
            read = committed.get(ROWS_READ, 0)
            ranges[ROWS_READ] = [read, read + chunk.rows.num_rows]
            if chunk.done:
                ranges[BACKFILLED] = [0, 1]
        elif ranges and not done:  # a replay's read needs the position, which the epoch keeps
            ranges.update(span(self.reader.splits(pos), self.reader.splits(pos)))
        if ranges:
            self._planned = {_key(ranges): self._batch(chunk, txns, self._position(ranges))}
        if LSN in ranges:  # a chunk's snapshot saw every transaction before `start`; without one, they carry on
            since = [] if chunk is not None or done or self._decoded[0] != start else self._decoded[1]
            self._decoded = (end, since + [t.xid for t in txns])
        if chunk is not None and not chunk.done and LSN in ranges:  # the next chunk, while this epoch runs
            self.prefetch.start(chunk.next, end, limit, self._decoded[1])
        elif chunk is not None and chunk.done:
            self.prefetch.close()  # its connection is not needed again
        return ranges

    def _range_key(self, ranges: dict[str, list[int]], end: int) -> Key:
        """A backfill range's start (`end` 0) or end (1); the least key for an epoch an earlier
        release planned with fewer splits (its keys were read in one chunk, from the least)."""
        return self.reader.position({s: r[end] for s, r in ranges.items()})

    def _position(self, ranges: dict[str, list[int]]) -> Key | None:
        """The backfill's position once the epoch of `ranges` is done (None: every key's changes
        apply): while the backfill runs, every epoch's ranges name it."""
        if BACKFILL not in ranges or BACKFILLED in ranges:
            return None
        return self._range_key(ranges, 1)

    def planned_rows(self, ranges: dict[str, list[int]]) -> int:
        """The intents planned for `ranges` (the stream's offsets are WAL positions, the backfill's
        keys); after a restart, before the replay reads them, the chunk's rows."""
        batch = self._planned.get(_key(ranges))
        if batch is not None:
            return batch.num_rows
        read = ranges.get(ROWS_READ, [0, 0])
        return read[1] - read[0]

    def read(self, spark: SparkSession, ranges: dict[str, list[int]]) -> DataFrame:
        return local_batches(spark, [self.read_arrow(ranges)], read_ddl(self.schema))

    def absent_keys(self, ranges: dict[str, list[int]]) -> tuple[int, int] | pa.Array | None:
        """A chunk's keys: the table holds none of them yet, since the stream's changes of keys the
        backfill had not read were left out (`_passed`). A single integer key's range, or another single
        key's values (the chunk's rows lead the batch planned; a replay's are looked up)."""
        if self.int_key:
            lo, hi = ranges.get(BACKFILL, [0, 0])
            return (lo, hi) if hi > lo else None
        read, batch = ranges.get(ROWS_READ, [0, 0]), self._planned.get(_key(ranges))
        if len(self.key) != 1 or batch is None or read[1] <= read[0]:
            return None
        return batch.column(self.key[0]).slice(0, read[1] - read[0])

    def read_arrow(self, ranges: dict[str, list[int]]) -> pa.RecordBatch:
        batch = self._planned.get(_key(ranges))  # kept: an attempt that fails is retried with the same rows
        if batch is None:  # a replay after a crash: the same stream range, the chunk's key range again
            start, end = ranges.get(LSN, [0, 0])
            txns: list[Txn] = []
            if end > start:
                self._advance(start)
                txns, _, stop = self._changes(start, end, None)
                if stop is not None:
                    raise stop
            chunk = None
            lo, hi = self._range_key(ranges, 0), self._range_key(ranges, 1)
            if BACKFILL in ranges and (hi != lo or ROWS_READ in ranges or BACKFILLED in ranges):  # it took a chunk
                # The last chunk read every key from `lo`: its end may be the greatest position a split holds,
                # which a bigint key can equal (a range ending there would leave that key out), and so may its
                # start (the key before it the greatest but one).
                chunk = self._read_chunk(lo, None if BACKFILLED in ranges else hi, None)  # names no xid: never None
            batch = self._batch(chunk, txns, self._position(ranges))
        return batch

    def positions(self, seq: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """The split and offset of each row of the last read: `backfill` and the row's key for a
        chunk's rows (its key for an integer key, else 0), `lsn` and its transaction's commit LSN."""
        at = [self._positions[i] if 0 <= i < len(self._positions) else (LSN, 0) for i in seq.to_pylist()]
        return pa.array([s for s, _ in at], pa.string()), pa.array([o for _, o in at], pa.int64())

    # --- rows --------------------------------------------------------------------------------------
    def _batch(self, chunk: Chunk | None, txns: list[Txn], pos: Key | None) -> pa.RecordBatch:
        """The epoch's intents: the chunk's rows as upserts, then each change of a key the backfill at
        `pos` has read (None: every key), in commit order."""
        out = IntentRows(len(self.columns))
        names = [n for n, _ in self.columns]
        bulk = chunk.values if chunk is not None and chunk.rows.num_rows else None
        if bulk is not None:
            out.positions = [(BACKFILL, 0)] * len(bulk[0])  # no bad row among them
        key_slot = self.reader.slots[0] if self.int_key else -1
        slow = zip(*[c.to_pylist() for c in chunk.rows.columns], strict=True) if chunk is not None and bulk is None \
            else []
        for texts in slow:
            at = int(texts[key_slot]) if key_slot >= 0 and texts[key_slot] is not None else 0
            self._add(out, UPSERT, dict(zip(names, texts, strict=True)), (BACKFILL, at))
        ours = [(txn, change, [c[0] for c in change.relation.columns]) for txn in txns for change in txn.changes
                if change.relation is not None and self._ours(change.relation)]
        passed = self._passed(ours, pos)
        for txn, change, names in ours:
            self._change(out, change, names, passed, txn)
        self._positions = out.positions
        return self._widen(out.batch(self._read_schema, bulk))

    def _widen(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch with the table's generated columns (NULL: the table's step computes them)."""
        if not self.computed:
            return batch
        cols = [batch.column(c.name) if c.name not in self.computed else pa.nulls(batch.num_rows, c.type.arrow)
                for c in self.schema.columns]
        extra = batch.schema.names[len(self.columns):]
        return pa.RecordBatch.from_arrays(cols + [batch.column(n) for n in extra],
                                          names=[*self.schema.names, *extra])

    def _passed(self, ours: list[tuple[Txn, Change, list[str]]], pos: Key | None) -> Callable[[dict[str, Any]], bool]:
        """Whether a changed row's key is one the backfill at `pos` (None: done) has read: its change applies."""
        if pos is None:
            return lambda row: True
        keys: list[Any] = []
        for _, change, names in ours if self.reader.compared else ():  # (ordered here: a key at a time)
            if not set(self.key) <= set(names):
                continue
            slots = [names.index(k) for k in self.key]
            keys += [tuple(values[i] for i in slots) for values in (change.old, change.new) if values is not None]
        test = self.reader.passed(self._connect() if keys else None, keys, pos)
        return lambda row: all(row.get(k) is not None for k in self.key) and test(tuple(row[k] for k in self.key))

    def _change(self, out: IntentRows, change: Change, names: list[str], passed: Callable[[dict[str, Any]], bool],
                txn: Txn) -> None:
        where = (LSN, txn.commit_lsn)
        old = dict(zip(names, change.old, strict=True)) if change.old is not None else None
        new = dict(zip(names, change.new, strict=True)) if change.new is not None else None
        if new is not None:
            missing = [n for n, v in new.items() if v is UNCHANGED]
            for n in missing:
                if old is None or old.get(n) is UNCHANGED:
                    error = (f"{self.where}: the update committed at LSN {lsn_text(txn.commit_lsn)} left column "
                             f"{n!r} (a TOASTed value) unchanged, which pgoutput does not send; ALTER TABLE "
                             f"{self.qualified} REPLICA IDENTITY FULL makes it sent")
                    out.bad(error, raw_text({k: v for k, v in new.items() if v is not UNCHANGED}), where)
                    return
                new[n] = old[n]
        if old is not None and any(old[k] is None for k in self.key):
            out.bad(f"{self.where}: the change committed at LSN {lsn_text(txn.commit_lsn)} carries no primary key of "
                    f"the old row (its REPLICA IDENTITY is another index); ALTER TABLE {self.qualified} REPLICA "
                    "IDENTITY DEFAULT (or FULL)", raw_text({k: v for k, v in old.items() if v is not UNCHANGED}), where)
            return
        if old is not None and (new is None or any(old[k] != new[k] for k in self.key)):
            if passed(old):  # a delete, or an update that changed the key: the old key goes
                self._add(out, KEY_DELETE, {n: (old[n] if n in self.key else None) for n in names}, where)
        if new is not None and passed(new):
            self._add(out, UPSERT, new, where)

    def _add(self, out: IntentRows, op: int, texts: dict[str, Any], where: tuple[str, int]) -> None:
        ordered = [texts.get(n) for n, _ in self.columns]
        try:
            out.add(op, self.parser.parse(ordered), where)
        except ValueError as e:
            out.bad(f"{self.where}: {'the backfill' if where[0] == BACKFILL else f'LSN {lsn_text(where[1])}'}: {e}",
                    raw_text(texts), where)


def _key(ranges: dict[str, list[int]]) -> str:
    return json.dumps(ranges, sort_keys=True)
