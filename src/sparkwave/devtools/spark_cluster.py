"""A Spark standalone cluster on this machine for the tests and the benchmarks: a master and its
workers from the pip-installed PySpark (`bin/spark-class ...deploy.master.Master` / `...worker.Worker`,
no system install), every process bound to 127.0.0.1, their work, scratch and log folders in a folder
of the caller's. Each worker is a process group of its own (the worker JVM, the executors it launches,
their Python workers), so `kill_worker` takes a whole machine away at once, as a crash would.

`python -m sparkwave.devtools.spark_cluster [--workers N] [--cores C] [--memory M] -- COMMAND...`
runs COMMAND with the cluster's master in `SPARKWAVE_TEST_MASTER` and `SPARKWAVE_SPARK_MASTER` and
stops the cluster afterwards, whatever happened (`make test-cluster`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkwave.core.errors import SparkwaveError
from sparkwave.devtools.kafka_broker import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 180.0  # JVM starts on a loaded 2-core machine
STOP_TIMEOUT_S = 20.0
# The master declares a worker lost after this long without a heartbeat (Spark's default, 60 s, would
# keep a killed worker's cores on the books for a minute).
WORKER_TIMEOUT_S = 10


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class Worker:
    index: int
    port: int
    folder: Path
    proc: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class StandaloneCluster:
    """A master on 127.0.0.1 and `workers` workers of `cores` cores and `memory` each. `start()`
    returns once every worker has registered with the master (read from the master's JSON status)."""

    def __init__(self, folder: str | os.PathLike[str], *, workers: int = 2, cores: int = 1,
                 memory: str = "1g") -> None:
        self.folder = Path(folder)
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.port, self.web_port = free_port(), free_port()
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[Worker] = []

    @property
    def url(self) -> str:
        """What `SparkSession.builder.master` and `sparkwave serve --spark-master` take."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}/json/"

    def app_conf(self, executors: int | None = None) -> dict[str, str]:
        """Settings for an application (a driver) on this cluster: one single-core executor on each of
        `executors` workers (all by default), the driver on 127.0.0.1, and no job before they have all
        registered, so every job may run on any of them."""
        n = executors or self.n_workers
        return {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.cores": "1",
            "spark.cores.max": str(n),
            "spark.executor.memory": os.environ.get("SPARKWAVE_EXECUTOR_MEMORY", "1g"),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
        }

    def submit_args(self, executors: int | None = None) -> str:
        """`app_conf` as `PYSPARK_SUBMIT_ARGS`, for a driver that builds its own session (a child process)."""
        return " ".join(f"--conf {k}={v}" for k, v in self.app_conf(executors).items()) + " pyspark-shell"

    # --- start and stop ------------------------------------------------------------------------
    def start(self) -> StandaloneCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self.master = self._spawn("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                                                 "--webui-port", str(self.web_port)], self.folder / "master")
            self._wait(lambda s: s.get("status") == "ALIVE", "the master to be ALIVE", self.master, "the master")
            workers = [self._spawn_worker() for _ in range(self.n_workers)]  # their JVMs start side by side
            for w in workers:
                self._wait_registered(w)
        except BaseException:
            self.stop()
            raise
        return self

    def add_worker(self) -> Worker:
        """One more worker, returned once the master counts it alive."""
        worker = self._spawn_worker()
        self._wait_registered(worker)
        return worker

    def _spawn_worker(self) -> Worker:
        i, port = len(self.workers), free_port()
        folder = self.folder / f"worker{i}"
        proc = self._spawn(f"worker{i}", [WORKER_CLASS, "--host", "127.0.0.1", "--port", str(port),
                                          "--webui-port", str(free_port()), "--cores", str(self.cores),
                                          "--memory", self.memory, "--work-dir", str(folder / "work"),
                                          self.url], folder)
        worker = Worker(i, port, folder, proc)
        self.workers.append(worker)
        return worker

    def _wait_registered(self, worker: Worker) -> None:
        self._wait(lambda s: any(w["port"] == worker.port and w["state"] == "ALIVE" for w in s.get("workers", [])),
                   f"worker {worker.index} ({worker.address}) to register", worker.proc, f"worker {worker.index}")

    def _spawn(self, name: str, args: list[str], folder: Path) -> subprocess.Popen[bytes]:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "local").mkdir(exist_ok=True)
        env = dict(os.environ)
        env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(folder / "local"),
                   # executors' Python workers run the driver's interpreter (with sparkwave installed)
                   PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
                   # no REST submission server (a fixed port, 6066, two clusters would share)
                   SPARK_MASTER_OPTS=f"-Dspark.master.rest.enabled=false -Dspark.worker.timeout={WORKER_TIMEOUT_S}",
                   SPARK_WORKER_OPTS=f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}")
        log = open(folder / f"{name}.log", "ab")  # noqa: SIM115 (the child holds it)
        try:
            return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=folder,
                                    start_new_session=True)
        finally:
            log.close()

    def _wait(self, ready: Any, what: str, proc: subprocess.Popen[bytes], name: str) -> dict[str, Any]:
        """Poll the master's status until `ready(status)`; `proc` (or the master) exiting meanwhile is an error."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for p, who in ((self.master, "the master"), (proc, name)):
                if p is not None and p.poll() is not None:
                    raise SparkwaveError(f"{who} of the Spark cluster exited (code {p.returncode}); see its log "
                                         f"under {self.folder}")
            try:
                status = self.status()
            except (OSError, ValueError):
                status = {}
            if ready(status):
                return status
            time.sleep(0.2)
        raise SparkwaveError(f"timed out after {START_TIMEOUT_S:.0f} s waiting for {what}; see the logs under "
                             f"{self.folder}")

    def status(self) -> dict[str, Any]:
        """The master's JSON status: workers (state, cores used), applications."""
        with urllib.request.urlopen(self.status_url, timeout=5) as r:
            return dict(json.load(r))

    def alive_workers(self) -> int:
        return int(self.status().get("aliveworkers", 0))

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index` with its executors and their Python workers (its process group)."""
        worker = self.workers[index]
        _killpg(worker.proc, signal.SIGKILL)
        worker.proc.wait()

    def stop(self) -> None:
        """Workers first (their executors with them), then the master; SIGTERM, then SIGKILL if one lingers."""
        for w in reversed(self.workers):
            _stop(w.proc)
        if self.master is not None:
            _stop(self.master)
            self.master = None

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _killpg(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        _killpg(proc, signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
    _killpg(proc, signal.SIGKILL)  # the group's other processes (executors, Python workers), if any outlived it
    proc.wait()


def _exit_on(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkwave.devtools.spark_cluster",
                                     description="Run COMMAND with a Spark standalone cluster on 127.0.0.1.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2, help="per worker (default 2: two applications at once)")
    parser.add_argument("--memory", default="2g", help="per worker")
    parser.add_argument("--folder", default=None, help="default: a new temporary folder, removed afterwards")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a COMMAND after --")
    import shutil
    import tempfile

    folder = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="sparkwave-cluster-"))
    cluster = StandaloneCluster(folder, workers=args.workers, cores=args.cores, memory=args.memory)
    # The daemons are sessions of their own: a SIGTERM (a CI timeout) or SIGHUP that ended this process
    # where it stands would leave them running. Before COMMAND runs it stops the start; then it goes to COMMAND,
    # whose exit ends the wrapper as usual.
    before = {sig: signal.signal(sig, _exit_on) for sig in (signal.SIGTERM, signal.SIGHUP)}
    proc: subprocess.Popen[bytes] | None = None
    try:
        cluster.start()
        print(f"spark standalone cluster at {cluster.url} ({args.workers} workers, status {cluster.status_url})",
              flush=True)
        env = dict(os.environ, SPARKWAVE_TEST_MASTER=cluster.url, SPARKWAVE_SPARK_MASTER=cluster.url,
                   SPARK_LOCAL_IP="127.0.0.1", PYSPARK_SUBMIT_ARGS=cluster.submit_args())
        proc = subprocess.Popen(command, env=env)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda signum, _: proc.send_signal(signum) if proc is not None else None)
        code = proc.wait()
        return 128 - code if code < 0 else code  # killed by a signal: the shell's code for it
    finally:
        if proc is not None and proc.poll() is None:  # a signal before its forwarding, or an interrupt
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        cluster.stop()
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)
        for sig, handler in before.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
