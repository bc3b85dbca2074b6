"""The Arrow evaluation of small epochs (`stream/arrow_chain.py`) gives exactly Spark's rows: every
scan and projection of every golden plan (Nexmark, TPC-H, the SQL-surface and semantics cases)
whose expressions the evaluator accepts runs over the same rows of edge values (NULLs, zeros,
extremes of each integer type, NaN, -0.0, infinities, empty and non-ASCII strings, dates and
timestamps around 1970 and at years 1 and 9999) and random rows drawn from them, through Arrow and
through Spark's local frame (today's path), and the two Z-sets, `_vnode` included, are equal
value for value and type for type. And `xxhash64` of every key type equals Spark's."""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import date, datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from sparkwave.core.local_frames import local_frame
from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.core.xxhash64 import hash_columns
from sparkwave.core.zset import W
from sparkwave.frontend.plan.planner import MvPlan
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.stream import arrow_chain
from sparkwave.stream.operator import VNODE, WEIGHT, EpochIO, HeldRows, Operator, collect
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan
from tests.planner import golden

_TS = [datetime(1970, 1, 1), datetime(1969, 12, 31, 23, 59, 59, 999999), datetime(1969, 12, 31, 23, 59, 50),
       datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999), datetime(2024, 1, 2, 3, 4, 5, 600000),
       datetime(2000, 2, 29, 12), datetime(1970, 1, 1, 0, 0, 10)]
EDGES: dict[str, list[Any]] = {
    "boolean": [True, False],
    "smallint": [0, 1, -1, 32767, -32768, 7, 100, -5],
    "int": [0, 1, -1, 2**31 - 1, -(2**31), 7, 1007, -9, 3, 2],
    "bigint": [0, 1, -1, 2**63 - 1, -(2**63), 1007, 2001, 123456789012, -7, 90001],
    "real": [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.5, -2.25, 3.4e38, 1e-3],
    "double": [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.5, -2.25, 1e300, 0.1, 7.0],
    "varchar": ["", "a", "abc", "CA", "héllo wörld", "ÀÉÎ ß", "  pad  ", "x" * 40, "0", "-12", "İ", "ǅ"],
    "date": [date(1970, 1, 1), date(1969, 12, 31), date(1, 1, 1), date(9999, 12, 31), date(2024, 2, 29),
             date(1995, 3, 15)],
    "timestamp": _TS,
    "timestamptz": _TS,
    "bytea": [b"", b"\x00", b"ab", b"\xff" * 9],
}


def _decimal_edges(t: SqlType) -> list[Decimal]:
    p, s = (int(x) for x in t.name[8:-1].split(","))
    top = Decimal((0, (9,) * p, -s))  # exact: arithmetic would round to 28 digits
    return [Decimal(0), Decimal(1).scaleb(-s), Decimal(-1).scaleb(-s), top, top.copy_negate(),
            Decimal("12.345").quantize(Decimal(1).scaleb(-s)) if p - s > 2 else Decimal(0), Decimal(5).scaleb(-s - 1)
            .quantize(Decimal(1).scaleb(-s)) if s else Decimal(1)]


def _values(t: SqlType) -> list[Any]:
    if t.name.startswith("decimal"):
        return _decimal_edges(t)
    return EDGES[t.name]


def edge_rows(columns: list[tuple[str, SqlType]], n: int, seed: int) -> dict[str, list[Any]]:
    """`n` rows: each column's edge values in turn (shifted per column), then random picks, one in
    six NULL."""
    rng = random.Random(seed)
    out: dict[str, list[Any]] = {}
    for j, (name, t) in enumerate(columns):
        pool = _values(t)
        first = [pool[(i + j) % len(pool)] for i in range(len(pool))] + [None]
        out[name] = (first + [None if rng.random() < 1 / 6 else rng.choice(pool) for _ in range(n)])[:n]
    return out


def _log_rows(schema: Schema, n: int, seed: int) -> pa.Table:
    cols = edge_rows([(c.name, c.type) for c in schema.columns], n, seed)
    rng = random.Random(seed)
    head = {"_epoch": pa.array([5] * n, pa.int64()), "_seq": pa.array(range(n), pa.int64()),
            "_op": pa.array([rng.choice([1, 2, 3, 4]) for _ in range(n)], pa.int8()),
            "_vnode": pa.array([0] * n, pa.int16())}
    return pa.table({**head, **{c.name: pa.array(cols[c.name], c.type.arrow) for c in schema.columns}})


def _key(v: Any) -> Any:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)  # -0.0 apart from 0.0
    return v


def multiset(t: pa.Table) -> Counter:
    """The rows as a multiset; times as their integers (a window past year 9999 has no Python value)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type):
            t = t.set_column(i, f.name, t[f.name].cast(pa.int64() if pa.types.is_timestamp(f.type) else pa.int32()))
    names = t.column_names
    return Counter(tuple(_key(r[n]) for n in names) for r in t.to_pylist())


# --- the corpus ----------------------------------------------------------------------------------
def _corpus() -> list[tuple[str, Operator, Schema | None]]:
    """(case, operator, the scanned relation's schema) of every scan and projection of the golden plans."""
    found: list[tuple[str, Operator, Schema | None]] = []
    plans: list[MvPlan] = []

    def keep(name: str, plan: MvPlan, **_options: Any) -> list[str]:
        plans.append(plan)
        return []

    render_plan = golden.explain
    golden.explain = keep
    try:
        for path in golden.files():
            for case in golden.read(path):
                plans.clear()
                golden.render(case, StaticTypes())
                if not plans:
                    continue
                catalog = golden.catalog_of(case, StaticTypes())
                for op in plans[0].root.walk():
                    if isinstance(op, Scan):
                        found.append((case.name, op, catalog.lookup(op.relation).schema))
                    elif isinstance(op, Project):
                        found.append((case.name, op, None))
    finally:
        golden.explain = render_plan
    return found


CORPUS = _corpus()
ROWS = 60


def _spark_rows(fn: Any) -> Any:
    """`fn()` with the Arrow path forced off (Spark's local frame, today's path)."""
    before, arrow_chain.ENABLED = arrow_chain.ENABLED, False
    try:
        return fn()
    finally:
        arrow_chain.ENABLED = before


def _check_scan_chain(spark: Any, case: str, op: Operator, schema: Schema, seed: int) -> bool:
    """A scan (or a stateless chain's top) over held log rows, both ways; False if Arrow refused it."""
    scan = next(o for o in op.walk() if isinstance(o, Scan))
    rows = _log_rows(schema, ROWS, seed)
    io = EpochIO(SimpleNamespace(spark=spark), {}, changes={scan.relation: HeldRows(spark, schema, rows)})  # type: ignore[arg-type]
    root = bool(op.key)  # an MV's root has a key (its vnode's)
    got = op.arrow_delta(io, root=root)
    if got is None:
        return False
    frame = op.frame(io, vnode=root)
    assert frame is not None
    want = collect(frame, op.arrow_schema(WEIGHT, *([VNODE] if root else [])))
    assert got.schema == want.schema, f"{case} #{op.id}: {got.schema} != {want.schema}"
    assert multiset(got) == multiset(want), f"{case} #{op.id}: Arrow {multiset(got) - multiset(want)}, " \
                                            f"Spark {multiset(want) - multiset(got)}"
    return True


def _check_projection(spark: Any, case: str, op: Project, seed: int) -> bool:
    """A projection over an Arrow Z-set (a join's or aggregate's output), both ways."""
    cols = [(n, SqlType(t)) for n, t in op.input.columns]
    values = edge_rows(cols, ROWS, seed)
    child = pa.table({**{n: pa.array(values[n], t.arrow) for n, t in cols},
                      W: pa.array([random.Random(seed + i).choice([1, -1]) for i in range(ROWS)], pa.int64())})
    root = bool(op.key)
    got = op._arrow(child, root)
    if got is None:
        return False
    want = _spark_rows(lambda: op.apply(child, spark, root=root))
    assert got.schema == want.schema, f"{case} #{op.id}: {got.schema} != {want.schema}"
    assert multiset(got) == multiset(want), f"{case} #{op.id}: Arrow {multiset(got) - multiset(want)}, " \
                                            f"Spark {multiset(want) - multiset(got)}"
    return True


def test_every_accepted_golden_expression_gives_sparks_rows(spark):
    accepted, refused = Counter(), Counter()
    for i, (case, op, schema) in enumerate(CORPUS):
        if isinstance(op, Scan) or op.stateless:
            scans = [o for o in op.walk() if isinstance(o, Scan)]
            if len(scans) != 1 or len(op.walk()) != 1 + sum(isinstance(o, Project) for o in op.walk()):
                continue  # constant rows (VALUES), a share: not a chain over one scan
            schema = schema or next(s for _, o, s in CORPUS if o is scans[0])
            assert schema is not None
            ok = _check_scan_chain(spark, case, op, schema, i)
        else:
            ok = _check_projection(spark, case, op, i)
        (accepted if ok else refused)[op.op] += 1
    print(f"Arrow evaluates {dict(accepted)}; refused {dict(refused)}")
    assert accepted["scan"] > 100 and accepted["project"] > 100


# --- xxhash64 ------------------------------------------------------------------------------------
KEY_TYPES = ["boolean", "smallint", "int", "bigint", "real", "double", "decimal(10,2)", "decimal(18,0)",
             "decimal(19,4)", "decimal(38,6)", "varchar", "date", "timestamp", "timestamptz"]


@pytest.mark.parametrize("type_name", KEY_TYPES)
def test_xxhash64_equals_sparks(spark, type_name):
    t = SqlType(type_name)
    values = edge_rows([("x", t)], 200, 7)["x"]
    if type_name == "varchar":
        values += ["".join(chr(c) for c in range(0x41, 0x41 + k)) for k in range(70)] + ["€" * 33, "𝄞" * 9]
    rows = pa.table({"x": pa.array(values, t.arrow)})
    df = local_frame(spark, rows, f"x {t.spark}")
    want = [r[0] for r in df.selectExpr("xxhash64(x)").collect()]
    assert hash_columns([rows["x"]], rows.num_rows).tolist() == want


def test_xxhash64_of_several_columns_equals_sparks(spark):
    cols = [("a", SqlType("int")), ("b", SqlType("varchar")), ("c", SqlType("double")), ("d", SqlType("decimal(38,6)")),
            ("e", SqlType("timestamp")), ("f", SqlType("boolean"))]
    values = edge_rows(cols, 300, 11)
    rows = pa.table({n: pa.array(values[n], t.arrow) for n, t in cols})
    ddl = ", ".join(f"{n} {t.spark}" for n, t in cols)
    df = local_frame(spark, rows, ddl)
    want = [r[0] for r in df.selectExpr("xxhash64(a, b, c, d, e, f)").collect()]
    assert hash_columns([rows[n] for n, _ in cols], rows.num_rows).tolist() == want




# --- PostgreSQL-semantics expressions, as the planner translates them, and edge cases ------------
TABLE = Schema(tuple(Column(n, SqlType(t)) for n, t in [
    ("i", "int"), ("j", "int"), ("b", "bigint"), ("s", "smallint"), ("d", "double"), ("r", "real"),
    ("n", "decimal(10,2)"), ("w", "decimal(38,6)"), ("v", "varchar"), ("u", "varchar"), ("t", "timestamp"),
    ("z", "timestamptz"), ("dt", "date"), ("f", "boolean")]), ("i",))
EXPRESSIONS = [
    "`i` + 1", "`i` - `j`", "`i` * `j`", "`b` * `b`", "`s` + `s`", "-`i`", "-`b`", "abs(`i`)", "abs(`d`)",
    "TRY_ADD(`i`, `j`)", "TRY_SUBTRACT(`i`, `j`)", "TRY_MULTIPLY(`i`, `j`)", "TRY_ADD(`b`, `b`)",
    "TRY_SUBTRACT(`b`, 1)", "TRY_MULTIPLY(`b`, `b`)", "TRY_MULTIPLY(`b`, -1)", "TRY_MULTIPLY(`i`, 2)",
    "`i` DIV `j`", "`b` DIV `i`", "`b` DIV -1", "TRY_CAST(`i` DIV `j` AS INT)", "`i` % `j`", "`b` % -1",
    "`d` % `d`", "`d` / `d`", "`i` / `j`", "`d` / 0", "`d` + `r`", "`d` * 2", "`r` * `r`", "`i` + `d`",
    "`d` = `d`", "`d` > `r`", "`d` < 1.0E0", "`d` <=> `d`", "`d` <> `d`", "`d` >= `d`", "`i` = `j`",
    "`i` IN (1, 7, 2147483647)", "`b` IN (1007, 2001)", "`v` IN ('a', 'CA', '')", "`i` BETWEEN -1 AND 7",
    "`v` = `u`", "`v` < `u`", "`v` >= 'b'", "`t` < `t`", "`dt` < CAST('1995-03-15' AS DATE)", "`z` > `z`",
    "`f` AND `i` > 0", "`f` OR `i` > 0", "NOT `f`", "`f` IS NULL", "NOT `v` IS NULL", "`i` <=> `j`",
    "CASE WHEN `i` > 0 THEN 'p' WHEN `i` < 0 THEN 'n' END", "CASE WHEN `f` THEN `i` ELSE `b` END",
    "CASE WHEN `d` > 0 THEN `d` ELSE `i` END", "IF(`i` > `j`, `i`, NULL)", "IF(`f`, 1, 2)",
    "COALESCE(`i`, `j`, 0)", "COALESCE(`v`, CAST('' AS string))", "COALESCE(`b`, `i`)", "GREATEST(`i`, `j`)",
    "LEAST(`d`, 0.0E0)", "GREATEST(`v`, `u`)", "GREATEST(`d`, `r`)",
    "CAST(`b` AS INT)", "TRY_CAST(`b` AS INT)", "CAST(`i` AS SMALLINT)", "CAST(`i` AS BIGINT)",
    "CAST(`i` AS DOUBLE)", "CAST(`b` AS DOUBLE)", "CAST(`b` AS FLOAT)", "CAST(`r` AS DOUBLE)",
    "CAST(`i` AS STRING)", "CAST(`f` AS STRING)", "CAST(`f` AS INT)", "CAST(`i` AS BOOLEAN)",
    "CAST(`i` AS DECIMAL(21,0))", "CAST(`b` AS DECIMAL(21,0))", "CAST(`b` AS DECIMAL(5,0))",
    "CAST(`i` AS DECIMAL(12,2))", "CAST(`n` AS DECIMAL(9,1))", "CAST(`n` AS DECIMAL(38,10))",
    "CAST(`w` AS DECIMAL(20,2))", "CAST(`w` AS DECIMAL(38,0))", "TRY_CAST(`n` AS DECIMAL(4,1))",
    "0.908 * `b`", "CAST(`b` * 0.908 AS DECIMAL(18,2))", "`n` + `n`", "`n` - 1", "`n` * `n`", "`n` + `i`",
    "1 - `n`", "`n` * 100BD", "`w` + `w`", "`n` > `n`", "`n` = 12.34", "-`n`", "abs(`n`)",
    "LENGTH(`v`)", "CONCAT(`v`, `u`)", "CONCAT(`v`, `i`)", "`v` || 'x'", "TRIM(`v`)", "LTRIM(`v`)",
    "RTRIM(`v`)", "TRIM(BOTH 'a' FROM `v`)", "UPPER(`v`)", "LOWER(`v`)", "UPPER(CAST(`i` AS STRING))",
    "1", "NULL", "'x'", "2.5", "1.0E20",
    "-2147483648", "`i` + -2147483648", "-3 * `n`", "-(3) * `n`", "-2147483649", "-0.5 * `n`", "9999999999",
    "TRUE", "IF((TRY_SUBTRACT(`i`, 3)) = -2147483648, NULL, -(TRY_SUBTRACT(`i`, 3)))",
    "`t` - INTERVAL '10' SECOND", "`z` + INTERVAL '2' HOUR", "INTERVAL '1' DAY + `t`", "`z` - INTERVAL '-3' MINUTE",
    "`t` BETWEEN `t` - INTERVAL '10' SECOND AND `t`", "`t` + INTERVAL '1' MONTH", "`dt` + INTERVAL '1' DAY",
    "`n` > `i`", "`n` <= `b`", "`w` = `n`", "`n` IN (1.5, 2, -0.05)", "`n` BETWEEN -1 AND 2.5", "`w` > 0.000001",
    "CASE WHEN `n` > 0 THEN `n` END", "`n` > `d`",
]


@pytest.mark.parametrize("sql", EXPRESSIONS)
def test_expression_gives_sparks_values_and_type(spark, sql):
    """One expression as a scan's only column (and the key, so its vnode too) and as a projection's
    predicate, over edge rows: Arrow's rows equal Spark's where Arrow accepts it."""
    from sparkwave.core.schema import from_spark
    from sparkwave.core.spark import empty_frame

    analysed = empty_frame(spark, TABLE.spark_ddl()).selectExpr(f"{sql} AS x").schema.fields[0].dataType
    declared = from_spark(analysed).name
    scan = Scan(1, [("x", declared)], ["x"], relation="t", exprs=[("x", sql)])
    accepted = _check_scan_chain(spark, sql, scan, TABLE, 3)
    if declared == "boolean":
        filtered = Scan(1, [(c.name, c.type.name) for c in TABLE.columns], ["i"], relation="t",
                        exprs=[(c.name, f"`{c.name}`") for c in TABLE.columns], predicate=sql)
        _check_scan_chain(spark, sql, filtered, TABLE, 4)
    print(f"{'Arrow' if accepted else 'Spark'}: {sql}")
    if sql in MUST_ACCEPT:
        assert accepted, f"{sql} is no longer evaluated in Arrow"


MUST_ACCEPT = {"`i` + 1", "TRY_MULTIPLY(`i`, `j`)", "`i` DIV `j`", "`d` = `d`", "CAST(`i` AS DECIMAL(21,0))",
               "0.908 * `b`", "CAST(`b` * 0.908 AS DECIMAL(18,2))", "UPPER(CAST(`i` AS STRING))",
               "`t` BETWEEN `t` - INTERVAL '10' SECOND AND `t`", "`z` + INTERVAL '2' HOUR",
               "CASE WHEN `i` > 0 THEN 'p' WHEN `i` < 0 THEN 'n' END"}
