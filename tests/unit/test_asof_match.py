"""The ASOF join's match in Arrow (`stream/asof_join.py: asof_match`) against its definition, row by
row: for each left row, of the right rows of its keys whose time satisfies the inequality, the one
with the closest time, a tie going to the smallest right row key (NULL last), as RisingWave keeps the
smallest pk. Random small tables with many ties, NULL keys, NULL times and NULL row keys."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from sparkwave.stream.asof_join import INEQUALITIES, asof_match

_CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _expected(left: list[tuple], right: list[tuple], op: str) -> list[int]:
    out = []
    for k, t in left:
        cands = [(i, r) for i, r in enumerate(right) if k is not None and t is not None and r[0] == k
                 and r[1] is not None and _CMP[op](t, r[1])]
        if not cands:
            out.append(-1)
            continue
        closest = max(c[1][1] for c in cands) if op in (">", ">=") else min(c[1][1] for c in cands)
        tied = [c for c in cands if c[1][1] == closest]
        best = min(tied, key=lambda c: (c[1][2] is None, c[1][2] or 0))  # NULL row key last
        out.append(best[0])
    return out


@pytest.mark.parametrize("op", INEQUALITIES)
@pytest.mark.parametrize("seed", range(25))
def test_the_match_is_the_closest_right_row_the_least_key_on_a_tie(op: str, seed: int) -> None:
    rnd = random.Random(seed)

    def maybe(v: int) -> int | None:
        return None if rnd.random() < 0.1 else v

    left = [(maybe(rnd.randint(0, 2)), maybe(rnd.randint(0, 6))) for _ in range(rnd.randint(0, 12))]
    right = [(maybe(rnd.randint(0, 2)), maybe(rnd.randint(0, 6)), maybe(rnd.randint(0, 50)))
             for _ in range(rnd.randint(0, 12))]
    lt = pa.table({"lk": pa.array([r[0] for r in left], pa.int32()), "lt": pa.array([r[1] for r in left], pa.int64())})
    rt = pa.table({"rk": pa.array([r[0] for r in right], pa.int32()), "rt": pa.array([r[1] for r in right], pa.int64()),
                   "id": pa.array([r[2] for r in right], pa.int64())})
    li, ri = asof_match(lt, rt, ["lk", "lt"], ["rk", "rt"], op, ["id"])  # type: ignore[arg-type]
    assert list(li) == list(range(len(left)))
    got = [int(i) for i in ri]
    want = _expected(left, right, op)
    # equal (time, key) pairs cannot be told apart: compare the rows matched, not their positions
    assert [right[i] if i >= 0 else None for i in got] == [right[i] if i >= 0 else None for i in want], \
        f"left {left}, right {right}"


def test_string_keys_and_a_two_column_tiebreak() -> None:
    lt = pa.table({"k": ["a", "b", "a"], "t": [5, 5, 1]})
    rt = pa.table({"k": ["a", "a", "a", "b"], "t": [4, 4, 4, 9], "x": [2, 1, 1], "y": ["z", "b", "a", "q"][:4]}
                  if False else {"k": ["a", "a", "a", "b"], "t": [4, 4, 4, 9], "x": [2, 1, 1, 0],
                                 "y": ["z", "b", "a", "q"]})
    _, ri = asof_match(lt, rt, ["k", "t"], ["k", "t"], ">=", ["x", "y"])
    assert list(ri) == [2, -1, -1]
    _, ri = asof_match(lt, rt, ["k", "t"], ["k", "t"], "<", ["x", "y"])
    assert list(ri) == [-1, 3, 2]
