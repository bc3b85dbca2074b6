"""The main graph's epoch history (`meta/telemetry.py`) and its Prometheus exposition
(`frontend/metrics.py: epoch_metrics`), without Spark: commits and failures are handed to the
telemetry as the barrier loop hands them, on a clock the test sets."""

from __future__ import annotations

import math
import threading

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from sparkwave.core.epoch import epoch_ms
from sparkwave.frontend.metrics import epoch_metrics
from sparkwave.meta.barrier.failures import RelationFailed
from sparkwave.meta.pipeline import Commit
from sparkwave.meta.telemetry import LATENCY_BUCKETS, Telemetry, percentile
from sparkwave.storage.table import StagedLog


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def rows(n: int) -> pa.Table:
    return pa.table({"x": list(range(n))})


def commit(t: Telemetry, clock: Clock, epoch: int, latency: float, **chunks: pa.Table | StagedLog | None) -> None:
    clock.now += 1.0
    t.on_commit(Commit(epoch, chunks, started_at=clock.now - latency, committed_at=clock.now,
                       rows_in=sum(c.num_rows for c in chunks.values() if c is not None)))


def test_each_commit_is_kept_with_its_latency_and_rows_per_relation():
    clock = Clock()
    t = Telemetry(clock)
    commit(t, clock, 10, 0.25, orders=rows(3), totals=rows(1), idle=None)
    commit(t, clock, 11, 0.5, orders=rows(0), big=StagedLog("/nowhere.parquet", 7))
    kept = t.epochs()
    assert [s.epoch for s in kept] == [10, 11]
    assert [s.latency_seconds for s in kept] == [0.25, 0.5]
    assert kept[0].rows == {"orders": 3, "totals": 1}  # an unchanged relation is absent
    assert kept[1].rows == {"big": 7}  # a big epoch's rows, known by count only
    assert t.last().epoch == 11
    assert t.totals().rows == {"orders": 3, "totals": 1, "big": 7}


def test_the_window_forgets_old_epochs_but_the_totals_count_every_one():
    clock = Clock()
    t = Telemetry(clock, window_seconds=10.0)
    for e in range(30):
        commit(t, clock, e, 0.1, a=rows(2))
    assert [s.epoch for s in t.epochs()] == list(range(20, 30))  # committed within the last 10 s
    totals = t.totals()
    assert totals.committed == 30
    assert totals.rows == {"a": 60}
    assert totals.rows_in == 60


def test_the_ring_is_bounded_whatever_the_clock():
    clock = Clock()
    t = Telemetry(clock, max_epochs=5)
    for e in range(12):
        commit(t, clock, e, 0.1)
    assert [s.epoch for s in t.epochs()] == list(range(7, 12))
    assert t.totals().committed == 12


def test_percentiles_are_nearest_rank_over_the_window():
    assert percentile([], 0.5) is None
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([3.0], 0.99) == 3.0
    clock = Clock()
    t = Telemetry(clock)
    for e, latency in enumerate([0.4, 0.1, 0.3, 0.2, 5.0]):
        commit(t, clock, e, latency)
    assert t.latency_percentiles(0.5, 0.99) == [pytest.approx(0.3), pytest.approx(5.0)]


def test_rows_per_second_counts_the_epochs_of_the_last_seconds():
    clock = Clock()
    t = Telemetry(clock)
    clock.now += 100  # the session is older than the rate's window
    for e in range(20):  # one epoch a second, 10 rows each
        commit(t, clock, e, 0.1, a=rows(10))
    assert t.rows_per_second() == {"a": 10.0}  # the last 10 s held 10 epochs of 10 rows
    clock.now += 60
    assert t.rows_per_second() == {}  # nothing committed lately


def test_a_failure_names_the_relation_it_failed_at():
    clock = Clock()
    t = Telemetry(clock)
    t.on_failure(RelationFailed("epoch 7 failed at materialized view 'm': division by zero; ...", "m", "mv", 7,
                                "division by zero"))
    t.on_failure(OSError("disk full\nmore detail"))
    first, second = t.failures()
    assert (first.relation, first.kind, first.epoch) == ("m", "mv", 7)
    assert "division by zero" in first.error
    assert (second.relation, second.epoch, second.error) == (None, None, "disk full")
    assert t.totals().failed == 2


def test_readers_on_other_threads_see_consistent_totals():
    clock = Clock()
    t = Telemetry(clock)
    stop = threading.Event()
    seen: list[tuple[int, int]] = []

    def read() -> None:
        while not stop.is_set():
            totals = t.totals()
            seen.append((totals.committed, sum(totals.latency_counts)))

    reader = threading.Thread(target=read)
    reader.start()
    for e in range(2000):
        commit(t, clock, e, 0.01 * (e % 50))
    stop.set()
    reader.join()
    assert all(committed == counted for committed, counted in seen)


class _Epochs(Collector):
    def __init__(self, t: Telemetry, committed: int) -> None:
        self.t, self.committed = t, committed

    def collect(self):
        return epoch_metrics(self.t, self.committed)


def scrape(t: Telemetry, committed: int) -> dict:
    registry = CollectorRegistry()
    registry.register(_Epochs(t, committed))
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(family, name: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples if s.name == name}


def test_the_exposition_parses_back_with_the_histogram_counting_every_epoch():
    clock = Clock()
    t = Telemetry(clock, window_seconds=5.0)
    latencies = [0.01, 0.3, 0.3, 2.0, 1000.0]
    for e, latency in enumerate(latencies):
        commit(t, clock, e, latency, orders=rows(e + 1), **{"totals.a3": rows(1)})
    clock.now += 60  # every epoch has left the window: the counters still count them
    t.on_failure(ValueError("boom"))
    first = scrape(t, 4 << 16)
    hist = first["sparkwave_epoch_latency_seconds"]
    assert hist.type == "histogram"
    buckets = {dict(labels)["le"]: v for labels, v in samples(hist, "sparkwave_epoch_latency_seconds_bucket").items()}
    assert buckets["+Inf"] == len(latencies)
    assert buckets["0.05"] == 1 and buckets["0.5"] == 3 and buckets["2.5"] == 4 and buckets["300.0"] == 4
    assert len(buckets) == len(LATENCY_BUCKETS) + 1
    assert samples(hist, "sparkwave_epoch_latency_seconds_count")[()] == len(latencies)
    assert math.isclose(samples(hist, "sparkwave_epoch_latency_seconds_sum")[()], sum(latencies))
    assert samples(first["sparkwave_epochs_committed"], "sparkwave_epochs_committed_total")[()] == 5
    assert samples(first["sparkwave_epochs_failed"], "sparkwave_epochs_failed_total")[()] == 1
    rows_total = samples(first["sparkwave_relation_change_rows"], "sparkwave_relation_change_rows_total")
    assert rows_total == {(("relation", "orders"),): 15.0}  # a state table is not a relation of its own
    state_total = samples(first["sparkwave_state_table_change_rows"], "sparkwave_state_table_change_rows_total")
    assert state_total == {(("relation", "totals"), ("state_table", "totals.a3")): 5.0}
    assert samples(first["sparkwave_committed_epoch_timestamp_seconds"],
                   "sparkwave_committed_epoch_timestamp_seconds")[()] == epoch_ms(4 << 16) / 1000

    commit(t, clock, 5, 0.2, orders=rows(2))
    second = scrape(t, 5 << 16)
    assert samples(second["sparkwave_epochs_committed"], "sparkwave_epochs_committed_total")[()] == 6
    assert samples(second["sparkwave_epoch_latency_seconds"], "sparkwave_epoch_latency_seconds_count")[()] == 6
    assert samples(second["sparkwave_relation_change_rows"],
                   "sparkwave_relation_change_rows_total") == {(("relation", "orders"),): 17.0}
