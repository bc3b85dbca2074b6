"""Chunked stateful backfill: a join or aggregate MV created on a live pipeline reads its driving
upstream's snapshot a vnode range at a time, at most `backfill_chunk_rows` rows per chunk, writes
its state tables per chunk (an aggregate's partials added up by a last merge chunk), and equals
DuckDB's evaluation at every epoch it is readable at, while DML keeps changing the inputs; its
state tables equal those of the same MV built in one chunk, on the driver (a snapshot no bigger
than `big_epoch_rows`) and by Spark."""

from __future__ import annotations

import random

import pyarrow.parquet as pq

from sparkwave.core import policy
from sparkwave.core.chunk import VNODES
from sparkwave.stream.chunking import chunk_plan
from sparkwave.stream.dataflow import Dataflow
from tests.oracle import Model, multiset, rows_of, values_sql

CHUNK_ROWS = 120
F_ROWS = [(k, (k % 9) if k % 13 else None, (k * 37) % 101 if k % 29 else None,
           f"{(k * 7) % 1000}.{k % 100:02d}" if k % 31 else None) for k in range(700)]
DIM_ROWS = [(g, f"n{g % 4}") for g in range(7)]
MVS = {  # name: (query, driving upstream, merges)
    "agg": ("SELECT g, count(*) AS n, count(DISTINCT v) AS dv, sum(d) AS sd, avg(d) AS ad, min(v) AS mn, "
            "max(v) AS mx FROM f GROUP BY g", "f", True),
    "total": ("SELECT count(*) AS n, sum(v) AS sv, max(d) AS md FROM f", "f", True),
    "joined": ("SELECT dim.name, count(*) AS n, min(f.v) AS mn FROM f JOIN dim ON f.g = dim.g GROUP BY dim.name",
               "f", True),
    "lj": ("SELECT f.id, f.v, dim.name FROM f LEFT JOIN dim ON f.g = dim.g", "f", False),
    "rj": ("SELECT f.id, dim.name FROM dim RIGHT JOIN f ON f.g = dim.g WHERE f.v > 20", "f", False),
    "self": ("SELECT a.id, a.v FROM f a JOIN (SELECT g, max(v) AS mv FROM f GROUP BY g) b "
             "ON a.g = b.g AND a.v = b.mv", "f", False),
    "nested": ("SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM f GROUP BY g) x GROUP BY n",
               "f", True),
    "fj": ("SELECT f.id, dim.g FROM f FULL JOIN dim ON f.g = dim.g", None, False),
    "shared": ("SELECT a.g, a.n FROM (SELECT g, v, count(*) AS n FROM f GROUP BY g, v) a JOIN "
               "(SELECT max(c.n) AS mx, c.g FROM (SELECT count(*) AS n, g FROM f GROUP BY v, g) c GROUP BY c.g) m "
               "ON a.g = m.g AND a.n >= m.mx", "f", True),  # one aggregate planned for both (`Share`)
    # a shared aggregate below the driving path's aggregate (a side the first chunk hands on) and above it
    "shared_side": ("SELECT t.g, t.n, s2.c FROM (SELECT f.g, count(*) AS n FROM f JOIN "
                    "(SELECT g, count(*) AS c FROM dim GROUP BY g) s ON f.g = s.g GROUP BY f.g) t "
                    "JOIN (SELECT g, count(*) AS c FROM dim GROUP BY g) s2 ON t.g = s2.g", "f", True),
}
# also built in one chunk: their state tables must be the same
TWINS = ("agg", "joined", "self", "shared", "shared_side")
SPARK_TWINS = ("agg", "shared_side")  # also built by Spark in one pass (as every late MV with `big_epoch_rows = 0`)
SCAN_TWINS = ("joined",)  # also built on the driver over Spark scans of the snapshots (too big to read locally)


def _batch(rnd: random.Random) -> list[tuple]:
    return [
        ("insert", "f", [(rnd.randint(0, 800), rnd.choice([None, *range(9)]), rnd.choice([None, *range(101)]),
                          f"{rnd.randint(0, 999)}.{rnd.randint(0, 99):02d}") for _ in range(20)]),
        ("update", "f", {"v": "v + 7"}, f"id % 11 = {rnd.randrange(11)}"),
        ("delete", "f", f"id % 17 = {rnd.randrange(17)}"),
        ("delete", "dim", f"g = {rnd.randrange(7)}"),
        ("insert", "dim", [(rnd.randrange(9), f"n{rnd.randrange(4)}")]),
    ]


def _apply(s, model: Model, statements: list[tuple]) -> None:
    for st in statements:
        if st[0] == "insert":
            s.sql(f"INSERT INTO {st[1]} VALUES {values_sql(st[2])}")
        elif st[0] == "update":
            s.sql(f"UPDATE {st[1]} SET {', '.join(f'{c} = {e}' for c, e in st[2].items())} WHERE {st[3]}")
        else:
            s.sql(f"DELETE FROM {st[1]} WHERE {st[2]}")
    model.apply_epoch(statements)


def _model() -> Model:
    m = Model()
    m.table("f", "id INTEGER, g INTEGER, v INTEGER, d DECIMAL(10,2)", ["id", "g", "v", "d"], ["id"])
    m.table("dim", "g INTEGER, name VARCHAR", ["g", "name"], ["g"])
    return m


def test_stateful_backfills_run_in_chunks_and_equal_duckdb_at_every_epoch(session, monkeypatch):
    s = session
    s.sql("CREATE TABLE f (id int, g int, v int, d decimal(10, 2), PRIMARY KEY (id)); "
          "CREATE TABLE dim (g int, name varchar, PRIMARY KEY (g))")
    model = _model()
    rnd = random.Random(7)
    _apply(s, model, [("insert", "f", F_ROWS), ("insert", "dim", DIM_ROWS)])
    s.flush()
    _apply(s, model, _batch(rnd))
    s.flush()

    s.sql(f"SET background_ddl = true; SET backfill_chunk_rows = {CHUNK_ROWS}")
    for name, (sql, _, _) in MVS.items():
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    # The same snapshot (no epoch in between), one chunk each: by Spark in one pass (in the
    # foreground, so that each is built before the setting changes), then on the driver, as one
    # epoch of inserts from empty state.
    s.sql("SET backfill_chunk_rows = 10000000; SET background_ddl = false; SET big_epoch_rows = 0")
    for name in SPARK_TWINS:
        s.sql(f"CREATE MATERIALIZED VIEW {name}_spark AS {MVS[name][0]}")
    s.sql("SET big_epoch_rows = 1000000")
    for name in TWINS:
        s.sql(f"CREATE MATERIALIZED VIEW {name}_one AS {MVS[name][0]}")
    with monkeypatch.context() as m:
        m.setattr(policy, "LOCAL_SNAPSHOT_BYTES", 0)
        m.setattr(policy, "BUILD_SNAPSHOT_BYTES", 0)
        for name in SCAN_TWINS:
            s.sql(f"CREATE MATERIALIZED VIEW {name}_scan AS {MVS[name][0]}")
    for _ in range(3):  # the pipeline goes on while the jobs backfill
        _apply(s, model, _batch(rnd))
        s.flush()
    s.wait()
    s.flush()

    rels = {r.name: r for r in s.catalog.relations()}
    for name, (_, driving, merges) in MVS.items():
        job = next(j for j in s.jobs() if j.name == name)
        root = Dataflow(s.rt, rels[name]).root
        assert any(o.op == "share" for o in root.walk()) == name.startswith("shared"), name
        plan = chunk_plan(root, {"f": 700, "dim": 7})
        assert (plan.driving.relation if plan else None) == driving, name
        assert job.rows_done == job.rows_total, (name, job.rows_done, job.rows_total)
        chunks = s.catalog.job_chunks(job.id)
        if driving is None:
            assert [(c.lo, c.hi) for c in chunks] == [(0, VNODES)], name  # one chunk, as before
            continue
        assert len(chunks) >= 4 and chunks[-1].hi == VNODES + (1 if merges else 0), (name, chunks)
        others = sum(s.table(u, as_of=s.catalog.job(job.id).snapshot_epoch).count() for u in ("dim",)
                     if u in rels[name].upstreams)
        assert chunks[0].rows - others <= CHUNK_ROWS and all(c.rows <= CHUNK_ROWS for c in chunks[1:]), \
            (name, [c.rows for c in chunks])
        assert any(k.endswith("#partial") for k in chunks[0].files) == merges, (name, sorted(chunks[0].files))

    for epoch in s.catalog.committed_epochs(since=1):
        then = _model()
        for t in ("f", "dim"):
            rows = rows_of(s.table(t, as_of=epoch))
            if rows:
                then.db.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        for name, (sql, _, _) in MVS.items():
            if rels[name].created_epoch <= epoch:
                then.view(name, sql)
                got = multiset(rows_of(s.table(name, as_of=epoch)))
                want = multiset(then.rows(name))
                assert got == want, f"{name} at {epoch}: extra {got - want}, missing {want - got}"

    for name in TWINS:  # the MV and every state table, as of the common snapshot, as each single pass builds it
        job = next(j for j in s.jobs() if j.name == name)
        snapshot = s.catalog.job(job.id).snapshot_epoch
        tables = [r for r in s.catalog.relations(internal=True) if r.name == name or r.name.startswith(f"{name}.")]
        assert len(tables) > 1, name
        twins = [(f"{name}_one", "parquet-cpp-arrow")] + [(f"{name}_spark", "parquet-mr")] * (name in SPARK_TWINS) \
            + [(f"{name}_scan", "parquet-cpp-arrow")] * (name in SCAN_TWINS)
        for twin_of, writer in twins:
            assert snapshot == s.catalog.job(next(j for j in s.jobs() if j.name == twin_of).id).snapshot_epoch
            base = s.catalog.base_at(twin_of, snapshot)
            files = base.files if base else []
            assert files and {pq.ParquetFile(f).metadata.created_by.split(" ")[0] for f in files} == {writer}, twin_of
            for table in tables:
                twin = s.catalog.relation(twin_of + table.name.removeprefix(name))
                got, want = (multiset(rows_of(s.rt.snapshot(r, snapshot))) for r in (table, twin))  # with vnodes
                assert got == want, f"{twin.name} at {snapshot}: extra {want - got}, missing {got - want}"

    # the chunks' partials are gone once added up; every state file left is in a base
    for name in MVS:
        for state in s.catalog.relations(internal=True):
            if state.name.startswith(f"{name}."):
                base = s.rt.stored(state).base_path
                live = {f for b in s.catalog.bases(state.name) for f in b.files}
                assert {str(p) for p in base.glob("*.parquet")} <= live, state.name
