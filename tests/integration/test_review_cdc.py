"""Review (review-b) of the postgres-cdc connector: the scenarios its findings named (a guard reached
past, a table silently parting from upstream, a source stopped for good), fixed by pgcdc3 and
asserted here, and two reconciliation cases the first tests did not cover."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest

from sparkwave.connectors.postgres_cdc import BACKFILL, BACKFILLED
from sparkwave.core.errors import SqlError
from tests.oracle import multiset, rows_of
from tests.pgcdc_util import DECLARED, Upstream, expected, offsets_by_epoch, options


def _db(postgres, name: str) -> str:
    postgres.create_database(name)
    return name


def test_a_host_list_ending_in_a_socket_still_needs_the_password(session, postgres):
    """review-b finding 1: libpq falls back from an unreachable host to the next one, here a socket
    that trusts the peer; the password is required of every host of the list, so a wrong one fails."""
    db = _db(postgres, "review_cdc_hosts")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE h (id int PRIMARY KEY, x int)")
    socket_dir = str(postgres._current_socket_dir)
    opts = options(postgres, db, "h").replace(f"hostname = '{postgres.host}'",
                                              f"hostname = 'nonexistent.invalid,{socket_dir}'")
    opts = opts.replace(f"password = '{postgres.password}'", "password = 'not-the-password'")
    with pytest.raises(SqlError, match="h"):
        session.sql(f"CREATE TABLE h (id int PRIMARY KEY, x int) WITH ({opts})")
    assert not conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'sparkwave_h'").fetchone()


def _exists(conn, what: str, name: str) -> bool:
    query = {"slot": "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
             "publication": "SELECT 1 FROM pg_publication WHERE pubname = %s"}[what]
    return conn.execute(query, (name,)).fetchone() is not None


def test_a_slot_another_table_reads_is_refused_and_drop_keeps_what_create_did_not_make(session, postgres):
    """review-b finding 2: two tables reading one slot would each advance it past the other's changes,
    so the second CREATE is refused, naming the first; DROP drops the slot and publication its CREATE
    made, never a slot or publication the user named that existed before."""
    db = _db(postgres, "review_cdc_shared")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE ua (id int PRIMARY KEY)")
    conn.execute("CREATE TABLE ub (id int PRIMARY KEY)")
    conn.execute("SELECT pg_create_logical_replication_slot('review_users', 'pgoutput')")
    conn.execute("CREATE PUBLICATION review_users_pub FOR TABLE ub")
    session.sql(f"CREATE TABLE a (id int PRIMARY KEY) WITH "
                f"({options(postgres, db, 'ua', **{'slot.name': 'review_shared', 'snapshot': 'false'})})")
    try:
        with pytest.raises(SqlError, match="replication slot 'review_shared'.* is read by table 'a'"):
            session.sql(f"CREATE TABLE b (id int PRIMARY KEY) WITH "
                        f"({options(postgres, db, 'ub', **{'slot.name': 'review_shared', 'snapshot': 'false'})})")
        named = {"slot.name": "review_users", "publication.name": "review_users_pub"}
        session.sql(f"CREATE TABLE c (id int PRIMARY KEY) WITH ({options(postgres, db, 'ub', **named)})")
        conn.execute("INSERT INTO ub VALUES (1)")
        session.flush()
        session.flush()
        assert multiset(rows_of(session.table("c"))) == multiset([(1,)])
        session.sql("DROP TABLE c")
        assert _exists(conn, "slot", "review_users") and _exists(conn, "publication", "review_users_pub")
    finally:
        session.sql("DROP TABLE a")
    assert not _exists(conn, "slot", "review_shared") and not _exists(conn, "publication", "sparkwave_a")
    conn.execute("SELECT pg_drop_replication_slot('review_users')")


@pytest.mark.parametrize("publication, why", [
    ("FOR TABLE ui WITH (publish = 'insert')", "does not publish update, delete, truncate"),
    ("FOR TABLE ui WHERE (id > 1)", "row filter"),
    ("FOR TABLE ui (id)", "column list"),
    ("FOR TABLE ui WITH (publish_generated_columns = stored)", "publishes generated columns"),  # PostgreSQL 18
])
def test_a_publication_that_does_not_send_every_change_of_the_table_is_refused(session, postgres, publication, why):
    """review-b finding 3: the backfill reads every row, so a publication that leaves out updates,
    deletes, truncates, rows or columns would let the table silently part from upstream."""
    db = _db(postgres, f"review_cdc_publish_{why.split()[-1]}_{len(why)}")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE ui (id int PRIMARY KEY, x int)")
    conn.execute(f"CREATE PUBLICATION review_pub {publication}")
    with pytest.raises(SqlError, match=f"publication 'review_pub' cannot feed .*{why}"):
        session.sql(f"CREATE TABLE ui (id int PRIMARY KEY, x int) WITH "
                    f"({options(postgres, db, 'ui', **{'publication.name': 'review_pub'})})")
    assert not _exists(conn, "slot", "sparkwave_ui") and _exists(conn, "publication", "review_pub")


def test_keys_moving_down_past_the_backfill_position_reconcile_at_every_epoch(session, postgres):
    """review-b: the chunk test's churn only inserts above every key and moves keys up; here rows are
    inserted below the backfill's first key and keys move down across its position (a change whose
    old key is ahead of the position and whose new key is behind it), at every epoch checked against
    the upstream table as of the epoch's position, as test_postgres_cdc's oracle does."""
    db = _db(postgres, "review_cdc_down")
    up = Upstream(postgres.dsn(db))
    up.next_id = 100
    up.insert(100)  # ids 100..199
    session.sql(f"CREATE TABLE t ({DECLARED}) WITH ({options(postgres, db, 't', **{'snapshot.batch_size': '30'})})")
    try:
        down = iter(range(99, 0, -1))  # ids below every upstream key, never reused
        for epoch in range(6):
            top = max(up.state())
            middle = sorted(up.state())[len(up.state()) // 2]
            up.txn(("INSERT INTO {t} VALUES (%s, 'low', 1, 1.00, '2026-01-01 00:00:00+00', true)", (next(down),)))
            up.txn(("UPDATE {t} SET id = %s, v = v + 1 WHERE id = %s", (next(down), top)))  # ahead -> behind
            up.txn(("UPDATE {t} SET id = %s WHERE id = %s", (next(down), middle)),  # moved down, then changed
                   ("UPDATE {t} SET name = %s WHERE id = %s", (f"moved{epoch}", middle)))
            session.flush()
        for _ in range(3):
            session.flush()
        assert BACKFILLED in session.catalog.source_offsets("t")
        by_epoch = offsets_by_epoch(session, "t")
        assert len({o.get(BACKFILL) for o in by_epoch.values()}) >= 4, "the backfill did not take several chunks"
        for epoch, offsets in by_epoch.items():
            want = expected(up, offsets)
            got = rows_of(session.table("t", as_of=epoch))
            assert multiset(got) == multiset(want), f"epoch {epoch} ({offsets}): missing " \
                f"{multiset(want) - multiset(got)}, extra {multiset(got) - multiset(want)}"
        assert multiset(rows_of(session.table("t"))) == multiset(up.state().values())
    finally:
        session.sql("DROP TABLE t")


def test_the_backfill_reconciles_with_transactions_committing_while_epochs_are_planned(session, postgres):
    """review-b: test_postgres_cdc's oracle changes the upstream only between epochs; here a writer
    commits transactions while the chunks are read and the epochs planned. A transaction whose commit
    may lie on either side of an epoch's position (committed between the positions read before and
    after it) may be in or out; every other must be as the position says."""
    import random
    import threading

    db = _db(postgres, "review_cdc_race")
    up = Upstream(postgres.dsn(db))
    up.insert(150)
    session.sql(f"CREATE TABLE t ({DECLARED}) WITH ({options(postgres, db, 't', **{'snapshot.batch_size': '25'})})")
    writer = Upstream(postgres.dsn(db), ddl=None, seed=11)
    spans: list[tuple[int, int, dict]] = [(-1, -1, writer.state())]  # (before, after, the state after)
    stop = threading.Event()

    def write() -> None:
        rnd = random.Random(5)
        while not stop.is_set():
            keys = sorted(writer.state())
            before = writer.lsn()
            with writer.conn.transaction():
                for _ in range(rnd.randint(1, 3)):
                    k = rnd.choice(keys)
                    if rnd.random() < 0.6:
                        writer.conn.execute("UPDATE t SET v = v + 1, name = %s WHERE id = %s",
                                            (f"w{rnd.randint(0, 4)}", k))
                    elif rnd.random() < 0.5:
                        writer.conn.execute("DELETE FROM t WHERE id = %s", (k,))
                    else:
                        writer.conn.execute("INSERT INTO t SELECT %s, 'new', 0, 0, now(), false "
                                            "WHERE NOT EXISTS (SELECT FROM t WHERE id = %s)", (k + 1000, k + 1000))
            spans.append((before, writer.lsn(), writer.state()))

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        for _ in range(10):
            session.flush()
    finally:
        stop.set()
        thread.join(timeout=60)
    try:
        for _ in range(3):
            session.flush()
        assert BACKFILLED in session.catalog.source_offsets("t")
        by_epoch = offsets_by_epoch(session, "t")
        assert len({o.get(BACKFILL) for o in by_epoch.values()}) >= 4, "the backfill did not take several chunks"
        assert len(spans) > 20, "the writer committed too little to race with the epochs"
        for epoch, offsets in by_epoch.items():
            lsn, done, pos = offsets["lsn"], BACKFILLED in offsets, offsets.get(BACKFILL, 0)
            surely = max(i for i, (_, after, _) in enumerate(spans) if after <= lsn)
            maybe = [i for i, (before, after, _) in enumerate(spans) if before < lsn < after]
            got = multiset(rows_of(session.table("t", as_of=epoch)))
            wants = [multiset(r for k, r in spans[i][2].items() if done or k < pos) for i in [surely, *maybe]]
            assert got in wants, f"epoch {epoch} ({offsets}): the table is no upstream state near its position"
        assert multiset(rows_of(session.table("t"))) == multiset(writer.state().values())
    finally:
        session.sql("DROP TABLE t")


def test_a_generated_column_upstream_is_left_out_or_computed_here(session, postgres):
    """review-b finding 4: pgoutput does not send a generated column, so declaring it as a plain
    column is refused (saying what to do); left out, or declared as a generated column here, the
    backfill and the stream agree with upstream."""
    db = _db(postgres, "review_cdc_generated")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE g (id int PRIMARY KEY, x int, y int GENERATED ALWAYS AS (x * 2) STORED)")
    conn.execute("INSERT INTO g (id, x) VALUES (1, 1), (3, 3)")
    with pytest.raises(SqlError, match="column 'y' is a generated column upstream.*leave it out.*y int AS"):
        session.sql(f"CREATE TABLE g (id int PRIMARY KEY, x int, y int) WITH ({options(postgres, db, 'g')})")
    session.sql(f"CREATE TABLE g1 (id int PRIMARY KEY, x int) WITH ({options(postgres, db, 'g')})")
    session.sql(f"CREATE TABLE g2 (id int PRIMARY KEY, x int, y int AS x * 2) WITH ({options(postgres, db, 'g')})")
    try:
        session.flush()
        conn.execute("INSERT INTO g (id, x) VALUES (2, 5)")
        conn.execute("UPDATE g SET x = 7 WHERE id = 1")
        conn.execute("DELETE FROM g WHERE id = 3")
        for _ in range(2):
            session.flush()
        for t in ("g1", "g2"):
            assert session.rt.source_status(t) is None, session.rt.source_status(t)
        assert multiset(rows_of(session.table("g1"))) == multiset(conn.execute("SELECT id, x FROM g").fetchall())
        assert multiset(rows_of(session.table("g2"))) == multiset(conn.execute("SELECT id, x, y FROM g").fetchall())
    finally:
        session.sql("DROP TABLE g1")
        session.sql("DROP TABLE g2")


def test_enum_and_domain_columns_upstream_are_read_as_varchar_and_their_base_type(session, postgres):
    """review-b finding 5: an enum's values are its labels (varchar), a domain's are its base type's,
    in the backfill and the stream; a declared type the base type does not fit names the right one."""
    db = _db(postgres, "review_cdc_enum")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
    conn.execute("CREATE DOMAIN posint AS int4 CHECK (VALUE > 0)")
    conn.execute("CREATE DOMAIN price AS numeric(10,2)")
    conn.execute("CREATE DOMAIN cost AS price")  # a domain over a domain
    conn.execute("CREATE TABLE en (id int PRIMARY KEY, m mood, p posint, c cost)")
    conn.execute("INSERT INTO en VALUES (1, 'ok', 5, 1.25)")
    with pytest.raises(SqlError, match=r"column 'p' is int4 upstream, declared varchar \(declare int\)"):
        session.sql(f"CREATE TABLE en (id int PRIMARY KEY, m varchar, p varchar, c decimal(10,2)) "
                    f"WITH ({options(postgres, db, 'en')})")
    session.sql(f"CREATE TABLE en (id int PRIMARY KEY, m varchar, p int, c decimal(10,2)) "
                f"WITH ({options(postgres, db, 'en')})")
    try:
        session.flush()
        conn.execute("INSERT INTO en VALUES (2, 'sad', 7, 3.50)")
        conn.execute("UPDATE en SET m = 'sad', c = 9.99 WHERE id = 1")
        session.flush()
        session.flush()
        assert session.rt.source_status("en") is None, session.rt.source_status("en")
        assert multiset(rows_of(session.table("en"))) == multiset(
            [(1, "sad", 5, Decimal("9.99")), (2, "sad", 7, Decimal("3.50"))])
    finally:
        session.sql("DROP TABLE en")


def test_char_boolean_and_inet_values_read_the_same_by_the_backfill_and_the_stream(session, postgres):
    """pgcdc2's suspicion: a `::text` cast trims char(n)'s padding and spells an inet with its /32,
    pgoutput sends the output form; the backfill now reads the output form too."""
    db = _db(postgres, "review_cdc_char")
    conn = psycopg.connect(postgres.dsn(db), autocommit=True)
    conn.execute("CREATE TABLE ch (id int PRIMARY KEY, c char(4), b boolean, n inet)")
    conn.execute("INSERT INTO ch VALUES (1, 'ab', true, '1.2.3.4'), (2, NULL, false, '10.0.0.0/8')")
    session.sql(f"CREATE TABLE ch (id int PRIMARY KEY, c varchar, b boolean, n varchar) "
                f"WITH ({options(postgres, db, 'ch')})")
    try:
        session.flush()
        conn.execute("INSERT INTO ch VALUES (3, 'ab', true, '1.2.3.4'), (4, NULL, false, '10.0.0.0/8')")
        session.flush()
        session.flush()
        want = [(1, "ab  ", True, "1.2.3.4"), (2, None, False, "10.0.0.0/8")]
        assert multiset(rows_of(session.table("ch"))) == multiset(want + [(r[0] + 2, *r[1:]) for r in want])
    finally:
        session.sql("DROP TABLE ch")
