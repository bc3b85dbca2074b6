"""The `Backend` over the owner's `Session`: one `SessionClient` per connection, with its own
PostgreSQL session parameters (`session_sql.py`), its own `statement_timeout`, and its running
statement's Spark jobs under a job tag of its own, so that a CancelRequest stops exactly them.

Each statement is offered first to the session statements (SET of a PostgreSQL parameter, SHOW,
BEGIN/COMMIT ...), then to the catalog emulation (`pg_catalog.py`: psql's `\\d`, drivers'
introspection), and otherwise runs as sparkwave SQL, as `Session.sql` runs it. Rows stream from
`Session.fetch` a batch at a time, never collected whole."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, StringType
from sqlglot import exp

from sparkwave.core import spark_features
from sparkwave.core.errors import CatalogError, QueryCanceledError
from sparkwave.core.limits import MAX_EXPRESSION_DEPTH, MAX_STATEMENT_BYTES
from sparkwave.core.schema import to_spark_type
from sparkwave.frontend import dml
from sparkwave.frontend.read_shape import PreparedRead, prepared_read, shape
from sparkwave.frontend.reads import FastResult, fast_read, fast_read_prepared
from sparkwave.frontend.returning import described, returning_list
from sparkwave.frontend.session import FETCH_BATCH_ROWS, Session
from sparkwave.frontend.statements import (
    CreateMaterializedView,
    CreateSink,
    CreateTable,
    Delete,
    Drop,
    Flush,
    Insert,
    Query,
    Set,
    Statement,
    Update,
    Wait,
    parse_one,
    split,
)
from sparkwave.frontend.timeout import CANCEL_EVERY_S, _cancelled, statement_deadline
from sparkwave.frontend.value_size import grown_as_data_error
from sparkwave.meta.settings import SPECS
from sparkwave.server import params as P
from sparkwave.server.backend import Batch, Field, Outcome, Prepared, ServerError
from sparkwave.server.errors import canceled, to_server_error
from sparkwave.server.pg_catalog import PgCatalog, catalog_for, is_catalog_query, parameter_types
from sparkwave.server.pg_relations import relation_infos
from sparkwave.server.pgparams import spark_type_for_oid
from sparkwave.server.session_sql import SessionSettings, is_session_statement, run_session_statement

SPARKWAVE_SETTINGS = frozenset(SPECS)  # SET/SHOW of these are sparkwave's, not the protocol's
CANCEL_POLL_S = 0.2  # how often a cancelled FLUSH or WAIT looks at its client's cancel flag
SMALL_BATCH_ROWS = 64  # a fast read's batch of at most this many rows goes out as Python values

_RESET = re.compile(r"RESET\s+([A-Za-z_][A-Za-z0-9_]*)\s*", re.IGNORECASE)
_RESET_ALL = re.compile(r"RESET\s+ALL\s*", re.IGNORECASE)
_SHOW_SETTING = re.compile(r"SHOW\s+([A-Za-z_][A-Za-z0-9_]*)\s*", re.IGNORECASE)


class SessionBackend:
    """The server's database: the owner Session, shared by every client."""

    def __init__(self, session: Session, on_event: Callable[[str], None] | None = None) -> None:
        self.session = session
        self.on_event = on_event  # `sparkwave serve`'s console: a line per DDL statement done
        self._clients: set[SessionClient] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.ddl_generation = 0  # bumped by every DDL: the catalog emulation's cache key with the epoch

    def open(self, user: str, database: str, options: dict[str, str]) -> SessionClient:
        with self._lock:
            if self._closed:
                raise ServerError("57P01", "the server is shutting down")
            client = SessionClient(self, user, database, options)
            self._clients.add(client)
            return client

    def forget(self, client: SessionClient) -> None:
        with self._lock:
            self._clients.discard(client)

    def close(self) -> None:
        """No new clients; every running statement cancelled (the server is stopping)."""
        with self._lock:
            self._closed = True
            clients = list(self._clients)
        for c in clients:
            c.cancel()

    def catalog(self, database: str = "dev", user: str = "root") -> PgCatalog:
        s = self.session
        return catalog_for((s.committed_epoch, self.ddl_generation), lambda: relation_infos(s.catalog),
                           database=database, user=user)


class SessionClient:
    """One connection's session. Its methods run on the connection's thread, except `cancel`."""

    def __init__(self, backend: SessionBackend, user: str, database: str, options: dict[str, str]) -> None:
        self.backend, self.session = backend, backend.session
        self.user = user
        self.settings = SessionSettings(user, database, options)
        self.statement_timeout_ms = 0
        self._cancel = threading.Event()
        self._running: str | None = None  # the job tag of the running statement's Spark jobs
        self.running_sql: str | None = None  # the statement running, if any (its rows may still stream)
        self._failed = False  # a statement failed inside BEGIN: the rest is refused until ROLLBACK (25P02)

    # --- Client -----------------------------------------------------------------------------
    def parameters(self) -> dict[str, str]:
        return self.settings.parameter_status()

    def transaction_status(self) -> str:
        if not self.settings.in_transaction:
            return "I"
        return "E" if self._failed else "T"

    def run(self, sql: str) -> Iterator[Outcome]:
        for text, line, col in self._split(sql):
            yield self._guarded(sql, lambda t=text, ln=line, c=col: self._statement(t, ln, c),  # type: ignore[misc]
                                text)

    def prepare(self, sql: str, param_oids: Sequence[int]) -> Prepared:
        pieces = self._split(sql)
        if not pieces:
            return Prepared("", [], None)
        if len(pieces) > 1:
            raise ServerError("42601", "cannot insert multiple commands into a prepared statement")
        text = pieces[0][0]
        self._cancel.clear()  # a cancel that came after the last statement ended is not for this one
        try:
            if is_session_statement(text, SPARKWAVE_SETTINGS):
                m = _SHOW_SETTING.fullmatch(text)
                fields = [Field(m.group(1).lower(), StringType())] if m and not text.upper().startswith(
                    ("SHOW TRANSACTION", "SHOW ALL")) else None
                return Prepared(text, [(spark_type_for_oid(o) or StringType()) for o in param_oids], fields)
            if self._is_catalog(text):
                n = max(P.count(text), len(param_oids))
                open_types = parameter_types(text, n)  # from the query's casts: `$1::oid[]` is a list
                types = [(spark_type_for_oid(o) or StringType()) if o else open_types[i]
                         for i, o in enumerate(list(param_oids) + [0] * (n - len(param_oids)))]
                return Prepared(text, types, list(self._catalog().describe(text)))
            types = P.infer(text, param_oids, self._column_type)
            stmt = parse_one(P.substitute(text, lambda n: P.null_of(types[n - 1])), 1, 1)
            # parsed once more only where it may be a fast read (a driver may Parse at every execution)
            plan = read_plan(text) if isinstance(stmt, Query) and shape(stmt.ast) is not None else None
            return Prepared(text, types, self._fields(stmt), plan)
        except Exception as e:
            raise to_server_error(e, text) from None

    def execute(self, prepared: Prepared, params: Sequence[Any]) -> Outcome:
        text = prepared.sql
        if not text:
            return Outcome("EMPTY")
        if len(params) != len(prepared.param_types):
            raise ServerError("08P01", f"bind message supplies {len(params)} parameters, but prepared statement "
                                       f"requires {len(prepared.param_types)}")
        if self._is_catalog(text):
            return self._guarded(text, lambda: self._catalog().run(text, params, self.settings).outcome())

        return self._guarded(text, lambda: self._execute_prepared(prepared, params))

    def cancel(self) -> None:
        """Cancel the running statement: its jobs now, and (as `statement_deadline` does) every job it
        starts after, until it ends: a cancel that lands between its check and its next job's start
        would otherwise let that job run to its end."""
        self._cancel.set()
        tag = self._running
        if tag is None:
            return
        spark = self.session.spark

        def keep_cancelling() -> None:
            while self._running == tag and self._cancel.is_set():
                spark_features.interrupt_tag(spark, tag)
                time.sleep(CANCEL_EVERY_S)

        threading.Thread(target=keep_cancelling, name="sparkwave-cancel", daemon=True).start()

    def close(self) -> None:
        self.cancel()
        self.backend.forget(self)

    # --- one statement ----------------------------------------------------------------------
    def _execute_prepared(self, prepared: Prepared, params: Sequence[Any]) -> Outcome:
        """A prepared statement with its parameters' values: a read parsed at Parse takes their
        nodes; any other statement (or a read the values send to Spark) gets them as literals in
        its text, parsed again."""
        text, types = prepared.sql, prepared.param_types
        if isinstance(prepared.plan, PreparedRead):
            values = value_nodes(text, types, params)
            if (fast := fast_read_prepared(self.session, prepared.plan, values)) is not None:
                return self._fast(fast)

        def render(n: int) -> str:
            return P.literal(params[n - 1], types[n - 1])

        return self._statement(P.substitute(text, render), 1, 1)

    def _split(self, sql: str) -> list[tuple[str, int, int]]:
        if len(sql) > MAX_STATEMENT_BYTES // 4 and len(sql.encode()) > MAX_STATEMENT_BYTES:
            raise ServerError("54000", f"the query string is more than {MAX_STATEMENT_BYTES:,} bytes; load large "
                                       "data with INSERT statements of fewer rows")
        try:
            return split(sql)
        except Exception as e:
            raise to_server_error(e, sql) from None

    def _guarded(self, sql: str, run: Callable[[], Outcome], statement: str | None = None) -> Outcome:
        """Run one statement (`statement`, of the query string `sql`): its errors as the client's
        (SQLSTATE, position in `sql`), the transaction block's state kept."""
        self._cancel.clear()
        if self._failed and self.settings.in_transaction:
            words = (statement or sql).split(None, 1)
            head = words[0].upper() if words else ""
            if head not in ("ROLLBACK", "ABORT", "COMMIT", "END"):
                raise ServerError("25P02", "current transaction is aborted, commands ignored until end of "
                                           "transaction block")
        self.running_sql = sql
        try:
            outcome = run()
        except BaseException as e:
            self.running_sql = None
            if self.settings.in_transaction:
                self._failed = True
            if isinstance(e, QueryCanceledError | ServerError):
                raise to_server_error(e, sql) from None
            if self._cancel.is_set() and _cancelled(e):
                raise canceled() from None
            if isinstance(e, Exception):
                raise to_server_error(e, sql) from None
            raise
        if not self.settings.in_transaction:
            self._failed = False
        if outcome.fields is not None:
            outcome.batches = self._mapped(sql, outcome.batches)
        else:
            self.running_sql = None
        return outcome

    def _mapped(self, sql: str, batches: Iterator[Batch]) -> Iterator[Batch]:
        """The rows, with an error while streaming them mapped as a statement's error is."""
        try:
            yield from batches
        except GeneratorExit:
            raise
        except BaseException as e:
            if self.settings.in_transaction:
                self._failed = True
            if isinstance(e, ServerError):
                raise
            if self._cancel.is_set() and _cancelled(e):
                raise canceled() from None
            if isinstance(e, Exception):
                raise to_server_error(e, sql) from None
            raise
        finally:
            self.running_sql = None
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _statement(self, text: str, line: int, col: int) -> Outcome:
        if is_session_statement(text, SPARKWAVE_SETTINGS):
            result = run_session_statement(text, self.settings)
            if result.tag in ("COMMIT", "ROLLBACK"):
                self._failed = False
            if result.tag == "DISCARD ALL" or _RESET_ALL.fullmatch(text):
                self.statement_timeout_ms = 0  # the one session setting that is sparkwave's
            return result.outcome()
        if (m := _RESET.fullmatch(text)) and m.group(1).lower() == "statement_timeout":
            self.statement_timeout_ms = 0
            return Outcome("RESET")
        if self._is_catalog(text):
            return self._catalog().run(text, (), self.settings).outcome()
        if (m := _SHOW_SETTING.fullmatch(text)) and m.group(1).lower() in SPARKWAVE_SETTINGS:
            return self._show_setting(m.group(1).lower())
        return self._execute(parse_one(text, line, col))

    def _catalog(self) -> PgCatalog:
        return self.backend.catalog(self.settings.database, self.user)

    def _is_catalog(self, text: str) -> bool:
        return is_catalog_query(text)

    def _execute(self, stmt: Statement) -> Outcome:
        s = self.session
        if isinstance(stmt, Query) and (fast := fast_read(s, stmt.ast)) is not None:
            return self._fast(fast)
        if stmt.returns_rows:
            with self._scope(timed=False):
                df = self._frame(stmt)
            return Outcome(stmt.tag, _fields(df),
                           self._rows(df, timed=stmt.timed))
        if isinstance(stmt, Insert | Update | Delete):
            with self._scope(timed=True):
                written = self._dml(stmt)
            if self.settings.in_transaction:
                self.settings.mark_write()  # a ROLLBACK then says the writes stay committed
            tag = "INSERT 0" if isinstance(stmt, Insert) else stmt.tag
            if written.rows is not None:  # RETURNING: its rows, tagged with their count
                return Outcome(tag, _fields(written.rows), self._rows(written.rows, timed=False))
            return Outcome(f"{tag} {written.count}")
        if isinstance(stmt, Set) and stmt.key == "statement_timeout":
            text = stmt.value.lower()
            try:
                self.statement_timeout_ms = SPECS["statement_timeout"].parse(text)
            except (ValueError, OverflowError):
                raise stmt.error(SPECS["statement_timeout"].error("statement_timeout", text), text,
                                 sqlstate="22023") from None
            return Outcome("SET")
        if isinstance(stmt, Flush):
            self._cancellable(s.flush)
            return Outcome("FLUSH")
        if isinstance(stmt, Wait):
            self._cancellable_wait()
            return Outcome("WAIT")
        with self._scope(timed=False):
            if isinstance(stmt, CreateMaterializedView):
                self._create_foreground(stmt)
            else:
                s._execute(stmt)
        if stmt.ddl:
            self.backend.ddl_generation += 1
            if self.backend.on_event is not None:
                name = stmt.name if isinstance(stmt, CreateTable | CreateMaterializedView | CreateSink | Drop) else "?"
                self.backend.on_event(f"{stmt.tag} {name} done (user {self.user})")
        return Outcome(stmt.tag)

    def _fast(self, fast: FastResult) -> Outcome:
        lookup = fast.kind == "lookup"
        batches = _as_rows(fast.batches) if lookup else fast.batches
        return Outcome("SELECT", [Field(n, t) for n, t in fast.fields], self._checked(batches), at_hand=lookup)

    def _checked(self, batches: Iterator[Batch]) -> Iterator[Batch]:
        """Batches that need no Spark (the fast path), stopped by a cancel between two."""
        try:
            for batch in batches:
                if self._cancel.is_set():
                    raise canceled()
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _create_foreground(self, stmt: CreateMaterializedView) -> None:
        """CREATE MATERIALIZED VIEW, whose foreground wait for its job a cancel ends, cancelling the job
        too (as RisingWave does): the view is not created."""
        def check() -> None:
            if self._cancel.is_set():
                raise canceled()

        ddl = self.session.ddl
        ddl.waiting.check = check
        try:
            self.session._execute(stmt)
        except ServerError as e:
            if e.code == "57014" and (job := self.session.catalog.job_of(stmt.name)) is not None:
                if job.creating:
                    with suppress(CatalogError):  # it merged meanwhile: the view stays, as after the statement
                        self.session.creating.cancel(job.id)
            raise
        finally:
            ddl.waiting.check = None

    def _frame(self, stmt: Statement) -> DataFrame:
        s = self.session
        if isinstance(stmt, Query):
            return s._do_query(stmt)
        return s._execute(stmt)  # type: ignore[return-value]  # SHOW, DESCRIBE and EXPLAIN return a frame

    def _fields(self, stmt: Statement) -> list[Field] | None:
        """The result's columns without running the statement (Spark analyses a query lazily; a
        RETURNING list over no rows)."""
        if stmt.returns_rows:
            with self._scope(timed=False):
                return _fields(self._frame(stmt))
        if isinstance(stmt, Insert | Update | Delete) and returning_list(stmt) is not None:
            with self._scope(timed=False):
                return _fields(described(self.session.rt, stmt))
        return None

    def _dml(self, stmt: Insert | Update | Delete) -> dml.Written:
        """The statement as `Session._do_insert` and the others run it, with the rows it wrote."""
        rt, s = self.session.rt, self.session
        if isinstance(stmt, Insert):
            with grown_as_data_error(f"INSERT (at {stmt.where()})"):
                return dml.insert_values(rt, stmt)
        if isinstance(stmt, Update):
            with grown_as_data_error(f"UPDATE (at {stmt.where()})"):
                return dml.update(rt, stmt, s.committed_epoch)
        return dml.delete(rt, stmt, s.committed_epoch)

    def _rows(self, df: DataFrame, *, timed: bool) -> Iterator[Batch]:
        """The result a batch at a time, its Spark jobs under this client's tag (and timeout): the
        serving thread `toLocalIterator` starts inherits the tags set when it starts."""
        if _local(df):  # SHOW, DESCRIBE, `SELECT 1`: rows the driver holds, collected without a Spark job
            with self._scope(timed=timed):
                rows = df.collect()
            yield from (rows[i:i + FETCH_BATCH_ROWS] for i in range(0, len(rows), FETCH_BATCH_ROWS))
            return
        batches = self.session.fetch(df)
        with self._scope(timed=timed):
            try:
                for batch in batches:
                    if self._cancel.is_set():
                        raise canceled()
                    yield batch
            finally:
                getattr(batches, "close", lambda: None)()  # the Spark iterator's socket and job end here

    @contextmanager
    def _scope(self, *, timed: bool) -> Iterator[None]:
        """This client's statement: its Spark jobs tagged for `cancel`, bounded by its timeout."""
        spark = self.session.spark
        tag = f"sparkwave-client-{uuid.uuid4().hex}"
        spark_features.join_tag(spark, tag)  # a cancelled job's running tasks are interrupted, not left to finish
        self._running = tag
        try:
            with statement_deadline(self.session.spark, self.statement_timeout_ms if timed else 0):
                if self._cancel.is_set():
                    raise canceled()
                yield
        except Exception as e:
            if self._cancel.is_set() and not isinstance(e, ServerError | QueryCanceledError) and _cancelled(e):
                raise canceled() from None
            raise
        finally:
            self._running = None
            spark_features.leave_tag(spark, tag)

    def _cancellable(self, fn: Callable[[], object]) -> None:
        """`fn` (a FLUSH: it waits for the barrier loop) on a thread of its own, so that a cancel
        returns at once; the epoch it waits for still commits."""
        done = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            try:
                fn()
            except BaseException as e:
                error.append(e)
            finally:
                done.set()

        threading.Thread(target=run, name="sparkwave-client-flush", daemon=True).start()
        while not done.wait(CANCEL_POLL_S):
            if self._cancel.is_set():
                raise canceled()
        if error:
            raise error[0]

    def _cancellable_wait(self) -> None:
        """WAIT: until every creating job has merged, looking at the cancel flag between checks."""
        def check() -> None:
            if self._cancel.is_set():
                raise canceled()

        self.session._check_open()
        self.session.creating.wait_created(on_progress=check)

    def _show_setting(self, key: str) -> Outcome:
        if key == "statement_timeout":
            value = str(self.statement_timeout_ms)
        else:
            value = self.session.catalog.setting(f"config.{key}", SPECS[key].default) or SPECS[key].default
        return Outcome("SHOW", [Field(key, StringType())], iter([[(value,)]]))

    def _column_type(self, table: str | None, column: str) -> DataType | None:
        """A column's type, for a parameter compared with it or inserted into it (`#n`: the n-th)."""
        rels = [self.session.catalog.relation(table)] if table else self.session.catalog.relations()
        for rel in rels:
            if rel is None:
                continue
            if column.startswith("#"):
                visible = rel.schema.visible
                i = int(column[1:])
                return to_spark_type(visible[i].type) if i < len(visible) else None
            if (c := rel.schema.column(column)) is not None:
                return to_spark_type(c.type)
        return None


def _local(df: DataFrame) -> bool:
    """Whether the optimized plan is a local relation (rows held by the driver, as SHOW makes them)."""
    try:
        return spark_features.local_relation_size(df) is not None
    except Exception:
        return False


def read_plan(text: str) -> PreparedRead | None:
    """The read of `reads.py` that the prepared statement `text` is, parsed once, its parameters
    open values of its conditions; None for any other statement (parsed again with its values at
    each Execute). Taken as Execute takes the text with values in place of the markers: not a
    session or catalog statement, and markers shallow enough that a negative number's extra node
    stays within the parser's depth limit."""
    marked = P.marked(text)
    if is_session_statement(marked, SPARKWAVE_SETTINGS) or _RESET.fullmatch(marked) or \
            _SHOW_SETTING.fullmatch(marked) or is_catalog_query(marked):
        return None
    try:
        stmt = parse_one(marked, 1, 1)
    except Exception:  # Execute says why, with the values in place
        return None
    if not isinstance(stmt, Query):
        return None
    if any(_depth(node) >= MAX_EXPRESSION_DEPTH for node in stmt.ast.walk() if P.marker(node) is not None):
        return None
    return prepared_read(stmt.ast, P.marker)


def value_nodes(text: str, types: Sequence[DataType], params: Sequence[Any]) -> dict[int, exp.Expr]:
    """The node of each parameter `text` names, built in the text's order as `params.substitute`
    renders them: a value refused is the same error."""
    return {n: P.value_node(params[n - 1], types[n - 1]) for n, _, _ in P.parameters(text)}


def _depth(node: exp.Expr) -> int:
    """`node`'s depth as `functions.check` counts it (the root is 1)."""
    depth = 1
    while (node := node.parent) is not None:  # type: ignore[assignment]
        depth += 1
    return depth


def _as_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[Batch]:
    """A lookup's few rows as Python values: encoded value by value (the same bytes,
    tests/unit/test_pgwire_arrow.py) at a fraction of the fixed cost of Arrow's vectorised path."""
    try:
        for batch in batches:
            if 0 < batch.num_columns and batch.num_rows <= SMALL_BATCH_ROWS and \
                    not any(pa.types.is_nested(t) for t in batch.schema.types):
                yield list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
            else:
                yield batch
    finally:
        if close := getattr(batches, "close", None):
            close()


def _fields(df: DataFrame) -> list[Field]:
    return [Field(f.name, f.dataType) for f in df.schema.fields]

