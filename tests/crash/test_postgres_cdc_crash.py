"""Crash of a postgres-cdc table: SIGKILL while the CDC backfill reads its chunks (a chunk read, its
epoch not yet planned), mid-execute (the planned chunk epoch is replayed: its key range read again),
and between an epoch's catalog commit and the slot's advance (the slot is behind the committed
position). Restart: the table catches up and equals the upstream table, nothing lost or doubled, and
its MVs equal DuckDB over it. And SIGKILL between DROP TABLE's catalog commit and the slot's drop: the
slot (holding the upstream's WAL) is dropped when the warehouse opens again."""

from __future__ import annotations

import json

import pytest

import sparkwave
from sparkwave.connectors.postgres_cdc import BACKFILLED, LSN, ROWS_READ
from sparkwave.connectors.postgres_cdc_release import KEY
from sparkwave.core.catalog import Catalog
from tests.crash.test_crash import run_child
from tests.kafka_util import check_epoch
from tests.oracle import multiset, rows_of
from tests.pgcdc_util import DUCK_DDL, MVS, UPSTREAM_DDL, Upstream

# A point, and the upstream key's type: a numeric key's order is PostgreSQL's, its position the last key read.
POINTS = [("cdc_after_chunk_read:2", "int"), ("cdc_before_slot_advance:3", "int"), ("mid_execute:4", "numeric"),
          *(pytest.param(*p, marks=pytest.mark.chaos) for p in  # `make chaos` runs these
            [("mid_execute:4", "int"), ("after_catalog_commit:3", "int"), ("cdc_after_chunk_read:2", "numeric")])]


def _slot_lsn(up: Upstream, slot: str) -> int:
    return int(up.conn.execute("SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots "
                               "WHERE slot_name = %s", (slot,)).fetchone()[0])


@pytest.mark.parametrize("crash_at,key", POINTS)
def test_a_cdc_table_survives_a_sigkill(spark, tmp_path, postgres, monkeypatch, crash_at, key):
    db = slot = f"crash_{crash_at.split(':')[0]}_{key}"
    postgres.create_database(db)
    up = Upstream(postgres.dsn(db), ddl=UPSTREAM_DDL.replace("id int", "id numeric(12,0)") if key == "numeric"
                  else UPSTREAM_DDL)
    up.insert(150)
    monkeypatch.setenv("SPARKWAVE_PGCDC", json.dumps({"host": postgres.host, "port": postgres.port,
                                                      "user": postgres.user, "password": postgres.password,
                                                      "database": db, "slot": slot, "key": key}))
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, crash_at, module="tests.pgcdc_crash_child")
    acked = progress.read_text().split() if progress.exists() else []
    assert acked, "the crash came before any upstream change: the point was not exercised"
    up = Upstream(postgres.dsn(db), ddl=None, seed=7)  # the table as the child left it
    if crash_at.startswith("mid_execute"):
        catalog = Catalog(wh / "catalog.db", read_only=True)
        try:
            pending = catalog.uncommitted_plan()
        finally:
            catalog.close()
        lo, hi = pending.plan["sources"]["t"].get(ROWS_READ, (0, 0)) if pending else (0, 0)
        assert hi > lo, f"the crash was not in a backfill epoch: {pending}"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        if crash_at.startswith("cdc_before_slot_advance"):
            assert _slot_lsn(up, slot) < s.catalog.source_offsets("t")[LSN], "the slot was not behind the commit"
        for _ in range(8):
            s.flush()
            if BACKFILLED in s.catalog.source_offsets("t"):
                break
        up.churn(3)  # after the restart too
        s.flush()
        want = list(up.state().values())
        assert multiset(rows_of(s.table("t"))) == multiset(want)
        mvs = [m for m in MVS if s.catalog.relation(m) is not None]
        duck = DUCK_DDL.replace("id INTEGER", "id DECIMAL(12,0)") if key == "numeric" else DUCK_DDL
        check_epoch(s, s.committed_epoch, {"t": (duck, want)}, {m: MVS[m].format(t="t") for m in mvs})
        assert _slot_lsn(up, slot) <= s.catalog.source_offsets("t")[LSN]
        s.sql("DROP MATERIALIZED VIEW even")
        if "per_name" in mvs:
            s.sql("DROP MATERIALIZED VIEW per_name")
        s.sql("DROP TABLE t")


def _upstream_objects(up: Upstream) -> tuple[set[str], set[str]]:
    slots = {r[0] for r in up.conn.execute("SELECT slot_name FROM pg_replication_slots")}
    return slots, {r[0] for r in up.conn.execute("SELECT pubname FROM pg_publication")}


def test_a_slot_a_drop_left_when_killed_is_dropped_when_the_warehouse_opens(spark, tmp_path, postgres, monkeypatch):
    db = slot = "crash_drop"
    postgres.create_database(db)
    up = Upstream(postgres.dsn(db))
    up.insert(60)
    monkeypatch.setenv("SPARKWAVE_PGCDC", json.dumps({"host": postgres.host, "port": postgres.port,
                                                      "user": postgres.user, "password": postgres.password,
                                                      "database": db, "slot": slot, "epochs": 2, "drop": True}))
    wh, progress = tmp_path / "wh", tmp_path / "progress"
    run_child(wh, progress, "drop_before_release:1", module="tests.pgcdc_crash_child")
    slots, publications = _upstream_objects(up)
    assert slot in slots and "sparkwave_t" in publications, "the crash did not come between the DROP and the release"
    catalog = Catalog(wh / "catalog.db", read_only=True)
    try:
        assert catalog.relation("t") is None, "the DROP's catalog transaction did not commit"
    finally:
        catalog.close()
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        slots, publications = _upstream_objects(up)
        assert slot not in slots, "the slot the DROP left still holds the upstream's WAL"
        assert "sparkwave_t" not in publications
        assert json.loads(s.catalog.setting(KEY) or "{}") == {}, "the record outlived the release"
