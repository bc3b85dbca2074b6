"""The CDC backfill's chunks beyond a single key read by one connection: a composite integer key read
in chunks by row-value comparison, and a single integer key read in parts by several connections at
one exported snapshot, parts cut by key value where the keys' density changes. At every committed
epoch the table equals the upstream table as of the epoch's stream position, restricted to the keys
the backfill had passed, and an MV over it equals DuckDB."""

from __future__ import annotations

import uuid

import psycopg

from sparkwave.connectors import postgres_cdc_backfill
from sparkwave.connectors.postgres_cdc import BACKFILL, BACKFILLED
from tests.integration.test_postgres_cdc import _check_every_epoch, _db
from tests.kafka_util import check_epoch
from tests.oracle import multiset, rows_of
from tests.pgcdc_util import MVS, Upstream, expected, offsets_by_epoch, options

COMPOSITE_DDL = "CREATE TABLE {name} (a int, b bigint, v int, PRIMARY KEY (a, b))"
COMPOSITE_DUCK = "a INTEGER, b BIGINT, v INTEGER"
COMPOSITE_MV = "SELECT a, count(*) AS n, sum(v) AS total FROM {t} GROUP BY a"


def _churn(up: Upstream, n: int) -> None:
    """`n` transactions of inserts, updates, key changes and deletes of a composite-keyed table."""
    r = up.rnd
    for _ in range(n):
        keys, statements = sorted(up.state()), []
        for _ in range(r.randint(1, 4)):
            what = r.random()
            if what < 0.3 or not keys:
                statements.append(("INSERT INTO {t} VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                                   (r.randint(-2, 7), r.randint(-5, 80), r.randint(0, 99))))
            elif what < 0.7:
                statements.append(("UPDATE {t} SET v = v + 1 WHERE a = %s AND b = %s", r.choice(keys)))
            elif what < 0.8:
                a, b = r.choice(keys)
                statements.append(("UPDATE {t} SET a = %s, b = %s WHERE a = %s AND b = %s AND NOT EXISTS "
                                   "(SELECT 1 FROM {t} WHERE a = %s AND b = %s)",
                                   (a + 3, b + 100, a, b, a + 3, b + 100)))
            else:
                statements.append(("DELETE FROM {t} WHERE a = %s AND b = %s", r.choice(keys)))
        up.txn(*statements)


def _check_composite(s, up: Upstream) -> None:
    for epoch, offsets in offsets_by_epoch(s, "c").items():
        want = expected(up, offsets)
        got = rows_of(s.table("c", as_of=epoch))
        assert multiset(got) == multiset(want), f"c at epoch {epoch} ({offsets}): missing " \
            f"{multiset(want) - multiset(got)}, extra {multiset(got) - multiset(want)}"
        if epoch >= s.catalog.relation("per_a").created_epoch:
            check_epoch(s, epoch, {"c": (COMPOSITE_DUCK, want)}, {"per_a": COMPOSITE_MV.format(t="c")})


def test_a_composite_key_is_backfilled_in_chunks_and_reconciles_at_every_epoch(session, postgres):
    db = _db(postgres, "cdc_composite")
    up = Upstream(postgres.dsn(db), name="c", ddl=COMPOSITE_DDL, seed=4949, columns="a, b, v", key_width=2)
    up.txn(("INSERT INTO {t} SELECT a, b, (a * 7 + b) %% 13 FROM generate_series(1, 5) a, "
            "generate_series(1, 40) b", ()))
    session.sql(f"CREATE TABLE c (a int, b bigint, v int, PRIMARY KEY (a, b)) WITH "
                f"({options(postgres, db, 'c', **{'snapshot.batch_size': '30'})})")
    session.sql(f"CREATE MATERIALIZED VIEW per_a AS {COMPOSITE_MV.format(t='c')}")
    for _ in range(12):
        _churn(up, 4)
        session.flush()
        if BACKFILLED in session.catalog.source_offsets("c"):
            break
    assert BACKFILLED in session.catalog.source_offsets("c"), "the backfill did not finish in 12 epochs"
    _churn(up, 5)
    session.flush()
    _check_composite(session, up)
    positions = {(o[BACKFILL], o[f"{BACKFILL}.1"]) for o in offsets_by_epoch(session, "c").values()}
    assert len(positions) >= 6, f"the backfill did not take several chunks: {positions}"
    assert any(b != 1 for _, b in positions), "no chunk ended inside a value of the key's first column"
    assert multiset(rows_of(session.table("c"))) == multiset(up.state().values())
    session.sql("DROP MATERIALIZED VIEW per_a")
    session.sql("DROP TABLE c")


UUID_DDL = "CREATE TABLE {name} (id uuid PRIMARY KEY, g int, v int)"
UUID_DUCK = "id VARCHAR, g INTEGER, v INTEGER"
UUID_MV = "SELECT g, count(*) AS n, sum(v) AS total, min(id) AS first FROM {t} GROUP BY g"


def _uuid_churn(up: Upstream, n: int) -> None:
    """`n` transactions of inserts of random uuids, updates, key changes and deletes."""
    r = up.rnd
    for _ in range(n):
        keys, statements = sorted(up.state()), []
        for _ in range(r.randint(1, 4)):
            what = r.random()
            if what < 0.35 or not keys:
                statements.append(("INSERT INTO {t} VALUES (%s, %s, %s)",
                                   (str(uuid.UUID(int=r.getrandbits(128))), r.randint(0, 5), r.randint(0, 99))))
            elif what < 0.7:
                statements.append(("UPDATE {t} SET v = v + 1 WHERE id = %s", (r.choice(keys),)))
            elif what < 0.8:
                k = keys.pop(r.randrange(len(keys)))
                statements.append(("UPDATE {t} SET id = %s WHERE id = %s", (str(uuid.UUID(int=r.getrandbits(128))), k)))
            else:
                statements.append(("DELETE FROM {t} WHERE id = %s", (keys.pop(r.randrange(len(keys))),)))
        up.txn(*statements)


def test_a_uuid_key_is_backfilled_in_chunks_and_reconciles_at_every_epoch(session, postgres):
    """A uuid primary key (declared varchar) is read in chunks in its byte order while the table
    changes: at every epoch the table equals upstream restricted to the keys passed, and an MV
    equals DuckDB."""
    from sparkwave.connectors.postgres_cdc_backfill import uuid_parts

    db = _db(postgres, "cdc_uuid")
    up = Upstream(postgres.dsn(db), name="u", ddl=UUID_DDL, seed=4950, columns="id::text, g, v")
    rnd = up.rnd
    up.txn(*[("INSERT INTO {t} VALUES (%s, %s, %s)", (str(uuid.UUID(int=rnd.getrandbits(128))), i % 6, i))
             for i in range(150)])
    session.sql(f"CREATE TABLE u (id varchar, g int, v int, PRIMARY KEY (id)) WITH "
                f"({options(postgres, db, 'u', **{'snapshot.batch_size': '20'})})")
    session.sql(f"CREATE MATERIALIZED VIEW per_g AS {UUID_MV.format(t='u')}")
    for _ in range(15):
        _uuid_churn(up, 3)
        session.flush()
        if BACKFILLED in session.catalog.source_offsets("u"):
            break
    assert BACKFILLED in session.catalog.source_offsets("u"), "the backfill did not finish in 15 epochs"
    _uuid_churn(up, 4)
    session.flush()
    for epoch, offsets in offsets_by_epoch(session, "u").items():
        want = expected(up, offsets, uuid_parts)
        got = rows_of(session.table("u", as_of=epoch))
        assert multiset(got) == multiset(want), f"u at epoch {epoch} ({offsets}): missing " \
            f"{multiset(want) - multiset(got)}, extra {multiset(got) - multiset(want)}"
        if epoch >= session.catalog.relation("per_g").created_epoch:
            check_epoch(session, epoch, {"u": (UUID_DUCK, want)}, {"per_g": UUID_MV.format(t="u")})
    positions = {(o[BACKFILL], o[f"{BACKFILL}.1"]) for o in offsets_by_epoch(session, "u").values()}
    assert len(positions) >= 6, f"the backfill did not take several chunks: {positions}"
    assert multiset(rows_of(session.table("u"))) == multiset(up.state().values())
    session.sql("DROP MATERIALIZED VIEW per_g")
    session.sql("DROP TABLE u")


def test_parts_read_by_several_connections_at_one_snapshot_reconcile_at_every_epoch(session, postgres,
                                                                                     monkeypatch):
    monkeypatch.setattr(postgres_cdc_backfill, "PART_ROWS", 5)  # parts of a few rows: small chunks go parallel
    db = _db(postgres, "cdc_parallel")
    up = Upstream(postgres.dsn(db))
    for i in range(40):  # sparse keys (1, 6, 11, ...), then dense ones: the parts' first cut overshoots
        up.txn(("INSERT INTO {t} VALUES (%s, %s, %s, %s, %s, %s)", up.row(1 + 5 * i)))
    up.next_id = 201
    up.insert(200)
    session.sql(f"CREATE TABLE t (id int PRIMARY KEY, name varchar, v bigint, price decimal(10,2), ts timestamptz, "
                f"ok boolean) WITH ({options(postgres, db, 't', **{'snapshot.batch_size': '40'})})")
    session.sql(f"CREATE MATERIALIZED VIEW per_name AS {MVS['per_name'].format(t='t')}")
    up.churn(4)
    session.flush()
    with psycopg.connect(postgres.dsn(db), autocommit=True) as c:
        readers = c.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sparkwave-cdc' "
                            "AND datname = %s", (db,)).fetchone()[0]
    assert readers >= 3, f"the chunk was not read by several connections ({readers})"
    for _ in range(12):
        up.churn(4)
        session.flush()
        if BACKFILLED in session.catalog.source_offsets("t"):
            break
    assert BACKFILLED in session.catalog.source_offsets("t"), "the backfill did not finish in 12 epochs"
    up.churn(5)
    session.flush()
    _check_every_epoch(session, up, "t", ["per_name"])
    reads = [o["backfill_rows"] for o in offsets_by_epoch(session, "t").values()]
    assert len(set(reads)) >= 6, f"the backfill did not take several chunks: {reads}"
    assert multiset(rows_of(session.table("t"))) == multiset(up.state().values())
    session.sql("DROP MATERIALIZED VIEW per_name")
    session.sql("DROP TABLE t")


def test_a_chunk_whose_snapshot_misses_a_transaction_of_the_range_before_is_not_taken(postgres):
    """A transaction whose commit lies before the epoch's start but which the chunk's snapshot does
    not see yet (a commit record written, the commit not yet visible: a synchronous standby's wait;
    here a transaction still open stands for it) would be missing from the chunk's rows."""
    from psycopg import sql

    from sparkwave.connectors.postgres_cdc_backfill import ChunkReader, read_chunk
    from sparkwave.core.schema import parse_type

    db = _db(postgres, "cdc_visible")
    with psycopg.connect(postgres.dsn(db), autocommit=True) as conn, psycopg.connect(postgres.dsn(db)) as other:
        conn.execute("CREATE TABLE vis (id bigint PRIMARY KEY, x int)")
        conn.execute("INSERT INTO vis SELECT i, i FROM generate_series(1, 10) i")
        other.execute("INSERT INTO vis VALUES (11, 11)")
        running = int(other.execute("SELECT txid_current()").fetchone()[0])
        reader = ChunkReader(sql.Identifier("public", "vis"), [("id", parse_type("bigint")), ("x", parse_type("int"))],
                             ["id"], 1, lambda: psycopg.connect(postgres.dsn(db), autocommit=True))
        assert read_chunk(conn, reader, (1,), None, 100, [running]) is None
        finished = int(conn.execute("SELECT txid_current()").fetchone()[0])  # committed after `running` began
        assert read_chunk(conn, reader, (1,), None, 100, [finished + 5]) is None, "a transaction not begun yet"
        chunk = read_chunk(conn, reader, (1,), None, 100, [finished])
        assert chunk is not None and chunk.rows.num_rows == 10 and chunk.done
        other.commit()
        chunk = read_chunk(conn, reader, (1,), None, 100, [running])
        assert chunk is not None and chunk.rows.num_rows == 11
        assert conn.execute("SELECT 1").fetchone() == (1,), "the connection is left outside a transaction"
