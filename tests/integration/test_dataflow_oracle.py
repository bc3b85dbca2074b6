"""Oracle for aggregates, joins and windows: after each committed epoch every MV equals DuckDB's
evaluation of its SQL over the tables as of that epoch, as an exact multiset of rows, under
hypothesis-generated inserts, updates and deletes on keyed and append-only tables (deleting the
current min/max, emptying groups and refilling them). Some MVs are created mid-stream, backfilled
with either strategy."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkwave
from tests.integration.test_oracle import FAST_PHASES
from tests.oracle import Model, connect, multiset, rows_of, to_sql

TABLES = [
    ("CREATE TABLE f (id int, g int, d int, v int, x decimal(10, 2), PRIMARY KEY (id))",
     "f", "id INTEGER, g INTEGER, d INTEGER, v INTEGER, x DECIMAL(10, 2)", ["id", "g", "d", "v", "x"], ["id"]),
    ("CREATE TABLE dim (g int, name varchar, w int, PRIMARY KEY (g))",
     "dim", "g INTEGER, name VARCHAR, w INTEGER", ["g", "name", "w"], ["g"]),
    ("CREATE TABLE e (g int, v int) APPEND ONLY", "e", "g INTEGER, v INTEGER", ["g", "v"], []),
    ("CREATE TABLE ev (id int, g int, v int, ts timestamp, PRIMARY KEY (id))",
     "ev", "id INTEGER, g INTEGER, v INTEGER, ts TIMESTAMP", ["id", "g", "v", "ts"], ["id"]),
]

# q5's shape: one aggregate spelled twice (groups in another order), planned once and shared
SHARED = ("x_shared", "SELECT a.g, a.d, a.n FROM (SELECT g, d, count(*) AS n FROM f GROUP BY g, d) a "
                      "JOIN (SELECT max(c.n) AS mx, c.g FROM (SELECT count(*) AS n, g FROM f GROUP BY d, g) c "
                      "GROUP BY c.g) m ON a.g = m.g AND a.n >= m.mx")

AGG_MVS = [
    ("a_all", "SELECT g, count(*) AS n, count(v) AS cv, sum(v) AS s, avg(v) AS a, min(v) AS mn, max(v) AS mx, "
              "count(DISTINCT v) AS cd, sum(x) AS sx, avg(x) AS ax, min(x) AS mnx FROM f GROUP BY g"),
    ("a_having", "SELECT g, d, count(*) AS n, max(v) - min(v) AS spread FROM f GROUP BY g, d HAVING count(*) > 1"),
    ("a_global", "SELECT count(*) AS n, sum(v) AS s, min(v) AS mn, max(x) AS mx, count(DISTINCT g) AS groups FROM f"),
    ("a_append", "SELECT g, count(*) AS n, max(v) AS mx, min(v) AS mn, sum(v) AS s FROM e GROUP BY g"),
    ("a_nested", "SELECT n, count(*) AS groups FROM (SELECT g, count(*) AS n FROM f GROUP BY g) q GROUP BY n"),
    SHARED,
    ("a_distinct", "SELECT DISTINCT g, d FROM f WHERE v IS NOT NULL"),
    ("a_expr", "SELECT g % 2 AS parity, sum(v * 2) AS s2, count(*) AS n FROM f WHERE d <> 1 GROUP BY g % 2"),
]

JOIN_MVS = [
    ("j_inner", "SELECT f.id, f.v, dim.name FROM f JOIN dim ON f.g = dim.g"),
    ("j_left", "SELECT f.id, dim.name, dim.w FROM f LEFT JOIN dim ON f.g = dim.g"),
    ("j_right", "SELECT f.id, dim.g AS dg, dim.name FROM f RIGHT OUTER JOIN dim ON f.g = dim.g AND f.d = dim.w"),
    ("j_full", "SELECT f.id, f.g AS fg, dim.g AS dg FROM f FULL JOIN dim ON f.g = dim.g"),
    ("j_agg", "SELECT dim.name, count(*) AS n, sum(f.v) AS s, max(f.v) AS mx FROM f JOIN dim ON f.g = dim.g "
              "WHERE f.v > 0 GROUP BY dim.name"),
    ("j_three", "SELECT f.id, dim.name, e.v AS ev FROM f JOIN dim ON f.g = dim.g JOIN e ON e.g = dim.g "
                "WHERE e.v > 5"),
    ("j_sub", "SELECT q.g, q.n, dim.name FROM (SELECT g, count(*) AS n FROM f GROUP BY g) q "
              "LEFT JOIN dim ON q.g = dim.g"),
    SHARED,
    ("j_comma", "SELECT f.id, dim.w FROM f, dim WHERE f.g = dim.g AND f.v > dim.w"),
]

WINDOW_MVS = [
    ("w_tumble", "SELECT window_start, window_end, g, count(*) AS n, sum(v) AS s, max(v) AS mx "
                 "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, g"),
    ("w_hop", "SELECT window_start, count(*) AS n, min(v) AS mn, count(DISTINCT g) AS gs "
              "FROM HOP(ev, ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND) GROUP BY window_start"),
    ("w_join", "SELECT w.window_start, dim.name, w.n FROM (SELECT window_start, g, count(*) AS n "
               "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start, g) w JOIN dim ON w.g = dim.g"),
    ("w_rows", "SELECT id, window_start, window_end FROM HOP(ev, ts, INTERVAL '10' SECOND, INTERVAL '20' SECOND) "
               "WHERE v > 0"),
]

T0 = datetime(2026, 1, 1)
ids = st.integers(0, 10)
groups = st.one_of(st.none(), st.integers(0, 3))
ints = st.one_of(st.none(), st.integers(-3, 12))
decs = st.one_of(st.none(), st.sampled_from(["1.25", "2.50", "-3.10", "0.00"]))
names = st.one_of(st.none(), st.sampled_from(["x", "y", "z"]))
# Times on both sides of the Unix epoch: a window's start rounds down there, never toward zero.
times = st.one_of(st.none(), st.builds(lambda s: datetime(1970, 1, 1) + timedelta(seconds=s / 2), st.integers(-20, 80)))

stmt = st.one_of(
    st.tuples(st.just("insert"), st.just("f"),
              st.lists(st.tuples(ids, groups, st.integers(0, 2), ints, decs), min_size=1, max_size=6)),
    st.tuples(st.just("insert"), st.just("dim"),
              st.lists(st.tuples(st.integers(0, 4), names, st.integers(0, 2)), min_size=1, max_size=3)),
    st.tuples(st.just("insert"), st.just("e"), st.lists(st.tuples(groups, ints), min_size=1, max_size=4)),
    st.tuples(st.just("insert"), st.just("ev"), st.lists(st.tuples(ids, groups, ints, times), min_size=1, max_size=5)),
    st.builds(lambda s, lo: ("update", "ev", {"ts": f"ts + INTERVAL '{s}' SECOND"}, f"id >= {lo}"),
              st.integers(1, 12), ids),
    st.builds(lambda lo, hi: ("delete", "ev", f"id BETWEEN {lo} AND {hi}"), ids, ids),
    st.builds(lambda lo, hi: ("update", "f", {"v": "v + d"}, f"id BETWEEN {lo} AND {hi}"), ids, ids),
    st.builds(lambda g, lo: ("update", "f", {"g": str(g)}, f"id >= {lo}"), st.integers(0, 3), ids),
    st.builds(lambda lo, hi: ("delete", "f", f"id BETWEEN {lo} AND {hi}"), ids, ids),
    st.builds(lambda x: ("delete", "f", f"v >= {x}"), st.integers(4, 12)),  # the current max goes
    st.builds(lambda x: ("delete", "f", f"v <= {x}"), st.integers(-3, 4)),  # the current min goes
    st.builds(lambda g: ("delete", "f", f"g = {g}"), st.integers(0, 3)),  # a group empties
    st.builds(lambda g: ("delete", "dim", f"g = {g}"), st.integers(0, 4)),
    st.builds(lambda g: ("update", "dim", {"w": "w + 1"}, f"g <= {g}"), st.integers(0, 4)),
)


COMPACT_AT = st.one_of(st.none(), st.integers(0, 5))


def run(spark, tmp_path_factory, mvs, epochs, late, strategy, *, big: bool = False,
        compact_at: int | None = None) -> Path:
    """The MVs, the last two created before epoch `late`, equal DuckDB at every epoch, and again after a
    compaction following epoch `compact_at` (state then read from base files)."""
    model = Model()
    wh = tmp_path_factory.mktemp("wh")
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        if big:  # every table's and MV's step runs on the executors
            s.sql("SET big_epoch_rows = 0")
        for ddl, name, duck, cols, key in TABLES:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        created = []
        late_mvs = mvs[-2:]  # created mid-stream, over existing data
        for name, sql in mvs[:-2]:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
            created.append(name)
        for i, batch in enumerate(epochs):
            if i == late:
                for name, sql in late_mvs:
                    s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = '{strategy}') AS {sql}")
                    model.view(name, sql)
                    created.append(name)
                check(s, model, s.committed_epoch, created)
            for statement in batch:
                s.sql(to_sql(statement))
            model.apply_epoch(batch)
            check(s, model, epoch := s.flush(), created)
            if i == compact_at:
                s.compact()
                check(s, model, epoch, created)
    return wh


def check(session: sparkwave.Session, model: Model, epoch: int, names: list[str]) -> None:
    for name in names:
        got = multiset(rows_of(session.table(name, as_of=epoch)))
        want = multiset(model.rows(name))
        assert got == want, f"MV {name} differs from DuckDB at epoch {epoch}: extra {got - want}, missing {want - got}"


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(st.lists(stmt, min_size=1, max_size=5), min_size=3, max_size=6),
       late=st.integers(0, 3), strategy=st.sampled_from(["snapshot", "blocking"]), compact_at=COMPACT_AT)
def test_aggregates_equal_duckdb_at_every_epoch(spark, tmp_path_factory, epochs, late, strategy, compact_at):
    run(spark, tmp_path_factory, AGG_MVS, epochs, late, strategy, compact_at=compact_at)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(st.lists(stmt, min_size=1, max_size=5), min_size=3, max_size=6),
       late=st.integers(0, 3), strategy=st.sampled_from(["snapshot", "blocking"]), compact_at=COMPACT_AT)
def test_joins_equal_duckdb_at_every_epoch(spark, tmp_path_factory, epochs, late, strategy, compact_at):
    run(spark, tmp_path_factory, JOIN_MVS, epochs, late, strategy, compact_at=compact_at)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(st.lists(stmt, min_size=1, max_size=5), min_size=3, max_size=6),
       late=st.integers(0, 3), strategy=st.sampled_from(["snapshot", "blocking"]), compact_at=COMPACT_AT)
def test_windows_equal_duckdb_at_every_epoch(spark, tmp_path_factory, epochs, late, strategy, compact_at):
    run(spark, tmp_path_factory, WINDOW_MVS, epochs, late, strategy, compact_at=compact_at)


BIG_MVS = [AGG_MVS[0], AGG_MVS[2], AGG_MVS[3], JOIN_MVS[3], JOIN_MVS[4], SHARED, JOIN_MVS[1], AGG_MVS[4]]


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(st.lists(stmt, min_size=3, max_size=6), min_size=3, max_size=4), late=st.integers(0, 2))
def test_big_epochs_on_the_executors_equal_duckdb(spark, tmp_path_factory, epochs, late):
    """With `big_epoch_rows = 0` every step runs as Spark frames (tables joined with their
    snapshots, joins and aggregates with their state snapshots, logs written by the executors): the
    MVs equal DuckDB's all the same, and MVs created late backfill from the state they wrote."""
    wh = run(spark, tmp_path_factory, BIG_MVS, epochs, late, "snapshot", big=True)
    early = [t for _, t, *_ in TABLES] + [n for n, _ in BIG_MVS[:-2]]
    logs = [f for name in early for f in (wh / "tables" / name).rglob("e*.parquet") if f.parent.name == "log"]
    assert logs, "no epoch logged a change"
    writers = {pq.ParquetFile(f).metadata.created_by.split(" ")[0] for f in logs}
    assert writers == {"parquet-mr"}, f"logs written on the driver (pyarrow) in a big epoch: {writers}"


def test_min_max_over_an_append_only_input_keep_no_value_counts(session):
    """Over an append-only table (and an inner join of two), min and max only fold in new values:
    the MV has no value-count state for them; over a table with a key, whose rows can be retracted,
    it does. (The oracle tests above check both kinds' rows.)"""
    session.sql("CREATE TABLE e (g int, v int) APPEND ONLY")
    session.sql("CREATE TABLE e2 (g int, w int) APPEND ONLY")
    session.sql("CREATE TABLE k (id int, g int, v int, PRIMARY KEY (id))")
    session.sql("INSERT INTO e VALUES (1, 5), (1, 7), (2, 3)")
    session.sql("INSERT INTO e2 VALUES (1, 10), (2, 20)")
    session.sql("INSERT INTO k VALUES (1, 1, 5), (2, 1, 7)")
    session.flush()
    session.sql("CREATE MATERIALIZED VIEW m_e AS SELECT g, max(v) AS mx, min(v) AS mn FROM e GROUP BY g")
    session.sql("CREATE MATERIALIZED VIEW m_j AS SELECT e.g, max(e2.w) AS mx FROM e JOIN e2 ON e.g = e2.g GROUP BY e.g")
    session.sql("CREATE MATERIALIZED VIEW m_k AS SELECT g, max(v) AS mx FROM k GROUP BY g")
    session.sql("INSERT INTO e VALUES (1, 9), (2, 1)")
    session.flush()

    def value_counts(name: str) -> list[str]:
        return [x for x in session.catalog.relation(name).definition["states"] if re.fullmatch(r"a\d+v\d+", x)]

    assert value_counts("m_e") == value_counts("m_j") == []
    assert len(value_counts("m_k")) == 1
    assert sorted(rows_of(session.table("m_e"))) == [(1, 9, 5), (2, 3, 1)]
    assert sorted(rows_of(session.table("m_j"))) == [(1, 10), (2, 20)]


def scanned_rows(spark, frame) -> int:
    """The rows a frame's Parquet scans output: those of the row groups their statistics did not
    skip (the scans filter no rows themselves). Evaluated here, without adaptive execution, so that
    the plan's scan nodes are the ones that ran."""
    before = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        probe = frame.select("*")
        probe.collect()
        leaves = probe._jdf.queryExecution().executedPlan().collectLeaves()
        scans = [leaves.apply(i) for i in range(leaves.size())]
        return sum(s.metrics().get("numOutputRows").get().value() for s in scans
                   if s.nodeName().startswith("Scan parquet"))
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", before)


def test_a_big_epochs_state_lookups_read_only_the_changes_key_range(session, spark, monkeypatch):
    """On the executors, an aggregate's and a join's state lookups are bounded by the range of the
    change's keys (timestamptz and text keys; NULL keys too): over compacted states of
    20,000 keys sorted in 4,096-row groups, a change of 11 keys and a NULL key scans one row group
    per state table, not the state, and every MV equals DuckDB."""
    from sparkwave.storage.state import state_relations
    from sparkwave.stream.operator import FrameIO

    n = 20_000
    session.sql("CREATE TABLE t (id bigint, g bigint, tag varchar, ts timestamptz, v int, PRIMARY KEY (id))")
    session.sql("CREATE TABLE d (tag varchar, name varchar, PRIMARY KEY (tag))")
    mvs = {"by_ts": "SELECT ts, g, count(*) AS n, max(v) AS mx FROM t GROUP BY ts, g",
           "joined": "SELECT t.id, t.v, d.name FROM t JOIN d ON t.tag = d.tag"}
    for name, sql in mvs.items():
        session.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    tags = [f"t{i:06d}" for i in range(n)]
    session.insert("t", pa.table({"id": pa.array(range(n), pa.int64()), "g": pa.array(range(n), pa.int64()),
                                  "tag": tags, "v": pa.array([i % 7 for i in range(n)], pa.int32()),
                                  "ts": pa.array([T0 + timedelta(seconds=i) for i in range(n)],
                                                 pa.timestamp("us", tz="UTC"))}).select(
        ["id", "g", "tag", "ts", "v"]))
    session.insert("d", pa.table({"tag": tags, "name": [f"n{i % 50}" for i in range(n)]}))
    epoch = session.flush()
    for mv in mvs:  # their state bases, sorted by the leading key column
        for rel in state_relations(session.rt, session.catalog.relation(mv)):
            assert session.maintenance.run(rel, epoch)

    lookups: list[tuple[str, object]] = []
    plain = FrameIO.state_rows

    def recording(self, suffix, near=None):
        rows = plain(self, suffix, near)
        lookups.append((f"{self.owner}.{suffix}", rows))
        return rows

    monkeypatch.setattr(FrameIO, "state_rows", recording)
    session.sql("SET big_epoch_rows = 0")
    session.sql("UPDATE t SET v = v + 1 WHERE id BETWEEN 100 AND 110")
    session.sql("INSERT INTO t VALUES (20000, NULL, NULL, NULL, 3)")
    session.flush()

    assert sorted(name for name, _ in lookups) == sorted(
        f"{mv}.{s}" for mv in mvs for s in session.catalog.relation(mv).definition["states"]
        if not (mv == "joined" and s.endswith("l")))  # the join's left side changed: only the right is looked up
    for name, rows in lookups:
        scanned = scanned_rows(spark, rows)
        assert 0 < scanned <= 4096, f"state {name}: a lookup of at most 12 keys scanned {scanned} of its {n} rows"

    db = connect()
    for table in ("t", "d"):
        db.register(table, session.table(table).toArrow())
    for name, sql in mvs.items():
        got, want = multiset(rows_of(session.table(name))), multiset(db.execute(sql).fetchall())
        assert got == want, f"MV {name} differs from DuckDB: extra {got - want}, missing {want - got}"


KEY_VALUES = {  # each type's extremes, a NULL, and values whose text is easy to get wrong
    "smallint": ["-32768", "32767", "NULL"],
    "bigint": ["-9223372036854775808", "9223372036854775807", "NULL"],
    "date": ["DATE '0001-01-01'", "DATE '9999-12-31'", "DATE '1969-12-31'"],
    "decimal(38,10)": ["-9999999999999999999999999999.9999999999", "0.0000000001", "NULL"],
    "varchar": ["''", "'z\u00e9\u4e2d'", "'a\\nb'"],
    "timestamp": ["TIMESTAMP_NTZ '0001-01-01 00:00:00'", "TIMESTAMP_NTZ '9999-12-31 23:59:59.999999'"],
    "timestamptz": ["TIMESTAMP_LTZ '2026-11-01 08:30:00.000001Z'", "TIMESTAMP_LTZ '1900-01-01 00:00:00Z'"],
}


def test_a_key_range_holds_for_every_key_of_the_change(spark):
    """The bound of a big epoch's state lookup keeps every value of the change (each type's
    extremes, NULL, non-ASCII text) and drops a value outside; floats get no bound, nor do keys of
    two types."""
    from sparkwave.core.schema import SqlType
    from sparkwave.core.zset_frames import key_range

    for name, values in KEY_VALUES.items():
        t = SqlType(name)
        rows = spark.sql("SELECT * FROM VALUES " + ", ".join(f"(CAST({v} AS {t.spark}))" for v in values) + " AS v(k)")
        where = key_range(rows, "k", "k", t)
        assert where is not None, name
        assert rows.where(where).count() == rows.count(), f"{name}: the bound drops a key of the change"
        smallest = rows.where("k IS NOT NULL").orderBy("k").limit(1)
        narrowed = key_range(rows.exceptAll(smallest), "k", "k", t)
        assert narrowed is not None and smallest.where(narrowed).count() == 0, f"{name}: the bound is not tight"
        other = SqlType("int") if name == "bigint" else SqlType("bigint")
        assert key_range(rows, "k", "k", other) is None, name
    doubles = spark.sql("SELECT * FROM VALUES (1.5D), (CAST('NaN' AS DOUBLE)) AS v(k)")
    assert key_range(doubles, "k", "k", SqlType("double")) is None


TOP_MVS = [  # what is above a tree's last aggregate (through operators of one input): the build's top
    ("t_q4", "SELECT q.name, avg(q.mx) AS a, count(*) AS n FROM (SELECT dim.g, dim.name, max(f.v) AS mx "
             "FROM f JOIN dim ON f.g = dim.g GROUP BY dim.g, dim.name) q GROUP BY q.name", "snapshot"),  # q4's shape
    ("t_top2", "SELECT p, g, n FROM (SELECT p, g, n, row_number() OVER (PARTITION BY p ORDER BY n DESC, g) AS rn "
               "FROM (SELECT g % 2 AS p, g, count(*) AS n FROM f GROUP BY g % 2, g) q) r WHERE rn <= 2", "blocking"),
    (*AGG_MVS[4], "blocking"),  # an aggregate of an aggregate, built before the catalog has its state tables
    (*AGG_MVS[0], "snapshot"),  # only the MV's projection above its aggregate
    (*AGG_MVS[2], "blocking"),  # a scalar aggregate: its row over no input
    ("t_q4_chunks", "SELECT q.name, avg(q.mx) AS a, count(*) AS n FROM (SELECT dim.g, dim.name, max(f.v) AS mx "
                    "FROM f JOIN dim ON f.g = dim.g GROUP BY dim.g, dim.name) q GROUP BY q.name", "chunks"),  # merged
]


def test_a_builds_top_runs_on_the_driver_as_spark_would_run_it(spark, tmp_path_factory):
    """Above a tree's last aggregate, a Spark build collects the aggregate's output and runs the
    operators above it on the driver, writing the MV and their state tables from Arrow; past
    `big_epoch_rows` rows (or `TOP_ROWS`) Spark builds them too. Both give the same tables, equal
    to DuckDB's, and the MVs then follow DML alike."""
    names = [n for n, _, _ in TOP_MVS]
    built: dict[int, dict[str, object]] = {}
    # 10: a Spark build (the snapshots have 44 rows) whose tops have 10 rows or less; 0: all Spark
    for big, writer in ((10, "parquet-cpp-arrow"), (0, "parquet-mr")):
        model = Model()
        with sparkwave.connect(tmp_path_factory.mktemp("wh"), spark=spark, barrier_interval_ms=3_600_000) as s:
            s.sql(f"SET big_epoch_rows = {big}")
            for ddl, name, duck, cols, key in TABLES[:2]:
                s.sql(ddl)
                model.table(name, duck, cols, key)
            seed = [("insert", "f", [(i, i % 5, i % 3, (i * 7) % 11 if i % 6 else None, f"{i}.25") for i in range(40)]),
                    ("insert", "dim", [(g, f"n{g % 2}", g) for g in range(4)])]
            for statement in seed:
                s.sql(to_sql(statement))
            model.apply_epoch(seed)
            s.flush()
            for name, sql, strategy in TOP_MVS:  # ("chunks": 15 rows of f a chunk, then a merge chunk)
                s.sql(f"SET backfill_chunk_rows = {15 if strategy == 'chunks' else 10_000_000}")
                s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = "
                      f"'{'snapshot' if strategy == 'chunks' else strategy}') AS {sql}")
                model.view(name, sql)
            s.sql("SET big_epoch_rows = 1000000")  # the epochs' steps on the driver again
            epoch = s.committed_epoch
            check(s, model, epoch, names)
            for name in names:
                files = s.catalog.base_at(name, epoch).files
                assert {pq.ParquetFile(f).metadata.created_by.split(" ")[0] for f in files} == {writer}, name
            job = next(j for j in s.jobs() if j.name == "t_q4_chunks")
            assert len(s.catalog.job_chunks(job.id)) > 2, "t_q4_chunks was built in one chunk"
            built[big] = {r.name: multiset(rows_of(s.rt.snapshot(r, epoch))) for r in s.catalog.relations(
                internal=True) if r.name.split(".")[0] in names}
            for batch in ([("update", "f", {"v": "v + 3"}, "id % 3 = 0"), ("delete", "dim", "g = 1")],
                          [("delete", "f", "v >= 9"), ("insert", "f", [(50, 1, 0, 2, "1.50"), (51, 4, 1, 20, None)])],
                          [("delete", "f", "g = 4"), ("update", "dim", {"name": "'n9'"}, "g = 2")]):
                for statement in batch:
                    s.sql(to_sql(statement))
                model.apply_epoch(batch)
                check(s, model, s.flush(), names)
    assert built[10] == built[0]
