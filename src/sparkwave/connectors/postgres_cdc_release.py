"""What a dropped table's connector holds outside (a postgres-cdc table's replication slot, which keeps
the upstream's WAL while it exists), given back even when DROP TABLE is interrupted.

DROP records the table's connector (options, schema, the offsets its CREATE recorded) in the catalog's
settings before its catalog transaction (`hold`), releases after it and then forgets the record
(`release_held`); the session releases what is still recorded when it opens (a crash between the two,
or an upstream unreachable at DROP), and each open after until it succeeds. A record whose table
still exists (the DROP failed or never committed), or whose slot a table of the warehouse reads now
(a table of the same name created again), is forgotten without releasing anything: that slot is
someone's. Kept in `settings` (no catalog
table of its own): one JSON value, like the relations' own definitions, connection options
included."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from sparkwave.connectors import make_connector
from sparkwave.core.catalog import Catalog, Relation
from sparkwave.core.schema import Schema

log = logging.getLogger("sparkwave.postgres_cdc")
KEY = "connectors.to_release"
_lock = threading.Lock()  # the record is one value: its read-modify-writes one at a time


def _held(catalog: Catalog) -> dict[str, dict[str, Any]]:
    return dict(json.loads(catalog.setting(KEY) or "{}"))


def _save(catalog: Catalog, held: dict[str, dict[str, Any]]) -> None:
    catalog.set_setting(KEY, json.dumps(held, sort_keys=True))


def _exclusive(name: str, record: dict[str, Any]) -> set[str]:
    try:
        conn = make_connector(name, Schema.from_json(record["schema"]), record["options"])
        return set(conn.exclusive())
    except Exception:  # options an older release wrote that no longer parse: nothing to compare
        return set()


def hold(catalog: Catalog, rel: Relation | None) -> None:
    """Records what `rel`'s connector holds outside, before the DROP's catalog transaction (a
    connector naming nothing exclusive holds nothing)."""
    if rel is None or not rel.spec.connector:
        return
    record = {"schema": rel.schema.to_json(), "options": dict(rel.spec.connector),
              "startup": dict(rel.spec.startup_offsets)}
    if _exclusive(rel.name, record):
        with _lock:
            _save(catalog, {**_held(catalog), rel.name: record})


def release_held(catalog: Catalog, only: str | None = None) -> None:
    """Releases what is recorded (`only`: that table's), unless its table exists or another table
    reads it now; forgets each record released. An outside system that cannot be reached leaves its
    record for the next open, with a warning."""
    held = _held(catalog)
    if only is not None:
        held = {only: held[only]} if only in held else {}
    if not held:
        return
    read_now = set().union(*(_exclusive(r.name, {"schema": r.schema.to_json(), "options": r.spec.connector})
                             for r in catalog.relations(creating=True) if r.spec.connector))
    done = []
    for name, record in held.items():
        if (mine := _exclusive(name, record)) and not mine & read_now:
            try:
                conn = make_connector(name, Schema.from_json(record["schema"]), record["options"])
                try:
                    conn.release(record["startup"])
                finally:
                    conn.close()
            except Exception as e:
                log.warning("dropped table %s: could not release what its connector holds outside (retried when "
                            "the warehouse opens again): %s", name, e)
                continue
        done.append(name)
    if done:
        with _lock:
            _save(catalog, {n: r for n, r in _held(catalog).items() if n not in done})
