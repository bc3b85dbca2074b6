"""The ASOF join: for each left row, the one right row of its join key whose time is the closest
that satisfies one inequality (RisingWave's `a ASOF [LEFT] JOIN b ON a.k = b.k AND a.ts >= b.ts`).

Semantics (RisingWave's, `src/stream/src/executor/asof_join.rs`): `l.ts >= r.ts` takes the right
row with the greatest `r.ts <= l.ts` (`>`: strictly less), `l.ts <= r.ts` the one with the least
`r.ts >= l.ts` (`<`: strictly greater). Of right rows with that same time, the one with the
smallest row key (the right input's key columns in order, ascending, NULL last) wins, as
RisingWave keeps the smallest pk. An inner ASOF join drops a left row without a match; ASOF LEFT
pads it with NULLs. A row with a NULL join key or time matches nothing (the planner gates a
preserved left row's first join key to NULL when its time is NULL, and filters such right rows).

It keeps both sides' rows as a `Join` does (`j<id>l`, `j<id>r`, by join key then row key), and its
change is computed per join key the epoch touches: `A(L', R') - A(L, R)` over those keys' rows before
and after the epoch (`Join.apply`'s path for outer joins), so a right insert or delete re-decides
the match of every left row of its key and only the rows whose match changed survive netting.
Per epoch `A` is a sort and a forward (or backward) fill in Arrow and numpy; in Spark (a big epoch, a
snapshot build) it is the inequality join ranked per left row by the closeness of the right row's
time, then its key, the first kept. A backfill may split only the left side into chunks: a left
row's match depends on every right row of its key (`linear_in`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sparkwave.core.zset_frames import q
from sparkwave.stream.join import Join, Side

Inequality = Literal["<", "<=", ">", ">="]
INEQUALITIES: tuple[Inequality, ...] = ("<", "<=", ">", ">=")
FLIPPED: dict[Inequality, Inequality] = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(kw_only=True)
class AsofJoin(Join):
    """`left_time <inequality> right_time`, besides the equi-join keys; `join_type` inner or left."""

    op = "asof_join"
    per_key: ClassVar[bool] = True

    inequality: Inequality
    left_time: str
    right_time: str

    def _fields_json(self) -> dict[str, Any]:
        return {**super()._fields_json(), "inequality": self.inequality, "left_time": self.left_time,
                "right_time": self.right_time}

    @classmethod
    def _own_fields(cls, d: dict[str, Any]) -> dict[str, Any]:
        return {"inequality": d["inequality"], "left_time": d["left_time"], "right_time": d["right_time"]}

    def linear_in(self, side: Side) -> bool:
        return side == "left"  # a left row's match depends on every right row of its key

    def prune(self, needed: set[str]) -> None:
        super().prune(needed | {self.left_time, self.right_time})

    @property
    def condition(self) -> str:
        """The inequality in internal names, for EXPLAIN."""
        return f"{self.left_time} {self.inequality} {self.right_time}"

    # --- A(L, R) in Arrow ------------------------------------------------------------------------
    def _join(self, left: pa.Table, right: pa.Table) -> pa.Table:
        """Each left row with its right row (NULLs for none, kept only by ASOF LEFT)."""
        li, ri = asof_match(left, right, self.left_keys + [self.left_time], self.right_keys + [self.right_time],
                            self.inequality, self.right.key)
        if self.join_type == "inner":
            keep = ri >= 0
            li, ri = li[keep], ri[keep]
        lt = left.take(pa.array(li, pa.int64()))
        rt = right.take(pa.array(ri, pa.int64(), mask=ri < 0))
        cols = {**{c: lt[c] for c in left.column_names}, **{c: rt[c] for c in right.column_names}}
        return pa.table({n: cols[n] for n in self.names})

    # --- A(L, R) in Spark ------------------------------------------------------------------------
    def _join_frames(self, left: DataFrame, right: DataFrame) -> DataFrame:
        cond = self._on(left, right) & _compare(left[f"`{self.left_time}`"], self.inequality,
                                                right[f"`{self.right_time}`"])
        pairs = left.join(right, cond, "inner" if self.join_type == "inner" else "left_outer")
        closest = q(self.right_time).desc() if self.inequality in (">", ">=") else q(self.right_time).asc()
        row = self.left.key or self.left.names  # what identifies a left row
        rank = Window.partitionBy(*[q(c) for c in row]).orderBy(
            closest, *[q(c).asc_nulls_last() for c in self.right.key])
        return pairs.withColumn("_asof_rank", F.row_number().over(rank)).where("_asof_rank = 1") \
            .select(*[q(n) for n in self.names])


def _compare(a: SparkColumn, op: Inequality, b: SparkColumn) -> SparkColumn:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def asof_match(left: pa.Table, right: pa.Table, lcols: list[str], rcols: list[str], op: Inequality,
               tiebreak: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """For each left row (its index), the index of its right row, -1 for none. `lcols`/`rcols`: the
    join keys then the time; `tiebreak`: the right columns whose smallest value wins a tie of times.

    The rows of both sides sorted together by (keys, time, side, tiebreak): with `>=`/`>` each left
    row's match is the last right row before it within its keys (a forward fill), with `<=`/`<` the
    first after it (a backward fill). At equal times a right row sorts on the side of the left row
    the fill reaches only if the inequality admits equality, and right rows of one time sort so that
    the fill meets the smallest tiebreak first."""
    n_l, n_r = left.num_rows, right.num_rows
    out = np.full(n_l, -1, dtype=np.int64)
    if n_l == 0 or n_r == 0:
        return np.arange(n_l, dtype=np.int64), out
    forward = op in (">", ">=")
    right_first = op in (">=", "<")  # at equal times: a forward fill must meet an admitted right row
    names = [f"_c{i}" for i in range(len(lcols))]
    rside = {n: right[c] for n, c in zip(names, rcols, strict=True)}
    lside = {n: left[c].cast(right[rc].type) for n, c, rc in zip(names, lcols, rcols, strict=True)}
    order = {"_side": (0, 1) if right_first else (1, 0)}  # (right's, left's)
    ties = [f"_t{i}" for i in range(len(tiebreak))]
    both = pa.concat_tables([
        pa.table({**rside, "_side": pa.array(np.full(n_r, order["_side"][0], np.int8)),
                  **_tiebreak_columns(right, tiebreak, ties, forward), "_row": pa.array(np.arange(n_r))}),
        pa.table({**lside, "_side": pa.array(np.full(n_l, order["_side"][1], np.int8)),
                  **_tiebreak_columns(right, tiebreak, ties, forward, rows=n_l), "_row": pa.array(np.arange(n_l))}),
    ])
    tie_order = "descending" if forward else "ascending"
    sort = [(n, "ascending", "at_end") for n in names] + [("_side", "ascending", "at_end")] + \
        [(c, tie_order, "at_end") for t in ties for c in (f"{t}n", t)]
    idx = pc.sort_indices(both, sort_keys=sort).to_numpy()
    both = both.take(idx)
    is_left = both["_side"].to_numpy() == order["_side"][1]
    valid = np.ones(len(idx), dtype=bool)
    for n in names:  # a NULL key or time matches nothing
        valid &= both[n].is_valid().to_numpy(zero_copy_only=False)
    group = _groups(both, names[:-1])
    pos = np.where(~is_left & valid, np.arange(len(idx)), -1 if forward else len(idx))
    fill = np.maximum.accumulate(pos) if forward else np.minimum.accumulate(pos[::-1])[::-1]
    found = (fill >= 0) & (fill < len(idx))
    hit = is_left & valid & found
    hit[hit] = group[fill[hit]] == group[hit]
    rows = both["_row"].to_numpy()
    out[rows[hit]] = rows[fill[hit]]
    return np.arange(n_l, dtype=np.int64), out


def _tiebreak_columns(right: pa.Table, tiebreak: list[str], names: list[str], forward: bool,
                      rows: int | None = None) -> dict[str, pa.Array]:
    """The right rows' tiebreak columns, each as (is NULL, value) so that NULL sorts last ascending
    (first descending) whatever `null_placement`; a left row's (`rows` of them) all NULL."""
    out: dict[str, pa.Array] = {}
    for name, col in zip(names, tiebreak, strict=True):
        values = right[col].combine_chunks() if rows is None else pa.nulls(rows, right[col].type)
        flag = pc.is_null(values) if rows is None else pa.nulls(rows, pa.bool_())
        out[f"{name}n"] = flag
        out[name] = values
    return {k: out[k] for name in names for k in (f"{name}n", name)}


def _groups(rows: pa.Table, keys: list[str]) -> np.ndarray:
    """A group number per row of `rows` (sorted by `keys`): equal keys, equal numbers."""
    n = rows.num_rows
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        col = rows[k].combine_chunks()
        diff = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        change[1:] |= pc.fill_null(diff, True).to_numpy(zero_copy_only=False)
    return np.cumsum(change)
