"""`/metrics` and the dashboard's views over a real session: epochs driven by `flush()`, the
exposition parsed back with `prometheus_client`'s parser, the views checked against what the
catalog, `SHOW JOBS` and the broker say."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkwave.core.epoch import epoch_ms
from sparkwave.frontend import metrics, overview
from tests.kafka_util import Topic
from tests.oracle import rows_of


def scrape(session) -> dict:
    body, content_type = metrics.render(session)
    assert content_type.startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def value(families: dict, family: str, sample: str | None = None, **labels: str) -> float:
    found = [s.value for s in families[family].samples
             if s.name == (sample or family) and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (family, sample, labels, families[family].samples)
    return found[0]


def labelled(families: dict, family: str, label: str) -> set[str]:
    return {s.labels[label] for s in families[family].samples}


@pytest.fixture
def pipeline(session, tmp_path):
    s = session
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); "
          "CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n FROM t GROUP BY v")
    s.sql(f"CREATE SINK out FROM m WITH (connector = 'deltalake', location = '{tmp_path / 'out'}')")
    return s


def test_metrics_scraped_twice_grow_and_the_histogram_counts_every_epoch(pipeline):
    s = pipeline
    for i in range(3):
        s.sql(f"INSERT INTO t VALUES ({i}, {i % 2})")
        s.flush()
    first = scrape(s)
    committed = value(first, "sparkwave_epochs_committed", "sparkwave_epochs_committed_total")
    assert committed >= 3
    assert value(first, "sparkwave_epoch_latency_seconds", "sparkwave_epoch_latency_seconds_count") == committed
    assert value(first, "sparkwave_epoch_latency_seconds", "sparkwave_epoch_latency_seconds_bucket",
                 le="+Inf") == committed
    assert value(first, "sparkwave_committed_epoch_timestamp_seconds") == epoch_ms(s.committed_epoch) / 1000
    rows_t = value(first, "sparkwave_relation_change_rows", "sparkwave_relation_change_rows_total", relation="t")
    assert rows_t == 3

    s.sql("INSERT INTO t VALUES (10, 1), (11, 2)")
    s.flush()
    s.sql("UPDATE t SET v = 5 WHERE k = 0")
    s.flush()
    second = scrape(s)
    committed2 = value(second, "sparkwave_epochs_committed", "sparkwave_epochs_committed_total")
    assert committed2 >= committed + 2
    assert value(second, "sparkwave_epoch_latency_seconds", "sparkwave_epoch_latency_seconds_count") == committed2
    assert value(second, "sparkwave_relation_change_rows", "sparkwave_relation_change_rows_total",
                 relation="t") > rows_t
    assert value(second, "sparkwave_relation_change_rows", "sparkwave_relation_change_rows_total",
                 relation="m") > value(first, "sparkwave_relation_change_rows", "sparkwave_relation_change_rows_total",
                                       relation="m")
    assert value(second, "sparkwave_epochs_failed", "sparkwave_epochs_failed_total") == 0
    assert committed2 == s.telemetry.totals().committed

    # the gauges say what the relations hold now
    assert value(second, "sparkwave_relation_rows", relation="t", kind="table") == len(rows_of(s.table("t"))) == 5
    assert value(second, "sparkwave_relation_rows", relation="m", kind="mv") == len(rows_of(s.table("m")))
    assert value(second, "sparkwave_relation_bytes", relation="t", kind="table") > 0
    assert value(second, "sparkwave_relation_status", relation="m", kind="mv", status="running") == 1
    states = {s.labels["state_table"] for s in second["sparkwave_state_table_rows"].samples
              if s.labels["relation"] == "m"}
    assert states and all(name.startswith("m.") for name in states)
    assert all(v > 0 for v in (smp.value for smp in second["sparkwave_state_table_bytes"].samples))
    assert labelled(second, "sparkwave_sink_lag_epochs", "sink") == {"out"}
    assert value(second, "sparkwave_metrics_section_up", section="sinks") == 1
    assert {smp.labels["section"] for smp in second["sparkwave_metrics_section_up"].samples
            if smp.value == 0} == set()


def test_the_views_name_every_relation_and_say_what_the_catalog_says(pipeline):
    s = pipeline
    s.sql("INSERT INTO t VALUES (1, 1), (2, 1), (3, 2)")
    s.flush()
    s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
    s.sql("CREATE MATERIALIZED VIEW slow AS SELECT k, v * 2 AS w FROM t")  # paused: reads nothing
    s.sql("SET backfill_rate_limit = default")

    nodes = {n.name: n for n in overview.graph(s)}
    assert set(nodes) == {"t", "m", "slow", "out"}
    assert (nodes["t"].kind, nodes["m"].kind, nodes["slow"].kind, nodes["out"].kind) == ("table", "mv", "mv", "sink")
    assert nodes["m"].upstreams == ["t"] and nodes["out"].upstreams == ["m"]
    assert (nodes["t"].status, nodes["m"].status, nodes["slow"].status) == ("running", "running", "paused")
    assert nodes["t"].rows == 3 and nodes["m"].rows == 2
    assert nodes["m"].state_bytes > 0 and nodes["t"].state_bytes is None

    jobs = overview.jobs(s)
    assert [(j.name, j.phase, j.paused, j.progress) for j in jobs] == [("slow", "snapshot", True, 0.0)]
    shown = {r.name: r for r in s.sql("SHOW JOBS").collect()}
    assert jobs[0].id == shown["slow"].id and jobs[0].rows_total == shown["slow"].snapshot_rows_total

    epochs = overview.epochs(s)
    assert epochs.committed_epoch == s.committed_epoch
    assert epochs.series and epochs.series[-1].epoch == s.committed_epoch
    assert epochs.latency_p50 is not None and epochs.latency_p50 <= epochs.latency_p99
    assert epochs.committed_total == s.telemetry.totals().committed and epochs.failures == []

    (sink,) = overview.sinks(s)
    assert (sink.name, sink.mv, sink.connector) == ("out", "m", "deltalake")

    page = overview.relation_page(s, "m")
    assert page.kind == "mv" and page.upstreams == ["t"] and page.downstreams == ["out"]
    assert page.plan and page.plan[0].startswith("Materialize(m")
    assert page.state_tables and all(st.description for st in page.state_tables)
    assert any("per v" in st.description for st in page.state_tables), page.state_tables  # EXPLAIN's words
    assert sum(st.rows for st in page.state_tables) > 0
    assert page.sample is not None and page.sample.columns == ["v", "n"]
    assert sorted(map(tuple, page.sample.rows)) == sorted(rows_of(s.table("m")))
    creating = overview.relation_page(s, "slow")
    assert creating.sample is None and creating.job is not None and creating.job.paused
    with pytest.raises(overview.NotFound, match="no_such"):
        overview.relation_page(s, "no_such")
    with pytest.raises(overview.NotFound):
        overview.relation_page(s, page.state_tables[0].name)  # a state table is its MV's page's

    for view in (overview.graph(s), overview.epochs(s), overview.jobs(s), overview.sources(s), overview.sinks(s),
                 overview.relation_page(s, "m")):
        json.dumps(dataclasses.asdict(view) if dataclasses.is_dataclass(view)
                   else [dataclasses.asdict(v) for v in view])


def test_a_failing_epoch_is_recorded_with_the_relation_it_failed_at(session):
    s = session
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); "
          "CREATE MATERIALIZED VIEW bad AS SELECT k, CASE WHEN v < 100 THEN v ELSE raise_error('v too large') END "
          "AS v FROM t")
    s.sql("INSERT INTO t VALUES (1, 500)")
    s.flush()  # returns once `bad` is taken out, after its failed attempts
    failures = overview.epochs(s).failures
    assert failures and all(f.relation == "bad" and f.kind == "mv" for f in failures)
    assert "v too large" in failures[-1].error
    assert {n.name: n.status for n in overview.graph(s)}["bad"] == "failed"
    families = scrape(s)
    assert value(families, "sparkwave_epochs_failed", "sparkwave_epochs_failed_total") == len(failures)
    assert value(families, "sparkwave_relation_status", relation="bad", kind="mv", status="failed") == 1


def test_a_kafka_source_shows_each_partition_behind_the_broker(session, kafka):
    s = session
    topic = Topic(kafka.bootstrap, 2)
    for i in range(10):
        topic.produce({"id": i}, partition=i % 2)
    topic.flush()
    s.sql(f"CREATE TABLE ev (id int) WITH ({topic.options(**{'max.rows.per.epoch': '4'})}) FORMAT PLAIN ENCODE JSON")
    s.flush()  # reads 4 of the 10 messages
    parts = {p.partition: p for p in overview.sources(s)}
    assert set(parts) == {"0", "1"}
    committed = s.catalog.source_offsets("ev")
    for split, p in parts.items():
        assert (p.relation, p.connector, p.topic) == ("ev", "kafka", topic.name)
        assert p.committed_offset == committed[split]
        assert p.high_watermark == 5 and p.behind == 5 - committed[split]
    assert sum(p.behind for p in parts.values()) == 10 - 4
    families = scrape(s)
    assert value(families, "sparkwave_source_messages_behind", relation="ev", partition="0") == parts["0"].behind
    assert value(families, "sparkwave_source_high_watermark", relation="ev", partition="1") == 5


def test_a_broker_that_does_not_answer_gives_no_watermark_and_no_error(session, kafka, tmp_path):
    s = session
    topic = Topic(kafka.bootstrap, 1)
    topic.produce({"id": 1}, partition=0)
    topic.flush()
    s.sql(f"CREATE TABLE ev (id int) WITH ({topic.options()}) FORMAT PLAIN ENCODE JSON")
    s.flush()
    ev = s.catalog.relation("ev")
    gone = {**ev.definition["connector"], "properties.bootstrap.server": "127.0.0.1:1"}  # nothing listens there
    s.catalog.set_definition("ev", {**ev.definition, "connector": gone})
    (p,) = overview.sources(s)
    assert p.high_watermark is None and p.behind is None and p.committed_offset == 1


def test_the_grafana_dashboard_reads_only_metrics_the_server_exposes(session):
    session.flush()  # a committed epoch: the families of its time are written too
    families = scrape(session)  # every family is written, with or without samples
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    exposed = {f.name + suffix for f in families.values() for suffix in suffixes[f.type]}
    board = json.loads((Path(__file__).parents[2] / "grafana" / "sparkwave.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    used = {name for e in exprs for name in re.findall(r"\bsparkwave_\w+", e)}
    assert used and used <= exposed, used - exposed
    assert {v["name"] for v in board["templating"]["list"]} >= {"datasource"}
    assert all(p.get("datasource", {}).get("uid") == "${datasource}" for p in board["panels"] if p["type"] != "row")
