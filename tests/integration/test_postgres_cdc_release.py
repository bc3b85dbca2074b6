"""What DROP TABLE leaves upstream when it cannot drop it: a postgres-cdc table dropped while its
PostgreSQL is down keeps its replication slot (holding WAL) only until the warehouse opens again with
the server back; a recorded release whose slot a table still reads (a DROP that never committed) is
forgotten without dropping anything. The SIGKILL case: tests/crash/test_postgres_cdc_crash.py."""

from __future__ import annotations

import json

import psycopg
import pytest

import sparkwave
from sparkwave.connectors.postgres_cdc_release import KEY, hold
from tests.oracle import rows_of


@pytest.fixture
def own_postgres(tmp_path):
    """A server of this test's own: it is stopped, which the tests sharing `postgres` must not see."""
    from sparkwave.devtools.postgres_server import PostgresServer

    with PostgresServer(tmp_path / "pg" / "data") as server:
        yield server


def _upstream(pg) -> tuple[set[str], set[str]]:
    with psycopg.connect(pg.dsn(), autocommit=True) as c:
        return ({r[0] for r in c.execute("SELECT slot_name FROM pg_replication_slots")},
                {r[0] for r in c.execute("SELECT pubname FROM pg_publication")})


def _create(s, pg, name: str) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, x int)")
        c.execute(f"INSERT INTO {name} VALUES (1, 10)")
    opts = {"connector": "postgres-cdc", "hostname": pg.host, "port": str(pg.port), "username": pg.user,
            "password": pg.password, "database.name": pg.dbname, "table.name": name}
    with_ = ", ".join(f"{k} = {v!r}" for k, v in opts.items())
    s.sql(f"CREATE TABLE {name} (id int PRIMARY KEY, x int) WITH ({with_})")
    s.flush()


def test_a_slot_an_unreachable_upstream_kept_at_drop_is_dropped_at_the_next_open(spark, tmp_path, own_postgres):
    pg, wh = own_postgres, tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        _create(s, pg, "gone")
        assert "sparkwave_gone" in _upstream(pg)[0]
        pg.stop()
        s.sql("DROP TABLE gone")  # succeeds; the slot cannot be dropped now
        assert s.catalog.relation("gone") is None
        assert "gone" in json.loads(s.catalog.setting(KEY) or "{}"), "the release was not kept for later"
    pg.start()
    assert "sparkwave_gone" in _upstream(pg)[0]
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        slots, publications = _upstream(pg)
        assert "sparkwave_gone" not in slots and "sparkwave_gone" not in publications
        assert json.loads(s.catalog.setting(KEY) or "{}") == {}


def test_a_recorded_release_of_a_table_that_still_reads_its_slot_drops_nothing(spark, tmp_path, own_postgres):
    pg, wh = own_postgres, tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        _create(s, pg, "kept")
        hold(s.catalog, s.catalog.relation("kept"))  # as a DROP that failed, or was killed, before its commit
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        assert "sparkwave_kept" in _upstream(pg)[0], "the slot of a table that exists was dropped"
        assert json.loads(s.catalog.setting(KEY) or "{}") == {}
        with psycopg.connect(pg.dsn(), autocommit=True) as c:
            c.execute("INSERT INTO kept VALUES (2, 20)")
        s.flush()
        assert sorted(rows_of(s.table("kept"))) == [(1, 10), (2, 20)]
        s.sql("DROP TABLE kept")
        assert "sparkwave_kept" not in _upstream(pg)[0]
