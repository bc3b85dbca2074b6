"""Generated columns (`v2 int AS v1 + 1`, RisingWave's syntax; PostgreSQL's `GENERATED ALWAYS AS
(...) STORED`) give the rows real PostgreSQL gives after the same INSERTs, UPDATEs and DELETEs, in
the table and in an MV over it, in small epochs (Arrow, on the driver) and big ones (Spark)."""

from __future__ import annotations

import psycopg
import pytest

from sparkwave.core.errors import SparkwaveError
from tests.kafka_util import Topic
from tests.oracle import rows_of

COLUMNS = [("k", "int", None), ("a", "int", None), ("b", "numeric(10,2)", None), ("s", "varchar", None),
           ("x", "int", "a * 2 + 1"), ("r", "int", "b * 1.5"), ("u", "varchar", "upper(s) || '!'"),
           ("n", "numeric(10,2)", "b / 3"), ("c", "boolean", "a > 2 AND s IS NOT NULL")]
DML = ["INSERT INTO g (k, a, b, s) VALUES (1, 1, 1.50, 'ab'), (2, NULL, 2.33, NULL), (3, 5, -0.33, 'x y')",
       "INSERT INTO g (k, a, b, s) VALUES (4, 7, 0.99, 'q'), (5, -3, NULL, '')",
       "UPDATE g SET a = a + 10, s = 'up' WHERE k IN (1, 2)",
       "UPDATE g SET b = 4.01 WHERE k = 3",
       "DELETE FROM g WHERE k = 4",
       "INSERT INTO g (k, a, b, s) VALUES (4, 2, 1.01, 'back')"]
MV = "SELECT k, x + 1 AS x1, u, c FROM g WHERE r IS NOT NULL"


def _ddl(generated: str) -> str:
    cols = ", ".join(f"{n} {t}" + (generated.format(e) if e else "") for n, t, e in COLUMNS)
    return f"CREATE TABLE g ({cols}, PRIMARY KEY (k))"


@pytest.mark.parametrize("big", [False, True], ids=["driver", "executors"])
def test_generated_columns_equal_postgresql(session, postgres, big: bool) -> None:
    s = session
    if big:
        s.sql("SET big_epoch_rows = 0")
    s.sql(_ddl(" AS {}"))
    s.sql(f"CREATE MATERIALIZED VIEW gm AS {MV}")
    with psycopg.connect(postgres.create_database(f"generated_{int(big)}"), autocommit=True) as pg:
        pg.execute("DROP TABLE IF EXISTS g")
        pg.execute(_ddl(" GENERATED ALWAYS AS ({}) STORED"))
        for n, sql in enumerate(DML):
            pg.execute(sql)
            s.sql(sql)
            s.sql("FLUSH")
            want = pg.execute("SELECT * FROM g ORDER BY k").fetchall()
            assert sorted(rows_of(s.sql("SELECT * FROM g"))) == want, f"after statement {n}: {sql}"
            assert sorted(rows_of(s.sql("SELECT * FROM gm"))) == pg.execute(f"{MV} ORDER BY k").fetchall()
            if n == 2:  # an MV created mid-stream (snapshot backfill) sees the stored values
                s.sql(f"CREATE MATERIALIZED VIEW gm2 AS {MV}")
        assert sorted(rows_of(s.sql("SELECT * FROM gm2"))) == pg.execute(f"{MV} ORDER BY k").fetchall()
    described = {r[0]: r[4] for r in rows_of(s.sql("DESCRIBE g"))}
    assert described["x"] == "generated: AS a * 2 + 1" and described["a"] is None


def test_a_generated_primary_key_is_computed_and_its_inputs_not_updated(session) -> None:
    s = session
    s.sql("CREATE TABLE gk (a int, k int AS a + 100, v int, PRIMARY KEY (k))")
    s.sql("INSERT INTO gk (a, v) VALUES (1, 10), (2, 20)")
    s.sql("FLUSH")
    s.sql("UPDATE gk SET v = 21 WHERE a = 2")
    s.sql("INSERT INTO gk (a, v) VALUES (1, 11)")  # the same key: overwrites, as RisingWave's default
    s.sql("FLUSH")
    assert sorted(rows_of(s.sql("SELECT a, k, v FROM gk"))) == [(1, 101, 11), (2, 102, 21)]
    with pytest.raises(SparkwaveError, match="primary key column 'k' is generated from it"):
        s.sql("UPDATE gk SET a = 5")
    s.sql("DELETE FROM gk WHERE k = 101")
    s.sql("FLUSH")
    assert rows_of(s.sql("SELECT a, k, v FROM gk")) == [(2, 102, 21)]


@pytest.mark.parametrize("sql, words", [
    ("INSERT INTO w (k, a, g) VALUES (1, 1, 2)", "cannot INSERT into column 'g': it is generated AS a \\+ 1"),
    ("INSERT INTO w VALUES (1, 1, 2)", "row 1 has 3 values for 2 columns"),
    ("UPDATE w SET g = 1", "cannot UPDATE column 'g'.*modifying a generated column is unsupported"),
    ("INSERT INTO w VALUES (1, 1) RETURNING *", "RETURNING cannot return column 'g'"),
    ("CREATE TABLE bad (v1 int AS v2 + 1, v2 int, v3 int AS v1 - 1)", "reads generated column 'v1'"),
    ("CREATE TABLE bad (v int, t timestamptz AS now())", "Failed to bind expression"),
    ("CREATE TABLE bad (v int, t int AS nope + 1)", "reads nope, which is not a column"),
    ("CREATE TABLE bad (v int, t int AS v || 'x')", "generated column 't'"),
    ("CREATE SOURCE bad (v int, t int AS v + 1) WITH (connector = 'kafka', topic = 't', "
     "properties.bootstrap.server = 'localhost:1') FORMAT PLAIN ENCODE JSON", "a source has no generated column"),
])
def test_generated_columns_are_not_written_and_their_expressions_are_checked(session, sql: str, words: str) -> None:
    session.sql("CREATE TABLE w (k int PRIMARY KEY, a int, g int AS a + 1)")
    with pytest.raises(SparkwaveError, match=words):
        session.sql(sql)


def test_a_connector_fed_table_computes_its_generated_columns(session) -> None:
    """The connector's rows are the table's intents too: the value is computed from each row, not
    taken from the connector (datagen would make one up for every column)."""
    s = session
    s.sql("CREATE TABLE dg (id int, v int, w int AS id * 10 + v, PRIMARY KEY (id)) WITH (connector = 'datagen', "
          "fields.id.kind = 'sequence', fields.id.start = '1', fields.id.end = '12', "
          "fields.v.kind = 'random', fields.v.min = '0', fields.v.max = '9', fields.v.seed = '3', "
          "datagen.rows.per.second = '5')")
    s.sql("CREATE MATERIALIZED VIEW dgm AS SELECT id, w FROM dg")
    for _ in range(3):
        s.flush()
    rows = rows_of(s.table("dg"))
    assert rows and all(w == i * 10 + v for i, v, w in rows)
    assert sorted(rows_of(s.table("dgm"))) == sorted((i, w) for i, _, w in rows)


@pytest.mark.parametrize("big", [False, True], ids=["driver", "executors"])
def test_a_value_that_does_not_fit_an_integer_column_is_null_not_wrapped(session, big: bool) -> None:
    """Spark's CAST wraps 100000 into a smallint as -31072 and clamps a double into an int;
    PostgreSQL fails the write, RisingWave's non-strict streaming gives NULL: never a wrong number."""
    s = session
    if big:
        s.sql("SET big_epoch_rows = 0")
    s.sql("CREATE TABLE fit (k int PRIMARY KEY, f double precision, s smallint AS k * 1000, i int AS f * 2, "
          "b bigint AS f)")
    s.sql("INSERT INTO fit (k, f) VALUES (3, 2.5), (100, 1e10), (-40, -1.25), (7, 1e19)")
    s.sql("FLUSH")
    assert sorted(rows_of(s.sql("SELECT k, s, i, b FROM fit"))) == [
        (-40, None, -2, -1), (3, 3000, 5, 2), (7, 7000, None, None), (100, None, None, 10_000_000_000)]


def test_a_value_too_big_is_null_and_does_not_stop_the_pipeline(session) -> None:
    """`repeat()`'s size guard fails its row elsewhere; in a table's step that would fail every epoch
    (every table's: the pipeline stops), so a generated value too big is NULL."""
    s = session
    s.sql("CREATE TABLE big (k int PRIMARY KEY, a int, s varchar AS repeat('x', a), n int AS length(lpad('y', a)))")
    s.sql("CREATE TABLE other (k int PRIMARY KEY)")
    s.sql("INSERT INTO big (k, a) VALUES (1, 3), (2, 2000000000)")
    s.sql("INSERT INTO other VALUES (1)")
    s.sql("FLUSH")
    assert sorted(rows_of(s.sql("SELECT * FROM big"))) == [(1, 3, "xxx", 3), (2, 2_000_000_000, None, None)]
    assert rows_of(s.sql("SELECT * FROM other")) == [(1,)]


def test_a_generated_value_that_fails_for_a_row_fails_its_statement_not_the_pipeline(session) -> None:
    """An invalid pattern (`'abc' ~ '('`) fails the INSERT or UPDATE that writes it, as in PostgreSQL,
    naming the column; staged, it would fail the table's step at every epoch. Other rows go on."""
    s = session
    s.sql("CREATE TABLE pat (k int PRIMARY KEY, p varchar, m boolean AS 'abc' ~ p)")
    s.sql("INSERT INTO pat (k, p) VALUES (1, 'b')")
    s.sql("FLUSH")  # an UPDATE reads the committed rows
    with pytest.raises(SparkwaveError, match="generated column 'm'.*fails for a row.*nothing was written"):
        s.sql("INSERT INTO pat (k, p) VALUES (2, '(')")
    with pytest.raises(SparkwaveError, match="generated column 'm'"):
        s.sql("UPDATE pat SET p = '[' WHERE k = 1")
    s.sql("INSERT INTO pat (k) VALUES (3)")  # a column left out is NULL, and so is the value
    s.sql("FLUSH")
    assert sorted(rows_of(s.sql("SELECT * FROM pat")), key=str) == sorted([(1, "b", True), (3, None, None)], key=str)


def test_a_tombstone_deletes_the_generated_key_it_names(session, kafka) -> None:
    """A FORMAT UPSERT delete carries only the key: the key it names is deleted, not one computed
    from the tombstone's absent columns (which would be NULL, and leave the row)."""
    topic = Topic(kafka.bootstrap, 1)
    s = session
    s.sql(f"CREATE TABLE kg (a int, k int AS a + 100, v int, PRIMARY KEY (k)) WITH ({topic.options()}) "
          "FORMAT UPSERT ENCODE JSON")
    s.sql("CREATE MATERIALIZED VIEW kgm AS SELECT k, v FROM kg")
    for a in (1, 2, 3):
        topic.produce({"a": a, "v": a * 10}, 0, key={"k": a + 100})
    topic.flush()
    s.flush()
    assert sorted(rows_of(s.sql("SELECT a, k, v FROM kg"))) == [(1, 101, 10), (2, 102, 20), (3, 103, 30)]
    topic.produce(None, 0, key={"k": 102})
    topic.produce({"a": 3, "v": 31}, 0, key={"k": 103})
    topic.flush()
    s.flush()
    assert sorted(rows_of(s.sql("SELECT a, k, v FROM kg"))) == [(1, 101, 10), (3, 103, 31)]
    assert sorted(rows_of(s.sql("SELECT * FROM kgm"))) == [(101, 10), (103, 31)]
