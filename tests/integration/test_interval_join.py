"""Interval joins (`frontend/plan/intervals.py`, `stream/join.py: Interval`): exact at every epoch
(DuckDB), and each side's join state cleaned below the other side's watermark shifted by the
interval, per small epoch, per big epoch and in a backfill (the same state rows all three ways), as
EXPLAIN says. Two append-only tables with `WATERMARK FOR t AS t - INTERVAL '5' SECOND`; time moves
forward a few seconds an epoch."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import sparkwave
from tests.oracle import Model, multiset, rows_of, values_sql

T0 = datetime(2026, 1, 1)
DDL = [
    ("CREATE TABLE a (id int, k int, t timestamp, WATERMARK FOR t AS t - INTERVAL '5' SECOND) APPEND ONLY",
     "a", "id INTEGER, k INTEGER, t TIMESTAMP", ["id", "k", "t"]),
    ("CREATE TABLE b (id int, k int, t timestamp, WATERMARK FOR t AS t - INTERVAL '5' SECOND) APPEND ONLY",
     "b", "id INTEGER, k INTEGER, t TIMESTAMP", ["id", "k", "t"]),
]
MV = ("SELECT a.id AS aid, b.id AS bid, a.t AS at, b.t AS bt FROM a JOIN b ON a.k = b.k "
      "AND a.t BETWEEN b.t - INTERVAL '10' SECOND AND b.t + INTERVAL '20' SECOND")
# RisingWave's e2e shape: the range in an outer join's ON decides which rows are NULL-padded
LEFT = ("SELECT a.id AS aid, b.id AS bid, a.t AS at, b.t AS bt FROM a LEFT JOIN b ON a.k = b.k "
        "AND a.t BETWEEN b.t AND b.t + INTERVAL '10' SECOND")
FULL = ("SELECT a.id AS aid, b.id AS bid FROM a FULL JOIN b ON a.k = b.k AND a.t > b.t - INTERVAL '14' SECOND "
        "AND b.t >= a.t")
MVS = {"ij": MV, "ij_left": LEFT, "ij_full": FULL}


def _epoch(i: int) -> list[tuple]:
    """Epoch i's rows: times around 30 s x i, a few keys, both sides."""
    rows_a = [(100 * i + j, j % 3, T0 + timedelta(seconds=30 * i + 7 * j)) for j in range(4)]
    rows_b = [(100 * i + j, (j + 1) % 3, T0 + timedelta(seconds=30 * i + 5 * j + 3)) for j in range(4)]
    return [("insert", "a", rows_a), ("insert", "b", rows_b)]


def _state_rows(s: sparkwave.Session, mv: str) -> dict[str, list[tuple]]:
    out = {}
    for rel in s.catalog.relations(internal=True):
        if rel.name.startswith(f"{mv}.j"):
            out[rel.name.split(".", 1)[1]] = sorted(tuple(r.values()) for r in
                                                    s.rt.local_snapshot(rel, s.committed_epoch).to_pylist())
    return out


def _run(spark, wh, *, big: bool) -> tuple[dict[str, list[tuple]], dict[str, list[tuple]]]:
    model = Model()
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        if big:
            s.sql("SET big_epoch_rows = 0")
        for ddl, name, duck, cols in DDL:
            s.sql(ddl)
            model.table(name, duck, cols, [])
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            model.view(name, sql)
        for i in range(6):
            for st in _epoch(i):
                s.sql(f"INSERT INTO {st[1]} VALUES {values_sql(st[2])}")
            model.apply_epoch(_epoch(i))
            epoch = s.flush()
            for name in MVS:
                got, want = multiset(rows_of(s.table(name, as_of=epoch))), multiset(model.rows(name))
                assert got == want, f"{name} at epoch {i}: extra {got - want}, missing {want - got}"
        stepped = {f"{name}.{k}": v for name in MVS for k, v in _state_rows(s, name).items()}
        built = {}
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name}2 WITH (backfill_strategy = 'blocking') AS {sql}")
            assert multiset(rows_of(s.table(f"{name}2"))) == multiset(model.rows(name)), name
            built |= {f"{name}.{k}": v for k, v in _state_rows(s, f"{name}2").items()}
        text = "\n".join(r[0] for r in s.sql("EXPLAIN ij").collect())
        assert "below a's watermark (of a.t) - 20 seconds are deleted" in text, text
        assert "below b's watermark (of b.t) - 10 seconds are deleted" in text, text
        return stepped, built


@pytest.mark.parametrize("big", [False, True], ids=["driver", "executors"])
def test_an_interval_join_is_exact_and_its_state_is_cleaned_below_the_watermarks(spark, tmp_path, big):
    stepped, built = _run(spark, tmp_path / "wh", big=big)
    last = T0 + timedelta(seconds=30 * 5)  # the last epoch's times: watermarks near last + 15 s - 5 s
    for side, rows in stepped.items():
        assert rows, f"state {side} emptied"
        # an outer join cleans only its preserved side: a padded side's row decides its matches' padding
        if side.startswith("ij_full.") or (side.startswith("ij_left.") and side.endswith("r")):
            continue
        oldest = min(r[[type(v) is datetime for v in r].index(True)] for r in rows)
        assert oldest >= last - timedelta(seconds=30), f"state {side} keeps rows from {oldest}: not cleaned"
    # the rows but their vnode (the first value: an epoch's Arrow step writes 0, a build the row's own)
    assert {k: sorted(r[1:] for r in v) for k, v in built.items()} == \
        {k: sorted(r[1:] for r in v) for k, v in stepped.items()}, "a backfill keeps other state rows than the epochs"
