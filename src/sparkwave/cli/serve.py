"""`sparkwave serve`: the warehouse's one long-running owner (barrier loop, creating jobs, sinks,
maintenance), reached by clients over the PostgreSQL protocol until SIGTERM or SIGINT.

The console gets one line per event; Spark's own log (log4j, the JVM's output, py4j) goes to
`<warehouse>/logs/spark.log`. The address is recorded in `<warehouse>/server.json` once listening
(written atomically, removed at a clean stop; a file whose pid is gone is stale), which is how
`sparkwave sql` finds the server."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

SERVER_FILE = "server.json"
STOP_GRACE_S = 40.0  # then the running epoch is abandoned (replayed at the next start) and Spark's jobs cancelled
STOP_HARD_S = 15.0  # after the abandon, at most this much more
WATCH_EVERY_S = 1.0

_LOG4J = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss.SSS}} %p %c{{1}}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


class ServeError(Exception):
    """A refusal before anything started (exit status 2)."""


def parse_conf(items: list[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ServeError(f"--conf expects key=value, got {item!r}")
        conf[key.strip()] = value
    return conf


class Console:
    """One line per event, with the time, flushed at once (the console may be a pipe)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        with self._lock:
            self.out.write(f"{datetime.now(UTC).strftime('%H:%M:%S')} {message}\n")
            self.out.flush()


def serve(args: Any, out: TextIO = sys.stdout) -> int:
    console = Console(out)
    password = args.password or os.environ.get("SPARKWAVE_PASSWORD") or None
    from sparkwave.server.auth import is_loopback_host

    if not is_loopback_host(args.host) and not password:
        raise ServeError(f"--host {args.host} accepts clients from other machines: give a password (--password or "
                         "SPARKWAVE_PASSWORD; clients then authenticate with SCRAM-SHA-256), or listen on 127.0.0.1")
    conf = parse_conf(args.conf or [])
    from sparkwave.meta.ownership import describe_owner, is_owned
    from sparkwave.storage.warehouse import Warehouse

    wh = Warehouse(args.warehouse)
    wh.open(getattr(args, "catalog", None))  # a new warehouse is made before logs/ is written into its folder
    if is_owned(wh.owner_path) and not getattr(args, "standby", False):
        raise ServeError(f"warehouse {args.warehouse} is owned by {describe_owner(wh.owner_path)}; stop it first")
    log_path = wh.root / "logs" / "spark.log"
    remote = getattr(args, "spark_remote", None)
    if remote and args.spark_master:
        raise ServeError("--spark-master and --spark-remote exclude each other: Spark runs here or on a Connect server")
    spark = _connect_spark(log_path, remote, conf) if remote else _start_spark(wh.root, log_path, args.spark_master,
                                                                               conf)
    from sparkwave.core.spark_features import describe

    console(f"spark {'connected' if remote else 'started'} ({describe(spark)}); its log: {log_path}")
    return _run(args, console, spark, password)


def _run(args: Any, console: Console, spark: Any, password: str | None) -> int:
    from sparkwave.frontend.session import connect
    from sparkwave.meta.barrier import EpochReport
    from sparkwave.server.listener import Listener
    from sparkwave.server.session_backend import SessionBackend

    if getattr(args, "standby", False):  # Spark is up: a takeover costs the recovery only (SIGTERM ends the wait)
        from sparkwave.meta.ownership import wait_until_unowned
        from sparkwave.storage.warehouse import Warehouse
        console("standby: waiting for the warehouse's owner to stop")
        wait_until_unowned(Warehouse(args.warehouse).owner_path)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def on_epoch(report: EpochReport) -> None:
        if report.replayed:
            console(f"epoch {report.epoch} replayed (planned before a stop or a failure) and committed")

    session = connect(args.warehouse, spark=spark, barrier_interval_ms=args.barrier_interval_ms,
                                on_epoch=on_epoch, catalog=getattr(args, "catalog", None))
    session.ddl.progress_bars = False  # a client's foreground CREATE waits without drawing on the server's console
    console(f"warehouse {Path(args.warehouse).resolve()} open at epoch {session.committed_epoch}")
    backend = SessionBackend(session, on_event=console)
    listener = Listener(backend, host=args.host, port=args.port, password=password)
    http = None
    try:
        listener.start()
        port = listener.address[1]
        if args.http_port:
            from sparkwave.server.http import HttpServer

            http = HttpServer(session, args.host, args.http_port, password).start()
        write_server_file(Path(args.warehouse), args.host, port, http.port if http else None)
        console(f"listening on {args.host}:{port} (PostgreSQL protocol"
                f"{', SCRAM-SHA-256' if password else ', loopback clients only, no password'})")
        if http is not None:
            console(f"dashboard on http://{_url_host(args.host)}:{http.port}/ (metrics at /metrics, health at /health)")
        watcher = _Watcher(session, console, stop)
        watcher.start()
        while not stop.wait(1.0):
            pass
        console("stopping: no new connections; ending client sessions")
    finally:
        remove_server_file(Path(args.warehouse))
        if http is not None:
            http.stop()
        backend.close()  # no new sessions; every running statement cancelled
        listener.stop(timeout=10.0)
        _close(session, console)
    console("stopped")
    return 0


def _close(session: Any, console: Console) -> None:
    """Session.close (sinks, maintenance, creating jobs, the barrier loop: an epoch in flight finishes
    or, past `STOP_GRACE_S`, is abandoned: its plan stays persisted and is replayed at the next start)."""
    done = threading.Event()
    error: list[BaseException] = []

    def close() -> None:
        try:
            session.close()
        except BaseException as e:
            error.append(e)
        finally:
            done.set()

    threading.Thread(target=close, name="sparkwave-stop", daemon=True).start()
    if not done.wait(STOP_GRACE_S):
        console(f"still stopping after {STOP_GRACE_S:.0f} s: abandoning the running epoch (replayed at the next "
                "start) and cancelling Spark's jobs")
        session.loop.abandon()
        from sparkwave.core.spark_features import interrupt_all

        interrupt_all(session.spark)
        done.wait(STOP_HARD_S)
    if error:
        console(f"stop: {type(error[0]).__name__}: {error[0]}")


@contextmanager
def _output_to(path: Path) -> Any:
    """The process's stdout and stderr (file descriptors 1 and 2) to `path`: the JVM started inside
    inherits them, so its output and Spark's launcher's go to the log, not the console."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _start_spark(root: Path, log_path: Path, master: str | None, conf: dict[str, str]) -> Any:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    props = log_path.with_name("log4j2.properties")
    props.write_text(_LOG4J.format(path=str(log_path)))
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("py4j", "pyspark"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.propagate = False
    java_opts = f"-Dlog4j2.configurationFile=file:{props}"
    conf = dict(conf)
    conf["spark.driver.extraJavaOptions"] = (conf.get("spark.driver.extraJavaOptions", "") + " " + java_opts).strip()
    from sparkwave.core.spark import create_spark

    with _output_to(log_path):
        return create_spark(master, conf)


def _connect_spark(log_path: Path, url: str, conf: dict[str, str]) -> Any:
    """A Spark Connect session: the client's own log lines (gRPC, pyspark) go to the log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("pyspark", "grpc"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.propagate = False
    from sparkwave.core.spark import connect_spark

    try:
        return connect_spark(url, conf)
    except Exception as e:
        token = re.compile(r"(;\s*token\s*=)[^;\s]*", re.I)  # a credential: never on the console
        shown, reason = (token.sub(r"\1***", t) for t in (url, str(e).strip().splitlines()[0][:300]))
        raise ServeError(f"no Spark Connect session at {shown}: {reason}") from None


# --- the address file ----------------------------------------------------------------------------
def write_server_file(warehouse: Path, host: str, port: int, http_port: int | None = None) -> None:
    path = warehouse / SERVER_FILE
    tmp = path.with_name(f"{SERVER_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid(), "http_port": http_port,
                               "started_at": datetime.now(UTC).isoformat(timespec="seconds")}) + "\n")
    os.replace(tmp, path)


def remove_server_file(warehouse: Path) -> None:
    path = warehouse / SERVER_FILE
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


# --- events ------------------------------------------------------------------------------------
class _Watcher(threading.Thread):
    """Polls what has no hook: creating jobs' phases, the pipeline's failure and recovery, sinks'
    errors; prints each change once."""

    def __init__(self, session: Any, console: Callable[[str], None], stop: threading.Event) -> None:
        super().__init__(name="sparkwave-serve-watch", daemon=True)
        self.session, self.console, self.stop = session, console, stop
        self.phases: dict[int, tuple[str, str | None]] = {}
        self.sinks: dict[str, str | None] = {}
        self.pipeline: str | None = None

    def run(self) -> None:
        from sparkwave.core.errors import OwnershipError
        from sparkwave.meta.progress import job_infos, sink_infos

        first = True
        while not self.stop.wait(0 if first else WATCH_EVERY_S):
            try:
                self._jobs(job_infos(self.session.catalog), first)
                self._sinks(sink_infos(self.session.catalog))
                self._pipeline(self.session.pipeline_error)
                self.session.check_ownership()
            except OwnershipError as e:  # another host's standby took over: this server must stop serving
                self.console(f"stopping: {e}")
                self.stop.set()
                return
            except Exception as e:  # the catalog closing under a stop, say: the next round tells
                if self.stop.is_set():
                    return
                logging.getLogger("sparkwave.serve").debug("watch: %s", e)
            first = False

    def _jobs(self, jobs: list[Any], first: bool) -> None:
        seen = set()
        for j in jobs:
            if j.kind in ("table", "source"):  # created with their statement
                continue
            seen.add(j.id)
            now = (j.phase, j.error)
            before = self.phases.get(j.id)
            self.phases[j.id] = now
            if before == now or (first and not j.creating):
                continue
            if before is None or before[0] != j.phase:
                self.console(f"job {j.id} ({j.kind} {j.name}): {j.phase}"
                             + (f" at epoch {j.merged_epoch}" if j.phase == "created" and j.merged_epoch else ""))
            if j.error and (before is None or before[1] != j.error):
                self.console(f"job {j.id} ({j.name}) failed, retrying: {j.error}")
        for gone in set(self.phases) - seen:
            del self.phases[gone]

    def _sinks(self, sinks: list[Any]) -> None:
        for s in sinks:
            before = self.sinks.get(s.name, None)
            if s.error != before:
                if s.error:
                    self.console(f"sink {s.name} failed, retrying: {s.error}")
                elif s.name in self.sinks:
                    self.console(f"sink {s.name} delivering again")
            self.sinks[s.name] = s.error

    def _pipeline(self, error: str | None) -> None:
        if error != self.pipeline:
            if error:
                self.console(f"epoch failed, retrying: {error}")
            else:
                self.console(f"pipeline recovered at epoch {self.session.committed_epoch}")
        self.pipeline = error


def _url_host(host: str) -> str:
    """The listen address as a browser would be pointed at it."""
    if host in ("", "0.0.0.0", "::", "*"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
