"""Where a warehouse's catalog lives: `catalog.db` in the warehouse (SQLite), or the PostgreSQL
database its `CATALOG` file names.

The file records the connection string without its password, so every later open follows it
(a process given no catalog opens the one the warehouse uses, never a new SQLite catalog beside
it, whose recovery would take the warehouse's files for strays). The password is never written:
it stays in the memory of the process it was given to (`remember`), or comes from libpq's own
`PGPASSWORD` / `~/.pgpass`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sparkwave.core.catalog.backend import Backend, SqliteBackend
from sparkwave.core.errors import WarehouseError

CATALOG_FILE = "CATALOG"
_PREFIXES = ("postgresql://", "postgres://")
_full: dict[str, str] = {}  # redacted connection string -> as given to this process (this memory only)


def is_postgres(catalog: str) -> bool:
    """Whether `catalog` names a PostgreSQL database: a URL, or a libpq `key=value` string."""
    return catalog.startswith(_PREFIXES) or "=" in catalog


def remember(dsn: str) -> str:
    """Keep `dsn` (with its password) for this process's connections; returns it redacted."""
    from sparkwave.core.catalog.postgres import redacted
    safe = redacted(dsn)
    _full[safe] = dsn
    return safe


def recorded(root: Path) -> str | None:
    """The redacted connection string of the warehouse's PostgreSQL catalog, or None (SQLite)."""
    path = root / CATALOG_FILE
    try:
        found = json.loads(path.read_text())["postgresql"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise WarehouseError(f"{path}, which names the warehouse's catalog, cannot be read ({e}); sparkwave "
                             "opens nothing it cannot recognise") from None
    if not isinstance(found, str):
        raise WarehouseError(f"{path} does not name a PostgreSQL catalog (key 'postgresql')")
    return found


def record(root: Path, dsn: str) -> None:
    """Write the `CATALOG` file (atomically; the connection string without its password)."""
    safe = remember(dsn)
    tmp = root / f"{CATALOG_FILE}.tmp"
    tmp.write_text(json.dumps({"postgresql": safe}) + "\n")
    with open(tmp) as f:
        os.fsync(f.fileno())
    os.replace(tmp, root / CATALOG_FILE)


def backend_for(path: Path) -> Backend:
    """The back end of the catalog whose SQLite file would be `path` (`<warehouse>/catalog.db`)."""
    dsn = postgres_of(path.parent)
    if dsn is None:
        return SqliteBackend(path)
    from sparkwave.core.catalog.postgres import PostgresBackend
    return PostgresBackend(dsn)


def postgres_of(root: Path) -> str | None:
    """The connection string of the warehouse's PostgreSQL catalog (with its password when this
    process was given one), or None for a SQLite catalog."""
    safe = recorded(root)
    return None if safe is None else _full.get(safe, safe)
