"""EMIT ON WINDOW CLOSE beyond GROUP BY, against the DuckDB oracle after every committed epoch:
window functions ordered by the watermarked column (a row is emitted once its frame's farthest row
ahead is below the watermark), a group top-n partitioned by a window, a plain SELECT, a join on the
watermarked column. Each EOWC MV equals the rows of the same query without EOWC that are final, is
append-only (its log holds inserts only), and one created mid-stream (snapshot backfill) agrees, in
small epochs (Arrow) and big ones (Spark frames). The states are bounded: the top-n's window state
and the SELECT's buffer hold only rows not yet closed; an ordered window keeps of its emitted rows
only those its rows still to be emitted read."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pyarrow.parquet as pq
import pytest

from sparkwave.core.chunk import Op
from tests.oracle import Model, multiset, rows_of
from tests.oracle_eowc import EOWC, MVS, T0, TABLE, W_K, expected
from tests.oracle_watermark import WatermarkModel, tumble_start


def _rows(rng: random.Random, base: datetime, seq: list[int]) -> list[tuple]:
    """An epoch's inserts around `base`, every time distinct (ties would be ordered by the hidden
    row id, which the oracle does not see): some late, some NULL."""
    out = []
    for _ in range(rng.randint(0, 6)):
        seq[0] += 1
        ts = None if rng.random() < 0.08 else base + timedelta(seconds=rng.randint(-14, 9), microseconds=seq[0])
        out.append((rng.randint(0, 2), rng.randint(0, 9), ts))
    return out


@pytest.mark.parametrize(("seed", "big"), [(1, None), (2, None), (3, 3)])
def test_eowc_beyond_group_by_matches_the_oracle(session, seed, big):
    s = session
    rng = random.Random(seed)
    if big is not None:
        s.sql(f"SET big_epoch_rows = {big}")  # epochs over `big` rows run the MVs as Spark frames
    s.sql(TABLE)
    m = Model()
    m.table("ev", "k INTEGER, v INTEGER, ts TIMESTAMP", ["k", "v", "ts"], [])
    model = WatermarkModel(m, "ev", 2, 5)
    made = ["o_lead", "o_rn", "o_all", "o_sel", "o_top", "o_join", "o_excl", "o_range"]
    for name in made:
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name][0]}{EOWC}")
    base, seq, seen = T0, [0], {name: multiset([]) for name in MVS}
    for epoch in range(10):
        base += timedelta(seconds=rng.randint(0, 8))
        rows = _rows(rng, base, seq)
        if rows:
            s.sql("INSERT INTO ev VALUES " + ", ".join(
                f"({k}, {v}, {'NULL' if ts is None else repr(ts.isoformat(sep=' '))})" for k, v, ts in rows))
        model.insert_epoch(rows)
        s.flush()
        if epoch == 4:  # created mid-stream: the snapshot build emits the closed rows, buffers the rest
            s.sql(f"CREATE MATERIALIZED VIEW later_rn AS {MVS['o_rn'][0]}{EOWC}")
        for name in made + (["later_rn"] if epoch >= 4 else []):
            got = multiset(rows_of(s.sql(f"SELECT * FROM {name}")))
            final = expected(model, "o_rn" if name == "later_rn" else name)
            assert got == multiset(final), f"{name} at epoch {epoch}"
            assert not seen.get(name, multiset([])) - got, f"{name} lost a row it had emitted at epoch {epoch}"
            seen[name] = got
    # one more epoch touches every partition: each then keeps only what its rows still to be emitted read
    rows = [(k, 5, base + timedelta(seconds=30, microseconds=k)) for k in range(3)]
    s.sql("INSERT INTO ev VALUES " + ", ".join(f"({k}, {v}, '{ts.isoformat(sep=' ')}')" for k, v, ts in rows))
    model.insert_epoch(rows)
    s.flush()
    for name in made:
        assert multiset(rows_of(s.sql(f"SELECT * FROM {name}"))) == multiset(expected(model, name)), name
    _emitted_rows_leave_the_window_state(s, model)
    assert model.late > 0 and model.watermark is not None
    assert any(seen[name] for name in made), "no row was ever emitted"
    epoch = s.rt.catalog.committed_epoch()
    for name in made:  # append-only: every row inserted once, never updated or deleted
        assert s.rt.catalog.relation(name).schema.append_only, name
        ops = {op for f in s.rt.catalog.log_files(name, 0, epoch) for op in pq.read_table(f.path)["_op"].to_pylist()}
        assert ops <= {int(Op.INSERT)}, name
    _states_hold_only_open_rows(s, model)


def _emitted_rows_leave_the_window_state(s, model: WatermarkModel) -> None:
    """Of each partition's emitted rows an ordered window keeps only the last `behind` (what `lag(v)`
    or `ROWS 2 PRECEDING` of a row still to be emitted reads); row_number reads back to the start:
    it keeps every row."""
    rt, epoch = s.rt, s.rt.catalog.committed_epoch()
    states = {r.definition.get("owner"): rt.snapshot(r, epoch).count() for r in rt.catalog.relations(internal=True)
              if r.kind == "state" and ".w" in r.name and r.definition.get("owner") in ("o_lead", "o_all", "o_rn")}
    db, w = model.model.db, model.watermark
    total = db.execute("SELECT count(*) FROM ev").fetchone()[0]
    for name, partition, close, behind in [("o_lead", "k", f"lead(ts, 2) OVER ({W_K})", 1), ("o_all", "0", "ts", 2)]:
        kept = db.execute(f"SELECT sum(n - e + least(e, {behind})) FROM (SELECT count(*) AS n, count(*) FILTER "
                          f"(WHERE epoch_us(c) < {w}) AS e FROM (SELECT {partition} AS p, {close} AS c FROM ev) "
                          "GROUP BY p)").fetchone()[0]
        assert states[name] == kept < total, (name, states[name], kept, total)
    assert states["o_rn"] == total


def _states_hold_only_open_rows(s, model: WatermarkModel) -> None:
    """The top-n's window state keeps only the rows of windows not closed (a NULL time is in no
    window); the SELECT's buffer only its rows not closed (NULL times never close)."""
    rt = s.rt
    epoch = rt.catalog.committed_epoch()
    states = {r.name: rt.snapshot(r, epoch) for r in rt.catalog.relations(internal=True)
              if r.kind == "state" and r.definition.get("owner") in ("o_top", "o_sel")}
    top = next(f for n, f in states.items() if n.startswith("o_top.w"))
    start = next(c for c in top.columns if "window_start" in c)
    open_windows = model.model.db.execute(
        "SELECT count(*) FROM ev WHERE epoch_us(time_bucket(INTERVAL '10 seconds', ts)) >= "  # no window: no row
        f"{tumble_start(model.watermark, 10)}").fetchone()[0]
    assert top.count() == open_windows
    assert top.filter(f"unix_micros(`{start}`) < {tumble_start(model.watermark, 10)}").count() == 0
    top_buffer = next(f for n, f in states.items() if n.startswith("o_top.e"))  # the top 2 of each open window
    open_top = model.model.db.execute(
        f"SELECT count(*) FROM ({MVS['o_top'][1]}) x WHERE epoch_us(ws) >= {tumble_start(model.watermark, 10)}"
    ).fetchone()[0]
    assert top_buffer.count() == open_top
    buffer = next(f for n, f in states.items() if n.startswith("o_sel.e"))
    open_rows = model.model.db.execute(
        f"SELECT count(*) FROM ev WHERE v > 2 AND (ts IS NULL OR epoch_us(ts) >= {model.watermark})").fetchone()[0]
    assert buffer.count() == open_rows


def test_eowc_refusals_say_what_to_write(session):
    s = session
    s.sql(TABLE)
    for sql, words in [
        ("SELECT ts, sum(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND UNBOUNDED FOLLOWING) "
         "AS s FROM ev", "closes only with the partition"),
        ("SELECT ts, ntile(2) OVER (PARTITION BY k ORDER BY ts) AS n FROM ev", "whole partition"),
        ("SELECT ts, lag(v) OVER (PARTITION BY k ORDER BY v) AS p FROM ev", "ORDER BY a column with a watermark"),
        ("SELECT ts, lag(v) OVER (PARTITION BY k ORDER BY ts DESC) AS p FROM ev", "ascending"),
        ("SELECT k, count(*) AS n FROM ev GROUP BY k", "no GROUP BY column carries a watermark"),
    ]:
        with pytest.raises(Exception, match=words):
            s.sql(f"CREATE MATERIALIZED VIEW x AS {sql}{EOWC}")
    s.sql("CREATE TABLE plain (k int, ts timestamp) APPEND ONLY")
    with pytest.raises(Exception, match="no column of the query carries a watermark"):
        s.sql(f"CREATE MATERIALIZED VIEW x AS SELECT k, ts FROM plain{EOWC}")
