"""The ASOF oracle's expectation (`tests/asof_cases.py`: a ranking in plain SQL) against DuckDB's own
ASOF JOIN, without Spark: each left row is matched with a right row of the same time (which of tied
rows, DuckDB does not define, so the ranking decides ties as RisingWave does)."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.asof_cases import MVS, TABLES, ranked
from tests.oracle import Model, multiset

T0 = datetime(2026, 1, 1)


def test_the_ranking_agrees_with_duckdbs_asof_join() -> None:
    """The oracle's ranking and DuckDB's native ASOF JOIN match each left row with a right row of
    the same time (which of tied rows, DuckDB does not define)."""
    model = Model()
    for _, name, duck, cols, key in TABLES:
        model.table(name, duck, cols, key)
    rows = [(i, i % 3 if i % 7 else None, T0 + timedelta(seconds=i % 5) if i % 11 else None, i % 4) for i in range(40)]
    model.apply_epoch([("insert", "q", rows), ("insert", "r", [(i, k, t, v) for i, k, t, v in rows[::2]])])
    for name in ("a_ge", "a_left_lt", "a_left_int"):
        _, side, ineq, _, _ = MVS[name]
        time = "v" if "r.v" in ineq else "rts"
        mine = model.db.execute(f"SELECT id, {time} FROM ({ranked(name)}) j WHERE _rn = 1").fetchall()
        native = model.db.execute(f"SELECT q.id, r.{time.removeprefix('r')} FROM q ASOF {side} JOIN r "
                                  f"ON q.k = r.k AND {ineq}").fetchall()
        assert multiset(mine) == multiset(native), name


