"""`/metrics`: the pipeline in Prometheus' text format, with `prometheus_client`.

Each Session has a `CollectorRegistry` of its own holding one collector, which reads the views of
`overview.py` and the session's `Telemetry` at scrape time: nothing is copied into metric objects
between scrapes, so what a scrape shows is what the catalog and the telemetry say then. The
epoch-latency histogram and the counters come from `Telemetry.totals()`, one copy taken under its
lock, so a scrape's histogram count always equals its epochs-committed counter and both count every
epoch since the session opened. A section that cannot be read (a broker, a file) is left out of
that scrape and `sparkwave_metrics_section_up{section}` says 0; the scrape itself never fails.

Names (relation, sink, state table and partition as labels):
- `sparkwave_epoch_latency_seconds` (histogram), `sparkwave_epochs_committed_total`,
  `sparkwave_epochs_failed_total`, `sparkwave_epoch_input_rows_total`,
  `sparkwave_committed_epoch_timestamp_seconds` (when the committed epoch was planned: its data's
  freshness; the epoch number itself outgrows a float's exact integers in 2029),
  `sparkwave_last_commit_timestamp_seconds`;
- `sparkwave_relation_change_rows_total{relation}` (rows per relation per epoch, summed),
  `sparkwave_state_table_change_rows_total{relation,state_table}`,
  `sparkwave_relation_rows{relation,kind}`, `sparkwave_relation_bytes{relation,kind}`,
  `sparkwave_relation_status{relation,kind,status}` (1), `sparkwave_state_table_rows{relation,state_table}`,
  `sparkwave_state_table_bytes{relation,state_table}`;
- `sparkwave_job_progress_ratio`, `sparkwave_job_eta_seconds`, `sparkwave_job_rows_per_second`,
  `sparkwave_job_lag_epochs`, `sparkwave_job_paused` (labels job, relation, kind, phase);
- `sparkwave_source_committed_offset`, `sparkwave_source_high_watermark`,
  `sparkwave_source_messages_behind` (labels relation, partition), `sparkwave_source_bad_records_total{relation}`;
- `sparkwave_sink_lag_epochs`, `sparkwave_sink_lag_seconds`, `sparkwave_sink_lag_bytes`,
  `sparkwave_sink_rows_per_second`, `sparkwave_sink_failing` (labels sink, relation)."""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkwave.core.epoch import epoch_ms
from sparkwave.frontend import overview
from sparkwave.frontend.watermark_show import watermark_metrics
from sparkwave.meta.telemetry import Telemetry

if TYPE_CHECKING:
    from sparkwave.frontend.session import Session

log = logging.getLogger("sparkwave.metrics")
JOB_LABELS = ["job", "relation", "kind", "phase"]
PARTITION_LABELS = ["relation", "partition"]
SINK_LABELS = ["sink", "relation"]


def render(session: Session) -> tuple[bytes, str]:
    """The session's metrics now, as the body of `/metrics` and its content type."""
    return generate_latest(registry(session)), CONTENT_TYPE_LATEST


_registries: weakref.WeakKeyDictionary[Session, CollectorRegistry] = weakref.WeakKeyDictionary()
_registries_lock = threading.Lock()


def registry(session: Session) -> CollectorRegistry:
    """The session's own registry (made at its first scrape; nothing in it is process-global)."""
    with _registries_lock:
        found = _registries.get(session)
        if found is None:
            found = _registries[session] = CollectorRegistry(auto_describe=False)
            found.register(PipelineCollector(session))
        return found


class PipelineCollector(Collector):
    """Reads the session's views at each scrape (see the module)."""

    def __init__(self, session: Session) -> None:
        self._session = weakref.ref(session)  # the registry must not keep a closed session alive

    def describe(self) -> Iterable[Metric]:
        return []  # names are not checked for collisions: the registry holds this collector alone

    def collect(self) -> Iterator[Metric]:
        session = self._session()
        if session is None:
            return
        up = GaugeMetricFamily("sparkwave_metrics_section_up", "Whether a section of the metrics could be read at "
                               "this scrape (1) or was left out (0)", labels=["section"])
        sections: tuple[tuple[str, Callable[[Session], list[Metric]]], ...] = (
            ("epochs", _epochs), ("relations", _relations), ("state_tables", _state_tables), ("jobs", _jobs),
            ("sources", _sources), ("sinks", _sinks))
        for name, section in sections:
            try:
                metrics = section(session)
            except Exception:  # a scrape never fails: that section is missing this time, and says so
                log.warning("metrics: section %s could not be read", name, exc_info=True)
                up.add_metric([name], 0)
                continue
            up.add_metric([name], 1)
            yield from metrics
        yield up


def _epochs(session: Session) -> list[Metric]:
    return epoch_metrics(session.telemetry, session.catalog.committed_epoch())


def epoch_metrics(telemetry: Telemetry, committed_epoch: int) -> list[Metric]:
    """The epochs' histogram, counters and gauges, from one copy of the telemetry's totals."""
    totals = telemetry.totals()
    hist = HistogramMetricFamily("sparkwave_epoch_latency_seconds",
                                 "Epoch latency, from the barrier's start to the catalog's commit")
    hist.add_metric([], [(_le(bound), n) for bound, n in totals.cumulative()], totals.latency_sum)
    rows = CounterMetricFamily("sparkwave_relation_change_rows", "Change rows each relation's epochs made (a "
                               "source's: the rows it read), since the session opened", labels=["relation"])
    state_rows = CounterMetricFamily("sparkwave_state_table_change_rows", "Change rows an MV's epochs made in each "
                                     "of its operator state tables, since the session opened",
                                     labels=["relation", "state_table"])
    for name, n in sorted(totals.rows.items()):
        owner, dot, _ = name.partition(".")  # a state table is '<mv>.<suffix>'; a relation's name has no dot
        if dot:
            state_rows.add_metric([owner, name], n)
        else:
            rows.add_metric([name], n)
    last = telemetry.last()
    out: list[Metric] = [
        hist,
        CounterMetricFamily("sparkwave_epochs_committed", "Epochs committed since the session opened",
                            value=totals.committed),
        CounterMetricFamily("sparkwave_epochs_failed", "Failed attempts of an epoch since the session opened",
                            value=totals.failed),
        CounterMetricFamily("sparkwave_epoch_input_rows", "Input rows the epochs took (sources' and DML)",
                            value=totals.rows_in),
        rows,
        state_rows,
    ]
    if committed_epoch > 0:
        out.append(GaugeMetricFamily("sparkwave_committed_epoch_timestamp_seconds", "When the main graph's committed "
                                     "epoch was planned (Unix time; its data is as of then)",
                                     value=epoch_ms(committed_epoch) / 1000))
    if last is not None:
        out.append(GaugeMetricFamily("sparkwave_last_commit_timestamp_seconds",
                                     "When the last epoch committed (Unix time)", value=last.committed_at))
    return out


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _relations(session: Session) -> list[Metric]:
    labels = ["relation", "kind"]
    rows = GaugeMetricFamily("sparkwave_relation_rows", "Rows a relation holds at the committed epoch", labels=labels)
    size = GaugeMetricFamily("sparkwave_relation_bytes", "Bytes of a relation's files (base and log)", labels=labels)
    status = GaugeMetricFamily("sparkwave_relation_status", "A relation's status (1 for the one it has)",
                               labels=[*labels, "status"])
    for node in overview.graph(session):
        if node.rows is not None:
            rows.add_metric([node.name, node.kind], node.rows)
        if node.bytes is not None:
            size.add_metric([node.name, node.kind], node.bytes)
        status.add_metric([node.name, node.kind, node.status], 1)
    return [rows, size, status]


def _state_tables(session: Session) -> list[Metric]:
    labels = ["relation", "state_table"]
    rows = GaugeMetricFamily("sparkwave_state_table_rows", "Rows of an MV's operator state table", labels=labels)
    size = GaugeMetricFamily("sparkwave_state_table_bytes", "Bytes of an MV's operator state table's files",
                             labels=labels)
    for mv, table in overview.state_sizes(session):
        if table.rows is not None:
            rows.add_metric([mv, table.name], table.rows)
        if table.bytes is not None:
            size.add_metric([mv, table.name], table.bytes)
    return [rows, size]


def _jobs(session: Session) -> list[Metric]:
    progress = GaugeMetricFamily("sparkwave_job_progress_ratio", "A creating job's snapshot progress, 0 to 1",
                                 labels=JOB_LABELS)
    eta = GaugeMetricFamily("sparkwave_job_eta_seconds", "A creating job's estimated time to finish its phase",
                            labels=JOB_LABELS)
    rate = GaugeMetricFamily("sparkwave_job_rows_per_second", "A creating job's recent rows per second",
                             labels=JOB_LABELS)
    lag = GaugeMetricFamily("sparkwave_job_lag_epochs", "Main-graph epochs a creating job has not consumed yet",
                            labels=JOB_LABELS)
    paused = GaugeMetricFamily("sparkwave_job_paused", "Whether a creating job is paused (rate limit 0)",
                               labels=JOB_LABELS)
    for job in overview.jobs(session):
        labels = [str(job.id), job.name, job.kind, job.phase]
        progress.add_metric(labels, job.progress)
        if job.eta_seconds is not None:
            eta.add_metric(labels, job.eta_seconds)
        rate.add_metric(labels, job.rows_per_second)
        lag.add_metric(labels, job.lag_epochs)
        paused.add_metric(labels, 1 if job.paused else 0)
    return [progress, eta, rate, lag, paused]


def _sources(session: Session) -> list[Metric]:
    committed = GaugeMetricFamily("sparkwave_source_committed_offset", "The next offset the pipeline reads",
                                  labels=PARTITION_LABELS)
    high = GaugeMetricFamily("sparkwave_source_high_watermark", "The broker's high watermark (left out when the "
                             "broker does not answer)", labels=PARTITION_LABELS)
    behind = GaugeMetricFamily("sparkwave_source_messages_behind", "Messages of a partition not yet read",
                               labels=PARTITION_LABELS)
    bad = CounterMetricFamily("sparkwave_source_bad_records", "Bad records a relation's source set aside",
                              labels=["relation"])
    seen: set[str] = set()
    for p in overview.sources(session):
        labels = [p.relation, p.partition]
        committed.add_metric(labels, p.committed_offset)
        if p.high_watermark is not None:
            high.add_metric(labels, p.high_watermark)
        if p.behind is not None:
            behind.add_metric(labels, p.behind)
        if p.relation not in seen:
            seen.add(p.relation)
            bad.add_metric([p.relation], p.bad_records)
    return [committed, high, behind, bad, *watermark_metrics(session.rt.catalog)]


def _sinks(session: Session) -> list[Metric]:
    epochs = GaugeMetricFamily("sparkwave_sink_lag_epochs", "Committed epochs a sink has not delivered",
                               labels=SINK_LABELS)
    seconds = GaugeMetricFamily("sparkwave_sink_lag_seconds", "How far behind the committed epoch a sink's "
                                "delivered one is, in seconds", labels=SINK_LABELS)
    size = GaugeMetricFamily("sparkwave_sink_lag_bytes", "Bytes of the MV's log a sink has not delivered",
                             labels=SINK_LABELS)
    rate = GaugeMetricFamily("sparkwave_sink_rows_per_second", "A sink's recent rows per second",
                             labels=SINK_LABELS)
    failing = GaugeMetricFamily("sparkwave_sink_failing", "Whether a sink's deliveries are failing (being retried)",
                                labels=SINK_LABELS)
    for s in overview.sinks(session):
        labels = [s.name, s.mv]
        epochs.add_metric(labels, s.lag_epochs)
        seconds.add_metric(labels, s.lag_seconds)
        size.add_metric(labels, s.lag_bytes)
        rate.add_metric(labels, s.rows_per_second)
        failing.add_metric(labels, 1 if s.phase == "retrying" else 0)
    return [epochs, seconds, size, rate, failing]
