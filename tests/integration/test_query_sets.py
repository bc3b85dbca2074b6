"""generate_series and unnest in ad-hoc queries (`frontend/query_sets.py`) give real PostgreSQL's
rows: series that count the wrong way (empty, where Spark's sequence counts down), NULL arguments,
negative and bigint steps, timestamps, WITH ORDINALITY, zipped unnest, calls in lockstep in a
SELECT list, and the series as a FROM item joined, filtered, ordered and aggregated."""

from __future__ import annotations

import psycopg
import pytest
from pyspark.errors import SparkRuntimeException

from sparkwave.core.errors import SparkwaveError
from tests.oracle import rows_of

QUERIES = [
    "SELECT * FROM generate_series(3, 1)",
    "SELECT * FROM generate_series(1, 3)",
    "SELECT * FROM generate_series(10, 2, -2)",
    "SELECT * FROM generate_series(2, 10, -2)",
    "SELECT * FROM generate_series(1, NULL)",
    "SELECT * FROM generate_series(NULL::int, 3)",
    "SELECT * FROM generate_series(1, 5, NULL)",
    "SELECT * FROM generate_series('2'::int + '2'::int, '10'::int, '2'::int)",
    "SELECT * FROM generate_series(10000000000, 10000000004, 2)",
    "SELECT * FROM generate_series(5, 5, -3)",
    "SELECT * FROM generate_series('2008-03-01 00:00:00'::timestamp, '2008-03-03 12:00:00'::timestamp, "
    "INTERVAL '12 hours')",
    "SELECT * FROM generate_series('2008-03-03'::timestamp, '2008-03-01'::timestamp, INTERVAL '-1 day')",
    "SELECT * FROM generate_series(1, 3) AS g(v)",
    "SELECT g FROM generate_series(1, 3) AS g",
    "SELECT * FROM generate_series(4, 1, -1) WITH ORDINALITY AS g(v, n)",
    "SELECT * FROM unnest(ARRAY[1, 2, NULL]) WITH ORDINALITY AS u(x, n)",
    "SELECT * FROM unnest(ARRAY[1, 2], ARRAY['a', 'b', 'c']) AS u(x, y)",
    "SELECT unnest(ARRAY['p', 'q'])",
    "SELECT generate_series(1, 3) * 2 AS d, unnest(ARRAY['a', 'b']) AS u",
    "SELECT generate_series(3, 1), 7 AS k",
    "SELECT v * 10 AS w FROM generate_series(1, 10) AS g(v) WHERE v % 3 = 0 ORDER BY w DESC LIMIT 2",
    "SELECT sum(v) AS s, count(*) AS n FROM generate_series(1, 100) AS g(v)",
    "SELECT a.v, b.w FROM generate_series(1, 3) AS a(v) JOIN generate_series(2, 4) AS b(w) ON a.v = b.w",
    "WITH s AS (SELECT * FROM generate_series(1, 4) AS g(v)) SELECT v FROM s WHERE v > 2",
    "SELECT t.k, g.v FROM t JOIN generate_series(1, 2) AS g(v) ON t.k = g.v",
    "SELECT (SELECT count(*) FROM generate_series(1, 5)) AS c",
    "SELECT generate_series(1, 3) * 2",
    "SELECT abs(generate_series(-1, 1)), unnest(ARRAY[1, 2]) + unnest(ARRAY[10, 20, 30]), (generate_series(1, 2))",
    "SELECT * FROM unnest(ARRAY[1, 2]) WITH ORDINALITY",
    "SELECT generate_series(1, 2)::text, upper(unnest(ARRAY['a', 'b']))",
    "SELECT * FROM unnest(ARRAY['a', 'b']) WITH ORDINALITY AS u",
]


def test_set_returning_calls_in_queries_equal_postgresql(session, postgres) -> None:
    session.sql("CREATE TABLE t (k int PRIMARY KEY, s varchar)")
    session.sql("INSERT INTO t VALUES (1, 'one'), (3, 'three')")
    session.sql("FLUSH")
    with psycopg.connect(postgres.create_database("query_sets"), autocommit=True) as pg:
        pg.execute("DROP TABLE IF EXISTS t")
        pg.execute("CREATE TABLE t (k int PRIMARY KEY, s varchar)")
        pg.execute("INSERT INTO t VALUES (1, 'one'), (3, 'three')")
        for sql in QUERIES:
            cur = pg.execute(sql)
            want = cur.fetchall()
            names = [d.name for d in cur.description]
            got = session.sql(sql)
            assert got.columns == names, sql
            rows = rows_of(got)
            if "ORDER BY" in sql or "ORDINALITY" in sql or "unnest" in sql:
                assert rows == want, sql  # the series' order is PostgreSQL's, too
            else:
                assert sorted(rows, key=repr) == sorted(want, key=repr), sql


@pytest.mark.parametrize("sql, words", [
    ("SELECT * FROM generate_series(2, 10, 0)", "step size cannot equal zero"),
    ("SELECT * FROM generate_series(1, 2000000000)", "would make more than 10000000 rows"),
    ("SELECT * FROM generate_series(0.1::numeric, 2.1::numeric)", "cast the arguments"),
    ("SELECT * FROM generate_series('2024-01-01'::timestamptz, '2024-01-02'::timestamptz, INTERVAL '1 hour')",
     "timestamp \\(without time zone\\)"),
    ("SELECT * FROM generate_series('2024-01-01'::timestamp, '2024-05-01'::timestamp, INTERVAL '1 month')",
     "fixed length"),
    ("SELECT count(*), generate_series(1, 2)", "in a subquery"),
    ("SELECT unnest(ARRAY[1]) FROM t", "set-returning functions"),
    ("SELECT * FROM unnest(1)", "array constructor"),
    ("SELECT CASE WHEN false THEN generate_series(1, 2) END", "not allowed in CASE"),
    ("SELECT coalesce(unnest(ARRAY[1]), 0) AS c", "not allowed in COALESCE"),
    ("SELECT count(*) FROM generate_series('2000-01-01'::timestamp, '2001-01-01'::timestamp, INTERVAL '1 second')",
     "would make more than 10000000 rows"),
])
def test_what_queries_do_not_run_is_refused_saying_why(session, sql: str, words: str) -> None:
    session.sql("CREATE TABLE t (k int PRIMARY KEY)")
    with pytest.raises((SparkwaveError, SparkRuntimeException), match=words):  # a row's error: when Spark runs it
        session.sql(sql).collect()
