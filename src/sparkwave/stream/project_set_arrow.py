"""A project set's small change in Arrow on the driver, without Spark: the calls' arguments are
scalar expressions compiled for Arrow as a projection's are (`stream/arrow_chain.py`), then each
input row is repeated once per element of its longest series. `unnest(e1, ..., en)` (an array
constructor's elements) gives n rows; an integer `generate_series(a, b, s)` gives (b - a) / s + 1 rows,
none where the step leads away from the end or an argument is NULL. Where that is not exact, None:
Spark computes it (`ProjectSet._local`): a timestamp series (interval steps), a step of 0 or a series
past the bound (each the row's error, which Spark raises), an argument Arrow does not compile."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.core.zset import W
from sparkwave.stream import arrow_chain
from sparkwave.stream.operator import WEIGHT

if TYPE_CHECKING:
    from sparkwave.stream.project_set import ProjectSet

_INTEGERS = ("smallint", "int", "bigint")


def explode(ps: ProjectSet, child: pa.Table, bound: int) -> pa.Table | None:
    """`child` (`| input columns | _w |`) through `ps` in Arrow, or None where it is not computed here."""
    if any(fn == "generate_series" and ps.type_of(n) not in _INTEGERS for n, fn, _ in ps.sets):
        return None
    child = child.select([*ps.input.names, W]).cast(ps.input.arrow_schema(WEIGHT))
    args = _arguments(ps, child)
    if args is None:
        return None
    rows = child.num_rows
    lengths = []
    for (_, fn, call), values in zip(ps.sets, args, strict=True):
        n = np.full(rows, len(call), np.int64) if fn == "unnest" else _series_lengths(values, bound)
        if n is None:
            return None
        lengths.append(n)
    counts = np.maximum.reduce([np.zeros(rows, np.int64), *lengths])
    parent = np.repeat(np.arange(rows), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if rows else np.zeros(0, np.int64)
    ordinal = np.arange(len(parent), dtype=np.int64) - np.repeat(starts, counts)
    out = {n: child[n].take(pa.array(parent)) for n in ps.passed}
    for (name, fn, _), values, n in zip(ps.sets, args, lengths, strict=True):
        out[name] = _elements(fn, values, parent, ordinal, n, ps.arrow_schema().field(name))
    out[ps.ordinal] = pa.array(ordinal, pa.int64())
    out[W] = child[W].take(pa.array(parent))
    return pa.table({n: out[n] for n in [*ps.names, W]}).cast(ps.arrow_schema(WEIGHT))


def _arguments(ps: ProjectSet, child: pa.Table) -> list[list[np.ndarray | pa.Array]] | None:
    """Each call's arguments evaluated over `child`'s rows (row-aligned), or None if they do not compile."""
    exprs, columns = [], []
    for i, (name, _, call) in enumerate(ps.sets):
        for j, a in enumerate(call):
            exprs.append((f"_a{i}_{j}", a))
            columns.append((f"_a{i}_{j}", ps.type_of(name)))
    types = arrow_chain.input_types(child.schema)
    types.pop(W, None)
    step = arrow_chain.compiled(ps.arrow_steps, tuple(types.items()), lambda: arrow_chain.compile_step(
        exprs, None, columns, types, [], filter_first=True))
    if step is None:
        return None
    values = arrow_chain.run_step(step, child, root=False)
    return [[values[f"_a{i}_{j}"].combine_chunks() for j in range(len(call))] for i, (_, _, call) in enumerate(ps.sets)]


def _series_lengths(values: list, bound: int) -> np.ndarray | None:
    """Each row's number of elements of `generate_series(a, b, s)` (0 where an argument is NULL or
    the step leads away from the end); None if a row's is an error (a step of 0, past `bound`)."""
    a, b, s = ([None if v is None else int(v) for v in col.to_pylist()] for col in values)
    out = np.zeros(len(a), np.int64)
    for r, (x, y, step) in enumerate(zip(a, b, s, strict=True)):
        if x is None or y is None or step is None:
            continue
        if step == 0:
            return None  # PostgreSQL's error, the row's: Spark raises it
        if (y - x) * step >= 0:
            n = (y - x) // step + 1
            if n > bound:
                return None
            out[r] = n
    return out


def _elements(fn: str, values: list, parent: np.ndarray, ordinal: np.ndarray, n: np.ndarray,
              field: pa.Field) -> pa.Array:
    """The call's element at each output row (`parent` row, `ordinal` position); NULL past its own length."""
    inside = ordinal < n[parent]
    if fn == "unnest":  # the elements as one column, element j of row r at j * rows + r
        rows = len(values[0])
        stacked = pa.concat_arrays([v.cast(field.type) for v in values])
        index = np.where(inside, ordinal * rows + parent, 0)
        return pc.if_else(pa.array(inside), stacked.take(pa.array(index)), pa.nulls(len(parent), field.type)) \
            if len(parent) else pa.array([], field.type)
    a, _, s = (np.array([0 if v is None else int(v) for v in col.to_pylist()], dtype=object) for col in values)
    got = [int(a[p] + k * s[p]) if ok else None for p, k, ok in zip(parent, ordinal, inside, strict=True)]
    return pa.array(got, field.type)
