"""Watermarks, EMIT ON WINDOW CLOSE and state cleaning against the DuckDB oracle, after every
committed epoch: the table keeps only the rows at or above its watermark before their epoch
(`tests/oracle_watermark.py` models the dropping exactly, and the late rows are counted where the
user sees them); window aggregates equal DuckDB's over the kept rows; an EOWC MV is append-only and
equals the closed windows of the same MV without EOWC; MVs created mid-stream (snapshot and blocking
backfills) agree; big epochs on the executors (`big_epoch_rows`) agree; the aggregates' state and the
EOWC buffers hold exactly the windows still open (counted through the store)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pyarrow.parquet as pq
import pytest

from sparkwave.core.chunk import Op
from tests.oracle import Model, duckdb_sql, multiset, rows_of
from tests.oracle_watermark import WatermarkModel, hop_start, micros, tumble_start

T0 = datetime(2026, 1, 1)
TABLE = "CREATE TABLE ev (k int, v int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY"
TUMBLE = "SELECT window_start, count(*) AS n, sum(v) AS s, max(v) AS hi FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) " \
         "GROUP BY window_start"
HOP = "SELECT window_start, window_end, count(*) AS n, count(DISTINCT k) AS dk FROM HOP(ev, ts, INTERVAL '5' SECOND, " \
      "INTERVAL '10' SECOND) GROUP BY window_start, window_end"
BY_TS = "SELECT ts, count(*) AS n, min(v) AS lo FROM ev GROUP BY ts"
EOWC = " EMIT ON WINDOW CLOSE"
# Nexmark q5's shape: a join of two window aggregates, each read by the join from its state
COUNTS = "SELECT window_start, k, count(*) AS n FROM HOP(ev, ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) " \
         "GROUP BY window_start, k"
Q5 = f"SELECT c.window_start, c.k, c.n FROM ({COUNTS}) c JOIN (SELECT window_start AS ws, max(n) AS top FROM " \
     f"({COUNTS}) x GROUP BY window_start) m ON c.window_start = m.ws AND c.n >= m.top"
# name -> (SQL, whether EOWC, which closes a row: (column index, threshold of the watermark))
MVS = {
    "w_t": (TUMBLE, False, None),
    "w_t_e": (TUMBLE, True, (0, lambda w: tumble_start(w, 10))),
    "w_h": (HOP, False, None),
    "w_h_e": (HOP, True, (0, lambda w: hop_start(w, 10, 5))),
    "w_ts_e": (BY_TS, True, (0, lambda w: w)),
    "w_pass": ("SELECT k, v, ts FROM ev WHERE v > 2", False, None),
    "w_q5": (Q5, False, None),
}
LATER = {"l_t_e": (TUMBLE, True, (0, lambda w: tumble_start(w, 10))), "l_h": (HOP, False, None)}


def _rows(rng: random.Random, base: datetime) -> list[tuple]:
    """An epoch's inserts around `base`: some late, some NULL times."""
    out = []
    for _ in range(rng.randint(0, 6)):
        shift = timedelta(seconds=rng.randint(-14, 9), milliseconds=rng.randint(0, 2))
        ts = None if rng.random() < 0.08 else base + shift
        out.append((rng.randint(0, 5), rng.randint(0, 9), ts))
    return out


def _expected(model: WatermarkModel, sql: str, eowc: bool, close) -> list[tuple]:
    rows = model.model.db.execute(duckdb_sql(sql, model.model.db)).fetchall()
    if not eowc:
        return rows
    column, threshold = close
    if model.watermark is None:
        return []
    limit = threshold(model.watermark)
    return [r for r in rows if r[column] is not None and micros(r[column]) < limit]


def _state_rows(s, name: str) -> dict[str, int]:
    """Each state table of MV `name` with its live rows, read through the store."""
    rt = s.rt
    epoch = rt.catalog.committed_epoch()
    return {r.name: rt.snapshot(r, epoch).count() for r in rt.catalog.relations(internal=True)
            if r.kind == "state" and r.definition.get("owner") == name}


def _open_windows(model: WatermarkModel, sql: str, close) -> int:
    """Groups of the non-EOWC query not yet closed (or NULL): what a cleaned state still holds."""
    rows = model.model.db.execute(duckdb_sql(sql, model.model.db)).fetchall()
    column, threshold = close
    limit = None if model.watermark is None else threshold(model.watermark)
    return sum(1 for r in rows if r[column] is None or limit is None or micros(r[column]) >= limit)


def _check(s, model: WatermarkModel, mvs: dict) -> None:
    for name, (sql, eowc, close) in mvs.items():
        got = rows_of(s.sql(f"SELECT * FROM {name}"))
        assert multiset(got) == multiset(_expected(model, sql, eowc, close)), name
    assert s.rt.catalog.late_rows().get("ev", 0) == model.late
    wm = s.rt.catalog.watermark("ev", s.rt.catalog.committed_epoch())
    assert wm == model.watermark


@pytest.mark.parametrize(("seed", "big"), [(1, None), (2, 3), (3, None)])
def test_watermarks_eowc_and_cleaning_match_the_oracle(session, seed, big):
    s = session
    rng = random.Random(seed)
    if big is not None:
        s.sql(f"SET big_epoch_rows = {big}")  # epochs over `big` rows run the MVs on the executors
    s.sql(TABLE)
    m = Model()
    m.table("ev", "k INTEGER, v INTEGER, ts TIMESTAMP", ["k", "v", "ts"], [])
    model = WatermarkModel(m, "ev", 2, 5)
    # big epochs are Spark jobs per MV and epoch: fewer MVs and epochs there
    mvs = dict(MVS) if big is None else {k: MVS[k] for k in ("w_t", "w_h", "w_t_e", "w_h_e")}
    for name, (sql, eowc, _) in list(mvs.items()):
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}{EOWC if eowc else ''}")
    base = T0
    for epoch in range(12 if big is None else 7):
        base += timedelta(seconds=rng.randint(0, 8))
        rows = _rows(rng, base)
        if rows:
            s.sql("INSERT INTO ev VALUES " + ", ".join(
                f"({k}, {v}, {'NULL' if ts is None else repr(ts.isoformat(sep=' '))})" for k, v, ts in rows))
        model.insert_epoch(rows)
        s.flush()
        if epoch == 4:  # created mid-stream: a snapshot backfill over watermarked input
            for name, (sql, eowc, _) in LATER.items():
                s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}{EOWC if eowc else ''}")
            mvs.update(LATER)
        if epoch == 6 and big is None:
            s.sql(f"CREATE MATERIALIZED VIEW b_t_e WITH (backfill_strategy = 'blocking') AS {TUMBLE}{EOWC}")
            mvs["b_t_e"] = (TUMBLE, True, (0, lambda w: tumble_start(w, 10)))
        _check(s, model, mvs)
    assert model.late > 0, "the generated input had no late row"
    # The cleaned states hold exactly the windows still open.
    for name, close in [("w_t", (0, lambda w: tumble_start(w, 10))), ("w_h", (0, lambda w: hop_start(w, 10, 5)))]:
        sql = mvs[name][0]
        states = _state_rows(s, name)
        partials = [n for n in states if n.split(".")[1].startswith("a") and "v" not in n.split(".")[1]]
        assert [states[p] for p in partials] == [_open_windows(model, sql, close)], (name, states)
    if "w_q5" in mvs:  # the aggregates the join reads are cleaned by the join key's watermark too
        limit = hop_start(model.watermark, 10, 5)
        rt, epoch = s.rt, s.rt.catalog.committed_epoch()
        partials = [r for r in rt.catalog.relations(internal=True) if r.kind == "state"
                    and r.definition.get("owner") == "w_q5" and "v" not in r.name.split(".")[1]]
        assert partials
        for r in partials:
            frame = rt.snapshot(r, epoch)
            start = next(c for c in frame.columns if "window_start" in c or c == "ws")
            assert frame.filter(f"unix_micros(`{start}`) < {limit}").count() == 0, r.name
    for name in [n for n in ("w_t_e", "w_h_e", "l_t_e", "b_t_e") if n in mvs]:
        sql, _, close = mvs[name]
        buffers = {n: c for n, c in _state_rows(s, name).items() if n.split(".")[1].startswith("e")}
        assert list(buffers.values()) == [_open_windows(model, sql, close)], (name, buffers)
    describe = {r[0]: r[4] for r in s.sql("DESCRIBE ev").collect()}
    assert f"late rows dropped: {model.late}" in describe["watermark"]
    assert "append-only" in {r[0]: r[1] for r in s.sql("DESCRIBE w_t_e").collect()}["emit on window close"]


def test_eowc_output_is_append_only(session, tmp_path):
    """The EOWC MV's log holds inserts only, its schema says append-only, and an append-only sink takes
    it (the same MV without EOWC updates its windows: refused)."""
    s = session
    s.sql(TABLE)
    s.sql(f"CREATE MATERIALIZED VIEW e AS {TUMBLE}{EOWC}")
    s.sql(f"CREATE MATERIALIZED VIEW u AS {TUMBLE}")
    with pytest.raises(Exception, match="append-only sink"):
        s.sql(f"CREATE SINK su FROM u WITH (connector = 'deltalake', location = '{tmp_path / 'su'}', "
              "type = 'append-only')")
    s.sql(f"CREATE SINK se FROM e WITH (connector = 'deltalake', location = '{tmp_path / 'se'}', "
          "type = 'append-only')")
    for i in range(5):
        s.sql(f"INSERT INTO ev VALUES (1, {i}, '{(T0 + timedelta(seconds=7 * i)).isoformat(sep=' ')}'), "
              f"(2, {i}, '{(T0 + timedelta(seconds=7 * i + 3)).isoformat(sep=' ')}')")
        s.flush()
    rel = s.rt.catalog.relation("e")
    assert rel.schema.append_only
    epoch = s.rt.catalog.committed_epoch()
    ops = [op for f in s.rt.catalog.log_files("e", 0, epoch) for op in pq.read_table(f.path)["_op"].to_pylist()]
    assert ops and set(ops) == {int(Op.INSERT)}  # every window inserted once, never updated
    # the last watermark is 00:00:26: the windows of 00:00:00 and 00:00:10 are closed
    assert sorted(r[0].second for r in rows_of(s.sql("SELECT window_start FROM e"))) == [0, 10]


def test_refusals_say_what_to_write(session):
    s = session
    with pytest.raises(Exception, match="APPEND ONLY"):
        s.sql("CREATE TABLE t (k int PRIMARY KEY, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
    with pytest.raises(Exception, match="col - INTERVAL"):
        s.sql("CREATE TABLE t (ts timestamp, WATERMARK FOR ts AS ts * 2) APPEND ONLY")
    s.sql(TABLE)
    s.sql("CREATE TABLE plain (k int, ts timestamp) APPEND ONLY")
    with pytest.raises(Exception, match="WATERMARK FOR"):
        s.sql("CREATE MATERIALIZED VIEW x AS SELECT window_start, count(*) AS n FROM TUMBLE(plain, ts, "
              "INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE")
    with pytest.raises(Exception, match="GROUP BY"):  # (a SELECT of ts is taken: tests/integration/test_eowc_over.py)
        s.sql("CREATE MATERIALIZED VIEW x AS SELECT k, count(*) AS n FROM ev GROUP BY k EMIT ON WINDOW CLOSE")
