"""`python -m sparkwave.devtools.spark_cluster -- COMMAND` (what `make test-cluster` runs) stopped by
SIGTERM, as a CI timeout stops it: COMMAND gets the signal and the cluster's daemons (sessions of their
own, which no signal to the wrapper's group reaches) are stopped, nothing left running (review-b)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _running_in(folder: Path) -> list[int]:
    """The processes whose working directory lies in `folder` (the master's and the workers')."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")).is_relative_to(folder):
                    out.append(int(entry.name))
            except OSError:  # gone, a zombie, or not ours
                pass
    return out


def test_the_wrapper_stopped_by_sigterm_stops_its_command_and_the_cluster(tmp_path):
    folder = tmp_path / "cluster"
    command = "import os, time; print('command', os.getpid(), flush=True); time.sleep(600)"
    wrapper = subprocess.Popen([sys.executable, "-m", "sparkwave.devtools.spark_cluster", "--workers", "1",
                                "--cores", "1", "--memory", "512m", "--folder", str(folder), "--", sys.executable,
                                "-c", command], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    daemons: list[int] = []
    pid = None
    try:
        assert wrapper.stdout is not None
        for line in wrapper.stdout:  # the cluster's line, then the command's
            if line.startswith("command "):
                pid = int(line.split()[1])
                break
        assert pid is not None, "the command did not start"
        daemons = _running_in(folder)
        assert len(daemons) >= 2, daemons  # the master and the worker
        wrapper.send_signal(signal.SIGTERM)
        assert wrapper.wait(180) == 128 + signal.SIGTERM  # the command's end, as a shell reports it
        assert not os.path.exists(f"/proc/{pid}/cwd"), "the command is still running"
        assert _running_in(folder) == [], "the cluster's daemons are still running"
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait()
        for p in [*_running_in(folder), *([pid] if pid else [])]:  # what a failure left: its group
            try:
                os.killpg(p, signal.SIGKILL) if p in daemons else os.kill(p, signal.SIGKILL)
            except OSError:
                pass
