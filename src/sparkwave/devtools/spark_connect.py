"""A local Spark Connect server for the tests and the benchmarks: PySpark's own `spark-connect` jar
run by its `spark-submit` (no system install) as a child process group, gRPC on a loopback port,
its logs and scratch folders in a folder of the caller's. `stop()` ends the whole group, also when
the caller failed; a sparkwave process killed meanwhile leaves the server running, as a real one would."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from sparkwave.core.errors import SparkwaveError
from sparkwave.core.spark import REQUIRED_CONF
from sparkwave.devtools.kafka_broker import free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 180.0  # a JVM's start on a loaded 2-core machine
STOP_TIMEOUT_S = 30.0


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class ConnectServer:
    """`SparkConnectServer` on `master` (`local[2]` by default), gRPC on 127.0.0.1:`port`; `url` is
    what `SparkSession.builder.remote` takes. `conf`: more server settings (`spark.*`)."""

    def __init__(self, folder: str | os.PathLike[str], *, master: str = "local[2]", port: int | None = None,
                 conf: dict[str, str] | None = None) -> None:
        self.folder = Path(folder)
        self.master = master
        self.port = port or free_port()
        self.conf = conf or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.folder / "connect-server.log"

    def command(self) -> list[str]:
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.local.dir": str(self.folder / "tmp"),
            "spark.sql.warehouse.dir": str(self.folder / "spark-warehouse"),
            "spark.sql.shuffle.partitions": os.environ.get("SPARKWAVE_SHUFFLE_PARTITIONS", "2"),
            **{k: v for k, v in REQUIRED_CONF.items() if k.startswith("spark.")},
            **self.conf,
        }
        cmd = [str(_spark_home() / "bin" / "spark-submit"), "--master", self.master, "--class", SERVER_CLASS,
               "--name", "sparkwave-connect-test"]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        return cmd

    def start(self) -> ConnectServer:
        (self.folder / "tmp").mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        for var in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_CONNECT_MODE"):
            env.pop(var, None)
        # The server's Python workers (UDFs, mapInArrow, Python data sources) import sparkwave.
        env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, SPARK_HOME=str(_spark_home()))
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child holds it)
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=self.folder, start_new_session=True)
        log.close()
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SparkwaveError(f"the Spark Connect server exited at start (code {self.proc.returncode}); "
                                     f"see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise SparkwaveError(f"the Spark Connect server did not listen on {self.url} within "
                             f"{START_TIMEOUT_S:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        """SIGTERM to the server's process group (spark-submit and its JVM), SIGKILL if it lingers."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
        try:  # the JVM's children (Python workers) in the same group, if any outlived it
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """`python -m sparkwave.devtools.spark_connect FOLDER`: a server in the foreground until Ctrl-C or
    SIGTERM, which stop it too."""
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "connect-server")

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)  # also when started in the background, where SIGINT is ignored
    with ConnectServer(folder) as server:
        print(server.url, flush=True)
        try:
            assert server.proc is not None
            server.proc.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
