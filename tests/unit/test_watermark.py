"""Watermarks without Spark: the WATERMARK and EMIT ON WINDOW CLOSE clauses as parsed and checked,
the table step's dropping of late rows and its watermark per split (min over splits, monotonic),
how TUMBLE/HOP window bounds derive from a watermark (against brute force), the catalog's record
committed with the epoch (as of an epoch, per split, late-row counts), and the Arrow evaluation of
EMIT ON WINDOW CLOSE and of an aggregate's state cleaning over an in-memory state store, against the
closed windows computed from scratch."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow as pa
import pytest

from sparkwave.connectors.datagen import ROW_ID_SPLIT_SHIFT, Datagen
from sparkwave.core.catalog import Catalog
from sparkwave.core.catalog.watermarks import prune_watermarks
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.frontend.statements import parse
from sparkwave.frontend.watermark_ddl import declared
from sparkwave.stream.aggregate import Agg, Aggregate
from sparkwave.stream.eowc import Eowc
from sparkwave.stream.operator import EpochIO
from sparkwave.stream.plan import from_json, state_purpose
from sparkwave.stream.values import Values
from sparkwave.stream.watermark import Declared, Derivation, Term
from sparkwave.stream.watermark_clean import Cleaning
from sparkwave.stream.watermark_filter import admit
from tests.chunks import MemoryStates, W

SEC = 1_000_000
T0 = datetime(2026, 1, 1)
T0_US = (T0 - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def _schema(append_only: bool = True, ts: str = "timestamp") -> Schema:
    return Schema((Column("k", SqlType("int")), Column("ts", SqlType(ts)), Column("_row_id", SqlType("bigint"), True)),
                  ("_row_id",), append_only)


# --- the clauses --------------------------------------------------------------------------------
@pytest.mark.parametrize(("sql", "delay"), [
    ("CREATE TABLE t (k int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY", 5 * SEC),
    ("CREATE TABLE t (WATERMARK FOR ts AS ts - INTERVAL '1 minute', k int, ts timestamp) APPEND ONLY", 60 * SEC),
    ("CREATE TABLE t (k int, ts timestamp, watermark for ts as ts) APPEND ONLY", 0),
    ("CREATE TABLE t (k int, ts timestamp, WATERMARK FOR ts AS (ts - INTERVAL '250' MILLISECOND)) APPEND ONLY",
     250_000),
])
def test_the_watermark_clause_is_taken_and_its_delay_read(sql, delay):
    (stmt,) = parse(sql)
    assert [c.name for c in stmt.ast.this.expressions] == ["k", "ts"]  # the clause is not a column
    assert declared(stmt, _schema()) == Declared("ts", delay, stmt.watermark.sql)


def test_a_source_takes_the_clause_too():
    (stmt,) = parse("CREATE SOURCE s (k int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) "
                    "WITH (connector = 'datagen')")
    assert stmt.relation_kind == "source" and stmt.watermark.column == "ts"


@pytest.mark.parametrize(("sql", "schema", "words"), [
    ("CREATE TABLE t (k int, ts timestamp, WATERMARK FOR ts AS ts * 2) APPEND ONLY", _schema(), "col - INTERVAL"),
    ("CREATE TABLE t (k int, ts timestamp, WATERMARK FOR x AS x) APPEND ONLY", _schema(), "no such column"),
    ("CREATE TABLE t (k int, ts timestamp, WATERMARK FOR ts AS ts)", _schema(append_only=False), "APPEND ONLY"),
    ("CREATE TABLE t (k int, ts varchar, WATERMARK FOR ts AS ts) APPEND ONLY", _schema(ts="varchar"), "timestamp"),
])
def test_a_watermark_sparkwave_does_not_keep_is_refused_saying_what_to_write(sql, schema, words):
    (stmt,) = parse(sql)
    with pytest.raises(SqlError, match=words):
        declared(stmt, schema)


def test_emit_on_window_close_is_taken_off_the_query():
    (stmt,) = parse("CREATE MATERIALIZED VIEW m AS SELECT window_start, count(*) AS n FROM TUMBLE(t, ts, "
                    "INTERVAL '1' MINUTE) GROUP BY window_start EMIT ON WINDOW CLOSE")
    assert stmt.emit_on_window_close and "EMIT" not in stmt.query
    (plain,) = parse("CREATE MATERIALIZED VIEW m AS SELECT k FROM t")
    assert not plain.emit_on_window_close
    with pytest.raises(SqlError, match="EMIT ON WINDOW CLOSE"):
        parse("CREATE MATERIALIZED VIEW m AS SELECT k FROM t EMIT ON UPDATE")


# --- late rows and the watermark per split -------------------------------------------------------
def _rows(pairs: list[tuple[int, int | None]]) -> pa.Table:
    """(split, seconds after T0 or None) as datagen's rows: `_seq` carries the split."""
    return pa.table({"_seq": pa.array([(s << ROW_ID_SPLIT_SHIFT) + i for i, (s, _) in enumerate(pairs)], pa.int64()),
                     "k": pa.array(range(len(pairs)), pa.int32()),
                     "ts": pa.array([None if t is None else T0 + timedelta(seconds=t) for _, t in pairs],
                                    pa.timestamp("us"))})


def test_rows_below_the_watermark_before_the_epoch_are_dropped_and_the_least_split_holds_it_back():
    conn = Datagen("t", _schema(), {"connector": "datagen", "datagen.split.num": "2"})
    decl = Declared("ts", 5 * SEC)
    first = admit(decl, _rows([(0, 20), (0, 30), (1, 12), (1, None)]), conn, None, {})
    assert first.late == 0 and first.rows.num_rows == 4
    assert first.splits == {"0": T0_US + 25 * SEC, "1": T0_US + 7 * SEC}
    assert first.watermark == T0_US + 7 * SEC  # the least split's
    # a row exactly at the watermark is on time; one a microsecond below it is late; NULL never is
    at, below = 7, 6.999999
    rows = _rows([(1, 14), (0, 26)])
    rows = pa.concat_tables([rows, _rows([(1, None)]), pa.table({
        "_seq": pa.array([(1 << ROW_ID_SPLIT_SHIFT) + 9, 9], pa.int64()), "k": pa.array([8, 9], pa.int32()),
        "ts": pa.array([T0 + timedelta(seconds=at), T0 + timedelta(seconds=below)], pa.timestamp("us"))})])
    second = admit(decl, rows, conn, first.watermark, {**first.splits})
    assert second.late == 1 and second.rows.num_rows == 4
    assert second.splits == {"1": T0_US + 9 * SEC}  # split 0's 26 s - 5 s is below its 25 s: it stays
    assert second.watermark == T0_US + 9 * SEC
    # never back: an epoch whose rows are all older leaves it where it was
    third = admit(decl, _rows([(0, 10), (1, 10)]), conn, second.watermark, {**first.splits, **second.splits})
    assert third.watermark == second.watermark and third.splits == {}


def test_rows_by_insert_are_one_split():
    out = admit(Declared("ts", 0), _rows([(3, 5), (7, 9)]), None, None, {})
    assert out.splits == {"dml": T0_US + 9 * SEC} and out.watermark == T0_US + 9 * SEC


# --- windows of a watermark ----------------------------------------------------------------------
@pytest.mark.parametrize(("size", "slide"), [(10, None), (10, 2), (10, 5), (9, 3), (7, 7)])
def test_a_window_bound_of_a_watermark_is_the_least_window_of_any_later_row(size, slide):
    rnd = random.Random(size * 100 + (slide or 0))
    kind = "tumble" if slide is None else "hop"
    start = Term(f"{kind}_start", "t", size * SEC, (slide or 0) * SEC)  # type: ignore[arg-type]
    end = Term(f"{kind}_end", "t", size * SEC, (slide or 0) * SEC)  # type: ignore[arg-type]
    for _ in range(200):
        w = rnd.randint(-100 * SEC, 100 * SEC)
        later = range(w, w + 3 * size * SEC, SEC // 4)
        step = (slide or size) * SEC
        starts = [s for t in later for s in range((t // step) * step - size * SEC, t + 1, step)
                  if s <= t < s + size * SEC]
        assert start.value(w) == min(starts), (w, size, slide)
        assert end.value(w) == min(starts) + size * SEC


def test_a_join_key_derives_the_least_of_both_sides():
    d = Derivation((Term("column", "a"), Term("tumble_start", "b", 10 * SEC)))
    assert d.value({"a": 25 * SEC, "b": 17 * SEC}) == 10 * SEC
    assert d.value({"a": 25 * SEC}) is None
    assert Derivation.from_json(d.to_json()) == d


# --- the catalog ---------------------------------------------------------------------------------
def test_the_watermark_is_committed_with_its_epoch_and_read_as_of_an_epoch(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    try:
        for epoch, marks, late in [(1, [("t", "0", 10), ("t", "", 10)], {"t": 2}), (2, [], {"t": 0}),
                                   (3, [("t", "1", 30), ("t", "0", 40), ("t", "", 30)], {"t": 1})]:
            catalog.persist_plan(epoch, epoch - 1, {}, [])
            catalog.commit_epoch(epoch, [], {}, 0, 0.0, watermarks=marks, late=late,
                                 judged=[("t", "0", 10 * epoch, 10 * epoch + 10, epoch)] if epoch > 1 else [])
        assert [catalog.watermark("t", e) for e in (0, 1, 2, 3)] == [None, 10, 10, 30]
        assert catalog.split_watermarks("t", 2) == {"0": 10}
        assert catalog.split_watermarks("t", 3) == {"0": 40, "1": 30}
        assert catalog.late_rows() == {"t": 3}
        assert catalog.judged_ranges("t") == [("0", 20, 30, 2), ("0", 30, 40, 3)]
        with catalog.transaction() as db:  # history pruning keeps what epochs from the cut on read
            prune_watermarks(db, 3)
        assert catalog.watermark("t", 3) == 30 and catalog.split_watermarks("t", 3) == {"0": 40, "1": 30}
        assert catalog._one("SELECT count(*) FROM watermarks")[0] == 3  # epoch 1's were superseded by 3
        with catalog.transaction() as db:
            catalog.remove_relation(db, "t")
        assert catalog.watermark("t", 3) is None and catalog.late_rows() == {} and catalog.judged_ranges("t") == []
    finally:
        catalog.close()


# --- EMIT ON WINDOW CLOSE and the aggregate's cleaning, in Arrow ----------------------------------
COLS = [("c_ws", "timestamp"), ("c_k", "int"), ("c_v", "int")]


@dataclass(kw_only=True)
class _Leaf(Values):
    """A leaf whose change in an epoch is whatever the test sets."""

    change: pa.Table | None = None

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        return self.change


def _tree() -> tuple[_Leaf, Aggregate, Eowc]:
    cleaning = Cleaning("c_ws", Derivation((Term("tumble_start", "t", 10 * SEC),)))
    leaf = _Leaf(1, list(COLS), [], rows=[])
    agg = Aggregate(2, [("c_ws", "timestamp"), ("c_n", "bigint"), ("c_s", "bigint")], ["c_ws"], input=leaf,
                    group=["c_ws"], aggs=[Agg("count_star", None, "c_n", "bigint"), Agg("sum", "c_v", "c_s", "bigint")],
                    append_only=True, cleaning=cleaning)
    return leaf, agg, Eowc(3, list(agg.columns), ["c_ws"], input=agg, cleaning=cleaning)


def test_eowc_emits_each_closed_window_once_and_the_cleaned_states_hold_only_open_ones():
    leaf, agg, eowc = _tree()
    again = from_json(eowc.to_json())
    assert isinstance(again, Eowc) and again.cleaning == eowc.cleaning and again.input.cleaning == agg.cleaning
    assert "not yet closed" in state_purpose("e3", ("c_ws",))
    states = MemoryStates({**agg.state_tables(), **eowc.state_tables()})
    rnd = random.Random(48)
    seen: list[tuple] = []  # every input row so far (seconds after T0, v)
    emitted: Counter = Counter()
    w = None
    for _ in range(30):
        rows = [(rnd.randint(-12, 8) + len(seen), rnd.randint(0, 9)) for _ in range(rnd.randint(0, 4))]
        rows = [r for r in rows if w is None or T0_US + r[0] * SEC >= w]  # the table step drops late rows
        seen += rows
        if rows:
            w = max([w or -(2**62)] + [T0_US + (t - 5) * SEC for t, _ in rows])
        ws = [T0 + timedelta(seconds=(t // 10) * 10) for t, _ in rows]
        leaf.change = pa.table({"c_ws": pa.array(ws, pa.timestamp("us")), "c_k": pa.array([1] * len(rows), pa.int32()),
                                "c_v": pa.array([v for _, v in rows], pa.int32()),
                                W: pa.array([1] * len(rows), pa.int64())}) if rows else None
        out = eowc.delta(EpochIO(None, {}, states, watermarks={"t": w}))  # type: ignore[arg-type]
        states.commit()
        if out is not None:
            assert set(out[W].to_pylist()) == {1}, "EOWC retracted a row"
            emitted.update(tuple(r.values()) for r in out.drop_columns([W]).to_pylist())
        limit = None if w is None else (w // (10 * SEC)) * 10 * SEC
        windows: dict = {}
        for t, v in seen:
            start = (t // 10) * 10
            n, s = windows.get(start, (0, 0))
            windows[start] = (n + 1, s + v)
        closed = {(T0 + timedelta(seconds=s), n, v) for s, (n, v) in windows.items()
                  if limit is not None and T0_US + s * SEC < limit}
        assert emitted == Counter(closed)  # each closed window once, none open
        open_starts = {T0 + timedelta(seconds=s) for s in windows} - {c[0] for c in closed}
        assert {r[0] for r in states.contents(eowc.buffer)} == open_starts
        assert {r[0] for r in states.contents(agg.partials_state)} == open_starts
