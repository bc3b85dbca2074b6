"""Constant rows: `VALUES (...), (...)` in FROM, a query that is only VALUES, or a SELECT without
FROM (one row of no columns). Spark evaluates them when the MV is built; they never change, so per
epoch this operator has no change and a join over it finds its rows in the side's state table.

Each row carries its ordinal (`key`), so that equal rows stay two rows of the MV."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from sparkwave.stream.expressions import Expr
from sparkwave.stream.operator import EpochIO, Operator, SnapshotIO


@dataclass(kw_only=True)
class Values(Operator):
    op = "values"

    rows: list[list[Expr]]  # per row, a Spark SQL constant per column, in column order

    def __post_init__(self) -> None:
        self.rows = _rows(self.rows)

    def upstreams(self) -> list[str]:
        return []

    def _fields_json(self) -> dict[str, Any]:
        return {"rows": self.rows}

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> Values:
        assert not inputs, "BUG: VALUES has no inputs"
        return Values(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), rows=_rows(d["rows"]))

    def prune(self, needed: set[str]) -> None:
        keep = [i for i, n in enumerate(self.names) if n in needed or n in self.key]
        self.columns = [self.columns[i] for i in keep]
        self.rows = [[r[i] for i in keep] for r in self.rows]

    def frame(self, io: EpochIO, keep: tuple[str, ...] = (), *, vnode: bool = False) -> DataFrame | None:
        return None

    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        return None

    def batch(self, io: SnapshotIO) -> DataFrame:
        rows = ", ".join("(" + ", ".join(r) + ")" for r in self.rows)
        return io.spark.sql(f"SELECT * FROM VALUES {rows} AS v({', '.join(f'`{n}`' for n in self.names)})")


def _rows(rows: Iterable[Sequence[str]]) -> list[list[Expr]]:
    return [[Expr.of_text(v) for v in r] for r in rows]
