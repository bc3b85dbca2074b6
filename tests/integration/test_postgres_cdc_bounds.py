"""The CDC backfill at the key type's bounds, without Spark: an epoch replayed after a crash reads its
chunk's key range again, and the last chunk's range must still hold the greatest key a bigint can
have (a position cannot name the key past it). Real embedded PostgreSQL, the connector as a restarted
process builds it (review-b)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import psycopg
import pytest

from sparkwave.connectors import make_connector
from sparkwave.connectors.postgres_cdc import BACKFILL, BACKFILLED
from sparkwave.core.schema import Column, Schema, parse_type

TOP, BOTTOM = (1 << 63) - 1, -(1 << 63)


def _connector(postgres, db: str, table: str, key: list[str], **extra: str):
    columns = tuple(Column(n, parse_type("bigint")) for n in [*key, "v"])
    options = {"connector": "postgres-cdc", "hostname": postgres.host, "port": str(postgres.port),
               "username": postgres.user, "password": postgres.password, "database.name": db,
               "table.name": table, **extra}
    return make_connector(table, Schema(columns, tuple(key)), options)


def _keys(batch, key: list[str]) -> list[tuple[int, ...]]:
    return sorted(zip(*[batch.column(k).to_pylist() for k in key], strict=True))


@pytest.mark.parametrize("key", [["k"], ["a", "b"]])
@pytest.mark.parametrize("last", [[TOP - 1, TOP], [TOP - 2, TOP - 1, TOP]], ids=["ending", "starting"])
def test_the_last_chunk_replayed_after_a_crash_still_reads_the_greatest_bigint_key(postgres, key, last):
    """The last chunk ends at the greatest position a split holds, and (`starting`) also starts there."""
    db = f"cdc_bounds_{len(key)}_{len(last)}"
    postgres.create_database(db)
    cols = ", ".join(f"{k} bigint" for k in key)
    values = [(BOTTOM,) * len(key), (0,) * len(key), *[(v,) * len(key) for v in last]]
    with psycopg.connect(postgres.dsn(db), autocommit=True) as c:
        c.execute(f"CREATE TABLE t ({cols}, v bigint, PRIMARY KEY ({', '.join(key)}))")
        for i, k in enumerate(values):
            c.execute(f"INSERT INTO t VALUES ({', '.join(['%s'] * len(key))}, %s)", (*k, i))
    first = _connector(postgres, db, "t", key, **{"snapshot.batch_size": "2"})
    committed = made = first.initial_offsets()
    try:
        planned = []
        for _ in range(10):
            ranges = first.plan(committed, 1000.0)
            assert ranges, first.status
            planned.append((ranges, _keys(first.read_arrow(ranges), key)))
            committed = {**committed, **{s: b for s, (_, b) in ranges.items()}}
            if BACKFILLED in ranges:
                break
        assert BACKFILLED in committed and sorted(k for _, ks in planned for k in ks) == values
        for ranges, keys in planned:  # each epoch replayed by a restarted process: its chunk's rows again
            again = _connector(postgres, db, "t", key)
            try:
                assert _keys(again.read_arrow(ranges), key) == keys, f"replay of {ranges[BACKFILL]}"
            finally:
                again.close()
    finally:
        first.release(made)  # the slot and publication its CREATE made


def _offsets_after(committed: dict[str, int], ranges: dict[str, list[int]]) -> dict[str, int]:
    return {**committed, **{s: b for s, (_, b) in ranges.items()}}


@contextmanager
def _an_update_awaiting_a_standby(tmp_path, **options: str) -> Iterator[SimpleNamespace]:
    """A server whose synchronous standby never answers; a table of keys 1-8 whose connector read
    the chunk [1, 3); then `UPDATE t SET v = 99 WHERE k = 5`, its commit written and flushed but
    visible only once `visible()` cancels the wait."""
    from sparkwave.devtools.postgres_server import PostgresServer

    server = PostgresServer(tmp_path / "pg", settings={"synchronous_standby_names": "nobody",
                                                       "synchronous_commit": "local"})
    server.start()
    waiter = admin = hung = None
    try:
        server.create_database("d")
        admin = psycopg.connect(server.dsn("d"), autocommit=True)
        admin.execute("CREATE TABLE t (k bigint PRIMARY KEY, v bigint)")
        admin.execute("INSERT INTO t SELECT i, 0 FROM generate_series(1, 8) i")
        cdc = _connector(server, "d", "t", ["k"], **{"snapshot.batch_size": "2", **options})
        made = cdc.initial_offsets()
        ranges = cdc.plan(made, 1e6)  # keys [1, 3)
        assert ranges[BACKFILL] == [1, 3], ranges
        waiter = psycopg.connect(server.dsn("d"))
        waiter.execute("SET synchronous_commit = on")
        pid = waiter.info.backend_pid
        waiter.execute("UPDATE t SET v = 99 WHERE k = 5")
        hung = threading.Thread(target=waiter.commit, daemon=True)  # written and flushed; visible only once answered
        hung.start()
        waiting = "SELECT wait_event FROM pg_stat_activity WHERE pid = %s"
        while admin.execute(waiting, (pid,)).fetchone() != ("SyncRep",):  # its commit record is flushed then
            assert hung.is_alive(), "the commit did not wait for the standby"
            hung.join(0.05)

        def visible() -> None:
            admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
            hung.join()

        yield SimpleNamespace(server=server, admin=admin, cdc=cdc, made=made, committed=_offsets_after(made, ranges),
                              visible=visible)
    finally:
        if waiter is not None and admin is not None:
            admin.execute("SELECT pg_cancel_backend(%s)", (waiter.info.backend_pid,))
            if hung is not None:
                hung.join()
            waiter.close()
        server.close()


def test_a_chunk_after_an_epoch_without_one_checks_every_transaction_since_the_last_chunk(tmp_path):
    """A commit written but not yet visible (here: a synchronous standby that never answers) stays
    invisible for epochs. The chunk after an epoch that took none (its budget went to the stream)
    must check the transactions of every range since the last chunk, not only the range before it:
    the change of a key the backfill had not passed is left to the chunk, which would read the old row."""
    with _an_update_awaiting_a_standby(tmp_path, source_rate_limit="1") as up:
        admin, cdc, made, committed = up.admin, up.cdc, up.made, up.committed
        ranges = cdc.plan(committed, 1e6)  # the update is in its range (key 5: left to the chunks); keys [3, 5)
        assert ranges[BACKFILL] == [3, 5], ranges
        committed = _offsets_after(committed, ranges)
        admin.execute("INSERT INTO t VALUES (100, 0)")
        ranges = cdc.plan(committed, 0.0)  # one row of budget, spent on the insert: no chunk
        assert ranges[BACKFILL] == [5, 5], ranges
        committed = _offsets_after(committed, ranges)
        five = []
        for _ in range(2):  # the update still invisible, then visible: key 5 is read once, and with it
            ranges = cdc.plan(committed, 1e6)
            committed = _offsets_after(committed, ranges)
            rows = cdc.read_arrow(ranges).to_pydict()
            five += [v for k, v in zip(rows["k"], rows["v"], strict=True) if k == 5]
            up.visible()  # the wait ends: the commit becomes visible
        assert five == [99], f"key 5 read without the update committed before the epoch's range: {five}"
        cdc.release(made)


def test_a_restarted_connector_checks_the_last_committed_range_before_its_first_chunk(tmp_path):
    """As above, the update's commit written but invisible, committed in an epoch's range; then the
    process restarts (or an ALTER replaces the connector): the first chunk must still check that
    range's transactions, which the slot (advanced only at the next plan) still holds."""
    with _an_update_awaiting_a_standby(tmp_path) as up:
        server, cdc, made, committed = up.server, up.cdc, up.made, up.committed
        ranges = cdc.plan(committed, 1e6)  # the update in its range; keys [3, 5) (read ahead before it)
        assert ranges[BACKFILL] == [3, 5], ranges
        committed = _offsets_after(committed, ranges)
        cdc.close()
        five = []
        for _ in range(2):  # restarted: the update still invisible, then visible
            again = _connector(server, "d", "t", ["k"], **{"snapshot.batch_size": "2"})
            ranges = again.plan(committed, 1e6)
            committed = _offsets_after(committed, ranges)
            rows = again.read_arrow(ranges).to_pydict()
            five += [v for k, v in zip(rows["k"], rows["v"], strict=True) if k == 5]
            again.close()
            up.visible()
        assert five == [99], f"key 5 read without the update committed before the epoch's range: {five}"
        cdc.release(made)


UUIDS = ["00000000-0000-0000-0000-000000000000", "00000000-0000-0000-ffff-ffffffffffff",
         "00000000-0000-0001-0000-000000000000", "7fffffff-ffff-ffff-ffff-ffffffffffff",
         "80000000-0000-0000-0000-000000000000", "80000000-0000-0000-7fff-ffffffffffff",
         "80000000-0000-0000-8000-000000000000", "ffffffff-ffff-ffff-ffff-fffffffffffe",
         "ffffffff-ffff-ffff-ffff-ffffffffffff"]


@pytest.mark.parametrize("composite", [False, True])
def test_a_uuid_key_is_read_in_chunks_in_its_byte_order_to_the_greatest_uuid(postgres, composite):
    """A uuid key (declared varchar) is read in chunks, its position two 64-bit parts: each key
    once, in PostgreSQL's order, across the signed halves and up to the greatest uuid; a replay of
    each epoch reads its chunk again; SHOW JOBS shows the position as a uuid."""
    from sparkwave.core.catalog import Relation
    from sparkwave.meta.cdc_progress import _key_values

    db = f"cdc_uuid_{int(composite)}"
    postgres.create_database(db)
    key = ["a", "id"] if composite else ["id"]
    with psycopg.connect(postgres.dsn(db), autocommit=True) as c:
        c.execute(f"CREATE TABLE t ({'a int, ' if composite else ''}id uuid, v bigint, PRIMARY KEY ({', '.join(key)}))")
        for i, u in enumerate(reversed(UUIDS)):
            c.execute(f"INSERT INTO t VALUES ({'1, ' if composite else ''}%s, %s)", (u, i))
        if composite:
            c.execute("INSERT INTO t VALUES (0, 'ffffffff-ffff-ffff-ffff-ffffffffffff', 99), "
                      "(2, '00000000-0000-0000-0000-000000000000', 98)")
    columns = ((Column("a", parse_type("int")),) if composite else ()) + \
        (Column("id", parse_type("varchar")), Column("v", parse_type("bigint")))
    schema = Schema(columns, tuple(key))
    options = {"connector": "postgres-cdc", "hostname": postgres.host, "port": str(postgres.port),
               "username": postgres.user, "password": postgres.password, "database.name": db, "table.name": "t"}
    first = make_connector("t", schema, {**options, "snapshot.batch_size": "2"})
    committed = made = first.initial_offsets()
    try:
        assert {s for s in committed if s.startswith(f"{BACKFILL}.")} | {BACKFILL} == \
            {BACKFILL, f"{BACKFILL}.1"} | ({f"{BACKFILL}.2"} if composite else set())
        planned, shown = [], []
        for _ in range(12):
            ranges = first.plan(committed, 1000.0)
            rows = first.read_arrow(ranges).to_pydict()
            planned.append((ranges, list(zip(*[rows[k] for k in key], strict=True))))
            committed = _offsets_after(committed, ranges)
            if BACKFILLED in ranges:
                break
            shown.append(_key_values(Relation("t", "table", schema, {}, 0, "created"), committed))
        read = [k for _, keys in planned for k in keys]
        want = sorted([(1, u) for u in UUIDS] + [(0, UUIDS[-1]), (2, UUIDS[0])]) if composite else \
            [(u,) for u in UUIDS]
        assert BACKFILLED in committed and read == want, read
        assert len(planned) >= len(want) // 2
        assert shown == [_uuid_successor(keys[-1]) for _, keys in planned[:len(shown)]]
        for ranges, keys in planned:  # each epoch replayed by a restarted process: its chunk's rows again
            again = make_connector("t", schema, options)
            try:
                rows = again.read_arrow(ranges).to_pydict()
                assert list(zip(*[rows[k] for k in key], strict=True)) == keys, f"replay of {ranges}"
            finally:
                again.close()
        # Epochs an earlier release planned (the key read in one chunk, one split a column), replayed now:
        # the chunk from the least key, and an epoch of the stream alone.
        legacy = make_connector("t", schema, options)
        try:
            whole = {BACKFILL: [0, 1], "backfill_rows": [0, len(want)], BACKFILLED: [0, 1]}
            rows = legacy.read_arrow({**whole, **({"backfill.1": [0, 1]} if composite else {})}).to_pydict()
            assert sorted(zip(*[rows[k] for k in key], strict=True)) == want
            assert legacy.read_arrow({BACKFILL: [0, 0]}).num_rows == 0
        finally:
            legacy.close()
    finally:
        first.release(made)
        first.close()


def _uuid_successor(key: tuple) -> list:
    """The key after `key` (`(uuid,)` or `(int, uuid)`), a uuid's carry into the column before it."""
    import uuid

    *head, u = key
    n = uuid.UUID(u).int + 1
    if n == 1 << 128:
        return [head[0] + 1, str(uuid.UUID(int=0))]
    return [*head, str(uuid.UUID(int=n))]
