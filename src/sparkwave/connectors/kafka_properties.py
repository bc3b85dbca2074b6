"""The librdkafka settings a statement may pass as `properties.<key>`: an allowlist, each with the
type and range librdkafka's CONFIGURATION.md states. A statement is written by whoever can run
SQL, and librdkafka runs in the owner's process, so everything that loads code, runs a command,
opens a file of the host or calls a URL of its own is refused: `plugin.library.paths`,
`interceptors`, `ssl.engine.*`, `ssl.providers`, every `*.location` and `*.file` (certificates and
keys are passed as PEM text: `ssl.ca.pem`, `ssl.certificate.pem`, `ssl.key.pem`),
`sasl.kerberos.*` (a kinit shell command), `sasl.oauthbearer.*` and the GSSAPI and OAUTHBEARER
mechanisms; so are settings the connectors own (`group.id`, offsets and commits, transactions,
idempotence and acks, which the sink's exactly-once delivery decides)."""

from __future__ import annotations

from typing import Any

from sparkwave.connectors.options import Options, boolean, choice, integer, number, text

_INT32 = 2_147_483_647

COMMON = Options(
    "kafka",
    text("properties.bootstrap.server"),
    text("properties.bootstrap.servers"),
    text("properties.client.id"),
    text("properties.client.rack"),
    choice("properties.security.protocol", "plaintext", "ssl", "sasl_plaintext", "sasl_ssl"),
    choice("properties.sasl.mechanism", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    choice("properties.sasl.mechanisms", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    text("properties.sasl.username"),
    text("properties.sasl.password", secret=True),
    text("properties.ssl.ca.pem", long=True),
    text("properties.ssl.certificate.pem", long=True),
    text("properties.ssl.key.pem", long=True, secret=True),
    text("properties.ssl.key.password", secret=True),
    text("properties.ssl.cipher.suites"),
    text("properties.ssl.curves.list"),
    text("properties.ssl.sigalgs.list"),
    boolean("properties.enable.ssl.certificate.verification"),
    choice("properties.ssl.endpoint.identification.algorithm", "none", "https"),
    integer("properties.message.max.bytes", 1000, 1_000_000_000),
    integer("properties.receive.message.max.bytes", 1000, _INT32),
    integer("properties.socket.timeout.ms", 10, 300_000),
    integer("properties.socket.connection.setup.timeout.ms", 1000, _INT32),
    integer("properties.socket.send.buffer.bytes", 0, 100_000_000),
    integer("properties.socket.receive.buffer.bytes", 0, 100_000_000),
    boolean("properties.socket.keepalive.enable"),
    integer("properties.connections.max.idle.ms", 0, _INT32),
    integer("properties.reconnect.backoff.ms", 0, 3_600_000),
    integer("properties.reconnect.backoff.max.ms", 0, 3_600_000),
    integer("properties.retry.backoff.ms", 1, 300_000),
    integer("properties.retry.backoff.max.ms", 1, 300_000),
    integer("properties.metadata.max.age.ms", 1, 86_400_000),
    integer("properties.topic.metadata.refresh.interval.ms", -1, 3_600_000),
    integer("properties.api.version.request.timeout.ms", 1, 300_000),
    choice("properties.broker.address.family", "any", "v4", "v6"),
)

CONSUMER = COMMON + Options(
    "kafka",
    integer("properties.session.timeout.ms", 1, 3_600_000),
    integer("properties.fetch.max.bytes", 0, 2_147_483_135),
    integer("properties.fetch.min.bytes", 1, 100_000_000),
    integer("properties.fetch.wait.max.ms", 0, 300_000),
    integer("properties.fetch.message.max.bytes", 1, 1_000_000_000),
    integer("properties.max.partition.fetch.bytes", 1, 1_000_000_000),
    integer("properties.fetch.error.backoff.ms", 0, 300_000),
    integer("properties.fetch.queue.backoff.ms", 0, 300_000),
    integer("properties.queued.min.messages", 1, 10_000_000),
    integer("properties.queued.max.messages.kbytes", 1, 2_097_151),
    choice("properties.isolation.level", "read_uncommitted", "read_committed"),
    boolean("properties.check.crcs"),
)

PRODUCER = COMMON + Options(
    "kafka",
    choice("properties.compression.type", "none", "gzip", "snappy", "lz4", "zstd"),
    choice("properties.compression.codec", "none", "gzip", "snappy", "lz4", "zstd"),
    integer("properties.compression.level", -1, 12),
    number("properties.linger.ms", 0, 900_000),
    number("properties.queue.buffering.max.ms", 0, 900_000),
    integer("properties.queue.buffering.max.messages", 0, _INT32),
    integer("properties.queue.buffering.max.kbytes", 1, _INT32),
    integer("properties.batch.num.messages", 1, 1_000_000),
    integer("properties.batch.size", 1, _INT32),
    integer("properties.message.timeout.ms", 0, _INT32),
    integer("properties.delivery.timeout.ms", 0, _INT32),
    integer("properties.request.timeout.ms", 1, 900_000),
    integer("properties.transaction.timeout.ms", 1000, _INT32),
    choice("properties.partitioner", "random", "consistent", "consistent_random", "murmur2", "murmur2_random",
           "fnv1a", "fnv1a_random"),
)

_ALL = CONSUMER + PRODUCER


def unsafe(properties: dict[str, str]) -> list[str]:
    """The librdkafka keys (without `properties.`) of `properties` that no Kafka connector allows:
    a last check where a client is configured, for options stored before the allowlist."""
    return sorted(k for k in properties if _ALL.find("properties." + k) is None)


def librdkafka(options: dict[str, str], values: dict[str, Any]) -> dict[str, str]:
    """The `properties.*` of a connector's options, once checked into typed `values`, as librdkafka
    settings: booleans and enums in their canonical spelling, numbers as written. The bootstrap
    servers are the connector's to pass."""
    return {k[len("properties."):]: ("true" if v else "false") if isinstance(v, bool) else
            v if isinstance(v, str) else options[k]
            for k, v in values.items() if k.startswith("properties.") and not k.startswith("properties.bootstrap.")}
