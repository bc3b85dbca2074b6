"""Spark-free tests of the temporal filter's Arrow evaluation (`TemporalFilter.delta`) over an
in-memory state store: per epoch its accumulated output equals the filter evaluated from scratch on
the accumulated input at that epoch's NOW(), rows leave (or appear) in epochs with no input, and its
state holds exactly the rows whose condition may still change. Also its JSON and the planner's
reading of NOW() and INTERVALs."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
import sqlglot

from sparkwave.core.errors import SqlError
from sparkwave.frontend.plan.temporal import interval_micros, temporal_parts
from sparkwave.frontend.statements import parse
from sparkwave.stream.operator import EpochIO
from sparkwave.stream.plan import from_json, state_purpose, state_schemas
from sparkwave.stream.temporal_filter import Bound, TemporalFilter
from sparkwave.stream.values import Values
from tests.chunks import MemoryStates, Row, W, add, as_counter

COLS = [("c1_id", "int"), ("c1_v", "int"), ("c1_ts", "timestamptz")]
SCHEMA = pa.schema([pa.field("c1_id", pa.int32()), pa.field("c1_v", pa.int32()),
                    pa.field("c1_ts", pa.timestamp("us", tz="UTC")), pa.field(W, pa.int64())])
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SEC = 1_000_000
T0_US = int((T0 - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * SEC


@dataclass(kw_only=True)
class _Leaf(Values):
    """A leaf whose change in an epoch is whatever the test sets (None: no change)."""

    change: pa.Table | None = None

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        return self.change


def _node(lower: Bound | None, upper: Bound | None) -> TemporalFilter:
    return TemporalFilter(2, list(COLS), ["c1_id"], input=_Leaf(1, list(COLS), ["c1_id"], rows=[]), column="c1_ts",
                          lower=lower, upper=upper)


def _at(seconds: int | None) -> datetime | None:
    return None if seconds is None else T0 + timedelta(seconds=seconds)


def _rows(rows: list[tuple[int, int, int | None, int]]) -> pa.Table:
    return pa.Table.from_pylist([{"c1_id": i, "c1_v": v, "c1_ts": _at(ts), W: w} for i, v, ts, w in rows],
                                schema=SCHEMA)


def _passes(node: TemporalFilter, ts: datetime | None, now: int) -> bool:
    if ts is None:
        return False
    us = int((ts - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * SEC
    ok = True
    for b in (node.lower, node.upper):
        if b is not None:
            bound = now + b.offset
            ok = ok and {">": us > bound, ">=": us >= bound, "<": us < bound, "<=": us <= bound}[b.op]
    return ok


class Run:
    """The filter fed epoch by epoch; every epoch's accumulated output is checked against the from-scratch
    filter of the accumulated input at that epoch's NOW()."""

    def __init__(self, node: TemporalFilter) -> None:
        self.node, self.states = node, MemoryStates(state_schemas(node))
        self.input: Counter[Row] = Counter()
        self.out: Counter[Row] = Counter()
        self.prev_now: int | None = None

    def epoch(self, now_s: int, change: pa.Table | None = None) -> Counter[Row]:
        now = T0_US + now_s * SEC
        assert isinstance(self.node.input, _Leaf)
        self.node.input.change = change
        io = EpochIO(rt=None, inputs={}, state=self.states, now=now, prev_now=self.prev_now)  # type: ignore[arg-type]
        d = self.node.delta(io)
        self.states.commit()
        self.prev_now = now
        got = as_counter(d) if d is not None else Counter()
        self.input = add(self.input, as_counter(change) if change is not None else Counter())
        self.out = add(self.out, got)
        want = Counter({r: w for r, w in self.input.items() if _passes(self.node, r[2], now)})
        assert self.out == want, f"at NOW() = T0 + {now_s}s: extra {self.out - want}, missing {want - self.out}"
        kept = self.states.contents(self.node.state)
        assert all(self._may_change(r[2], now) for r in kept), f"state keeps rows that can no longer change: {kept}"
        return got

    def _may_change(self, ts: datetime | None, now: int) -> bool:
        node = self.node
        if node.lower is not None:
            return _passes(TemporalFilter(9, list(COLS), ["c1_id"], input=node.input, column="c1_ts",
                                          lower=node.lower), ts, now)
        return ts is not None and not _passes(node, ts, now)


def test_rows_leave_as_now_passes_with_no_input() -> None:
    run = Run(_node(Bound(">", -10 * SEC), None))  # ts > NOW() - 10 s
    assert run.epoch(0, _rows([(1, 1, -5, 1), (2, 2, 3, 1), (3, 3, -20, 1)])) == Counter({(1, 1, _at(-5)): 1,
                                                                                          (2, 2, _at(3)): 1})
    assert run.epoch(6) == Counter({(1, 1, _at(-5)): -1})  # no input: row 1 left
    assert run.states.contents("t2") == Counter({(2, 2, _at(3)): 1})  # and its state went with it
    assert run.epoch(20) == Counter({(2, 2, _at(3)): -1})
    assert run.states.contents("t2") == Counter()


def test_a_delay_releases_rows_once_now_passes_them() -> None:
    run = Run(_node(None, Bound("<=", 0)))  # ts <= NOW()
    assert run.epoch(0, _rows([(1, 1, -1, 1), (2, 2, 5, 1), (3, 3, None, 1)])) == Counter({(1, 1, _at(-1)): 1})
    assert run.epoch(4) == Counter()
    assert run.epoch(5) == Counter({(2, 2, _at(5)): 1})
    assert run.states.contents("t2") == Counter()  # released rows leave the state; a NULL time never enters
    assert run.epoch(6, _rows([(2, 2, 5, -1)])) == Counter({(2, 2, _at(5)): -1})  # a delete of a released row


def test_a_row_deleted_in_the_epoch_it_would_leave_or_appear_is_retracted_once() -> None:
    run = Run(_node(Bound(">=", -10 * SEC), Bound("<", 0)))
    run.epoch(0, _rows([(1, 1, -5, 1), (2, 2, 3, 1)]))
    assert run.epoch(8, _rows([(1, 1, -5, -1), (2, 2, 3, -1)])) == Counter({(1, 1, _at(-5)): -1})


@pytest.mark.parametrize("lower, upper", [(Bound(">", -30 * SEC), None), (Bound(">=", -30 * SEC), Bound("<=", 0)),
                                          (None, Bound("<", 5 * SEC)), (Bound(">", 0), Bound("<=", 20 * SEC))])
def test_random_inserts_updates_deletes_equal_the_filter_from_scratch(lower: Bound | None,
                                                                     upper: Bound | None) -> None:
    rng = random.Random(48)
    for _ in range(20):
        run = Run(_node(lower, upper))
        rows: dict[int, tuple[int, int | None]] = {}
        now = 0
        for _ in range(12):
            now += rng.choice([0, 1, 3, 7, 15])
            change = []
            for _ in range(rng.randint(0, 4)):
                i = rng.randint(0, 8)
                if i in rows:  # update (a delete then an insert) or delete
                    v, ts = rows.pop(i)
                    change.append((i, v, ts, -1))
                    if rng.random() < 0.5:
                        continue
                new = (rng.randint(0, 9), rng.choice([None, now + rng.randint(-40, 30)]))
                rows[i] = new
                change.append((i, *new, 1))
            run.epoch(now, _rows(change) if change else None)


def test_json_round_trip_and_state_words() -> None:
    node = _node(Bound(">", -3600 * SEC), Bound("<=", 0))
    again = from_json(node.to_json())
    assert isinstance(again, TemporalFilter) and again.to_json() == node.to_json()
    assert again.lower == Bound(">", -3600 * SEC) and again.upper == Bound("<=", 0)
    assert state_schemas(node)["t2"].key == ("c1_ts", "c1_id")
    assert "temporal filter 2" in state_purpose("t2", ("c1_ts", "c1_id"))
    assert node.describe() == "> NOW() - INTERVAL '1 hour' AND <= NOW()"


@pytest.mark.parametrize("text, micros", [("INTERVAL '1 hour'", 3600 * SEC), ("INTERVAL '5' SECOND", 5 * SEC),
                                          ("INTERVAL '1 day 2 hours'", 26 * 3600 * SEC),
                                          ("INTERVAL '1.5 minutes'", 90 * SEC), ("INTERVAL '1 month'", None),
                                          ("INTERVAL '1 fortnight'", None)])
def test_interval_lengths(text: str, micros: int | None) -> None:
    assert interval_micros(sqlglot.parse_one(text, read="postgres")) == micros


@pytest.mark.parametrize("cond, op, offset", [("ts > NOW() - INTERVAL '1 hour'", ">", -3600 * SEC),
                                              ("NOW() >= ts", "<=", 0),
                                              ("CURRENT_TIMESTAMP + INTERVAL '2' SECOND < ts", ">", 2 * SEC),
                                              ("ts + INTERVAL '1 hour' > NOW()", ">", -3600 * SEC),
                                              ("NOW() >= (ts - INTERVAL '5' SECOND)", "<=", 5 * SEC),
                                              ("ts = NOW()", None, None), ("ts + 1 > NOW()", None, None)])
def test_temporal_conditions(cond: str, op: str | None, offset: int | None) -> None:
    parts = temporal_parts(sqlglot.parse_one(cond, read="postgres"))
    assert (parts[1:] if parts else (None, None)) == (op, offset)


@pytest.mark.parametrize("sql, words", [
    ("CREATE SOURCE s (k int, p TIMESTAMPTZ AS PROCTIME()) WITH (connector = 'datagen')",
     "a source has no column AS PROCTIME()"),
    ("CREATE TABLE t (k int, p TIMESTAMP AS PROCTIME())", "AS PROCTIME() is a timestamptz"),
    ("CREATE TABLE t (k int, p TIMESTAMPTZ AS PROCTIME)", "written col TIMESTAMPTZ AS PROCTIME()"),
    ("SELECT k, PROCTIME() FROM t", "PROCTIME() is supported only in a temporal join"),
    ("SELECT s.k FROM s JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k", "not supported in a query"),
    ("CREATE MATERIALIZED VIEW m AS SELECT s.k FROM s JOIN t FOR SYSTEM_TIME AS OF NOW() ON s.k = t.k",
     "except as a process-time temporal join"),
    ("CREATE MATERIALIZED VIEW m AS SELECT k FROM t FOR SYSTEM_TIME AS OF PROCTIME()",
     "except as a process-time temporal join"),
])
def test_proctime_outside_a_temporal_join_is_refused_saying_what_to_write(sql: str, words: str) -> None:
    with pytest.raises(SqlError, match=re.escape(words)):
        parse(sql)
