"""An outer join's range conditions clean only its preserved side's state (`intervals.outer_cleaning`):
a row of the NULL-padded side decides whether the rows it matched are padded, so deleting it while
one of them is kept would have a later match retract a padding row that was never there (found in
review; `tests/integration/test_interval_join_outer_cleaning.py` shows the wrong count it gave)."""

from __future__ import annotations

import pytest

from sparkwave.frontend.plan.explain import explain
from tests.unit.test_interval_join_plan import _plan

ON = "ON a.k = b.k AND a.t BETWEEN b.t AND b.t + INTERVAL '10' SECOND"


@pytest.mark.parametrize(("kind", "cleaned"), [("LEFT", {"left"}), ("RIGHT", {"right"}), ("FULL", set()),
                                               ("", {"left", "right"})])
def test_an_outer_join_cleans_its_preserved_side_only(kind: str, cleaned: set[str]) -> None:
    _, join = _plan(f"SELECT a.k, b.w FROM a {kind} JOIN b {ON}")
    got = join.interval.cleanable if join.interval is not None else set()
    assert got == cleaned
    assert set(join.interval.thresholds({"a": 10**12, "b": 10**12}) if join.interval else {}) == cleaned


def test_explain_says_why_an_outer_joins_padded_side_is_kept_whole() -> None:
    plan, _ = _plan(f"SELECT a.k, b.w FROM a LEFT JOIN b {ON}")
    text = "\n".join(explain("m", plan))
    assert "rows with a.t below b's watermark (of b.t) are deleted" in text, text
    assert "kept whole: its rows decide which rows of the other side the outer join NULL-pads" in text, text
