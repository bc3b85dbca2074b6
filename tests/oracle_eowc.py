"""The oracle of EMIT ON WINDOW CLOSE beyond GROUP BY (window functions ordered by the watermarked
column, a group top-n, a SELECT): DuckDB evaluates each query with, first, the value that closes a
row (the ORDER BY value of the farthest row its frames read ahead, the window's start, the time);
the EOWC MV holds the rows whose value is below the watermark (`tests/oracle_watermark.py`)."""

from __future__ import annotations

from datetime import datetime

from tests.oracle_watermark import WatermarkModel, micros, tumble_start

T0 = datetime(2026, 1, 1)
TABLE = "CREATE TABLE ev (k int, v int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY"
EOWC = " EMIT ON WINDOW CLOSE"
W_K = "PARTITION BY k ORDER BY ts"
# name -> (sparkwave SQL, DuckDB SQL of (close value, the same columns)), a row final once its close < threshold
MVS = {
    "o_lead": (f"SELECT k, v, ts, lead(v, 2) OVER ({W_K}) AS l2, lag(v) OVER ({W_K}) AS p FROM ev",
               f"SELECT lead(ts, 2) OVER ({W_K}), k, v, ts, lead(v, 2) OVER ({W_K}), lag(v) OVER ({W_K}) FROM ev"),
    "o_rn": (f"SELECT k, ts, row_number() OVER ({W_K}) AS rn, sum(v) OVER ({W_K} ROWS BETWEEN 1 PRECEDING AND "
             "1 FOLLOWING) AS s3 FROM ev",
             f"SELECT lead(ts, 1) OVER ({W_K}), k, ts, row_number() OVER ({W_K}), sum(v) OVER ({W_K} ROWS BETWEEN "
             "1 PRECEDING AND 1 FOLLOWING) FROM ev"),
    "o_all": ("SELECT ts, v, max(v) OVER (ORDER BY ts ROWS 2 PRECEDING) AS m FROM ev",
              "SELECT ts, ts, v, max(v) OVER (ORDER BY ts ROWS 2 PRECEDING) FROM ev"),
    "o_sel": ("SELECT k, ts FROM ev WHERE v > 2", "SELECT ts, k, ts FROM ev WHERE v > 2"),
    "o_top": ("SELECT window_start, k, v FROM (SELECT *, row_number() OVER (PARTITION BY window_start ORDER BY v "
              "DESC, ts) AS rn FROM TUMBLE(ev, ts, INTERVAL '10' SECOND)) WHERE rn <= 2",
              "SELECT ws, ws, k, v FROM (SELECT *, row_number() OVER (PARTITION BY ws ORDER BY v DESC, ts) AS rn "
              "FROM (SELECT *, time_bucket(INTERVAL '10 seconds', ts) AS ws FROM ev)) WHERE rn <= 2"),
    "o_excl": (f"SELECT k, ts, sum(v) OVER ({W_K} ROWS 2 PRECEDING EXCLUDE CURRENT ROW) AS s2 FROM ev",
               f"SELECT ts, k, ts, sum(v) OVER ({W_K} ROWS 2 PRECEDING EXCLUDE CURRENT ROW) FROM ev"),
    "o_range": (f"SELECT k, ts, count(*) OVER ({W_K} RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND INTERVAL '3' "
                "SECOND FOLLOWING) AS c FROM ev",
                f"SELECT ts + INTERVAL 3 SECOND, k, ts, count(*) OVER ({W_K} RANGE BETWEEN INTERVAL 2 SECOND PRECEDING "
                "AND INTERVAL 3 SECOND FOLLOWING) FROM ev"),
    "o_join": ("SELECT a.k, a.ts, b.v FROM ev a JOIN ev b ON a.ts = b.ts",  # each row meets itself: times differ
               "SELECT a.ts, a.k, a.ts, b.v FROM ev a JOIN ev b ON a.ts = b.ts"),
}
THRESHOLD = {"o_top": lambda w: tumble_start(w, 10)}


def expected(model: WatermarkModel, name: str) -> list[tuple]:
    """The rows of the query without EOWC that are final: the EOWC MV's."""
    rows = model.model.db.execute(MVS[name][1]).fetchall()
    limit = None if model.watermark is None else THRESHOLD.get(name, lambda w: w)(model.watermark)
    return [r[1:] for r in rows if limit is not None and r[0] is not None and micros(r[0]) < limit]


