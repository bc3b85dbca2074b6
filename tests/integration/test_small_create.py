"""A small CREATE on a live pipeline (issue 47): its snapshot built on the driver (a stateless tree's
too), the epochs the main graph committed meanwhile consumed and the MV merged in band, and the MV
equal to the oracle at every epoch from its snapshot on; with `big_epoch_rows = 0` the same MVs are
built by Spark and equal the same oracle."""

from __future__ import annotations

import random
import threading

import pyarrow.parquet as pq
import pytest

import sparkwave
from sparkwave.core import policy
from tests.oracle import Model, multiset, rows_of, to_sql, values_sql

MVS = {
    "pf": "SELECT k, a * 2 AS a2, upper(b) AS ub FROM t WHERE a % 3 <> 0",
    "gb": "SELECT b, count(*) AS n, sum(a) AS sa, max(a) AS mx FROM t GROUP BY b",
    "ja": "SELECT d.name, count(*) AS n, min(t.a) AS mn FROM t JOIN d ON t.a = d.g GROUP BY d.name",
}
DRIVER, SPARK = "parquet-cpp-arrow", "parquet-mr"  # the writers of a base built on the driver, by Spark


def _model(rows: list[tuple], dims: list[tuple]) -> Model:
    model = Model()
    model.table("t", "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"])
    model.table("d", "g INTEGER, name VARCHAR", ["g", "name"], ["g"])
    model.apply_epoch([("insert", "t", rows), ("insert", "d", dims)])
    for name, sql in MVS.items():
        model.view(name, sql)
    return model


def _batch(rnd: random.Random) -> list[tuple]:
    return [
        ("insert", "t", [(rnd.randrange(400), rnd.randint(-5, 30), rnd.choice(["x", "yy", None])) for _ in range(9)]),
        ("update", "t", {"a": f"a + {rnd.randint(1, 4)}"}, f"k % 7 = {rnd.randrange(7)}"),
        ("delete", "t", f"k % 11 = {rnd.randrange(11)}"),
        ("insert", "d", [(rnd.randint(-5, 30), f"n{rnd.randrange(3)}")]),
    ]


def _writers(s: sparkwave.Session, name: str) -> set[str]:
    """Who wrote the files of the MV's base as of its snapshot."""
    info = next(j for j in s.jobs() if j.name == name)
    base = s.catalog.base_at(name, info.created_epoch)
    assert base is not None and base.files, f"{name} has no base as of its snapshot"
    return {pq.ParquetFile(f).metadata.created_by.split(" ")[0] for f in base.files}


@pytest.mark.parametrize("big_epoch_rows", [None, 0])
def test_small_creates_on_a_live_pipeline_merge_and_equal_the_oracle(session, big_epoch_rows):
    """Each job is held inside its snapshot chunk while the main graph commits two epochs of DML;
    released, it consumes them and merges; every MV equals DuckDB at its snapshot epoch, at the
    epochs it consumed from the log and at the epochs the main graph ran it after its merge."""
    s = session
    rnd = random.Random(5)
    rows = [(k, rnd.randint(-5, 30), rnd.choice(["x", "yy", "zzz", None])) for k in range(300)]
    dims = [(g, f"n{g % 3}") for g in range(-5, 31, 2)]
    s.sql("CREATE TABLE t (k int, a int, b varchar, PRIMARY KEY (k)); CREATE TABLE d (g int, name varchar, "
          "PRIMARY KEY (g))")
    s.sql(f"INSERT INTO t VALUES {values_sql(rows)}; INSERT INTO d VALUES {values_sql(dims)}")
    s.flush()
    model = _model(rows, dims)
    if big_epoch_rows is not None:
        s.sql(f"SET big_epoch_rows = {big_epoch_rows}")
    entered, release = threading.Semaphore(0), threading.Event()

    def held_in_chunk(lo: int, hi: int) -> None:
        entered.release()
        assert release.wait(120), "the test never released the chunk"

    s.creating.chunk_hook = held_in_chunk
    s.sql("SET background_ddl = true")
    snapshot = s.committed_epoch
    expected = {snapshot: {n: model.rows(n) for n in MVS}}
    during: list[int] = []  # the epochs the main graph committed while the jobs were in their chunks
    try:
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        for _ in MVS:
            assert entered.acquire(timeout=120), "a creating job never started its snapshot chunk"
        s.sql(f"SET big_epoch_rows = {policy.BIG_EPOCH_ROWS}")  # the builds are chosen; epochs run as usual
        for _ in range(2):  # the main graph goes on while every job is inside its chunk
            statements = _batch(rnd)
            for st in statements:
                s.sql(to_sql(st))
            model.apply_epoch(statements)
            during.append(s.flush())
            expected[during[-1]] = {n: model.rows(n) for n in MVS}
    finally:
        release.set()
    s.sql("WAIT")
    for _ in range(2):  # then the main graph maintains them
        statements = _batch(rnd)
        for st in statements:
            s.sql(to_sql(st))
        model.apply_epoch(statements)
        expected[s.flush()] = {n: model.rows(n) for n in MVS}

    for name in MVS:
        info = next(j for j in s.jobs() if j.name == name)
        assert not info.creating and info.created_epoch == snapshot
        assert info.merged_epoch == during[-1], f"{name} merged at {info.merged_epoch}, not at {during[-1]}"
        for epoch, want in expected.items():
            got = multiset(rows_of(s.table(name, as_of=epoch)))
            assert got == multiset(want[name]), f"{name} at epoch {epoch}: extra {got - multiset(want[name])}, " \
                                                f"missing {multiset(want[name]) - got}"
        assert _writers(s, name) == ({SPARK} if big_epoch_rows == 0 else {DRIVER}), name
