"""Connector options are an allowlist checked by type and range (Kafka `properties.*` only the
librdkafka settings that load, run and open nothing of the host), settings are checked by range,
every source takes at most `max.rows.per.epoch` rows an epoch, and a Delta sink's location is
normalised before it is checked. Most tests are Spark-free; a few go through a real session."""

from __future__ import annotations

import pytest

from sparkwave.connectors import make_connector, make_sink
from sparkwave.connectors.kafka_reader import consumer_config
from sparkwave.connectors.options import DEFAULT_MAX_ROWS_PER_EPOCH
from sparkwave.connectors.sink import SinkSpec
from sparkwave.connectors.sink_delta import local_path
from sparkwave.core.catalog import Catalog
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.meta.settings import MAX_RETENTION_SECONDS, Settings

SCHEMA = Schema((Column("id", parse_type("bigint")), Column("v", parse_type("int")),
                 Column("_row_id", parse_type("bigint"), hidden=True)), ("_row_id",), True)
KAFKA = {"connector": "kafka", "topic": "t", "properties.bootstrap.server": "127.0.0.1:9"}
REFUSED_PROPERTIES = [
    ("plugin.library.paths", "/tmp/evil.so"),  # loads a library into the owner
    ("interceptors", "x"),
    ("ssl.engine.location", "/tmp/engine.so"),
    ("ssl.providers", "legacy"),
    ("ssl.ca.location", "/etc/shadow"),  # a file of the host
    ("sasl.kerberos.kinit.cmd", "touch /tmp/pwned"),  # a shell command
    ("sasl.oauthbearer.token.endpoint.url", "http://169.254.169.254/"),
    ("group.id", "theirs"),  # the connector's own
]


def sink(options: dict[str, str]) -> SinkSpec:
    return SinkSpec("s", "s-1", (Column("k", parse_type("int")),), ("k",), "upsert", options)


@pytest.mark.parametrize(("key", "value"), REFUSED_PROPERTIES)
def test_a_kafka_source_refuses_a_librdkafka_property_outside_the_allowlist(key, value):
    with pytest.raises(SqlError) as e:
        make_connector("ev", SCHEMA, {**KAFKA, f"properties.{key}": value})
    message = str(e.value)
    assert f"source 'ev': option properties.{key} is not allowed for the kafka connector; allowed: " in message
    assert "properties.security.protocol" in message and "properties.fetch.max.bytes" in message


@pytest.mark.parametrize(("key", "value"), REFUSED_PROPERTIES)
def test_a_kafka_sink_refuses_a_librdkafka_property_outside_the_allowlist(key, value):
    with pytest.raises(SqlError, match=f"sink 's': option properties.{key} is not allowed for the kafka connector"):
        make_sink(sink({**KAFKA, f"properties.{key}": value}))


def test_the_safe_librdkafka_properties_are_taken_typed_and_reach_the_client():
    conn = make_connector("ev", SCHEMA, {
        **KAFKA, "properties.security.protocol": "SASL_SSL", "properties.sasl.mechanism": "scram-sha-512",
        "properties.sasl.username": "u", "properties.sasl.password": "p", "properties.client.id": "me",
        "properties.socket.timeout.ms": "20000", "properties.fetch.max.bytes": "1048576",
        "properties.isolation.level": "read_uncommitted", "properties.check.crcs": "TRUE",
        "properties.ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"})
    config = consumer_config(conn.bootstrap, conn.properties)
    assert {k: config[k] for k in ("security.protocol", "sasl.mechanism", "socket.timeout.ms", "check.crcs")} == \
        {"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "socket.timeout.ms": "20000",
         "check.crcs": "true"}
    target = make_sink(sink({**KAFKA, "properties.compression.type": "zstd", "properties.linger.ms": "50",
                             "properties.batch.size": "65536"}))
    assert target._config()["linger.ms"] == "50"  # the user's, not the sink's default of 5


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("properties.socket.timeout.ms", "5", "an integer from 10 to 300000"),
    ("properties.fetch.max.bytes", "1e9", "an integer from 0 to 2147483135"),
    ("properties.security.protocol", "tls", "one of 'plaintext', 'ssl', 'sasl_plaintext', 'sasl_ssl'"),
    ("properties.sasl.mechanism", "GSSAPI", "one of 'PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512'"),
    ("properties.check.crcs", "yes", "true or false"),
    ("max.rows.per.epoch", "0", "an integer from 1 to 100000000"),
    ("source_rate_limit", "99999999999", "an integer from 0 to 1000000000"),
    ("scan.startup.mode", "sometime", "one of 'earliest', 'latest'"),
])
def test_a_kafka_option_out_of_its_type_or_range_is_refused_saying_what_it_allows(key, value, allowed):
    with pytest.raises(SqlError) as e:
        make_connector("ev", SCHEMA, {**KAFKA, key: value})
    assert str(e.value) == f"source 'ev': option {key} must be {allowed}, got {value!r}"


def test_a_secret_option_s_value_is_never_shown():
    with pytest.raises(SqlError) as e:
        make_connector("ev", SCHEMA, {**KAFKA, "properties.sasl.password": "hunter2\x00"})
    assert "hunter2" not in str(e.value) and "'***'" in str(e.value)


def test_a_stored_property_outside_the_allowlist_never_reaches_a_client():
    with pytest.raises(SqlError, match="plugin.library.paths"):
        consumer_config("127.0.0.1:9", {"plugin.library.paths": "/tmp/evil.so"})


def test_a_postgres_sink_takes_typed_options_and_no_unix_socket():
    pg = {"connector": "postgres", "user": "u", "database": "d", "table": "t"}
    with pytest.raises(SqlError, match="sink 's': option port must be an integer from 1 to 65535, got '99999'"):
        make_sink(sink({**pg, "port": "99999"}))
    for host in ["/var/run/postgresql", "db.example.com,/tmp"]:  # peer authentication as the owner's OS user
        with pytest.raises(SqlError, match="Unix-socket directory is refused"):
            make_sink(sink({**pg, "host": host}))
    with pytest.raises(SqlError, match="option colour is not allowed for the postgres connector; allowed: host, port"):
        make_sink(sink({**pg, "colour": "red"}))


@pytest.mark.parametrize(("options", "words"), [
    ({"connector": "datagen", "rows.per.second": "5"}, ["option rows.per.second is not allowed for the datagen",
                                                        "datagen.rows.per.second"]),
    ({"connector": "datagen", "datagen.rows.per.second": "1e10"}, ["an integer from 1 to 1000000000000"]),
    ({"connector": "datagen", "datagen.split.num": "0"}, ["datagen.split.num must be an integer from 1 to 1024"]),
    ({"connector": "datagen", "fields.v.min": "abc"}, ["fields.v.min must be an integer"]),
    ({"connector": "datagen", "fields.v.length": "1000"}, ["fields.v.length must be an integer from 1 to 64"]),
    ({"connector": "datagen", "fields.id.kind": "sequence", "fields.id.start": "1.5"}, ["fields.id.start"]),
    ({"connector": "datagen", "fields.v.min": "9", "fields.v.max": "1"}, ["fields.v.max is below"]),
    ({"connector": "nexmark", "nexmark.table.type": "bid", "nexmark.event.num": "5"}, ["nexmark.event.num"]),
    ({"connector": "nexmark", "nexmark.table.type": "bid", "nexmark.min.event.gap.in.ns": "-1"},
     ["an integer from 1 to 1000000000"]),
])
def test_generator_options_are_an_allowlist_checked_at_create(options, words):
    bid = Schema((Column("price", parse_type("bigint")), Column("_row_id", parse_type("bigint"), hidden=True)),
                 ("_row_id",), True)
    with pytest.raises(SqlError) as e:
        make_connector("g", bid if options["connector"] == "nexmark" else SCHEMA, options)
    assert str(e.value).startswith("table 'g': ") and all(w in str(e.value) for w in words), str(e.value)


@pytest.mark.parametrize("options", [
    {"connector": "datagen", "datagen.rows.per.second": str(10**10)},
    {"connector": "datagen", "datagen.rows.per.second": str(10**10), "datagen.split.num": "7"},
    {"connector": "nexmark", "nexmark.table.type": "bid", "nexmark.rows.per.second": str(10**10)},
    {**KAFKA, "source_rate_limit": str(10**9)},
])
def test_an_epoch_takes_at_most_max_rows_per_epoch_however_high_the_rate(options):
    schema = SCHEMA if options["connector"] != "nexmark" else Schema(
        (Column("price", parse_type("bigint")), Column("_row_id", parse_type("bigint"), hidden=True)), ("_row_id",),
        True)
    conn = make_connector("g", schema, options)
    if options["connector"] == "kafka":
        assert conn.budget(1000) == DEFAULT_MAX_ROWS_PER_EPOCH
        return
    plan = conn.plan({}, 1000)
    assert sum(end - start for start, end in plan.values()) == DEFAULT_MAX_ROWS_PER_EPOCH
    small = make_connector("g", schema, {**options, "max.rows.per.epoch": "10"})
    assert sum(end - start for start, end in small.plan({}, 1000).values()) == 10


def test_source_rate_limit_bounds_and_pauses_a_generator():
    conn = make_connector("g", SCHEMA, {"connector": "datagen", "datagen.rows.per.second": "1000",
                                        "source_rate_limit": "30"})
    assert conn.plan({"0": 5}, 1000) == {"0": [5, 35]}
    paused = make_connector("g", SCHEMA, {"connector": "datagen", "source_rate_limit": "0"})
    assert paused.plan({}, 1000) == {} and paused.status == "paused (source_rate_limit = 0)"


@pytest.mark.parametrize(("key", "text", "expects"), [
    ("dml_rows_per_epoch", "9" * 40, "an integer from 1 to 100000000"),
    ("backfill_rate_limit", "9" * 40, "an integer from 0 to 1000000000 (rows per second) or DEFAULT"),
    ("retention_seconds", "1e308", f"a non-negative number of seconds from 0 to {MAX_RETENTION_SECONDS} (10 years)"),
    ("big_epoch_rows", str(10**11), "an integer from 0 to 10000000000"),
    ("backfill_chunk_rows", str(10**10), "an integer from 1 to 1000000000"),
    ("compaction_epochs", str(10**7), "an integer from 0 to 1000000"),
])
def test_a_setting_out_of_range_is_refused_with_the_range_and_nothing_is_stored(tmp_path, key, text, expects):
    settings = Settings(Catalog(tmp_path / "c.db"))
    before = getattr(settings, key)
    with pytest.raises(ValueError) as e:
        settings.store(key, text)
    assert str(e.value).startswith(f"setting {key} must be {expects}, got "), str(e.value)
    assert getattr(settings, key) == before


@pytest.mark.parametrize(("location", "why"), [
    ("{out}/%2e%2e/{wh}/tables", "holds '%'"),
    ("file://{out}/%252e%252e/{wh}", "holds '%'"),
    (" {out}/x", "leading or trailing whitespace"),
    ("{out}/x ", "leading or trailing whitespace"),
    ("{out}/x\x00y", "control character"),
    ("http://example.com/t", "scheme 'http'"),
])
def test_a_delta_location_that_could_be_read_two_ways_is_refused(tmp_path, location, why):
    with pytest.raises(ValueError, match=why):
        local_path(location.format(out=tmp_path / "out", wh="wh"))


def test_a_delta_location_is_normalised_before_it_is_checked(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert local_path(f"{tmp_path}/a/../link/t") == tmp_path / "real" / "t"
    assert local_path(f"file://{tmp_path}/a%20b/t") == tmp_path / "a b" / "t"  # a URL's escapes, decoded once
    assert local_path("s3://bucket/t") is None


# --- through a session -------------------------------------------------------------------------
def test_create_table_and_create_sink_refuse_a_plugin_path_and_create_nothing(session, tmp_path):
    with pytest.raises(SqlError, match="option properties.plugin.library.paths is not allowed for the kafka"):
        session.sql("CREATE TABLE ev (id int) WITH (connector = 'kafka', topic = 't', "
                    "properties.bootstrap.server = '127.0.0.1:9', properties.plugin.library.paths = '/tmp/x.so') "
                    "FORMAT PLAIN ENCODE JSON")
    assert session.catalog.relation("ev") is None
    session.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
    with pytest.raises(SqlError, match="option properties.interceptors is not allowed for the kafka"):
        session.sql("CREATE SINK s FROM t WITH (connector = 'kafka', topic = 't', "
                    "properties.bootstrap.server = '127.0.0.1:9', properties.interceptors = 'x')")
    wh = session.warehouse.root.resolve()
    for location in [f"{tmp_path}/out/%2e%2e/%2e%2e/{wh.name}/tables/t", f" {tmp_path}/out"]:
        with pytest.raises(SqlError, match="sink location"):
            session.sql(f"CREATE SINK s FROM t WITH (connector = 'deltalake', location = '{location}')")
    assert session.sql("SHOW SINKS").collect() == []
    session.sql(f"CREATE SINK d FROM t WITH (connector = 'deltalake', location = '{tmp_path}/a/../lake')")
    assert session.catalog.sink("d").spec["options"]["location"] == str((tmp_path / "lake").resolve())


def test_settings_out_of_range_are_refused_and_retention_still_runs(session):
    session.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
    session.sql("INSERT INTO t VALUES (1, 1)")
    session.flush()
    for sql in ["SET dml_rows_per_epoch = " + "9" * 30, "SET backfill_rate_limit = " + "9" * 30,
                "SET retention_seconds = 1e308"]:
        with pytest.raises(SqlError, match="must be an integer from|must be a non-negative number of seconds from"):
            session.sql(sql)
    session.sql("INSERT INTO t VALUES (2, 2)")  # every INSERT failed with OverflowError
    session.flush()
    session.sql(f"SET retention_seconds = {MAX_RETENTION_SECONDS}")
    session.compact()  # the retention run failed with OverflowError
    assert sorted(r.k for r in session.table("t").collect()) == [1, 2]


def test_a_datagen_of_ten_billion_rows_a_second_takes_one_capped_epoch_and_drops_at_once(session):
    session.sql("CREATE TABLE g (id bigint, v int) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
                f"datagen.rows.per.second = '{10**10}', max.rows.per.epoch = '5000')")
    session.flush()  # the loop started before the CREATE: a millisecond at this rate is 10^7 rows
    assert session.table("g").count() == 5000
    session.sql("DROP TABLE g")
    assert session.catalog.relation("g") is None


def test_alter_source_rate_limit_pauses_and_resumes_a_datagen_table(session):
    session.sql("CREATE TABLE g (id bigint, v int) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
                "datagen.rows.per.second = '1000')")
    session.sql("ALTER TABLE g SET SOURCE_RATE_LIMIT = 0")
    session.flush()
    assert session.table("g").count() == 0
    assert next(j for j in session.jobs() if j.name == "g").error == "paused (source_rate_limit = 0)"
    session.sql("ALTER TABLE g SET SOURCE_RATE_LIMIT = DEFAULT")
    session.flush()
    assert session.table("g").count() > 0
    with pytest.raises(SqlError, match="a rate limit must be an integer from 0 to 1000000000"):
        session.sql(f"ALTER TABLE g SET SOURCE_RATE_LIMIT = {10**12}")
    session.sql("CREATE TABLE t (k int PRIMARY KEY)")
    with pytest.raises(SqlError, match="'t' is not fed by a connector"):
        session.sql("ALTER TABLE t SET SOURCE_RATE_LIMIT = 5")
