"""One owning session per warehouse: an exclusive `flock` on `OWNER`, which the kernel releases
when the owner dies, so a lock left by a killed process is simply taken over."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from sparkwave.core.errors import OwnershipError


class Ownership:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OwnershipError(f"warehouse {self.path.parent} is owned by {describe_owner(self.path)}; "
                                 "close that session first (read-only commands such as "
                                 "`sparkwave jobs` work beside it)") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def describe_owner(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
        return f"process {info.get('pid')} on {info.get('host')} (since {info.get('since')})"
    except (OSError, ValueError):
        return "another process"


def is_owned(path: Path) -> bool:
    """Whether a live process holds the warehouse (used by read-only tools)."""
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
