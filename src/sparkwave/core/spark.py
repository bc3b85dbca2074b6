"""The SparkSession sparkwave runs on, and the settings it needs on any session."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pyspark.sql import DataFrame, SparkSession

from sparkwave.core import spark_features
from sparkwave.core.errors import SparkwaveError

REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Streaming semantics as in RisingWave: a bad value in one row (division by zero, a failed
    # cast) yields NULL rather than stopping every job of the epoch.
    "spark.sql.ansi.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A CRC32 in every Parquet page written, verified on every read (parquet-mr's reader does not by
    # default; Spark passes session settings to it, the vectorized reader too): `storage/integrity.py`.
    "parquet.page.write-checksum.enabled": "true",
    "parquet.page.verify-checksum.enabled": "true",
    # What a statement's text must not reach: `${env:X}` / `${system:X}` substituted into SQL (the
    # owner's environment and properties), and `format.`path`` reading any file of the host.
    "spark.sql.variable.substitute": "false",
    "spark.sql.runSQLOnFiles": "false",
}


def java_version() -> int | None:
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get(
        "JAVA_HOME") else shutil.which("java")
    if not java:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    for token in out.replace('"', " ").split():
        head = token.split(".")[0]
        if head.isdigit() and ("." in token or token.isdigit()):
            major = int(head)
            return int(token.split(".")[1]) if major == 1 else major
    return None


def ensure_java() -> None:
    v = java_version()
    if v is None or v < 17:
        found = "no java on PATH" if v is None else f"Java {v}"
        raise SparkwaveError(f"sparkwave needs Java 17 or newer for Spark ({found}); install e.g. "
                             "`apt-get install openjdk-17-jre-headless` and set JAVA_HOME")


def create_spark(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """`conf`: more settings for the builder (`sparkwave serve --conf`), before the required ones."""
    ensure_java()
    master = master or os.environ.get("SPARKWAVE_SPARK_MASTER", "local[*]")
    # Python workers (the Kafka reader) need this interpreter's packages, not PATH's python3; the
    # JVM, started below, inherits the setting.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName("sparkwave")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", os.environ.get("SPARKWAVE_SHUFFLE_PARTITIONS", "4"))
               .config("spark.driver.memory", os.environ.get("SPARKWAVE_DRIVER_MEMORY", "4g"))
               .config("spark.sql.adaptive.enabled", "true")
               # PySpark's call-site capture costs each DataFrame call about four more Py4J round
               # trips (a backfill build: 2,900 -> 1,050 calls); sparkwave's errors name the
               # statement themselves. A static setting: a session the user passes keeps its own.
               .config("spark.python.sql.dataFrameDebugging.enabled", "false")
               # Pools: the main graph's epochs first, creating jobs (backfills) on what is left.
               .config("spark.scheduler.mode", "FAIR")
               .config("spark.scheduler.allocation.file", str(Path(__file__).with_name("fairscheduler.xml"))))
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    for k, v in REQUIRED_CONF.items():
        if k.startswith("spark."):  # the others are Parquet's, set on the session (spark-submit warns of them)
            builder = builder.config(k, v)
    spark = builder.getOrCreate()
    for k, v in REQUIRED_CONF.items():
        spark.conf.set(k, v)
    spark_features.quiet(spark)
    quiet_query_context_logs()
    return spark


def connect_spark(url: str, conf: dict[str, str] | None = None) -> SparkSession:
    """A Spark Connect session on the server at `url` (`sc://host:port`; `sparkwave serve
    --spark-remote`), its settings as sparkwave needs them. `conf`: more session settings. No local JVM:
    the server runs the jobs, and its Python workers need sparkwave installed (`spark_features`)."""
    try:
        import grpc  # noqa: F401 (PySpark's Connect client)
    except ImportError:
        raise SparkwaveError("a Spark Connect session needs the Connect client's packages: "
                             "pip install 'sparkwave[connect]'") from None
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    _reachable(url)
    # PySpark's own `builder.remote` refuses a process with a classic session (a test worker's); its
    # functions build Connect columns while this is set, as that builder would set it
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    builder = RemoteSession.builder.remote(url)
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark: Any = builder.getOrCreate()  # Connect's session, which sparkwave uses as the classic one's API
    configure(spark)
    return spark


CONNECT_PORT = 15002  # Spark Connect's default, as in `sc://host`
PROBE_SECONDS = 10


def _reachable(url: str) -> None:
    """Refuse a Connect URL whose server does not accept a connection: the client would retry its
    first request for minutes without a word."""
    parts = urlsplit(url.split(";", 1)[0])
    if parts.scheme != "sc" or not parts.hostname:
        raise SparkwaveError(f"a Spark Connect URL is sc://HOST[:PORT], not {url.split(';', 1)[0]!r}")
    try:
        port = parts.port or CONNECT_PORT
    except ValueError:
        raise SparkwaveError(f"the Spark Connect URL {url.split(';', 1)[0]!r} has no valid port") from None
    try:
        socket.create_connection((parts.hostname, port), timeout=PROBE_SECONDS).close()
    except OSError as e:
        raise SparkwaveError(f"no Spark Connect server answers at {parts.hostname}:{port} "
                             f"({e.strerror or e}); start one, or check --spark-remote") from None


def empty_frame(spark: SparkSession, ddl: str) -> DataFrame:
    """No rows of the schema `ddl`, as an empty local relation Spark's optimizer sees
    (`spark_features.empty_frame`)."""
    return spark_features.empty_frame(spark, ddl)


T = TypeVar("T")


def concurrently(spark: SparkSession, fns: list[Callable[[], T]]) -> list[T]:
    """Run Spark actions from threads of their own, so that their jobs overlap, with the caller's
    job tags (a cancel stops them too) and, on classic Spark, its scheduler pool."""
    if len(fns) <= 1:
        return [fn() for fn in fns]

    @spark_features.inheriting(spark)
    def run(fn: Callable[[], T]) -> T:
        return fn()

    with ThreadPoolExecutor(max_workers=len(fns), thread_name_prefix="sparkwave-write") as ex:
        return list(ex.map(run, fns))


_started: SparkSession | None = None  # the Spark that sessions started (none was running)
_users = 0
_started_lock = threading.Lock()


def acquire_spark() -> SparkSession:
    """The Spark a session runs on when it was given none: the running one if there is one (the
    caller's, never stopped by sparkwave), else one started here and stopped by `release_spark`
    when the last session using it closes."""
    global _started, _users
    with _started_lock:
        if _started is None:
            if spark_features.classic_running():
                spark = SparkSession.builder.getOrCreate()
                configure(spark)
                return spark
            _started, _users = create_spark(), 0
        _users += 1
        return _started


def release_spark(spark: SparkSession) -> None:
    global _started, _users
    with _started_lock:
        if spark is not _started:
            return
        _users -= 1
        if _users == 0:
            _started = None
            spark.stop()


def configure(spark: SparkSession) -> None:
    for k, v in REQUIRED_CONF.items():
        spark.conf.set(k, v)
    quiet_query_context_logs()


def quiet_query_context_logs() -> None:
    """PySpark logs every failed query's context at ERROR; sparkwave raises its own error naming the
    statement instead, so these would only repeat it as a JSON dump on stderr."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
