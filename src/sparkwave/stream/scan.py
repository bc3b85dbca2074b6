"""The scan: an upstream relation's change rows (per epoch) or snapshot (backfill), with an optional
TUMBLE/HOP window, the projections that name its columns and a pushed-down predicate, all evaluated
by Spark. It keeps no state.

Per epoch the log rows' ops become weights (+1 for +I and +U, -1 for -D and -U) in the same select
as the expressions, and the projections above the scan extend the same DataFrame (`Project.frame`):
the whole stateless chain is one Spark job, collected once. Over a source, the source's own read
computes the chain instead (`fused`, `stream/fusion.py`). A small change the driver holds is
evaluated in Arrow instead, window and all, where every expression compiles (`arrow_delta`,
`stream/arrow_chain.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.chunk import Op
from sparkwave.core.zset import W
from sparkwave.stream import arrow_chain
from sparkwave.stream.expressions import Expr, expr_or_none, exprs_of, references
from sparkwave.stream.operator import (
    EpochIO,
    Fused,
    Operator,
    SnapshotIO,
    exprs_json,
    select_items,
)

_WEIGHT = f"CAST(CASE WHEN _op IN ({int(Op.INSERT)}, {int(Op.UPDATE_INSERT)}) THEN 1 ELSE -1 END AS BIGINT) AS {W}"


@dataclass(frozen=True)
class Window:
    """TUMBLE(`size`) or HOP(`slide`, `size`) over the time column `time`, in seconds. A HOP row
    belongs to several windows, so `window_start` is part of a hopping scan's key."""

    kind: Literal["tumble", "hop"]
    time: str
    size: int
    slide: int | None = None  # hop

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "time": self.time, "size": self.size}
        if self.kind == "hop":
            d["slide"] = self.slide
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Window:
        return Window(d["kind"], d["time"], d["size"], d.get("slide"))

    def apply(self, rows: DataFrame) -> DataFrame:
        """`rows` with each row's `window_start` and `window_end` (one row per window for HOP)."""
        t = F.col(f"`{self.time}`")
        win = F.window(t, f"{self.size} seconds") if self.kind == "tumble" else \
            F.window(t, f"{self.size} seconds", f"{self.slide} seconds")
        return rows.select("*", win.getField("start").alias("window_start"), win.getField("end").alias("window_end"))


@dataclass(kw_only=True)
class Scan(Operator):
    op = "scan"

    relation: str
    exprs: list[tuple[str, Expr]]  # (column, Spark SQL over the upstream's columns)
    window: Window | None = None
    predicate: Expr | None = None  # over this scan's columns

    def __post_init__(self) -> None:  # text written by hand (tests, templates) is an `Expr` too
        self.exprs = exprs_of(self.exprs)
        self.predicate = expr_or_none(self.predicate)

    def upstreams(self) -> list[str]:
        return [self.relation]

    def _fields_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"relation": self.relation}
        if self.window is not None:
            d["window"] = self.window.to_json()
        return {**d, **exprs_json(self.exprs, self.predicate)}

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Scan:
        assert not inputs, "BUG: a scan has no inputs"
        return Scan(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), relation=d["relation"],
                    exprs=exprs_of(d.get("exprs", [])),
                    window=Window.from_json(d["window"]) if d.get("window") else None,
                    predicate=expr_or_none(d.get("predicate")))

    def prune(self, needed: set[str]) -> None:
        keep = needed | set(self.key) | references(self.predicate)
        self.exprs = [(n, e) for n, e in self.exprs if n in keep]
        self.columns = [(n, t) for n, t in self.columns if n in keep]

    def select(self, rows: DataFrame, extra: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame:
        """The window, the expressions (with the select items `extra`, and the key's `_vnode`) and the
        predicate over upstream rows."""
        if self.window is not None:
            rows = self.window.apply(rows)
        out = rows.selectExpr(*select_items(self.exprs, self.key, extra, vnode))
        return out.where(self.predicate) if self.predicate else out

    def frame(self, io: EpochIO, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame | None:
        rows = io.log(self.relation)
        return None if rows is None else self.select(rows, (_WEIGHT, *keep), vnode=vnode)

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        return self._collected(io, root)

    def arrow_delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        log = io.held_rows(self.relation)
        if log is None:
            return None
        return arrow_chain.evaluate(lambda: self._arrow(log, root))

    def _arrow(self, log: pa.Table, root: bool) -> pa.Table | None:
        rows = arrow_chain.scan_input(log)
        w = self.window
        if w is not None:
            rows = arrow_chain.window_rows(rows, w.time, w.size, w.slide if w.kind == "hop" else None)
        types = arrow_chain.input_types(rows.schema)
        step = arrow_chain.compiled(self.arrow_steps, tuple(types.items()), lambda: arrow_chain.compile_step(
            self.exprs, self.predicate, self.columns, types, self.key, filter_first=False))
        return None if step is None else arrow_chain.run_step(step, rows, root=root)

    def fused(self, rows: DataFrame, prefix: str, guard: str) -> Fused:
        """The scan inside the job that reads its upstream's log rows `rows`, for the rows where
        `guard` holds (`Fused`: its expressions, then its predicate over them)."""
        assert self.window is None, "BUG: a windowed scan (one row per window) is not fused"
        upstream = Fused(rows, {c: c for c in rows.columns}, guard)
        return upstream.computed(self.exprs, prefix).filtered(self.predicate, prefix)

    def batch(self, io: SnapshotIO) -> DataFrame:
        return self.select(io.snapshot(self.relation, self.id))
