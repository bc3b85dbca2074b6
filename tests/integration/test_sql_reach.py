"""What a statement's text can reach besides the function set (found by review of issue 43's change):
Spark's `${...}` substitution, SQL on files, names Spark reads as session values, one row's value
growing past the limit, and an MV an earlier release stored with a query this one refuses."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException

import sparkwave
from sparkwave import SqlError
from sparkwave.frontend.statements import parse
from tests.oracle import rows_of


@pytest.mark.parametrize("literal", ["${env:HOME}", "${system:java.vm.name}"])
def test_substitution_syntax_is_text_not_the_owners_environment(session, literal):
    """`'${env:X}'` was substituted by Spark's parser: the owner's environment (a password, say) in
    a query, an MV or a stored value."""
    s = session
    assert rows_of(s.sql(f"SELECT '{literal}' AS p")) == [(literal,)]
    s.sql("CREATE TABLE t (k int, v text, PRIMARY KEY (k))")
    s.sql(f"CREATE MATERIALIZED VIEW m AS SELECT k, v || '{literal}' AS w FROM t")
    s.sql("INSERT INTO t VALUES (1, 'a')")
    s.flush()
    s.sql(f"UPDATE t SET v = '{literal}' || v WHERE k = 1")
    s.flush()
    assert rows_of(s.table("t")) == [(1, literal + "a")]
    assert rows_of(s.table("m")) == [(1, literal + "a" + literal)]


@pytest.mark.parametrize("sql", [
    'UPDATE t SET v = (SELECT max(value) FROM text."/etc/passwd")',
    'DELETE FROM t WHERE EXISTS (SELECT 1 FROM text."/etc/hostname")',
    'INSERT INTO t SELECT 1, value FROM text."/etc/hostname"',
    'SELECT * FROM parquet."/tmp/x.parquet"',
])
def test_sql_on_files_is_refused(sql):
    with pytest.raises(SqlError, match="schema-qualified table names are not supported"):
        parse(sql)


@pytest.mark.parametrize("sql", ["SELECT user", 'SELECT "current_user" FROM t', "SELECT session_user",
                                 'SELECT k FROM t WHERE "current_date" > 0', "SELECT grouping__id FROM t"])
def test_names_spark_reads_as_session_values_are_refused(sql):
    with pytest.raises(SqlError, match="must be qualified|function session_user is not supported"):
        parse(sql)


@pytest.mark.parametrize("sql", ["SELECT $1", 'SELECT @"env:HOME"', "SELECT ${env:HOME}"])
def test_parameters_are_refused(sql):
    with pytest.raises(SqlError):
        parse(sql)


def test_a_column_named_like_a_session_value_is_read_qualified(session):
    s = session
    s.sql('CREATE TABLE u (k int, "user" text, PRIMARY KEY (k))')
    s.sql("INSERT INTO u VALUES (1, 'ada')")
    s.flush()
    assert rows_of(s.sql("SELECT u.user FROM u")) == [("ada",)]


@pytest.mark.parametrize("call", ["repeat(v, 2000000000)", "lpad(v, 2000000000, 'x')", "rpad(v, 2000000000)",
                                  "replace(repeat(v, 1000000), 'a', repeat(v, 100))"])
def test_a_value_that_would_grow_past_the_limit_fails_its_statement_not_the_owner(session, call):
    """`repeat('x', 2000000000)` allocated gigabytes in the owner's JVM (an OutOfMemoryError kills it)."""
    s = session
    s.sql("CREATE TABLE t (k int, v text, PRIMARY KEY (k))")
    s.sql("INSERT INTO t VALUES (1, 'a')")
    s.flush()
    with pytest.raises((PySparkException, sparkwave.SparkwaveError), match="16777216 bytes"):
        s.sql(f"SELECT {call} AS r FROM t").collect()
    with pytest.raises((PySparkException, sparkwave.SparkwaveError), match="16777216 bytes"):
        s.sql(f"UPDATE t SET v = {call} WHERE k = 1")
    s.flush()
    assert rows_of(s.table("t")) == [(1, "a")]
    assert rows_of(s.sql("SELECT repeat(v, 3) AS r, lpad(v, 3, 'x') AS p FROM t")) == [("aaa", "xxa")]
    s.sql("INSERT INTO t VALUES (2, rpad(lpad('b', 2, 'x'), 4, 'y') || repeat('z', 2))")  # VALUES: an inline table
    s.flush()
    assert sorted(rows_of(s.table("t"))) == [(1, "a"), (2, "xbyyzz")]


def test_growing_calls_nest_only_a_few_deep():
    """Their guard writes their arguments twice: nested without bound, the SQL would double a level."""
    import sqlglot

    from sparkwave.frontend.postgres import DIALECT, MAX_GROWING_NESTED, size_guarded

    deep = "v"
    for _ in range(MAX_GROWING_NESTED):
        deep = f"repeat({deep}, 2)"
    size_guarded(sqlglot.parse_one(f"SELECT {deep} FROM t", read=DIALECT))
    with pytest.raises(SqlError, match=f"nest at most {MAX_GROWING_NESTED} deep"):
        size_guarded(sqlglot.parse_one(f"SELECT lpad({deep}, 3) FROM t", read=DIALECT))


def test_an_mv_stored_with_a_query_this_version_refuses_is_taken_out_at_open(spark, tmp_path):
    """An earlier release stored an MV calling `reflect(...)`: its plan is never parsed again, and the
    replay would run it first thing after every open."""
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
        s.sql("CREATE MATERIALIZED VIEW old AS SELECT k, v FROM t")
        s.sql("CREATE MATERIALIZED VIEW above AS SELECT k FROM old")
        s.sql("CREATE MATERIALIZED VIEW fine AS SELECT k, v + 1 AS w FROM t")
        definition = s.catalog.relation("old").definition
        definition["sql"] = ("CREATE MATERIALIZED VIEW old AS SELECT k, "
                             "reflect('java.lang.System', 'exit', 3) AS v FROM t")
        s.catalog.set_definition("old", definition)
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        assert s.catalog.relation("old").state == "failed"
        assert s.catalog.relation("above").state == "failed"
        assert "function reflect is not supported" in s.catalog.job_of("old").error
        with pytest.raises(sparkwave.SparkwaveError, match="stopped"):
            s.table("old")
        s.sql("INSERT INTO t VALUES (1, 1)")
        s.flush()
        assert rows_of(s.table("fine")) == [(1, 2)]
        s.sql("DROP MATERIALIZED VIEW above")
        s.sql("DROP MATERIALIZED VIEW old")
