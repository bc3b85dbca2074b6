"""Process-time temporal joins (`JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`) against a model at
every epoch: each stream row is joined with the table as the previous epoch left it, when the row
arrives; the table's later changes neither retract nor change what was emitted, and a delete or an
update of a stream row retracts exactly what was emitted for it. Inner and LEFT, over a keyed
(retracting) and an append-only stream, with MVs created mid-stream (snapshot backfill: the join
of the snapshots at the snapshot's epoch)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sparkwave.core.errors import SparkwaveError
from tests.oracle import multiset, rows_of

MVS = {
    "tj_inner": ("SELECT s.id, s.x, t.name FROM s JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k", "s", False),
    "tj_left": ("SELECT s.id, t.name, t.w FROM s LEFT JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k", "s", True),
    "tj_append": ("SELECT sa.x, t.name FROM sa JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON sa.k = t.k", "sa", False),
}
LATE = ["tj_left_late"]
MVS["tj_left_late"] = ("SELECT s.id, t.name, t.w FROM s LEFT JOIN t FOR SYSTEM_TIME AS OF PROCTIME() "
                       "ON s.k = t.k", "s", True)


class JoinModel:
    """Each MV's rows by stream row, each looked up in the table as of the epoch before its arrival."""

    def __init__(self) -> None:
        self.t: dict[int, tuple[str, int]] = {}  # k -> (name, w), as committed
        self.s: dict[int, tuple[int, int]] = {}  # id -> (k, x)
        self.sa: list[tuple[int, int]] = []
        self.out: dict[str, dict[object, tuple]] = {}

    def row(self, name: str, sid: object, k: int | None, x: int, t: dict[int, tuple[str, int]]) -> tuple | None:
        hit = t.get(k) if k is not None else None
        if name == "tj_inner":
            return None if hit is None else (sid, x, hit[0])
        if name == "tj_append":
            return None if hit is None else (x, hit[0])
        return (sid, hit[0] if hit else None, hit[1] if hit else None)

    def create(self, name: str) -> None:  # a backfill: the snapshots joined at the snapshot's epoch
        self.out[name] = {}
        rows = self.sa_rows() if MVS[name][1] == "sa" else list(self.s.items())
        for sid, (k, x) in rows:
            if (r := self.row(name, sid, k, x, self.t)) is not None:
                self.out[name][sid] = r

    def sa_rows(self) -> list[tuple[object, tuple[int, int]]]:
        return [(("sa", i), r) for i, r in enumerate(self.sa)]

    def epoch(self, s_new: dict[int, tuple[int, int]], sa_added: list[tuple[int, int]],
              t_new: dict[int, tuple[str, int]]) -> None:
        for name, mv in self.out.items():
            if MVS[name][1] == "sa":
                for i, (k, x) in enumerate(sa_added, start=len(self.sa)):
                    if (r := self.row(name, ("sa", i), k, x, self.t)) is not None:
                        mv[("sa", i)] = r
                continue
            for sid in set(self.s) | set(s_new):
                if self.s.get(sid) == s_new.get(sid):
                    continue
                mv.pop(sid, None)
                if sid in s_new and (r := self.row(name, sid, *s_new[sid], self.t)) is not None:
                    mv[sid] = r
        self.s, self.t = dict(s_new), dict(t_new)
        self.sa += sa_added

    def rows(self, name: str) -> Counter:
        return multiset(self.out[name].values())


def _statements(rnd: random.Random, m: JoinModel) -> tuple[list[str], dict, list, dict]:
    """An epoch's statements and the tables after it: as sparkwave applies an epoch's DML, each
    statement reads the committed rows (`m`), and the last write to a key wins."""
    s, t, sa, sql = dict(m.s), dict(m.t), [], []
    for _ in range(rnd.randint(0, 4)):
        r = rnd.random()
        if r < 0.3:
            k = rnd.randint(0, 5)
            t[k] = (rnd.choice(["a", "b", "c"]) + str(k), rnd.randint(0, 9))
            sql.append(f"INSERT INTO t VALUES ({k}, '{t[k][0]}', {t[k][1]})")
        elif r < 0.4:
            k = rnd.randint(0, 5)
            if k in m.t:
                t.pop(k, None)
            sql.append(f"DELETE FROM t WHERE k = {k}")
        elif r < 0.65:
            sid, k, x = rnd.randint(0, 9), rnd.choice([None, *range(6)]), rnd.randint(0, 9)
            s[sid] = (k, x)
            sql.append(f"INSERT INTO s VALUES ({sid}, {'NULL' if k is None else k}, {x})")
        elif r < 0.8:
            sid = rnd.randint(0, 9)
            if sid in m.s:
                s.pop(sid, None)
            sql.append(f"DELETE FROM s WHERE id = {sid}")
        elif r < 0.9:
            sid = rnd.randint(0, 9)
            if sid in m.s:
                s[sid] = (m.s[sid][0], m.s[sid][1] + 1)
            sql.append(f"UPDATE s SET x = x + 1 WHERE id = {sid}")
        else:
            k, x = rnd.randint(0, 5), rnd.randint(0, 9)
            sa.append((k, x))
            sql.append(f"INSERT INTO sa VALUES ({k}, {x})")
    return sql, s, sa, t


@pytest.mark.parametrize("seed, big", [(1, False), (2, False), (3, True)])
def test_temporal_joins_equal_the_model_at_every_epoch(session, seed, big):
    """`big`: every changed step as Spark frames (`delta_frame`, `big_epoch_rows = 0`)."""
    s, rnd, model = session, random.Random(seed), JoinModel()
    if big:
        s.sql("SET big_epoch_rows = 0")
    s.sql("CREATE TABLE t (k int, name varchar, w int, PRIMARY KEY (k)); "
          "CREATE TABLE s (id int, k int, x int, PRIMARY KEY (id)); CREATE TABLE sa (k int, x int) APPEND ONLY")
    for name in [n for n in MVS if n not in LATE]:
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name][0]}")
        model.create(name)
    for i in range(12):
        if i == 5:
            for name in LATE:
                s.sql(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name][0]}")
                s.sql("WAIT")
                model.create(name)
        sql, s_new, sa_added, t_new = _statements(rnd, model)
        for statement in sql:
            s.sql(statement)
        epoch = s.flush()
        model.epoch(s_new, sa_added, t_new)
        for name in model.out:
            got = multiset(rows_of(s.table(name, as_of=epoch)))
            assert got == model.rows(name), f"{name} at epoch {epoch}: extra {got - model.rows(name)}, " \
                                            f"missing {model.rows(name) - got}"


def test_a_table_change_retracts_nothing_and_a_stream_delete_retracts_what_was_emitted(session):
    s = session
    s.sql("CREATE TABLE t (k int, name varchar, PRIMARY KEY (k)); CREATE TABLE s (id int, k int, PRIMARY KEY (id))")
    s.sql("CREATE MATERIALIZED VIEW j AS SELECT s.id, t.name FROM s JOIN t FOR SYSTEM_TIME AS OF PROCTIME() "
          "ON s.k = t.k")
    s.sql("INSERT INTO t VALUES (1, 'old')")
    s.flush()
    s.sql("INSERT INTO s VALUES (10, 1)")
    s.flush()
    assert rows_of(s.table("j")) == [(10, "old")]
    s.sql("UPDATE t SET name = 'new' WHERE k = 1")
    s.flush()
    assert rows_of(s.table("j")) == [(10, "old")]  # the table's change retracts nothing
    s.sql("INSERT INTO s VALUES (11, 1)")
    s.flush()
    assert sorted(rows_of(s.table("j"))) == [(10, "old"), (11, "new")]
    s.sql("DELETE FROM t WHERE k = 1")
    s.flush()
    s.sql("DELETE FROM s WHERE id = 10")
    s.flush()
    assert rows_of(s.table("j")) == [(11, "new")]  # exactly what was emitted for it, though t has no k = 1 now
    described = [r.description for r in s.sql("DESCRIBE j").collect() if r.type == "internal table"]
    assert any("its delete retracts it" in d for d in described), described


def test_a_temporal_join_needs_the_tables_primary_key(session):
    session.sql("CREATE TABLE t (k int, name varchar) APPEND ONLY; CREATE TABLE s (id int, k int, PRIMARY KEY (id))")
    with pytest.raises(SparkwaveError, match="has no primary key"):
        session.sql("CREATE MATERIALIZED VIEW j AS SELECT s.id FROM s JOIN t FOR SYSTEM_TIME AS OF PROCTIME() "
                    "ON s.k = t.k")
    with pytest.raises(SparkwaveError, match="FOR SYSTEM_TIME AS OF is not supported in a query"):
        session.sql("SELECT s.id FROM s JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k")
