"""What the dashboard shows and `/metrics` exposes, as typed views of a Session computed on demand:
the graph of relations, the recent epochs, the creating jobs, the sources' partitions, the sinks,
and a page per relation. Each view is a list of frozen dataclasses (or one) whose fields are JSON's
types (`dataclasses.asdict` then `json.dumps`), times as seconds since the Unix epoch.

Everything comes from what already knows it: the catalog (relations, jobs, offsets, files), the
session's `Telemetry` (`meta/telemetry.py`: epochs, latencies, rows, failures), `SHOW JOBS`' and
`SHOW SINKS`' computation (`meta/progress.py`, one computation for both), and, for the sources'
high watermarks only, the Kafka broker: asked with a short timeout, the answer kept for
`WATERMARK_TTL_S`, a broker that does not answer giving None rather than an error."""

from __future__ import annotations

import math
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import sqlglot

from sparkwave.connectors import make_connector
from sparkwave.connectors.kafka import Kafka
from sparkwave.connectors.kafka_reader import consumer_config
from sparkwave.connectors.postgres_cdc_position import key_bytes
from sparkwave.core.catalog import Relation
from sparkwave.core.epoch import epoch_ms
from sparkwave.core.errors import CatalogError
from sparkwave.frontend.plan.explain import explain, state_tables, stored_plan
from sparkwave.frontend.relation_sizes import RelationSizes, Size
from sparkwave.meta.progress import JobInfo, SinkInfo, job_infos, sink_infos
from sparkwave.meta.service import ServiceStatus
from sparkwave.meta.settings import Settings
from sparkwave.meta.telemetry import EpochFailure
from sparkwave.storage.state import state_relations
from sparkwave.stream.plan import state_purpose

if TYPE_CHECKING:
    from sparkwave.frontend.session import Session

SERIES_POINTS = 900  # at most this many epochs in the latency and rows-in series (the newest)
SAMPLE_ROWS = 20
WATERMARK_TTL_S = 5.0  # a source's high watermarks are asked of the broker at most this often
WATERMARK_TIMEOUT_S = 1.0  # for all of one source's partitions together
CONNECT_TIMEOUT_S = 0.5  # whether a bootstrap server accepts a connection at all


class NotFound(CatalogError):
    """No relation or sink of that name (the dashboard answers 404)."""


# --- the graph -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """A relation of the graph: a table, a source, an MV or a sink."""

    name: str
    kind: str  # 'table' | 'source' | 'mv' | 'sink'
    status: str  # 'running' | 'creating' | 'failed' | 'paused'
    upstreams: list[str]  # a sink's: its MV
    rows: int | None  # held at the committed epoch (None: a source or sink, which hold none)
    bytes: int | None  # of its own files (base and log)
    state_bytes: int | None  # of its operator state tables' files
    rows_per_second: float  # change rows out over the last epochs (a source's: rows read; a sink's: delivered)
    rows_in_per_second: float  # its upstreams' change rows over the last epochs (a table's or source's: its own)
    error: str | None = None  # why it failed, or why it is not advancing


def graph(session: Session) -> list[Node]:
    """Every table, source, MV and sink, upstreams before what reads them (creation order)."""
    catalog = session.catalog
    epoch = catalog.committed_epoch()
    rates = session.telemetry.rows_per_second()
    failing = _failing_now(session)
    jobs = {j.name: j for j in job_infos(catalog) if j.kind != "sink"}
    nodes = []
    for rel in catalog.relations(creating=True):
        status, error = _status(session, rel, jobs.get(rel.name), failing)
        nodes.append(_relation_node(session, rel, epoch, status, error, rates))
    for sink in sink_infos(catalog):
        nodes.append(Node(sink.name, "sink", _sink_status(sink), [sink.mv], None, None, None, sink.rows_per_second,
                          round(rates.get(sink.mv, 0.0), 1), sink.error))
    return nodes


def _relation_node(session: Session, rel: Relation, epoch: int, status: str, error: str | None,
                   rates: dict[str, float]) -> Node:
    sizes = _sizes(session)
    size = _size(sizes, rel, epoch) if rel.kind != "source" else None
    state = [_size(sizes, s, epoch) for s in _states(session, rel)]
    rows_in = sum(rates.get(u, 0.0) for u in rel.upstreams) if rel.upstreams else rates.get(rel.name, 0.0)
    return Node(rel.name, rel.kind, status, list(rel.upstreams), size.rows if size else None,
                size.bytes if size else None, sum(s.bytes for s in state if s) if rel.kind == "mv" else None,
                round(rates.get(rel.name, 0.0), 1), round(rows_in, 1), error)


def _status(session: Session, rel: Relation, job: JobInfo | None,
            failing: EpochFailure | None) -> tuple[str, str | None]:
    if rel.state == "failed":
        return "failed", job.error if job else None
    if failing is not None and failing.relation == rel.name:  # the epoch keeps failing at it (being retried)
        return "failed", failing.error
    if rel.state == "creating":
        return ("paused" if job is not None and job.rate_limit == 0 else "creating"), job.error if job else None
    connector = rel.spec.connector
    if connector and connector.get("source_rate_limit") == "0":
        return "paused", None
    return "running", session.rt.source_status(rel.name) if connector else None


def _failing_now(session: Session) -> EpochFailure | None:
    """The last failed attempt, while the barrier loop is still retrying the epoch it failed."""
    failures = session.telemetry.failures()
    return failures[-1] if failures and session.loop.failures > 0 else None


def _sink_status(sink: SinkInfo) -> str:
    return {"snapshot": "creating", "paused": "paused", "retrying": "failed"}.get(sink.phase, "running")


def _sink_error(sink: SinkInfo, statuses: dict[str, ServiceStatus]) -> str | None:
    """The sink's last error: its job row's while it is failing or noting (what `SHOW SINKS` says),
    else its worker's last failure, kept after it recovered (`meta/service.py: ServiceStatus`)."""
    status = statuses.get(sink.name)
    return sink.error or (status.error if status is not None else None)


# --- epochs --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EpochPoint:
    epoch: int
    committed_at: float
    latency_seconds: float
    rows_in: int


@dataclass(frozen=True)
class Failure:
    at: float
    error: str
    relation: str | None
    kind: str | None
    epoch: int | None


@dataclass(frozen=True)
class Epochs:
    """The main graph's committed epoch and its recent history (`Telemetry`'s window)."""

    committed_epoch: int
    committed_at: float | None  # when this session committed it (before its first epoch: when it was planned)
    latency_p50: float | None  # seconds, over the window
    latency_p99: float | None
    series: list[EpochPoint]  # the newest `SERIES_POINTS` epochs of the window, oldest first
    failures: list[Failure]
    committed_total: int  # since the session opened
    failed_total: int
    pipeline_error: str | None  # why the next epoch is failing, while it is retried
    window_seconds: float


def epochs(session: Session) -> Epochs:
    telemetry = session.telemetry
    kept = telemetry.epochs()
    committed = session.catalog.committed_epoch()
    last = kept[-1] if kept else None
    at = last.committed_at if last is not None and last.epoch == committed else (
        epoch_ms(committed) / 1000 if committed else None)
    p50, p99 = telemetry.latency_percentiles(0.5, 0.99)
    totals = telemetry.totals()
    return Epochs(committed, at, p50, p99,
                  [EpochPoint(s.epoch, s.committed_at, s.latency_seconds, s.rows_in) for s in kept[-SERIES_POINTS:]],
                  [Failure(f.at, f.error, f.relation, f.kind, f.epoch) for f in telemetry.failures()],
                  totals.committed, totals.failed, session.pipeline_error, telemetry.window_seconds)


# --- jobs ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """A creating job or a sink's backfill, as `SHOW JOBS` computes it."""

    id: int
    name: str
    kind: str  # 'materialized view' | 'sink' | 'table' | 'source'
    strategy: str
    phase: str  # 'snapshot' | 'log store' | 'merging'
    progress: float  # 0..1 of the snapshot phase (1 once it is read)
    rows_done: int
    rows_total: int
    rows_per_second: float
    eta_seconds: float | None
    lag_epochs: int
    lag_seconds: float
    rate_limit: int | None  # rows/s; None unlimited
    paused: bool  # rate limit 0
    error: str | None
    upstreams: list[str] = field(default_factory=list)  # per upstream, "name done/total"


def jobs(session: Session) -> list[Job]:
    return [_job(j) for j in job_infos(session.catalog) if j.creating]


def _job(j: JobInfo) -> Job:
    return Job(j.id, j.name, j.kind, j.strategy, j.phase, round(j.percent / 100, 4), j.rows_done, j.rows_total,
               j.rows_per_second, j.eta_seconds, j.lag_epochs, round(j.lag_seconds, 3), j.rate_limit,
               j.rate_limit == 0, j.error, [str(u) for u in j.upstreams])


# --- sources -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourcePartition:
    """One split of a relation fed by a connector (a Kafka partition)."""

    relation: str
    kind: str  # 'table' | 'source'
    connector: str
    topic: str | None
    partition: str
    committed_offset: int  # the next offset the pipeline reads
    high_watermark: int | None  # the broker's (None: not Kafka, or the broker did not answer in time)
    behind: int | None  # messages not yet read
    bad_records: int  # the relation's, all partitions together (the catalog counts them per relation)
    status: str | None  # why the relation is not advancing, if it is not


def sources(session: Session) -> list[SourcePartition]:
    catalog = session.catalog
    errors = catalog.source_error_counts()
    out = []
    for rel in catalog.relations(creating=True):
        options = rel.spec.connector
        if not options:
            continue
        offsets = catalog.source_offsets(rel.name)
        marks = _watermarks(session).get(rel, offsets) if options.get("connector") == "kafka" else {}
        status = session.rt.source_status(rel.name)
        for split, offset in sorted(offsets.items(), key=lambda o: (len(o[0]), o[0])):
            if key_bytes(split):  # a CDC backfill's position, not an offset
                continue
            high = marks.get(split)
            out.append(SourcePartition(rel.name, rel.kind, options.get("connector", ""), options.get("topic"), split,
                                       offset, high, None if high is None else max(0, high - offset),
                                       errors.get(rel.name, 0), status))
    return out


class _Watermarks:
    """The broker's high watermark per partition of each Kafka relation, asked at most every
    `WATERMARK_TTL_S` with a consumer of its own (the barrier loop's client is its thread's alone),
    closed after each asking."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, dict[str, int | None]]] = {}
        self._silent: dict[str, float] = {}  # bootstrap servers -> when they last did not answer

    def get(self, rel: Relation, offsets: dict[str, int]) -> dict[str, int | None]:
        with self._lock:  # one asking at a time: a dashboard and a scrape do not both wait on a broker
            known = self._known.get(rel.name)
            if known is not None and time.monotonic() - known[0] < WATERMARK_TTL_S and set(known[1]) >= set(offsets):
                return known[1]
            # A broker that did not answer is not asked again for `WATERMARK_TTL_S`, for any of its
            # relations: a hundred sources on a hung broker would otherwise cost a timeout each.
            marks = _ask_broker(rel, list(offsets), self._silent)
            self._known[rel.name] = (time.monotonic(), marks)
            return marks


def _ask_broker(rel: Relation, partitions: list[str], silent: dict[str, float]) -> dict[str, int | None]:
    """The high watermarks of `rel`'s partitions; a broker that does not answer is noted in `silent`
    (bootstrap servers -> when) and not asked while that is younger than `WATERMARK_TTL_S`."""
    marks: dict[str, int | None] = dict.fromkeys(partitions)
    try:
        conn = make_connector(rel.name, rel.schema, rel.spec.connector or {})
    except Exception:  # a definition this version refuses: the source's own status says why
        return marks
    if not isinstance(conn, Kafka) or not any(p.isdigit() for p in partitions) or \
            time.monotonic() - silent.get(conn.bootstrap, -math.inf) < WATERMARK_TTL_S:
        return marks
    if not _accepts(conn.bootstrap):
        silent[conn.bootstrap] = time.monotonic()
        return marks
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + WATERMARK_TIMEOUT_S
    consumer = Consumer(consumer_config(conn.bootstrap, conn.properties))
    answered = False  # a mark, or an error of the broker's own (an unknown partition)
    try:
        for p in partitions:
            left = deadline - time.monotonic()
            if left <= 0 or not p.isdigit():
                continue
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(conn.topic, int(p)), timeout=left,
                                                         cached=False)
                marks[p] = int(high)
                answered = True
            except Exception as e:  # a timeout, an unknown partition: unknown rather than an error
                answered |= not _no_answer(e)
                continue
    finally:
        consumer.close()
    if answered:
        silent.pop(conn.bootstrap, None)
    else:
        silent[conn.bootstrap] = time.monotonic()
    return marks


def _no_answer(e: Exception) -> bool:
    """Whether the client's error says the broker gave no answer at all (not one of its own)."""
    from confluent_kafka import KafkaError, KafkaException

    error = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return not isinstance(error, KafkaError) or error.code() in (
        KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def _accepts(bootstrap: str) -> bool:
    """Whether one of the bootstrap servers accepts a TCP connection (the client would answer from
    its cache or wait out its whole timeout otherwise)."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host or "localhost", int(port or 9092)), timeout=CONNECT_TIMEOUT_S):
                return True
        except (OSError, ValueError):
            continue
    return False


# --- sinks ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sink:
    name: str
    mv: str
    connector: str
    target: str
    phase: str  # 'snapshot' (its backfill) | 'running' | 'paused' | 'retrying'
    delivered_epoch: int  # the snapshot epoch while it backfills
    lag_epochs: int
    lag_seconds: float
    lag_bytes: int  # of the MV's log files not yet delivered
    rows_per_second: float
    rate_limit: int | None
    decoupled: bool
    last_error: str | None  # while it fails, why; after, the last failure's (`last_error_at` says when)
    last_error_at: float | None  # when its worker last failed (None: not since the session opened)
    failures: int  # failed deliveries in a row (0: delivering)
    job: int


def sinks(session: Session) -> list[Sink]:
    statuses = session.sinks.statuses()
    out = []
    for s in sink_infos(session.catalog):
        status = statuses.get(s.name)
        out.append(Sink(s.name, s.mv, s.connector, s.target, s.phase, s.epoch, s.lag_epochs, round(s.lag_seconds, 3),
                        s.lag_bytes, s.rows_per_second, s.rate_limit, s.decouple, _sink_error(s, statuses),
                        status.error_at if status is not None else None, status.failures if status is not None else 0,
                        s.job))
    return out


# --- a relation's page ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: str
    is_key: bool
    hidden: bool


@dataclass(frozen=True)
class StateTable:
    name: str  # as stored: '<mv>.<suffix>'
    description: str  # what it holds, in words
    key: list[str]
    rows: int | None
    bytes: int | None


@dataclass(frozen=True)
class Sample:
    """The first rows of a relation at the committed epoch, values as JSON's types (text for
    decimals, times as ISO text, bytes as hex)."""

    columns: list[str]
    rows: list[list[Any]]
    epoch: int
    read_by: str  # 'driver' (frontend/reads.py) | 'spark'


@dataclass(frozen=True)
class MvPage:
    """A relation's page: what it is, its plan with its state tables, a sample of its rows."""

    name: str
    kind: str
    status: str
    sql: str | None  # the CREATE statement
    columns: list[ColumnInfo]
    upstreams: list[str]
    downstreams: list[str]  # the MVs and sinks that read it
    plan: list[str]  # EXPLAIN's lines (an MV's)
    state_tables: list[StateTable]
    rows: int | None
    bytes: int | None
    sample: Sample | None
    sample_error: str | None  # why there is no sample (a source, a creating or failed MV)
    job: Job | None  # while it is being created


def relation_page(session: Session, name: str) -> MvPage:
    """The page of relation `name`; `NotFound` if there is none (an operator state table is not a
    page of its own: its MV's page lists it)."""
    catalog = session.catalog
    rel = catalog.relation(name.lower()) if isinstance(name, str) else None
    if rel is None or rel.kind == "state":
        raise NotFound(f"no table, source or materialized view named {name!r}")
    epoch = catalog.committed_epoch()
    sizes = _sizes(session)
    size = _size(sizes, rel, epoch) if rel.kind != "source" else None
    jobs = {j.name: j for j in job_infos(catalog) if j.kind != "sink"}
    status, _ = _status(session, rel, jobs.get(rel.name), _failing_now(session))
    downstreams = [r.name for r in catalog.relations(creating=True) if rel.name in r.upstreams]
    downstreams += [s.name for s in catalog.sinks() if s.mv == rel.name]
    sample, why = _sample(session, rel)
    job = jobs.get(rel.name)
    return MvPage(rel.name, rel.kind, status, rel.spec.sql or None,
                  [ColumnInfo(c.name, c.type.name, c.name in rel.schema.key, c.hidden) for c in rel.schema.columns],
                  list(rel.upstreams), downstreams, _plan(session, rel), _state_tables(session, rel, sizes, epoch),
                  size.rows if size else None, size.bytes if size else None, sample, why,
                  _job(job) if job is not None and job.creating else None)


def _plan(session: Session, rel: Relation) -> list[str]:
    if rel.kind != "mv" or not rel.spec.dataflow:
        return []
    return explain(rel.name, stored_plan(rel), big_epoch_rows=Settings(session.catalog).big_epoch_rows)


def _state_tables(session: Session, rel: Relation, sizes: RelationSizes, epoch: int, *,
                  described: bool = True) -> list[StateTable]:
    """The MV's state tables, described in EXPLAIN's words ("count(*) per window_start, auction") if
    `described` (naming them takes the plan's walk; the metrics need only their sizes)."""
    words: dict[str, str] = {}
    if described and rel.kind == "mv" and rel.spec.dataflow:
        words = dict(state_tables(rel.name, stored_plan(rel)))
    out = []
    for state in _states(session, rel):
        description = words.get(state.name) or ""
        if described and not description:
            description = state_purpose(state.name.split(".", 1)[1], state.schema.key)
        size = _size(sizes, state, epoch)
        out.append(StateTable(state.name, description, list(state.schema.key), size.rows if size else None,
                              size.bytes if size else None))
    return out


def _sample(session: Session, rel: Relation) -> tuple[Sample | None, str | None]:
    if rel.kind == "source":
        return None, "a source stores nothing: its rows are read from its connector by the MVs over it"
    if rel.state != "created":
        return None, f"it is {'being created' if rel.state == 'creating' else 'stopped, out of the pipeline'}"
    from sparkwave.frontend.reads import fast_read

    visible = [c.name for c in rel.schema.visible]
    ast = sqlglot.parse_one(f'SELECT * FROM "{rel.name}" LIMIT {SAMPLE_ROWS}', dialect="postgres")
    fast = fast_read(session, ast)
    if fast is not None:
        rows: list[list[Any]] = []
        try:
            for batch in fast.batches:
                rows += [[_plain(v) for v in r.values()] for r in batch.to_pylist()]
                if len(rows) >= SAMPLE_ROWS:
                    break
        finally:
            close = getattr(fast.batches, "close", None)
            if close is not None:
                close()
        return Sample([n for n, _ in fast.fields], rows[:SAMPLE_ROWS], fast.epoch, "driver"), None
    epoch = session.committed_epoch
    frame = session.table(rel.name, epoch).select(*[f"`{c}`" for c in visible]).limit(SAMPLE_ROWS)
    return Sample(visible, [[_plain(v) for v in row] for row in frame.collect()], epoch, "spark"), None


def _plain(v: Any) -> Any:
    """A value as JSON's types."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else None
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, datetime | date):
        return v.isoformat()
    if isinstance(v, bytes | bytearray):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if hasattr(v, "asDict"):  # a Spark Row (a struct)
        return _plain(v.asDict())
    return str(v)


# --- per session ---------------------------------------------------------------------------------
_per_session: weakref.WeakKeyDictionary[Session, tuple[RelationSizes, _Watermarks]] = weakref.WeakKeyDictionary()
_per_session_lock = threading.Lock()


def _helpers(session: Session) -> tuple[RelationSizes, _Watermarks]:
    with _per_session_lock:
        found = _per_session.get(session)
        if found is None:
            found = _per_session[session] = (RelationSizes(session.catalog), _Watermarks())
        return found


def _sizes(session: Session) -> RelationSizes:
    return _helpers(session)[0]


def _watermarks(session: Session) -> _Watermarks:
    return _helpers(session)[1]


def _size(sizes: RelationSizes, rel: Relation, epoch: int) -> Size | None:
    """`rel`'s size, or None when a file of it cannot be read (a damaged one names itself on reads)."""
    try:
        return sizes.size(rel, epoch)
    except Exception:
        return None


def _states(session: Session, rel: Relation) -> Iterator[Relation]:
    if rel.kind != "mv":
        return
    try:
        yield from state_relations(session.rt, rel)
    except CatalogError:  # dropped meanwhile
        return


def state_sizes(session: Session) -> list[tuple[str, StateTable]]:
    """Every MV's state tables with their rows and bytes, as (MV, state table), undescribed: the
    metrics' gauges."""
    epoch = session.catalog.committed_epoch()
    sizes = _sizes(session)
    return [(rel.name, t) for rel in session.catalog.relations(creating=True) if rel.kind == "mv"
            for t in _state_tables(session, rel, sizes, epoch, described=False)]
