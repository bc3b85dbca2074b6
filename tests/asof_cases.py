"""The ASOF join oracle's tables and MVs, shared by its integration test (`tests/integration/
test_asof_join.py`) and the Spark-free check of the expectation against DuckDB's ASOF JOIN
(`tests/unit/test_asof_oracle.py`). The expectation is RisingWave's semantics as a ranking in plain
SQL: of the right rows that satisfy the ON clause, the closest in time, a tie to the smallest right key."""

from __future__ import annotations

TABLES = [
    ("CREATE TABLE q (id int, k int, ts timestamp, x int, PRIMARY KEY (id))",
     "q", "id INTEGER, k INTEGER, ts TIMESTAMP, x INTEGER", ["id", "k", "ts", "x"], ["id"]),
    ("CREATE TABLE r (id int, k int, ts timestamp, v int, PRIMARY KEY (id))",
     "r", "id INTEGER, k INTEGER, ts TIMESTAMP, v INTEGER", ["id", "k", "ts", "v"], ["id"]),
]

# name -> (the MV's SQL, its inner or LEFT join, the inequality as DuckDB's ON, the closest first, the output)
MVS = {
    "a_ge": ("SELECT q.id, q.k, q.ts, r.id AS rid, r.v FROM q ASOF JOIN r ON q.k = r.k AND q.ts >= r.ts",
             "", "q.ts >= r.ts", "r.ts DESC", "q.id, q.k, q.ts, r.id AS rid, r.v"),
    "a_left_lt": ("SELECT q.id, q.x, r.id AS rid, r.ts AS rts FROM q ASOF LEFT JOIN r ON q.k = r.k AND q.ts < r.ts",
                  "LEFT", "q.ts < r.ts", "r.ts ASC", "q.id, q.x, r.id AS rid, r.ts AS rts"),
    # integer times, spelled right side first: q.x <= r.v
    "a_left_int": ("SELECT q.id, r.id AS rid, r.v FROM q ASOF LEFT JOIN r ON r.k = q.k AND r.v >= q.x",
                   "LEFT", "q.x <= r.v", "r.v ASC", "q.id, r.id AS rid, r.v"),
    "a_gt_agg": ("SELECT rid, count(*) AS n, max(x) AS mx FROM (SELECT q.x, r.id AS rid FROM q ASOF JOIN r "
                 "ON q.k = r.k AND q.ts > r.ts) j GROUP BY rid",
                 "", "q.ts > r.ts", "r.ts DESC", None),
}


def ranked(name: str) -> str:
    """Each left row with its candidates, ranked: the closest time first, then the smallest right key."""
    _, side, ineq, closest, _ = MVS[name]
    return (f"SELECT q.*, r.id AS rid, r.ts AS rts, r.v, row_number() OVER (PARTITION BY q.id ORDER BY {closest}, "
            f"r.id ASC NULLS LAST) AS _rn FROM q {side} JOIN r ON q.k = r.k AND {ineq}")


def oracle(name: str) -> str:
    """The MV's rows in plain SQL: each left row's first candidate."""
    out = MVS[name][4]
    if out is None:  # a_gt_agg
        return f"SELECT rid, count(*) AS n, max(x) AS mx FROM ({ranked(name)}) j WHERE _rn = 1 GROUP BY rid"
    cols = out.replace("q.", "j.").replace("r.id AS rid", "j.rid").replace("r.ts AS rts", "j.rts") \
        .replace("r.v", "j.v")
    return f"SELECT {cols} FROM ({ranked(name)}) j WHERE _rn = 1"


