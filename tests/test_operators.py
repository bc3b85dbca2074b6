"""Spark-free unit tests of the stateful Arrow operators (`stream/join.py`, `stream/aggregate.py`).

Each test drives one operator epoch by epoch over literal Z-sets (`tests/chunks.py`) with an
in-memory state store, checks each epoch's output against a literal, and checks that the output
accumulated so far equals the same query evaluated from scratch (in plain Python) on the inputs
accumulated so far: the incremental invariant the MVs rely on."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from sparkwave.stream.aggregate import aggregate
from sparkwave.stream.dataflow import arrow_schema
from sparkwave.stream.join import join
from sparkwave.stream.plan import Agg, Node, state_schemas
from tests.chunks import MemoryStates, Row, W, add, as_counter, zset

WF = pa.field(W, pa.int64())


# --- from-scratch evaluation ------------------------------------------------------------------------
def join_from_scratch(node: Node, left: Counter[Row], right: Counter[Row]) -> Counter[Row]:
    """SQL's equi-join of two multisets: NULL keys never match; outer sides are NULL-padded."""
    lnames, rnames = node.inputs[0].names, node.inputs[1].names
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


def aggregate_from_scratch(node: Node, rows: Counter[Row]) -> Counter[Row]:
    """SQL's GROUP BY of a multiset (NULLs form one group); a scalar aggregate always has its one row."""
    names = node.inputs[0].names
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

    def __init__(self, node: Node) -> None:
        self.node, self.states = node, MemoryStates(state_schemas(node))
        self.schemas = (arrow_schema(node.inputs[0]), arrow_schema(node.inputs[1]))
        self.left: Counter[Row] = Counter()
        self.right: Counter[Row] = Counter()
        self.out: Counter[Row] = Counter()

    def epoch(self, left: str = "", right: str = "", expect: str = "") -> None:
        dl = zset(left, self.schemas[0]) if left.strip() else None  # None: that side had no change, as in dataflow
        dr = zset(right, self.schemas[1]) if right.strip() else None
        out = join(self.node, dl, dr, self.states, self.schemas)  # type: ignore[arg-type]
        self.states.commit()
        expected = zset(expect, arrow_schema(self.node, WF))
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

    def __init__(self, node: Node) -> None:
        self.node, self.states = node, MemoryStates(state_schemas(node))
        self.input: Counter[Row] = Counter()
        self.out = aggregate_from_scratch(node, Counter())

    def epoch(self, d: str, expect: str) -> None:
        delta = zset(d, arrow_schema(self.node.inputs[0])) if d.strip() else \
            arrow_schema(self.node.inputs[0], WF).empty_table()
        out = aggregate(self.node, delta, self.states)  # type: ignore[arg-type]
        self.states.commit()
        expected = zset(expect, arrow_schema(self.node, WF))
        assert out.schema.equals(expected.schema), out.schema
        assert as_counter(out) == as_counter(expected)
        self.input = add(self.input, as_counter(delta))
        self.out = add(self.out, as_counter(out))
        assert self.out == aggregate_from_scratch(self.node, self.input)


# --- plans --------------------------------------------------------------------------------------------
def join_node(join_type: str) -> Node:
    """`l(id, k, v) <join_type> JOIN r(id, k, w) ON l.k = r.k`, each side keyed by its id."""
    left = Node(1, "scan", [("c1_id", "int"), ("c1_k", "int"), ("c1_v", "varchar")], ["c1_id"], relation="l")
    right = Node(2, "scan", [("c2_id", "int"), ("c2_k", "int"), ("c2_w", "varchar")], ["c2_id"], relation="r")
    return Node(3, "join", left.columns + right.columns, ["c1_id", "c2_id"], [left, right], join_type=join_type,
                left_keys=["c1_k"], right_keys=["c2_k"])


def agg_node(child_cols: list[tuple[str, str]], group: list[str], aggs: list[Agg], scalar: bool = False) -> Node:
    """GROUP BY `group` over a projection keyed by its last column (a row id)."""
    child = Node(1, "project", child_cols, [child_cols[-1][0]], exprs=[(n, f"`{n}`") for n, _ in child_cols])
    types = dict(child_cols)
    return Node(2, "agg", [(g, types[g]) for g in group] + [(a.out, a.type) for a in aggs], list(group), [child],
                group=list(group), aggs=aggs, scalar=scalar)


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
