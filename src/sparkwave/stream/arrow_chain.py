"""A small epoch's stateless steps evaluated in Arrow on the driver: plan once, run many.

A scan (its window, expressions and predicate, the log rows' ops as weights) and a projection (its
predicate and expressions, over a scan's rows or over a join's or aggregate's Arrow Z-set), and at
the MV's root the key's `_vnode`, compute in Spark's semantics (`arrow_eval`, `core/xxhash64.py`)
without a Spark plan: before, each MV's step analysed and optimised a local frame over Py4J every
epoch (30-60 ms), however few rows changed. Each operator compiles its expressions once, for the
input types it meets (`compiled`: kept on the operator, which lives as long as its `Dataflow`),
into a `Step`, or None where any expression is refused: that operator's chain then runs on Spark
as before. A value met at run time that the evaluator cannot compute exactly (`Inexact`) sends
that epoch's chain to Spark too. `ENABLED` turns the whole path off (tests run both ways)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.core.chunk import VNODES, Op
from sparkwave.core.xxhash64 import vnodes
from sparkwave.core.zset import W
from sparkwave.stream.arrow_eval import Compiled, Inexact, Refused, Rows, arrow_type, compile_expr, sql_type_of
from sparkwave.stream.expressions import Expr

log = logging.getLogger(__name__)
_UNEXPECTED = (ValueError, ArithmeticError, TypeError, OverflowError, pa.ArrowException)

__all__ = ["ENABLED", "Step", "compile_step", "evaluate", "scan_input", "window_rows"]

ENABLED = os.environ.get("SPARKWAVE_ARROW_EVAL", "1") != "0"
_NOT_COMPILED = object()


@dataclass(frozen=True)
class Step:
    """One operator compiled: its predicate (over its input's columns when `filter_first`, else over
    its own output's) and each output column's evaluation, cast to the column's declared type."""

    outputs: list[tuple[str, Callable[[Rows], pa.Array], pa.DataType]]
    predicate: Callable[[Rows], pa.Array] | None
    filter_first: bool
    key: list[str]


def _matches(c: Compiled, declared: str) -> bool:
    """Whether Spark's type of the expression is the declared column type (a NULL literal and a
    tinyint, which Spark stores as smallint, take the declared type)."""
    return c.type == declared or c.type == "null" or (c.type == "tinyint" and declared == "smallint")


def compile_step(exprs: list[tuple[str, Expr]], predicate: Expr | None, columns: list[tuple[str, str]],
                 types: dict[str, str], key: list[str], *, filter_first: bool) -> Step | None:
    """The operator's expressions over input columns of `types`, or None if any is refused."""
    try:
        declared, by_name = dict(columns), dict(exprs)
        outputs = []
        for name, _ in columns:  # Spark's collect takes them in this order
            if name not in by_name:
                raise Refused(f"column {name} has no expression")
            c = compile_expr(by_name[name].tree, types)
            if not _matches(c, declared[name]):
                raise Refused(f"{name}: Arrow's type {c.type}, declared {declared[name]}")
            outputs.append((name, c.fn, arrow_type(declared[name])))
        where = None
        if predicate is not None:
            p = compile_expr(predicate.tree, types if filter_first else {n: declared[n] for n, _ in exprs})
            if p.type not in ("boolean", "null"):
                raise Refused(f"predicate of type {p.type}")
            where = p.fn
    except Refused:
        return None
    except _UNEXPECTED:  # the evaluator's own gap (an impossible literal, a kernel Arrow lacks): Spark decides
        log.warning("an expression could not be compiled into Arrow; it runs on Spark", exc_info=True)
        return None
    return Step(outputs, where, filter_first, key)


def _filtered(rows: Rows, table: pa.Table, predicate: Callable[[Rows], pa.Array]) -> tuple[Rows, pa.Table]:
    keep = pc.fill_null(predicate(rows), False)
    table = table.filter(keep)
    return Rows({n: table[n].combine_chunks() for n in table.column_names}, table.num_rows), table


def run_step(step: Step, table: pa.Table, *, root: bool) -> pa.Table:
    """`step` over `table` (its input columns and `_w`): `| columns | _w |` (and `_vnode` at the root)."""
    rows = Rows({n: table[n].combine_chunks() for n in table.column_names}, table.num_rows)
    if step.predicate is not None and step.filter_first:
        rows, table = _filtered(rows, table, step.predicate)
    out = {name: _sized(fn(rows), rows.n).cast(t) for name, fn, t in step.outputs}
    out[W] = table[W].combine_chunks()
    result = pa.table(out)
    if step.predicate is not None and not step.filter_first:
        _, result = _filtered(Rows(out, rows.n), result, step.predicate)
    if root:
        if not step.key:  # Spark's xxhash64 of no columns is an error: Spark's path says so, as before
            raise Inexact("the root's vnode of an empty key")
        n = result.num_rows
        result = result.append_column("_vnode", vnodes([result[k].combine_chunks() for k in step.key], n, VNODES))
    return result


def _sized(values: pa.Array, n: int) -> pa.Array:
    assert len(values) == n, f"BUG: an Arrow evaluation gave {len(values)} values for {n} rows"
    return values


def scan_input(log: pa.Table, weight: bool = True) -> pa.Table:
    """An upstream's log rows with each row's weight (+1 for +I and +U, -1 for -D and -U)."""
    ops = log["_op"]
    plus = pc.is_in(ops, pa.array([int(Op.INSERT), int(Op.UPDATE_INSERT)], ops.type))
    return log.append_column(W, pc.if_else(plus, pa.scalar(1, pa.int64()), pa.scalar(-1, pa.int64())))


def window_rows(rows: pa.Table, time: str, size: int, slide: int | None) -> pa.Table:
    """`rows` with `window_start` and `window_end` as Spark's `window(time, size[, slide])` gives
    them: start = t - ((t mod slide)) (floor, so before 1970 too), one row per window containing t
    for a hop, no row for a NULL time."""
    t_type = rows.schema.field(time).type
    rows = rows.filter(pc.is_valid(rows[time]))
    t = np.asarray(rows[time].combine_chunks().view(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    size_us, slide_us = size * 1_000_000, (slide or size) * 1_000_000
    last = t - np.mod(t, slide_us)
    if slide is None or slide == size:
        return _with_window(rows, last, size_us, t_type)
    parts = []
    for i in range(-(-size_us // slide_us)):
        start = last - i * slide_us
        inside = (start <= t) & (t < start + size_us)
        parts.append(_with_window(rows.filter(pa.array(inside)), start[inside], size_us, t_type))
    return pa.concat_tables(parts)


def _with_window(rows: pa.Table, start: np.ndarray, size_us: int, t_type: pa.DataType) -> pa.Table:
    return rows.append_column("window_start", pa.array(start, pa.int64()).view(t_type)) \
        .append_column("window_end", pa.array(start + size_us, pa.int64()).view(t_type))


def input_types(schema: pa.Schema) -> dict[str, str]:
    """The Spark type of each column the evaluator reads (a bytea column: none, so refused)."""
    out = {}
    for f in schema:
        t = sql_type_of(f.type)
        if t is not None:
            out[f.name] = t
    return out


def compiled(cache: dict, key: object, make: Callable[[], Step | None]) -> Step | None:
    """The operator's `Step` for inputs of `key` (its types), compiled on first use."""
    got = cache.get(key, _NOT_COMPILED)
    if got is _NOT_COMPILED:
        got = make()
        cache[key] = got
    return got


def evaluate(fn: Callable[[], pa.Table | None]) -> pa.Table | None:
    """`fn()`, or None where a value met at run time is not computed exactly (`Inexact`)."""
    if not ENABLED:
        return None
    try:
        return fn()
    except Inexact:
        return None
    except _UNEXPECTED:  # a value the evaluator did not expect: Spark computes it (or says what is wrong)
        log.warning("a small epoch's chain could not be evaluated in Arrow; it runs on Spark", exc_info=True)
        return None
