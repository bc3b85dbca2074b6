"""Where the planner puts EMIT ON WINDOW CLOSE beyond GROUP BY (`frontend/plan/watermarks.py`,
`frontend/plan/eowc_over.py`), without Spark: over a SELECT of the watermarked column, above a group
top-n's filter (its window state cleaned by the window's watermark), above window functions ordered
by the watermarked column with the close call reading as far ahead as the farthest frame; the stored
plan round-trips; what stays refused says what to write."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparkwave.core.errors import SparkwaveError
from sparkwave.frontend.plan.static_catalog import StaticCatalog
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.statements import parse
from sparkwave.stream.eowc import Eowc
from sparkwave.stream.over import OverWindow
from sparkwave.stream.over_retire import Retire, retired
from sparkwave.stream.plan import from_json
from sparkwave.stream.project import Project
from sparkwave.stream.watermark import Derivation, Term

TABLE = "CREATE TABLE t (tm timestamp, foo int, bar int, WATERMARK FOR tm AS tm - INTERVAL '5' MINUTE) APPEND ONLY"


def _plan(query: str):
    catalog = StaticCatalog(StaticTypes())
    catalog.run(TABLE + "; CREATE TABLE s (tm timestamp, x int, WATERMARK FOR tm AS tm - INTERVAL '1' MINUTE) "
                "APPEND ONLY; CREATE TABLE plain (tm timestamp, x int) APPEND ONLY")
    (stmt,) = parse(f"CREATE MATERIALIZED VIEW m AS {query} EMIT ON WINDOW CLOSE")
    plan = catalog.plan(stmt)
    assert from_json(plan.root.to_json()).to_json() == plan.root.to_json()  # stored as planned
    return plan


def _eowc(plan) -> Eowc:
    (e,) = [op for op in plan.root.walk() if isinstance(op, Eowc)]
    return e


def test_a_select_is_buffered_by_its_watermarked_column():
    plan = _plan("SELECT tm, foo FROM t WHERE foo > 1")
    e = _eowc(plan)
    assert plan.root.input is e and plan.schema.append_only
    assert e.cleaning.column.endswith("_tm") and e.buffer_key[0] == e.cleaning.column


def test_an_inner_join_on_watermarked_keys_is_buffered_by_the_key():
    e = _eowc(_plan("SELECT t.tm, foo, x FROM t JOIN s ON t.tm = s.tm"))
    assert {t.relation for t in e.cleaning.watermark.terms} == {"t", "s"}  # the least of both sides'


def test_a_group_top_n_is_buffered_above_its_filter_and_its_window_state_cleaned():
    plan = _plan("SELECT window_start, foo FROM (SELECT *, row_number() OVER (PARTITION BY window_start ORDER BY "
                 "foo) AS rn FROM TUMBLE(t, tm, INTERVAL '1' HOUR)) WHERE rn <= 1")
    e = _eowc(plan)
    assert plan.root.input is e and plan.root.predicate is None
    assert isinstance(e.input, Project) and e.input.predicate is not None  # rn <= 1 first: it buffers the top-n
    (over,) = [op for op in plan.root.walk() if isinstance(op, OverWindow)]
    assert over.cleaning is not None and over.cleaning.column in over.partition
    assert over.cleaning.watermark == e.cleaning.watermark
    assert e.cleaning.watermark.terms[0].kind == "tumble_start"


@pytest.mark.parametrize(("calls", "close"), [
    ("row_number() OVER (PARTITION BY bar ORDER BY tm) AS rn, lag(foo, 2) OVER (PARTITION BY bar ORDER BY tm) AS l",
     "`c1_tm`"),
    ("lead(foo) OVER (PARTITION BY bar ORDER BY tm) AS l", "LEAD(`c1_tm`, 1)"),
    ("sum(foo) OVER (PARTITION BY bar ORDER BY tm ROWS BETWEEN 1 PRECEDING AND 2 FOLLOWING) AS s", "LEAD(`c1_tm`, 2)"),
    ("lead(foo, 1) OVER (PARTITION BY bar ORDER BY tm) AS a, lead(foo, 3) OVER (PARTITION BY bar ORDER BY tm) AS b",
     "greatest(LEAD(`c1_tm`, 1)"),
    ("sum(foo) OVER (PARTITION BY bar ORDER BY tm RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND INTERVAL '2' "
     "MINUTE FOLLOWING) AS s", "(`c1_tm` + INTERVAL '2' MINUTE)"),
])
def test_window_functions_close_when_their_farthest_row_ahead_is_below_the_watermark(calls, close):
    plan = _plan(f"SELECT tm, foo, {calls} FROM t")
    e = _eowc(plan)
    assert isinstance(e.input, OverWindow)
    name, sql = e.input.calls[-1]
    assert name == e.cleaning.column and e.input.type_of(name) == "timestamp"
    assert str(sql).startswith(close) or f"ELSE {close}" in str(sql), str(sql)
    assert e.cleaning.watermark.terms[0].kind == "column"


@pytest.mark.parametrize(("query", "words"), [
    ("SELECT tm, sum(foo) OVER (PARTITION BY bar ORDER BY tm ROWS BETWEEN 1 PRECEDING AND UNBOUNDED FOLLOWING) "
     "AS s FROM t", "closes only with the partition"),
    ("SELECT tm, sum(foo) OVER (PARTITION BY bar ORDER BY tm RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) "
     "AS s FROM t", "closes only with the partition"),
    ("SELECT tm, cume_dist() OVER (PARTITION BY bar ORDER BY tm) AS c FROM t", "whole partition"),
    ("SELECT tm, lag(foo) OVER (PARTITION BY bar ORDER BY foo) AS l FROM t", "ORDER BY a column with a watermark"),
    ("SELECT tm, lag(foo) OVER (PARTITION BY bar ORDER BY tm DESC) AS l FROM t", "ascending"),
    ("SELECT tm, lag(foo) OVER (PARTITION BY bar ORDER BY tm NULLS FIRST) AS l FROM t", "NULLS LAST"),
    ("SELECT tm, x FROM plain", "no column of the query carries a watermark"),
    ("SELECT bar, count(*) AS n FROM t GROUP BY bar", "no GROUP BY column carries a watermark"),
])
def test_refusals_say_what_to_write(query, words):
    with pytest.raises(SparkwaveError, match=words) as e:
        _plan(query)
    assert "write " in str(e.value)


@pytest.mark.parametrize(("calls", "behind"), [
    ("lag(foo, 2) OVER (PARTITION BY bar ORDER BY tm) AS a, lead(foo) OVER (PARTITION BY bar ORDER BY tm) AS b", 2),
    ("max(foo) OVER (PARTITION BY bar ORDER BY tm ROWS BETWEEN 3 PRECEDING AND 1 FOLLOWING) AS m", 3),
    ("row_number() OVER (PARTITION BY bar ORDER BY tm) AS rn", None),  # reads back to the partition's start
    ("sum(foo) OVER (PARTITION BY bar ORDER BY tm) AS s", None),  # the default frame: a running sum
    # partitioned unlike the state (one partition): the rows a call reads back are not the state's last ones
    ("lag(foo) OVER (PARTITION BY bar ORDER BY tm) AS a, lag(foo) OVER (ORDER BY tm) AS b", None),
])
def test_an_ordered_window_retires_what_no_row_still_to_be_emitted_reads(calls, behind):
    e = _eowc(_plan(f"SELECT tm, {calls} FROM t"))
    assert isinstance(e.input, OverWindow)
    retire = e.input.retire
    assert (retire.behind if retire else None) == behind
    if retire:
        assert retire.close == e.cleaning.column and retire.watermark == e.cleaning.watermark


def test_retired_keeps_the_last_emitted_rows_of_each_partition():
    retire = Retire("c", "t", 1, Derivation((Term("column", "x"),)))
    rows = pa.table({"p": [1, 1, 1, 1, 2, 2], "t": [1, 2, 3, 4, 1, 2], "k": [0, 1, 2, 3, 4, 5],
                     "c": [2, 3, 4, None, 2, 9]})
    gone = retired(rows, retire, ["p"], ["k"], 4)  # closed: p=1 at t 1, 2; p=2 at t 1
    assert sorted(gone["k"].to_pylist()) == [0]  # p=1 keeps t=2 (the next row reads it), p=2 keeps its one


@pytest.mark.parametrize(("frame", "spark"), [
    ("ROWS 2 PRECEDING EXCLUDE CURRENT ROW", "BETWEEN 2 PRECEDING AND 1 PRECEDING"),
    ("ROWS BETWEEN CURRENT ROW AND 3 FOLLOWING EXCLUDE CURRENT ROW", "BETWEEN 1 FOLLOWING AND 3 FOLLOWING"),
    ("ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING EXCLUDE NO OTHERS", "BETWEEN 1 PRECEDING AND 1 FOLLOWING"),
    ("ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING EXCLUDE CURRENT ROW", None),
    ("ROWS 2 PRECEDING EXCLUDE TIES", None),
])
def test_exclude_current_row_is_a_frame_that_stops_short_of_the_row(frame, spark):
    """RisingWave's eowc_over_window mv1 writes EXCLUDE CURRENT ROW; Spark has no EXCLUDE."""
    query = f"SELECT tm, sum(foo) OVER (PARTITION BY bar ORDER BY tm {frame}) AS s FROM t"
    if spark is None:
        with pytest.raises(SparkwaveError, match="EXCLUDE .*write ROWS BETWEEN"):
            _plan(query)
        return
    (over,) = [op for op in _plan(query).root.walk() if isinstance(op, OverWindow)]
    assert spark in str(over.calls[0][1]).upper(), over.calls[0][1]


@pytest.mark.parametrize(("calls", "close", "behind"), [
    # review-b: lag(x, -n) reads n rows AHEAD (PostgreSQL, Spark): it closes with lead(tm, n)
    ("lag(foo, -1) OVER (PARTITION BY bar ORDER BY tm) AS a", "LEAD(`c1_tm`, 1)", 0),
    ("lead(foo, -2) OVER (PARTITION BY bar ORDER BY tm) AS a", "`c1_tm`", 2),  # reads 2 rows back
    # an expression's partitions are not the state's (one partition): nothing retires
    ("lag(foo) OVER (PARTITION BY bar % 2 ORDER BY tm) AS a", "`c1_tm`", None),
])
def test_negative_offsets_and_expression_partitions_close_and_retire_as_they_read(calls, close, behind):
    e = _eowc(_plan(f"SELECT tm, {calls} FROM t"))
    assert isinstance(e.input, OverWindow)
    assert str(e.input.calls[-1][1]).startswith(close), e.input.calls[-1][1]
    assert (e.input.retire.behind if e.input.retire else None) == behind


def test_a_window_ordered_by_more_than_its_time_retires_nothing():
    """review-b: the retire ranks emitted rows by (time, row key); ORDER BY tm, foo DESC ranks ties otherwise."""
    e = _eowc(_plan("SELECT tm, lag(foo) OVER (PARTITION BY bar ORDER BY tm, foo DESC) AS a FROM t"))
    assert isinstance(e.input, OverWindow) and e.input.retire is None
