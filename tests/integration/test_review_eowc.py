"""Review (review-b) of EMIT ON WINDOW CLOSE over window functions: two shapes that emitted wrong rows
before `frontend/plan/eowc_over.py` learned them, checked against the DuckDB oracle at every epoch.

- `PARTITION BY k % 2` (an expression): the state is one partition, but the window's are two; the
  retire kept the last row of the whole state and deleted a row the other partition's next row reads.
- `lag(v, -1)`: reads the row AFTER the current one (PostgreSQL and Spark), so it closes with
  `lead(ts, 1)`, not with `ts`; closed with `ts`, a row went out before its next row arrived and went
  out again (a second row) when it did.
- `ORDER BY ts, v DESC` with rows tied in `ts`: the retire ranked the emitted rows by (ts, row key),
  not the window's (ts, v DESC, row key), and deleted the row the next row's `lag` reads."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.oracle import Model, multiset, rows_of
from tests.oracle_eowc import EOWC, T0, TABLE
from tests.oracle_watermark import WatermarkModel, micros

# name -> (sparkwave SQL, DuckDB SQL of (close value, the same columns))
MVS = {
    "r_mod": ("SELECT k, ts, lag(v) OVER (PARTITION BY k % 2 ORDER BY ts) AS p FROM ev",
              "SELECT ts, k, ts, lag(v) OVER (PARTITION BY k % 2 ORDER BY ts) FROM ev"),
    "r_neg": ("SELECT k, ts, lag(v, -1) OVER (PARTITION BY k ORDER BY ts) AS nx FROM ev",
              "SELECT lead(ts, 1) OVER (PARTITION BY k ORDER BY ts), k, ts, "
              "lead(v, 1) OVER (PARTITION BY k ORDER BY ts) FROM ev"),
    "r_order": ("SELECT k, ts, lag(v) OVER (PARTITION BY k ORDER BY ts, v DESC) AS p FROM ev",
                "SELECT ts, k, ts, lag(v) OVER (PARTITION BY k ORDER BY ts, v DESC) FROM ev"),
}


def _at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


EPOCHS = {
    "r_mod": [
        # k % 2 = 0: ts 0, 2, 20; k % 2 = 1: ts 1 (the state's last closed row is ts 2, an even one).
        # The watermark goes to 15.
        [(0, 1, _at(0)), (1, 2, _at(1)), (2, 3, _at(2)), (2, 4, _at(20))],
        [(0, 7, _at(16)), (1, 5, _at(21))],  # k % 2 = 1's next row reads the row at ts 1 (v = 2)
        [(2, 0, _at(40)), (0, 0, _at(41)), (1, 0, _at(42)), (3, 0, _at(43))],  # the watermark goes to 38
    ],
    "r_neg": [
        [(0, 1, _at(0)), (2, 4, _at(20))],  # k = 0 has no row after ts 0 yet; the watermark goes to 15
        [(0, 7, _at(16))],  # k = 0's next row (16 >= 15: not late)
        [(2, 0, _at(40))],
    ],
    "r_order": [
        # ties in ts, inserted in both orders (the row key breaks ties after v DESC): window order v 9, v 1
        [(0, 1, _at(0)), (0, 9, _at(0)), (2, 9, _at(0)), (2, 1, _at(0)), (1, 0, _at(20))],
        [(0, 4, _at(16)), (2, 4, _at(17))],  # their lag reads v = 1
        [(1, 0, _at(40))],
    ],
}


def _expected(model: WatermarkModel, name: str) -> list[tuple]:
    rows = model.model.db.execute(MVS[name][1]).fetchall()
    w = model.watermark
    return [r[1:] for r in rows if w is not None and r[0] is not None and micros(r[0]) < w]


@pytest.mark.parametrize("name", sorted(MVS))
def test_expression_partitions_negative_lag_and_secondary_orders_close_when_final(session, name):
    s = session
    s.sql(TABLE)  # WATERMARK FOR ts AS ts - 5 s
    m = Model()
    m.table("ev", "k INTEGER, v INTEGER, ts TIMESTAMP", ["k", "v", "ts"], [])
    model = WatermarkModel(m, "ev", 2, 5)
    s.sql(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name][0]}{EOWC}")
    for epoch, rows in enumerate(EPOCHS[name]):
        s.sql("INSERT INTO ev VALUES " + ", ".join(f"({k}, {v}, '{ts.isoformat(sep=' ')}')" for k, v, ts in rows))
        model.insert_epoch(rows)
        s.flush()
        got = multiset(rows_of(s.sql(f"SELECT * FROM {name}")))
        assert got == multiset(_expected(model, name)), f"{name} at epoch {epoch}"
    assert _expected(model, name), "no row was ever final"
