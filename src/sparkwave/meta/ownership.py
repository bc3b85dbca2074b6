"""One owning session per warehouse.

With the catalog in the warehouse (SQLite), an exclusive `flock` on `OWNER`, which the kernel
releases when the owner dies, so a lock left by a killed process is simply taken over.

With a PostgreSQL catalog (`core/catalog/postgres.py`), owners may run on different hosts: the
owner holds a session-level advisory lock on a connection of its own, which the server releases
when that connection ends, and takes a new owner generation; its catalog commits only while the
generation is still its own (`Catalog.fenced_by`), so an owner that lost its lock to a takeover
cannot commit an epoch after it."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from sparkwave.core.catalog.location import postgres_of
from sparkwave.core.errors import OwnershipError


class Ownership:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.generation: int | None = None  # the owner generation a PostgreSQL catalog's commits are fenced by
        self._fd: int | None = None
        self._conn: Any = None  # the PostgreSQL connection holding the owner's lock
        self._dsn: str | None = None

    def acquire(self) -> None:
        if (dsn := postgres_of(self.path.parent)) is not None:
            self._acquire_postgres(dsn)
            return
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

    def _acquire_postgres(self, dsn: str) -> None:
        from sparkwave.core.catalog.postgres import describe, owner_of, take_ownership
        where = describe(dsn)
        taken = take_ownership(dsn, where)
        if taken is None:
            raise OwnershipError(f"warehouse {self.path.parent} is owned by {owner_of(dsn, where)} (its {where}); "
                                 "stop that owner first, or let it stop: another host takes over once it has")
        self._conn, self.generation = taken
        self._dsn = dsn

    def check(self) -> None:
        """Raise `OwnershipError` once another owner has taken the warehouse over (a PostgreSQL
        catalog's; a lock lost to a server restart is taken again if no one took over meanwhile)."""
        if self._conn is None or self._dsn is None or self.generation is None:
            return
        from sparkwave.core.catalog.postgres import describe, still_owner
        self._conn = still_owner(self._conn, self._dsn, describe(self._dsn), self.generation)

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the server releases the advisory lock with the session
            self._conn = None
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def wait_until_unowned(path: Path) -> None:
    """Block until the warehouse has no owner (`sparkwave serve --standby`), without polling: the
    wait is on the owner's lock itself. Several standbys may wake at once: one wins the ownership."""
    if (dsn := postgres_of(path.parent)) is None:
        raise OwnershipError(f"warehouse {path.parent} keeps its catalog in catalog.db: its owner is a process on "
                             "this host, and a standby needs a catalog in PostgreSQL (--catalog)")
    from sparkwave.core.catalog.postgres import describe, wait_for_owner
    wait_for_owner(dsn, describe(dsn))


def describe_owner(path: Path) -> str:
    if (dsn := postgres_of(path.parent)) is not None:
        from sparkwave.core.catalog.postgres import describe, owner_of
        return owner_of(dsn, describe(dsn))
    try:
        info = json.loads(path.read_text() or "{}")
        return f"process {info.get('pid')} on {info.get('host')} (since {info.get('since')})"
    except (OSError, ValueError):
        return "another process"


def is_owned(path: Path) -> bool:
    """Whether a live process holds the warehouse (used by read-only tools)."""
    if (dsn := postgres_of(path.parent)) is not None:
        from sparkwave.core.catalog.postgres import describe, is_locked
        return is_locked(dsn, describe(dsn))
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
