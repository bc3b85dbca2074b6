"""Bad input gets an error that names the problem, and the warehouse stays usable (each test
checks that committed data is intact and that a good statement works afterwards)."""

from __future__ import annotations

import pytest

from sparkwave import CatalogError, DataError, NotRetainedError, PipelineError, SqlError
from tests.oracle import rows_of


@pytest.fixture
def loaded(session):
    session.sql("CREATE TABLE t (k int, v varchar, PRIMARY KEY (k)); "
                "CREATE MATERIALIZED VIEW m AS SELECT k, upper(v) AS u FROM t")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    session.flush()
    return session


def still_usable(s) -> None:
    assert sorted(rows_of(s.table("m"))) == [(1, "A"), (2, "B")]
    s.sql("INSERT INTO t VALUES (3, 'c')")
    s.flush()
    assert sorted(rows_of(s.table("m"))) == [(1, "A"), (2, "B"), (3, "C")]


@pytest.mark.parametrize("sql, error, words", [
    ("CREATE MATERIALIZED VIEW x (a, b, c) AS SELECT k, v FROM t", SqlError, ["names 3 columns", "has 2"]),
    ("CREATE MATERIALIZED VIEW x (a) AS SELECT k, v FROM t", SqlError, ["names 1 columns", "has 2"]),
    ("CREATE MATERIALIZED VIEW x (a, 2b) AS SELECT k, v FROM t", SqlError, ["bad column list", "(a, 2b)"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t ORDER BY k LIMIT k", SqlError,
     ["LIMIT", "non-negative integer constant", "k"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT DISTINCT v FROM t ORDER BY k LIMIT 2", SqlError,
     ["SELECT DISTINCT", "ORDER BY expressions must appear"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT t.k FROM t JOIN t AS u ON t.k < u.k", SqlError,
     ["non-equi join", "equality"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT t.k FROM t LEFT JOIN t AS u ON t.k = u.k AND u.v > t.v", SqlError,
     ["outer join", "u.v > t.v", "one side"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT DISTINCT ON (v) v, count(*) FROM t GROUP BY v", SqlError,
     ["DISTINCT ON", "GROUP BY"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT t.k FROM t JOIN m ON t.k = m.u", SqlError, ["join key types", "varchar"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT v, count(*) AS n FROM t GROUP BY v HAVING rank() OVER () > 1", SqlError,
     ["OVER"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k, random() AS r FROM t", SqlError, ["non-deterministic", "random"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT v, max(k) AS mk, now() AS at FROM t GROUP BY v", SqlError,
     ["non-deterministic", "now", "column 55"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT v, stddev(k) AS s FROM t GROUP BY v", SqlError,
     ["unsupported aggregate", "stddev"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM (WITH w AS (SELECT k FROM t) SELECT k FROM w) q", SqlError,
     ["WITH inside a subquery"]),
    ("CREATE MATERIALIZED VIEW x AS WITH w AS (SELECT k FROM t), w AS (SELECT v FROM t) SELECT k FROM w", SqlError,
     ["'w' specified more than once"]),
    ("CREATE MATERIALIZED VIEW x AS WITH w AS (SELECT k FROM t) SELECT count(*) AS n FROM TUMBLE(w, k, "
     "INTERVAL '1' MINUTE)", SqlError, ["TUMBLE over CTE 'w'"]),
    ("CREATE MATERIALIZED VIEW x (_vnode) AS SELECT k FROM t", SqlError, ["_vnode", "reserved"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT to_char(k, 'FM999.99') AS c FROM t", SqlError, ["FM with 9"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k, to_char(TIMESTAMP '2024-01-01 00:00:00', 'IYYY') AS y FROM t",
     SqlError, ["'IYYY'", "not supported"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT v, k FROM t GROUP BY v", SqlError, ["column k", "GROUP BY"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t WHERE k > 1 OR k IN (SELECT k FROM m)", SqlError,
     ["IN (subquery)", "not under OR"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t WHERE k = (SELECT k FROM m)", SqlError,
     ["scalar subquery", "one aggregate"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t WHERE v NOT IN (SELECT u FROM m WHERE m.k = t.k)", SqlError,
     ["correlated NOT IN", "NOT EXISTS"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t WHERE k > ALL (SELECT k FROM m)", SqlError,
     ["ALL (subquery) is not supported", "max"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT count(*) AS n, (SELECT count(*) FROM m) AS c FROM t", SqlError,
     ["scalar subquery", "without GROUP BY", "one-row subqueries in FROM"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k, last_value(v) OVER (ORDER BY k) AS l FROM t", SqlError,
     ["last_value() needs an explicit ROWS frame"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t ORDER BY k FETCH FIRST 2 ROWS WITH TIES", SqlError,
     ["WITH TIES"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t WHERE k IN (SELECT k FROM m ORDER BY k LIMIT 1)", SqlError,
     ["LIMIT / OFFSET in a subquery of IN"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t UNION SELECT k, u FROM m", SqlError,
     ["each UNION query must have the same number of columns", "the first query has 1, query 2 has 2"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT window_start FROM TUMBLE(t, k, INTERVAL '1' MINUTE)", SqlError,
     ["TUMBLE", "'k'", "timestamp"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT count(*) AS n FROM TUMBLE(t, k)", SqlError, ["3 arguments"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT v, count(*) AS n FROM t JOIN missing ON t.k = missing.k GROUP BY v",
     CatalogError, ["missing"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT nope FROM t", CatalogError, ["unknown column", "nope"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM missing", CatalogError, ["unknown", "missing"]),
    ("SELEC k FROM t", SqlError, ["syntax error", "line 1"]),
    ("SELECT 1;\nSELEC k FROM t", SqlError, ["line 2"]),
    ("GRANT ALL ON t TO bob", SqlError, ["unsupported"]),
    ("CREATE TABLE t (k int)", CatalogError, ["already exists", "'t'"]),
    ("CREATE MATERIALIZED VIEW m AS SELECT k FROM t", CatalogError, ["already exists", "'m'"]),
    ("CREATE TABLE z (k int, v money)", SqlError, ["unsupported column type", "money"]),
    ("CREATE TABLE z (k int, d interval)", SqlError, ["'INTERVAL'", "no interval type", "extract(epoch"]),
    ("CREATE TABLE z (k int, d int[])", SqlError, ["'INT[]'", "arrays are not a column type"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k, INTERVAL '1' HOUR AS d FROM t", SqlError, ["type interval"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k FROM t WHERE v SIMILAR TO 'a%'", SqlError, ["SIMILAR TO", "LIKE"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k, regexp_replace(v, 'a', 'b', 'x') AS r FROM t", SqlError,
     ["flags 'x'", "'g', 'i'"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k, array_agg(v) AS a FROM t GROUP BY k", SqlError,
     ["array_agg is not supported", "string_agg"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT k, encode(v::bytea, 'escape') AS e FROM t", SqlError,
     ["'escape'", "'hex', 'base64'"]),
    ("INSERT INTO t VALUES ('abc', 'x')", DataError, ["'abc'", "column 'k'", "int"]),
    ("INSERT INTO t VALUES (NULL, 'x')", DataError, ["primary key", "NULL"]),
    ("INSERT INTO t VALUES (1)", DataError, ["1 values for 2 columns"]),
    ("INSERT INTO t VALUES (1, 'x') ON CONFLICT DO NOTHING", SqlError,
     ["INSERT ... ON CONFLICT", "CREATE TABLE ... ON CONFLICT"]),
    ("CREATE TABLE z (k int, v int) ON CONFLICT DO NOTHING", SqlError, ["ON CONFLICT needs a PRIMARY KEY"]),
    ("CREATE TABLE z (k int PRIMARY KEY) ON CONFLICT DO SOMETHING", SqlError, ["ON CONFLICT takes", "DO NOTHING"]),
    ("CREATE MATERIALIZED VIEW x AS VALUES (1, 2), (3)", SqlError, ["VALUES lists", "same length"]),
    ("CREATE MATERIALIZED VIEW x AS VALUES (1), (2) LIMIT 1", SqlError, ["LIMIT / OFFSET on VALUES"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT * FROM (VALUES (1)) AS v(a, b)", SqlError,
     ["1 columns available", "2 columns specified"]),
    ("CREATE MATERIALIZED VIEW x AS SELECT * FROM t, (VALUES (k)) AS v(a)", SqlError,
     ["VALUES items must be constants", "k"]),
    ("INSERT INTO t (k, nope) VALUES (1, 2)", CatalogError, ["unknown column", "nope"]),
    ("INSERT INTO m VALUES (1, 'x')", SqlError, ["materialized view"]),
    ("UPDATE t SET k = 5 WHERE k = 1", SqlError, ["primary key"]),
    ("UPDATE t SET nope = 5", CatalogError, ["unknown column", "nope"]),
    ("DELETE FROM t WHERE nope > 1", CatalogError, ["unknown column", "nope"]),
    ("DROP TABLE t", CatalogError, ["depend", "m"]),
    ("DROP TABLE m", SqlError, ["materialized view"]),
    ("DROP MATERIALIZED VIEW nope", CatalogError, ["nope"]),
    ("SET nope = 1", SqlError, ["unknown setting", "nope"]),
    ("CREATE MATERIALIZED VIEW x WITH (backfill_strategy = 'magic') AS SELECT k FROM t", SqlError, ["magic"]),
    ("SET backfill_strategy = 'magic'", SqlError, ["unknown backfill strategy", "magic", "snapshot"]),
    ("ALTER MATERIALIZED VIEW nope SET BACKFILL_RATE_LIMIT = 5", CatalogError, ["nope"]),
    ("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = 5", CatalogError, ["'m'", "not being created"]),
    ("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = -3", SqlError, ["from 0 to 1000000000", "-3"]),
    ("SET backfill_rate_limit = -1", SqlError, ["from 0 to 1000000000", "-1"]),
    ("ALTER MATERIALIZED VIEW m SET PARALLELISM = 4", SqlError, ["PARALLELISM", "BACKFILL_RATE_LIMIT"]),
    ("CANCEL JOBS 99", CatalogError, ["no job with id 99"]),
    ("CANCEL JOBS 2", CatalogError, ["job 2", "not creating"]),
    ("CANCEL JOBS abc", SqlError, ["job ids"]),
    ("SET background_ddl = maybe", SqlError, ["true or false"]),
    ("CREATE TABLE d (id int) WITH (connector = 'kafkaa')", SqlError, ["unknown connector", "kafkaa"]),
    ("CREATE TABLE d (id int) WITH (connector = 'datagen', fields.x.kind = 'random')", SqlError, ["unknown column"]),
    ("CREATE TABLE d (id int) WITH (connector = 'nexmark', nexmark.table.type = 'bid')", SqlError, ["id", "bid"]),
    ('CREATE TABLE "m.x" (id int, PRIMARY KEY (id))', SqlError, ["invalid name", "'m.x'", "letters, digits"]),
    ('CREATE TABLE "../up" (id int)', SqlError, ["invalid name", "'../up'"]),
    ('CREATE TABLE "/tmp/abs" (id int)', SqlError, ["invalid name", "'/tmp/abs'"]),
    ("CREATE TABLE db.t2 (id int)", SqlError, ["schema-qualified", "db.t2"]),
    ("INSERT INTO db.t VALUES (9, 'z')", SqlError, ["schema-qualified", "db.t"]),
    ("CREATE MATERIALIZED VIEW " + "x" * 64 + " AS SELECT k FROM t", SqlError, ["invalid name", "63 characters"]),
])
def test_bad_statement_names_the_problem_and_leaves_data_intact(loaded, sql, error, words):
    with pytest.raises(error) as info:
        loaded.sql(sql)
    for w in words:
        assert w.lower() in str(info.value).lower(), f"{w!r} missing from: {info.value}"
    still_usable(loaded)


def test_as_of_an_unretained_or_future_epoch(loaded):
    first = loaded.committed_epoch
    loaded.sql("INSERT INTO t VALUES (9, 'z')")
    loaded.flush()
    loaded.sql("SET retention_seconds = 0")
    loaded.compact()
    with pytest.raises(NotRetainedError, match="no longer retained"):
        loaded.table("m", as_of=first)
    with pytest.raises(NotRetainedError, match="not committed"):
        loaded.table("m", as_of=loaded.committed_epoch + 10)
    loaded.sql("DELETE FROM t WHERE k = 9")
    loaded.flush()
    still_usable(loaded)


def test_bulk_insert_type_mismatch_names_column(loaded):
    import pyarrow as pa

    with pytest.raises(DataError, match="'k'"):
        loaded.insert("t", pa.table({"k": ["x1"], "v": ["q"]}))
    with pytest.raises(CatalogError, match="unknown column"):
        loaded.insert("t", pa.table({"k": [5], "w": ["q"]}))
    still_usable(loaded)


def test_a_quoted_literal_takes_the_column_type_as_in_postgresql(loaded):
    """`VALUES (10), ('5')` into an int column: the quoted literal is cast to the column (RisingWave's
    grouping-sets e2e files insert so); one that does not parse names the column, and nothing is staged."""
    loaded.sql("INSERT INTO t VALUES (3, 'c'), ('4', 'd')")
    loaded.flush()
    assert sorted(r.k for r in loaded.table("t").collect()) == [1, 2, 3, 4]
    with pytest.raises(DataError, match="column 'k'"):
        loaded.sql("INSERT INTO t VALUES (5, 'e'), ('x', 'f')")
    loaded.flush()
    assert sorted(r.k for r in loaded.table("t").collect()) == [1, 2, 3, 4]
    loaded.sql("DELETE FROM t WHERE k > 2")
    loaded.flush()
    still_usable(loaded)


def test_dml_on_append_only_table_is_refused(session):
    session.sql("CREATE TABLE a (x int) APPEND ONLY")
    with pytest.raises(SqlError, match="append-only"):
        session.sql("DELETE FROM a WHERE x = 1")
    with pytest.raises(SqlError, match="append-only"):
        session.sql("UPDATE a SET x = 2")


def test_creating_jobs_refuse_what_they_cannot_do_and_leave_data_intact(loaded):
    s = loaded
    s.sql("SET background_ddl = true; SET backfill_rate_limit = 0")
    s.sql("CREATE MATERIALIZED VIEW c AS SELECT k, u FROM m")
    with pytest.raises(CatalogError, match="'c' is itself still being created"):
        s.sql("CREATE MATERIALIZED VIEW d AS SELECT k FROM c")
    with pytest.raises(CatalogError, match="still being created"):
        s.sql("SELECT * FROM c")
    with pytest.raises(CatalogError, match="still being created"):
        s.compact("c")
    with pytest.raises(CatalogError, match=r"view\(s\) c depend on it"):
        s.sql("DROP MATERIALIZED VIEW m")
    with pytest.raises(CatalogError, match="no job with id 42"):
        s.sql(f"CANCEL JOBS {s.catalog.job_of('c').id}, 42")
    assert s.catalog.job_of("c").creating  # a statement with a bad id cancels nothing
    with pytest.raises(PipelineError, match=r"paused .* would never end; resume with ALTER MATERIALIZED VIEW c"):
        s.sql("WAIT")
    s.sql("DROP MATERIALIZED VIEW c")  # dropping a creating job cancels it
    assert s.catalog.relation("c") is None and not s.warehouse.relation_dir("c").exists()
    still_usable(s)


def test_no_name_reaches_the_file_system(loaded):
    """The data loss of issue "Hardening": a table named "m.x" was stored under the folder of an MV
    `m`'s state and deleted as unowned on the next open. Such names are refused; none becomes a path."""
    root = loaded.warehouse.root
    before = sorted(p.relative_to(root.parent) for p in root.parent.rglob("*") if "catalog.db" not in p.name)
    for name in ('"m.x"', '"../t"', '"a/b"', '"/tmp/x"', '"."', '""'):
        with pytest.raises(SqlError):
            loaded.sql(f"CREATE TABLE {name} (id int, PRIMARY KEY (id))")
    after = sorted(p.relative_to(root.parent) for p in root.parent.rglob("*") if "catalog.db" not in p.name)
    assert after == before
    for bad in ("../t", "a/b", "/tmp/x", "m.x.y", "m./x", ""):
        with pytest.raises(CatalogError, match="must not become a path"):
            loaded.warehouse.relation_dir(bad)
    still_usable(loaded)
