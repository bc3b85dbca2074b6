"""Set operations and grouping sets (`stream/union.py`, `frontend/plan/setops.py`,
`frontend/plan/grouping_sets.py`): after each committed epoch every MV equals DuckDB's evaluation of
its SQL as an exact multiset, under hypothesis-generated inserts, updates and deletes (duplicates
across branches, NULLs in every column, groups emptied); half the MVs are created mid-stream over
existing rows (snapshot or blocking backfill, a chunked one too); and the three evaluations of a
union (per epoch in Arrow, per big epoch on the executors, from snapshots) give the same MVs and
state tables."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkwave
from sparkwave.core.errors import SqlError
from tests.integration.test_oracle import FAST_PHASES
from tests.integration.test_parity import tables
from tests.oracle import Model, check_views, run_with_late_views, to_sql

TABLES = [
    ("CREATE TABLE l (id int, g int, v int, PRIMARY KEY (id))", "l", "id INTEGER, g INTEGER, v INTEGER",
     ["id", "g", "v"], ["id"]),
    ("CREATE TABLE r (id int, g int, w bigint, PRIMARY KEY (id))", "r", "id INTEGER, g INTEGER, w BIGINT",
     ["id", "g", "w"], ["id"]),
    ("CREATE TABLE e (g int, v int) APPEND ONLY", "e", "g INTEGER, v INTEGER", ["g", "v"], []),
]

SET_MVS = [
    # three branches, INT and BIGINT unified as BIGINT, equal rows in several branches, a NULL branch
    ("u_all", "SELECT g, v FROM l UNION ALL SELECT g, w FROM r UNION ALL SELECT g, v FROM e "
              "UNION ALL SELECT NULL, NULL"),
    ("u_distinct", "SELECT g, v FROM l UNION SELECT g, w FROM r UNION SELECT g, v FROM e"),
    ("i_set", "SELECT g, v FROM l INTERSECT SELECT g, w FROM r"),
    ("x_set", "SELECT g, v FROM l EXCEPT SELECT g, v FROM e"),
    ("i_all", "SELECT g FROM l INTERSECT ALL SELECT g FROM r"),
    ("x_all", "SELECT g, v FROM e EXCEPT ALL SELECT g, v FROM l"),
    # under an aggregate, as a join input, inside a CTE, over aggregates, with a top-n over it
    ("u_agg", "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS mx FROM (SELECT g, v FROM l UNION ALL "
              "SELECT g, v FROM e) q GROUP BY g"),
    ("u_join", "SELECT q.g, q.v, r.id FROM (SELECT g, v FROM l UNION ALL SELECT g, v FROM e) q JOIN r ON q.g = r.g"),
    ("u_cte", "WITH a AS (SELECT g, count(*) AS n FROM l GROUP BY g), b AS (SELECT g, count(*) AS n FROM r "
              "GROUP BY g) SELECT g, n FROM a UNION ALL SELECT g, n FROM b"),
    ("u_top", "SELECT g, v FROM l UNION ALL SELECT g, w FROM r ORDER BY v DESC NULLS LAST, g NULLS LAST LIMIT 3"),
    ("u_nested", "SELECT g FROM (SELECT g FROM l EXCEPT SELECT g FROM r) a UNION ALL "
                 "(SELECT g FROM e INTERSECT SELECT g FROM l)"),
    # append-only inputs: an append-only MV; constant rows only
    ("u_append", "SELECT g, v FROM e UNION ALL SELECT v, g FROM e WHERE g > 1"),
    ("u_const", "SELECT 1 AS x UNION ALL SELECT 2 UNION ALL SELECT 2"),
]

GROUPING_MVS = [
    ("g_rollup", "SELECT g, v, count(*) AS n, sum(id) AS s, GROUPING(g, v) AS gr FROM l GROUP BY ROLLUP (g, v)"),
    ("g_cube", "SELECT g, v % 2 AS p, count(*) AS n, min(v) AS mn FROM l GROUP BY CUBE (g, v % 2)"),
    ("g_sets", "SELECT g, v, max(v) AS mx, count(v) AS c FROM e GROUP BY GROUPING SETS ((g), (v), (), (g))"),
    ("g_join", "SELECT l.g, r.id, count(*) AS n, sum(r.w) AS sw FROM l JOIN r ON l.g = r.g "
               "GROUP BY GROUPING SETS ((l.g), (l.g, r.id)) HAVING count(*) > 0"),
    ("g_mixed", "SELECT g, v, count(*) AS n FROM l WHERE id > 1 GROUP BY g, ROLLUP (v)"),
    ("g_distinct", "SELECT DISTINCT l.g, sum(v) > 2 AS big FROM l GROUP BY ROLLUP (g, l.v)"),  # over every set's rows
]

ids = st.integers(0, 8)
groups = st.one_of(st.none(), st.integers(0, 3))
ints = st.one_of(st.none(), st.integers(0, 4))
stmt = st.one_of(
    st.tuples(st.just("insert"), st.just("l"), st.lists(st.tuples(ids, groups, ints), min_size=1, max_size=5)),
    st.tuples(st.just("insert"), st.just("r"), st.lists(st.tuples(ids, groups, ints), min_size=1, max_size=4)),
    st.tuples(st.just("insert"), st.just("e"), st.lists(st.tuples(groups, ints), min_size=1, max_size=4)),
    st.builds(lambda lo, hi: ("update", "l", {"v": "v + 1"}, f"id BETWEEN {lo} AND {hi}"), ids, ids),
    st.builds(lambda g, lo: ("update", "l", {"g": str(g)}, f"id >= {lo}"), st.integers(0, 3), ids),
    st.builds(lambda lo, hi: ("delete", "l", f"id BETWEEN {lo} AND {hi}"), ids, ids),
    st.builds(lambda g: ("delete", "l", f"g = {g}"), st.integers(0, 3)),  # a group empties
    st.builds(lambda lo: ("delete", "r", f"id >= {lo}"), ids),
    st.builds(lambda lo: ("update", "r", {"w": "w + 1", "g": "g + 1"}, f"id <= {lo}"), ids),
)


epochs_of = st.lists(st.lists(stmt, min_size=1, max_size=5), min_size=3, max_size=5)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=epochs_of, late=st.integers(1, 2), strategy=st.sampled_from(["snapshot", "blocking"]),
       compact_at=st.one_of(st.none(), st.integers(0, 4)))
def test_set_operations_equal_duckdb_at_every_epoch(spark, tmp_path_factory, epochs, late, strategy, compact_at):
    run_with_late_views(spark, tmp_path_factory.mktemp("wh"), TABLES, SET_MVS, epochs, late, strategy,
                        append_only="u_append", compact_at=compact_at)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=epochs_of, late=st.integers(1, 2), strategy=st.sampled_from(["snapshot", "blocking"]),
       compact_at=st.one_of(st.none(), st.integers(0, 4)))
def test_grouping_sets_equal_duckdb_at_every_epoch(spark, tmp_path_factory, epochs, late, strategy, compact_at):
    run_with_late_views(spark, tmp_path_factory.mktemp("wh"), TABLES, GROUPING_MVS, epochs, late, strategy,
                        append_only="u_append", compact_at=compact_at)


SEED = [("insert", "l", [(i, i % 4 if i % 5 else None, i % 3 if i % 7 else None) for i in range(40)]),
        ("insert", "r", [(i, i % 5, i % 3) for i in range(0, 40, 3)]),
        ("insert", "e", [(i % 4, i % 3) for i in range(30)] + [(None, None), (None, None)])]
AFTER = [[("update", "l", {"v": "v + 1"}, "id % 3 = 0"), ("delete", "r", "id > 30"), ("insert", "e", [(1, 1)])],
         [("delete", "l", "g = 2"), ("insert", "l", [(50, None, 1), (51, 1, None)]),
          ("update", "r", {"w": "w + 1", "g": "g + 1"}, "id <= 9")]]
CHUNKED = [SET_MVS[0], SET_MVS[3], SET_MVS[6], SET_MVS[7], SET_MVS[8], GROUPING_MVS[0], GROUPING_MVS[3]]
# CORRESPONDING (which DuckDB spells otherwise): the MV's SQL, and the same rows with the columns listed
CORRESPONDING = [("c_all", "SELECT * FROM l UNION ALL CORRESPONDING SELECT * FROM r",
                  "SELECT id, g FROM l UNION ALL SELECT id, g FROM r"),
                 ("c_by", "SELECT * FROM l UNION CORRESPONDING BY (v, g) SELECT g, w AS v, id FROM r",
                  "SELECT v, g FROM l UNION SELECT w, g FROM r")]


def test_a_chunked_backfill_reads_the_other_branches_once(spark, tmp_path_factory):
    """A backfill in chunks of 15 rows over 40 + 14 + 32 rows: a union's branches that do not hold the
    driving scan are read whole by the first chunk alone, so the chunks add up to DuckDB's rows; and
    CORRESPONDING [BY] matches columns by name."""
    model = Model()
    with sparkwave.connect(tmp_path_factory.mktemp("wh"), spark=spark, barrier_interval_ms=3_600_000) as s:
        for ddl, name, duck, cols, key in TABLES:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        for statement in SEED:
            s.sql(to_sql(statement))
        model.apply_epoch(SEED)
        s.flush()
        s.sql("SET backfill_chunk_rows = 15")
        for name, sql, *same in [*CHUNKED, *CORRESPONDING]:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, same[0] if same else sql)
        names = [n for n, *_ in [*CHUNKED, *CORRESPONDING]]
        chunked = [j.name for j in s.jobs() if len(s.catalog.job_chunks(j.id)) > 2]
        assert "u_agg" in chunked, f"u_agg was built in one chunk (chunked: {chunked})"
        check_views(s, model, s.committed_epoch, names)
        for batch in AFTER:
            for statement in batch:
                s.sql(to_sql(statement))
            model.apply_epoch(batch)
            check_views(s, model, s.flush(), names)


PARITY = [SET_MVS[0], SET_MVS[1], SET_MVS[4], SET_MVS[6], SET_MVS[7], SET_MVS[11], GROUPING_MVS[0],
          GROUPING_MVS[3]]


def _evaluate(spark, wh: Path, *, big: bool) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """Every MV's and state table's rows after the seed and two epochs of changes (every step on
    the executors if `big`), then the MVs built again from snapshots (`<mv>_built`, blocking)."""
    mvs = dict(PARITY)
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(f"SET big_epoch_rows = {0 if big else 1_000_000}")
        for ddl, *_ in TABLES:
            s.sql(ddl)
        for name, sql in mvs.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        for batch in [SEED, *AFTER]:
            for statement in batch:
                s.sql(to_sql(statement))
            s.flush()
        stepped = tables(s, set(mvs))
        for name, sql in mvs.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name}_built WITH (backfill_strategy = 'blocking') AS {sql}")
        return stepped, tables(s, set(mvs), "_built")


def test_a_unions_three_evaluations_agree(spark, tmp_path_factory):
    """Per epoch in Arrow, per big epoch as Spark frames (`big_epoch_rows = 0`) and from snapshots:
    the same MV rows and the same state tables (the operators above and below the union's)."""
    on_driver, built = _evaluate(spark, tmp_path_factory.mktemp("wh"), big=False)
    on_executors, _ = _evaluate(spark, tmp_path_factory.mktemp("wh"), big=True)
    assert set(on_driver) > {n for n, _ in PARITY}, sorted(on_driver)
    for path, got in (("per big epoch", on_executors), ("from snapshots", built)):
        assert got.keys() == on_driver.keys(), f"{path}: other tables {sorted(got)} than {sorted(on_driver)}"
        for name, rows in on_driver.items():
            assert got[name] == rows, f"{name} {path} differs: extra {got[name] - rows}, missing {rows - got[name]}"


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT id FROM l UNION ALL SELECT id, g FROM r", ["each UNION ALL query must have the same number of columns",
                                                        "the first query has 1, query 2 has 2"]),
    ("SELECT v FROM l INTERSECT SELECT 'x'", ["INTERSECT types integer and text cannot be matched", "'v'"]),
    ("SELECT g FROM l UNION ALL SELECT g FROM r ORDER BY 2 LIMIT 1", ["ORDER BY position 2"]),
    ("SELECT g, GROUPING(v) AS x FROM l GROUP BY ROLLUP (g)", ["arguments to GROUPING", "v"]),
])
def test_what_a_set_operation_cannot_be_is_an_error_naming_it(session, sql, words):
    for ddl, *_ in TABLES:
        session.sql(ddl)
    with pytest.raises(SqlError) as info:
        session.sql(f"CREATE MATERIALIZED VIEW bad AS {sql}")
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"


def test_a_union_catches_up_on_its_upstreams_logs_after_its_snapshot(spark, tmp_path_factory):
    """A backfill paused after its CREATE while the main graph commits epochs on all three upstreams
    consumes their logs in its log-store phase (a stateless union's slice of epochs over several
    upstreams, and a stateful one's epochs), then equals DuckDB's rows."""
    model = Model()
    mvs = [SET_MVS[0], SET_MVS[6], GROUPING_MVS[0]]
    with sparkwave.connect(tmp_path_factory.mktemp("wh"), spark=spark, barrier_interval_ms=3_600_000) as s:
        for ddl, name, duck, cols, key in TABLES:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        for statement in SEED:
            s.sql(to_sql(statement))
        model.apply_epoch(SEED)
        s.flush()
        s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
        for name, sql in mvs:
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
        for batch in AFTER:
            for statement in batch:
                s.sql(to_sql(statement))
            model.apply_epoch(batch)
            s.flush()
        paused = {j.name: j.id for j in s.jobs()}
        for name, _ in mvs:
            s.sql(f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = DEFAULT")
        s.sql("WAIT")
        for name, _ in mvs:
            phases = {step[1] for step in s.catalog.job_steps(paused[name])}
            assert "log_store" in phases, f"{name}: the log-store phase was not exercised ({phases})"
        check_views(s, model, s.committed_epoch, [n for n, _ in mvs])


# Found by the hypothesis test above on 2026-11-29: u_distinct kept (NULL, 0) after l's row (3, NULL, 0)
# became (3, NULL, 1). Any aggregate backfilled over a NULL group did: a state file's row group holding
# (1, NULL) and (NULL, 0) counted as "one g value" and was pruned for the key (NULL, 0)
# (storage/file_index.py `single`; tests/unit/test_file_index_nulls.py).
KEPT_NULL_GROUP = [
    [("update", "r", {"w": "w + 1", "g": "g + 1"}, "id <= 6"), ("delete", "l", "g = 1"), ("delete", "r", "id >= 5"),
     ("update", "r", {"w": "w + 1", "g": "g + 1"}, "id <= 4")],
    [("insert", "l", [(4, 1, None), (5, 1, None), (3, None, 0)]), ("update", "l", {"v": "v + 1"}, "id BETWEEN 0 AND 7"),
     ("delete", "l", "id BETWEEN 0 AND 1"), ("update", "l", {"g": "2"}, "id >= 1"),
     ("delete", "l", "id BETWEEN 8 AND 2")],
    [("update", "l", {"g": "1"}, "id >= 5"), ("insert", "r", [(3, 3, None)]), ("insert", "e", [(3, None), (None, 4)]),
     ("insert", "e", [(3, None)])],
    [("update", "l", {"v": "v + 1"}, "id BETWEEN 1 AND 8"),
     ("insert", "r", [(3, 1, None), (8, 2, 1), (8, 3, 4), (0, 0, 0)])],
    [("insert", "e", [(None, None)])],
]


def test_a_union_distinct_retracts_a_null_group_with_every_set_mv_running(spark, tmp_path_factory):
    run_with_late_views(spark, tmp_path_factory.mktemp("wh"), TABLES, SET_MVS, KEPT_NULL_GROUP, 2, "blocking")
