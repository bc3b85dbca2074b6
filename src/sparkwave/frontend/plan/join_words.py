"""A join's state cleaning in words, for EXPLAIN and the dashboard (no planner imports: EXPLAIN of a
stored plan needs none)."""

from __future__ import annotations

from collections.abc import Callable

from sparkwave.stream.join import Join, Side
from sparkwave.stream.join_side import OwnState

MICROS = {"microsecond": 1, "millisecond": 1_000, "second": 1_000_000, "minute": 60_000_000,
          "hour": 3_600_000_000, "day": 86_400_000_000}
TIMES = ("timestamp", "timestamptz", "date")


def _amount(value: int, type_name: str) -> str:
    """A bound in words: `1 minute`, `90 seconds`, `7` (an integer column's units)."""
    if type_name not in TIMES:
        return str(value)
    for unit, size in reversed(MICROS.items()):
        if value % size == 0:
            n = value // size
            return f"{n} {unit}{'' if n == 1 else 's'}"
    return f"{value} microseconds"


def interval_words(join: Join, side: Side, name: Callable[[str], str]) -> str:
    """What cleans a join side's state, in words, for EXPLAIN and the dashboard ("" for no interval join)."""
    iv = join.interval
    if iv is None:
        return ""
    b = iv.lower if side == "left" else iv.upper
    if b is None and join.join_type != "inner":
        return "; kept whole: its rows decide which rows of the other side the outer join NULL-pads"
    if b is None:
        return "; kept whole: no range condition bounds it by a time of the other side"
    mine, theirs = (b.left, b.right) if side == "left" else (b.right, b.left)
    if b.watermark is None:
        return f"; kept whole: {name(theirs)} has no watermark (WATERMARK FOR on its table or source cleans it)"
    if not isinstance(join.side(side), OwnState):  # an aggregate's partials: the aggregate's
        return "; not cleaned by the join: its rows are not the join's own state"
    shift = b.value if side == "left" else -b.value
    amount = "" if shift == 0 else f" {'+' if shift > 0 else '-'} {_amount(abs(shift), join.type_of(mine))}"
    return f"; rows with {name(mine)} below {b.watermark.describe()} (of {name(theirs)}){amount} are deleted"
