"""Statements as typed nodes, without Spark: a statement of every kind parses into its node with
its fields and its place in the submitted text; every kind has a handler in `Session.HANDLERS`,
a command tag, and errors that point into the text."""

from __future__ import annotations

import inspect

import pytest
from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.frontend.session import Session
from sparkwave.frontend.statements import (
    AlterBackfillRate,
    AlterSinkRate,
    AlterSourceRate,
    Cancel,
    CreateMaterializedView,
    CreateSink,
    CreateSource,
    CreateTable,
    Delete,
    Describe,
    DropMaterializedView,
    DropSink,
    DropSource,
    DropTable,
    Explain,
    Flush,
    Insert,
    Query,
    Set,
    Show,
    Statement,
    Update,
    Wait,
    nodes,
    parse,
    parse_one,
)

KINDS = [c for c in vars(nodes).values()
         if inspect.isclass(c) and issubclass(c, Statement) and c.tag]  # a kind of statement has a command tag


def one(sql: str) -> Statement:
    (stmt,) = parse(sql)
    return stmt


CASES: list[tuple[str, Statement]] = [
    ("FLUSH", Flush("FLUSH", 1, 1)),
    ("wait", Wait("wait", 1, 1)),
    ("CANCEL JOBS 3, 4", Cancel("CANCEL JOBS 3, 4", 1, 1, ids=(3, 4))),
    ("ALTER MATERIALIZED VIEW M SET BACKFILL_RATE_LIMIT = 10",
     AlterBackfillRate("ALTER MATERIALIZED VIEW M SET BACKFILL_RATE_LIMIT = 10", 1, 1, name="m", value="10")),
    ("ALTER TABLE t SET source_rate_limit TO DEFAULT",
     AlterSourceRate("ALTER TABLE t SET source_rate_limit TO DEFAULT", 1, 1, name="t", value="DEFAULT")),
    ("ALTER SINK s SET SINK_RATE_LIMIT = 0", AlterSinkRate("ALTER SINK s SET SINK_RATE_LIMIT = 0", 1, 1, name="s",
                                                           value="0")),
    ("SET backfill_strategy = 'blocking'", Set("SET backfill_strategy = 'blocking'", 1, 1, key="backfill_strategy",
                                               value="blocking")),
    ("SHOW materialized  views", Show("SHOW materialized  views", 1, 1, what="MATERIALIZED VIEWS", name=None)),
    ("SHOW SOURCE ERRORS FROM K", Show("SHOW SOURCE ERRORS FROM K", 1, 1, what="SOURCE ERRORS", name="k")),
    ("DESC SINK s", Describe("DESC SINK s", 1, 1, name="s", sink=True)),
    ("DROP TABLE IF EXISTS T CASCADE", DropTable("DROP TABLE IF EXISTS T CASCADE", 1, 1, name="t", if_exists=True,
                                                  cascade=True)),
    ("DROP SOURCE s", DropSource("DROP SOURCE s", 1, 1, name="s", if_exists=False, cascade=False)),
    ("DROP MATERIALIZED VIEW m RESTRICT", DropMaterializedView("DROP MATERIALIZED VIEW m RESTRICT", 1, 1, name="m",
                                                               if_exists=False, cascade=False)),
    ("DROP SINK s", DropSink("DROP SINK s", 1, 1, name="s", if_exists=False, cascade=False)),
]


@pytest.mark.parametrize(("sql", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_statement_without_sql_parses_into_its_node(sql: str, expected: Statement) -> None:
    assert one(sql) == expected


def test_create_table_carries_the_tree_and_risingwave_clauses() -> None:
    stmt = one("CREATE TABLE IF NOT EXISTS Kv (k int PRIMARY KEY, v text) ON CONFLICT DO NOTHING "
               "INCLUDE key AS raw WITH (connector = 'kafka', topic = 'it''s') FORMAT UPSERT ENCODE JSON")
    assert type(stmt) is CreateTable and stmt.relation_kind == "table" and stmt.tag == "CREATE_TABLE"
    assert isinstance(stmt.ast, exp.Create) and stmt.name == "Kv" and stmt.if_not_exists
    assert stmt.options == {"connector": "kafka", "topic": "it's", "include.key": "raw", "format": "upsert",
                            "encode": "json"}
    assert stmt.on_conflict == "ignore" and not stmt.append_only
    assert one("CREATE TABLE t (a int) APPEND ONLY").append_only


def test_create_source_is_a_table_declaration_of_its_own_kind() -> None:
    stmt = one("CREATE SOURCE s (a int) WITH (connector = 'kafka', topic = 'x')")
    assert type(stmt) is CreateSource and isinstance(stmt, CreateTable)
    assert stmt.relation_kind == "source" and stmt.tag == "CREATE_SOURCE" and stmt.name == "s"
    assert stmt.options == {"connector": "kafka", "topic": "x"}
    bare = one("CREATE SOURCE d WITH (connector = 'deltalake', location = '/t')")  # columns from the connector
    assert type(bare) is CreateSource and bare.name == "d" and bare.ast.this.expressions == []
    with pytest.raises(SqlError, match="expected CREATE TABLE name"):
        one("CREATE TABLE t")  # no columns and no connector to ask


def test_create_materialized_view_carries_name_columns_options_and_query() -> None:
    sql = "CREATE MATERIALIZED VIEW IF NOT EXISTS M (a, B) WITH (backfill_strategy = 'blocking') AS SELECT 1, 2"
    stmt = one(sql)
    assert stmt == CreateMaterializedView(sql, 1, 1, name="m", if_not_exists=True,
                                          options={"backfill_strategy": "blocking"}, query="SELECT 1, 2",
                                          columns=("a", "b"), ast=stmt.ast)
    assert isinstance(stmt.ast, exp.Select)


def test_create_sink_from_a_view_or_as_a_query() -> None:
    from_mv = one("CREATE SINK s FROM M WITH (connector = 'kafka') FORMAT PLAIN ENCODE JSON")
    assert from_mv == CreateSink(from_mv.text, 1, 1, name="s", if_not_exists=False, upstream="m", query=None,
                                 options={"connector": "kafka", "format": "plain", "encode": "json"}, ast=None)
    as_query = one("CREATE SINK IF NOT EXISTS s AS SELECT a FROM t WITH (connector = 'postgres')")
    assert isinstance(as_query, CreateSink) and as_query.upstream is None and as_query.if_not_exists
    assert as_query.query == "SELECT a FROM t" and isinstance(as_query.ast, exp.Select)


@pytest.mark.parametrize(("sql", "node", "tree"), [
    ("INSERT INTO t VALUES (1)", Insert, exp.Insert), ("UPDATE t SET a = 1", Update, exp.Update),
    ("DELETE FROM t WHERE a = 1", Delete, exp.Delete), ("SELECT a FROM t", Query, exp.Select),
    ("SELECT 1 UNION SELECT 2", Query, exp.Union), ("WITH x AS (SELECT 1) SELECT * FROM x", Query, exp.Select)])
def test_sql_statements_carry_their_tree(sql: str, node: type[Statement], tree: type[exp.Expr]) -> None:
    stmt = one(sql)
    assert type(stmt) is node and isinstance(stmt.ast, tree)


def test_explain_takes_a_create_a_query_or_a_name() -> None:
    create = one("EXPLAIN\n  CREATE MATERIALIZED VIEW m AS SELECT 1")
    assert isinstance(create, Explain) and isinstance(create.target, CreateMaterializedView)
    assert (create.target.line, create.target.col) == (2, 3)  # the inner statement's errors point into the text
    query = one("EXPLAIN SELECT a FROM t")
    assert isinstance(query, Explain) and isinstance(query.target, Query) and query.target.col == 9
    assert one("EXPLAIN Q3") == Explain("EXPLAIN Q3", 1, 1, target="q3")
    with pytest.raises(SqlError, match="EXPLAIN takes CREATE MATERIALIZED VIEW"):
        one("EXPLAIN CREATE TABLE t (k int)")


@pytest.mark.parametrize("name", ["first", "comment", "window", "range", "format", "view"])
def test_explain_takes_a_materialized_view_named_like_a_keyword(name: str) -> None:
    """CREATE MATERIALIZED VIEW takes these names, so EXPLAIN must too: one bare word is never a query."""
    assert type(one(f"CREATE MATERIALIZED VIEW {name} AS SELECT 1 AS a")) is CreateMaterializedView
    assert one(f"EXPLAIN {name.upper()}") == Explain(f"EXPLAIN {name.upper()}", 1, 1, target=name)


def test_statements_keep_their_place_in_the_submitted_text() -> None:
    stmts = parse("FLUSH;\n  SELECT 1;  WAIT")
    assert [(type(s), s.line, s.col) for s in stmts] == [(Flush, 1, 1), (Query, 2, 3), (Wait, 2, 14)]
    with pytest.raises(SqlError, match=r"unsupported ALTER MATERIALIZED VIEW setting 'foo'; supported: "
                                       r"BACKFILL_RATE_LIMIT \(at line 3, column 31"):
        parse("FLUSH;\n\nALTER MATERIALIZED VIEW m SET foo = 1")
    with pytest.raises(SqlError, match=r"SHOW TABLES takes no FROM \(at line 1, column 13"):
        parse_one("SHOW TABLES FROM x", 1, 1)


@pytest.mark.parametrize("sql", ["ALTER SYSTEM SET x = 1", "SHOW EVERYTHING", "CANCEL JOBS x", "CREATE SINK s",
                                 "CREATE TABLE t AS SELECT 1", "LOCK TABLE t"])
def test_a_statement_of_no_kind_is_refused_naming_it(sql: str) -> None:
    with pytest.raises(SqlError, match=r"\(at line 1, column 1"):
        one(sql)


def test_every_kind_of_statement_has_a_handler() -> None:
    assert len(KINDS) >= 22
    missing = [k.__name__ for k in KINDS if k not in Session.HANDLERS]
    assert not missing, f"statements without a handler in Session.HANDLERS: {missing}"
    assert set(Session.HANDLERS) <= set(KINDS)


def test_every_kind_says_how_the_server_answers_it() -> None:
    rows = {k.__name__ for k in KINDS if k.returns_rows}
    assert rows == {"Query", "Show", "Describe", "Explain"}
    assert {k.__name__ for k in KINDS if k.timed} == {"Query", "Insert", "Update", "Delete"}
    assert {k.__name__ for k in KINDS if k.ddl} == {"CreateTable", "CreateSource", "CreateMaterializedView",
                                                    "CreateSink", "DropTable", "DropSource", "DropMaterializedView",
                                                    "DropSink"}
    assert len({k.tag for k in KINDS}) == len(KINDS)  # each kind its own tag
