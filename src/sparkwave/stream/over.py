"""The window-function operator: `fn(...) OVER (PARTITION BY ... ORDER BY ... [frame])` for every
input row, with one state table (`w<id>`: the input's rows, keyed by partition then row key).

A window function's value on a row depends on the other rows of its partition, so per epoch, for
every partition the epoch touches, the outputs are recomputed from the partition's rows before and
after the epoch and the difference is emitted (as the join does per join key): exact for any
window function, its cost following the rows of the touched partitions. The state's partition is
the columns every call partitions by (none: one partition, so each change re-reads every row).

Both evaluations are Spark's window functions, over the same SQL: from a snapshot on the whole
input; per epoch on the touched partitions' rows before and after, tagged by a `_side` column that
every call's PARTITION BY starts with (0 from a snapshot). The planner makes each call
deterministic, as the difference needs: a row-order-sensitive call (row_number, lag, lead, a ROWS
frame, ...) orders ties by the row key."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.schema import Schema
from sparkwave.core.zset import W, apply_zset, distinct, net, with_weight
from sparkwave.stream.expressions import Expr, exprs_of, references
from sparkwave.stream.operator import EpochIO, Operator, SnapshotIO, States, state_schema
from sparkwave.stream.over_retire import Retire, retired
from sparkwave.stream.watermark_clean import Cleaning, cleaning_states, finish_cleaning

SIDE = "_side"  # which of the two row sets a per-epoch evaluation computes (0 before, 1 after)
_STATE = re.compile(r"w(\d+)")


@dataclass(kw_only=True)
class OverWindow(Operator):
    op = "over"
    keeps_state = True
    on_spark = False  # a big epoch runs it on the driver too

    input: Operator
    partition: list[str]  # the state's partition columns: every call's PARTITION BY has them
    calls: list[tuple[str, Expr]]  # (output column, Spark SQL `fn(...) OVER (PARTITION BY _side, ...)`)
    cleaning: Cleaning | None = None  # a watermarked partition column: its closed partitions' rows are deleted
    retire: Retire | None = None  # under EMIT ON WINDOW CLOSE: the emitted rows no later row reads are deleted

    def __post_init__(self) -> None:
        self.calls = exprs_of(self.calls)

    @property
    def inputs(self) -> list[Operator]:
        return [self.input]

    def _fields_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "calls": [list(c) for c in self.calls],
                **({"cleaning": self.cleaning.to_json()} if self.cleaning else {}),
                **({"retire": self.retire.to_json()} if self.retire else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> OverWindow:
        (child,) = inputs
        return OverWindow(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), input=child,
                          partition=list(d["partition"]), calls=exprs_of(d["calls"]),
                          cleaning=Cleaning.from_json(d.get("cleaning")), retire=Retire.from_json(d.get("retire")))

    def prune(self, needed: set[str]) -> None:
        keep = needed | set(self.key)
        self.calls = [(n, e) for n, e in self.calls if n in keep]
        outs = {n for n, _ in self.calls}
        self.input.prune({n for n in self.input.names if n in keep} | set(self.partition)
                         | references(*[e for _, e in self.calls]))
        self.columns = self.input.columns + [(n, t) for n, t in self.columns if n in outs]

    # --- state ---------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return f"w{self.id}"

    def state_tables(self) -> dict[str, Schema]:
        return {self.state: state_schema(self.input.columns, self.partition + self.input.key)}

    @classmethod
    def state_purpose(cls, suffix: str, key: tuple[str, ...]) -> str | None:
        if m := _STATE.fullmatch(suffix):
            return f"input of window functions {m.group(1)}, arranged by partition, then row key: ({', '.join(key)})"
        return None

    # --- per epoch -----------------------------------------------------------------------------
    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: a window's output reaches the MV through a projection"
        d = self.input.delta(io)
        states = cleaning_states(self, self.cleaning, io.states, io.watermarks)
        out = None
        if d is not None and d.num_rows:
            value = self.retire.watermark.value(io.watermarks) if self.retire else None
            out = self.apply(d, states, lambda rows: self._evaluate(io, rows), retire_below=value)
        finish_cleaning(states)
        return out if out is not None and out.num_rows else None

    def apply(self, d: pa.Table, states: States, evaluate: Callable[[pa.Table], pa.Table],
              retire_below: int | None = None) -> pa.Table:
        """The change of the outputs from the input's change `d`, against and staging the state;
        `evaluate` computes the calls over `| columns | _side |` rows; `retire_below`: the watermark
        below which `retire` deletes emitted rows (`stream/over_retire.py`)."""
        schema = self.input.arrow_schema()
        touched = distinct(d, self.partition)
        old = states.lookup(self.state, self.partition, touched).select(schema.names).cast(schema)
        new = apply_zset(old, d)
        both = pa.concat_tables([_tagged(old, 0), _tagged(new, 1)])
        if both.num_rows == 0:
            states.stage(self.state, d)
            return with_weight(self.arrow_schema().empty_table(), 1)
        rows = evaluate(both)
        if self.retire is not None and retire_below is not None:
            after = rows.filter(pc.equal(rows[SIDE], 1))
            gone = retired(after, self.retire, self.partition, self.input.key, retire_below)
            typed = with_weight(schema.empty_table(), 1).schema
            d = net(pa.concat_tables([d.select(typed.names).cast(typed), with_weight(gone.select(schema.names).cast(
                schema), -1)]))
        states.stage(self.state, d)
        weights = pc.if_else(pc.equal(rows[SIDE], 0), -1, 1).cast(pa.int64())
        out = rows.select(self.names).cast(self.arrow_schema()).append_column(W, weights)
        return net(out)

    def _evaluate(self, io: EpochIO, rows: pa.Table) -> pa.Table:
        df = io.spark.createDataFrame(rows.select([*self.input.names, SIDE]),
                                      schema=f"{self.input.spark_ddl()}, `{SIDE}` int")  # the backfill's types
        return self._calls(df, keep_side=True).toArrow()

    def _calls(self, df: DataFrame, *, keep_side: bool) -> DataFrame:
        return df.selectExpr(*[f"`{n}`" for n in self.input.names], *([f"`{SIDE}`"] if keep_side else []),
                             *[f"{e} AS `{n}`" for n, e in self.calls])

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        rows = io.once(self.input)
        io.state_rows[self.state] = rows
        return self._calls(rows.withColumn(SIDE, F.lit(0)), keep_side=False)


def _tagged(t: pa.Table, side: int) -> pa.Table:
    return t.append_column(SIDE, pa.repeat(pa.scalar(side, pa.int32()), t.num_rows))
