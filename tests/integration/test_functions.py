"""SQL reaches only the documented functions (issue 43, item 2) and expressions nest only so deep
(item 7): `java_method('java.lang.System', 'getenv', ...)` returned a password, `reflect(...,
'exit', 3)` killed the owner, `uniform(...)` in an MV kept ghost rows, and 3,000 nested
parentheses raised a raw RecursionError."""

from __future__ import annotations

import re

import pytest
from sqlglot import exp

from sparkwave import SqlError
from sparkwave.core.limits import MAX_EXPRESSION_DEPTH
from sparkwave.frontend.functions import FUNCTIONS, documented
from sparkwave.frontend.postgres import to_spark
from sparkwave.frontend.statements import parse
from tests.function_samples import SAMPLES
from tests.oracle import rows_of

DOCUMENTED = {name for names in documented().values() for name in names}
ARITIES = ("", "1", "1, 1", "1, 1, 1", "1, 1, 1, 1", "1, 1, 1, 1, 1, 1")
# what Spark's registry has that reaches the JVM, the host, files or the session's identity, or
# that is not deterministic: the walk below must see each of them
DANGEROUS = ("java_method", "reflect", "try_reflect", "uniform", "randn", "randstr", "rand", "input_file_name",
             "current_user", "session_user", "user", "spark_partition_id", "monotonically_increasing_id",
             "current_timezone", "unix_timestamp", "assert_true", "aes_encrypt", "aes_decrypt", "url_decode",
             "uuid", "shuffle", "explode", "inline", "stack", "from_json", "schema_of_json", "xpath", "version")


def _statements(name: str) -> list[tuple[str, exp.Expr | None, str | None]]:
    """`SELECT name(...) FROM t` with each arity: (arguments, parsed statement or None, error)."""
    out = []
    for args in ARITIES:
        try:
            out.append((args, parse(f"SELECT {name}({args}) FROM t")[0].ast, None))
        except SqlError as e:
            out.append((args, None, str(e)))
    return out


def test_spark_registry_walk_every_function_outside_the_set_is_refused(spark):
    """Every function Spark's registry knows: called with 0 to 6 arguments, a name outside the
    documented set is refused naming it (or is not a call at all to sqlglot: `like(a, b)` is the
    operator), and a documented name is accepted with some arguments."""
    registry = [r[0] for r in spark.sql("SHOW FUNCTIONS").collect()]
    assert len(registry) > 400 and set(DANGEROUS) <= set(registry)
    walked = 0
    for name in registry:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            continue  # an operator's symbol (`+`, `||`, ...)
        walked += 1
        forms = _statements(name)
        if name in DOCUMENTED:  # accepted with some arguments, unless only its own syntax calls it (CAST)
            assert any(ast is not None for _, ast, _ in forms) or all("syntax error" in e for _, _, e in forms), name
            continue
        for args, ast, error in forms:
            if ast is not None:
                called = [n for n in ast.walk() if isinstance(n, exp.Func)]
                assert not called, f"{name}({args}) is accepted and calls {called}"
            else:
                # named as typed, or (a call sqlglot parses by its own syntax) as sqlglot names it
                assert "syntax error" in str(error) or re.match(r"function \S+ is not supported", str(error)), error
    assert walked > 400
    for name in DANGEROUS:
        errors = [e for _, _, e in _statements(name) if e and "syntax error" not in e]
        assert errors and all(f"function {name} is not supported" in e for e in errors), (name, errors)


def test_every_documented_function_runs_in_spark(spark):
    """Each documented function, as sparkwave emits it, is one Spark evaluates (the table maps
    names to what Spark runs, so none is documented that Spark would refuse)."""
    samples = SAMPLES
    table_functions = {"hop", "tumble"}  # FROM items, planned by sparkwave: tests/integration/test_sql.py runs them
    table_functions |= {"grouping"}  # with GROUPING SETS only, planned by sparkwave: test_set_operations.py runs it
    table_functions |= {"proctime"}  # in FOR SYSTEM_TIME AS OF PROCTIME() only: test_temporal_join.py runs it
    table_functions |= {"generate_series", "unnest"}  # set-returning, planned as a project set: test_project_set.py
    assert DOCUMENTED - table_functions == set(samples)
    columns = [("i", "int"), ("s", "varchar"), ("f", "double"), ("ts", "timestamp")]
    rows = "VALUES (1, 'abc', CAST(2.5 AS double), TIMESTAMP_NTZ '2024-01-02 03:04:05') AS t(i, s, f, ts)"
    for name, sample in samples.items():
        ast = parse(f"SELECT {sample} AS x FROM t")[0].ast
        assert isinstance(ast, exp.Select)
        # analysed by Spark: raises if it names a function Spark does not have
        assert spark.sql(f"SELECT {to_spark(ast.selects[0], columns, spark)} FROM {rows}").schema, name


def test_the_table_maps_each_key_to_its_names():
    """A typed key is reached only through its documented names; an anonymous one is its name."""
    for key, fn in FUNCTIONS.items():
        if isinstance(key, str):
            assert fn.names == (key,)
        assert fn.group in {"string", "math", "date/time", "conditional", "aggregate", "window", "table", "operator",
                            "other"}


@pytest.mark.parametrize("sql", [
    "SELECT java_method('java.lang.System', 'getenv', 'PGPASSWORD') AS p FROM t",
    "SELECT reflect('java.lang.System', 'exit', 3) AS p FROM t",
    "CREATE MATERIALIZED VIEW evil AS SELECT k, reflect('java.lang.System', 'exit', 3) AS x FROM t",
    "UPDATE t SET v = java_method('java.lang.System', 'getenv', 'PATH')",
    "DELETE FROM t WHERE reflect('java.lang.System', 'exit', 3) IS NULL",
    "INSERT INTO t SELECT k + 10, reflect('java.lang.System', 'exit', 3) FROM t",
    "CREATE SINK evil AS SELECT k, java_method('java.lang.System', 'exit', 3) AS x FROM t "
    "WITH (connector = 'deltalake', location = 'x')",
    "SELECT k FROM t WHERE k IN (SELECT try_reflect('java.lang.System', 'exit', 3))",
    "SELECT java.lang.System.exit(3) FROM t",
    "SELECT * FROM range(3)",
])
def test_jvm_functions_are_refused_in_every_statement_and_data_stays(session, sql):
    s = session
    s.sql("CREATE TABLE t (k int, v varchar, PRIMARY KEY (k)); INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    s.flush()
    with pytest.raises(SqlError, match=r"function \S+ is not supported"):
        s.sql(sql)
    s.flush()
    assert sorted(rows_of(s.table("t"))) == [(1, "a"), (2, "b")]
    assert [r.name for r in s.catalog.relations()] == ["t"]


@pytest.mark.parametrize("call", ["uniform(0, 2)", "randn()", "randstr(5)", "unix_timestamp()",
                                  "monotonically_increasing_id()", "spark_partition_id()", "current_timezone()",
                                  "try_reflect('java.util.UUID', 'randomUUID')", "rand()", "uuid()",
                                  "input_file_name()", "current_user()"])
def test_spark_non_deterministic_functions_are_refused_in_an_mv(session, call):
    """They passed the MV check (which knew `random()`, `now()`, ...), and an MV filtered by
    `uniform(0, 2) = 1` kept rows after its table was emptied."""
    s = session
    s.sql("CREATE TABLE t (k int, PRIMARY KEY (k)); INSERT INTO t VALUES (1), (2)")
    s.flush()
    name = call.split("(")[0]
    with pytest.raises(SqlError, match=rf"function {name} is not supported"):
        s.sql(f"CREATE MATERIALIZED VIEW m AS SELECT k, {call} AS x FROM t")
    with pytest.raises(SqlError, match=rf"function {name} is not supported"):
        s.sql(f"CREATE MATERIALIZED VIEW m AS SELECT k FROM t WHERE {call} IS NOT NULL")
    assert s.catalog.relation("m") is None


@pytest.mark.parametrize("call, typed", [("random()", "random"), ("now()", "now"),
                                         ("current_timestamp", "current_timestamp"), ("current_date", "current_date"),
                                         ("gen_random_uuid()", "gen_random_uuid")])
def test_documented_non_deterministic_functions_run_in_queries_not_in_mvs(session, call, typed):
    s = session
    s.sql("CREATE TABLE t (k int, PRIMARY KEY (k)); INSERT INTO t VALUES (1)")
    s.flush()
    assert len(s.sql(f"SELECT k, {call} AS x FROM t").collect()) == 1
    with pytest.raises(SqlError, match=rf"non-deterministic function {typed}\(\) is not allowed in a materialized"):
        s.sql(f"CREATE MATERIALIZED VIEW m AS SELECT k, {call} AS x FROM t")


DEEP = [
    ("800-term sum", "SELECT " + " + ".join(["1"] * 800) + " AS x FROM t"),
    ("3,000 parentheses", "SELECT " + "(" * 3000 + "1" + ")" * 3000 + " AS x FROM t"),
    ("300 nested calls", "SELECT " + "upper(" * 300 + "v" + ")" * 300 + " AS x FROM t"),
    ("200 nested CASEs", "SELECT " + "CASE WHEN k > 0 THEN " * 200 + "1" + " END" * 200 + " AS x FROM t"),
    ("3,000 NOTs", "SELECT k FROM t WHERE " + "NOT " * 3000 + "k > 0"),
    ("100 nested subqueries", "SELECT * FROM " + "(SELECT * FROM " * 100 + "t" + ") s" * 100),
    ("a 500-term OR", "SELECT k FROM t WHERE " + " OR ".join(f"k = {i}" for i in range(500))),
    ("an UPDATE's 1,000-term sum", "UPDATE t SET k = " + " + ".join(["k"] * 1000)),
    ("a DELETE's 2,000 parentheses", "DELETE FROM t WHERE " + "(" * 2000 + "k > 0" + ")" * 2000),
    ("an MV's 100,000 parentheses", "CREATE MATERIALIZED VIEW m AS SELECT " + "(" * 100_000 + "k"
     + ")" * 100_000 + " AS x FROM t"),
]


@pytest.mark.parametrize("label, sql", DEEP, ids=[label for label, _ in DEEP])
def test_deep_expressions_are_refused_with_the_limit(label, sql):
    with pytest.raises(SqlError, match=f"expression nested too deeply: more than {MAX_EXPRESSION_DEPTH} levels"):
        parse(sql)


def test_wide_statements_are_not_deep():
    """The depth counts nesting, not width: 1,000 columns, values, assignments or IN items are
    one level each (the OR an UPDATE builds over a wide table's columns is sparkwave's own, never
    checked)."""
    cols = [f"c{i}" for i in range(1000)]
    parse("CREATE TABLE w (" + ", ".join(f"{c} int" for c in cols) + ", PRIMARY KEY (c0))")
    parse("INSERT INTO w VALUES (" + ", ".join(map(str, range(1000))) + ")")
    parse("UPDATE w SET " + ", ".join(f"{c} = {c} + 1" for c in cols[1:]) + " WHERE c0 IN ("
          + ", ".join(map(str, range(5000))) + ")")
    parse("CREATE MATERIALIZED VIEW m AS SELECT " + ", ".join(f"upper({c}::varchar) AS u{c}" for c in cols)
          + " FROM w")


def test_expressions_just_under_the_limit_run_end_to_end(session):
    """Nesting the limit admits runs through a query, an MV, an UPDATE and a DELETE: the figure
    leaves room for sparkwave's translation and Spark's parser and code generator."""
    s = session
    s.sql("CREATE TABLE t (k int, v varchar, PRIMARY KEY (k)); INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    s.flush()
    n = MAX_EXPRESSION_DEPTH - 10
    total = " + ".join(["k"] * n)
    calls = "lower(" * n + "v" + ")" * n
    parens = "(" * n + "k" + ")" * n
    assert sorted(rows_of(s.sql(f"SELECT k, {total} AS x, {calls} AS y, {parens} AS z FROM t"))) == [
        (1, n, "a", 1), (2, 2 * n, "b", 2)]
    s.sql(f"CREATE MATERIALIZED VIEW m AS SELECT k, {total} AS x, {calls} AS y FROM t WHERE {parens} > 0")
    s.sql(f"UPDATE t SET v = upper({calls}) WHERE {parens} = 2")
    s.sql(f"DELETE FROM t WHERE {total} = {n}")
    s.flush()
    assert sorted(rows_of(s.table("t"))) == [(2, "B")]
    assert sorted(rows_of(s.table("m"))) == [(2, 2 * n, "b")]
