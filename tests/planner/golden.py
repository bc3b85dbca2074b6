"""Golden plan cases: SQL in, plan text out, as RisingWave's planner tests.

A `.plan` file holds cases, each a `### name` line, the relations it reads (`-- table name (col
type [hidden], ...) key (k, ...) [append only]`, a line each: the schemas, so that no warehouse is
needed), the statement, a `---` line and the expected `EXPLAIN` lines (or `ERROR: message`).

The expected text is Spark's: `python -m tests.planner.golden corpus` plans the Nexmark and TPC-H
queries with Spark's analyser as the type oracle, and `tests/planner/recorder.py` records every MV a
test run plans (`SPARKWAVE_RECORD_PLANS=cases.jsonl pytest -p tests.planner.recorder tests/x.py`,
then `python -m tests.planner.golden build cases.jsonl group`). The golden test plans them again
with `StaticTypes`, without a JVM; `SPARKWAVE_UPDATE_GOLDEN=1` rewrites the files from its output."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from sparkwave.core.catalog import Relation
from sparkwave.core.errors import SparkwaveError
from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.frontend.plan.explain import explain
from sparkwave.frontend.plan.static_catalog import StaticCatalog
from sparkwave.frontend.plan.types import TypeOracle
from sparkwave.frontend.statements import CreateMaterializedView, Explain, Query, parse

HERE = Path(__file__).parent
_RELATION = re.compile(r"-- (table|mv|source) (\w+) \((.*)\) key \(([^)]*)\)( append only)?"
                       r"(?: watermark \((\w+), (\d+)\))?")  # WATERMARK FOR col AS col - delay (microseconds)


@dataclass
class Case:
    name: str
    relations: list[str]
    sql: str
    expected: list[str]


def relation_line(rel: Relation) -> str:
    cols = ", ".join(f"{c.name} {c.type.name}" + (" hidden" if c.hidden else "") for c in rel.schema.columns)
    kind = "table" if rel.kind == "table" else rel.kind
    wm = rel.definition.get("watermark")
    return f"-- {kind} {rel.name} ({cols}) key ({', '.join(rel.schema.key)})" + \
        (" append only" if rel.schema.append_only else "") + \
        (f" watermark ({wm['column']}, {wm['delay']})" if wm else "")


def catalog_of(case: Case, types: TypeOracle) -> StaticCatalog:
    catalog = StaticCatalog(types)
    for line in case.relations:
        m = _RELATION.fullmatch(line)
        assert m, f"bad relation line in case {case.name}: {line}"
        cols = []
        for c in m.group(3).split(", "):
            name, type_name, *hidden = c.split(" ")
            cols.append(Column(name, SqlType(type_name), hidden=bool(hidden)))
        key = tuple(k for k in m.group(4).split(", ") if k)
        watermark = {"column": m.group(6), "delay": int(m.group(7))} if m.group(6) else None
        catalog.add(m.group(2), m.group(1), Schema(tuple(cols), key, bool(m.group(5))), watermark)
    return catalog


def render(case: Case, types: TypeOracle) -> list[str]:
    """The case's plan with `types` as the oracle, or its error."""
    catalog = catalog_of(case, types)
    try:
        (stmt,) = parse(case.sql)
        if isinstance(stmt, Explain):
            assert not isinstance(stmt.target, str), "a golden case explains a statement, not a name"
            stmt = stmt.target
        assert isinstance(stmt, CreateMaterializedView | Query), f"a golden case plans a query, not {stmt.snippet}"
        name = stmt.name if isinstance(stmt, CreateMaterializedView) else "query"
        return explain(name, catalog.plan(stmt))
    except SparkwaveError as e:
        return [f"ERROR: {normalized(str(e))}"]


def normalized(message: str) -> str:
    """An error without what depends on the warehouse (the list of known relations)."""
    return re.sub(r" \(known: [^)]*\)", "", message)


def read(path: Path) -> list[Case]:
    cases: list[Case] = []
    for block in path.read_text().split("\n### ")[0:]:
        block = block.removeprefix("### ").strip("\n")
        if not block:
            continue
        head, _, expected = block.partition("\n---\n")
        name, *lines = head.split("\n")
        relations = [ln for ln in lines if _RELATION.fullmatch(ln)]
        sql = "\n".join(ln for ln in lines if not _RELATION.fullmatch(ln))
        cases.append(Case(name, relations, sql, expected.split("\n") if expected else []))
    return cases


def write(path: Path, cases: list[Case]) -> None:
    text = "\n".join(f"### {c.name}\n" + "".join(f"{r}\n" for r in c.relations) + f"{c.sql}\n---\n"
                     + "".join(f"{ln}\n" for ln in c.expected) for c in cases)
    path.write_text(text)


def files() -> list[Path]:
    return sorted(HERE.glob("*.plan"))


# --- building the corpus (with Spark) ---------------------------------------------------------
TPCH_TABLES = """
CREATE TABLE region (r_regionkey int PRIMARY KEY, r_name varchar, r_comment varchar);
CREATE TABLE nation (n_nationkey int PRIMARY KEY, n_name varchar, n_regionkey int, n_comment varchar);
CREATE TABLE customer (c_custkey bigint PRIMARY KEY, c_name varchar, c_address varchar, c_nationkey int,
    c_phone varchar, c_acctbal decimal(15,2), c_mktsegment varchar, c_comment varchar);
CREATE TABLE orders (o_orderkey bigint PRIMARY KEY, o_custkey bigint, o_orderstatus varchar,
    o_totalprice decimal(15,2), o_orderdate date, o_orderpriority varchar, o_clerk varchar,
    o_shippriority int, o_comment varchar);
CREATE TABLE lineitem (l_orderkey bigint, l_partkey bigint, l_suppkey bigint, l_linenumber int,
    l_quantity decimal(15,2), l_extendedprice decimal(15,2), l_discount decimal(15,2), l_tax decimal(15,2),
    l_returnflag varchar, l_linestatus varchar, l_shipdate date, l_commitdate date, l_receiptdate date,
    l_shipinstruct varchar, l_shipmode varchar, l_comment varchar, PRIMARY KEY (l_orderkey, l_linenumber));
CREATE TABLE supplier (s_suppkey bigint PRIMARY KEY, s_name varchar, s_address varchar, s_nationkey int,
    s_phone varchar, s_acctbal decimal(15,2), s_comment varchar);
"""
TPCH_QUERIES = {
    "q1": """SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_base_price,
        sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
        sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, avg(l_quantity) AS avg_qty,
        avg(l_extendedprice) AS avg_price, avg(l_discount) AS avg_disc, count(*) AS count_order
        FROM lineitem WHERE l_shipdate <= date '1998-12-01' - interval '90' day
        GROUP BY l_returnflag, l_linestatus""",
    "q3": """SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority
        FROM customer, orders, lineitem
        WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey
          AND o_orderdate < date '1995-03-15' AND l_shipdate > date '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority""",
    "q5": """SELECT n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue
        FROM customer, orders, lineitem, supplier, nation, region
        WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey
          AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey
          AND r_name = 'ASIA' AND o_orderdate >= date '1994-01-01' AND o_orderdate < date '1995-01-01'
        GROUP BY n_name""",
    "q6": """SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem
        WHERE l_shipdate >= date '1994-01-01' AND l_shipdate < date '1995-01-01'
          AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24""",
    "q10": """SELECT c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) AS revenue, c_acctbal, n_name
        FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey
        JOIN nation ON c_nationkey = n_nationkey
        WHERE o_orderdate >= date '1993-10-01' AND l_returnflag = 'R'
        GROUP BY c_custkey, c_name, c_acctbal, n_name""",
    "q13": """SELECT c_count, count(*) AS custdist FROM (
            SELECT c_custkey, count(o_orderkey) AS c_count FROM customer LEFT OUTER JOIN orders
            ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%' GROUP BY c_custkey) AS c_orders
        GROUP BY c_count""",
    "q18": """SELECT c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity) AS qty
        FROM customer, orders, lineitem
        WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey HAVING sum(l_quantity) > 300)
          AND c_custkey = o_custkey AND o_orderkey = l_orderkey
        GROUP BY c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice""",
}


def corpus_cases(group: str, tables: str, queries: dict[str, str], types: TypeOracle) -> list[Case]:
    catalog = StaticCatalog(types)
    catalog.run(tables)
    cases = []
    for name, sql in queries.items():
        text = f"CREATE MATERIALIZED VIEW {name} AS {' '.join(sql.split())}"
        used = sorted(n for n in catalog.relations if re.search(rf"\b{n}\b", text))
        case = Case(f"{group}/{name}", [relation_line(catalog.relations[n]) for n in used], text, [])
        case.expected = render(case, types)
        cases.append(case)
    return cases


def build_corpus(types: TypeOracle) -> None:
    from sparkwave.cli.nexmark_sql import QUERIES, tables_sql
    write(HERE / "nexmark.plan", corpus_cases("nexmark", tables_sql(), QUERIES, types))
    write(HERE / "tpch.plan", corpus_cases("tpch", TPCH_TABLES, TPCH_QUERIES, types))


def build_recorded(jsonl: Path, group: str, types: TypeOracle | None = None) -> None:
    """The cases a recorder wrote (their expected text as recorded, or re-rendered with `types`)."""
    cases: list[Case] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for line in jsonl.read_text().splitlines():
        d = json.loads(line)
        ident = (d["sql"], tuple(d["relations"]))
        if ident in seen:
            continue
        seen.add(ident)
        name = f"{group}/" + re.sub(r"\[.*\]", "", d["case"])  # a parametrized test's cases: numbered
        taken = {c.name for c in cases}
        name = next(n for n in (name, *(f"{name}#{i}" for i in range(2, 10_000))) if n not in taken)
        case = Case(name, d["relations"], d["sql"], d["expected"])
        if types is not None:
            case.expected = render(case, types)
        cases.append(case)
    write(HERE / f"{group}.plan", cases)


def _spark_types() -> TypeOracle:
    from sparkwave.core.spark import create_spark
    from sparkwave.frontend.plan.types import SparkTypes
    return SparkTypes(create_spark("local[1]"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["corpus"]:
        build_corpus(_spark_types())
    elif sys.argv[1:2] == ["build"]:
        build_recorded(Path(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("usage: python -m tests.planner.golden corpus | build cases.jsonl group")
