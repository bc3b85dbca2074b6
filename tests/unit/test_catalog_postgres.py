"""The catalog on both back ends: every operation gives the same answers on SQLite and on
PostgreSQL (a real server from `sparkwave.devtools.postgres_server`); a PostgreSQL catalog is
recorded in the warehouse without its password and followed by later opens; one owner at a time,
and an owner that lost its lock to a takeover commits nothing. No Spark session."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import psycopg
import pytest

from sparkwave.core.catalog import Catalog, Relation, location
from sparkwave.core.catalog.postgres import translate
from sparkwave.core.epoch import Lag
from sparkwave.core.errors import CatalogError, OwnershipError, WarehouseError
from sparkwave.core.schema import Schema
from sparkwave.meta.ownership import Ownership, describe_owner, is_owned
from sparkwave.storage.warehouse import Warehouse
from tests.unit.test_catalog_migrations import M_SCHEMA, T_SCHEMA, read_back

_names = itertools.count()


@pytest.fixture
def pg_dsn(postgres) -> str:
    """A new empty database of the shared server."""
    return postgres.create_database(f"cat{next(_names)}")


@pytest.fixture(params=["sqlite", "postgresql"])
def warehouse(request, tmp_path) -> Warehouse:
    wh = Warehouse(tmp_path / "wh")
    wh.open(request.getfixturevalue("pg_dsn") if request.param == "postgresql" else None)
    return wh


def _relation(name: str, kind: str, schema: dict, epoch: int, definition: dict, state: str = "created") -> Relation:
    return Relation(name, kind, Schema.from_json(schema), definition, epoch, state)


def scenario(catalog: Catalog, root: Path) -> None:
    """Most of the catalog's writes, in the order a pipeline makes them."""
    with catalog.transaction() as db:
        catalog.add_relation(db, _relation("t", "table", T_SCHEMA, 0, {"sql": "CREATE TABLE t", "upstreams": []}))
        catalog.set_source_offsets(db, "t", {"0": 5, "1": 7})
    catalog.folder_pending("m")
    with catalog.transaction() as db:
        job = catalog.add_relation(db, _relation("m", "mv", M_SCHEMA, 1, {"upstreams": ["t"]}, "creating"),
                                   "snapshot", "t")
        catalog.add_relation(db, _relation("m.a1", "state", M_SCHEMA, 1, {"owner": "m"}, "creating"))
        catalog.add_pin("t", 1, f"job:{job}", db)
        catalog.record_source_snapshot(db, "t", 1, {"0": [0, 5]})
    catalog.stage_dml("t", [(str(root / "staging" / "dml-0"), 3), (str(root / "staging" / "dml-1"), 2)])
    first = catalog.pending_dml()[0].id
    catalog.persist_plan(2, 1, {"now": 1_700_000_000_000_000, "sources": {"t": {"0": [5, 9]}}}, [first])
    catalog.commit_epoch(2, [("t", str(root / "tables/t/log/e2.parquet"), 4, -1)], {"t": {"0": 9}}, 4, 1.5,
                         errors=[("t", "0", 6, "bad", "raw"), ("t", "1", 2, "worse", None)], bad_counts={"t": 2},
                         watermarks=[("t", "", 100), ("t", "0", 100)], late={"t": 3},
                         judged=[("t", "0", 5, 9, 100)])
    catalog.commit_epoch(2, [], {}, 0, 0.1, bad_counts={"t": 1}, late={"t": 1})  # counts add up
    catalog.set_job_counts(job, {"t": [1, 2, 3]})
    catalog.start_chunk(job, 0, 128, 3)
    catalog.start_chunk(job, 0, 256, 6)  # a retry: attempts 2
    catalog.finish_chunk(job, 0, 256, 6, {"m": [str(root / "tables/m/part-0.parquet")]}, Lag(1, 10))
    catalog.start_log_store(job, 2, [("m", 0, 6, [str(root / "tables/m/base-0.parquet")])], Lag(0, 0), 1.0)
    catalog.log_store_checkpoint(job, f"job:{job}", [("m", 2, str(root / "tables/m/log/e2.parquet"), 1, -1)],
                                 2, 1, 1, Lag(0, 0), 2.0)
    catalog.merge_job(job, f"job:{job}", "m", 2)
    catalog.delta_recorded([("t", [2], 0)])
    catalog.set_setting("barrier_interval_ms", "250")
    assert catalog.next_counter("dml_batch", 2) == 0 and catalog.next_counter("dml_batch", 1) == 2
    request = catalog.add_request(job, "rate_limit", 10)
    catalog.finish_request(request, "applied")
    catalog.add_request(job, "cancel", None)
    catalog.persist_plan(3, 2, {"now": 1_700_000_001_000_000}, [])
    catalog.retire("t", 1, 2)
    assert catalog.prune_history() == 0
    catalog.forget_orphans()


def test_every_operation_reads_back_the_same_on_both_back_ends(tmp_path, pg_dsn) -> None:
    answers = []
    for name, dsn in (("sqlite", None), ("postgresql", pg_dsn)):
        wh = Warehouse(tmp_path / name)
        wh.open(dsn)
        catalog = Catalog(wh.catalog_path, create=False)
        try:
            scenario(catalog, wh.root)
            answer = read_back(catalog)
            answer["extra"] = [catalog.epoch_now(2), catalog.watermark("t", 2), catalog.split_watermarks("t", 3),
                               catalog.judged_ranges("t"), catalog.late_rows(), catalog.source_errors("t", 1),
                               catalog.delta_retires(), catalog.committed_by(1e12), catalog.version]
            answers.append(json.loads(json.dumps(answer).replace(str(wh.root), "@WAREHOUSE@")))
        finally:
            catalog.close()
    assert answers[0] == answers[1]
    assert answers[0]["extra"][:3] == [1_700_000_000_000_000, 100, {"0": 100}]


def test_a_relation_that_exists_is_refused_by_name(warehouse) -> None:
    catalog = Catalog(warehouse.catalog_path, create=False)
    try:
        rel = _relation("t", "table", T_SCHEMA, 0, {})
        with catalog.transaction() as db:
            catalog.add_relation(db, rel)
        with pytest.raises(CatalogError, match="relation 't' already exists"), catalog.transaction() as db:
            catalog.add_relation(db, rel)
        assert [r.name for r in catalog.relations()] == ["t"]  # the failed transaction left the catalog as it was
    finally:
        catalog.close()


def test_the_mark_moves_with_another_connections_commit(warehouse) -> None:
    catalog = Catalog(warehouse.catalog_path, create=False)
    other = Catalog(warehouse.catalog_path, create=False)
    try:
        mark = catalog.changes()
        assert catalog.setting("x") is None and catalog.changes() == mark
        other.set_setting("x", "1")
        assert catalog.changes() != mark and catalog.setting("x") == "1"
    finally:
        other.close()
        catalog.close()


def test_the_warehouse_records_its_catalog_without_the_password_and_follows_it(tmp_path, postgres, pg_dsn,
                                                                              monkeypatch) -> None:
    wh = Warehouse(tmp_path / "wh")
    wh.open(pg_dsn)
    written = (wh.root / location.CATALOG_FILE).read_text()
    assert "password" not in written  # (the test server's password is its user's name)
    assert not wh.catalog_path.exists()  # no SQLite catalog beside it
    monkeypatch.setattr(location, "_full", {})  # a new process: only libpq's environment knows the password
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    Warehouse(wh.root).open()  # followed
    catalog = Catalog(wh.catalog_path, create=False)
    try:
        assert catalog.where.startswith("PostgreSQL catalog cat") and catalog.committed_epoch() == 0
    finally:
        catalog.close()
    parts = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    Warehouse(wh.root).open(f"postgresql://{parts['user']}:{parts['password']}@{parts['host']}:{parts['port']}/"
                            f"{parts['dbname']}")  # the same database in URL form is the same catalog
    other = postgres.create_database(f"cat{next(_names)}")
    with pytest.raises(WarehouseError, match="keeps its catalog in PostgreSQL") as e:
        Warehouse(wh.root).open(other)
    assert "password" not in str(e.value)


def test_a_catalog_that_cannot_move_or_be_shared_is_refused(tmp_path, postgres, pg_dsn) -> None:
    local = Warehouse(tmp_path / "local")
    local.open()
    with pytest.raises(WarehouseError, match="keeps its catalog in .*catalog.db"):
        Warehouse(local.root).open(pg_dsn)
    Warehouse(tmp_path / "first").open(pg_dsn)
    with pytest.raises(WarehouseError, match="already holds tables") as e:
        Warehouse(tmp_path / "second").open(pg_dsn)  # another warehouse on the same database
    assert not (tmp_path / "second" / location.CATALOG_FILE).exists()
    with pytest.raises(WarehouseError, match="not a PostgreSQL connection string") as e:
        Warehouse(tmp_path / "third").open("mysql-password-hunter2")
    assert "hunter2" not in str(e.value)
    with pytest.raises(CatalogError, match="cannot connect to the PostgreSQL catalog") as e:
        Warehouse(tmp_path / "fourth").open(postgres.dsn(f"cat{next(_names)}", password="wrong-pw"))
    assert "wrong-pw" not in str(e.value)


def _first_owner(tmp_path, pg_dsn) -> tuple[Warehouse, Ownership, Catalog]:
    """A warehouse on the PostgreSQL catalog, its owner, and the owner's fenced catalog."""
    wh = Warehouse(tmp_path / "wh")
    wh.open(pg_dsn)
    first = Ownership(wh.owner_path)
    first.acquire()
    old = Catalog(wh.catalog_path, create=False)
    old.fenced_by(first.generation)
    return wh, first, old


def _kill_connection(postgres, conn: psycopg.Connection) -> None:
    """What the server does when the owner's host goes away: the lock's session ends."""
    with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))


def test_one_owner_at_a_time_and_a_fenced_owner_commits_nothing(tmp_path, postgres, pg_dsn) -> None:
    wh, first, old = _first_owner(tmp_path, pg_dsn)
    second = Ownership(wh.owner_path)
    try:
        old.persist_plan(1, 0, {}, [])
        with pytest.raises(OwnershipError, match=r"is owned by process \d+ on .* generation 1"):
            second.acquire()
        assert is_owned(wh.owner_path) and "generation 1" in describe_owner(wh.owner_path)

        _kill_connection(postgres, first._conn)  # A is alive but has lost its lock
        second.acquire()  # B takes over
        assert second.generation == 2
        with pytest.raises(OwnershipError, match="generation 1.* no longer owns .*generation 2"):
            old.commit_epoch(1, [], {}, 0, 1.0)
        new = Catalog(wh.catalog_path, create=False)
        new.fenced_by(second.generation)
        try:
            assert new.committed_epoch() == 0 and new.uncommitted_plan() is not None  # A's commit is not there
            new.commit_epoch(1, [], {}, 0, 1.0)  # B replays it
            with pytest.raises(OwnershipError, match="no longer owns"):
                old.uncommitted_plan()  # A, fenced out, reads nothing more either: it cannot replay or delete
        finally:
            new.close()
    finally:
        old.close()
        first.release()
        second.release()
    assert not is_owned(wh.owner_path)


def test_a_commit_in_flight_at_the_takeover_is_ordered_before_it(tmp_path, postgres, pg_dsn) -> None:
    """The takeover's generation bump waits for the row lock an open write transaction holds."""
    wh, first, old = _first_owner(tmp_path, pg_dsn)
    try:
        with old.transaction() as db:
            db.execute("INSERT INTO settings VALUES (?, ?)", ("k", "v"))
            _kill_connection(postgres, first._conn)
            with psycopg.connect(pg_dsn, autocommit=True) as probe:
                probe.execute("SET lock_timeout = '200ms'")
                with pytest.raises(psycopg.errors.LockNotAvailable):  # a takeover waits for this commit
                    probe.execute("UPDATE sparkwave_owner SET generation = generation + 1")
        assert old.setting("k") == "v"
    finally:
        old.close()
        first.release()


@pytest.mark.parametrize(("sqlite", "postgresql"), [
    ("INSERT OR REPLACE INTO settings VALUES (?, ?)",
     'INSERT INTO settings VALUES (%s, %s) ON CONFLICT ("key") DO UPDATE SET "value" = excluded."value"'),
    ("INSERT OR IGNORE INTO pending_folders VALUES (?)",
     "INSERT INTO pending_folders VALUES (%s) ON CONFLICT DO NOTHING"),
    ("INSERT INTO late_rows VALUES (?, ?) ON CONFLICT (relation) DO UPDATE SET count = count + excluded.count",
     "INSERT INTO late_rows VALUES (%s, %s) ON CONFLICT (relation) DO UPDATE SET count = late_rows.count + "
     "excluded.count"),
    ("SELECT name FROM relations WHERE json_extract(definition, '$.owner') = ? AND key LIKE 'a%'",
     "SELECT name FROM relations WHERE (definition::jsonb ->> 'owner') = %s AND key LIKE 'a%%'"),
    ("DELETE FROM settings WHERE CAST(value AS INTEGER) <= ?", "DELETE FROM settings WHERE sparkwave_int(value) <= %s"),
    ("INSERT INTO requests (job) VALUES (?)", "INSERT INTO requests (job) VALUES (%s) RETURNING id"),
    ("CREATE TABLE x (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL, n INTEGER)",
     "CREATE TABLE x (id BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION, n BIGINT)"),
])
def test_statements_translate_to_postgresql(sqlite: str, postgresql: str) -> None:
    tables = {"settings": (["key", "value"], ["key"])}
    assert translate(sqlite, tables.__getitem__)[0] == postgresql


def test_a_server_restart_loses_the_transaction_in_flight_only_and_the_fence_still_holds(tmp_path, postgres,
                                                                                         pg_dsn) -> None:
    """A restart ends every session: the catalog reconnects for its next read or transaction (never
    inside one), the owner's lock is gone, so the next owner to ask takes over and fences it out."""
    wh, first, old = _first_owner(tmp_path, pg_dsn)
    second = Ownership(wh.owner_path)
    try:
        old.persist_plan(1, 0, {}, [])
        with pytest.raises(CatalogError, match="PostgreSQL catalog .* failed"), old.transaction() as db:
            db.execute("INSERT INTO settings VALUES (?, ?)", ("lost", "1"))
            postgres.restart()
            db.execute("INSERT INTO settings VALUES (?, ?)", ("lost", "2"))  # the connection is gone
        assert old.setting("lost") is None and old.uncommitted_plan() is not None  # reconnected; nothing half-done
        old.commit_epoch(1, [], {}, 0, 1.0)  # no one took over: it still owns the generation
        assert old.committed_epoch() == 1 and not is_owned(wh.owner_path)  # ... but holds no lock any more
        second.acquire()
        with pytest.raises(OwnershipError, match="no longer owns"):
            old.persist_plan(2, 1, {}, [])
    finally:
        old.close()
        first.release()
        second.release()


def test_read_only_tools_and_control_requests_work_beside_a_fenced_owner(tmp_path, pg_dsn) -> None:
    """`sparkwave jobs` reads beside the owner; a control request (another process's ALTER) is a write
    that needs no ownership, so the owner's fence does not refuse it."""
    wh, owner, catalog = _first_owner(tmp_path, pg_dsn)
    reader = Catalog(wh.catalog_path, read_only=True)
    sender = Catalog(wh.catalog_path, create=False)
    try:
        with catalog.transaction() as db:
            job = catalog.add_relation(db, _relation("t", "table", T_SCHEMA, 0, {}))
        request = sender.add_request(job, "rate_limit", 5)
        assert [r.id for r in catalog.pending_requests()] == [request]
        catalog.finish_request(request, "applied")
        assert reader.request_outcome(request) == "applied" and [j.relation for j in reader.jobs()] == ["t"]
    finally:
        for c in (sender, reader, catalog):
            c.close()
        owner.release()


def test_an_owner_checks_it_still_owns_and_takes_its_lock_again_after_a_restart(tmp_path, postgres, pg_dsn) -> None:
    wh = Warehouse(tmp_path / "wh")
    wh.open(pg_dsn)
    first, second = Ownership(wh.owner_path), Ownership(wh.owner_path)
    first.acquire()
    try:
        first.check()  # healthy: nothing to do
        postgres.restart()  # every session ends, the lock's too
        assert not is_owned(wh.owner_path)
        first.check()  # no one took over: the lock is taken again, the generation kept
        assert is_owned(wh.owner_path) and first.generation == 1
        with pytest.raises(OwnershipError, match="is owned by"):
            second.acquire()
        _kill_connection(postgres, first._conn)
        second.acquire()
        with pytest.raises(OwnershipError, match=r"generation 1\) no longer owns .* generation 2"):
            first.check()
    finally:
        first.release()
        second.release()


def test_a_deposed_owner_paused_inside_a_write_transaction_does_not_hold_up_the_takeover(tmp_path, postgres,
                                                                                        pg_dsn) -> None:
    """The old owner stopped (SIGSTOP, a long pause) with a write transaction open: its host still
    answers keepalives, so its session lives and holds the owner row. The takeover ends that session
    once its bump has waited a lock timeout; the old transaction commits nothing."""
    import threading

    wh, first, old = _first_owner(tmp_path, pg_dsn)
    second = Ownership(wh.owner_path)
    failed: list[BaseException] = []
    try:
        with pytest.raises(CatalogError, match="terminating connection"):  # its session ended under it
            with old.transaction() as db:
                db.execute("INSERT INTO settings VALUES (?, ?)", ("paused", "v"))
                _kill_connection(postgres, first._conn)  # the lock's session ends; this transaction stays open

                def take_over() -> None:
                    try:
                        second.acquire()
                    except BaseException as e:
                        failed.append(e)

                taker = threading.Thread(target=take_over)
                taker.start()
                taker.join(120)  # a guard against a hang, not a timing: the takeover ends this session
                assert not taker.is_alive(), "the takeover waits for the paused owner's transaction"
        assert not failed and second.generation == 2
        new = Catalog(wh.catalog_path, create=False)
        new.fenced_by(second.generation)
        try:
            assert new.setting("paused") is None
        finally:
            new.close()
    finally:
        old.close()
        first.release()
        second.release()
