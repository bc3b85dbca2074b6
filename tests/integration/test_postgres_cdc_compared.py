"""The CDC backfill of a key only PostgreSQL can order (text in its collation, numeric, an enum, a
composite of them), without Spark: the chunks read every key once in PostgreSQL's order; a restarted
process replays each epoch's chunk; SHOW JOBS shows the last key read; and the stream's changes
during the backfill apply exactly to the keys already read, so that at every epoch the rows equal the
upstream table restricted to them. Real embedded PostgreSQL."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import psycopg
import pytest

from sparkwave.connectors import make_connector
from sparkwave.connectors.postgres_cdc import BACKFILLED, LSN
from sparkwave.connectors.postgres_cdc_position import text_position
from sparkwave.core.catalog import Relation
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.frontend import overview
from sparkwave.meta.cdc_progress import _at_key
from tests.kafka_util import check_epoch
from tests.oracle import multiset, rows_of
from tests.pgcdc_util import Upstream, offsets_by_epoch, options

UPSERT, KEY_DELETE = 4, 5
TEXTS = ["", " ", "A", "B", "Z", "a", "a'b", 'a"b', "a,b", "a\nb", "a\\b", "b", "zoë", "é", "😀", "NULL", "k" * 1500]
MOODS = ["sad", "ok", "happy", "ecstatic", "zen", "angry"]  # an enum's order: declared, not alphabetical
NUMBERS = ["-10", "-1.5", "-1", "0", "0.25", "2", "9", "10", "100.75"]  # '10.00' < '9.00' as text
CASES = {  # upstream columns, declared columns, key, the keys inserted
    "text": ('k text COLLATE "C", v int', "k varchar, v int", ["k"], [(t,) for t in TEXTS]),
    "enum": ("k mood, v int", "k varchar, v int", ["k"], [(m,) for m in MOODS]),
    "numeric": ("k numeric(12,2), v int", "k decimal(12,2), v int", ["k"], [(n,) for n in NUMBERS]),
    "char": ("k char(4), v int", "k varchar, v int", ["k"], [(t,) for t in ["b", "a", "ab", "a b", "abcd", ""]]),
    "bits": ("k bit(3), g int, v int", "k varchar, g int, v int", ["k", "g"],
             [(f"{i % 8:03b}", i // 8) for i in range(12)]),
    # a domain with a collation of its own, on a column of another: the column's orders
    "domain": ('k code COLLATE "pg_c_utf8", v int', "k varchar, v int", ["k"], [(t,) for t in TEXTS[:12]]),
    "bytea_ts": ("b bytea, ts timestamptz, v int", "b bytea, ts timestamptz, v int", ["b", "ts"],
                 [(bytes([i % 3, 255 - i]), f"2026-0{1 + i % 2}-01 0{i % 4}:00:00+00") for i in range(9)]),
    "composite": ('name text COLLATE "C", n numeric(12,2), v int', "name varchar, n decimal(12,2), v int",
                  ["name", "n"], [(a, n) for a in ["b", "B", "a'"] for n in ["10", "9", "-0.5"]]),
}


def _schema(declared: str, key: list[str]) -> Schema:
    cols = [c.strip().split(" ", 1) for c in re.split(r",\s*(?=[a-z_]+ )", declared)]
    return Schema(tuple(Column(n, parse_type(t)) for n, t in cols), tuple(key))


def _options(postgres, db: str, **extra: str) -> dict[str, str]:
    return {"connector": "postgres-cdc", "hostname": postgres.host, "port": str(postgres.port),
            "username": postgres.user, "password": postgres.password, "database.name": db, "table.name": "t", **extra}


def _after(committed: dict[str, int], ranges: dict[str, list[int]]) -> dict[str, int]:
    return {**committed, **{s: b for s, (_, b) in ranges.items()}}


def _key_rows(batch, key: list[str]) -> list[tuple]:
    rows = batch.to_pydict()
    return list(zip(*[rows[k] for k in key], strict=True))


@pytest.mark.parametrize("case", list(CASES))
def test_a_key_postgresql_orders_is_read_in_chunks_in_its_order(postgres, case):
    """Each key once, in PostgreSQL's order (a chunk of 2 or 3 rows), the position the last key read
    (shown by SHOW JOBS); each epoch replayed by a restarted process reads its chunk again; an epoch an
    earlier release planned (the whole table in one chunk) reads every key."""
    upstream, declared, key, keys = CASES[case]
    db = f"cdc_compared_{case}"
    postgres.create_database(db)
    with psycopg.connect(postgres.dsn(db), autocommit=True) as c:
        if case == "enum":
            c.execute(f"CREATE TYPE mood AS ENUM ({', '.join(repr(m) for m in MOODS)})")
        if case == "domain":
            c.execute('CREATE DOMAIN code AS text COLLATE "C" CHECK (VALUE <> \'forbidden\')')
        c.execute(f"CREATE TABLE t ({upstream}, PRIMARY KEY ({', '.join(key)}))")
        for i, k in enumerate(reversed(keys)):
            c.execute(f"INSERT INTO t VALUES ({', '.join(['%s'] * len(k))}, %s)", (*k, i))
        order = f"SELECT {', '.join(key)} FROM t ORDER BY {', '.join(key)}"
        want = [tuple(Decimal(v) if isinstance(v, Decimal) else v for v in r) for r in c.execute(order).fetchall()]
    schema = _schema(declared, key)
    rel = Relation("t", "table", schema, {}, 0, "created")
    size = "3" if case == "enum" else "2"
    first = make_connector("t", schema, _options(postgres, db, **{"snapshot.batch_size": size}))
    committed = made = first.initial_offsets()
    try:
        assert _at_key(rel, committed) == "from the first key"
        planned, shown = [], []
        for _ in range(len(keys)):
            ranges = first.plan(committed, 1000.0)
            assert ranges, first.status
            planned.append((ranges, _key_rows(first.read_arrow(ranges), key)))
            committed = _after(committed, ranges)
            if BACKFILLED in ranges:
                break
            shown.append(_at_key(rel, committed))
            last = planned[-1][1][-1]
            if all(isinstance(v, (str, Decimal)) for v in last):
                assert text_position(committed) == tuple(v if isinstance(v, str) else f"{v:.2f}" for v in last)
        read = [k for _, ks in planned for k in ks]
        assert BACKFILLED in committed and read == want, read
        assert text_position(committed) == (), "the last chunk's epoch keeps no key's bytes"
        assert len(planned) >= len(want) // 3 and all(s.startswith(f"after {key[0] if len(key) == 1 else '('}")
                                                       for s in shown)
        for ranges, ks in planned:  # each epoch replayed by a restarted process: its chunk's rows again
            again = make_connector("t", schema, _options(postgres, db))
            try:
                assert _key_rows(again.read_arrow(ranges), key) == ks, f"replay of {ranges}"
            finally:
                again.close()
        legacy = make_connector("t", schema, _options(postgres, db))
        try:
            whole = {"backfill": [0, 1], "backfill_rows": [0, len(want)], BACKFILLED: [0, 1]}
            assert _key_rows(legacy.read_arrow(whole), key) == want
            assert legacy.read_arrow({"backfill": [0, 0]}).num_rows == 0
        finally:
            legacy.close()
    finally:
        first.release(made)
        first.close()


NAMES = ["a", "B", "b", "ab", "A b", "é", "zz"]
STREAMS = {  # upstream table, declared columns, key, the upstream's columns, a new key
    "numeric": ("CREATE TABLE {name} (k numeric(12,2) PRIMARY KEY, v int)", "k decimal(12,2), v int", ["k"], "k, v",
                lambda r: (Decimal(r.randint(-2000, 2000)) / 100,)),
    "composite": ('CREATE TABLE {name} (name text COLLATE "C", n numeric(12,2), v int, PRIMARY KEY (name, n))',
                  "name varchar, n decimal(12,2), v int", ["name", "n"], "name, n, v",
                  lambda r: (r.choice(NAMES), Decimal(r.randint(-300, 1200)) / 100)),
}


def _churn(up: Upstream, n: int, key: list[str], new_key) -> None:
    """`n` transactions of inserts, updates, key changes and deletes, keys anywhere in the key space."""
    r, match = up.rnd, " AND ".join(f"{k} = %s" for k in key)
    for _ in range(n):
        keys, statements = [k if isinstance(k, tuple) else (k,) for k in sorted(up.state())], []
        for _ in range(r.randint(2, 6)):
            what = r.random()
            if what < 0.35 or not keys:
                statements.append((f"INSERT INTO {{t}} VALUES ({', '.join(['%s'] * len(key))}, %s) "
                                   "ON CONFLICT DO NOTHING", (*new_key(r), r.randint(0, 99))))
            elif what < 0.7:
                statements.append((f"UPDATE {{t}} SET v = v + 1 WHERE {match}", r.choice(keys)))
            elif what < 0.8:
                old, new = keys.pop(r.randrange(len(keys))), new_key(r)
                sets = ", ".join(f"{k} = %s" for k in key)
                statements.append((f"UPDATE {{t}} SET {sets} WHERE {match} AND NOT EXISTS "
                                   f"(SELECT 1 FROM {{t}} WHERE {match})", (*new, *old, *new)))
            else:
                statements.append((f"DELETE FROM {{t}} WHERE {match}", keys.pop(r.randrange(len(keys)))))
        up.txn(*statements)


def _passed_rows(up: Upstream, offsets: dict[str, int], width: int) -> dict:
    """The upstream rows at the epoch's LSN whose keys the backfill had read: key <= position (text in
    C order is Python's; numeric by value)."""
    state = up.state_at(offsets[LSN])
    if BACKFILLED in offsets:
        return state
    pos = text_position(offsets)
    if not pos:
        return {}
    at = (*pos[:-1], Decimal(pos[-1]))
    return {k: r for k, r in state.items() if (k if width > 1 else (k,)) <= at}


@pytest.mark.parametrize("case", list(STREAMS))
def test_changes_during_the_backfill_apply_exactly_to_the_keys_read(postgres, case):
    """Inserts, updates, key changes and deletes anywhere in the key space between chunks: applying
    each epoch's intents gives, at every epoch, the upstream rows whose keys were read (a change of a
    key not read yet is left to its chunk), and after the backfill the whole table."""
    ddl, declared, key, columns, new_key = STREAMS[case]
    db = f"cdc_compared_stream_{case}"
    postgres.create_database(db)
    up = Upstream(postgres.dsn(db), ddl=ddl, seed=4951, columns=columns, key_width=len(key))
    up.txn(*[(f"INSERT INTO {{t}} VALUES ({', '.join(['%s'] * len(key))}, %s) ON CONFLICT DO NOTHING",
              (*new_key(up.rnd), i)) for i in range(90)])
    cdc = make_connector("t", _schema(declared, key), _options(postgres, db, **{"snapshot.batch_size": "9"}))
    committed = made = cdc.initial_offsets()
    table: dict = {}
    try:
        epochs, done_at = 0, -1
        while epochs < 40 and (BACKFILLED not in committed or epochs < done_at + 3):
            _churn(up, 4, key, new_key)
            ranges = cdc.plan(committed, 1000.0)
            assert ranges, cdc.status
            batch = cdc.read_arrow(ranges).to_pydict()
            for i, op in enumerate(batch["_op"]):
                k = tuple(batch[c][i] for c in key)
                if op == UPSERT:
                    table[k if len(key) > 1 else k[0]] = tuple(batch[c][i] for c in columns.split(", "))
                else:
                    assert op == KEY_DELETE, batch
                    table.pop(k if len(key) > 1 else k[0], None)
            if BACKFILLED in ranges:
                done_at = epochs
            committed = _after(committed, ranges)
            want = _passed_rows(up, committed, len(key))
            assert table == want, f"epoch {epochs} at {text_position(committed)}: missing " \
                f"{set(want.items()) - set(table.items())}, extra {set(table.items()) - set(want.items())}"
            epochs += 1
        assert BACKFILLED in committed and done_at >= 5, "the backfill did not take several chunks"
        assert table == up.state()
    finally:
        cdc.release(made)
        cdc.close()


COMPOSITE_DUCK = "name VARCHAR, n DECIMAL(12,2), v INTEGER"
COMPOSITE_MVS = {"per_name": "SELECT name, count(*) AS c, sum(v) AS total, max(n) AS top FROM {t} GROUP BY name",
                 "big": "SELECT name, n, v FROM {t} WHERE n > 5"}


def test_a_text_and_numeric_key_is_backfilled_in_chunks_and_its_mvs_equal_duckdb_at_every_epoch(session, postgres):
    """The table through the pipeline, an MV created before the backfill and one during it: at
    every committed epoch the table equals upstream restricted to the keys read, and the MVs equal
    DuckDB over it."""
    ddl, _, key, columns, new_key = STREAMS["composite"]
    db = "cdc_compared_oracle"
    postgres.create_database(db)
    up = Upstream(postgres.dsn(db), name="c", ddl=ddl, seed=4952, columns=columns, key_width=2)
    up.txn(*[("INSERT INTO {t} VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", (*new_key(up.rnd), i)) for i in range(150)])
    session.sql(f"CREATE TABLE c (name varchar, n decimal(12,2), v int, PRIMARY KEY (name, n)) WITH "
                f"({options(postgres, db, 'c', **{'snapshot.batch_size': '20'})})")
    session.sql(f"CREATE MATERIALIZED VIEW per_name AS {COMPOSITE_MVS['per_name'].format(t='c')}")
    for i in range(15):
        _churn(up, 3, key, new_key)
        session.flush()
        if i == 2:
            session.sql("SET background_ddl = true")
            session.sql(f"CREATE MATERIALIZED VIEW big AS {COMPOSITE_MVS['big'].format(t='c')}")
            session.sql("WAIT")
            # the position's splits are the last key's bytes: not shown as offsets (nor in the metrics)
            assert any(s.startswith("backfill.t") for s in session.catalog.source_offsets("c"))
            row = next(r for r in session.sql("SHOW SOURCES").collect() if r.name == "c")
            shown = json.loads(row.committed_offsets)
            assert "backfill" in shown and not [s for s in shown if s.startswith("backfill.t")]
            assert not [p for p in overview.sources(session) if p.partition.startswith("backfill.t")]
            job = next(r for r in session.sql("SHOW JOBS").collect() if r.name == "c")
            assert job.upstreams.startswith("public.c after (name, n) ('"), job.upstreams
        if BACKFILLED in session.catalog.source_offsets("c"):
            break
    assert BACKFILLED in session.catalog.source_offsets("c"), "the backfill did not finish in 15 epochs"
    _churn(up, 4, key, new_key)
    session.flush()
    by_epoch = offsets_by_epoch(session, "c")
    for epoch, offsets in by_epoch.items():
        want = list(_passed_rows(up, offsets, 2).values())
        got = rows_of(session.table("c", as_of=epoch))
        assert multiset(got) == multiset(want), f"c at epoch {epoch} ({text_position(offsets)}): missing " \
            f"{multiset(want) - multiset(got)}, extra {multiset(got) - multiset(want)}"
        mvs = {m: q.format(t="c") for m, q in COMPOSITE_MVS.items()
               if epoch >= session.catalog.relation(m).created_epoch}
        check_epoch(session, epoch, {"c": (COMPOSITE_DUCK, want)}, mvs)
    assert len({text_position(o) for o in by_epoch.values()}) >= 6, "the backfill did not take several chunks"
    assert multiset(rows_of(session.table("c"))) == multiset(up.state().values())
    session.sql("DROP MATERIALIZED VIEW big")
    session.sql("DROP MATERIALIZED VIEW per_name")
    session.sql("DROP TABLE c")


def test_a_key_column_widened_during_the_backfill_is_read_once_a_key(postgres):
    """`ALTER COLUMN k TYPE varchar(12)` of a varchar(4) key between chunks, then longer keys: each key
    is read by one chunk (a position cast to the old length would read the keys after its prefix
    again), and the table ends equal to upstream."""
    db = "cdc_compared_widened"
    postgres.create_database(db)
    with psycopg.connect(postgres.dsn(db), autocommit=True) as c:
        c.execute("CREATE TABLE t (k varchar(4) PRIMARY KEY, v int)")
        c.execute("INSERT INTO t SELECT 'a' || i, i FROM generate_series(0, 9) i")
        options = _options(postgres, db, **{"snapshot.batch_size": "3"})
        cdc = make_connector("t", _schema("k varchar, v int", ["k"]), options)
        committed = made = cdc.initial_offsets()
        try:
            chunks: list[list[str]] = []
            table: dict = {}
            for i in range(20):
                if i == 2:
                    c.execute("ALTER TABLE t ALTER COLUMN k TYPE varchar(12)")
                    c.execute("INSERT INTO t SELECT 'b-long-key-' || i, i FROM generate_series(0, 9) i")
                ranges = cdc.plan(committed, 1000.0)
                assert ranges, cdc.status
                batch = cdc.read_arrow(ranges).to_pydict()
                read = ranges.get("backfill_rows", [0, 0])
                chunks.append(batch["k"][:read[1] - read[0]])
                table.update(zip(batch["k"], batch["v"], strict=True))  # upserts only: nothing is deleted
                committed = _after(committed, ranges)
                if BACKFILLED in committed:
                    break
            keys = [k for chunk in chunks for k in chunk]
            assert BACKFILLED in committed and len(keys) == len(set(keys)) == 20, chunks
            assert table == dict(c.execute("SELECT k, v FROM t").fetchall())
        finally:
            cdc.release(made)
            cdc.close()
