"""The SQL surface: SHOW, DESCRIBE (with the MV's derived key), DROP and re-create, IF [NOT] EXISTS,
several statements in one call, and SELECT over the latest committed epoch."""

from __future__ import annotations

import re

import pytest
from pyspark.sql import DataFrame

from sparkwave.core.errors import CatalogError
from tests.oracle import rows_of


def test_show_describe_drop_and_select(session):
    assert session.sql("""
        CREATE TABLE t (k int, g varchar, v double precision, PRIMARY KEY (k));
        CREATE TABLE IF NOT EXISTS t (x int);
        CREATE MATERIALIZED VIEW m AS SELECT g, v * 10 AS v10 FROM t WHERE v > 0;
        CREATE MATERIALIZED VIEW mm AS SELECT * FROM m;
        INSERT INTO t VALUES (1, 'a', 1.0), (2, 'b', -1.0), (3, 'a', 2.5)
    """) is None
    session.flush()
    assert sorted(rows_of(session.sql("SHOW TABLES"))) == [("t",)]
    assert sorted(r[0] for r in rows_of(session.sql("SHOW MATERIALIZED VIEWS"))) == ["m", "mm"]
    jobs = {r[1]: r for r in rows_of(session.sql("SHOW JOBS"))}
    assert jobs["m"][3] == "snapshot" and jobs["m"][4] == "created" and jobs["t"][2] == "table"
    # m does not select t's key k: it is kept as a hidden key column; mm's `*` sees only g and v10
    assert rows_of(session.sql("DESCRIBE m")) == [("g", "varchar", False, False, None),
                                                  ("v10", "double", False, False, None), ("k", "int", True, True, None)]
    assert [r[0] for r in rows_of(session.sql("DESCRIBE mm")) if not r[3]] == ["g", "v10"]
    result = session.sql("SELECT g, sum(v10) AS s FROM mm GROUP BY g ORDER BY g")
    assert isinstance(result, DataFrame) and rows_of(result) == [("a", 35.0)]
    session.sql("DROP MATERIALIZED VIEW mm; DROP MATERIALIZED VIEW IF EXISTS nope")
    assert not (session.warehouse.relation_dir("mm")).exists()
    with pytest.raises(CatalogError, match="'mm'"):  # not a stale view over the deleted files
        session.sql("SELECT g FROM mm")
    session.sql("CREATE MATERIALIZED VIEW mm AS SELECT g FROM m WHERE v10 > 20")
    assert rows_of(session.table("mm")) == [("a",)]
    session.sql("DROP MATERIALIZED VIEW mm; DROP MATERIALIZED VIEW m; DROP TABLE t")
    assert rows_of(session.sql("SHOW JOBS")) == []


def test_mv_key_follows_upstream_through_updates(session):
    session.sql("CREATE TABLE t (a int, b int, v varchar, PRIMARY KEY (a, b)); "
                "CREATE MATERIALIZED VIEW m AS SELECT b AS bb, upper(v) AS u FROM t")
    session.sql("INSERT INTO t VALUES (1, 1, 'x'), (1, 2, 'y'), (2, 1, 'z')")
    session.flush()
    session.sql("UPDATE t SET v = 'w' WHERE a = 1")
    session.flush()
    assert sorted(rows_of(session.table("m"))) == [(1, "W"), (1, "Z"), (2, "W")]
    key = [r[0] for r in rows_of(session.sql("DESCRIBE m")) if r[2]]
    assert key == ["bb", "a"]  # b is selected (as bb); a is kept hidden


def test_describe_lists_internal_state_tables(session):
    session.sql("CREATE TABLE f (id int, g int, v int, PRIMARY KEY (id)); "
                "CREATE TABLE dim (g int, name varchar, PRIMARY KEY (g)); "
                "CREATE MATERIALIZED VIEW j AS SELECT dim.name, count(*) AS n, max(f.v) AS mx "
                "FROM f JOIN dim ON f.g = dim.g GROUP BY dim.name")
    session.sql("INSERT INTO f VALUES (1, 1, 5), (2, 1, 7); INSERT INTO dim VALUES (1, 'a')")
    session.flush()
    rows = rows_of(session.sql("DESCRIBE j"))
    assert [(r[0], r[2]) for r in rows if r[1] != "internal table"] == [("name", True), ("n", False), ("mx", False)]
    internal = {r[0]: r[4] for r in rows if r[1] == "internal table"}
    assert len(internal) == 4 and all(name.startswith("j.") for name in internal)
    # what each holds in the user's names, as EXPLAIN words it
    assert internal == {"j.j3l": "the left side's f rows by f.g", "j.j3r": "the right side's dim rows by dim.g",
                        "j.a5": "count(*), max(v) per name",
                        "j.a5v0": "each value of v per name with its count, for max(v)"}
    assert rows_of(session.table("j")) == [("a", 2, 7)]
    session.sql("DROP MATERIALIZED VIEW j")
    assert {r.name for r in session.catalog.relations(internal=True)} == {"f", "dim"}
    assert not session.warehouse.relation_dir("j").exists()


def test_join_sides_store_only_the_columns_the_query_reads(session):
    """A scan reads, and a join side's state stores, the columns the query uses (a join key, a
    predicate's, a selected or aggregated one, the side's key): not the wide unused ones."""
    session.sql("CREATE TABLE f (id int, g int, v int, note varchar, pad varchar, PRIMARY KEY (id)); "
                "CREATE TABLE dim (g int, name varchar, blurb varchar, lo int, PRIMARY KEY (g)); "
                "CREATE MATERIALIZED VIEW j AS SELECT dim.name, f.v FROM f JOIN dim ON f.g = dim.g WHERE f.v > dim.lo; "
                "CREATE MATERIALIZED VIEW a AS SELECT dim.name, max(f.v) AS mx FROM f JOIN dim ON f.g = dim.g "
                "GROUP BY dim.name")
    session.sql("INSERT INTO f VALUES (1, 1, 5, 'x', 'long'), (2, 1, 7, 'y', 'long'), (3, 2, 1, 'z', 'long'); "
                "INSERT INTO dim VALUES (1, 'a', 'wide', 6), (2, 'b', 'wide', 0)")
    session.flush()

    def sides(mv: str) -> list[list[str]]:
        """The user's column names that each join side's state table stores (left, right)."""
        internal = [r[0] for r in rows_of(session.sql(f"DESCRIBE {mv}")) if " side's " in (r[4] or "")]
        return [sorted(re.sub(r"^c\d+_", "", c.name) for c in session.catalog.relation(t).schema.columns)
                for t in sorted(internal, key=lambda t: t[-1])]  # ...l, ...r

    assert sides("j") == [["g", "id", "v"], ["g", "lo", "name"]]
    assert sides("a") == [["g", "id", "v"], ["g", "name"]]
    assert sorted(rows_of(session.table("j"))) == [("a", 7), ("b", 1)]
    assert sorted(rows_of(session.table("a"))) == [("a", 7), ("b", 1)]
    session.sql("UPDATE dim SET lo = 0, blurb = 'x' WHERE g = 1; DELETE FROM f WHERE id = 2")
    session.flush()
    assert sorted(rows_of(session.table("j"))) == [("a", 5), ("b", 1)]
    assert sorted(rows_of(session.table("a"))) == [("a", 5), ("b", 1)]


def test_drop_cascade_drops_what_depends_on_it(session, tmp_path):
    s = session
    s.sql("CREATE TABLE t (k int PRIMARY KEY, v int); CREATE TABLE u (k int PRIMARY KEY); "
          "CREATE MATERIALIZED VIEW a AS SELECT k, v FROM t; CREATE MATERIALIZED VIEW b AS SELECT k FROM a; "
          "CREATE MATERIALIZED VIEW c AS SELECT a.k FROM a JOIN u ON a.k = u.k; "
          "CREATE MATERIALIZED VIEW keep AS SELECT k FROM u")
    s.sql(f"CREATE SINK out FROM b WITH (connector = 'deltalake', location = '{tmp_path / 'out'}')")
    with pytest.raises(CatalogError, match="depend on it"):
        s.sql("DROP TABLE t")
    with pytest.raises(CatalogError, match="depend on it"):
        s.sql("DROP TABLE t RESTRICT")
    s.sql("DROP TABLE t CASCADE")
    assert sorted(r[0] for r in rows_of(s.sql("SHOW MATERIALIZED VIEWS"))) == ["keep"]
    assert rows_of(s.sql("SHOW SINKS")) == [] and sorted(r[0] for r in rows_of(s.sql("SHOW TABLES"))) == ["u"]
    s.sql("DROP MATERIALIZED VIEW keep CASCADE; DROP TABLE IF EXISTS t CASCADE")
    assert rows_of(s.sql("SHOW MATERIALIZED VIEWS")) == []


def test_delete_by_primary_key_is_looked_up_not_scanned(session, monkeypatch):
    """`DELETE ... WHERE k = <literal>` or `k IN (<literals>)` on the primary key stages the rows of
    those keys found by a point lookup (no scan of the table); missing keys delete nothing, and the
    change reaches MVs as any DELETE's. Other conditions still go through a scan."""
    from sparkwave.frontend import dml

    session.sql("CREATE TABLE t (k varchar, v int, PRIMARY KEY (k)); CREATE TABLE n (k bigint PRIMARY KEY, v int); "
                "CREATE MATERIALIZED VIEW m AS SELECT count(*) AS c, sum(v) AS s FROM t")
    session.sql("INSERT INTO t VALUES " + ", ".join(f"('k{i}', {i})" for i in range(20)))
    session.sql("INSERT INTO n VALUES (1, 1), (2, 2), (3, 3)")
    session.flush()
    session.compact("t")  # one table looked up through its base's key index, the other in its log

    scanned = []
    matching = dml._matching
    monkeypatch.setattr(dml, "_matching", lambda *a: scanned.append(a[0]) or matching(*a))
    session.sql("DELETE FROM t WHERE k IN ('k1', 'k3', 'k3', 'absent'); DELETE FROM t WHERE 'k19' = k; "
                "DELETE FROM n WHERE k = 2")
    assert scanned == []
    session.sql("DELETE FROM t WHERE v > 17")  # not by key: scanned
    session.sql("DELETE FROM n WHERE k = 3.0")  # a literal of another type: Spark decides the comparison
    session.sql("DELETE FROM n WHERE n.k IN (1, 4)")
    assert len(scanned) == 2
    session.flush()
    left = [i for i in range(20) if i not in (1, 3, 19, 18)]
    assert sorted(rows_of(session.table("t"))) == sorted((f"k{i}", i) for i in left)
    assert rows_of(session.table("m")) == [(len(left), sum(left))]
    assert rows_of(session.table("n")) == []
