"""The process-time temporal join, RisingWave's `s JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k =
t.k` (inner or LEFT): each change of the stream `s` is joined with the rows of table `t` as they are
when it arrives, a lookup by `t`'s primary key (the join's keys cover it, so a stream row meets at
most one table row). Later changes of `t` neither retract nor change what was emitted: `t`'s own
changes produce no output at all.

"When it arrives" is the epoch the stream row is processed in, and the lookup reads `t` as of the
previous committed epoch (what RisingWave's lookup reads: the table as the barrier before left it), so
a replayed epoch reads the same rows. A snapshot build joins the stream's snapshot with `t`'s at the
snapshot's epoch.

On an append-only stream the join keeps no state. Otherwise its state table (`tj<id>`: its output
rows keyed by the stream row's key) remembers what each stream row was joined to, so a delete or
an update of that row retracts exactly what was emitted for it, whatever `t` holds by then.

Three evaluations: `delta` (Arrow, a key lookup of the table's files), `delta_frame` (a big epoch: a Spark
join with the table's snapshot as of the previous epoch) and `batch` (the snapshots' join)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkwave.core.schema import Schema
from sparkwave.core.zset import W, net
from sparkwave.core.zset_frames import net_frame
from sparkwave.storage.lookup import lookup
from sparkwave.stream.expressions import column_ref
from sparkwave.stream.operator import EpochIO, FrameIO, Operator, SnapshotIO, state_schema
from sparkwave.stream.scan import Scan

_STATE = re.compile(r"tj(\d+)")
TemporalJoinType = Literal["inner", "left"]


@dataclass(kw_only=True)
class TemporalJoin(Operator):
    op = "temporal_join"
    keeps_state = True

    left: Operator  # the stream
    right: Scan  # the table's columns, as plain references (`table_columns`)
    join_type: TemporalJoinType
    left_keys: list[str]
    right_keys: list[str]
    append_only: bool  # the stream never retracts a row: no state

    def __post_init__(self) -> None:
        assert self.join_type in ("inner", "left"), f"BUG: temporal join type {self.join_type}"
        assert self.right.window is None and self.right.predicate is None, "BUG: a temporal join's table is filtered"

    @property
    def inputs(self) -> list[Operator]:
        return [self.left, self.right]

    @property
    def table(self) -> str:
        return self.right.relation

    def table_columns(self) -> dict[str, str]:
        """The table's column each of the right side's columns is."""
        out = {}
        for n, e in self.right.exprs:
            ref = column_ref(e)
            assert ref is not None, f"BUG: a temporal join's table column {n} is computed: {e}"
            out[n] = ref
        return out

    def _fields_json(self) -> dict[str, Any]:
        return {"join_type": self.join_type, "left_keys": self.left_keys, "right_keys": self.right_keys,
                "append_only": self.append_only}

    @classmethod
    def from_json(cls, d: dict[str, Any], inputs: list[Operator]) -> TemporalJoin:
        left, right = inputs
        assert isinstance(right, Scan), "BUG: a temporal join's table side is not a scan"
        return TemporalJoin(d["id"], [(n, t) for n, t in d["columns"]], list(d["key"]), left=left, right=right,
                            join_type=d["join_type"], left_keys=list(d["left_keys"]),
                            right_keys=list(d["right_keys"]), append_only=bool(d["append_only"]))

    def prune(self, needed: set[str]) -> None:
        keep = needed | set(self.key)
        self.left.prune({n for n in self.left.names if n in keep} | set(self.left_keys) | set(self.left.key))
        self.right.prune({n for n in self.right.names if n in keep} | set(self.right_keys) | set(self.right.key))
        self.columns = self.left.columns + self.right.columns

    # --- state ---------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return f"tj{self.id}"

    def state_tables(self) -> dict[str, Schema]:
        return {} if self.append_only else {self.state: state_schema(self.columns, list(self.key))}

    @classmethod
    def state_purpose(cls, suffix: str, key: tuple[str, ...]) -> str | None:
        if m := _STATE.fullmatch(suffix):
            return (f"what temporal join {m.group(1)} emitted for each stream row, by its key ({', '.join(key)}): a "
                    "delete of the row retracts it; cleaned by the row's delete")
        return None

    # --- per epoch -----------------------------------------------------------------------------
    def delta(self, io: EpochIO, *, root: bool = False) -> pa.Table | None:
        assert not root, "BUG: a temporal join's output reaches the MV through a projection"
        d = self.left.delta(io)  # the table's own changes emit nothing
        if d is None or d.num_rows == 0:
            return None
        # Not netted: an update of a stream row that leaves the columns the join reads as they were
        # (-1 and +1 of one row) is a new arrival all the same, looked up again, as RisingWave's U-/U+.
        d = d.select([*self.left.names, W])
        schema = self.arrow_schema(pa.field(W, pa.int64()))
        parts = []
        gone = d.filter(pc.less(d[W], 0))
        if not self.append_only and gone.num_rows:
            old = io.states.lookup(self.state, list(self.key), gone.select(list(self.key)))
            parts.append(old.select(self.names).append_column(W, pa.array([-1] * old.num_rows, pa.int64())))
        came = d.filter(pc.greater(d[W], 0))
        if came.num_rows:
            assert io.lookup_epoch is not None, "BUG: a temporal join stepped without the epoch its table is read at"
            parts.append(self._joined(io, came))
        if not parts:
            return None
        out = pa.concat_tables([p.select(schema.names).cast(schema) for p in parts])
        if not self.append_only:
            io.states.stage(self.state, out)
        out = net(out)
        return out if out.num_rows else None

    def _joined(self, io: EpochIO, rows: pa.Table) -> pa.Table:
        """`rows` (inserts) joined with the table's rows of their keys as of `io.lookup_epoch`."""
        rel = io.rt.relation(self.table)
        names = self.table_columns()
        keyed = rows
        for k in self.left_keys:
            keyed = keyed.filter(pc.is_valid(keyed[k]))  # a NULL key matches nothing
        pairs = {names[r]: lk for lk, r in zip(self.left_keys, self.right_keys, strict=True)}
        pk = list(rel.schema.key)
        target = rel.schema.arrow()
        keys = pa.table({c: keyed[pairs[c]].cast(target.field(c).type) for c in pk})
        found = lookup(io.rt.catalog, rel.name, rel.schema, io.lookup_epoch or 0, keys, pk) if keys.num_rows else \
            target.empty_table()
        right = pa.table({n: found[t] for n, t in names.items()}).cast(self.right.arrow_schema())
        left_side = rows.select([*self.left.names, W])
        joined = left_side.join(right, keys=self.left_keys, right_keys=self.right_keys,
                                join_type="inner" if self.join_type == "inner" else "left outer",
                                coalesce_keys=False, use_threads=False)
        return joined

    def delta_frame(self, io: FrameIO, *, root: bool = False) -> DataFrame | None:
        """`delta` for a big epoch, as Spark frames: the stream's change joined with the table's
        snapshot as of `prev`, the retracted rows' emitted rows read from the state's snapshot."""
        assert not root, "BUG: a temporal join's output reaches the MV through a projection"
        d = self.left.delta_frame(io)
        if d is None:
            return None
        d = io.shared(d.select(*[F.col(f"`{n}`") for n in self.left.names], W))  # read twice; not netted (`delta`)
        names = [F.col(f"`{n}`") for n in self.names]
        came = d.where(F.col(W) > 0).alias("l")
        rel = io.rt.relation(self.table)
        columns = self.table_columns().items()
        table = io.rt.snapshot(rel, io.prev).select(*[F.col(f"`{t}`").alias(n) for n, t in columns])
        on = None
        for lk, rk in zip(self.left_keys, self.right_keys, strict=True):
            term = F.col(f"l.`{lk}`") == F.col(f"r.`{rk}`")
            on = term if on is None else on & term
        out = came.join(table.alias("r"), on, "inner" if self.join_type == "inner" else "left") \
            .select(*[F.col(f"l.`{n}`") for n in self.left.names], *[F.col(f"r.`{n}`") for n in self.right.names],
                    F.col(f"l.`{W}`"))
        if not self.append_only:
            gone = d.where(F.col(W) < 0).select(*[F.col(f"`{k}`").alias(f"_g{i}") for i, k in enumerate(self.key)])
            held = io.state_rows(self.state)
            match = None
            for i, k in enumerate(self.key):
                term = held[f"`{k}`"].eqNullSafe(gone[f"_g{i}"])
                match = term if match is None else match & term
            old = held.join(gone, match, "left_semi").select(*names, F.lit(-1).cast("bigint").alias(W))
            out = out.unionByName(old)
            out = io.shared(out)
            io.stage_frame(self.state, out)
        return net_frame(out)

    # --- from a snapshot -----------------------------------------------------------------------
    def batch(self, io: SnapshotIO) -> DataFrame:
        left = self.left.batch(io).alias("l")
        right = self.right.batch(io).alias("r")
        on = None
        for lk, rk in zip(self.left_keys, self.right_keys, strict=True):
            term = F.col(f"l.`{lk}`") == F.col(f"r.`{rk}`")
            on = term if on is None else on & term
        out = left.join(right, on, "inner" if self.join_type == "inner" else "left") \
            .select(*[F.col(f"l.`{n}`") for n in self.left.names], *[F.col(f"r.`{n}`") for n in self.right.names])
        if not self.append_only:
            out = io.shared(out)
            io.state_rows[self.state] = out
        return out
