"""SQL semantics as PostgreSQL (and RisingWave) define them, where Spark's or a naive plan's differ:
each MV is created over existing data (a backfill) and then maintained through inserts, updates and
deletes (the per-epoch path), and equals DuckDB's evaluation of its SQL at every committed epoch
(`tests/oracle.py` makes DuckDB follow the same semantics)."""

from __future__ import annotations

import uuid
from decimal import Decimal

import psycopg
import pytest
from pyspark.sql import types as T

import sparkwave
from sparkwave.core.errors import SqlError
from sparkwave.stream import arrow_chain
from tests.oracle import Model, multiset, rows_of, to_sql


@pytest.fixture(autouse=True, params=["arrow", "spark"])
def small_epochs(request):
    """Every case runs twice: small epochs' chains evaluated in Arrow where they compile
    (`stream/arrow_chain.py`), and all of them by Spark (the Arrow path forced off). Both must
    equal DuckDB's rows at every epoch, so the two paths give the same MV rows."""
    before = arrow_chain.ENABLED
    arrow_chain.ENABLED = request.param == "arrow"
    yield
    arrow_chain.ENABLED = before


def setup(s: sparkwave.Session, model: Model, tables: list[tuple[str, str, list[str]]]) -> None:
    """Create `(name, columns, key)` tables in sparkwave and in the model (columns in DuckDB types)."""
    for name, columns, key in tables:
        s.sql(f"CREATE TABLE {name} ({columns}, PRIMARY KEY ({', '.join(key)}))")
        model.table(name, columns, [c.split()[0] for c in columns.split(", ")], key)


def epoch(s: sparkwave.Session, model: Model, statements: list[tuple]) -> int:
    """Run one epoch of DML in sparkwave and in the model; the committed epoch."""
    for st in statements:
        s.sql(to_sql(st))
    model.apply_epoch(statements)
    return s.flush()


def create(s: sparkwave.Session, model: Model, mvs: dict[str, str]) -> None:
    """Create each MV over the existing data (a backfill) and check it at the committed epoch."""
    for name, sql in mvs.items():
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        model.view(name, sql)
    check(s, model, s.committed_epoch, mvs)


def check(s: sparkwave.Session, model: Model, at: int, names: dict[str, str]) -> None:
    """Each MV equals DuckDB's evaluation at epoch `at`, and so does its query run ad hoc (the data is
    `at`'s: nothing is written between): queries and MVs share one PostgreSQL translation."""
    for name, sql in names.items():
        got, want = multiset(rows_of(s.table(name, as_of=at))), multiset(model.rows(name))
        assert got == want, f"MV {name} differs from DuckDB at epoch {at}: extra {got - want}, missing {want - got}"
        if sql:
            same_as_query(s, name, sql)


# MV queries Spark cannot run ad hoc, by a part of their text: its analyser resolves no outer column
# two subqueries up
NOT_AD_HOC = {"WHERE o2.c = o.c": "cannot be resolved"}


def same_as_query(s: sparkwave.Session, name: str, sql: str) -> None:
    """The MV `name` holds the rows its query `sql` gives when run ad hoc (a bare VALUES as a FROM
    item: statements take it only in CREATE)."""
    refused = next((error for part, error in NOT_AD_HOC.items() if part in sql), None)
    if refused is not None:
        with pytest.raises(SqlError, match=refused):
            s.sql(sql)
        return
    if sql.lstrip().upper().startswith("VALUES"):
        sql = f"SELECT * FROM ({sql}) AS v"
    mv, query = multiset(rows_of(s.table(name))), multiset(rows_of(s.sql(sql)))
    assert query == mv, f"query of MV {name} differs from the MV: extra {query - mv}, missing {mv - query}"


def test_inner_join_conditions_apply_below_a_later_right_or_full_join(session):
    """A non-equality (or one-side) condition in an inner join's ON filters that join's rows, not the
    NULL-padded rows of a RIGHT/FULL join after it."""
    s, model = session, Model()
    setup(s, model, [("a", "k INTEGER, v INTEGER", ["k"]), ("b", "k INTEGER, v INTEGER", ["k"]),
                     ("c", "k INTEGER, w INTEGER", ["k"])])
    epoch(s, model, [("insert", "a", [(1, 5), (2, 1), (3, 9)]), ("insert", "b", [(1, 3), (2, 4), (3, 1)]),
                     ("insert", "c", [(1, 10), (2, 20), (4, 40)])])
    mvs = {"both_full": "SELECT a.k AS ak, b.k AS bk, c.k AS ck, c.w FROM a JOIN b ON a.k = b.k AND a.v > b.v "
                        "FULL JOIN c ON c.k = a.k",
           "one_right": "SELECT a.k AS ak, b.v AS bv, c.k AS ck FROM a JOIN b ON a.k = b.k AND b.v < 4 "
                        "RIGHT JOIN c ON c.k = b.k",
           "then_left": "SELECT a.k AS ak, c.w FROM a JOIN b ON a.k = b.k AND a.v > b.v LEFT JOIN c ON c.k = a.k"}
    create(s, model, mvs)
    for batch in ([("update", "a", {"v": "0"}, "k = 1"), ("insert", "c", [(3, 30)])],
                  [("delete", "b", "k = 3"), ("insert", "a", [(4, 100)]), ("insert", "b", [(4, 1)])],
                  [("update", "b", {"v": "v - 10"}, "k <= 2"), ("delete", "c", "k = 4")]):
        check(s, model, epoch(s, model, batch), mvs)


def test_select_distinct_with_group_by_is_distinct(session):
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, v INTEGER", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, 5), (2, 1, 7), (3, 2, 5), (4, 2, 1), (5, 3, 7), (6, 4, None)])])
    mvs = {"counts": "SELECT DISTINCT count(*) AS n FROM t GROUP BY g",
           "parity_max": "SELECT DISTINCT g % 2 AS parity, max(v) AS mx FROM t GROUP BY g HAVING count(*) < 3",
           "nested": "SELECT n, count(*) AS c FROM (SELECT DISTINCT count(*) AS n FROM t GROUP BY g) q GROUP BY n"}
    create(s, model, mvs)
    for batch in ([("insert", "t", [(7, 3, 1), (8, 4, 2)])],
                  [("delete", "t", "id = 1"), ("update", "t", {"v": "v + 1"}, "g = 2")],
                  [("update", "t", {"g": "1"}, "id >= 5"), ("insert", "t", [(9, 5, 7)])]):
        check(s, model, epoch(s, model, batch), mvs)
    with pytest.raises(SqlError, match="DISTINCT ON with GROUP BY"):
        s.sql("CREATE MATERIALIZED VIEW d_on AS SELECT DISTINCT ON (g) g, count(*) FROM t GROUP BY g")


def test_integer_division_truncates_toward_zero(session):
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, a INTEGER, b INTEGER, s SMALLINT, x BIGINT", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, 7, 2, 7, 7), (2, 1, -7, 2, -7, -9), (3, 2, 7, 0, 1, 5),
                                      (4, 2, None, 3, 3, None), (5, 2, 9, -4, -5, 2)])])
    mvs = {"rows": "SELECT id, a / b AS q, a / 2 AS h, s / 2 AS hs, x / a AS xa, (a / b) / 2 AS qq, "
                   "a / 2.0 AS f, 10 / 4 AS c FROM t WHERE a / 4 <> 1",
           "groups": "SELECT g / 2 AS half, sum(a) / count(*) AS m, sum(a / 2) AS sh FROM t GROUP BY g / 2",
           "joined": "SELECT t.id, u.a / t.b AS r FROM t JOIN t AS u ON t.g = u.g AND u.a / 3 > t.b / 3"}
    create(s, model, mvs)
    types = {f.name: f.dataType for f in s.table("rows").schema.fields}
    assert (types["q"], types["hs"], types["xa"]) == (T.IntegerType(), T.IntegerType(), T.LongType())
    for batch in ([("insert", "t", [(6, 3, -1, 2, 1, 1), (7, 3, 11, 3, 8, -8)])],
                  [("update", "t", {"a": "a - 3"}, "id <= 4"), ("delete", "t", "id = 5")],
                  [("update", "t", {"b": "-b"}, "TRUE")]):
        check(s, model, epoch(s, model, batch), mvs)
    # PostgreSQL: "integer out of range"; in an MV a value that cannot be stored is NULL
    s.sql("INSERT INTO t VALUES (9, 9, -2147483648, -1, 1, 1)")
    s.flush()
    assert rows_of(s.table("rows").where("id = 9").select("q")) == [(None,)]


BIG = Decimal("9" * 36 + ".00")  # the largest decimal(38, 2)
BIG10 = Decimal("9" * 28 + "." + "9" * 10)  # the largest decimal(38, 10): Spark's add keeps only 9 of its digits
NEG, NEG10 = BIG.copy_negate(), BIG10.copy_negate()  # exact: `-BIG` rounds to Python's 28 digits


def test_decimal_sum_is_exact_or_null_on_both_paths(session):
    """A decimal sum whose value does not fit decimal(38, s) is NULL, whatever the order of the rows
    and through retractions: a group comes back once its sum fits again."""
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, x DECIMAL(38,2), y DECIMAL(38,10)", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, BIG, BIG10), (2, 1, BIG, BIG10), (3, 2, BIG, BIG10),
                                      (4, 2, NEG, NEG10), (5, 2, BIG, BIG10), (6, 3, Decimal("1.25"), None),
                                      (7, 3, Decimal("-2.50"), Decimal("0.5000000001"))])])
    mvs = {"sums": "SELECT g, sum(x) AS sx, sum(y) AS sy, count(*) AS n, coalesce(sum(x), 0) AS sx0 FROM t "
                   "GROUP BY g",
           "total": "SELECT sum(x) AS sx, sum(y) AS sy FROM t",
           "exact": "SELECT g, sum(y) AS sy FROM t WHERE id > 2 GROUP BY g HAVING sum(x) > 1"}
    create(s, model, mvs)
    for batch in ([("insert", "t", [(8, 1, NEG, NEG10)])],  # group 1 fits again
                  [("insert", "t", [(9, 3, BIG, BIG10), (10, 3, BIG, BIG10)])],  # group 3 overflows per epoch
                  [("delete", "t", "id = 10"), ("insert", "t", [(3, 2, NEG, NEG10), (4, 2, BIG, BIG10)])],
                  [("delete", "t", "g <> 3")]):
        check(s, model, epoch(s, model, batch), mvs)
        # with FILTER too (an MV rewrites it into the argument; a query keeps it): exact both ways
        assert multiset(rows_of(s.sql("SELECT g, sum(x) FILTER (WHERE id > 0) AS sx FROM t GROUP BY g"))) == \
            multiset(rows_of(s.sql("SELECT g, sx FROM sums")))


def test_outer_join_on_conditions_on_one_side(session):
    """As PostgreSQL: a condition on the NULL-supplying side filters it before the join; one on the
    preserved side keeps its failing rows, NULL-padded."""
    s, model = session, Model()
    setup(s, model, [("d", "g INTEGER, x INTEGER", ["g"]), ("t", "id INTEGER, g INTEGER, v INTEGER", ["id"])])
    epoch(s, model, [("insert", "d", [(1, 5), (2, -1), (3, 0), (4, None)]),
                     ("insert", "t", [(1, 1, 60), (2, 1, 10), (3, 2, 70), (4, 3, 55), (5, 5, 99), (6, 4, 51)])])
    mvs = {"nullable": "SELECT d.g, d.x, t.id, t.v FROM d LEFT JOIN t ON t.g = d.g AND t.v > 50",
           "preserved": "SELECT d.g, t.id FROM d LEFT JOIN t ON t.g = d.g AND d.x > 0",
           "full_on": "SELECT d.g, t.id FROM d FULL JOIN t ON t.g = d.g AND d.x >= 0 AND t.v > 50",
           "right_on": "SELECT d.g, t.id, t.v FROM d RIGHT JOIN t ON d.g = t.g AND d.x > 0 AND t.v < 90",
           "counted": "SELECT d.g, count(t.id) AS n, sum(t.v) AS s FROM d LEFT JOIN t ON t.g = d.g AND t.v > 50 "
                      "GROUP BY d.g",
           "chain": "SELECT d.g, t.id, u.id AS uid FROM d LEFT JOIN t ON t.g = d.g AND t.v > 50 "
                    "LEFT JOIN t AS u ON u.g = d.g AND u.id <> 2 AND t.id IS NULL"}
    create(s, model, mvs)
    # d's rows failing `d.x > 0` never match: like a NULL join key, the join's state does not keep them
    left_state = [r[0] for r in rows_of(s.sql("DESCRIBE preserved")) if r[1] == "internal table" and r[0][-1] == "l"]
    assert [s.table(name).count() for name in left_state] == [1]
    for batch in ([("update", "t", {"v": "v + 40"}, "id <= 2"), ("update", "d", {"x": "-x"}, "g <= 2")],
                  [("insert", "t", [(7, 2, 5), (8, 6, 80)]), ("insert", "d", [(5, 1), (6, 0)])],
                  [("delete", "t", "v > 90"), ("update", "d", {"x": "1"}, "x IS NULL")]):
        check(s, model, epoch(s, model, batch), mvs)
    with pytest.raises(SqlError, match=r"t\.v > d\.x"):
        s.sql("CREATE MATERIALIZED VIEW both_sides AS SELECT d.g FROM d LEFT JOIN t ON t.g = d.g AND t.v > d.x")


def test_self_joins_pairing_one_column_with_two(session):
    """A column equal to two columns of the other side (`t2.src = t3.dst AND t3.dst = t1.dst`) is one
    join key and an equality within the other side: an epoch crashed on the key column given twice."""
    s, model = session, Model()
    setup(s, model, [("e", "id INTEGER, src INTEGER, dst INTEGER", ["id"]), ("n", "k INTEGER, a INTEGER", ["k"])])
    epoch(s, model, [("insert", "e", [(1, 1, 2), (2, 2, 3), (3, 3, 1), (4, 2, 2), (5, 1, 1), (6, 3, 2)]),
                     ("insert", "n", [(1, 1), (2, 2), (3, 1)])])
    mvs = {"paths": "SELECT t1.id AS a, t2.id AS b, t3.id AS c FROM e t1, e t2, e t3 "
                    "WHERE t1.dst = t2.src AND t2.src = t3.dst AND t3.dst = t1.dst",
           "triangle": "SELECT t1.src AS x, t2.src AS y, t3.src AS z FROM e t1, e t2, e t3 "
                       "WHERE t1.dst = t2.src AND t2.dst = t3.src AND t3.dst = t1.src",
           "twice_left": "SELECT e.id, n.k FROM e LEFT JOIN n ON e.src = n.k AND e.dst = n.k",
           "twice_right": "SELECT e.id, n.k, m.k AS mk FROM e JOIN n ON e.src = n.k "
                          "LEFT JOIN n AS m ON m.k = e.src AND m.a = e.src AND e.dst = m.a"}
    create(s, model, mvs)
    for batch in ([("insert", "e", [(7, 2, 1), (8, 1, 3)]), ("update", "n", {"a": "2"}, "k = 1")],
                  [("update", "e", {"dst": "src"}, "id <= 3"), ("delete", "n", "k = 2")],
                  [("delete", "e", "src = 1"), ("insert", "n", [(2, 2)])]):
        check(s, model, epoch(s, model, batch), mvs)


def test_numeric_cast_keeps_the_value_scale(session):
    """`::numeric` is PostgreSQL's numeric of the value (Spark's bare DECIMAL is DECIMAL(10, 0)): it
    kept no fraction, and NULL for 11 integer digits."""
    s = session
    s.sql("CREATE TABLE nums (id INTEGER PRIMARY KEY, g INTEGER, x DOUBLE, n INTEGER, d DECIMAL(6, 3))")
    s.sql("INSERT INTO nums VALUES (1, 1, 1.125, 7, 1.500), (2, 1, 2.5, 8, 2.250), (3, 2, 0.333, 9, NULL)")
    s.flush()
    query = ("SELECT g, ROUND(SUM(x)::NUMERIC, 2) AS sx, SUM(n)::NUMERIC AS sn, SUM(d)::NUMERIC AS sd, "
             "12345678901.5::numeric AS big, MAX(x)::numeric AS mx FROM nums GROUP BY g")
    s.sql(f"CREATE MATERIALIZED VIEW rounded AS {query}")
    want = {(1, Decimal("3.63"), Decimal(15), Decimal("3.750"), Decimal("12345678901.5"), Decimal("2.5")),
            (2, Decimal("0.33"), Decimal(9), None, Decimal("12345678901.5"), Decimal("0.333"))}
    assert multiset(rows_of(s.table("rounded"))) == multiset(want)
    same_as_query(s, "rounded", query)  # ad hoc it once gave 4 for 3.63: `::NUMERIC` read as DECIMAL(10, 0)
    s.sql("UPDATE nums SET x = x * 100 WHERE g = 2")
    s.flush()
    assert rows_of(s.table("rounded").where("g = 2").select("sx", "mx")) == [(Decimal("33.30"), Decimal("33.3"))]
    same_as_query(s, "rounded", query)
    assert rows_of(s.sql("SELECT ROUND(SUM(x)::NUMERIC, 2) AS sx FROM nums WHERE g = 1")) == [(Decimal("3.63"),)]


def test_to_char_reads_postgresql_patterns(session):
    """PostgreSQL's `to_char` patterns, not Java's: `HH` is 12-hour, `MI` minutes, `Month` blank-padded
    to 9, `FM` without padding, `"..."` literal; numbers rounded to the pattern, signed, zero printed
    (each expected value as PostgreSQL 18 prints it). In MVs and in queries."""
    s = session
    s.sql("CREATE TABLE ev (id INTEGER PRIMARY KEY, ts TIMESTAMP, x DECIMAL(8, 2), tag VARCHAR, tz TIMESTAMPTZ)")
    s.sql("INSERT INTO ev VALUES (1, TIMESTAMP '2024-03-05 14:07:09.25', 1234.5, 'a', "
          "TIMESTAMPTZ '2024-03-05 14:07:09.25+00'), (2, TIMESTAMP '2024-12-31 00:30:00', -7, NULL, NULL), "
          "(3, NULL, NULL, NULL, NULL), (4, TIMESTAMP '2024-03-05 14:07:09.25', 0, 'b', NULL)")
    s.flush()
    patterns = {"hm": "HH:MI", "h24": "HH24:MI:SS", "h12": "HH12 AM", "fm": "FMHH:MI am", "day": "YYYY-MM-DD",
                "month": "Month DD", "fmmonth": "FMMonth FMDD, YYYY", "dy": "Dy DY dy Mon MON",
                "quoted": '"at" HH24"h"', "ms": "SS.MS", "dow": "D ID Q DDD", "lower": "hh24:mi yyyy",
                "more": "YYY Y WW W CC SSSS"}
    cols = ", ".join(f"to_char(ts, '{p}') AS {n}" for n, p in patterns.items())
    query = (f"SELECT id, {cols}, to_char(x, 'FM9990.00') AS num, to_char(x, '9990.00') AS padded, "
             "to_char(x, '999999') AS r6, to_char(x, 'FM999') AS fm3, to_char(x, '990.0') AS f1, "
             "to_char(tz, 'HH24') AS tzh, to_char(ts, 'D'), tag FROM ev")
    s.sql(f"CREATE MATERIALIZED VIEW chars AS {query}")
    same_as_query(s, "chars", query)
    got = {r["id"]: r.asDict() for r in s.table("chars").collect()}
    assert got[1] == {"id": 1, "hm": "02:07", "h24": "14:07:09", "h12": "02 PM", "fm": "2:07 pm",
                      "day": "2024-03-05", "month": "March     05", "fmmonth": "March 5, 2024",
                      "dy": "Tue TUE tue Mar MAR", "quoted": "at 14h", "ms": "09.250", "dow": "3 2 1 065",
                      "lower": "14:07 2024", "more": "024 4 10 1 21 50829", "num": "1234.50", "padded": " 1234.50",
                      "r6": "   1235", "fm3": "###", "f1": " ###.#", "tzh": "14", "to_char": "3", "tag": "a"}
    assert (got[2]["hm"], got[2]["h12"], got[2]["fm"], got[2]["dow"], got[2]["num"], got[2]["padded"],
            got[2]["r6"], got[2]["fm3"], got[2]["f1"]) == \
        ("12:30", "12 AM", "12:30 am", "3 2 4 366", "-7.00", "   -7.00", "     -7", "-7", "  -7.0")
    assert (got[4]["r6"], got[4]["fm3"], got[4]["f1"]) == ("      0", "0", "   0.0")
    assert set(got[3].values()) == {3, None}
    assert dict(s.table("chars").dtypes)["to_char"] == "string"
    assert rows_of(s.sql("SELECT to_char(ts, 'HH:MI') AS hm, to_char(x, '9990.00') AS p FROM ev WHERE id = 2")) == \
        [("12:30", "   -7.00")]


def test_ctes_aggregate_filters_order_by_and_column_lists(session):
    """`WITH` (inlined, a CTE used twice included), `agg(...) FILTER (WHERE ...)`, `ORDER BY` without
    `LIMIT` (ignored: an MV's rows have no order) and `CREATE MATERIALIZED VIEW mv (a, b)`, each
    created over existing rows and maintained through updates and deletes."""
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, v INTEGER", ["id"]), ("d", "g INTEGER, name VARCHAR", ["g"])])
    epoch(s, model, [("insert", "t", [(1, 1, 5), (2, 1, 50), (3, 2, 7), (4, 2, None), (5, 3, 70)]),
                     ("insert", "d", [(1, "one"), (2, "two"), (4, "four")])])
    mvs = {"filtered": "SELECT g, count(*) FILTER (WHERE v > 10) AS big, sum(v) FILTER (WHERE v < 10) AS small, "
                       "count(DISTINCT v) FILTER (WHERE id > 1) AS dv, max(v) FILTER (WHERE g <> 3) AS mx, "
                       "count(*) AS n FROM t GROUP BY g",
           "ctes": "WITH big AS (SELECT id, g, v FROM t WHERE v > 6), per AS (SELECT g, count(*) AS n FROM big "
                   "GROUP BY g) SELECT per.g, per.n, d.name FROM per LEFT JOIN d ON d.g = per.g ORDER BY per.g",
           "twice": "WITH x AS (SELECT id, g FROM t) SELECT a.id, b.id AS other FROM x a JOIN x b ON a.g = b.g "
                    "ORDER BY 1 DESC",
           "ordered": "SELECT id, v FROM t WHERE v IS NOT NULL ORDER BY v DESC, id"}
    create(s, model, mvs)
    s.sql("CREATE MATERIALIZED VIEW listed (grp, total) AS SELECT g, sum(v) FROM t GROUP BY g ORDER BY 2")
    model.view("listed", "SELECT g, sum(v) FROM t GROUP BY g")
    mvs["listed"] = ""
    assert [f.name for f in s.table("listed").schema.fields] == ["grp", "total"]
    same_as_query(s, "listed", "SELECT g, sum(v) FROM t GROUP BY g ORDER BY 2")
    for batch in ([("insert", "t", [(6, 1, 11), (7, 4, 8)]), ("update", "d", {"name": "'uno'"}, "g = 1")],
                  [("update", "t", {"v": "v + 10"}, "g = 2"), ("delete", "t", "id = 2")],
                  [("delete", "t", "g = 1"), ("insert", "d", [(3, "three")])]):
        check(s, model, epoch(s, model, batch), mvs)


def test_using_natural_and_comma_joins_in_any_order(session):
    """`JOIN ... USING` / `NATURAL JOIN` merge the named columns as PostgreSQL (the left one for inner
    and left joins, the right one for a right join, COALESCE for a full join; `*` lists them once),
    and a comma list joins in whatever order its equalities allow (`a, b, c WHERE a.x = c.x AND
    b.y = c.y` was refused as a non-equi join)."""
    s, model = session, Model()
    setup(s, model, [("a", "k INTEGER, v INTEGER", ["k"]), ("b", "k INTEGER, w INTEGER", ["k"]),
                     ("c", "id INTEGER, x INTEGER, y INTEGER", ["id"])])
    epoch(s, model, [("insert", "a", [(1, 10), (2, 20), (3, 30)]), ("insert", "b", [(2, 200), (4, 400)]),
                     ("insert", "c", [(1, 1, 2), (2, 3, 4), (3, 2, 2)])])
    mvs = {"inner_using": "SELECT * FROM a JOIN b USING (k)",
           "left_using": "SELECT k, v, w FROM a LEFT JOIN b USING (k)",
           "right_using": "SELECT * FROM a RIGHT JOIN b USING (k)",
           "full_using": "SELECT * FROM a FULL JOIN b USING (k)",
           "full_expr": "SELECT k * 10 AS k10, v FROM a FULL OUTER JOIN b USING (k) WHERE k > 1",
           "nat": "SELECT * FROM a NATURAL JOIN b",
           "any_order": "SELECT a.k, b.k AS bk, c.id FROM a, b, c WHERE a.k = c.x AND b.k = c.y",
           "any_order_star": "SELECT c.*, a.v, b.w FROM a, b, c WHERE a.k = c.x AND b.k = c.y AND c.id < 10"}
    create(s, model, mvs)
    assert [f.name for f in s.table("full_using").schema.fields] == ["k", "v", "w"]
    assert [f.name for f in s.table("any_order_star").schema.fields][:5] == ["id", "x", "y", "v", "w"]
    for batch in ([("insert", "b", [(1, 100), (3, 300)]), ("insert", "c", [(4, 3, 1)])],
                  [("update", "a", {"v": "v + 1"}, "k >= 2"), ("delete", "b", "k = 2")],
                  [("delete", "a", "k = 1"), ("insert", "a", [(4, 40)]), ("update", "c", {"y": "4"}, "id = 1")]):
        check(s, model, epoch(s, model, batch), mvs)
    with pytest.raises(SqlError, match="'z' named in USING is not a column"):
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT * FROM a JOIN b USING (z)")


def test_bool_aggregates_and_min_max_distinct(session):
    """`bool_and` / `bool_or` / `every` (kept as counts: exact under deletes; NULLs ignored; NULL for
    no values) and `min/max(DISTINCT ...)`."""
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, v INTEGER", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, 5), (2, 1, 50), (3, 2, 7), (4, 2, None), (5, 3, None)])])
    mvs = {"bools": "SELECT g, bool_and(v > 6) AS all_big, bool_or(v > 6) AS any_big, min(DISTINCT v) AS lo, "
                    "max(DISTINCT v) AS hi FROM t GROUP BY g",
           "total": "SELECT bool_and(v IS NOT NULL) AS none_null, bool_or(v > 40) FROM t"}
    create(s, model, mvs)
    for batch in ([("insert", "t", [(6, 3, 9), (7, 1, 1)])],
                  [("update", "t", {"v": "100"}, "g = 2"), ("delete", "t", "id = 2")],
                  [("delete", "t", "g = 1"), ("update", "t", {"v": "NULL"}, "id = 6")]):
        check(s, model, epoch(s, model, batch), mvs)
    s.sql("CREATE MATERIALIZED VIEW ev AS SELECT g, every(v > 6) AS e, bool_and(v > 6) AS b FROM t GROUP BY g")
    same_as_query(s, "ev", "SELECT g, every(v > 6) AS e, bool_and(v > 6) AS b FROM t GROUP BY g")
    assert all(r["e"] == r["b"] for r in s.table("ev").collect())


def test_in_and_exists_subqueries_as_semi_and_anti_joins(session):
    """`IN (subquery)` and `EXISTS` (correlated through equalities) keep each outer row once however
    many rows match; `NOT EXISTS` keeps those with none, NULL keys never matching."""
    s, model = session, Model()
    setup(s, model, [("o", "id INTEGER, c INTEGER, amount INTEGER", ["id"]),
                     ("l", "id INTEGER, oid INTEGER, q INTEGER", ["id"])])
    epoch(s, model, [("insert", "o", [(1, 10, 5), (2, 10, 7), (3, 20, 1), (4, None, 3)]),
                     ("insert", "l", [(1, 1, 5), (2, 1, 9), (3, 3, 1), (4, None, 2)])])
    mvs = {"in_sub": "SELECT id, amount FROM o WHERE id IN (SELECT oid FROM l WHERE q > 1)",
           "exists_corr": "SELECT * FROM o WHERE EXISTS (SELECT 1 FROM l WHERE l.oid = o.id AND l.q >= 2)",
           "not_exists": "SELECT o.id, o.c FROM o WHERE NOT EXISTS (SELECT * FROM l WHERE l.oid = o.id)",
           "in_grouped": "SELECT c, count(*) AS n FROM o WHERE id IN (SELECT oid FROM l GROUP BY oid "
                         "HAVING sum(q) > 3) GROUP BY c",
           "any_big": "SELECT id FROM o WHERE EXISTS (SELECT 1 FROM l WHERE q > 8) AND amount > 2 AND NOT EXISTS "
                  "(SELECT 1 FROM l WHERE q > 100)",
           "nested": "SELECT id FROM o WHERE EXISTS (SELECT 1 FROM l WHERE l.oid = o.id AND l.q IN "
                     "(SELECT amount FROM o o2 WHERE o2.c = o.c))"}
    create(s, model, mvs)
    assert [f.name for f in s.table("exists_corr").schema.fields if not f.name.startswith("_")] == \
        ["id", "c", "amount"]
    for batch in ([("insert", "l", [(5, 2, 3), (6, 2, 4)]), ("update", "l", {"q": "0"}, "id = 2")],
                  [("delete", "l", "oid = 1"), ("insert", "o", [(5, 20, 9)]), ("update", "l", {"oid": "5"},
                                                                                 "id = 4")],
                  [("delete", "l", "q > 8"), ("update", "o", {"c": "NULL"}, "id = 2"), ("delete", "o", "id = 3")],
                  [("insert", "l", [(7, 4, 9)]), ("update", "l", {"q": "9"}, "id = 3")]):
        check(s, model, epoch(s, model, batch), mvs)
    with pytest.raises(SqlError, match="only as a condition of WHERE"):
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT id FROM o WHERE amount > 3 OR id IN (SELECT oid FROM l)")
    with pytest.raises(SqlError, match="unsupported correlation"):
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT id FROM o WHERE EXISTS (SELECT 1 FROM l WHERE l.q > o.amount)")


def test_not_in_and_scalar_subqueries(session):
    """`NOT IN` follows PostgreSQL's NULL rules (a NULL among the values keeps no row; an empty
    subquery keeps every row, NULL ones too); a scalar subquery is a one-row aggregate joined to
    every row, in WHERE, the SELECT list and HAVING."""
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, x INTEGER, g INTEGER", ["id"]),
                     ("u", "id INTEGER, y INTEGER", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, 1), (2, 2, 1), (3, None, 2), (4, 4, 2)]),
                     ("insert", "u", [(1, 2), (2, 3)])])
    mvs = {"not_in": "SELECT id, x FROM t WHERE x NOT IN (SELECT y FROM u)",
           "above_avg": "SELECT id FROM t WHERE x > (SELECT avg(y) FROM u)",
           "any_count": "SELECT id FROM t WHERE id = ANY (SELECT count(*) FROM u GROUP BY y IS NULL)",  # int, bigint
           "with_total": "SELECT id, x, (SELECT count(*) FROM u) AS n, (SELECT max(y) FROM u) FROM t",
           "over_min": "SELECT g, sum(x) AS s, (SELECT sum(y) FROM u) AS uy FROM t GROUP BY g "
                     "HAVING sum(x) >= (SELECT min(y) FROM u)",
           # correlated: a LEFT JOIN with the subquery grouped by its correlation (issue 48)
           "correlated": "SELECT id, (SELECT max(y) FROM u WHERE u.id = t.id) AS m FROM t"}
    create(s, model, mvs)
    assert [f.name for f in s.table("with_total").schema.fields if not f.name.startswith("_")] == \
        ["id", "x", "n", "max"]
    for batch in ([("insert", "u", [(3, None)])],  # a NULL value: NOT IN keeps nothing
                  [("delete", "u", "y IS NULL"), ("insert", "t", [(5, 3, 3)])],
                  [("delete", "u", "id > 0")],  # empty: NOT IN keeps every row, NULL x too
                  [("insert", "u", [(4, 1), (5, 10)]), ("update", "t", {"x": "NULL"}, "id = 1")]):
        check(s, model, epoch(s, model, batch), mvs)
    with pytest.raises(SqlError, match="scalar subquery must compute one aggregate"):
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT id FROM t WHERE x = (SELECT y FROM u WHERE id = 1)")
    with pytest.raises(SqlError, match="correlated scalar subquery"):  # in an aggregate's SELECT list
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT g, (SELECT max(y) FROM u WHERE u.id = t.g) FROM t GROUP BY g")


def test_window_functions_and_top_n(session):
    """`OVER (PARTITION BY ... ORDER BY ...)` functions, group top-n (`row_number() ... <= n`,
    `DISTINCT ON`) and `ORDER BY ... LIMIT ... OFFSET`, kept exact as rows enter, leave and move
    between partitions; NULLs order as PostgreSQL (last ascending, first descending)."""
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, v INTEGER, w INTEGER", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, 10, 1), (2, 1, 30, 2), (3, 1, 20, 2), (4, 2, 5, 1), (5, 2, None, 1),
                                      (6, 3, 7, 3)])])
    mvs = {"top2": "SELECT * FROM (SELECT id, g, v, row_number() OVER (PARTITION BY g ORDER BY v DESC) AS rn "
                   "FROM t) s WHERE rn <= 2",
           "ranked": "SELECT id, g, rank() OVER (PARTITION BY g ORDER BY w) AS r, dense_rank() OVER "
                     "(PARTITION BY g ORDER BY w DESC) AS dr, row_number() OVER (ORDER BY id DESC), "
                     "sum(w) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s2 FROM t",
           "running": "SELECT id, g, sum(v) OVER (PARTITION BY g ORDER BY id) AS run, count(*) OVER (PARTITION BY g) "
                      "AS n, lag(v) OVER (PARTITION BY g ORDER BY id) AS prev, lead(v, 1) OVER (PARTITION BY g "
                      "ORDER BY id) AS nxt, last_value(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN UNBOUNDED "
                      "PRECEDING AND UNBOUNDED FOLLOWING) AS lv FROM t WHERE v IS NOT NULL OR id > 3",
           "global_top": "SELECT id, v FROM t ORDER BY v DESC NULLS LAST, id LIMIT 3",
           "top_offset": "SELECT g, sum(w) AS s FROM t GROUP BY g ORDER BY s DESC, g OFFSET 1 FETCH FIRST 2 ROWS ONLY",
           "first_per_g": "SELECT DISTINCT ON (g) g, id, v FROM t ORDER BY g, v DESC NULLS LAST, id"}
    create(s, model, mvs)
    assert [f.name for f in s.table("ranked").schema.fields] == ["id", "g", "r", "dr", "row_number", "s2"]
    assert [f.name for f in s.table("global_top").schema.fields] == ["id", "v"]
    for batch in ([("insert", "t", [(7, 1, 40, 1), (8, 3, 1, 3)])],  # a new top row shifts the others
                  [("update", "t", {"g": "3"}, "id = 2"), ("delete", "t", "id = 4")],  # moves between groups
                  [("update", "t", {"v": "NULL"}, "id = 7"), ("update", "t", {"w": "w + 1"}, "g = 1")],
                  [("delete", "t", "g = 3"), ("insert", "t", [(9, 2, 50, 2), (10, 4, 0, 0)])]):
        check(s, model, epoch(s, model, batch), mvs)
    with pytest.raises(SqlError, match="may only be in the SELECT list"):
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT id FROM t WHERE row_number() OVER (ORDER BY id) < 3")
    with pytest.raises(SqlError, match="LIMIT in a materialized view must be a non-negative integer"):
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT id FROM t ORDER BY id LIMIT -1")


def test_is_not_distinct_from_join_keys_match_nulls(session):
    """`IS NOT DISTINCT FROM` pairs NULL with NULL, in inner, outer and comma joins; `=` beside it
    still never matches NULL."""
    s, model = session, Model()
    setup(s, model, [("a", "id INTEGER, x INTEGER, s VARCHAR", ["id"]), ("b", "id INTEGER, y INTEGER, s VARCHAR",
                                                                          ["id"])])
    epoch(s, model, [("insert", "a", [(1, 1, "p"), (2, None, "q"), (3, None, None)]),
                     ("insert", "b", [(1, None, "q"), (2, 1, None), (3, 2, "p")])])
    mvs = {"ns_inner": "SELECT a.id, b.id AS bid FROM a JOIN b ON a.x IS NOT DISTINCT FROM b.y",
           "ns_left": "SELECT a.id, b.id AS bid FROM a LEFT JOIN b ON a.x IS NOT DISTINCT FROM b.y AND a.id > 1",
           "ns_two": "SELECT a.id, b.id AS bid FROM a, b WHERE a.s IS NOT DISTINCT FROM b.s AND a.x = b.y",
           "ns_text": "SELECT a.id, count(*) AS n FROM a JOIN b ON a.s IS NOT DISTINCT FROM b.s GROUP BY a.id"}
    create(s, model, mvs)
    for batch in ([("insert", "b", [(4, None, None)]), ("update", "a", {"x": "1"}, "id = 2")],
                  [("update", "b", {"y": "NULL"}, "id = 2"), ("delete", "a", "id = 1")],
                  [("update", "a", {"s": "NULL"}, "id > 0"), ("insert", "a", [(5, 2, "p")])]):
        check(s, model, epoch(s, model, batch), mvs)


def test_string_agg_in_order_through_changes(session):
    """`string_agg(x, sep ORDER BY ...)`: NULLs skipped, NULL for a group with no values, the
    string rebuilt in order as rows enter, leave and change."""
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, s VARCHAR, o INTEGER", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, "a", 3), (2, 1, "b", 1), (3, 1, None, 2), (4, 2, "c", 5),
                                      (5, 3, None, 4)])])
    mvs = {"joined": "SELECT g, string_agg(s, ',' ORDER BY o DESC) AS names, count(*) AS n FROM t GROUP BY g",
           "whole": "SELECT string_agg(s, ' | ' ORDER BY id) AS s FROM t WHERE o > 1",
           "has_b": "SELECT g, max(o) AS top FROM t GROUP BY g HAVING string_agg(s, '' ORDER BY id) LIKE '%b%'"}
    create(s, model, mvs)
    for batch in ([("insert", "t", [(6, 1, "d", 0), (7, 3, "e", 6)])],
                  [("update", "t", {"o": "10"}, "id = 2"), ("update", "t", {"s": "'f'"}, "id = 3")],
                  [("delete", "t", "g = 1"), ("update", "t", {"g": "1"}, "id = 4")],
                  [("delete", "t", "id > 0")]):
        check(s, model, epoch(s, model, batch), mvs)
    with pytest.raises(SqlError, match="string_agg\\(DISTINCT"):
        s.sql("CREATE MATERIALIZED VIEW bad AS SELECT g, string_agg(DISTINCT s, ',') FROM t GROUP BY g")


def test_create_table_on_conflict(session):
    """An INSERT of a key the table holds replaces its row (OVERWRITE), is dropped (DO NOTHING) or
    fills in its non-NULL values (DO UPDATE IF NOT NULL), in statement order within an epoch, and
    MVs over the tables follow (created over existing rows, then per epoch)."""
    s, model = session, Model()
    rules = {"keep": ("DO NOTHING", "ignore"), "fill": ("DO UPDATE IF NOT NULL", "update_if_not_null"),
             "over": ("OVERWRITE", "overwrite")}
    for name, (sql, rule) in rules.items():
        s.sql(f"CREATE TABLE {name} (k INTEGER, a INTEGER, b VARCHAR, PRIMARY KEY (k)) ON CONFLICT {sql}")
        model.table(name, "k INTEGER, a INTEGER, b VARCHAR", ["k", "a", "b"], ["k"], on_conflict=rule)

    def each(*statements: tuple) -> list[tuple]:
        return [(st[0], name, *st[1:]) for name in rules for st in statements]

    epoch(s, model, each(("insert", [(1, 10, "x"), (2, 20, "y"), (2, 22, None)])))  # a key twice in one INSERT
    mvs = {f"{t}_sum": f"SELECT count(*) AS n, sum(a) AS sa, max(b) AS mb FROM {t}" for t in rules}
    create(s, model, mvs)
    tables = dict.fromkeys(rules, "")
    for batch in (each(("insert", [(1, None, "n"), (3, 30, None)]), ("insert", [(3, 31, "z")]),
                       ("delete", "k = 2"), ("insert", [(2, 21, None)])),
                  each(("update", {"a": "a + 1"}, "k = 1"), ("insert", [(1, None, None), (4, None, "w")])),
                  each(("delete", "k = 1"), ("insert", [(1, 5, None)]), ("insert", [(1, None, "v")]))):
        at = epoch(s, model, batch)
        check(s, model, at, tables)
        check(s, model, at, mvs)
    assert sorted(rows_of(s.table("fill"))) == [(1, 5, "v"), (2, 21, None), (3, 31, "z"), (4, None, "w")]


def test_values_and_constant_mvs(session):
    """VALUES as a FROM item (joined, outer-joined, crossed as one row, in an IN list), a query that
    is only VALUES, and a SELECT without FROM: built once, and the joins over them maintained."""
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, v INTEGER", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, 5), (2, 2, 7), (3, 2, None), (4, 3, 1)])])
    mvs = {"const": "SELECT 1 AS one, 'a' AS s, 2.5 AS d, 7 / 2 AS q",
           "vals": "VALUES (1, 'a'), (1, 'a'), (2, NULL)",
           "named": "SELECT x, y FROM (VALUES (1, 'p'), (2, 'q'), (3, 'r')) AS v(x, y) WHERE x > 1",
           "joined": "SELECT t.id, v.label FROM t JOIN (VALUES (1, 'one'), (2, 'two')) AS v(g, label) ON t.g = v.g",
           "padded": "SELECT v.g, count(t.id) AS n, sum(t.v) AS sv FROM (VALUES (1), (2), (9)) AS v(g) "
                   "LEFT JOIN t ON t.g = v.g GROUP BY v.g",
           "scaled": "SELECT t.id, r.rate * t.v AS x FROM t, (VALUES (2)) AS r(rate)",
           "in_list": "SELECT id FROM t WHERE g IN (SELECT c FROM (VALUES (1), (3)) AS q(c))"}
    create(s, model, mvs)
    for batch in ([("insert", "t", [(5, 9, 2), (6, 1, 3)])],
                  [("update", "t", {"g": "g + 1"}, "id <= 3"), ("delete", "t", "id = 4")],
                  [("delete", "t", "g = 9"), ("update", "t", {"v": "v * 10"}, "TRUE")]):
        check(s, model, epoch(s, model, batch), mvs)


def test_bytea_columns(session):
    """bytea values through tables, group keys and join keys (DuckDB's BLOB as the oracle), and
    PostgreSQL's bytea input and output forms."""
    s, model = session, Model()
    s.sql("CREATE TABLE b (k INTEGER, v BYTEA, g INTEGER, PRIMARY KEY (k))")
    model.table("b", "k INTEGER, v BLOB, g INTEGER", ["k", "v", "g"], ["k"])
    epoch(s, model, [("insert", "b", [(1, b"\xde\xad", 1), (2, b"abc", 1), (3, None, 2), (4, b"\xde\xad", 2),
                                      (5, b"", 2)])])
    mvs = {"groups": "SELECT v, count(*) AS n, sum(g) AS sg FROM b GROUP BY v",
           "pairs": "SELECT x.k AS a, y.k AS c, x.v FROM b x JOIN b y ON x.v = y.v AND x.k < y.k",
           "lens": "SELECT k, v, octet_length(v) AS n FROM b WHERE v IS NOT NULL"}
    create(s, model, mvs)
    for batch in ([("insert", "b", [(6, b"abc", 3), (7, b"\x00\xff", 3)]), ("delete", "b", "k = 1")],
                  [("update", "b", {"g": "g + 10"}, "k >= 4"), ("insert", "b", [(2, b"\xde\xad", 1)])]):
        check(s, model, epoch(s, model, batch), mvs)
    s.sql(r"INSERT INTO b VALUES (9, 'a\\b\001', 0)")  # escape format: a backslash, an octal byte
    s.flush()
    shown = ("SELECT k, encode(v, 'hex') AS h, encode(v, 'base64') AS b64, "
             r"v::text AS t, decode('0102', 'hex') AS d, '\x0a0b'::bytea AS c FROM b WHERE k IN (4, 9)")
    s.sql(f"CREATE MATERIALIZED VIEW shown AS {shown}")
    same_as_query(s, "shown", shown)
    assert sorted(rows_of(s.table("shown"))) == [(4, "dead", "3q0=", "\\xdead", b"\x01\x02", b"\x0a\x0b"),
                                                 (9, "615c6201", "YVxiAQ==", "\\x615c6201", b"\x01\x02", b"\x0a\x0b")]
    picked = r"SELECT k FROM b WHERE v = '\xdead' OR v IN ('abc', '\x00ff') OR coalesce(v, '\x01') = '\x01'"
    s.sql(f"CREATE MATERIALIZED VIEW picked AS {picked}")
    same_as_query(s, "picked", picked)
    s.sql(r"DELETE FROM b WHERE v = '\x00ff'")
    s.sql(r"INSERT INTO b (k, v, g) VALUES (10, decode('00ff', 'hex'), 1 + 1)")  # the Spark path of INSERT
    s.sql(r"UPDATE b SET v = CASE WHEN g > 100 THEN '\x01' ELSE '\x02' END WHERE k = 9")
    s.flush()
    assert sorted(rows_of(s.table("picked"))) == [(2,), (3,), (4,), (6,), (10,)]
    same_as_query(s, "picked", picked)
    assert rows_of(s.table("b").where("k = 9").select("v")) == [(b"\x02",)]


def test_extract_epoch(session):
    """`extract(epoch FROM ...)`, which Spark lacks, of a timestamp (read as UTC), a timestamptz, a
    date and an interval, as PostgreSQL's numeric seconds."""
    s = session
    s.sql("CREATE TABLE tt (k INT PRIMARY KEY, a TIMESTAMP, b TIMESTAMP, z TIMESTAMPTZ, d DATE)")
    s.sql("INSERT INTO tt VALUES (1, '2024-01-01 00:00:00', '2024-01-02 01:30:00.25', '2024-01-01 00:00:00+02', "
          "'2024-01-01')")
    s.flush()
    query = ("SELECT k, extract(epoch FROM b - a) AS secs, extract(epoch FROM a) AS ea, extract(epoch FROM z) AS ez, "
             "extract(epoch FROM d) AS ed, extract(epoch FROM INTERVAL '90' MINUTE) AS i FROM tt")
    s.sql(f"CREATE MATERIALIZED VIEW e AS {query}")
    same_as_query(s, "e", query)
    assert rows_of(s.table("e")) == [(1, Decimal("91800.25"), Decimal(1704067200), Decimal(1704060000),
                                      Decimal(1704067200), Decimal(5400))]


FUNCTIONS = [  # PostgreSQL's meaning differs from Spark's namesake (frontend/pg_functions.py)
    "substr(s, 0, 3)", "substr(s, -3, 5)", "substr(s, 0)", "substring(s, i - 1, 2)", "left(s, -2)", "right(s, -2)",
    "left(s, i)", "initcap(s)", "regexp_replace(s, 'o', '0')", "regexp_replace(s, 'O', '0', 'gi')",
    "regexp_replace(s, '(o)(.)', '[\\2\\1\\&]')", "regexp_replace(s, 'o', '$1\\\\', 'g')", "log(d)", "round(d)",
    "round(x)", "CAST(x AS int)", "CAST(d AS int)", "CAST(t AS int)", "extract(dow FROM ts)",
    "extract(isodow FROM ts)", "date_part('dow', ts)", "extract(millisecond FROM ts)", "abs(i)", "-i", "i * 3 + big",
    "concat(s, t, 'x')", "split_part(s, ' ', 2)", "i / 2", "x::numeric", "ts AT TIME ZONE 'America/New_York'",
    "timezone('Asia/Tokyo', ts AT TIME ZONE 'UTC')", "ts::date - DATE '2024-01-01'",
]


def test_functions_follow_postgresql(session, postgres):
    """Each function whose Spark namesake differs, in an MV (backfilled, then per epoch), equals
    PostgreSQL 18's evaluation of the same SELECT on the same rows; an integer result that leaves
    its type is NULL (PostgreSQL raises; an epoch must not fail for one value, as in RisingWave)."""
    s = session
    ddl = "id int, s varchar, t varchar, i int, big bigint, d double precision, x decimal(10,2), ts timestamp"
    rows = ["(1, 'Hello wORLD-foo bar_baz', ' 42 ', 3, 10, 2.5, 2.50, '2024-03-10 14:05:06.789')",
            "(2, 'oh,no o''neil', ' +12', -1, -5, 100, -2.50, '2024-03-11 00:00:00')",
            "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"]
    s.sql(f"CREATE TABLE f ({ddl}, PRIMARY KEY (id))")
    s.sql(f"INSERT INTO f VALUES {', '.join(rows)}")
    s.flush()
    select = "SELECT id, " + ", ".join(f"{e} AS e{j}" for j, e in enumerate(FUNCTIONS)) + " FROM f"
    s.sql(f"CREATE MATERIALIZED VIEW fx AS {select}")
    more = ["(4, 'abc', '7', 7, 1, 3.5, -0.5, '2024-03-16 23:59:59.999999')", "(5, 'o', '-3', 0, 0, 0.5, 1.5, NULL)"]
    s.sql(f"INSERT INTO f VALUES {', '.join(more)}")
    s.sql("UPDATE f SET s = 'fooo boo' WHERE id = 2")
    s.flush()
    with psycopg.connect(postgres.create_database(f"f_{uuid.uuid4().hex[:8]}")) as pg:
        pg.execute(f"CREATE TABLE f ({ddl})")
        pg.execute(f"INSERT INTO f VALUES {', '.join(rows + more)}")
        pg.execute("UPDATE f SET s = 'fooo boo' WHERE id = 2")
        want = {r[0]: r for r in pg.execute(select).fetchall()}
    got = {r[0]: r for r in rows_of(s.table("fx"))}
    same_as_query(s, "fx", select)
    for key, row in want.items():
        for j, (a, b) in enumerate(zip(got[key], row, strict=True)):
            assert a == b or (isinstance(a, float) and isinstance(b, float) and abs(a - b) < 1e-12), \
                f"row {key}: {FUNCTIONS[j - 1] if j else 'id'} is {a!r}, PostgreSQL's {b!r}"
    wrap = "SELECT id, i + 2147483647 AS a, big * 2 AS b, -(i - 3) AS c, CAST(t AS int) AS n FROM f WHERE id IN (1, 4)"
    s.sql(f"CREATE MATERIALIZED VIEW wrap AS {wrap}")
    s.sql("UPDATE f SET big = 9223372036854775807, t = '12.7' WHERE id = 4")  # not an integer: NULL
    s.flush()
    assert sorted(rows_of(s.table("wrap"))) == [(1, None, 20, 0, 42), (4, None, None, -4, None)]
    same_as_query(s, "wrap", wrap)


def test_window_functions_over_groups_and_before_distinct(session):
    """PostgreSQL evaluates window functions after GROUP BY / HAVING and before DISTINCT: a window
    over aggregates (`rank() OVER (ORDER BY sum(v))`), positions and expressions as group keys, and
    DISTINCT over windowed rows."""
    s, model = session, Model()
    setup(s, model, [("t", "id INTEGER, g INTEGER, v INTEGER", ["id"])])
    epoch(s, model, [("insert", "t", [(1, 1, 5), (2, 1, 7), (3, 2, 5), (4, 3, 1), (5, 3, 2), (6, 4, None)])])
    mvs = {"ranked": "SELECT g, sum(v) AS s, rank() OVER (ORDER BY sum(v) DESC NULLS LAST) AS r FROM t GROUP BY g",
           "running": "SELECT g, count(*), sum(count(*)) OVER (ORDER BY g) AS c FROM t WHERE v > 1 GROUP BY 1 "
                      "HAVING count(*) >= 1",
           "parity": "SELECT g % 2 AS p, max(v) AS mx, lag(max(v)) OVER (ORDER BY g % 2) AS prev FROM t GROUP BY g % 2",
           "firsts": "SELECT DISTINCT g, first_value(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN UNBOUNDED "
                     "PRECEDING AND UNBOUNDED FOLLOWING) AS fv FROM t"}
    create(s, model, mvs)
    for batch in ([("insert", "t", [(7, 2, 9), (8, 5, 3)])],
                  [("update", "t", {"v": "v + 4"}, "g = 3"), ("delete", "t", "id = 1")],
                  [("update", "t", {"g": "g + 1"}, "id >= 6")]):
        check(s, model, epoch(s, model, batch), mvs)
