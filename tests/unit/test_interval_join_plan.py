"""Interval joins planned without Spark (`frontend/plan/intervals.py`): the range conditions stay the
join's residual predicate, and their bounds on the two times are recorded with the join (`Interval`,
stored JSON) with the watermark derivations that clean each side's state; EXPLAIN says which state
is cleaned by what. The cleaning thresholds per epoch follow from the bounds (`Interval.thresholds`)."""

from __future__ import annotations

import pytest

from sparkwave.frontend.plan.explain import explain
from sparkwave.frontend.plan.static_catalog import StaticCatalog
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.statements import parse
from sparkwave.stream.join import Join
from sparkwave.stream.plan import from_json

MINUTE = 60_000_000
TABLES = """
CREATE TABLE a (k bigint, t timestamp, v int) APPEND ONLY;
CREATE TABLE b (k bigint, t timestamp, w int) APPEND ONLY;
"""


def _plan(query: str, *, watermarks: tuple[str, ...] = ("a", "b")):  # type: ignore[no-untyped-def]
    catalog = StaticCatalog(StaticTypes())
    catalog.run(TABLES)
    for name in watermarks:
        catalog.relations[name].definition["watermark"] = {"column": "t", "delay": 5_000_000,
                                                           "sql": "t - INTERVAL '5' SECOND"}
    (stmt,) = parse(f"CREATE MATERIALIZED VIEW m AS {query}")
    plan = catalog.plan(stmt)
    (join,) = [op for op in plan.root.walk() if isinstance(op, Join)]
    return plan, join


@pytest.mark.parametrize("where", [
    "ON a.k = b.k AND a.t BETWEEN b.t - INTERVAL '1' MINUTE AND b.t + INTERVAL '2' MINUTE",
    "ON a.k = b.k WHERE a.t >= b.t - INTERVAL '1' MINUTE AND a.t <= b.t + INTERVAL '2 minutes'",
    "ON a.k = b.k AND b.t <= a.t + INTERVAL '60' SECOND AND b.t + INTERVAL '2' MINUTE > a.t",
])
def test_the_range_conditions_bound_each_sides_state_by_the_other_sides_watermark(where: str) -> None:
    plan, join = _plan(f"SELECT a.k, a.v, b.w FROM a JOIN b {where}")
    iv = join.interval
    assert iv is not None and iv.lower is not None and iv.upper is not None
    assert (iv.lower.value, iv.upper.value) == (-MINUTE, 2 * MINUTE)
    # a left row goes below b's watermark - 1 minute, a right row below a's - 2 minutes
    assert iv.thresholds({"a": 100 * MINUTE, "b": 50 * MINUTE}) == {"left": (iv.lower.left, 49 * MINUTE),
                                                                    "right": (iv.upper.right, 98 * MINUTE)}
    assert iv.thresholds({"a": 100 * MINUTE}) == {"right": (iv.upper.right, 98 * MINUTE)}
    stored = from_json(plan.root.to_json())
    assert [op for op in stored.walk() if isinstance(op, Join)][0].interval == iv  # stored and read back
    text = "\n".join(explain("m", plan))
    assert "rows with a.t below b's watermark (of b.t) - 1 minute are deleted" in text, text
    assert "rows with b.t below a's watermark (of a.t) - 2 minutes are deleted" in text, text
    assert "BETWEEN" in text or "a.t >=" in text or "b.t <=" in text, "the range is no longer the residual predicate"


def test_without_watermarks_explain_says_the_state_is_kept_whole() -> None:
    plan, join = _plan("SELECT a.k FROM a JOIN b ON a.k = b.k AND a.t BETWEEN b.t - INTERVAL '1' MINUTE AND b.t",
                       watermarks=())
    assert join.interval is not None and join.interval.thresholds({}) == {}
    assert "kept whole: b.t has no watermark" in "\n".join(explain("m", plan))


def test_a_one_sided_range_cleans_one_side() -> None:
    _, join = _plan("SELECT a.k FROM a JOIN b ON a.k = b.k AND a.t > b.t")
    assert join.interval is not None and join.interval.lower is not None and join.interval.upper is None
    assert set(join.interval.thresholds({"a": MINUTE, "b": MINUTE})) == {"left"}


@pytest.mark.parametrize("query", [
    "SELECT a.k FROM a JOIN b ON a.k = b.k",
    "SELECT a.k FROM a JOIN b ON a.k = b.k AND a.v >= b.w",  # integer columns: a plain residual predicate
    "SELECT a.k FROM a LEFT JOIN b ON a.k = b.k WHERE a.t >= b.t",  # below an outer join: no bound taken
])
def test_other_joins_record_no_interval(query: str) -> None:
    _, join = _plan(query)
    assert join.interval is None
