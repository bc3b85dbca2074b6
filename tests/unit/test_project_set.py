"""Spark-free tests of set-returning functions: the `ProjectSet` operator (`stream/project_set.py`: its
JSON, pruning, the Spark array each call becomes) and the planner (`frontend/plan/project_set.py`):
where a call may be, PostgreSQL's column names, the MV's key with the ordinal, what is refused. The
rows themselves are checked against DuckDB in tests/integration/test_project_set.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparkwave.core.errors import SqlError
from sparkwave.frontend.plan.planner import MvPlan
from sparkwave.frontend.plan.static_catalog import StaticCatalog
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.statements import parse
from sparkwave.stream import project_set_arrow
from sparkwave.stream.plan import OPERATORS, from_json
from sparkwave.stream.project_set import MAX_SERIES_ROWS, ProjectSet
from sparkwave.stream.scan import Scan

TABLES = """
CREATE TABLE t (id int PRIMARY KEY, a int, b bigint, s varchar, ts timestamp);
CREATE TABLE e (a int, b int) APPEND ONLY;
"""


def _plan(sql: str) -> MvPlan:
    catalog = StaticCatalog(StaticTypes())
    catalog.run(TABLES)
    (stmt,) = parse(f"CREATE MATERIALIZED VIEW m AS {sql}")
    return catalog.plan(stmt)  # type: ignore[arg-type]


def _sets(plan: MvPlan) -> list[ProjectSet]:
    return [op for op in plan.root.walk() if isinstance(op, ProjectSet)]


def _project_set() -> ProjectSet:
    scan = Scan(1, [("c1_id", "int"), ("c2_a", "int"), ("c3_s", "varchar")], ["c1_id"], relation="t",
                exprs=[("c1_id", "`id`"), ("c2_a", "`a`"), ("c3_s", "`s`")])
    return ProjectSet(2, [("c1_id", "int"), ("c2_a", "int"), ("c3_s", "varchar"), ("c4_g", "int"),
                          ("c5_u", "varchar"), ("c6_o", "bigint")], ["c1_id", "c6_o"], input=scan,
                      sets=[("c4_g", "generate_series", ["1", "`c2_a`", "1"]), ("c5_u", "unnest", ["'x'", "`c3_s`"])],
                      ordinal="c6_o")


def test_the_operator_is_stored_as_json_and_read_back_unchanged() -> None:
    assert OPERATORS["project_set"] is ProjectSet
    ps = _project_set()
    d = ps.to_json()
    assert d["op"] == "project_set" and d["ordinal"] == "c6_o"
    assert d["sets"] == [["c4_g", "generate_series", ["1", "`c2_a`", "1"]], ["c5_u", "unnest", ["'x'", "`c3_s`"]]]
    back = from_json(d)
    assert isinstance(back, ProjectSet) and back.to_json() == d


def test_pruning_keeps_every_set_and_the_ordinal_and_what_the_sets_read() -> None:
    """A set nobody reads still decides how many rows an input row makes: it stays, and so do the
    input columns its arguments read; a passed column nobody reads goes."""
    ps = _project_set()
    ps.prune({"c1_id"})
    assert ps.names == ["c1_id", "c4_g", "c5_u", "c6_o"]
    assert ps.passed == ["c1_id"]
    assert set(ps.input.names) == {"c1_id", "c2_a", "c3_s"}  # read by generate_series and unnest


def test_each_call_is_a_guarded_spark_array() -> None:
    ps = _project_set()
    series, unnest = ps.array_sql(0), ps.array_sql(1)
    assert unnest == "array('x', `c3_s`)"
    assert "sequence((1), (`c2_a`), (1))" in series and series.startswith("CASE WHEN")
    assert f"more than {MAX_SERIES_ROWS} rows" in series  # an integer series is bounded per row


@pytest.mark.parametrize(("sql", "visible"), [
    ("SELECT generate_series(1, 3)", ["generate_series"]),
    ("SELECT id, unnest(ARRAY[a, 2]) FROM t", ["id", "unnest"]),
    ("SELECT id, generate_series(a, 3) * 2 AS g FROM t", ["id", "g"]),
    ("SELECT * FROM generate_series(1, 3)", ["generate_series"]),
    ("SELECT * FROM generate_series(1, 3) AS g", ["g"]),
    ("SELECT * FROM generate_series(1, 3) WITH ORDINALITY AS g(v, n)", ["v", "n"]),
    ("SELECT * FROM unnest(ARRAY['a', 'b']) WITH ORDINALITY", ["unnest", "ordinality"]),
    ("SELECT * FROM e, unnest(ARRAY[e.a, e.b]) WITH ORDINALITY AS u(x, n)", ["a", "b", "x", "n"]),
    ("SELECT t.id, x, y FROM t, unnest(ARRAY[t.a], ARRAY[t.s, 'z']) AS u(x, y)", ["id", "x", "y"]),
    ("SELECT id, g FROM t CROSS JOIN LATERAL generate_series(t.ts, t.ts + INTERVAL '1 day', INTERVAL '1 hour') g",
     ["id", "g"]),
])
def test_columns_are_named_as_postgresql_names_them(sql: str, visible: list[str]) -> None:
    plan = _plan(sql)
    assert [c.name for c in plan.schema.columns if not c.hidden] == visible
    assert len(_sets(plan)) == 1
    hidden = [c.name for c in plan.schema.columns if c.hidden]
    assert "projected_row_id" in hidden and "projected_row_id" in plan.schema.key  # equal elements stay apart


def test_the_types_are_postgresqls() -> None:
    plan = _plan("SELECT generate_series(a, b) AS g, unnest(ARRAY[a, NULL]) AS u, "
                 "generate_series(ts, ts, INTERVAL '1 hour') AS w FROM t")
    types = {c.name: c.type.name for c in plan.schema.columns}
    assert (types["g"], types["u"], types["w"]) == ("bigint", "int", "timestamp")
    # a bigint step makes PostgreSQL's bigint series
    assert _plan("SELECT generate_series(a, 5, 2::bigint) AS g FROM t").schema.column("g").type.name == "bigint"


def test_calls_of_one_list_share_one_project_set_after_where() -> None:
    plan = _plan("SELECT id, generate_series(1, a) AS g, unnest(ARRAY[s, 'x']) AS u FROM t WHERE id > 2 AND a < s::int")
    (ps,) = _sets(plan)
    assert [fn for _, fn, _ in ps.sets] == ["generate_series", "unnest"]
    assert "unnest" not in str(plan.root.predicate or "")  # WHERE is below the project set


def test_an_append_only_input_makes_an_append_only_mv() -> None:
    assert _plan("SELECT a, unnest(ARRAY[a, b]) AS x FROM e").schema.append_only
    assert not _plan("SELECT a, unnest(ARRAY[a, b]) AS x FROM t").schema.append_only


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT id FROM t WHERE generate_series(1, a) > 1", "not allowed in WHERE"),
    ("SELECT id FROM t GROUP BY id HAVING max(a) > unnest(ARRAY[1])", "not allowed in HAVING"),
    ("SELECT a, count(*), generate_series(1, 2) FROM t GROUP BY a", "with GROUP BY"),
    ("SELECT DISTINCT unnest(ARRAY[a]) FROM t", "DISTINCT"),
    ("SELECT unnest(s) FROM t", "takes an array constructor"),
    ("SELECT generate_series(ts, ts) FROM t", "needs a step"),
    ("SELECT generate_series('a', 'b') FROM t", "generate_series() of varchar is not supported"),
    # a numeric step makes PostgreSQL's numeric series (1, 2.5, 4): a cast of 1.5 to int would give 1, 2, .., 5
    ("SELECT generate_series(1, 5, 1.5) FROM t", "generate_series() of decimal"),
    ("SELECT g FROM t, generate_series(t.a, 5, 0.5) AS g", "generate_series() of decimal"),
    ("SELECT * FROM generate_series(1, t.a) g, t", "only as one of the last FROM items"),
    ("SELECT * FROM t LEFT JOIN LATERAL generate_series(1, t.a) g ON true", "write a comma or CROSS JOIN"),
    ("SELECT t.id, g FROM t JOIN generate_series(1, 3) g ON g.g = t.a JOIN e ON e.a = t.a", None),  # a constant item
    ("SELECT * FROM generate_series(1, 2) WITH ORDINALITY AS g(a, b, c)", "2 columns available but 3"),
    ("SELECT * FROM t WITH ORDINALITY", "applies to a set-returning function"),
    ("SELECT generate_series(1, generate_series(1, a)) FROM t", "may not be nested"),
    # PostgreSQL 10+ and RisingWave refuse these (a call is not evaluated conditionally)
    ("SELECT id, CASE WHEN a > 1 THEN generate_series(1, 2) END AS g FROM t", "not allowed in CASE or COALESCE"),
    ("SELECT id, coalesce(unnest(ARRAY[a]), 0) AS g FROM t", "not allowed in CASE or COALESCE"),
    # PostgreSQL adds a month step to the previous element (Jan 31, Feb 29, Mar 29); Spark's sequence does not
    ("SELECT generate_series(ts, ts, INTERVAL '1 month') FROM t", "must have a fixed length"),
    ("SELECT g FROM t, generate_series(t.ts, t.ts, '1 year'::interval + INTERVAL '1 day') AS g",
     "must have a fixed length"),
])
def test_what_is_refused_says_so(sql: str, words: str | None) -> None:
    if words is None:
        assert _sets(_plan(sql))
        return
    with pytest.raises(SqlError, match=None) as info:
        _plan(sql)
    assert words in str(info.value), str(info.value)


def _child(rows: list[tuple]) -> pa.Table:
    ids, a_s, s_s, ws = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table({"c1_id": pa.array(ids, pa.int32()), "c2_a": pa.array(a_s, pa.int32()),
                     "c3_s": pa.array(s_s, pa.string()), "_w": pa.array(ws, pa.int64())})


def test_a_small_change_is_exploded_in_arrow_as_postgresql_does() -> None:
    """generate_series(1, a) and unnest('x', s) in lockstep: the longer decides, the shorter is NULL
    past its end; a NULL or negative end makes no elements; each row keeps its weight."""
    ps = _project_set()
    got = project_set_arrow.explode(ps, _child([(1, 3, "p", 1), (2, None, None, -1), (3, -1, "q", 1)]), 100)
    assert got is not None
    assert got.column_names == [*ps.names, "_w"]
    rows = sorted(zip(*[got[c].to_pylist() for c in ("c1_id", "c4_g", "c5_u", "c6_o", "_w")], strict=True),
                  key=lambda r: (r[0], r[3]))
    assert rows == [(1, 1, "x", 0, 1), (1, 2, "p", 1, 1), (1, 3, None, 2, 1),
                    (2, None, "x", 0, -1), (2, None, None, 1, -1),
                    (3, None, "x", 0, 1), (3, None, "q", 1, 1)]
    empty = project_set_arrow.explode(ps, _child([]), 100)
    assert empty is not None and empty.num_rows == 0


def test_what_arrow_does_not_compute_exactly_is_left_to_spark() -> None:
    """A series past the bound or of step 0 is the row's error, which Spark raises: Arrow gives None."""
    ps = _project_set()
    assert project_set_arrow.explode(ps, _child([(1, 50, "p", 1)]), 10) is None
    zero = ProjectSet(2, ps.columns, ps.key, input=ps.input, ordinal="c6_o",
                      sets=[("c4_g", "generate_series", ["1", "`c2_a`", "0"]), ("c5_u", "unnest", ["'x'"])])
    assert project_set_arrow.explode(zero, _child([(1, 3, "p", 1)]), 100) is None
