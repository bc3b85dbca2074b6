"""`sparkwave serve` as a process for tests: its console lines read by a thread and waited for by
their text. Every one started is killed after the test that started it (`tests/conftest.py`), so a
failure leaves none running."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
STARTED: list[subprocess.Popen] = []


class ServeProcess:
    def __init__(self, warehouse: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparkwave.cli.main", "serve", "--warehouse", str(warehouse), "--port", "0",
             "--http-port", "0", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **(env or {})})
        STARTED.append(self.proc)
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self.port: int | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 240) -> str:
        """The next console line holding `text`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} from sparkwave serve in {timeout} s:\n{''.join(self.output)}") \
                    from None
            if text in line:
                return line

    def listening(self, timeout: float = 240) -> int:
        """The PostgreSQL port, once the server says it listens."""
        if self.port is None:
            line = self.wait_for("listening on", timeout)
            self.port = int(re.search(r"listening on \S+:(\d+)", line).group(1))  # type: ignore[union-attr]
        return self.port

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.listening()} user=tester dbname=dev"

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True)

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM, and the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"sparkwave serve did not stop within {timeout} s:\n{''.join(self.output)}") \
                from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)


def kill_started() -> None:
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
