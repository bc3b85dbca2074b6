"""Project-filter: a stateless executor that evaluates an MV's WHERE and SELECT on a chunk.

It keeps `_op` and `_seq`, so a -U whose +U no longer passes the filter becomes a plain delete once
the materialize step consolidates the chunk."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame


@dataclass(frozen=True)
class ProjectFilter:
    outputs: tuple[tuple[str, str], ...]  # (column name, Spark SQL expression)
    predicate: str | None

    def apply(self, chunk: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
        """`keep`: system columns carried through as well (a backfill keeps `_epoch`)."""
        if self.predicate:
            chunk = chunk.where(self.predicate)
        return chunk.selectExpr("_op", "_seq", *keep, *[f"{expr} AS `{name}`" for name, expr in self.outputs])

    def to_json(self) -> dict:
        return {"outputs": [list(o) for o in self.outputs], "predicate": self.predicate}

    @staticmethod
    def from_json(d: dict) -> ProjectFilter:
        return ProjectFilter(tuple((n, e) for n, e in d["outputs"]), d["predicate"])
