"""Named crash points for crash tests: `SPARKWAVE_CRASH_AT=name[:n]` SIGKILLs the process the
n-th time (default first) execution reaches `crash_point(name)`; with `SPARKWAVE_CRASH_SIGNAL=STOP`
it stops there instead (SIGSTOP: a takeover test resumes the old owner after a new one took over)."""

from __future__ import annotations

import os
import signal

_hits: dict[str, int] = {}


def crash_point(name: str) -> None:
    spec = os.environ.get("SPARKWAVE_CRASH_AT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == int(nth or 1):  # once: a stopped process resumed runs on
        os.kill(os.getpid(), signal.SIGSTOP if os.environ.get("SPARKWAVE_CRASH_SIGNAL") == "STOP" else signal.SIGKILL)
