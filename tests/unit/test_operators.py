"""Spark-free unit tests of the operators' Arrow side (`Join.apply`, `Aggregate.apply`, a rename's
`Project.apply`, `OverWindow.apply` with its evaluation stood in for) and of the operator tree's
catalog JSON and state tables.

Each operator test drives one operator epoch by epoch over literal Z-sets (`tests/chunks.py`) with
an in-memory state store, checks each epoch's output against a literal, and checks that the output
accumulated so far equals the same query evaluated from scratch (in plain Python) on the inputs
accumulated so far: the incremental invariant the MVs rely on."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from sparkwave.core.errors import CatalogError
from sparkwave.frontend.common_subplans import share_common_subplans
from sparkwave.stream.aggregate import Agg, Aggregate
from sparkwave.stream.aggregate_side import AggregateSide
from sparkwave.stream.join import Join, JoinType
from sparkwave.stream.operator import EpochIO
from sparkwave.stream.over import SIDE, OverWindow
from sparkwave.stream.plan import from_json, state_purpose, state_schemas
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan, Window
from sparkwave.stream.share import Share
from sparkwave.stream.table_side import TableSide
from sparkwave.stream.values import Values
from tests.chunks import MemoryStates, Row, W, add, as_counter, zset

WF = pa.field(W, pa.int64())


# --- from-scratch evaluation ------------------------------------------------------------------------
def join_from_scratch(node: Join, left: Counter[Row], right: Counter[Row]) -> Counter[Row]:
    """SQL's equi-join of two multisets: NULL keys never match; outer sides are NULL-padded."""
    lnames, rnames = node.left.names, node.right.names
    li, ri = [lnames.index(k) for k in node.left_keys], [rnames.index(k) for k in node.right_keys]
    out: Counter[Row] = Counter()
    matched: set[Row] = set()
    for lrow, lw in left.items():
        lk = tuple(lrow[i] for i in li)
        hits = [(r, rw) for r, rw in right.items() if None not in lk and lk == tuple(r[i] for i in ri)]
        for r, rw in hits:
            out[lrow + r] += lw * rw
            matched.add(r)
        if not hits and node.join_type in ("left", "full"):
            out[lrow + (None,) * len(rnames)] += lw
    if node.join_type in ("right", "full"):
        for r, rw in right.items():
            if r not in matched:
                out[(None,) * len(lnames) + r] += rw
    return out


def _agg_value(fn: str, rows: list[dict[str, Any]], arg: str | None) -> Any:
    xs = [r[arg] for r in rows if r[arg] is not None] if arg else []
    if fn == "count_star":
        return len(rows)
    if fn in ("count", "count_distinct"):
        return len(set(xs) if fn == "count_distinct" else xs)
    if not xs:
        return None
    if fn == "avg":
        return float(sum(xs)) / len(xs)
    return sum(xs) if fn == "sum" else min(xs) if fn == "min" else max(xs)


def aggregate_from_scratch(node: Aggregate, rows: Counter[Row]) -> Counter[Row]:
    """SQL's GROUP BY of a multiset (NULLs form one group); a scalar aggregate always has its one row."""
    names = node.input.names
    groups: dict[Row, list[dict[str, Any]]] = {}
    for row, w in rows.items():
        r = dict(zip(names, row, strict=True))
        groups.setdefault(tuple(r[g] for g in node.group), []).extend([r] * w)
    if node.scalar and not groups:
        groups[(0,)] = []
    return Counter({(*g, *[_agg_value(a.fn, rs, a.arg) for a in node.aggs]): 1 for g, rs in groups.items()})


# --- harnesses ----------------------------------------------------------------------------------------
class JoinRun:
    """A join node fed epoch by epoch, checked per epoch and against the from-scratch join."""

    def __init__(self, node: Join) -> None:
        self.node, self.states = node, MemoryStates(state_schemas(node))
        self.schemas = (node.left.arrow_schema(), node.right.arrow_schema())
        self.left: Counter[Row] = Counter()
        self.right: Counter[Row] = Counter()
        self.out: Counter[Row] = Counter()

    def epoch(self, left: str = "", right: str = "", expect: str = "") -> None:
        dl = zset(left, self.schemas[0]) if left.strip() else None  # None: that side had no change, as in dataflow
        dr = zset(right, self.schemas[1]) if right.strip() else None
        out = self.node.apply(dl, dr, self.states)
        self.states.commit()
        expected = zset(expect, self.node.arrow_schema(WF))
        assert out.schema.equals(expected.schema), out.schema
        assert as_counter(out) == as_counter(expected)
        self.left = add(self.left, as_counter(dl) if dl is not None else Counter())
        self.right = add(self.right, as_counter(dr) if dr is not None else Counter())
        self.out = add(self.out, as_counter(out))
        assert self.out == join_from_scratch(self.node, self.left, self.right)


class AggRun:
    """An aggregate node fed epoch by epoch, checked per epoch and against the from-scratch GROUP BY.
    The accumulated output starts as the from-scratch result over no rows: what the MV's backfill
    writes (a scalar aggregate's one row; the operator only ever emits changes to it)."""

    def __init__(self, node: Aggregate) -> None:
        self.node, self.states = node, MemoryStates(state_schemas(node))
        self.input: Counter[Row] = Counter()
        self.out = aggregate_from_scratch(node, Counter())

    def epoch(self, d: str, expect: str) -> None:
        schema = self.node.input.arrow_schema(WF)
        delta = zset(d, schema) if d.strip() else schema.empty_table()
        out = self.node.apply(delta, self.states)
        self.states.commit()
        expected = zset(expect, self.node.arrow_schema(WF))
        assert out.schema.equals(expected.schema), out.schema
        assert as_counter(out) == as_counter(expected)
        self.input = add(self.input, as_counter(delta))
        self.out = add(self.out, as_counter(out))
        assert self.out == aggregate_from_scratch(self.node, self.input)


# --- plans --------------------------------------------------------------------------------------------
def scan(id: int, relation: str, columns: list[tuple[str, str]], key: list[str]) -> Scan:
    """A scan of `relation` whose columns `c<id>_<name>` are the upstream's `<name>`."""
    return Scan(id, columns, key, relation=relation, exprs=[(n, f"`{n.split('_', 1)[1]}`") for n, _ in columns])


def join_node(join_type: JoinType) -> Join:
    """`l(id, k, v) <join_type> JOIN r(id, k, w) ON l.k = r.k`, each side keyed by its id."""
    left = scan(1, "l", [("c1_id", "int"), ("c1_k", "int"), ("c1_v", "varchar")], ["c1_id"])
    right = scan(2, "r", [("c2_id", "int"), ("c2_k", "int"), ("c2_w", "varchar")], ["c2_id"])
    return Join(3, left.columns + right.columns, ["c1_id", "c2_id"], left=left, right=right, join_type=join_type,
                left_keys=["c1_k"], right_keys=["c2_k"])


def agg_node(child_cols: list[tuple[str, str]], group: list[str], aggs: list[Agg], scalar: bool = False,
             append_only: bool = False) -> Aggregate:
    """GROUP BY `group` over a scan keyed by its last column (a row id)."""
    child = scan(1, "t", child_cols, [child_cols[-1][0]])
    types = dict(child_cols)
    return Aggregate(2, [(g, types[g]) for g in group] + [(a.out, a.type) for a in aggs], list(group), input=child,
                     group=list(group), aggs=aggs, scalar=scalar, append_only=append_only)


# --- joins --------------------------------------------------------------------------------------------
def test_inner_join_inserts_both_sides_then_retractions() -> None:
    run = JoinRun(join_node("inner"))
    run.epoch(left="""
        + 1 10 a
        + 2 20 b""", right="""
        + 7 10 x""", expect="""
        + 1 10 a 7 10 x""")
    run.epoch(left="""
        + 3 10 c""", right="""
        + 8 20 y
        + 9 10 z""", expect="""
        + 1 10 a 9 10 z
        + 3 10 c 7 10 x
        + 3 10 c 9 10 z
        + 2 20 b 8 20 y""")
    run.epoch(left="""
        - 1 10 a""", expect="""
        - 1 10 a 7 10 x
        - 1 10 a 9 10 z""")
    # An update of the right row 7 that moves it to another join key.
    run.epoch(right="""
        - 7 10 x
        + 7 20 x""", expect="""
        - 3 10 c 7 10 x
        + 2 20 b 7 20 x""")
    # An unmatched insert and a NULL key: no output, nothing stored for the NULL key.
    run.epoch(left="""
        + 4 30 d
        + 5 . e""", right="""
        + 6 . n""")
    assert run.states.contents("j3l") == Counter({(2, 20, "b"): 1, (3, 10, "c"): 1, (4, 30, "d"): 1})


def test_left_join_key_gains_and_loses_its_only_match() -> None:
    run = JoinRun(join_node("left"))
    run.epoch(left="""
        + 1 10 a
        + 2 . n""", expect="""
        + 1 10 a . . .
        + 2 . n . . .""")
    run.epoch(right="""
        + 7 10 x""", expect="""
        - 1 10 a . . .
        + 1 10 a 7 10 x""")
    run.epoch(right="""
        + 8 10 y""", expect="""
        + 1 10 a 8 10 y""")
    run.epoch(right="""
        - 7 10 x
        - 8 10 y""", expect="""
        - 1 10 a 7 10 x
        - 1 10 a 8 10 y
        + 1 10 a . . .""")
    # A right row with a NULL key matches nothing; the left NULL-key row leaves.
    run.epoch(left="""
        - 2 . n""", right="""
        + 9 . z""", expect="""
        - 2 . n . . .""")
    # A key whose both sides arrive in one epoch never shows its padded row.
    run.epoch(left="""
        + 3 30 c""", right="""
        + 6 30 w""", expect="""
        + 3 30 c 6 30 w""")
    # A left row whose key turns NULL loses its match and is padded.
    run.epoch(left="""
        - 3 30 c
        + 3 . c""", expect="""
        - 3 30 c 6 30 w
        + 3 . c . . .""")


def test_right_join_is_the_mirror_of_left() -> None:
    run = JoinRun(join_node("right"))
    run.epoch(right="""
        + 7 10 x
        + 8 . y""", expect="""
        + . . . 7 10 x
        + . . . 8 . y""")
    run.epoch(left="""
        + 1 10 a
        + 2 . n""", expect="""
        - . . . 7 10 x
        + 1 10 a 7 10 x""")
    run.epoch(left="""
        - 1 10 a""", expect="""
        - 1 10 a 7 10 x
        + . . . 7 10 x""")


def test_full_join_padded_rows_appear_and_disappear() -> None:
    run = JoinRun(join_node("full"))
    run.epoch(left="""
        + 1 10 a""", right="""
        + 7 20 x
        + 8 . y""", expect="""
        + 1 10 a . . .
        + . . . 7 20 x
        + . . . 8 . y""")
    run.epoch(left="""
        + 2 20 b""", expect="""
        - . . . 7 20 x
        + 2 20 b 7 20 x""")
    run.epoch(left="""
        - 2 20 b""", right="""
        + 9 10 z""", expect="""
        - 2 20 b 7 20 x
        + . . . 7 20 x
        - 1 10 a . . .
        + 1 10 a 9 10 z""")
    run.epoch(left="""
        + 3 . c""", right="""
        - 8 . y""", expect="""
        + 3 . c . . .
        - . . . 8 . y""")
    # Both sides of key 10 leave in one epoch: the joined row goes, no padded row is left behind.
    run.epoch(left="""
        - 1 10 a""", right="""
        - 9 10 z""", expect="""
        - 1 10 a 9 10 z""")
    assert run.states.contents("j3l") == Counter()
    assert run.states.contents("j3r") == Counter({(7, 20, "x"): 1})


# --- aggregates ---------------------------------------------------------------------------------------
def test_aggregate_max_deleted_group_empties_and_reappears() -> None:
    """SELECT g, count(*), sum(x), avg(x), min(x), max(x), count(x) FROM t GROUP BY g."""
    node = agg_node([("c1_g", "varchar"), ("c1_x", "int"), ("c1_id", "int")], ["c1_g"], [
        Agg("count_star", None, "c2_n", "bigint"), Agg("sum", "c1_x", "c2_s", "bigint"),
        Agg("avg", "c1_x", "c2_a", "double"), Agg("min", "c1_x", "c2_lo", "int"),
        Agg("max", "c1_x", "c2_hi", "int"), Agg("count", "c1_x", "c2_c", "bigint")])
    run = AggRun(node)
    run.epoch("""
        + a 5 1
        + a 9 2
        + a . 3
        + b 3 4""", """
        + a 3 14 7.0 5 9 2
        + b 1 3 3.0 3 3 1""")
    # The current max leaves: recomputed from the group's value counts.
    run.epoch("""
        - a 9 2""", """
        - a 3 14 7.0 5 9 2
        + a 2 5 5.0 5 5 1""")
    # A second 5 arrives and the first leaves: the value stays, the row does not change.
    run.epoch("""
        + a 5 5
        - a 5 1""", "")
    # Group b empties and disappears; a NULL group appears; a's min leaves as a larger value arrives.
    run.epoch("""
        - b 3 4
        + . 1 6
        - a 5 5
        + a 8 7""", """
        - b 1 3 3.0 3 3 1
        + . 1 1 1.0 1 1 1
        - a 2 5 5.0 5 5 1
        + a 2 8 8.0 8 8 1""")
    # Group b reappears as new, its earlier values forgotten.
    run.epoch("""
        + b 7 8
        + b . 9""", """
        + b 2 7 7.0 7 7 1""")
    assert run.states.contents("a2v0") == Counter({("a", 8, 1): 1, (None, 1, 1): 1, ("b", 7, 1): 1})


def test_count_distinct_and_decimal_sum() -> None:
    """SELECT g, count(DISTINCT x), sum(p), max(x) FROM t GROUP BY g (max shares x's value counts)."""
    node = agg_node([("c1_g", "int"), ("c1_x", "varchar"), ("c1_p", "decimal(10,2)"), ("c1_id", "bigint")],
                    ["c1_g"], [Agg("count_distinct", "c1_x", "c2_d", "bigint"),
                               Agg("sum", "c1_p", "c2_s", "decimal(38,2)"), Agg("max", "c1_x", "c2_m", "varchar")])
    run = AggRun(node)
    run.epoch("""
        + 1 x 1.50 1
        + 1 x 2.25 2
        + 1 y . 3
        + 1 . 1.00 4
        + 2 z 0.10 5""", """
        + 1 2 4.75 y
        + 2 1 0.10 z""")
    run.epoch("""
        - 1 y . 3""", """
        - 1 2 4.75 y
        + 1 1 4.75 x""")
    run.epoch("""
        - 1 x 1.50 1""", """
        - 1 1 4.75 x
        + 1 1 3.25 x""")
    # The last non-NULL x leaves: no distinct values, max NULL, the group stays (it has a row).
    run.epoch("""
        - 1 x 2.25 2
        + 2 z 0.20 6
        + 2 w . 7""", """
        - 1 1 3.25 x
        + 1 0 1.00 .
        - 2 1 0.10 z
        + 2 2 0.30 z""")


def test_scalar_aggregate_over_empty_then_nonempty_input() -> None:
    """SELECT count(*), sum(x), min(x), max(x), avg(x) FROM t: one row even over no rows."""
    node = agg_node([("c1__g", "bigint"), ("c1_x", "int"), ("c1_id", "int")], ["c1__g"], [
        Agg("count_star", None, "c2_n", "bigint"), Agg("sum", "c1_x", "c2_s", "bigint"),
        Agg("min", "c1_x", "c2_lo", "int"), Agg("max", "c1_x", "c2_hi", "int"),
        Agg("avg", "c1_x", "c2_a", "double")], scalar=True)
    run = AggRun(node)
    assert run.out == Counter({(0, 0, None, None, None, None): 1})  # the backfill's row
    run.epoch("", "")
    run.epoch("""
        + 0 4 1
        + 0 6 2""", """
        - 0 0 . . . .
        + 0 2 10 4 6 5.0""")
    run.epoch("""
        - 0 4 1
        - 0 6 2""", """
        - 0 2 10 4 6 5.0
        + 0 0 . . . .""")
    assert run.states.contents("a2") == Counter()
    run.epoch("""
        + 0 . 3""", """
        - 0 0 . . . .
        + 0 1 . . . .""")


@pytest.mark.parametrize(("sql_type", "lo", "hi"), [("boolean", "f", "t"),
                                                    ("timestamptz", "2024-01-01T00:00:00+00:00",
                                                     "2024-01-02T00:00:00+00:00")])
def test_min_max_of_boolean_and_timestamptz(sql_type: str, lo: str, hi: str) -> None:
    """SELECT g, min(x), max(x) FROM t GROUP BY g over types that arrow's element-wise min/max
    kernels lack (the fold used them and crashed on its first epoch)."""
    run = AggRun(agg_node([("c1_g", "int"), ("c1_x", sql_type), ("c1_id", "int")], ["c1_g"], [
        Agg("min", "c1_x", "c2_lo", sql_type), Agg("max", "c1_x", "c2_hi", sql_type)]))
    run.epoch(f"""
        + 1 {hi} 1
        + 1 {lo} 2""", f"""
        + 1 {lo} {hi}""")


def test_min_and_count_distinct_with_repeated_values_and_avg_to_null() -> None:
    """SELECT g, min(x), count(DISTINCT x), avg(y) FROM t GROUP BY g: a value held by several rows
    stays the min until its last row leaves."""
    node = agg_node([("c1_g", "int"), ("c1_x", "int"), ("c1_y", "double"), ("c1_id", "int")], ["c1_g"], [
        Agg("min", "c1_x", "c2_lo", "int"), Agg("count_distinct", "c1_x", "c2_d", "bigint"),
        Agg("avg", "c1_y", "c2_a", "double")])
    run = AggRun(node)
    run.epoch("""
        + 1 2 1.0 1
        + 1 2 3.0 2
        + 1 7 . 3""", """
        + 1 2 2 2.0""")
    run.epoch("""
        - 1 2 1.0 1""", """
        - 1 2 2 2.0
        + 1 2 2 3.0""")
    run.epoch("""
        - 1 2 3.0 2""", """
        - 1 2 2 3.0
        + 1 7 1 .""")
    assert run.states.contents("a2v0") == Counter({(1, 7, 1): 1})


def test_append_only_min_max_fold_without_value_counts() -> None:
    """SELECT g, min(x), max(x), count(DISTINCT y) FROM t GROUP BY g over an append-only t: min and
    max keep no value counts and fold each epoch's values in; count(DISTINCT) still counts values."""
    node = agg_node([("c1_g", "varchar"), ("c1_x", "int"), ("c1_y", "int"), ("c1_id", "bigint")], ["c1_g"], [
        Agg("min", "c1_x", "c2_lo", "int"), Agg("max", "c1_x", "c2_hi", "int"),
        Agg("count_distinct", "c1_y", "c2_d", "bigint")], append_only=True)
    assert sorted(state_schemas(node)) == ["a2", "a2v0"]  # a2v0: y's value counts, for count(DISTINCT)
    run = AggRun(node)
    run.epoch("""
        + a 5 1 1
        + a . 1 2
        + b . . 3""", """
        + a 5 5 1
        + b . . 0""")
    run.epoch("""
        + a 9 2 4
        + a 3 2 5
        + b 4 7 6
        + c 1 1 7""", """
        - a 5 5 1
        + a 3 9 2
        - b . . 0
        + b 4 4 1
        + c 1 1 1""")
    run.epoch("""
        + a 6 1 8""", "")  # within the extremes, a value already counted: the row stays
    assert run.states.contents("a2") == Counter({("a", 5, 3, 9, 2): 1, ("b", 2, 4, 4, 1): 1, ("c", 1, 1, 1, 1): 1})
    with pytest.raises(AssertionError, match="append-only input retracted"):
        run.node.apply(zset("- a 9 2 4", run.node.input.arrow_schema(WF)), run.states)


def test_join_on_two_columns_with_a_null_part() -> None:
    """l(id, a, b) INNER JOIN r(id, a, b) ON l.a = r.a AND l.b = r.b: a NULL in either part never matches."""
    left = scan(1, "l", [("c1_id", "int"), ("c1_a", "int"), ("c1_b", "varchar")], ["c1_id"])
    right = scan(2, "r", [("c2_id", "int"), ("c2_a", "int"), ("c2_b", "varchar")], ["c2_id"])
    run = JoinRun(Join(3, left.columns + right.columns, ["c1_id", "c2_id"], left=left, right=right,
                       join_type="inner", left_keys=["c1_a", "c1_b"], right_keys=["c2_a", "c2_b"]))
    run.epoch(left="""
        + 1 1 x
        + 2 1 .
        + 3 2 x""", right="""
        + 7 1 x
        + 8 1 .
        + 9 1 y""", expect="""
        + 1 1 x 7 1 x""")
    run.epoch(right="""
        - 9 1 y
        + 9 2 x""", expect="""
        + 3 2 x 9 2 x""")
    assert run.states.contents("j3r") == Counter({(7, 1, "x"): 1, (9, 2, "x"): 1})


# --- projections ---------------------------------------------------------------------------------
def test_project_rename_over_a_zset_stays_in_arrow() -> None:
    """A projection that only renames, reorders and repeats columns runs without Spark."""
    child = scan(1, "t", [("c1_id", "int"), ("c1_v", "varchar")], ["c1_id"])
    proj = Project(2, [("c2_v", "varchar"), ("c2_id", "int"), ("c2_id2", "int")], ["c2_id"], input=child,
                   exprs=[("c2_v", "`c1_v`"), ("c2_id", "`c1_id`"), ("c2_id2", "`c1_id`")])
    assert proj.is_rename
    out = proj.apply(zset("""
        + 1 a
        - 2 .""", child.arrow_schema(WF)))
    expected = zset("""
        + a 1 1
        - . 2 2""", proj.arrow_schema(WF))
    assert out.schema.equals(expected.schema)
    assert as_counter(out) == as_counter(expected)
    computed = Project(3, [("c3_n", "int")], [], input=child, exprs=[("c3_n", "`c1_id` + 1")])
    assert not computed.is_rename  # computed, still without Spark: the Arrow evaluation (`stream/arrow_chain.py`)
    assert as_counter(computed.apply(zset("+ 1 a", child.arrow_schema(WF)))) == \
        as_counter(zset("+ 2", computed.arrow_schema(WF)))
    unsupported = Project(4, [("c4_s", "varchar")], [], input=child,
                          exprs=[("c4_s", "REGEXP_REPLACE(`c1_v`, 'a', 'b')")])
    with pytest.raises(AssertionError, match="needs Spark"):  # what Arrow cannot compute exactly goes to Spark
        unsupported.apply(zset("+ 1 a", child.arrow_schema(WF)))


# --- the plan as the catalog stores it ---------------------------------------------------------------
def _cols(*names: str, t: str = "timestamp") -> list[list[str]]:
    return [[n, "int" if n.endswith("_id") else t] for n in names]


# As `Node.to_json` wrote it before the operator classes: warehouses keep plans in this format.
# SELECT count(*), min(a.id) FROM TUMBLE(bids, t, 10s) b LEFT JOIN HOP(asks, t, 5s, 10s) a
# ON b.id = a.id WHERE a.t IS NOT NULL (with b.id > 3 pushed into the scan).
STORED_PLAN: dict[str, Any] = {
    "id": 6, "op": "project", "key": ["c9__g"],
    "columns": [["c13_n", "bigint"], ["c14_lo", "int"], ["c9__g", "bigint"]],
    "exprs": [["c13_n", "`c11_count_star`"], ["c14_lo", "`c12_min`"], ["c9__g", "`c9__g`"]],
    "inputs": [{
        "id": 5, "op": "agg", "key": ["c9__g"], "group": ["c9__g"], "scalar": True,
        "columns": [["c9__g", "bigint"], ["c11_count_star", "bigint"], ["c12_min", "int"]],
        "aggs": [{"fn": "count_star", "arg": None, "out": "c11_count_star", "type": "bigint"},
                 {"fn": "min", "arg": "c10_arg", "out": "c12_min", "type": "int"}],
        "inputs": [{
            "id": 4, "op": "project", "key": [], "predicate": "(`c6_t` IS NOT NULL)",
            "columns": [["c9__g", "bigint"], ["c10_arg", "int"]], "exprs": [["c9__g", "0L"], ["c10_arg", "`c5_id`"]],
            "inputs": [{
                "id": 3, "op": "join", "join_type": "left", "left_keys": ["c1_id"], "right_keys": ["c5_id"],
                "columns": _cols("c1_id", "c2_t", "c3_window_start", "c4_window_end",
                                 "c5_id", "c6_t", "c7_window_start", "c8_window_end"),
                "key": ["c1_id", "c5_id", "c7_window_start"],
                "inputs": [
                    {"id": 1, "op": "scan", "relation": "bids", "key": ["c1_id"], "inputs": [],
                     "columns": _cols("c1_id", "c2_t", "c3_window_start", "c4_window_end"),
                     "window": {"kind": "tumble", "time": "t", "size": 10}, "predicate": "(`c1_id` > 3)",
                     "exprs": [["c1_id", "`id`"], ["c2_t", "`t`"], ["c3_window_start", "`window_start`"],
                               ["c4_window_end", "`window_end`"]]},
                    {"id": 2, "op": "scan", "relation": "asks", "key": ["c5_id", "c7_window_start"], "inputs": [],
                     "columns": _cols("c5_id", "c6_t", "c7_window_start", "c8_window_end"),
                     "window": {"kind": "hop", "time": "t", "slide": 5, "size": 10},
                     "exprs": [["c5_id", "`id`"], ["c6_t", "`t`"], ["c7_window_start", "`window_start`"],
                               ["c8_window_end", "`window_end`"]]}]}]}]}]}


def test_stored_plan_opens_as_operator_classes_and_round_trips() -> None:
    root = from_json(STORED_PLAN)
    assert [type(n).__name__ for n in root.walk()] == ["Scan", "Scan", "Join", "Project", "Aggregate", "Project"]
    bids, asks, join, _, agg, _ = root.walk()
    assert isinstance(bids, Scan) and bids.window == Window("tumble", "t", 10) and bids.predicate == "(`c1_id` > 3)"
    assert isinstance(asks, Scan) and asks.window == Window("hop", "t", 10, 5)
    assert isinstance(join, Join) and join.join_type == "left"
    assert isinstance(agg, Aggregate) and agg.scalar and [a.fn for a in agg.aggs] == ["count_star", "min"]
    assert root.to_json() == STORED_PLAN
    assert root.upstreams() == ["bids", "asks"]
    assert (bids.stateless, join.stateless, root.stateless) == (True, False, False)


def test_state_tables_keep_their_names_and_keys() -> None:
    schemas = state_schemas(from_json(STORED_PLAN))
    assert {s: (sch.names, sch.key) for s, sch in schemas.items()} == {
        "j3l": (["c1_id", "c2_t", "c3_window_start", "c4_window_end"], ("c1_id",)),
        "j3r": (["c5_id", "c6_t", "c7_window_start", "c8_window_end"], ("c5_id", "c7_window_start")),
        "a5": (["c9__g", "_count", "p1"], ("c9__g",)),
        "a5v0": (["c9__g", "c10_arg", "_count"], ("c9__g", "c10_arg"))}
    assert state_purpose("j3r", ("c5_id", "c7_window_start")) == \
        "right input of join 3, arranged by join key, then row key: (c5_id, c7_window_start)"
    assert state_purpose("a5", ("c9__g",)) == "partial aggregates of aggregate 5 per group (c9__g)"
    assert state_purpose("a5v0", ("c9__g", "c10_arg")) == \
        "value counts of aggregate 5 per (c9__g, c10_arg), for min/max/count distinct"
    assert state_purpose("x1", ()) == "operator state"


# --- window functions ---------------------------------------------------------------------------------
def test_window_recomputes_only_the_touched_partitions() -> None:
    """`row_number() OVER (PARTITION BY g ORDER BY v DESC)`: a change re-ranks its partition (the
    evaluation itself, Spark's, is stood in for by Python), emitting only the rows whose rank moved."""
    child = scan(1, "t", [("c1_id", "int"), ("c1_g", "int"), ("c1_v", "int")], ["c1_id"])
    node = OverWindow(2, [*child.columns, ("c2_rn", "int")], ["c1_id"], input=child, partition=["c1_g"],
                      calls=[("c2_rn", "row_number() OVER (PARTITION BY `_side`, `c1_g` ORDER BY `c1_v` DESC)")])

    def ranks(rows: pa.Table) -> pa.Table:
        by_part: dict[Row, list[dict[str, Any]]] = {}
        for r in rows.to_pylist():
            by_part.setdefault((r[SIDE], r["c1_g"]), []).append(r)
        out = [{**r, "c2_rn": i} for part in by_part.values()
               for i, r in enumerate(sorted(part, key=lambda r: (-r["c1_v"], r["c1_id"])), start=1)]
        return pa.Table.from_pylist(out, schema=pa.schema([*rows.schema, pa.field("c2_rn", pa.int32())]))

    states, schema = MemoryStates(state_schemas(node)), child.arrow_schema(WF)

    def epoch(d: str, expect: str) -> None:
        out = node.apply(zset(d, schema), states, ranks)
        states.commit()
        assert as_counter(out) == as_counter(zset(expect, node.arrow_schema(WF)))

    epoch("""
        + 1 1 10
        + 2 1 20
        + 3 2 5""", """
        + 1 1 10 2
        + 2 1 20 1
        + 3 2 5 1""")
    epoch("""
        + 4 1 30""", """
        - 1 1 10 2
        + 1 1 10 3
        - 2 1 20 1
        + 2 1 20 2
        + 4 1 30 1""")
    epoch("""
        - 4 1 30
        + 4 2 30""", """
        - 4 1 30 1
        - 2 1 20 2
        + 2 1 20 1
        - 1 1 10 3
        + 1 1 10 2
        - 3 2 5 1
        + 3 2 5 2
        + 4 2 30 1""")
    assert states.contents("w2") == Counter({(1, 1, 10): 1, (2, 1, 20): 1, (3, 2, 5): 1, (4, 2, 30): 1})


# --- common subplans -----------------------------------------------------------------------------
def _counts(base: int, group: list[str], predicate: str | None = None, fn: str = "count_star") -> Aggregate:
    """`SELECT <group>, count(*) FROM t [WHERE predicate] GROUP BY <group>` with ids from `base`."""
    child = Scan(base, [(f"c{base}_g", "int"), (f"c{base}_d", "int"), (f"c{base}_id", "int")], [f"c{base}_id"],
                 relation="t", exprs=[(f"c{base}_g", "`g`"), (f"c{base}_d", "`d`"), (f"c{base}_id", "`id`")],
                 predicate=predicate and predicate.replace("X", f"c{base}_d"))
    cols = [(f"c{base}_{g}", "int") for g in group]
    arg = None if fn == "count_star" else f"c{base}_d"
    return Aggregate(base + 1, [*cols, (f"c{base}_n", "bigint")], [n for n, _ in cols], input=child,
                     group=[n for n, _ in cols], aggs=[Agg(fn, arg, f"c{base}_n", "bigint")])


def _self_join(left: Aggregate, right: Aggregate) -> Join:
    def on(agg: Aggregate) -> list[str]:
        return [g for g in agg.group if g.endswith("_g")]

    return Join(99, left.columns + right.columns, left.key + right.key, left=left, right=right, join_type="inner",
                left_keys=on(left), right_keys=on(right))


def test_a_subplan_spelled_twice_is_planned_once_and_shared() -> None:
    """q5's shape: the same count with its groups in another order feeds both sides of a join. The
    pass keeps the first under a share and reads the second's columns from it through a rename; the
    stored plan decodes to one shared object, with one aggregate and its one state table."""
    ids = iter(range(100, 110))
    join = _self_join(_counts(1, ["g", "d"]), _counts(10, ["d", "g"]))
    share_common_subplans(join, ids)
    assert isinstance(join.left, Share) and isinstance(join.right, Project)
    assert join.right.input is join.left and join.right.is_rename
    assert join.right.exprs == [("c10_d", "`c1_d`"), ("c10_g", "`c1_g`"), ("c10_n", "`c1_n`")]
    assert join.right.columns == [("c10_d", "int"), ("c10_g", "int"), ("c10_n", "bigint")]  # as its parent reads them

    stored = from_json(join.to_json())
    assert isinstance(stored, Join) and isinstance(stored.right, Project) and stored.right.input is stored.left
    assert [type(n).__name__ for n in stored.walk()] == ["Scan", "Aggregate", "Share", "Project", "Join"]
    assert set(state_schemas(stored)) == {"a2", "j99l", "j99r"}
    assert stored.to_json() == join.to_json()


def test_a_third_copy_reads_the_same_share() -> None:
    pair = _self_join(_counts(1, ["g", "d"]), _counts(10, ["d", "g"]))
    third = _counts(20, ["g", "d"])
    top = Join(98, pair.columns + third.columns, pair.key + third.key, left=pair, right=third, join_type="inner",
               left_keys=["c1_g"], right_keys=["c20_g"])
    share_common_subplans(top, iter(range(100, 110)))
    shares = [n for n in top.walk() if isinstance(n, Share)]
    assert len(shares) == 1 and isinstance(top.right, Project) and top.right.input is shares[0]
    assert [n.op for n in top.walk()].count("agg") == 1


@pytest.mark.parametrize("right", [
    _counts(10, ["d", "g"], predicate="X > 1"),  # another predicate
    _counts(10, ["d", "g"], fn="max"),  # another aggregate
    _counts(10, ["g"]),  # other groups
])
def test_subplans_that_differ_are_not_shared(right: Aggregate) -> None:
    join = _self_join(_counts(1, ["g", "d"]), right)
    share_common_subplans(join, iter(range(100, 110)))
    assert join.left.op == join.right.op == "agg"
    assert not any(isinstance(n, Share) for n in join.walk())


@dataclass(kw_only=True)
class _Fixed(Values):
    """A leaf whose change is `change` in every epoch, counting its evaluations."""

    change: pa.Table
    calls: list[EpochIO] = field(default_factory=list)

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table:
        self.calls.append(io)
        return self.change


def test_a_shared_change_is_evaluated_once_per_epoch() -> None:
    """Both parents of a share get the same change; its input (say an aggregate, which stages its
    state) is evaluated once per epoch."""
    cols = [("c1_g", "int"), ("c1_n", "bigint")]
    leaf = _Fixed(1, cols, ["c1_g"], rows=[], change=zset("+ 1 2", pa.schema([*[pa.field(n, pa.int64() if t == "bigint"
                                                                                          else pa.int32())
                                                                                 for n, t in cols], WF])))
    share = Share(2, cols, ["c1_g"], input=leaf)
    epoch = EpochIO(rt=None, inputs={})  # type: ignore[arg-type]  # no Spark, no state: neither is read
    assert share.delta(epoch) is leaf.change and share.delta(epoch) is leaf.change
    assert leaf.calls == [epoch]
    later = EpochIO(rt=None, inputs={})  # type: ignore[arg-type]
    assert share.delta(later) is leaf.change and leaf.calls == [epoch, later]


# --- a join side read from the aggregate below it -----------------------------------------------------
def _counts_and_their_max(join_type: JoinType) -> tuple[_Fixed, Join]:
    """q5's shape: counts per (g, d) joined on g with the largest count per g, both sides an
    aggregate's output (the second through a renaming projection of the shared first)."""
    cols = [("c1_g", "int"), ("c1_d", "int"), ("c1_id", "int")]
    nothing = pa.schema([*[(n, pa.int32()) for n, _ in cols], WF]).empty_table()  # set per epoch by the test
    leaf = _Fixed(1, cols, ["c1_id"], rows=[], change=nothing)
    counts = Aggregate(2, [("c1_g", "int"), ("c1_d", "int"), ("c2_n", "bigint")], ["c1_g", "c1_d"], input=leaf,
                       group=["c1_g", "c1_d"], aggs=[Agg("count_star", None, "c2_n", "bigint")])
    share = Share(3, counts.columns, counts.key, input=counts)
    renamed = Project(4, [("c4_g", "int"), ("c4_n", "bigint"), ("c4_d", "int")], ["c4_g", "c4_d"], input=share,
                      exprs=[("c4_g", "`c1_g`"), ("c4_n", "`c2_n`"), ("c4_d", "`c1_d`")])
    top = Aggregate(5, [("c4_g", "int"), ("c5_mx", "bigint")], ["c4_g"], input=renamed, group=["c4_g"],
                    aggs=[Agg("max", "c4_n", "c5_mx", "bigint")])
    join = Join(6, share.columns + top.columns, share.key + top.key, left=share, right=top, join_type=join_type,
                left_keys=["c1_g"], right_keys=["c4_g"])
    return leaf, join


@pytest.mark.parametrize("join_type", ["inner", "left", "right", "full"])
def test_a_join_side_that_is_an_aggregate_reads_its_partials_instead_of_a_copy(join_type: JoinType) -> None:
    """Each side is an aggregate's output, keyed by the join key first: the join keeps no state
    table of its own (the aggregates' partials stand for both), and its output equals, epoch by
    epoch, that of the same join keeping both copies, and the join evaluated from scratch."""
    leaf, join = _counts_and_their_max(join_type)
    join.borrow_states()
    assert {side: a.agg.id for side, a in join.aggregate_sides.items()} == {"left": 2, "right": 5}
    assert set(state_schemas(join)) == {"a2", "a5", "a5v0"}  # no j6l, j6r
    stored = from_json(join.to_json())
    assert isinstance(stored, Join) and list(stored.aggregate_sides) == ["left", "right"]
    assert stored.to_json() == join.to_json()
    stale = join.to_json()
    stale["borrowed"]["right"] = 2  # a stored plan this version would read otherwise
    with pytest.raises(CatalogError, match="join 6 reads its right side from aggregate 2"):
        from_json(stale)
    twin_leaf, twin = _counts_and_their_max(join_type)
    assert set(state_schemas(twin)) == {"a2", "a5", "a5v0", "j6l", "j6r"}

    epochs = ["""+ 1 1 1
                 + 1 1 2
                 + 1 2 3
                 + . 1 4
                 + 2 1 5""",
              """+ 1 2 6
                 + 1 2 7
                 - 2 1 5""",  # the max of g=1 moves to d=2; g=2 empties
              """- 1 2 6
                 - 1 2 7
                 - 1 2 3
                 + 2 3 8
                 + . 1 9""",  # g=1's max falls back to d=1 as d=2 leaves; g=2 comes back
              """- 1 1 1
                 - 1 1 2"""]  # g=1 empties
    states, twin_states = MemoryStates(state_schemas(join)), MemoryStates(state_schemas(twin))
    fed: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    schema = leaf.arrow_schema(WF)
    for text in epochs:
        leaf.change = twin_leaf.change = zset(text, schema)
        got = join.delta(EpochIO(rt=None, inputs={}, state=states))  # type: ignore[arg-type]  # no Spark: Arrow only
        want = twin.delta(EpochIO(rt=None, inputs={}, state=twin_states))  # type: ignore[arg-type]
        states.commit()
        twin_states.commit()
        assert (got is None) == (want is None) and (got is None or as_counter(got) == as_counter(want))
        fed, out = add(fed, as_counter(leaf.change)), add(out, as_counter(got) if got is not None else Counter())
        counts = aggregate_from_scratch(join.left.inputs[0], fed)  # type: ignore[arg-type]
        maxima = aggregate_from_scratch(join.right, Counter({(g, n, d): w for (g, d, n), w in counts.items()}))  # type: ignore[arg-type]
        assert out == join_from_scratch(join, counts, maxima)
    assert states.contents("a2") == twin_states.contents("a2") and "j6l" not in states.rows


def test_a_side_keeps_its_own_state_unless_the_aggregate_can_stand_for_it() -> None:
    """Not borrowed: a join key that is an aggregate's value, one that is not the group's first
    column, two join keys renaming one group column, a filtered (HAVING) or computed projection."""
    _, join = _counts_and_their_max("inner")
    counts = join.left
    assert AggregateSide.of(counts, ["c1_g", "c1_d"]) is not None
    assert AggregateSide.of(counts, ["c2_n"]) is None and AggregateSide.of(counts, ["c1_d"]) is None
    twice = Project(7, [("c7_a", "int"), ("c7_b", "int"), ("c7_n", "bigint")], ["c7_a"], input=counts,
                    exprs=[("c7_a", "`c1_g`"), ("c7_b", "`c1_g`"), ("c7_n", "`c2_n`")])
    assert AggregateSide.of(twice, ["c7_a"]) is not None and AggregateSide.of(twice, ["c7_a", "c7_b"]) is None
    having = Project(8, twice.columns, ["c7_a"], input=counts, exprs=twice.exprs, predicate="`c2_n` > 1")
    computed = Project(9, twice.columns, ["c7_a"], input=counts,
                       exprs=[("c7_a", "`c1_g` + 1"), ("c7_b", "`c1_g`"), ("c7_n", "`c2_n`")])
    assert AggregateSide.of(having, ["c7_a"]) is None and AggregateSide.of(computed, ["c7_a"]) is None


def test_a_side_that_is_an_append_only_tables_rows_keeps_them_under_its_names() -> None:
    """A side that is a scan of an append-only table, through renames, keeps its state under the
    table's column names (so that a backfill can link the table's files as that state; the Spark
    tests in test_linked_state.py check its rows); a stored plan keeps it or is refused. Not
    linked: a table that is not append-only, a windowed or filtered scan, a computed projection,
    two side columns of one table column."""
    left = scan(1, "l", [("c1_id", "int"), ("c1_k", "int"), ("c1_v", "varchar")], ["c1_id"])
    renamed = Project(3, [("c3_kk", "int"), ("c3_id", "int")], ["c3_id"], input=left,
                      exprs=[("c3_kk", "`c1_k`"), ("c3_id", "`c1_id`")])
    right = scan(2, "r", [("c2_id", "int"), ("c2_k", "int")], ["c2_id"])
    join = Join(4, renamed.columns + right.columns, renamed.key + right.key, left=renamed, right=right,
                join_type="left", left_keys=["c3_kk"], right_keys=["c2_k"])
    join.link_tables(lambda name: name == "l")
    assert {side: t.relation for side, t in join.table_sides.items()} == {"left": "l"}
    assert state_schemas(join)["j4l"].names == ["k", "id"] and state_schemas(join)["j4l"].key == ("k", "id")
    assert state_schemas(join)["j4r"].names == ["c2_id", "c2_k"]
    stored = from_json(join.to_json())
    assert isinstance(stored, Join) and stored.table_sides == join.table_sides
    stale = join.to_json()
    stale["linked"]["left"] = "r"
    with pytest.raises(CatalogError, match="join 4 keeps its left side as 'r'"):
        from_json(stale)

    join.link_tables(lambda name: False)
    assert not join.table_sides
    windowed = Scan(5, left.columns, left.key, relation="l", exprs=left.exprs, window=Window("tumble", "t", 10))
    filtered = Scan(6, left.columns, left.key, relation="l", exprs=left.exprs, predicate="`c1_k` > 1")
    computed = Project(7, [("c7_k", "int")], ["c7_k"], input=left, exprs=[("c7_k", "`c1_k` + 1")])
    twice = Project(8, [("c8_a", "int"), ("c8_b", "int")], ["c8_a"], input=left,
                    exprs=[("c8_a", "`c1_k`"), ("c8_b", "`c1_k`")])
    assert [TableSide.of(op, "j9l") for op in (windowed, filtered, computed, twice)] == [None] * 4
    assert TableSide.of(Share(10, left.columns, left.key, input=left), "j9l") is not None
