"""The SQL RisingWave users write that issue 48 adds, each exact as PostgreSQL evaluates it at every
committed epoch (DuckDB's rows, `tests/oracle.py`) under inserts, updates and deletes, for an MV
created before the data (every change through the per-epoch path) and one created mid-stream (a
snapshot backfill, then the per-epoch path): ordered aggregates (`first_value(x ORDER BY y)`,
`percentile_cont`, `percentile_disc`, `mode`), CTE column lists, `SELECT * ... GROUP BY` the key,
TPC-H's correlated scalar subqueries over comma joins; and `INSERT / UPDATE / DELETE ... RETURNING`."""

from __future__ import annotations

import psycopg
import pytest

import sparkwave
from sparkwave.core.errors import SqlError
from sparkwave.server.listener import Listener
from sparkwave.server.session_backend import SessionBackend
from tests.oracle import Model, duckdb_sql, multiset, rows_of, to_sql

T = "k INTEGER, g INTEGER, x INTEGER, y INTEGER, s VARCHAR"
U = "uk INTEGER, ug INTEGER, w INTEGER"

# name -> (sparkwave's SQL, DuckDB's SQL for the same rows; None: the same text)
MVS: dict[str, tuple[str, str | None]] = {
    "fl": ("SELECT g, first_value(x ORDER BY y) AS f, last_value(s ORDER BY y DESC, k) AS l, count(*) AS n "
           "FROM t GROUP BY g",
           "SELECT g, first(x ORDER BY y ASC NULLS LAST, k) AS f, last(s ORDER BY y DESC NULLS FIRST, k) AS l, "
           "count(*) AS n FROM t GROUP BY g"),
    "pc": ("SELECT g, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS p, "
           "percentile_cont(0.25) WITHIN GROUP (ORDER BY x DESC) AS q FROM t GROUP BY g",
           "SELECT g, quantile_cont(CAST(x AS DOUBLE), 0.5) AS p, quantile_cont(CAST(x AS DOUBLE), 0.75) AS q "
           "FROM t GROUP BY g"),
    # the first value whose cumulative fraction reaches f (fractions exact in binary: no rounding to argue)
    "pd": ("SELECT g, percentile_disc(0.5) WITHIN GROUP (ORDER BY x) AS p, "
           "percentile_disc(0.25) WITHIN GROUP (ORDER BY s DESC) AS q FROM t GROUP BY g",
           "SELECT g, (SELECT v FROM (SELECT x AS v, row_number() OVER (ORDER BY x) AS r, count(*) OVER () AS n "
           "FROM t i WHERE i.g IS NOT DISTINCT FROM o.g AND x IS NOT NULL) WHERE r >= greatest(1, ceil(0.5 * n)) "
           "ORDER BY r LIMIT 1) AS p, (SELECT v FROM (SELECT s AS v, row_number() OVER (ORDER BY s DESC) AS r, "
           "count(*) OVER () AS n FROM t i WHERE i.g IS NOT DISTINCT FROM o.g AND s IS NOT NULL) "
           "WHERE r >= greatest(1, ceil(0.25 * n)) ORDER BY r LIMIT 1) AS q FROM t o GROUP BY g"),
    # the most frequent non-NULL value, the smallest among ties
    "md": ("SELECT g, mode() WITHIN GROUP (ORDER BY x) AS m FROM t GROUP BY g",
           "SELECT g, (SELECT x FROM t i WHERE i.g IS NOT DISTINCT FROM o.g AND x IS NOT NULL GROUP BY x "
           "ORDER BY count(*) DESC, x LIMIT 1) AS m FROM t o GROUP BY g"),
    "scalar": ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY y) AS p, first_value(k ORDER BY y DESC) AS f, "
               "mode() WITHIN GROUP (ORDER BY s) AS m FROM t",
               "SELECT quantile_cont(CAST(y AS DOUBLE), 0.5) AS p, first(k ORDER BY y DESC NULLS FIRST, k) AS f, "
               "(SELECT s FROM t WHERE s IS NOT NULL GROUP BY s ORDER BY count(*) DESC, s LIMIT 1) AS m FROM t"),
    "cte": ("WITH c(a, b) AS (SELECT k, x FROM t WHERE x IS NOT NULL), d AS (SELECT a + 1 AS z, b FROM c) "
            "SELECT z, q.b, r.p FROM d AS q JOIN c AS r(p) ON q.z = r.p", None),
    "star": ("SELECT t.*, count(u.uk) AS n, sum(w) AS sw FROM t LEFT JOIN u ON u.ug = t.k GROUP BY t.k",
             "SELECT t.k, t.g, t.x, t.y, t.s, count(u.uk) AS n, sum(w) AS sw FROM t LEFT JOIN u ON u.ug = t.k "
             "GROUP BY t.k, t.g, t.x, t.y, t.s"),
    "dep": ("SELECT s, x, count(*) AS n FROM t, u WHERE ug = k GROUP BY k", "SELECT s, x, count(*) AS n FROM t, u "
            "WHERE ug = k GROUP BY k, s, x"),
    # TPC-H q2 / q17 / q20's shape: the outer column unqualified, the subquery over a comma join
    "q2": ("SELECT k, uk, w FROM t, u WHERE k = ug AND w = (SELECT min(w) FROM u, t AS t2 WHERE k = ug "
           "AND t2.k = uk % 4)", None),
    "q17": ("SELECT k, x FROM t WHERE x > (SELECT 0.5 * avg(w) FROM u WHERE ug = k)",
            "SELECT k, x FROM t WHERE x > (SELECT 0.5 * avg(w) FROM u WHERE ug = k)"),
    "cnt": ("SELECT k FROM t WHERE coalesce(x, 0) >= (SELECT count(*) FROM u WHERE ug = k)", None),
}


def _view(model: Model, name: str, sql: str, duck: str | None) -> None:
    model.views.append((name, sql))
    model.db.execute(f"CREATE VIEW {name} AS {duck if duck is not None else duckdb_sql(sql, model.db)}")


def _check(s: sparkwave.Session, model: Model, names: list[str]) -> None:
    at = s.committed_epoch
    for name in names:
        got, want = multiset(rows_of(s.table(name, as_of=at))), multiset(model.rows(name))
        assert got == want, f"MV {name} differs from DuckDB at epoch {at}: extra {got - want}, missing {want - got}"


def _epoch(s: sparkwave.Session, model: Model, statements: list[tuple]) -> None:
    for st in statements:
        s.sql(to_sql(st))
    model.apply_epoch(statements)
    s.flush()


EPOCHS: list[list[tuple]] = [
    [("insert", "t", [(1, 1, 5, 3, "b"), (2, 1, 7, None, "a"), (3, 1, 5, 1, None), (4, 2, None, 2, "c"),
                      (5, 2, 9, 2, "c"), (6, None, 4, 4, "a")]),
     ("insert", "u", [(1, 1, 10), (2, 1, 6), (3, 2, 6), (4, 5, 30), (5, 9, 1)])],
    [("insert", "t", [(7, 1, 7, 0, "d"), (8, 2, 9, 5, "b"), (9, 3, None, None, None)]),
     ("update", "t", {"y": "NULL"}, "k = 1"), ("delete", "u", "uk = 2")],
    [("update", "t", {"g": "2"}, "k = 3"), ("update", "t", {"x": "x + 2"}, "g = 1"),
     ("insert", "u", [(6, 2, 2), (7, 7, 3)]), ("delete", "t", "k = 5")],
    [("delete", "t", "g = 1"), ("update", "u", {"w": "w * 2"}, "uk >= 4"), ("insert", "t", [(10, 9, 1, 1, "z")])],
]


def test_new_sql_is_exact_at_every_epoch_from_the_start_and_from_a_backfill(spark, tmp_path):
    """Each MV twice: created over empty tables (every row through the per-epoch path) and again
    after the first epoch (a snapshot backfill, then per epoch); both equal DuckDB at every epoch."""
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        model = Model()
        for name, cols, key in (("t", T, "k"), ("u", U, "uk")):
            s.sql(f"CREATE TABLE {name} ({cols}, PRIMARY KEY ({key}))")
            model.table(name, cols, [c.split()[0] for c in cols.split(", ")], [key])
        for name, (sql, duck) in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            _view(model, name, sql, duck)
        names = list(MVS)
        for i, batch in enumerate(EPOCHS):
            _epoch(s, model, batch)
            if i == 0:
                for name, (sql, duck) in MVS.items():
                    s.sql(f"CREATE MATERIALIZED VIEW {name}_late AS {sql}")
                    _view(model, f"{name}_late", sql, duck)
                names += [f"{n}_late" for n in MVS]
            _check(s, model, names)
            for name in ("pc", "pd", "md"):  # a query computes PostgreSQL's values too (not percentile_approx)
                assert multiset(rows_of(s.sql(MVS[name][0]))) == multiset(rows_of(s.table(name))), name


def test_returning_gives_the_rows_staged_as_postgresql_returns_them(session):
    """INSERT's and UPDATE's new rows, DELETE's old ones, each RETURNING list evaluated over them;
    the rows returned are the rows the next epoch applies."""
    s = session
    s.sql("CREATE TABLE r (k int PRIMARY KEY, v int, name varchar)")
    got = s.sql("INSERT INTO r VALUES (1, 10, 'a'), (2, 20, 'b'), (3, NULL, 'c') RETURNING *")
    assert got is not None and got.columns == ["k", "v", "name"]
    assert sorted(rows_of(got)) == [(1, 10, "a"), (2, 20, "b"), (3, None, "c")]
    assert s.sql("INSERT INTO r (k, name) VALUES (4, 'd')") is None  # no RETURNING: no rows, as before
    s.flush()
    up = s.sql("UPDATE r SET v = coalesce(v, 0) + 1 WHERE k >= 2 RETURNING k, v * 2 AS twice, upper(name)")
    assert up is not None and up.columns == ["k", "twice", "upper"]
    assert sorted(rows_of(up)) == [(2, 42, "B"), (3, 2, "C"), (4, 2, "D")]
    gone = s.sql("DELETE FROM r WHERE k = 1 OR name = 'd' RETURNING name, k")
    assert gone is not None and sorted(rows_of(gone)) == [("a", 1), ("d", 4)]
    assert rows_of(s.sql("DELETE FROM r WHERE k = 99 RETURNING k")) == []
    s.flush()
    assert sorted(rows_of(s.table("r"))) == [(2, 21, "b"), (3, 1, "c")]
    computed = s.sql("INSERT INTO r VALUES (5, 2 + 3, 'e' || 'f') RETURNING v, name")
    assert rows_of(computed) == [(5, "ef")]
    with pytest.raises(SqlError, match="unknown column 'nope' in RETURNING"):
        s.sql("UPDATE r SET v = 1 RETURNING nope")
    with pytest.raises(SqlError, match="supported in materialized views, not in queries"):  # no Spark namesake
        s.sql("SELECT first_value(v ORDER BY k) FROM r")
    s.sql("CREATE TABLE keep (k int PRIMARY KEY, v int) ON CONFLICT DO NOTHING")
    with pytest.raises(SqlError, match="ON CONFLICT"):
        s.sql("INSERT INTO keep VALUES (1, 1) RETURNING *")


def test_returning_over_the_postgresql_protocol(session):
    """A RETURNING statement answers with its rows and the `INSERT 0 n` / `UPDATE n` / `DELETE n`
    tag, in the simple and the extended protocol."""
    backend = SessionBackend(session)
    listener = Listener(backend, host="127.0.0.1", port=0).start()
    host, port = listener.address
    try:
        with psycopg.connect(f"host={host} port={port} user=tester dbname=dev", autocommit=True) as conn:
            session.sql("CREATE TABLE r (k int PRIMARY KEY, v int)")
            cur = conn.cursor()
            cur.execute("INSERT INTO r VALUES (1, 10), (2, 20) RETURNING k, v")
            assert sorted(cur.fetchall()) == [(1, 10), (2, 20)] and cur.statusmessage == "INSERT 0 2"
            session.flush()
            cur.execute("UPDATE r SET v = v + %s WHERE k = 1 RETURNING v", (5,))  # extended protocol
            assert cur.fetchall() == [(15,)] and cur.statusmessage == "UPDATE 1"
            assert [d.name for d in cur.description] == ["v"]
            cur.execute("DELETE FROM r RETURNING k")
            assert sorted(cur.fetchall()) == [(1,), (2,)] and cur.statusmessage == "DELETE 2"
            cur.execute("DELETE FROM r WHERE k = 7")
            assert cur.statusmessage == "DELETE 0" and cur.description is None
    finally:
        backend.close()
        listener.stop(timeout=10)


TPCH = {  # TPC-H's correlated scalar subqueries over comma joins (no ORDER BY / LIMIT; q17 without its / 7.0)
    "q2": """SELECT s_acctbal, s_name, n_name, p_partkey, p_mfgr FROM part, supplier, partsupp, nation, region
        WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey AND p_size = 15 AND p_type LIKE '%BRASS'
          AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey AND r_name = 'EUROPE'
          AND ps_supplycost = (SELECT min(ps_supplycost) FROM partsupp, supplier, nation, region
            WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey AND s_nationkey = n_nationkey
              AND n_regionkey = r_regionkey AND r_name = 'EUROPE')""",
    "q17": """SELECT sum(l_extendedprice) AS yearly FROM lineitem, part
        WHERE p_partkey = l_partkey AND p_brand = 'Brand#23' AND p_container = 'MED BOX'
          AND l_quantity < (SELECT 0.2 * avg(l_quantity) FROM lineitem WHERE l_partkey = p_partkey)""",
    "q20": """SELECT s_name, s_address FROM supplier, nation
        WHERE s_suppkey IN (SELECT ps_suppkey FROM partsupp WHERE ps_partkey IN (
            SELECT p_partkey FROM part WHERE p_name LIKE 'forest%')
          AND ps_availqty > (SELECT 0.5 * sum(l_quantity) FROM lineitem WHERE l_partkey = ps_partkey
            AND l_suppkey = ps_suppkey AND l_shipdate >= date '1994-01-01' AND l_shipdate < date '1995-01-01'))
        AND s_nationkey = n_nationkey AND n_name = 'CANADA'""",
}
TPCH_TABLES = {
    "region": ("r_regionkey INTEGER, r_name VARCHAR", ["r_regionkey"]),
    "nation": ("n_nationkey INTEGER, n_name VARCHAR, n_regionkey INTEGER", ["n_nationkey"]),
    "supplier": ("s_suppkey BIGINT, s_name VARCHAR, s_address VARCHAR, s_nationkey INTEGER, s_acctbal DECIMAL(15,2)",
                 ["s_suppkey"]),
    "part": ("p_partkey BIGINT, p_name VARCHAR, p_mfgr VARCHAR, p_brand VARCHAR, p_type VARCHAR, p_size INTEGER, "
             "p_container VARCHAR", ["p_partkey"]),
    "partsupp": ("ps_partkey BIGINT, ps_suppkey BIGINT, ps_availqty INTEGER, ps_supplycost DECIMAL(15,2)",
                 ["ps_partkey", "ps_suppkey"]),
    "lineitem": ("l_orderkey BIGINT, l_linenumber INTEGER, l_partkey BIGINT, l_suppkey BIGINT, "
                 "l_quantity DECIMAL(15,2), l_extendedprice DECIMAL(15,2), l_shipdate DATE",
                 ["l_orderkey", "l_linenumber"]),
}
TPCH_EPOCHS: list[list[tuple]] = [
    [("insert", "region", [(1, "EUROPE"), (2, "AMERICA")]),
     ("insert", "nation", [(1, "FRANCE", 1), (2, "CANADA", 2), (3, "GERMANY", 1)]),
     ("insert", "supplier", [(1, "s1", "a1", 1, "10.00"), (2, "s2", "a2", 3, "20.00"), (3, "s3", "a3", 2, "5.00")]),
     ("insert", "part", [(1, "forest green", "m1", "Brand#23", "BIG BRASS", 15, "MED BOX"),
                         (2, "forest red", "m2", "Brand#23", "SMALL BRASS", 15, "MED BOX"),
                         (3, "lemon", "m3", "Brand#11", "BRASS", 7, "LG BOX")]),
     ("insert", "partsupp", [(1, 1, 100, "5.00"), (1, 2, 50, "4.00"), (2, 1, 10, "7.00"), (2, 3, 900, "7.00"),
                             (3, 3, 1, "1.00")]),
     ("insert", "lineitem", [(1, 1, 1, 1, "10.00", "100.00", "1994-02-01"), (1, 2, 1, 2, "1.00", "10.00", "1994-03-01"),
                             (2, 1, 2, 3, "30.00", "300.00", "1994-05-05"), (2, 2, 2, 1, "2.00", "20.00", "1996-01-01"),
                             (3, 1, 3, 3, "1.00", "1.00", "1994-01-01")])],
    [("update", "partsupp", {"ps_supplycost": "'3.00'"}, "ps_partkey = 1 AND ps_suppkey = 1"),
     ("insert", "lineitem", [(3, 2, 1, 1, "0.50", "5.00", "1994-06-01")]), ("delete", "lineitem", "l_orderkey = 2"),
     ("update", "supplier", {"s_nationkey": "2"}, "s_suppkey = 1")],
    [("delete", "partsupp", "ps_partkey = 1 AND ps_suppkey = 1"), ("update", "part", {"p_size": "15"}, "p_partkey = 3"),
     ("insert", "partsupp", [(3, 1, 40, "0.50")])],
]


def test_tpch_correlated_subqueries_over_comma_joins_are_exact(spark, tmp_path):
    """TPC-H q2, q17 and q20 (an unqualified outer column in a correlated scalar aggregate over a
    comma join), created before the data and after its first epoch, equal DuckDB at every epoch."""
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=3_600_000) as s:
        model = Model()
        for name, (cols, key) in TPCH_TABLES.items():
            s.sql(f"CREATE TABLE {name} ({cols}, PRIMARY KEY ({', '.join(key)}))")
            model.table(name, cols, [c.split()[0] for c in cols.split(", ")], key)
        for name, sql in TPCH.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            _view(model, name, sql, sql)
        names = list(TPCH)
        for i, batch in enumerate(TPCH_EPOCHS):
            _epoch(s, model, batch)
            if i == 0:
                for name, sql in TPCH.items():
                    s.sql(f"CREATE MATERIALIZED VIEW {name}_late AS {sql}")
                    _view(model, f"{name}_late", sql, sql)
                names += [f"{n}_late" for n in TPCH]
            _check(s, model, names)
