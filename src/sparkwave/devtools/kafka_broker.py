"""A local Kafka-protocol broker for the demo and the tests: `noida-db` (PyPI), one binary run as
a child process on a loopback port, its data in a folder of the caller's. No Docker, no system
install: it comes with sparkwave's dependencies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from sparkwave.core.errors import SparkwaveError

START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary() -> str:
    """The broker's own executable (the `noida-db` script only wraps it in a child process, which a
    stop would not reach)."""
    try:
        from importlib.resources import files

        binary = files("noida_db").joinpath("noida-db")
    except ModuleNotFoundError:
        raise SparkwaveError("the noida-db broker is not installed (pip install noida-db)") from None
    path = Path(str(binary))
    if not path.is_file():
        raise SparkwaveError(f"the noida-db package has no broker executable at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


class Broker:
    """`noida-db start --only kafka` on `port`, data in `data_dir`; stop() and start() again keep
    the data (a broker restart)."""

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Broker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        binary = _binary()
        log = open(self.data_dir / "broker.log", "ab")  # noqa: SIM115 (the child holds it)
        self.proc = subprocess.Popen(
            [binary, "start", "--only", "kafka", "--host", "127.0.0.1", "--kafka-port", str(self.port),
             "--data-dir", str(self.data_dir / "data")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SparkwaveError(f"the Kafka broker exited at start; see {self.data_dir / 'broker.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise SparkwaveError(f"the Kafka broker did not listen on {self.bootstrap} within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
